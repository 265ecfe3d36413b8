"""NKI 1.x ``neuronxcc.nki.isa``: every supported call in a small kernel, traced to KLR, translated and run
in the interpreter against numpy; 1.x calls return new tiles and bind by the 1.x signatures."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

from tusk.frontend import TraceError, trace_file
from tusk.frontend.check import run_klr

HEADER = """\
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
"""

RNG = np.random.default_rng(21)


def run(tmp_path, body: str, inputs: dict[str, np.ndarray], specs: list[str] | None = None) -> dict[str, np.ndarray]:
    path = tmp_path / "k.py"
    path.write_text(HEADER + textwrap.dedent(body))
    specs = specs or [f"f32[{','.join(map(str, a.shape))}]" for a in inputs.values()]
    return run_klr(trace_file(path, "k", specs), inputs)


def rand(*shape: int, lo: float = -2.0, hi: float = 2.0) -> np.ndarray:
    return RNG.uniform(lo, hi, size=shape).astype(np.float32)


def test_dma_copy_memset_iota_and_tensor_copy(tmp_path):
    a = rand(128, 16)
    got = run(tmp_path, """
        @nki.jit
        def k(a):
            out = nl.ndarray((128, 16), dtype=nl.float32, buffer=nl.shared_hbm)
            t = nl.ndarray((128, 16), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=a)
            ones = nisa.memset((128, 16), 2.0, nl.float32)
            ip, jf = nl.mgrid[0:128, 0:16]
            idx = nisa.iota(ip * 16 + jf, dtype=nl.float32)
            s = nisa.tensor_tensor(nisa.tensor_copy(t), ones, nl.multiply)
            s = nisa.tensor_tensor(s, idx, op=np.add)
            nisa.dma_copy(dst=out, src=s)
            return out
    """, {"a": a})["out"]
    assert np.array_equal(got, 2 * a + np.arange(128 * 16, dtype=np.float32).reshape(128, 16))


def test_nc_matmul_accumulates_with_plus_equals_and_nc_transpose(tmp_path):
    lhsT, rhs = rand(256, 64), rand(256, 32)
    got = run(tmp_path, """
        @nki.jit
        def k(lhsT, rhs):
            out = nl.ndarray((32, 64), dtype=nl.float32, buffer=nl.shared_hbm)
            acc = nl.zeros((64, 32), dtype=nl.float32, buffer=nl.psum)
            for kk in nl.affine_range(2):
                a = nl.load(lhsT[kk * 128:(kk + 1) * 128, :])
                b = nl.load(rhs[kk * 128:(kk + 1) * 128, :])
                acc += nisa.nc_matmul(a, b)
            s = nisa.tensor_copy(acc)
            t = nisa.nc_transpose(s)
            nl.store(out, value=nisa.tensor_copy(t))
            return out
    """, {"lhsT": lhsT, "rhs": rhs})["out"]
    np.testing.assert_allclose(got, (lhsT.T.astype(np.float64) @ rhs).T, rtol=1e-5, atol=1e-4)


def test_tensor_scalar_positional_scalar_tensor_tensor_and_scan(tmp_path):
    a, b = rand(32, 20), rand(32, 20, lo=0.5, hi=1.0)
    res = run(tmp_path, """
        @nki.jit
        def k(a, b):
            o1 = nl.ndarray((32, 20), dtype=nl.float32, buffer=nl.shared_hbm)
            o2 = nl.ndarray((32, 20), dtype=nl.float32, buffer=nl.shared_hbm)
            x, y = nl.load(a), nl.load(b)
            t = nisa.tensor_scalar(x, np.multiply, 2.0, False, np.add, 1.0)
            u = nisa.scalar_tensor_tensor(data=t, op0=nl.subtract, operand0=0.5, op1=nl.multiply, operand1=y)
            nl.store(o1, value=u)
            nl.store(o2, value=nisa.tensor_tensor_scan(y, x, 1.0, np.multiply, np.add))
            return o1, o2
    """, {"a": a, "b": b})
    np.testing.assert_allclose(res["o1"], (a * 2 + 1 - 0.5) * b, rtol=1e-6)
    want, prev = np.empty_like(a), np.ones(32, np.float32)
    for i in range(20):
        prev = (b[:, i] * prev + a[:, i]).astype(np.float32)
        want[:, i] = prev
    np.testing.assert_allclose(res["o2"], want, rtol=1e-6, atol=1e-6)


def test_activation_tile_scale_reductions_and_a_non_trailing_axis(tmp_path):
    a, s = rand(64, 4, 8), rand(64, 1, lo=0.1, hi=1.0)
    res = run(tmp_path, """
        @nki.jit
        def k(a, s):
            act = nl.ndarray((64, 4, 8), dtype=nl.float32, buffer=nl.shared_hbm)
            sums = nl.ndarray((64, 1), dtype=nl.float32, buffer=nl.shared_hbm)
            red = nl.ndarray((64, 8), dtype=nl.float32, buffer=nl.shared_hbm)
            red2 = nl.ndarray((64, 1), dtype=nl.float32, buffer=nl.shared_hbm)
            x, sc = nl.load(a), nl.load(s)
            r = nl.ndarray((64, 1), dtype=nl.float32, buffer=nl.sbuf)
            y = nisa.activation_reduce(op=nl.exp, data=x, reduce_op=nl.add, reduce_res=r, scale=sc)
            nl.store(act, value=nisa.activation(nl.tanh, y, bias=sc, scale=0.5))
            nl.store(sums, value=r)
            nl.store(red, value=nisa.tensor_reduce(np.max, x, axis=1))
            r2 = nl.ndarray((64, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_scalar_reduce(data=x, op0=np.add, operand0=1.0, reduce_op=np.add, reduce_res=r2)
            nl.store(red2, value=r2)
            return act, sums, red, red2
    """, {"a": a, "s": s})
    e = np.exp(a * s[:, :, None])
    np.testing.assert_allclose(res["act"], np.tanh(e * 0.5 + s[:, :, None]), rtol=2e-6, atol=1e-6)
    np.testing.assert_allclose(res["sums"][:, 0], e.sum(axis=(1, 2)), rtol=1e-5)
    assert np.array_equal(res["red"], a.max(axis=1))
    np.testing.assert_allclose(res["red2"][:, 0], (a + 1).sum(axis=(1, 2)), rtol=1e-5)


def test_a_partition_mask_cuts_the_bias_scale_and_operand_columns_too(tmp_path):
    """NKI's mask predicates every operand: under a mask that keeps partitions 128..191 of the second tile
    (64 of its 128), a [128, 1] or [128] (integer-indexed) bias, a tile scale, reduce_res and a
    tensor_scalar operand column are cut to those partitions, in step with the data."""
    a, c = rand(192, 32, lo=0.0, hi=4.0), rand(128, 1, lo=0.5, hi=2.0)
    res = run(tmp_path, """
        @nki.jit
        def k(a, c):
            col = nl.load(c)
            o1 = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
            sums = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
            o2 = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
            ip, jf = nl.arange(128)[:, None], nl.arange(32)[None, :]
            o3 = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
            for i in nl.affine_range(2):
                m = i * 128 + ip < a.shape[0]
                t = nl.load(a[i * 128 + ip, jf], mask=m)
                y = nisa.activation(op=nl.sqrt, data=t, bias=col[ip, 0], scale=2.0, mask=m)
                nl.store(o1[i * 128 + ip, jf], value=y, mask=m)
                r = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
                z = nisa.activation_reduce(op=nl.exp, data=t, reduce_op=nl.add, reduce_res=r, bias=col,
                                           scale=col, mask=m)
                nl.store(o2[i * 128 + ip, jf], value=z, mask=m)
                nl.store(sums[i * 128 + ip, 0], value=r, mask=m)
                u = nisa.tensor_scalar(t, np.multiply, col, op1=np.add, operand1=col[ip, 0], mask=m)
                nl.store(o3[i * 128 + ip, jf], value=u, mask=m)
            return o1, o2, o3, sums
    """, {"a": a, "c": c})
    cc = np.concatenate([c, c[:64]])
    np.testing.assert_allclose(res["o1"], np.sqrt(a * 2.0 + cc), rtol=1e-6)
    e = np.exp(a * cc + cc)
    np.testing.assert_allclose(res["o2"], e, rtol=2e-6)
    np.testing.assert_allclose(res["sums"][:, 0], e.sum(axis=1), rtol=1e-5)
    np.testing.assert_array_equal(res["o3"], a * cc + cc)


def test_reciprocal_and_stream_shuffle(tmp_path):
    a = rand(64, 8, lo=0.5, hi=3.0)
    res = run(tmp_path, """
        @nki.jit
        def k(a):
            rec = nl.ndarray((64, 8), dtype=nl.float32, buffer=nl.shared_hbm)
            shuf = nl.ndarray((64, 8), dtype=nl.float32, buffer=nl.shared_hbm)
            x = nl.load(a)
            nl.store(rec, value=nisa.reciprocal(x))
            y = nisa.memset((64, 8), -1.0, nl.float32)
            nisa.nc_stream_shuffle(x, y, [31 - i if i % 4 else 255 for i in range(32)])
            nl.store(shuf, value=y)
            return rec, shuf
    """, {"a": a})
    np.testing.assert_allclose(res["rec"], 1 / a, rtol=1e-6)
    want = np.full((64, 8), -1.0, np.float32)
    for q in (0, 32):
        for i in range(32):
            if i % 4:
                want[q + i] = a[q + 31 - i]
    assert np.array_equal(res["shuf"], want)


@pytest.mark.parametrize("call, message", [
    ("nisa.tensor_copy(x, dst=x)", "nisa.tensor_copy: unknown keyword argument 'dst'"),
    ("nisa.tensor_scalar(x, np.add, 1.0, False, None, None, False, nl.float32)", "too many positional"),
    ("nisa.scalar_tensor_tensor(x, np.add, 1.0, np.add, x)", "too many positional"),
    ("nisa.nc_matmul(x, x, mask=(nl.arange(128)[:, None] < 64))", "not supported: nisa.nc_matmul mask="),
    ("nisa.activation(nl.exp, x, reduce_op=nl.add, reduce_res=x, reduce_cmd=nisa.reduce_cmd.load_reduce)",
     "nisa.activation reduce_cmd=nisa.reduce_cmd.load_reduce"),
    ("nisa.tensor_reduce(np.add, x, axis=0)", "nisa.tensor_reduce along the partition axis"),
    ("nisa.tensor_copy_dynamic_dst(dst=nl.zeros((128, 64), dtype=nl.float32, buffer=nl.psum)[nl.arange(128)[:, None], "
     "nisa.memset((1, 1), 3, nl.int32)[0, 0] + nl.arange(8)[None, :]], src=x)", "a DMA does not reach PSUM"),
])
def test_refusals_name_the_call_at_its_line(tmp_path, call, message):
    path = tmp_path / "bad.py"
    path.write_text(HEADER + textwrap.dedent(f"""
        @nki.jit
        def k(a):
            out = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.shared_hbm)
            x = nl.load(a)
            {call}
            nl.store(out, value=x)
            return out
    """))
    with pytest.raises(TraceError) as err:
        trace_file(path, "k", ["f32[128,8]"])
    assert message in str(err.value) and "bad.py:10:" in str(err.value)


def test_an_instruction_label_name_is_accepted_and_changes_nothing(tmp_path):
    x = rand(32, 48)
    out = run(tmp_path, """
        @nki.jit
        def k(x):
            out = nl.ndarray((32, 48), dtype=nl.float32, buffer=nl.shared_hbm)
            s = nl.ndarray((32, 1), dtype=nl.float32, buffer=nl.sbuf)
            t = nisa.tensor_scalar_reduce(data=nl.load(x), op0=nl.multiply, operand0=2.0, reduce_op=nl.add,
                                          reduce_res=s, name="scaled")
            nl.store(out, nisa.tensor_tensor(t, s, nl.add, name="plus_sum"))
            return out
    """, {"x": x})
    np.testing.assert_allclose(out["out"], 2 * x + (2 * x).sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-5)


def test_tensor_tensor_broadcasts_size_1_free_axes_and_a_3d_mgrid_subscript_keeps_its_unit_axis(tmp_path):
    # gpt-oss's legacy (1.x) rmsnorm and decode kernels: w[i_p, i_f] with i_p, i_b, i_f from a 3-axis
    # nl.mgrid is [P, 1, F] (numpy's advanced indexing), and nisa.tensor_tensor broadcasts it along B, as it
    # does q [P, B, H] times k.reshape((P, B, 1)); both were refused ("tensor_tensor of [128, 4, 8] and
    # [128, 8] tiles")
    x, w, c = rand(128, 4, 8), rand(128, 8), rand(128, 4)
    got = run(tmp_path, """
        @nki.jit
        def k(x, w, c):
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            out2 = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            xt, wt, ct = nl.load(x), nl.load(w), nl.load(c)
            i_p, i_b, i_f = nl.mgrid[0:128, 0:4, 0:8]
            assert wt[i_p, i_f].shape == (128, 1, 8) and ct[i_p, i_b].shape == (128, 4, 1)
            nl.store(out, nisa.tensor_tensor(xt[i_p, i_b, i_f], wt[i_p, i_f], nl.multiply))
            nl.store(out2, nisa.tensor_tensor(ct.reshape((128, 4, 1)), xt, nl.subtract))
            return out, out2
    """, {"x": x, "w": w, "c": c})
    np.testing.assert_array_equal(got["out"], x * w[:, None, :])
    np.testing.assert_array_equal(got["out2"], c[:, :, None] - x)


def test_a_matmul_result_lands_in_a_3d_psum_view_and_an_assignment_broadcasts_size_1_axes(tmp_path):
    # gpt-oss's legacy decode core: qk_psum[...] = nisa.nc_matmul(ones, qk_mul) with qk_mul [D, B, H] (the
    # result keeps the moving tile's free axes, [1, B, H]; it was [1, B * H]) and qk[:, :, :, 1] =
    # nl.load(sink.reshape((1, 1, H))) filling every batch (numpy's assignment broadcasting); both were refused
    x, sink = rand(64, 2, 4), rand(1, 1, 4)
    got = run(tmp_path, """
        @nki.jit
        def k(x, sink):
            out = nl.ndarray((1, 2, 4, 2), dtype=x.dtype, buffer=nl.shared_hbm)
            ones = nl.ones((64, 1), dtype=nl.float32)
            ps = nl.ndarray((1, 2, 4), dtype=nl.float32, buffer=nl.psum)
            ps[...] = nisa.nc_matmul(ones, nl.load(x), is_stationary_onezero=True)
            both = nl.ndarray((1, 2, 4, 2), dtype=nl.float32, buffer=nl.sbuf)
            both[:, :, :, 0] = nl.copy(ps)
            both[:, :, :, 1] = nl.load(sink)
            nl.store(out, both)
            return out
    """, {"x": x, "sink": sink})["out"]
    np.testing.assert_allclose(got[0, :, :, 0], x.sum(axis=0), rtol=1e-5)
    np.testing.assert_array_equal(got[0, :, :, 1], np.broadcast_to(sink[0], (2, 4)))


def test_tensor_tensor_of_equal_size_tiles_whose_size_1_axes_differ_broadcasts_numpys_way(tmp_path):
    a, b = rand(4, 1, 3), rand(4, 3, 1)
    got = run(tmp_path, """
        @nki.jit
        def k(a, b):
            out = nl.ndarray((4, 3, 3), dtype=nl.float32, buffer=nl.shared_hbm)
            nl.store(out, nisa.tensor_tensor(nl.load(a), nl.load(b), op=np.multiply))
            return out
    """, {"a": a, "b": b})
    np.testing.assert_array_equal(got["out"], a * b)


# NKI 1.x's copies at a place inside each partition read at run time: the SBUF tile's free-axis subscript
# holds a runtime coordinate (indices plus a one-element int tile, or the tile alone), as on an HBM tensor
def test_tensor_copy_dynamic_src_reads_the_columns_its_offsets_name(tmp_path):
    x = (np.arange(64 * 40, dtype=np.float32).reshape(64, 40) % 13 - 6) / 4  # exact in bfloat16
    y = rand(64, 40, 3)
    offs = np.array([[3, 0, 39, 3, 17, 8]], np.int32)
    got = run(tmp_path, """
        @nki.jit
        def k(x, y, offs):
            out = nl.ndarray((64, 6), dtype=nl.bfloat16, buffer=nl.shared_hbm)
            out3 = nl.ndarray((64, 6, 3), dtype=y.dtype, buffer=nl.shared_hbm)
            t, u, o = nl.load(x), nl.load(y), nl.load(offs)
            got = nl.ndarray((64, 6), dtype=nl.bfloat16, buffer=nl.sbuf)
            got3 = nl.ndarray((64, 6, 3), dtype=y.dtype, buffer=nl.sbuf)
            ip, jf = nl.mgrid[0:64, 0:1]
            i3, _, iz = nl.mgrid[0:64, 0:1, 0:3]
            for k in nl.affine_range(6):
                got[ip, k] = nisa.tensor_copy_dynamic_src(t[ip, o[0, k] + jf], dtype=nl.bfloat16)
                got3[i3, k, iz] = nisa.tensor_copy_dynamic_src(u[i3, o[0, k], iz])
            nl.store(out, got)
            nl.store(out3, got3)
            return out, out3
    """, {"x": x, "y": y, "offs": offs}, ["f32[64,40]", "f32[64,40,3]", "i32[1,6]"])
    np.testing.assert_array_equal(got["out"].astype(np.float32), x[:, offs[0]])
    np.testing.assert_array_equal(got["out3"], y[:, offs[0]])


def test_tensor_copy_dynamic_dst_writes_each_pair_of_columns_where_its_offset_says(tmp_path):
    x = rand(16, 6)
    offs = np.array([[20, 0, 9]], np.int32)
    got = run(tmp_path, """
        @nki.jit
        def k(x, offs):
            acc = nl.zeros((16, 24), dtype=x.dtype, buffer=nl.sbuf)
            t, o = nl.load(x), nl.load(offs)
            ip, jf = nl.mgrid[0:16, 0:2]
            for k in nl.affine_range(3):
                nisa.tensor_copy_dynamic_dst(dst=acc[ip, o[0, k] + jf], src=t[ip, 2 * k + jf])
            out = nl.ndarray((16, 24), dtype=x.dtype, buffer=nl.shared_hbm)
            nl.store(out, acc)
            return out
    """, {"x": x, "offs": offs}, ["f32[16,6]", "i32[1,3]"])
    want = np.zeros((16, 24), np.float32)
    for k, o in enumerate(offs[0]):
        want[:, o:o + 2] = x[:, 2 * k:2 * k + 2]
    np.testing.assert_array_equal(got["out"], want)



def test_iota_offset_by_a_loop_index_gives_each_iteration_its_own_values(tmp_path):
    x = rand(32, 8)
    got = run(tmp_path, """
        @nki.jit
        def k(x):
            ip, jf = nl.mgrid[0:32, 0:8]
            t = nl.load(x)
            out = nl.ndarray((4, 32, 8), dtype=nl.float32, buffer=nl.shared_hbm)
            for i in nl.affine_range(4):
                ramp = nisa.iota(i * 1000 + ip * 8 + jf, dtype=nl.float32)
                nl.store(out[i], nl.add(t, ramp))
            return out
    """, {"x": x})["out"]
    ramp = np.arange(32 * 8, dtype=np.float32).reshape(32, 8)
    np.testing.assert_array_equal(got, [x + (1000 * i + ramp) for i in range(4)])
