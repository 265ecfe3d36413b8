"""nisa calls that record a KLR operator of their own (frontend/emit.py writes it, the codegen lowers it):
small kernels of both API generations, traced, translated and run in the interpreter against numpy."""

from __future__ import annotations

import textwrap

import numpy as np

from tusk.frontend import trace_file
from tusk.frontend.check import run_klr

V2 = "import numpy as np\nimport nki\nimport nki.isa as nisa\nimport nki.language as nl\n"
V1 = ("import numpy as np\nimport neuronxcc.nki as nki\nimport neuronxcc.nki.isa as nisa\n"
      "import neuronxcc.nki.language as nl\n")
RNG = np.random.default_rng(22)


def run(tmp_path, header: str, body: str, inputs: dict[str, np.ndarray], name: str = "k.py"
        ) -> dict[str, np.ndarray]:
    path = tmp_path / name
    path.write_text(header + textwrap.dedent(body))
    specs = [f"f32[{','.join(map(str, a.shape))}]" for a in inputs.values()]
    return run_klr(trace_file(path, "k", specs), inputs)


def rand(*shape: int, lo: float = -2.0, hi: float = 2.0) -> np.ndarray:
    return RNG.uniform(lo, hi, size=shape).astype(np.float32)


def test_v2_bn_stats_and_bn_aggr_give_mean_and_variance_over_two_chunks(tmp_path):
    a = rand(64, 1024)
    got = run(tmp_path, V2, """
        @nki.jit
        def k(a):
            out = nl.ndarray((64, 2), dtype=nl.float32, buffer=nl.shared_hbm)
            t = nl.ndarray((64, 1024), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=a)
            stats = nl.ndarray((64, 12), dtype=nl.float32, buffer=nl.sbuf)
            nisa.bn_stats(stats[:, 0:6], t[:, 0:512])
            nisa.bn_stats(dst=stats[:, 6:12], data=t[:, 512:1024])
            mv = nl.ndarray((64, 2), dtype=nl.float32, buffer=nl.sbuf)
            nisa.bn_aggr(mv, stats)
            nisa.dma_copy(dst=out, src=mv)
            return out
    """, {"a": a})["out"]
    np.testing.assert_allclose(got[:, 0], a.mean(axis=1), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got[:, 1], a.var(axis=1), rtol=1e-4)


