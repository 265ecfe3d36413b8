"""nl entries of both NKI generations: each traced from a small kernel written here, translated, run in the
interpreter and compared with numpy (exactly where the lowering is exact)."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

from tusk.frontend import TraceError, trace_file
from tusk.frontend.check import run_klr

HEADER = """\
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa
"""


def run(tmp_path, body: str, specs: list[str], inputs: dict[str, np.ndarray], fn: str = "k") -> dict:
    path = tmp_path / "k.py"
    path.write_text(HEADER + textwrap.dedent(body))
    return run_klr(trace_file(path, fn, specs), inputs)


def refused(tmp_path, body: str, specs: list[str], fn: str = "k") -> str:
    path = tmp_path / "k.py"
    path.write_text(HEADER + textwrap.dedent(body))
    with pytest.raises(TraceError) as e:
        trace_file(path, fn, specs)
    return str(e.value)


RNG = np.random.default_rng(7)


def rand(*shape, lo=-4.0, hi=4.0) -> np.ndarray:
    return RNG.uniform(lo, hi, size=shape).astype(np.float32)


def test_ds_slices_with_loop_index_starts(tmp_path):
    out = run(tmp_path, """
        @nki.jit
        def k(a):
            out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            for i in nl.affine_range(a.shape[0] // 128):
                for j in nl.affine_range(a.shape[1] // 32):
                    t = nl.load(a[nl.ds(i * 128, 128), nl.ds(j * 32, 32)])
                    nl.store(out[nl.ds(i * 128, 128), nl.ds(j * 32, 32)], value=nl.multiply(t, 2.0))
            return out
    """, ["f32[256,96]"], {"a": (a := rand(256, 96))})
    assert np.array_equal(out["out"], a * 2)


def test_ds_outside_the_tensor_is_refused_at_its_line(tmp_path):
    msg = refused(tmp_path, """
        @nki.jit
        def k(a):
            out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            for i in nl.affine_range(3):
                t = nl.load(a[nl.ds(i * 128, 128), :])
                nl.store(out[nl.ds(0, 128), :], value=t)
            return out
    """, ["f32[256,8]"])
    assert "k.py:10" in msg and "outside axis 0" in msg


def test_rounding_and_remainders_match_numpy_exactly(tmp_path):
    out = run(tmp_path, """
        @nki.jit
        def k(a):
            fl = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            ce = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            tr = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            md = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            fm = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            x = nl.load(a)
            nl.store(fl, nl.floor(x))
            nl.store(ce, nl.ceil(x))
            nl.store(tr, nl.trunc(x))
            nl.store(md, nl.mod(x, 1.5))
            nl.store(fm, nl.fmod(x, 1.5))
            return fl, ce, tr, md, fm
    """, ["f32[128,64]"], {"a": (a := np.concatenate([rand(128, 60), np.full((128, 4), -1e-10, np.float32)], 1))})
    assert np.array_equal(out["fl"], np.floor(a)) and np.array_equal(out["ce"], np.ceil(a))
    assert np.array_equal(out["tr"], np.trunc(a))
    assert np.array_equal(out["md"], np.mod(a, np.float32(1.5)))
    assert np.array_equal(out["fm"], np.fmod(a, np.float32(1.5)))


def test_bitwise_and_shift_ops_on_integer_tiles(tmp_path):
    out = run(tmp_path, """
        @nki.jit
        def k(a, b):
            o1 = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            o2 = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            o3 = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            o4 = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            o5 = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            o6 = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            x = nl.load(a)
            y = nl.load(b)
            nl.store(o1, nl.bitwise_and(x, y))
            nl.store(o2, nl.bitwise_or(x, 6))
            nl.store(o3, nl.bitwise_xor(x, y))
            nl.store(o4, nl.left_shift(x, 3))
            nl.store(o5, nl.right_shift(x, 2))
            nl.store(o6, nl.invert(x))
            return o1, o2, o3, o4, o5, o6
    """, ["i32[128,16]", "i32[128,16]"], {"a": (a := RNG.integers(-1000, 1000, (128, 16)).astype(np.int32)),
                                         "b": (b := RNG.integers(-1000, 1000, (128, 16)).astype(np.int32))})
    assert np.array_equal(out["o1"], a & b) and np.array_equal(out["o2"], a | 6)
    assert np.array_equal(out["o3"], a ^ b) and np.array_equal(out["o4"], a << 3)
    assert np.array_equal(out["o5"], a >> 2) and np.array_equal(out["o6"], ~a)


def test_shifts_by_a_tile_of_counts_shift_each_element_by_its_own(tmp_path):
    out = run(tmp_path, """
        @nki.jit
        def k(a, b, c):
            o1 = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            o2 = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            o3 = nl.ndarray(a.shape, dtype=nl.uint32, buffer=nl.shared_hbm)
            x, s, col = nl.load(a), nl.load(b), nl.load(c)
            nl.store(o1, nl.left_shift(x, col))
            nl.store(o2, nl.right_shift(x, s))
            nl.store(o3, nl.right_shift(nl.copy(x, dtype=nl.uint32), s))
            return o1, o2, o3
    """, ["i32[128,16]", "i32[128,16]", "i32[128,1]"],
        {"a": (a := RNG.integers(-1000, 1000, (128, 16)).astype(np.int32)),
         "b": (b := RNG.integers(0, 12, (128, 16)).astype(np.int32)),
         "c": (c := RNG.integers(0, 12, (128, 1)).astype(np.int32))})
    assert np.array_equal(out["o1"], a << c) and np.array_equal(out["o2"], a >> b)
    assert np.array_equal(out["o3"], a.astype(np.uint32) >> b.astype(np.uint32))


def test_bitwise_ops_of_float_tiles_are_refused(tmp_path):
    msg = refused(tmp_path, """
        @nki.jit
        def k(a):
            x = nl.load(a)
            y = nl.bitwise_and(x, 3)
            nl.store(a, y)
    """, ["f32[128,16]"])
    assert "k.py:9" in msg and "nl.bitwise_and of a float32 tile" in msg


def test_logical_ops_and_abs_max(tmp_path):
    a, b = rand(128, 32), rand(128, 32)
    b[:4] = -a[:4]  # ties of magnitude: abs_max and abs_min give the second input
    out = run(tmp_path, """
        @nki.jit
        def k(a, b):
            o1 = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            o2 = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            o3 = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            o4 = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            o5 = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            x = nl.load(a)
            y = nl.load(b)
            nl.store(o1, nl.logical_and(nl.greater(x, 0.0), nl.less(y, 0.0)))
            nl.store(o2, nl.logical_not(nl.greater(x, 0.0)))
            nl.store(o3, nl.abs_max(x, y))
            nl.store(o4, nl.abs_min(x, y[:, 0:1]))
            nl.store(o5, nl.abs_max(x, -1.5))
            return o1, o2, o3, o4, o5
    """, ["f32[128,32]", "f32[128,32]"], {"a": a, "b": b})
    assert np.array_equal(out["o1"], ((a > 0) & (b < 0)).astype(np.float32))
    assert np.array_equal(out["o2"], (a <= 0).astype(np.float32))
    # the input of larger (smaller) magnitude with its own sign, the second on a tie (the NKI reference)
    assert np.array_equal(out["o3"], np.where(np.abs(a) > np.abs(b), a, b))
    col = b[:, 0:1]
    assert np.array_equal(out["o4"], np.where(np.abs(a) < np.abs(col), a, col))
    assert np.array_equal(out["o5"], np.where(np.abs(a) > 1.5, a, np.float32(-1.5)))


@pytest.mark.parametrize("axis", [1, 2, (1, 2), (1, 3), 3])
def test_reductions_over_any_free_axes(tmp_path, axis):
    a = rand(64, 3, 5, 4)
    out = run(tmp_path, f"""
        @nki.jit
        def k(a):
            x = nl.load(a)
            m = nl.max(x, axis={axis!r}, keepdims=True)
            s = nl.sum(x, axis={axis!r})
            om = nl.ndarray(m.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            os_ = nl.ndarray(s.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            nl.store(om, m)
            nl.store(os_, s)
            return om, os_
    """, ["f32[64,3,5,4]"], {"a": a})
    assert np.array_equal(out["om"], a.max(axis=axis, keepdims=True))
    np.testing.assert_allclose(out["os_"], a.sum(axis=axis), rtol=1e-6, atol=1e-5)


def test_var_softmax_rms_norm_all(tmp_path):
    a, w = rand(128, 48), rand(128, 48)
    out = run(tmp_path, """
        @nki.jit
        def k(a, w):
            ov = nl.ndarray((128, 1), dtype=a.dtype, buffer=nl.shared_hbm)
            osm = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            orn = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            oa = nl.ndarray((128, 1), dtype=a.dtype, buffer=nl.shared_hbm)
            x = nl.load(a)
            nl.store(ov, nl.var(x, axis=1))
            nl.store(osm, nl.softmax(x, axis=1))
            nl.store(orn, nl.rms_norm(x, nl.load(w), axis=1, n=48, epsilon=1e-5))
            nl.store(oa, nl.all(nl.greater(x, -3.9), axis=1))
            return ov, osm, orn, oa
    """, ["f32[128,48]", "f32[128,48]"], {"a": a, "w": w})
    d = a.astype(np.float64)
    np.testing.assert_allclose(out["ov"][:, 0], d.var(axis=1), rtol=1e-5)
    e = np.exp(d - d.max(axis=1, keepdims=True))
    np.testing.assert_allclose(out["osm"], e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)
    rn = d / np.sqrt((d * d).mean(axis=1, keepdims=True) + 1e-5) * w
    np.testing.assert_allclose(out["orn"], rn, rtol=1e-5, atol=1e-6)
    assert np.array_equal(out["oa"][:, 0], (a > -3.9).all(axis=1).astype(np.float32))



def test_compute_dtype_of_softmax_and_rms_norm_sets_the_result_dtype_as_dtype_does(tmp_path):
    # NKI 1.x: "dtype and compute_dtype behave the same" (Tusk computes in float32, then casts once)
    from tusk.examples.nki.reference import round_bf16

    a, w = rand(64, 32), rand(64, 32)
    out = run(tmp_path, """
        @nki.jit
        def k(a, w):
            x = nl.load(a)
            sm = nl.softmax(x, axis=1, compute_dtype=nl.bfloat16)
            rn = nl.rms_norm(x, nl.load(w), axis=1, n=32, compute_dtype=nl.bfloat16)
            assert sm.dtype == nl.bfloat16 and rn.dtype == nl.bfloat16
            osm = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            nl.store(osm, sm)
            orn = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            nl.store(orn, rn)
            return osm, orn
    """, ["f32[64,32]", "f32[64,32]"], {"a": a, "w": w})
    d = a.astype(np.float64)
    e = np.exp(d - d.max(axis=1, keepdims=True))
    rn = d / np.sqrt((d * d).mean(axis=1, keepdims=True) + 1e-6) * w
    for got, want in ((out["osm"], e / e.sum(axis=1, keepdims=True)), (out["orn"], rn)):
        np.testing.assert_array_equal(got, round_bf16(got))  # bfloat16 values
        np.testing.assert_allclose(got, want, rtol=2 ** -8, atol=1e-6)

@pytest.mark.parametrize("keep, rows", [("ix < 100", slice(0, 100)), ("ix >= 28", slice(28, 128))])
def test_rms_norm_softmax_and_var_under_a_partition_mask(tmp_path, keep, rows):
    """A 2-axis mask on the rows: each row's sum (of squares, of exps, its mean) is carried on through the
    partitions the mask keeps, in their places, as the rows it normalises (strict: no unwritten byte read)."""
    a, w = rand(128, 48), rand(48)
    path = tmp_path / "k.py"
    path.write_text(HEADER + textwrap.dedent(f"""
        @nki.jit
        def k(a, w):
            orn = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            osm = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            ov = nl.ndarray((128, 1), dtype=a.dtype, buffer=nl.shared_hbm)
            ix, iy = nl.arange(128)[:, None], nl.arange(48)[None, :]
            m = {keep}
            wt = nl.load(w.reshape((1, 48))[nl.arange(1)[:, None], iy])
            x = nl.load(a[ix, iy], mask=m)
            nl.store(orn[ix, iy], value=nl.rms_norm(x, wt, axis=1, n=48, epsilon=1e-5, mask=m), mask=m)
            nl.store(osm[ix, iy], value=nl.softmax(x, axis=1, mask=m), mask=m)
            nl.store(ov[ix, 0], value=nl.var(x, axis=1, mask=m), mask=m)
            return orn, osm, ov
    """))
    # the rows the mask drops are never written
    out = run_klr(trace_file(path, "k", ["f32[128,48]", "f32[48]"]), {"a": a, "w": w}, check_written=False)
    d = a[rows].astype(np.float64)
    rn = d / np.sqrt((d * d).mean(axis=1, keepdims=True) + 1e-5) * w
    np.testing.assert_allclose(out["orn"][rows], rn, rtol=1e-5, atol=1e-6)
    e = np.exp(d - d.max(axis=1, keepdims=True))
    np.testing.assert_allclose(out["osm"][rows], e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(out["ov"][rows, 0], d.var(axis=1), rtol=1e-5)


def test_broadcast_to_function_and_expand_dims(tmp_path):
    out = run(tmp_path, """
        @nki.jit
        def k(row, col):
            o1 = nl.ndarray((128, 64), dtype=row.dtype, buffer=nl.shared_hbm)
            o2 = nl.ndarray((128, 64), dtype=row.dtype, buffer=nl.shared_hbm)
            r = nl.load(row)
            c = nl.load(col)
            nl.store(o1, nl.broadcast_to(r, shape=(128, 64)))
            nl.store(o2, nl.broadcast_to(c, (128, 64), dtype=nl.float32))
            return o1, o2
    """, ["f32[1,64]", "f32[128,1]"], {"row": (r := rand(1, 64)), "col": (c := rand(128, 1))})
    assert np.array_equal(out["o1"], np.broadcast_to(r, (128, 64)))
    assert np.array_equal(out["o2"], np.broadcast_to(c, (128, 64)))


def test_shared_constant_and_identity(tmp_path):
    out = run(tmp_path, """
        @nki.jit
        def k(a):
            out = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.shared_hbm)
            oc = nl.ndarray((4, 6), dtype=a.dtype, buffer=nl.shared_hbm)
            ident = nl.shared_constant(np.identity(128, dtype=np.int8), dtype=a.dtype)
            eye = nl.load(ident)
            x = nl.load(a)
            nl.store(out, nl.add(eye, nl.multiply(nl.shared_identity_matrix(128, dtype=nl.float32), x)))
            tri = nl.shared_constant(np.triu(np.arange(24, dtype=np.float32).reshape(4, 6)))
            nl.store(oc, nl.load(tri))
            return out, oc
    """, ["f32[128,128]"], {"a": (a := rand(128, 128))})
    assert np.array_equal(out["out"], np.identity(128, dtype=np.float32) * (1 + a))
    assert np.array_equal(out["oc"], np.triu(np.arange(24, dtype=np.float32).reshape(4, 6)))


@pytest.mark.parametrize("table, dtype", [
    ("np.arange(160 * 64).reshape(160, 64)", "nl.float32"),                  # two row blocks
    ("np.tile(np.arange(512).reshape(4, 128), (32, 1)) - 7", "nl.int32"),     # nxd topk's index table, offset
    ("3 * np.arange(128 * 48).reshape(128, 48)[::-1].copy()", "nl.bfloat16"),  # rows falling, step 3
])
def test_a_constant_of_many_runs_whose_rows_are_progressions_is_an_iota(tmp_path, table, dtype):
    out = run(tmp_path, f"""
        @nki.jit
        def k(a):
            t = {table}
            out = nl.ndarray(t.shape, dtype={dtype}, buffer=nl.shared_hbm)
            c = nl.shared_constant(t, dtype={dtype})
            for i in nl.affine_range((t.shape[0] + 127) // 128):
                rows = min(128, t.shape[0] - 128 * i)
                nl.store(out[nl.ds(128 * i, rows), :], nl.load(c[nl.ds(128 * i, rows), :]))
            return out
    """, ["f32[1,1]"], {"a": np.zeros((1, 1), np.float32)})
    want = eval(table, {"np": np})  # noqa: S307 - the test's own literal
    assert np.array_equal(out["out"].astype(np.float64), want.astype(np.float64)) if dtype != "nl.bfloat16" else \
        np.allclose(out["out"].astype(np.float64), want, rtol=2 ** -8)


@pytest.mark.parametrize("table, words", [
    ("np.random.default_rng(0).integers(0, 1000, (128, 64))", "not integer progressions"),
    ("np.arange(128 * 64).reshape(128, 64) * 4096", "not integer progressions"),   # past float32's exact ints
    ("np.arange(128 * 64).reshape(128, 64) * 0.5", "not integer progressions"),
])
def test_a_constant_of_many_runs_that_is_no_table_of_progressions_is_refused(tmp_path, table, words):
    msg = refused(tmp_path, f"""
        @nki.jit
        def k(a):
            c = nl.shared_constant({table}, dtype=nl.float32)
            out = nl.ndarray(c.shape, dtype=c.dtype, buffer=nl.shared_hbm)
            nl.store(out, nl.load(c))
            return out
    """, ["f32[1,1]"])
    assert "k.py:" in msg and "more than 4096 runs" in msg and words in msg


def test_load_transpose2d(tmp_path):
    out = run(tmp_path, """
        @nki.jit
        def k(a):
            out = nl.ndarray((a.shape[1], a.shape[0]), dtype=a.dtype, buffer=nl.shared_hbm)
            nl.store(out, nl.load_transpose2d(a))
            return out
    """, ["f32[200,96]"], {"a": (a := rand(200, 96))})
    assert np.array_equal(out["out"], a.T)


def test_loop_reduce_accumulates_into_its_destination(tmp_path):
    out = run(tmp_path, """
        @nki.jit
        def k(a):
            out = nl.ndarray((128, 32), dtype=a.dtype, buffer=nl.shared_hbm)
            acc = nl.zeros((128, 32), dtype=nl.float32, buffer=nl.sbuf)
            for i in nl.affine_range(a.shape[0] // 128):
                t = nl.load(a[nl.ds(i * 128, 128), :])
                acc[...] = nl.loop_reduce(t, op=np.max, loop_indices=[i], name="m")
            nl.store(out, acc)
            return out
    """, ["f32[512,32]"], {"a": (a := rand(512, 32, lo=0.0))})
    assert np.array_equal(out["out"], a.reshape(4, 128, 32).max(axis=0))


@pytest.mark.parametrize("loop", ["nl.affine_range", "nl.static_range"])
def test_loop_reduce_into_an_unwritten_accumulator_starts_from_the_identity(tmp_path, loop):
    """An nl.ndarray accumulator nothing wrote: the sum starts from 0, the max from -inf, the product from 1
    (filled once before the loop, or in the unrolled loop's first iteration)."""
    out = run(tmp_path, """
        @nki.jit
        def k(a):
            n = a.shape[0] // 128
            s_out = nl.ndarray((128, 32), dtype=nl.float32, buffer=nl.shared_hbm)
            m_out = nl.ndarray((128, 32), dtype=nl.float32, buffer=nl.shared_hbm)
            p_out = nl.ndarray((128, 32), dtype=nl.float32, buffer=nl.shared_hbm)
            s = nl.ndarray((128, 32), dtype=nl.float32, buffer=nl.sbuf)
            m = nl.ndarray((128, 32), dtype=nl.float32, buffer=nl.sbuf)
            p = nl.ndarray((128, 32), dtype=nl.float32, buffer=nl.sbuf)
            for i in LOOP(n):
                t = nl.load(a[nl.ds(i * 128, 128), :])
                s[...] = nl.loop_reduce(t, op=np.add, loop_indices=[i])
                m[...] = nl.loop_reduce(t, op=np.maximum, loop_indices=[i])
                p[...] = nl.loop_reduce(t, op=np.multiply, loop_indices=[i])
            nl.store(s_out, s)
            nl.store(m_out, m)
            nl.store(p_out, p)
            return s_out, m_out, p_out
    """.replace("LOOP", loop), ["f32[384,32]"], {"a": (a := rand(384, 32, lo=-2.0))})
    blocks = a.reshape(3, 128, 32)
    assert np.allclose(out["s_out"], blocks.sum(axis=0), rtol=1e-6, atol=1e-6)
    assert np.array_equal(out["m_out"], blocks.max(axis=0))
    assert np.allclose(out["p_out"], blocks.prod(axis=0), rtol=1e-6, atol=1e-6)


def test_loop_reduce_used_as_a_tile_is_refused(tmp_path):
    msg = refused(tmp_path, """
        @nki.jit
        def k(a):
            t = nl.load(a)
            r = nl.loop_reduce(t, op=np.add, loop_indices=[])
            nl.store(a, nl.exp(r))
    """, ["f32[128,32]"])
    assert "k.py:10" in msg and "LoopReduce" in msg


def test_nki2_ndarray_views_ap_and_fori_loop(tmp_path):
    out = run(tmp_path, """
        @nki.jit
        def k(a):
            out = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.shared_hbm)
            t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf, address=(0, 0))
            # rows 0..127 of a, every other column, through an explicit access pattern
            nl.store(out[:, 0:32], nl.load(a.ap([[128, 128], [2, 32]], offset=1)))
            def body(j):
                col = nl.load(a.ap([[128, 128], [1, 1]], scalar_offset=j, indirect_dim=1))
                nl.store(out.ap([[64, 128], [1, 1]], offset=32, scalar_offset=j, indirect_dim=1), col)
            nl.fori_loop(0, 32, body)
            return out
    """, ["f32[128,128]"], {"a": (a := rand(128, 128))})
    assert np.array_equal(out["out"][:, :32], a[:, 1:64:2])
    assert np.array_equal(out["out"][:, 32:], a[:, :32])


def test_nki2_view_methods(tmp_path):
    out = run(tmp_path, """
        @nki.jit
        def k(a):
            out = nl.ndarray((128, 4, 6), dtype=a.dtype, buffer=nl.shared_hbm)
            o2 = nl.ndarray((128, 6), dtype=a.dtype, buffer=nl.shared_hbm)
            x = nl.load(a)                          # [128, 24]
            y = x.reshape_dim(1, (6, 4)).permute((0, 2, 1))
            nl.store(out, nl.copy(y))
            z = x.reshape((128, 4, 6)).select(1, 2)
            nl.store(o2, nl.exp(z))
            return out, o2
    """, ["f32[128,24]"], {"a": (a := rand(128, 24))})
    assert np.array_equal(out["out"], a.reshape(128, 6, 4).transpose(0, 2, 1))
    assert np.allclose(out["o2"], np.exp(a.reshape(128, 4, 6)[:, 2]), rtol=1e-6)


def test_nki2_rearrange_splits_reorders_and_merges_axes(tmp_path):
    # NkiTensor.rearrange(src_pattern, dst_pattern, fixed_sizes), the NKI API reference's example and an HBM one
    out = run(tmp_path, """
        @nki.jit
        def k(a, b):
            out = nl.ndarray((128, 6, 4), dtype=a.dtype, buffer=nl.shared_hbm)
            o2 = nl.ndarray((128, 3, 2, 4), dtype=a.dtype, buffer=nl.shared_hbm)
            x = nl.load(a)                          # [128, 24]
            y = x.rearrange(('b', ('h', 'w')), ('b', 'w', 'h'), {'h': 4})
            assert y.shape == (128, 6, 4)
            nl.store(out, nl.copy(y))
            nl.store(o2, nl.load(b.rearrange(('p', 'x', ('y', 'z')), ('p', 'z', 'y', 'x'), {'z': 3})))
            return out, o2
    """, ["f32[128,24]", "f32[128,4,6]"], {"a": (a := rand(128, 24)), "b": (b := rand(128, 4, 6))})
    assert np.array_equal(out["out"], a.reshape(128, 4, 6).transpose(0, 2, 1))
    assert np.array_equal(out["o2"], b.reshape(128, 4, 2, 3).transpose(0, 3, 2, 1))


@pytest.mark.parametrize("call, words", [
    ("x.rearrange(('b', ('h', 'w')), ('b', 'w'))", "each source name once"),
    ("x.rearrange(('b', ('h', 'w')), ('b', 'w', 'h'))", "fixed_sizes names all but one"),
    ("x.rearrange(('b', ('h', 'w')), ('b', 'w', 'h'), {'h': 5})", "does not divide 24"),
    ("x.rearrange(('b', 'h'), ('h', 'b'))", "the partition axis stays first"),
    ("x.rearrange(('b', ('h', 'w')), ('b', ('w', 'h')), {'h': 4})", "not contiguous"),
])
def test_nki2_rearrange_refuses_patterns_it_cannot_take(tmp_path, call, words):
    msg = refused(tmp_path, f"""
        @nki.jit
        def k(a):
            x = nl.load(a)
            y = {call}
            nl.store(a, x)
    """, ["f32[128,24]"])
    assert "k.py:9" in msg and words in msg, msg


def test_spmd_dim_nc_and_no_reorder(tmp_path):
    path = tmp_path / "k.py"
    path.write_text(HEADER + textwrap.dedent("""
        @nki.jit
        def k(a):
            out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            i = nl.program_id(0)
            with nl.no_reorder():
                t = nl.load(a[nl.ds(i * 128, 128), :])
                nl.store(out[nl.ds(i * 128, 128), :], nl.add(t, 1.0))
            return out
    """))
    from tusk.frontend.nki import language as nl
    data = trace_file(path, "k", ["f32[512,8]"], (nl.spmd_dim(nl.nc(2), 2),))
    a = rand(512, 8)
    assert np.array_equal(run_klr(data, {"a": a})["out"], a + 1)


def test_unknown_keywords_are_named(tmp_path):
    msg = refused(tmp_path, """
        @nki.jit
        def k(a):
            t = nl.load(a)
            nl.store(a, nl.exp(t, dtyp=nl.float32))
    """, ["f32[128,8]"])
    assert "k.py:9" in msg and "dtyp=" in msg


def test_while_loop_and_packed_dtype_misuse_are_refused_by_name(tmp_path):
    msg = refused(tmp_path, """
        @nki.jit
        def k(a):
            nl.while_loop(None, lambda r: r)
    """, ["f32[128,8]"])
    assert "k.py:8" in msg and "nl.while_loop" in msg
    msg = refused(tmp_path, """
        @nki.jit
        def k(a):
            t = a[:, 2:].ap(dtype=nl.float4_e2m1fn_x4, pattern=[[8, 128], [1, 8]])
    """, ["f32[128,8]"])
    assert "k.py:8" in msg and "float4_e2m1fn_x4" in msg and "element width" in msg


def test_partition_and_free_broadcasts_in_binary_ops(tmp_path):
    out = run(tmp_path, """
        @nki.jit
        def k(a, row, one, col):
            o1 = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            o2 = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            o3 = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            o4 = nl.ndarray((128, 3, 40), dtype=a.dtype, buffer=nl.shared_hbm)
            x = nl.load(a)
            r = nl.load(row)
            nl.store(o1, nl.add(x, r))
            nl.store(o2, nl.multiply(x, nl.load(one)))
            nl.store(o3, nl.subtract(nl.load(col), r))
            strided = nl.load(a[0:1, 0:80])[:, 0:80:2]
            nl.store(o4, nl.broadcast_to(nl.expand_dims(strided, 1), (128, 3, 40)))
            return o1, o2, o3, o4
    """, ["f32[128,600]", "f32[1,600]", "f32[1,1]", "f32[128,1]"],
        {"a": (a := rand(128, 600)), "row": (r := rand(1, 600)), "one": (o := rand(1, 1)), "col": (c := rand(128, 1))})
    assert np.array_equal(out["o1"], a + r) and np.array_equal(out["o2"], a * o)
    assert np.array_equal(out["o3"], c - r)
    assert np.array_equal(out["o4"], np.broadcast_to(a[0:1, 0:80:2][:, None, :], (128, 3, 40)))


def test_indirect_load_and_store_through_an_index_tile(tmp_path):
    out = run(tmp_path, """
        @nki.jit
        def k(data, idx):
            out = nl.ndarray((64, 512), dtype=data.dtype, buffer=nl.shared_hbm)
            scattered = nl.ndarray((128, 512), dtype=data.dtype, buffer=nl.shared_hbm)
            i_p = nl.arange(64)[:, None]
            i_f = nl.arange(512)[None, :]
            ix = nl.load(idx[i_p])
            rows = nl.load(data[ix[i_p, 0], i_f])
            nl.store(out, rows)
            nl.store(scattered, nl.zeros((128, 512), dtype=data.dtype))
            nl.store(scattered[ix, i_f], nl.exp(rows))
            return out, scattered
    """, ["f32[128,512]", "i32[64]"], {"data": (d := rand(128, 512)), "idx": (ix := RNG.permutation(128)[:64].astype(np.int32))})
    assert np.array_equal(out["out"], d[ix])
    want = np.zeros((128, 512), np.float32)
    want[ix] = np.exp(d[ix])
    np.testing.assert_allclose(out["scattered"], want, rtol=1e-6)


def test_modulo_of_a_loop_index_unrolls_that_loop(tmp_path):
    out = run(tmp_path, """
        @nki.jit
        def k(a):
            out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            for i in nl.affine_range(4):
                t = nl.load(a[nl.ds(i * 32, 32), :])
                nl.store(out[nl.ds(i * 32, 32), :], nl.multiply(t, float(i % 2 + 1)))
            return out
    """, ["f32[128,16]"], {"a": (a := rand(128, 16))})
    scale = np.repeat(np.array([1, 2, 1, 2], np.float32), 32)[:, None]
    assert np.array_equal(out["out"], a * scale)


def test_where_selects_exactly_even_with_infinities(tmp_path):
    out = run(tmp_path, """
        @nki.jit
        def k(a, b):
            o1 = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            o2 = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            x = nl.load(a)
            y = nl.load(b)
            c = nl.greater(x, 0.0)
            nl.store(o1, nl.where(c, x, y))
            nl.store(o2, nl.where(c, -np.inf, x))
            return o1, o2
    """, ["f32[128,32]", "f32[128,32]"],
        {"a": (a := rand(128, 32)), "b": (b := np.where(rand(128, 32) > 0, np.inf, 1.0).astype(np.float32))})
    assert np.array_equal(out["o1"], np.where(a > 0, a, b))
    assert np.array_equal(out["o2"], np.where(a > 0, -np.inf, a))


def test_where_takes_a_float_condition_as_nonzero_and_the_result_verifies(tmp_path):
    """NKI's condition may be a float tile (the 2.x docs' 1.0 / 0.0); BIR's copyPredicated needs an integer
    predicate, so the float is compared with 0 first: 0.5 and NaN select x, 0.0 and -0.0 select y."""
    from tusk.ir.verify import verify
    from tusk.stages.host import host_module_for
    from tusk.stages.translate_nki_ast_to_bir import TranslateNKIASTToBIR

    body = """
        @nki.jit
        def k(c, a, b):
            out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            nl.store(out, nl.where(nl.load(c), nl.load(a), nl.load(b)))
            return out
    """
    cond = np.resize(np.array([0.5, np.nan, 0.0, -0.0, 1.0, -2.0], np.float32), 128 * 8).reshape(128, 8)
    out = run(tmp_path, body, ["f32[128,8]"] * 3, {"c": cond, "a": (a := rand(128, 8)), "b": (b := rand(128, 8))})
    assert np.array_equal(out["out"], np.where(cond != 0, a, b)) and np.isnan(cond).any()
    klr_path = tmp_path / "k.klr"
    klr_path.write_bytes(trace_file(tmp_path / "k.py", "k", ["f32[128,8]"] * 3))
    translated, _ = TranslateNKIASTToBIR().run(host_module_for(str(klr_path), 0, str(tmp_path / "art")))
    verify(translated)  # refused "the predicate is float32" before the comparison was added

def test_rand_is_uniform_and_repeats_after_the_same_seed(tmp_path):
    out = run(tmp_path, """
        @nki.jit
        def k(a):
            o1 = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.shared_hbm)
            o2 = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.shared_hbm)
            o3 = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.shared_hbm)
            seed = nl.full((1, 1), 42, dtype=nl.int32, buffer=nl.sbuf)
            nl.random_seed(seed)
            nl.store(o1, nl.rand((128, 256), dtype=nl.float32))
            nl.random_seed(seed)
            nl.store(o2, nl.rand((128, 256), dtype=nl.float32))
            nl.store(o3, nl.dropout(nl.load(a), rate=0.25))
            return o1, o2, o3
    """, ["f32[128,256]"], {"a": (a := rand(128, 256, lo=1.0, hi=2.0))})
    r1, r2, d = out["o1"], out["o2"], out["o3"]
    assert np.array_equal(r1, r2) and r1.min() >= 0 and r1.max() < 1 and abs(r1.mean() - 0.5) < 0.01
    kept = d != 0
    assert np.array_equal(d[kept], a[kept]) and abs(1 - kept.mean() - 0.25) < 0.01


def test_masks_on_a_flattened_index_keep_whole_rows(tmp_path):
    body = """
        @nki.jit
        def k(a, n):
            out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            ix = nl.arange(128)[:, None]
            iy = nl.arange(64)[None, :]
            for i in nl.affine_range(4):
                nl.store(out[i, ix, iy], value=nl.zeros((128, 64), dtype=a.dtype))  # every element is written
            for i in nl.affine_range(4):
                flat = i * 128 * 64 + 64 * ix + iy
                t = nl.load(a[i, ix, iy], mask=flat < n.shape[0])
                nl.store(out[i, ix, iy], value=nl.add(t, 1.0), mask=flat < n.shape[0])
            return out
    """
    a = rand(4, 128, 64)
    got = run(tmp_path, body, ["f32[4,128,64]", f"u8[{4 * 128 * 64}]"], {"a": a, "n": np.zeros(4 * 128 * 64, np.uint8)})
    assert np.array_equal(got["out"], a + 1)
    path = tmp_path / "k.py"
    data = trace_file(path, "k", ["f32[4,128,64]", f"u8[{2 * 128 * 64 + 64 * 10}]"])  # 2 tiles and 10 rows
    got = run_klr(data, {"a": a, "n": np.zeros(2 * 128 * 64 + 640, np.uint8)})["out"]
    want = np.zeros_like(a)
    want[:2], want[2, :10] = a[:2] + 1, a[2, :10] + 1
    assert np.array_equal(got, want)
    # 100 elements: row 0 whole and 36 of row 1 -- each masked call runs on the whole rows, then on the cut row
    got = run_klr(trace_file(path, "k", ["f32[4,128,64]", "u8[100]"]), {"a": a, "n": np.zeros(100, np.uint8)})
    want = np.zeros_like(a).reshape(-1)
    want[:100] = a.reshape(-1)[:100] + 1
    assert np.array_equal(got["out"], want.reshape(a.shape))


def test_a_mask_cutting_a_row_part_way_is_refused_where_one_call_cannot_hold_it(tmp_path):
    into_buffer = """
        @nki.jit
        def k(a):
            out = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.shared_hbm)
            ix, iy = nl.arange(128)[:, None], nl.arange(64)[None, :]
            buf = nl.zeros((128, 64), dtype=a.dtype)
            buf[ix, iy] = nl.load(a[ix, iy], mask=64 * ix + iy < 1000)
            nl.store(out, buf)
            return out
    """
    msg = refused(tmp_path, into_buffer, ["f32[128,64]"])
    assert "k.py:11" in msg and "cuts a row part way" in msg
    three_axes = """
        @nki.jit
        def k(a):
            out = nl.ndarray((128, 4, 16), dtype=a.dtype, buffer=nl.shared_hbm)
            ip, ij, ik = nl.mgrid[0:128, 0:4, 0:16]
            t = nl.load(a[ip, ij, ik], mask=64 * ip + 16 * ij + ik < 1000)
            nl.store(out, t)
            return out
    """
    msg = refused(tmp_path, three_axes, ["f32[128,4,16]"])
    assert "k.py:10" in msg and "cuts row 15 of axis 0 part way" in msg


def test_a_one_axis_column_broadcasts_along_the_free_axis(tmp_path):
    out = run(tmp_path, """
        @nki.jit
        def k(a):
            out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            s = nisa.tensor_reduce(np.add, data=nl.load(a), axis=(1,))
            nl.store(out, (1.0 / s).broadcast_to(a.shape))
            return out
    """, ["f32[128,40]"], {"a": (a := rand(128, 40, lo=0.5, hi=1.0))})
    assert np.allclose(out["out"], np.broadcast_to(1.0 / a.sum(axis=1, keepdims=True), a.shape), rtol=1e-6)


def test_finfo_iinfo_and_numpy_int_loop_bounds(tmp_path):
    out = run(tmp_path, """
        @nki.jit
        def k(a):
            out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            n = np.int64(a.shape[0]) // 32
            for i in nl.sequential_range(n):
                t = nl.load(a[nl.ds(i * 32, 32), :])
                lo = nl.full((32, 8), nl.finfo(nl.float32).min, dtype=nl.float32, buffer=nl.sbuf)
                hi = nl.full((32, 8), nl.iinfo(nl.int16).max, dtype=nl.float32, buffer=nl.sbuf)
                nl.store(out[nl.ds(i * 32, 32), :], nl.minimum(nl.maximum(t, lo), hi))
            return out
    """, ["f32[128,8]"], {"a": (a := rand(128, 8) * np.float32(1e5))})
    assert np.array_equal(out["out"], np.minimum(a, np.float32(32767)))


def test_size_one_free_axes_broadcast_numpy_style(tmp_path):
    out = run(tmp_path, """
        @nki.jit
        def k(a, b):
            out = nl.ndarray((128, 8, 3, 3), dtype=a.dtype, buffer=nl.shared_hbm)
            nl.store(out, nl.equal(nl.load(a), nl.load(b)))
            return out
    """, ["f32[128,8,1,1]", "f32[128,8,3,3]"],
        {"a": (a := RNG.integers(0, 3, (128, 8, 1, 1)).astype(np.float32)),
         "b": (b := RNG.integers(0, 3, (128, 8, 3, 3)).astype(np.float32))})
    assert np.array_equal(out["out"], (a == b).astype(np.float32))


def test_an_if_on_a_loop_index_unrolls_that_loop(tmp_path):
    out = run(tmp_path, """
        @nki.jit
        def k(a):
            out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            for i in nl.affine_range(4):
                t = nl.load(a[nl.ds(i * 32, 32), :])
                if i == 0 or i >= 3:
                    t = nl.exp(t)
                nl.store(out[nl.ds(i * 32, 32), :], t)
            return out
    """, ["f32[128,16]"], {"a": (a := rand(128, 16))})
    want = a.copy()
    want[:32], want[96:] = np.exp(a[:32]), np.exp(a[96:])
    np.testing.assert_allclose(out["out"], want, rtol=1e-6)


def test_nki2_names_kernels_put_in_tables_exist_and_refuse_when_called(tmp_path):
    msg = refused(tmp_path, """
        ACTS = {"gelu_s": nl.gelu_apprx_sigmoid, "silu_dx": nl.bypass}

        class Cfg(nl.NKIObject):
            pass

        @nki.jit
        def k(a):
            assert Cfg(x=3).x == 3 and nl.bool == nl.uint8
            nl.store(a, ACTS["silu_dx"](nl.load(a)))
    """, ["f32[128,8]"])
    assert "k.py:14" in msg and "nl.bypass" in msg


@pytest.mark.parametrize("loop", ["affine_range", "sequential_range", "static_range"])
def test_range_functions_take_start_stop_and_step_by_keyword(tmp_path, loop):
    out = run(tmp_path, f"""
        @nki.jit
        def k(a):
            out = nl.ndarray((8, 16), dtype=a.dtype, buffer=nl.shared_hbm)
            for i in nl.{loop}(start=0, stop=2):
                nl.store(out[nl.ds(i, 1), :], nl.load(a[nl.ds(i, 1), :]))
            for i in nl.{loop}(2, stop=8, step=3):          # rows 2 and 5
                nl.store(out[nl.ds(i, 1), :], nl.add(nl.load(a[nl.ds(i, 1), :]), 1.0))
            for i in nl.{loop}(stop=2, step=1):
                nl.store(out[nl.ds(i + 6, 1), :], nl.multiply(nl.load(a[nl.ds(i + 6, 1), :]), 2.0))
            for i in nl.{loop}(3, 5):
                nl.store(out[nl.ds(i, 1), :], nl.load(a[nl.ds(i, 1), :]))
            return out
    """, ["f32[8,16]"], {"a": (a := rand(8, 16))})
    want = a.copy()
    want[[2, 5]] += 1
    want[6:] *= 2
    np.testing.assert_array_equal(out["out"], want)


def test_a_range_bound_given_twice_is_refused_at_its_line(tmp_path):
    msg = refused(tmp_path, """
        @nki.jit
        def k(a):
            for i in nl.affine_range(4, start=0):
                pass
    """, ["f32[128,8]"])
    assert "k.py:8: not supported: nl.affine_range: start given twice, by position and by keyword" in msg, msg


def test_tile_size_has_nkis_sbuf_size_and_alignments_and_names_an_unknown_constant(tmp_path):
    from tusk.ir.arch import get_arch
    sb = get_arch(None).sb_bytes_per_partition
    out = run(tmp_path, """
        @nki.jit
        def k(a):
            ts = nl.tile_size
            assert ts.sbuf_size_bytes == ts.pmax * (ts.total_available_sbuf_size + 16392)
            assert (ts.psum_min_align, ts.sbuf_min_align) == (4, 1) and not hasattr(ts, "no_such")
            out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            nl.store(out, nl.add(nl.load(a), float(ts.sbuf_size_bytes // ts.pmax)))
            return out
    """, ["f32[128,8]"], {"a": (a := rand(128, 8))})
    np.testing.assert_array_equal(out["out"], a + np.float32(sb))
    msg = refused(tmp_path, """
        @nki.jit
        def k(a):
            n = nl.tile_size.sbuf_bytes
    """, ["f32[128,8]"])
    assert "k.py:8: not supported: nl.tile_size.sbuf_bytes (not in Tusk's NKI front end" in msg, msg


def test_like_constructors_take_nkis_parameter_names_by_keyword(tmp_path):
    out = run(tmp_path, """
        @nki.jit
        def k(a):
            out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            x = nl.load(a)
            z = nl.zeros_like(x=x, dtype=nl.float32, buffer=nl.sbuf)
            o = nl.ones_like(x=x)
            f = nl.full_like(x=x, fill_value=3.0)
            e = nl.empty_like(x=x)
            e[...] = nl.add(nl.add(z, o), nl.multiply(f, x))
            nl.store(out, e)
            return out
    """, ["f32[128,8]"], {"a": (a := rand(128, 8))})
    np.testing.assert_array_equal(out["out"], np.float32(1) + np.float32(3) * a)


def test_like_constructors_and_more_view_methods(tmp_path):
    out = run(tmp_path, """
        @nki.jit
        def k(a):
            o1 = nl.ndarray((128, 24), dtype=a.dtype, buffer=nl.shared_hbm)
            o2 = nl.ndarray((128, 4, 6), dtype=a.dtype, buffer=nl.shared_hbm)
            o3 = nl.ndarray((128, 5, 24), dtype=a.dtype, buffer=nl.shared_hbm)
            x = nl.load(a)                                      # [128, 4, 6]
            assert nl.is_hbm(a.buffer) and nl.is_sbuf(x.buffer) and x.get_pattern() == [[24, 128], [6, 4], [1, 6]]
            flat = x.flatten_dims(1, 2)                         # [128, 24]
            e = nl.empty_like(flat)
            e[...] = nl.add(flat, nl.ones_like(flat))
            nl.store(o1, e)
            part = nl.full_like(x, 2.0)
            nl.store(o2, nl.multiply(part, x.slice(2, 0, 6)))
            rep = flat.expand_dim(1).broadcast(1, 5)            # [128, 5, 24], stride 0
            nl.store(o3, nl.copy(rep))
            assert flat.expand_dim(1).squeeze_dim(1).shape == (128, 24)
            return o1, o2, o3
    """, ["f32[128,4,6]"], {"a": (a := rand(128, 4, 6))})
    assert np.array_equal(out["o1"], a.reshape(128, 24) + 1)
    assert np.array_equal(out["o2"], a * 2)
    assert np.array_equal(out["o3"], np.broadcast_to(a.reshape(128, 1, 24), (128, 5, 24)))


@pytest.mark.parametrize("call", [
    "nl.ds(0, 'x')", "nl.ds(0, -3)", "x.ap('bad')", "x.ap([[1, 0]])", "nl.copy(x.ap([[1, 128], [1, 9999]]))",
    "nl.copy(x.ap([[32, 128], [1, 40]], dtype=nl.int8))", "x.permute((1, 0))", "x.permute('ab')", "x.broadcast(1, 4)",
    "x.reshape_dim(1, (3, 5))", "x.flatten_dims(0, 1)", "x.select(1, x)", "x.reshape((64, 16))",
    "nl.shared_constant(np.array(['a']))", "nl.shared_constant(np.zeros((0, 3)))", "nl.shared_constant(object())",
    "nl.shared_identity_matrix(300)", "nl.load_transpose2d(x)", "nl.loop_reduce(x, np.add, [])(1)",
    "nl.fori_loop(0, 4, 5)", "nl.fori_loop(0, x, lambda i: None)", "nl.left_shift(nl.copy(x, dtype=nl.int32), 1.5)",
    "nl.rms_norm(x, x, axis=1, n=0)", "nl.softmax(x, axis=0)", "nl.var(x, axis=(0, 1))", "nl.finfo(nl.int32)",
    "x.slice('a', 0, 2)", "x.reshape_dim(1, ('a', 2))", "x.broadcast(1, 'b')", "x.ap([[1, 8]], indirect_dim='z', scalar_offset=0)",
    "nl.iinfo(nl.float32)", "nl.where(x, x, x, colour=1)", "nl.broadcast_to(x, (128, 3))", "a[x, 0:8]",
    "nl.load(a[nl.copy(x, dtype=nl.int32), :])", "nl.random_seed(x)", "nl.dropout(x, rate=x)",
])
def test_hostile_nl_calls_are_refused_at_their_line(tmp_path, call):
    msg = refused(tmp_path, f"""
        @nki.jit
        def k(a):
            x = nl.load(a)
            y = {call}
            nl.store(a, x)
    """, ["f32[128,8]"])
    assert "k.py:9" in msg, msg


def test_an_ap_view_past_its_tile_is_refused_where_an_instruction_uses_it_or_a_slice_of_it(tmp_path):
    """nki-library's output_projection_tkg builds .ap() views in every iteration and uses only those in range."""
    body = """
        @nki.jit
        def k(a):
            out = nl.ndarray((4, 128, 4), dtype=a.dtype, buffer=nl.shared_hbm)
            t = nl.load(a)
            for i in nl.affine_range(4):
                v = t.ap(pattern=[[8, 128], [1, 4]], offset=i * 2)
                if i < USED:
                    nl.store(out[i, :, 0:WIDTH], nl.copy(SUB))
                else:
                    nl.store(out[i], nl.copy(t[:, 0:4]))
            return out
    """
    a = np.random.default_rng(4).uniform(-1, 1, (128, 8)).astype(np.float32)
    got = run(tmp_path, body.replace("USED", "3").replace("SUB", "v").replace("WIDTH", "4"), ["f32[128,8]"],
              {"a": a})["out"]
    np.testing.assert_array_equal(got, np.stack([a[:, 0:4], a[:, 2:6], a[:, 4:8], a[:, 0:4]]))
    for sub, width in (("v", "4"), ("v[:, 2:4]", "2")):
        msg = refused(tmp_path, body.replace("USED", "4").replace("SUB", sub).replace("WIDTH", width), ["f32[128,8]"])
        assert "k.py:13: not supported:" in msg and "are outside" in msg, msg


@pytest.mark.parametrize("use, name", [("x.unsqueeze(1)", "unsqueeze"),
                                       ("a.indirect(x, 8)", "indirect"),
                                       ("nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf).no_such", "no_such")])
def test_a_tensor_method_tusk_lacks_is_refused_by_name_and_hasattr_says_no(tmp_path, use, name):
    msg = refused(tmp_path, f"""
        @nki.jit
        def k(a):
            x = nl.load(a)
            assert not hasattr(x, "unsqueeze") and getattr(a, "indirect", None) is None
            y = {use}
            nl.store(a, x)
    """, ["f32[128,8]"])
    assert f"k.py:10: not supported: tensor.{name} (" in msg, msg  # indirect: why KLR cannot express it


def test_a_row_cut_call_of_several_instructions_is_refused_not_run_on_whole_rows_only(tmp_path):
    # load with dtype= is a DMA then a copy: only the DMA would run on the cut row
    msg = refused(tmp_path, """
        @nki.jit
        def k(a):
            out = nl.ndarray((128, 64), dtype=nl.bfloat16, buffer=nl.shared_hbm)
            ix, iy = nl.arange(128)[:, None], nl.arange(64)[None, :]
            t = nl.load(a[ix, iy], dtype=nl.bfloat16, mask=64 * ix + iy < 1000)
            nl.store(out[ix, iy], t, mask=64 * ix + iy < 1000)
            return out
    """, ["f32[128,64]"])
    assert "k.py:10" in msg and "same line" in msg


@pytest.mark.parametrize("arch", ["gen3", "core_v4"])
def test_tile_size_sbuf_constants_are_the_traced_architectures(tmp_path, arch):
    """Read when the kernel asks, not at import: --arch core_v4 saw gen3's SBUF sizes."""
    from tusk.frontend import trace_file
    from tusk.ir import klr
    from tusk.ir.arch import get_arch

    a = get_arch(arch)
    path = tmp_path / "k.py"
    path.write_text(textwrap.dedent("""
        import neuronxcc.nki as nki
        import neuronxcc.nki.language as nl

        @nki.jit
        def k(x):
            ts = nl.tile_size
            n = ts.total_available_sbuf_size // 1024 + ts.sbuf_size_bytes // ts.pmax // 1024
            out = nl.ndarray((128, n), dtype=nl.float32, buffer=nl.shared_hbm)
            nl.store(out, value=nl.zeros((128, n), dtype=nl.float32))
            return out
    """))
    kernel = klr.read_klr(trace_file(path, "k", ["f32[128,4]"], arch=arch)).contents.kernel
    want = (a.sb_bytes_per_partition - a.sb_reserved) // 1024 + a.sb_bytes_per_partition // 1024
    assert kernel.outputs[0].shape.freeDims == (want,)


def test_the_derivative_activations_are_composed_of_the_ones_bir_has(tmp_path):
    # nl.erf_dx, silu_dx, gelu_dx and gelu_apprx_sigmoid_dx (NKI 2.x nl) have no BIR activation function
    import math

    a = np.random.default_rng(3).uniform(-3, 3, (128, 64)).astype(np.float32)
    out = run(tmp_path, """
        @nki.jit
        def k(a):
            outs = [nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm) for _ in range(4)]
            x = nl.load(a)
            for o, f in zip(outs, (nl.erf_dx, nl.silu_dx, nl.gelu_dx, nl.gelu_apprx_sigmoid_dx)):
                nl.store(o, f(x))
            return tuple(outs)
    """, ["f32[128,64]"], {"a": a})
    got = [out[name] for name in sorted(out)]
    sig = lambda z: 1 / (1 + np.exp(-z))  # noqa: E731
    phi = 0.5 * (1 + np.vectorize(math.erf)(a / np.sqrt(2)))
    want = [2 / np.sqrt(np.pi) * np.exp(-a * a), sig(a) * (1 + a * (1 - sig(a))),
            phi + a * np.exp(-a * a / 2) / np.sqrt(2 * np.pi),
            sig(1.702 * a) + 1.702 * a * sig(1.702 * a) * (1 - sig(1.702 * a))]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, atol=2e-5)


def test_softmax_rms_norm_and_var_along_the_last_axes_of_a_3_axis_tile(tmp_path):
    # NKI: "axis ... can only be the last contiguous dim(s) of the tile: [1], [1,2], ..." -- [2] of a 3-axis
    # tile too (nl.softmax's default axis=-1), not only every free axis
    a, w = rand(128, 4, 16), rand(128, 4, 16)
    out = run(tmp_path, """
        @nki.jit
        def k(a, w):
            sm = nl.ndarray((128, 4, 16), dtype=nl.float32, buffer=nl.shared_hbm)
            rn = nl.ndarray((128, 4, 16), dtype=nl.float32, buffer=nl.shared_hbm)
            va = nl.ndarray((128, 4, 1), dtype=nl.float32, buffer=nl.shared_hbm)
            x = nl.load(a)
            nl.store(sm, nl.softmax(x))
            nl.store(rn, nl.rms_norm(x, nl.load(w), axis=2, n=16))
            nl.store(va, nl.var(x, axis=[2]))
            return sm, rn, va
    """, ["f32[128,4,16]", "f32[128,4,16]"], {"a": a, "w": w})
    e = np.exp(a - a.max(axis=2, keepdims=True))
    np.testing.assert_allclose(out["sm"], e / e.sum(axis=2, keepdims=True), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(out["rn"], a / np.sqrt((a * a).mean(axis=2, keepdims=True) + 1e-6) * w,
                               rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(out["va"], a.var(axis=2, keepdims=True), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("call", ["nl.softmax(x, axis=1)", "nl.rms_norm(x, x, axis=(1,), n=4)", "nl.var(x, axis=0)"])
def test_softmax_rms_norm_and_var_refuse_axes_that_are_not_the_last(tmp_path, call):
    msg = refused(tmp_path, f"""
        @nki.jit
        def k(a):
            x = nl.load(a)
            y = {call}
            nl.store(a, x)
    """, ["f32[128,4,16]"])
    assert "k.py:9" in msg and "the last free axes" in msg, msg


def test_tiles_of_equal_size_whose_size_1_axes_differ_broadcast_numpys_way(tmp_path):
    # [4, 1, 3] + [4, 3, 1] is [4, 3, 3] in numpy; both stream 12 elements, and were added one by one
    a = np.arange(12, dtype=np.float32).reshape(4, 1, 3)
    b = (100 * np.arange(12, dtype=np.float32)).reshape(4, 3, 1)
    got = run(tmp_path, """
        @nki.jit
        def k(a, b):
            out = nl.ndarray((4, 3, 3), dtype=nl.float32, buffer=nl.shared_hbm)
            nl.store(out, nl.subtract(nl.load(a), nl.load(b)))
            return out
    """, ["f32[4,1,3]", "f32[4,3,1]"], {"a": a, "b": b})
    np.testing.assert_array_equal(got["out"], a - b)