def test_v1_bn_stats_bn_aggr_and_tensor_partition_reduce(tmp_path):
    a = rand(32, 100)
    res = run(tmp_path, V1, """
        @nki.jit
        def k(a):
            mv = nl.ndarray((32, 2), dtype=nl.float32, buffer=nl.shared_hbm)
            cs = nl.ndarray((1, 100), dtype=nl.float32, buffer=nl.shared_hbm)
            x = nl.load(a)
            nl.store(mv, value=nisa.bn_aggr(nisa.bn_stats(x)))
            nl.store(cs, value=nisa.tensor_partition_reduce(np.add, x))
            return mv, cs
    """, {"a": a})
    np.testing.assert_allclose(res["mv"][:, 0], a.mean(axis=1), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(res["mv"][:, 1], a.var(axis=1), rtol=1e-4)
    np.testing.assert_allclose(res["cs"][0], a.sum(axis=0), rtol=1e-5, atol=1e-5)


def test_v2_affine_select_makes_a_causal_mask(tmp_path):
    a = rand(64, 64)
    got = run(tmp_path, V2, """
        @nki.jit
        def k(a):
            out = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.shared_hbm)
            t = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=a)
            y = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.sbuf)
            nisa.affine_select(y, [[-1, 64]], 1, t, -9984.0, cmp_op=nl.greater_equal)
            nisa.dma_copy(dst=out, src=y)
            return out
    """, {"a": a})["out"]
    p, f = np.meshgrid(np.arange(64), np.arange(64), indexing="ij")
    assert np.array_equal(got, np.where(p - f >= 0, a, np.float32(-9984.0)))


def test_v1_affine_select_of_an_index_comparison_and_select_reduce_with_a_column(tmp_path):
    a, m, f = rand(128, 96), (rand(128, 96) > 0).astype(np.float32), rand(128, 1)
    res = run(tmp_path, V1, """
        @nki.jit
        def k(a, m, f):
            tri = nl.ndarray((128, 96), dtype=nl.float32, buffer=nl.shared_hbm)
            sel = nl.ndarray((128, 96), dtype=nl.float32, buffer=nl.shared_hbm)
            ix, iy = nl.mgrid[0:128, 0:96]
            x = nl.load(a[ix, iy])
            nl.store(tri[ix, iy], nisa.affine_select(pred=(iy < ix), on_true_tile=x[ix, iy], on_false_value=-1e30))
            y = nl.ndarray((128, 96), dtype=nl.float32, buffer=nl.sbuf)
            nisa.select_reduce(dst=y, predicate=nl.load(m), on_true=x, on_false=nl.load(f))
            nl.store(sel, value=y)
            return tri, sel
    """, {"a": a, "m": m, "f": f})
    p, q = np.meshgrid(np.arange(128), np.arange(96), indexing="ij")
    assert np.array_equal(res["tri"], np.where(q < p, a, np.float32(-1e30)))
    assert np.array_equal(res["sel"], np.where(m != 0, a, f))


def test_v2_select_reduce_copy_predicated_and_range_select(tmp_path):
    a, m = rand(32, 16), (rand(32, 16) > 0).astype(np.float32)
    lo, hi = np.full((32, 1), 3.0, np.float32), np.full((32, 1), 11.0, np.float32)
    res = run(tmp_path, V2, """
        @nki.jit
        def k(a, m, lo, hi):
            sel = nl.ndarray((32, 16), dtype=nl.float32, buffer=nl.shared_hbm)
            mx = nl.ndarray((32, 1), dtype=nl.float32, buffer=nl.shared_hbm)
            cp = nl.ndarray((32, 16), dtype=nl.float32, buffer=nl.shared_hbm)
            rs = nl.ndarray((32, 16), dtype=nl.float32, buffer=nl.shared_hbm)
            x = nl.ndarray((32, 16), dtype=nl.float32, buffer=nl.sbuf)
            p = nl.ndarray((32, 16), dtype=nl.float32, buffer=nl.sbuf)
            b0 = nl.ndarray((32, 1), dtype=nl.float32, buffer=nl.sbuf)
            b1 = nl.ndarray((32, 1), dtype=nl.float32, buffer=nl.sbuf)
            for d, s in ((x, a), (p, m), (b0, lo), (b1, hi)):
                nisa.dma_copy(dst=d, src=s)
            y = nl.ndarray((32, 16), dtype=nl.float32, buffer=nl.sbuf)
            r = nl.ndarray((32, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.select_reduce(y, p, x, -5.0, reduce_res=r, reduce_cmd=nisa.reduce_cmd.reset_reduce)
            nisa.dma_copy(dst=sel, src=y)
            nisa.dma_copy(dst=mx, src=r)
            z = nl.ndarray((32, 16), dtype=nl.float32, buffer=nl.sbuf)
            nisa.memset(z, 7.0)
            nisa.tensor_copy_predicated(z, x, p, reverse_pred=True)
            nisa.dma_copy(dst=cp, src=z)
            w = nl.ndarray((32, 16), dtype=nl.float32, buffer=nl.sbuf)
            nisa.range_select(w, x, nl.greater_equal, nl.less, b0, b1, on_false_value=-1.0)
            nisa.dma_copy(dst=rs, src=w)
            return sel, mx, cp, rs
    """, {"a": a, "m": m, "lo": lo, "hi": hi})
    sel = np.where(m != 0, a, np.float32(-5.0))
    assert np.array_equal(res["sel"], sel)
    assert np.array_equal(res["mx"][:, 0], sel.max(axis=1))
    assert np.array_equal(res["cp"], np.where(m == 0, a, np.float32(7.0)))
    f = np.arange(16)[None, :]
    assert np.array_equal(res["rs"], np.where((f >= 3) & (f < 11), a, np.float32(-1.0)))


def test_max8_find_index8_and_match_replace8_both_generations(tmp_path):
    a = rand(16, 40)
    v2 = run(tmp_path, V2, """
        @nki.jit
        def k(a):
            top = nl.ndarray((16, 8), dtype=nl.float32, buffer=nl.shared_hbm)
            idx = nl.ndarray((16, 8), dtype=nl.float32, buffer=nl.shared_hbm)
            rep = nl.ndarray((16, 40), dtype=nl.float32, buffer=nl.shared_hbm)
            x = nl.ndarray((16, 40), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=x, src=a)
            t = nl.ndarray((16, 8), dtype=nl.float32, buffer=nl.sbuf)
            nisa.max8(dst=t, src=x)
            i = nl.ndarray((16, 8), dtype=nl.uint32, buffer=nl.sbuf)
            nisa.nc_find_index8(i, x, t)
            fi = nl.ndarray((16, 8), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(fi, i)
            r = nl.ndarray((16, 40), dtype=nl.float32, buffer=nl.sbuf)
            nisa.nc_match_replace8(r, x, t, 0.0)
            for d, s in ((top, t), (idx, fi), (rep, r)):
                nisa.dma_copy(dst=d, src=s)
            return top, idx, rep
    """, {"a": a})
    order = np.argsort(-a, axis=1, kind="stable")[:, :8]
    assert np.array_equal(v2["top"], np.take_along_axis(a, order, axis=1))
    assert np.array_equal(v2["idx"], order.astype(np.float32))
    rep = a.copy()
    np.put_along_axis(rep, order, 0.0, axis=1)
    assert np.array_equal(v2["rep"], rep)
    v1 = run(tmp_path, V1, """
        @nki.jit
        def k(a):
            top = nl.ndarray((16, 8), dtype=nl.float32, buffer=nl.shared_hbm)
            rep = nl.ndarray((16, 40), dtype=nl.float32, buffer=nl.shared_hbm)
            x = nl.load(a)
            t = nisa.max8(src=x)
            nl.store(top, value=t)
            nl.store(rep, value=nisa.nc_match_replace8(data=x, vals=t, imm=0.0))
            return top, rep
    """, {"a": a}, name="k1.py")
    assert np.array_equal(v1["top"], v2["top"]) and np.array_equal(v1["rep"], rep)


def test_tensor_scalar_cumulative_sums_a_scaled_row(tmp_path):
    a = rand(8, 12)
    got = run(tmp_path, V2, """
        @nki.jit
        def k(a):
            out = nl.ndarray((8, 12), dtype=nl.float32, buffer=nl.shared_hbm)
            x = nl.ndarray((8, 12), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=x, src=a)
            y = nl.ndarray((8, 12), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_scalar_cumulative(y, x, nl.multiply, nl.add, 2.0)
            nisa.dma_copy(dst=out, src=y)
            return out
    """, {"a": a})["out"]
    np.testing.assert_allclose(got, np.cumsum(2 * a, axis=1, dtype=np.float32), rtol=1e-5, atol=1e-6)


def test_dropout_and_rand2_are_deterministic_and_in_range(tmp_path):
    a = rand(64, 64, lo=1.0, hi=2.0)
    body = """
        @nki.jit
        def k(a):
            out = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.shared_hbm)
            u = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.shared_hbm)
            x = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=x, src=a)
            y = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dropout(y, x, 0.25)
            r = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.sbuf)
            nisa.rand2(r, -1.0, 3.0)
            nisa.dma_copy(dst=out, src=y)
            nisa.dma_copy(dst=u, src=r)
            return out, u
    """
    one, two = run(tmp_path, V2, body, {"a": a}), run(tmp_path, V2, body, {"a": a})
    y, u = one["out"], one["u"]
    assert np.array_equal(y, two["out"]) and np.array_equal(u, two["u"])
    dropped = y == 0
    assert np.all(dropped | np.isclose(y, a) | np.isclose(y, a / 0.75))  # kept values (scaled or not)
    assert 0.15 < dropped.mean() < 0.35
    assert u.min() >= -1.0 and u.max() <= 3.0 and u.std() > 0.5


def test_dma_transpose_of_an_hbm_source_both_generations(tmp_path):
    a = rand(32, 64)
    v2 = run(tmp_path, V2, """
        @nki.jit
        def k(a):
            out = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.shared_hbm)
            t = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_transpose(t, a)
            nisa.dma_copy(dst=out, src=t)
            return out
    """, {"a": a})["out"]
    v1 = run(tmp_path, V1, """
        @nki.jit
        def k(a):
            out = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.shared_hbm)
            nl.store(out, value=nisa.dma_transpose(a, axes=(1, 0)))
            return out
    """, {"a": a}, name="k1.py")["out"]
    assert np.array_equal(v2, a.T) and np.array_equal(v1, a.T)


def test_dma_transpose_of_an_sbuf_source(tmp_path):
    a = rand(16, 96)
    got = run(tmp_path, V2, """
        @nki.jit
        def k(a):
            out = nl.ndarray((96, 16), dtype=nl.float32, buffer=nl.shared_hbm)
            t = nl.ndarray((16, 96), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=a)
            u = nl.ndarray((96, 16), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_transpose(dst=u, src=t, axes=(1, 0))
            nisa.dma_copy(dst=out, src=u)
            return out
    """, {"a": a})["out"]
    assert np.array_equal(got, a.T)


def test_local_gather_per_16_partition_group_v1_and_v2(tmp_path):
    """Each group of 16 partitions gathers num_elem_per_idx contiguous elements at each of its indices,
    the indices read partition-major (the NKI docs' numpy semantics)."""
    src = rand(32, 64)
    per_group = RNG.integers(0, 16, size=(16, 2))
    index = np.tile(per_group, (2, 1)) * 4
    inputs = {"src": src, "index": index.astype(np.uint16)}
    specs = ["f32[32,64]", "u16[32,2]"]
    body = """
        @nki.jit
        def k(src, index):
            out = nl.ndarray((32, 32, 4), dtype=nl.float32, buffer=nl.shared_hbm)
            s = nl.ndarray((32, 64), dtype=nl.float32, buffer=nl.sbuf)
            i = nl.ndarray((32, 2), dtype=nl.uint16, buffer=nl.sbuf)
            nisa.dma_copy(dst=s, src=src)
            nisa.dma_copy(dst=i, src=index)
            g = nl.ndarray((32, 32, 4), dtype=nl.float32, buffer=nl.sbuf)
            nisa.local_gather(g, s, i, num_elem_per_idx=4)
            nisa.dma_copy(dst=out, src=g)
            return out
    """
    path = tmp_path / "k.py"
    path.write_text(V2 + textwrap.dedent(body))
    got = run_klr(trace_file(path, "k", specs), inputs)["out"]
    want = np.empty((32, 32, 4), np.float32)
    for g in range(2):
        rows = slice(16 * g, 16 * g + 16)
        flat = index[rows].flatten(order="F")
        for j, ix in enumerate(flat):
            want[rows, j, :] = src[rows, ix:ix + 4]
    assert np.array_equal(got, want)
    path1 = tmp_path / "k1.py"
    path1.write_text(V1 + textwrap.dedent("""
        @nki.jit
        def k(src, index):
            out = nl.ndarray((32, 32, 4), dtype=nl.float32, buffer=nl.shared_hbm)
            nl.store(out, value=nisa.local_gather(nl.load(src), nl.load(index), 4))
            return out
    """))
    assert np.array_equal(run_klr(trace_file(path1, "k", specs), inputs)["out"], want)


def test_sequence_bounds_of_padded_segments(tmp_path):
    ids = np.array([[0, 1, 1, 2, 2, 2, 0, 3, 3, 3, 3, 0]], np.float32)
    got = run(tmp_path, V2, """
        @nki.jit
        def k(ids):
            out = nl.ndarray((1, 2, 12), dtype=nl.float32, buffer=nl.shared_hbm)
            s = nl.ndarray((1, 12), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=s, src=ids)
            b = nl.ndarray((1, 2, 12), dtype=nl.float32, buffer=nl.sbuf)
            nisa.sequence_bounds(b, s)
            nisa.dma_copy(dst=out, src=b)
            return out
    """, {"ids": ids})["out"]
    starts = [12, 1, 1, 3, 3, 3, 12, 7, 7, 7, 7, 12]
    ends = [-1, 3, 3, 6, 6, 6, -1, 11, 11, 11, 11, -1]
    assert np.array_equal(got, np.array([[starts, ends]], np.float32))


def test_registers_move_load_and_store_values(tmp_path):
    a = np.array([[42.0]], np.float32)
    got = run(tmp_path, V2, """
        @nki.jit
        def k(a):
            out = nl.ndarray((1, 3), dtype=nl.float32, buffer=nl.shared_hbm)
            t = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=a)
            r = nisa.register_alloc(7)
            s = nisa.register_alloc()
            nisa.register_load(s, t)
            q = nisa.register_alloc(None)
            nisa.register_move(q, s)
            res = nl.ndarray((1, 3), dtype=nl.int32, buffer=nl.sbuf)
            nisa.register_store(res[:, 0:1], r)
            nisa.register_store(res[:, 1:2], q)
            nisa.register_move(r, -3)
            nisa.register_store(res[:, 2:3], r)
            f = nl.ndarray((1, 3), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(f, res)
            nisa.dma_copy(dst=out, src=f)
            return out
    """, {"a": a})["out"]
    assert np.array_equal(got, np.array([[7.0, 42.0, -3.0]], np.float32))


def test_v1_forms_of_the_remaining_operators(tmp_path):
    a, m = rand(32, 16), (rand(32, 16) > 0).astype(np.float32)
    lo, hi = np.full((32, 1), 2.0, np.float32), np.full((32, 1), 9.0, np.float32)
    ids = np.array([[0, 4, 4, 5, 0, 6, 6, 6]], np.float32)
    res = run(tmp_path, V1, """
        @nki.jit
        def k(a, m, lo, hi, ids):
            assert nisa.get_nc_version() >= nisa.nc_version.gen2
            idx = nl.ndarray((32, 8), dtype=nl.float32, buffer=nl.shared_hbm)
            rs = nl.ndarray((32, 16), dtype=nl.float32, buffer=nl.shared_hbm)
            cp = nl.ndarray((32, 16), dtype=nl.float32, buffer=nl.shared_hbm)
            kept = nl.ndarray((32, 16), dtype=nl.float32, buffer=nl.shared_hbm)
            sb = nl.ndarray((1, 2, 8), dtype=nl.float32, buffer=nl.shared_hbm)
            x, p = nl.load(a), nl.load(m)
            top = nisa.max8(src=x)
            nl.store(idx, value=nisa.tensor_copy(nisa.nc_find_index8(data=x, vals=top), dtype=nl.float32))
            nl.store(rs, value=nisa.range_select(on_true_tile=x, comp_op0=nl.greater_equal, comp_op1=nl.less,
                                                 bound0=nl.load(lo), bound1=nl.load(hi), on_false_value=0.0))
            z = nisa.memset((32, 16), 5.0, nl.float32)
            nisa.tensor_copy_predicated(src=x, dst=z, predicate=p)
            nl.store(cp, value=z)
            nl.store(kept, value=nisa.dropout(x, 0.0))
            nl.store(sb, value=nisa.sequence_bounds(segment_ids=nl.load(ids)))
            return idx, rs, cp, kept, sb
    """, {"a": a, "m": m, "lo": lo, "hi": hi, "ids": ids})
    assert np.array_equal(res["idx"], np.argsort(-a, axis=1, kind="stable")[:, :8].astype(np.float32))
    f = np.arange(16)[None, :]
    assert np.array_equal(res["rs"], np.where((f >= 2) & (f < 9), a, np.float32(0.0)))
    assert np.array_equal(res["cp"], np.where(m != 0, a, np.float32(5.0)))
    assert np.array_equal(res["kept"], a)  # a drop rate of 0 keeps every element
    assert np.array_equal(res["sb"], np.array([[[8, 1, 1, 3, 8, 5, 5, 5], [-1, 3, 3, 4, -1, 8, 8, 8]]],
                                              np.float32))


def test_v2_tensor_partition_reduce_and_seeded_rng(tmp_path):
    a = rand(64, 20)
    body = """
        @nki.jit
        def k(a):
            cs = nl.ndarray((1, 20), dtype=nl.float32, buffer=nl.shared_hbm)
            bits = nl.ndarray((16, 8), dtype=nl.float32, buffer=nl.shared_hbm)
            x = nl.ndarray((64, 20), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=x, src=a)
            c = nl.ndarray((1, 20), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_partition_reduce(c, np.maximum, x)
            nisa.dma_copy(dst=cs, src=c)
            seeds = nl.ndarray((16, 1), dtype=nl.uint32, buffer=nl.sbuf)
            nisa.iota(seeds, [[1, 1]], offset=SEED, channel_multiplier=1)
            nisa.set_rng_seed(seeds)
            r = nl.ndarray((16, 8), dtype=nl.uint32, buffer=nl.sbuf)
            nisa.rng(r)
            f = nl.ndarray((16, 8), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(f, r)
            nisa.dma_copy(dst=bits, src=f)
            return cs, bits
    """
    one = run(tmp_path, V2, body.replace("SEED", "1"), {"a": a}, name="s1.py")
    again = run(tmp_path, V2, body.replace("SEED", "1"), {"a": a}, name="s1b.py")
    other = run(tmp_path, V2, body.replace("SEED", "7"), {"a": a}, name="s7.py")
    assert np.array_equal(one["cs"][0], a.max(axis=0))
    assert np.array_equal(one["bits"], again["bits"]) and not np.array_equal(one["bits"], other["bits"])
    assert len(np.unique(one["bits"])) > 64  # draws, not a constant


def test_every_supported_call_of_both_generations_has_a_kernel_in_the_tests():
    """The rule: each documented nisa call is traced and run against numpy in one of these test files."""
    import re
    from pathlib import Path

    from tusk.frontend.nki import isa_v1, isa_v2
    from tusk.frontend.nki.isa_signature import public_calls

    here = Path(__file__).parent
    v1 = "".join((here / f).read_text() for f in ("test_frontend_isa_v1.py", "test_frontend_isa_native.py"))
    v2 = "".join((here / f).read_text() for f in ("test_frontend_isa_v2.py", "test_frontend_isa_native.py",
                                                  "test_isa_mx.py", "test_frontend_isa_dma_forms.py",
                                                  "test_frontend_phases.py"))
    for name in public_calls(isa_v1):
        assert re.search(rf"nisa\.{name}\(", v1), f"1.x nisa.{name} has no test kernel"
    for name in public_calls(isa_v2):
        assert re.search(rf"nisa\.{name}\(", v2), f"2.x nisa.{name} has no test kernel"


def test_v2_nc_n_gather_within_each_partition(tmp_path):
    a = rand(16, 4, 8)
    idx = RNG.integers(0, 32, size=(16, 10))
    path = tmp_path / "k.py"
    path.write_text(V2 + textwrap.dedent("""
        @nki.jit
        def k(a, idx):
            out = nl.ndarray((16, 10), dtype=nl.float32, buffer=nl.shared_hbm)
            x = nl.ndarray((16, 4, 8), dtype=nl.float32, buffer=nl.sbuf)
            i = nl.ndarray((16, 10), dtype=nl.uint32, buffer=nl.sbuf)
            nisa.dma_copy(dst=x, src=a)
            nisa.dma_copy(dst=i, src=idx)
            g = nl.ndarray((16, 10), dtype=nl.float32, buffer=nl.sbuf)
            nisa.nc_n_gather(g, x, i)
            nisa.dma_copy(dst=out, src=g)
            return out
    """))
    got = run_klr(trace_file(path, "k", ["f32[16,4,8]", "u32[16,10]"]), {"a": a, "idx": idx.astype(np.uint32)})
    assert np.array_equal(got["out"], np.take_along_axis(a.reshape(16, 32), idx, axis=1))
