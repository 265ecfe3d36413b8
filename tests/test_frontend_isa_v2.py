"""NKI 2.x ``nki.isa`` (``import nki.isa as nisa``): every supported call in a small kernel, traced to KLR,
translated and run in the interpreter against numpy; the documented signatures bind positional and
keyword arguments; an unknown keyword or an unsupported value is refused at the kernel's line."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

from tusk.frontend import TraceError, trace_file
from tusk.frontend.check import run_klr

HEADER = """\
import numpy as np
import nki
import nki.isa as nisa
import nki.language as nl
"""

RNG = np.random.default_rng(20)


def run(tmp_path, body: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Trace kernel ``k`` (the body, arguments in ``inputs`` order) and run it on ``inputs``."""
    path = tmp_path / "k.py"
    path.write_text(HEADER + textwrap.dedent(body))
    specs = [f"f32[{','.join(map(str, a.shape))}]" for a in inputs.values()]
    return run_klr(trace_file(path, "k", specs), inputs)


def refused(tmp_path, body: str, specs: list[str]) -> str:
    path = tmp_path / "bad.py"
    path.write_text(HEADER + textwrap.dedent(body))
    with pytest.raises(TraceError) as err:
        trace_file(path, "k", specs)
    return str(err.value)


def rand(*shape: int, lo: float = -2.0, hi: float = 2.0) -> np.ndarray:
    return RNG.uniform(lo, hi, size=shape).astype(np.float32)


def test_dma_copy_tensor_copy_and_memset_by_keyword_and_dst_first(tmp_path):
    a = rand(128, 64)
    got = run(tmp_path, """
        @nki.jit
        def k(a):
            out = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.shared_hbm)
            t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=a)
            y = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=y, src=t)
            z = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
            nisa.memset(z, 3.0)
            nisa.tensor_tensor(z[:, 0:32], y[:, 0:32], z[:, 0:32], nl.add)
            nisa.dma_copy(out, z)
            return out
    """, {"a": a})["out"]
    want = np.full((128, 64), 3.0, np.float32)
    want[:, :32] += a[:, :32]
    assert np.array_equal(got, want)


def test_dma_copy_between_a_3_axis_tile_and_tensor_rows(tmp_path):
    a = rand(128, 512)
    got = run(tmp_path, """
        @nki.jit
        def k(a):
            out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
            t = nl.ndarray((128, 4, 128), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=a)
            nisa.dma_copy(dst=out, src=t)
            return out
    """, {"a": a})["out"]
    assert np.array_equal(got, a)


def test_dma_copy_converts_dtypes_through_float32(tmp_path):
    a = rand(64, 32)
    got = run(tmp_path, """
        @nki.jit
        def k(a):
            out = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.shared_hbm)
            t = nl.ndarray((64, 32), dtype=nl.bfloat16, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=a)
            nisa.dma_copy(dst=out, src=t)
            return out
    """, {"a": a})["out"]
    bf16 = (a.view(np.uint32) + 0x7FFF + ((a.view(np.uint32) >> 16) & 1)) & 0xFFFF0000
    assert np.array_equal(got, bf16.view(np.float32))


def test_nc_matmul_dst_first_accumulates_over_a_k_loop(tmp_path):
    """The 2.x tiled-matmul shape: the PSUM tile is made outside the k loop; nc_matmul(dst, st, mv)
    overwrites on the first iteration and accumulates on the rest (NKI's inferred accumulate flag)."""
    lhsT, rhs = rand(384, 128), rand(384, 256)
    got = run(tmp_path, """
        @nki.jit
        def k(lhsT, rhs):
            K, M = lhsT.shape
            N = rhs.shape[1]
            out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
            acc = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)
            for kk in nl.affine_range(K // 128):
                a = nl.ndarray((128, M), dtype=nl.float32, buffer=nl.sbuf)
                b = nl.ndarray((128, N), dtype=nl.float32, buffer=nl.sbuf)
                nisa.dma_copy(dst=a, src=lhsT[kk * 128:(kk + 1) * 128, :])
                nisa.dma_copy(dst=b, src=rhs[kk * 128:(kk + 1) * 128, :])
                nisa.nc_matmul(acc, a, b)
            res = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(res, acc)
            nisa.dma_copy(dst=out, src=res)
            return out
    """, {"lhsT": lhsT, "rhs": rhs})["out"]
    np.testing.assert_allclose(got, lhsT.T.astype(np.float64) @ rhs, rtol=1e-5, atol=1e-4)


def test_nc_matmul_explicit_accumulate_flags_in_an_unrolled_loop(tmp_path):
    lhsT, rhs = rand(256, 64), rand(256, 128)
    got = run(tmp_path, """
        @nki.jit
        def k(lhsT, rhs):
            out = nl.ndarray((64, 128), dtype=nl.float32, buffer=nl.shared_hbm)
            acc = nl.ndarray((64, 128), dtype=nl.float32, buffer=nl.psum)
            for kk in range(2):
                a = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
                b = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
                nisa.dma_copy(dst=a, src=lhsT[kk * 128:(kk + 1) * 128, :])
                nisa.dma_copy(dst=b, src=rhs[kk * 128:(kk + 1) * 128, :])
                nisa.nc_matmul(dst=acc, stationary=a, moving=b, accumulate=(kk > 0))
            res = nl.ndarray((64, 128), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res, src=acc)
            nisa.dma_copy(dst=out, src=res)
            return out
    """, {"lhsT": lhsT, "rhs": rhs})["out"]
    np.testing.assert_allclose(got, lhsT.T.astype(np.float64) @ rhs, rtol=1e-5, atol=1e-4)


def test_nc_transpose_into_psum_and_sbuf(tmp_path):
    a = rand(64, 96)
    got = run(tmp_path, """
        @nki.jit
        def k(a):
            out = nl.ndarray((96, 64), dtype=nl.float32, buffer=nl.shared_hbm)
            t = nl.ndarray((64, 96), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=a)
            p = nl.ndarray((96, 64), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_transpose(p, t)
            s = nl.ndarray((96, 64), dtype=nl.float32, buffer=nl.sbuf)
            nisa.nc_transpose(dst=s, data=t, engine=nisa.vector_engine)
            nisa.tensor_tensor(dst=s, data1=s, data2=p, op=nl.add)
            nisa.dma_copy(dst=out, src=s)
            return out
    """, {"a": a})["out"]
    np.testing.assert_allclose(got, 2 * a.T, rtol=1e-6)


def test_tensor_scalar_with_columns_and_reverse(tmp_path):
    a, c = rand(128, 40), rand(128, 1, lo=0.5, hi=2.0)
    got = run(tmp_path, """
        @nki.jit
        def k(a, c):
            out = nl.ndarray((128, 40), dtype=nl.float32, buffer=nl.shared_hbm)
            t = nl.ndarray((128, 40), dtype=nl.float32, buffer=nl.sbuf)
            col = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=a)
            nisa.dma_copy(dst=col, src=c)
            y = nl.ndarray((128, 40), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_scalar(y, t, np.subtract, col, True, nl.multiply, 3.0)
            nisa.dma_copy(dst=out, src=y)
            return out
    """, {"a": a, "c": c})["out"]
    np.testing.assert_allclose(got, (c - a) * 3.0, rtol=1e-6)


def test_activation_with_a_tile_scale_a_float_bias_and_a_reduction(tmp_path):
    a, s = rand(128, 64), rand(128, 1, lo=0.1, hi=1.0)
    res = run(tmp_path, """
        @nki.jit
        def k(a, s):
            out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
            total = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
            t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
            sc = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=a)
            nisa.dma_copy(dst=sc, src=s)
            y = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
            r = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.activation(y, nl.exp, t, bias=0.5, scale=sc, reduce_op=nl.add, reduce_res=r,
                            reduce_cmd=nisa.reduce_cmd.reset_reduce)
            nisa.dma_copy(dst=out, src=y)
            nisa.dma_copy(dst=total, src=r)
            return out, total
    """, {"a": a, "s": s})
    want = np.exp(a * s + 0.5)
    np.testing.assert_allclose(res["out"], want, rtol=2e-6)
    np.testing.assert_allclose(res["total"], want.sum(axis=1, keepdims=True), rtol=1e-5)


def test_activation_reduce_and_exponential(tmp_path):
    a, m = rand(64, 32), rand(64, 1)
    res = run(tmp_path, """
        @nki.jit
        def k(a, m):
            out = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.shared_hbm)
            sums = nl.ndarray((64, 2), dtype=nl.float32, buffer=nl.shared_hbm)
            t = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.sbuf)
            mx = nl.ndarray((64, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=a)
            nisa.dma_copy(dst=mx, src=m)
            y = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.sbuf)
            r = nl.ndarray((64, 2), dtype=nl.float32, buffer=nl.sbuf)
            nisa.activation_reduce(y, nl.tanh, t, nl.add, r[:, 0:1])
            e = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.sbuf)
            nisa.exponential(e, t, max_value=mx, reduce_res=r[:, 1:2], reduce_cmd=nisa.reduce_cmd.reset_reduce)
            nisa.tensor_tensor(y, y, e, nl.add)
            nisa.dma_copy(dst=out, src=y)
            nisa.dma_copy(dst=sums, src=r)
            return out, sums
    """, {"a": a, "m": m})
    th, ex = np.tanh(a), np.exp(a - m)
    np.testing.assert_allclose(res["out"], th + ex, rtol=2e-6, atol=1e-6)
    np.testing.assert_allclose(res["sums"][:, 0], th.sum(axis=1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(res["sums"][:, 1], ex.sum(axis=1), rtol=1e-5)


def test_tensor_scalar_takes_the_unary_square_relu_and_reciprocal_as_op0(tmp_path):
    # NKI's ALU table lists square, relu and reciprocal as "Arithmetic Unary" operators (0.4.0: square and
    # relu as tensor_scalar's / tensor_scalar_reduce's op0); their operand0 must be None or 0 and is ignored
    a = rand(128, 16)
    col = rand(128, 1, lo=0.5, hi=2.0)
    res = run(tmp_path, """
        @nki.jit
        def k(a, c):
            out = nl.ndarray((128, 100), dtype=nl.float32, buffer=nl.shared_hbm)
            t = nl.ndarray((128, 16), dtype=nl.bfloat16, buffer=nl.sbuf)
            cc = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=a)
            nisa.dma_copy(dst=cc, src=c)
            y = nl.ndarray((128, 100), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_scalar(y[:, 0:16], t, nl.square, 0.0, op1=nl.subtract, operand1=cc, reverse1=True)
            nisa.tensor_scalar(y[:, 16:32], t, nl.relu, None, op1=nl.multiply, operand1=3.0)
            nisa.tensor_scalar(dst=y[:, 32:48], data=t, op0=nl.reciprocal, operand0=0, reverse0=True)
            nisa.tensor_scalar_reduce(dst=y[:, 48:64], data=t, op0=nl.square, operand0=0.0, reduce_op=nl.add,
                                      reduce_res=y[:, 96:97])
            nisa.tensor_scalar_reduce(dst=y[:, 64:80], data=t, op0=nl.relu, operand0=0.0, reduce_op=nl.maximum,
                                      reduce_res=y[:, 97:98])
            # a chain on the Vector engine's registers: the squares' sum continues into the next reduction
            nisa.tensor_scalar_reduce(dst=y[:, 80:96], data=t, op0=nl.square, operand0=0.0, reduce_op=nl.add,
                                      reduce_res=None, reduce_cmd=nisa.reduce_cmd.reset_reduce)
            nisa.tensor_scalar_reduce(dst=y[:, 80:96], data=t, op0=nl.relu, operand0=0.0, reduce_op=nl.add,
                                      reduce_res=y[:, 98:99], reduce_cmd=nisa.reduce_cmd.reduce)
            nisa.memset(y[:, 99:100], 0.0)
            nisa.dma_copy(dst=out, src=y)
            return out
    """, {"a": a, "c": col})["out"]
    x = a.astype(np.float32)
    x = (x.view(np.uint32) + 0x7FFF + ((x.view(np.uint32) >> 16) & 1) & 0xFFFF0000).view(np.float32)  # bf16
    sq, relu = x * x, np.maximum(x, 0)
    np.testing.assert_allclose(res[:, 0:16], col - sq, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(res[:, 16:32], relu * 3)
    np.testing.assert_array_equal(res[:, 32:48], np.float32(1) / x)
    np.testing.assert_array_equal(res[:, 48:64], sq)
    np.testing.assert_allclose(res[:, 96], sq.sum(1), rtol=1e-5)
    np.testing.assert_array_equal(res[:, 64:80], relu)
    np.testing.assert_array_equal(res[:, 97], relu.max(1))
    np.testing.assert_array_equal(res[:, 80:96], relu)
    np.testing.assert_allclose(res[:, 98], sq.sum(1) + relu.sum(1), rtol=1e-5)
    for call, message in [
        ("nisa.tensor_scalar(dst=y, data=t, op0=nl.relu, operand0=2.0)",
         "operand0=2.0 (op0=nl.relu is a unary operator: NKI requires operand0 None or 0)"),
        ("nisa.tensor_scalar(dst=y, data=t, op0=nl.add, operand0=1.0, op1=nl.square, operand1=0.0)",
         "op1='nl.square' (NKI takes square, relu and reciprocal as op0"),
    ]:
        err = refused(tmp_path, f"""
            @nki.jit
            def k(a):
                out = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.shared_hbm)
                t = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
                y = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
                nisa.dma_copy(dst=t, src=a)
                {call}
                nisa.dma_copy(dst=out, src=y)
                return out
        """, ["f32[128,8]"])
        assert message in err, err
        assert "bad.py:12" in err, err


def test_tensor_reduce_over_a_middle_axis_and_tensor_scalar_reduce(tmp_path):
    a = rand(32, 6, 10)
    res = run(tmp_path, """
        @nki.jit
        def k(a):
            mid = nl.ndarray((32, 10), dtype=nl.float32, buffer=nl.shared_hbm)
            red = nl.ndarray((32, 1), dtype=nl.float32, buffer=nl.shared_hbm)
            sq = nl.ndarray((32, 60), dtype=nl.float32, buffer=nl.shared_hbm)
            t = nl.ndarray((32, 6, 10), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=a)
            m = nl.ndarray((32, 10), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_reduce(m, nl.maximum, t, axis=1)
            nisa.dma_copy(dst=mid, src=m)
            y = nl.ndarray((32, 60), dtype=nl.float32, buffer=nl.sbuf)
            r = nl.ndarray((32, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_scalar_reduce(dst=y, data=t, op0=nl.multiply, operand0=2.0, reduce_op=nl.add,
                                      reduce_res=r, reduce_res_negate=True)
            nisa.dma_copy(dst=red, src=r)
            nisa.dma_copy(dst=sq, src=y)
            return mid, red, sq
    """, {"a": a})
    assert np.array_equal(res["mid"], a.max(axis=1))
    np.testing.assert_allclose(res["red"][:, 0], -(2 * a).sum(axis=(1, 2)), rtol=1e-5, atol=1e-5)
    assert np.array_equal(res["sq"], 2 * a.reshape(32, 60))


def test_scalar_tensor_tensor_and_tensor_tensor_scan(tmp_path):
    a, b = rand(16, 24), rand(16, 24, lo=0.5, hi=1.0)
    res = run(tmp_path, """
        @nki.jit
        def k(a, b):
            stt = nl.ndarray((16, 24), dtype=nl.float32, buffer=nl.shared_hbm)
            scan = nl.ndarray((16, 24), dtype=nl.float32, buffer=nl.shared_hbm)
            x = nl.ndarray((16, 24), dtype=nl.float32, buffer=nl.sbuf)
            y = nl.ndarray((16, 24), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=x, src=a)
            nisa.dma_copy(dst=y, src=b)
            o = nl.ndarray((16, 24), dtype=nl.float32, buffer=nl.sbuf)
            nisa.scalar_tensor_tensor(o, x, nl.add, 1.0, nl.subtract, y, reverse1=True)
            nisa.dma_copy(dst=stt, src=o)
            s = nl.ndarray((16, 24), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_tensor_scan(s, y, x, 0.5, nl.multiply, nl.add)
            nisa.dma_copy(dst=scan, src=s)
            return stt, scan
    """, {"a": a, "b": b})
    np.testing.assert_allclose(res["stt"], b - (a + 1.0), rtol=1e-6)
    want = np.empty_like(a)
    prev = np.full(16, 0.5, np.float32)
    for i in range(24):
        prev = (b[:, i] * prev + a[:, i]).astype(np.float32)
        want[:, i] = prev
    np.testing.assert_allclose(res["scan"], want, rtol=1e-6, atol=1e-6)


def test_iota_and_reciprocal(tmp_path):
    a = rand(128, 8, lo=0.5, hi=4.0)
    res = run(tmp_path, """
        @nki.jit
        def k(a):
            idx = nl.ndarray((128, 12), dtype=nl.float32, buffer=nl.shared_hbm)
            rec = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.shared_hbm)
            i = nl.ndarray((128, 3, 4), dtype=nl.int32, buffer=nl.sbuf)
            nisa.iota(i, [[10, 3], [1, 4]], offset=5, channel_multiplier=100)
            f = nl.ndarray((128, 12), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(f, i)
            nisa.dma_copy(dst=idx, src=f)
            t = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=a)
            r = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
            nisa.reciprocal(r, t)
            nisa.dma_copy(dst=rec, src=r)
            return idx, rec
    """, {"a": a})
    p, y, x = np.meshgrid(np.arange(128), np.arange(3), np.arange(4), indexing="ij")
    assert np.array_equal(res["idx"], (5 + 100 * p + 10 * y + x).reshape(128, 12).astype(np.float32))
    np.testing.assert_allclose(res["rec"], 1.0 / a, rtol=1e-6)


def test_enums_and_nc_version_are_there(tmp_path):
    a = rand(8, 8)
    got = run(tmp_path, """
        @nki.jit
        def k(a):
            assert nisa.get_nc_version() in (nisa.nc_version.gen2, nisa.nc_version.gen3, nisa.nc_version.gen4)
            assert nisa.engine.vector != nisa.engine.scalar and nisa.oob_mode.skip and nisa.dge_mode.hwdge
            out = nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.shared_hbm)
            t = nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=a, dge_mode=nisa.dge_mode.hwdge, oob_mode=nisa.oob_mode.skip)
            nisa.tensor_copy(dst=t, src=t, engine=nisa.engine.gpsimd, dtype=nl.float32)  # restates dst's
            nisa.dma_copy(dst=out, src=t)
            return out
    """, {"a": a})["out"]
    assert np.array_equal(got, a)


@pytest.mark.parametrize("call, message", [
    ("nisa.tensor_copy(dst=y, src=t, dtype=nl.bfloat16)",
     "not supported: nisa.tensor_copy dtype=nl.bfloat16 (a 2.x call writes dst's dtype"),
    ("nisa.tensor_copy(dst=y, src=t, dtpye=nl.float32)",
     "nisa.tensor_copy: unknown keyword argument 'dtpye'"),
    ("nisa.tensor_copy(y, t, nisa.engine.vector, 'n', 5)", "nisa.tensor_copy(dst, src, engine="),
    ("nisa.nc_matmul(p, t)", "missing a required argument: 'moving'"),
    ("nisa.nc_matmul(p, t, t, perf_mode=nisa.matmul_perf_mode.double_row)",
     "not supported: nisa.nc_matmul perf_mode=double_row: stationary [128, 8] and moving [128, 8]"),
    ("nisa.activation(y, nl.exp, t, reduce_op=nl.add, reduce_res=c, reduce_cmd=nisa.reduce_cmd.reduce)",
     "not supported: nisa.activation reduce_cmd=nisa.reduce_cmd.reduce"),
    ("nisa.tensor_copy(dst=y[:, 0:3], src=t)", "nisa.tensor_copy: dst [128, 3] and src [128, 8]"),
    ("nisa.nonzero_with_count(y, t)", "not supported: nisa.nonzero_with_count"),
    # NKI calls no KLR form expresses: the refusal says so
    ("nisa.topk(val_dst=y, idx_dst=y, src=t, n=16)",
     "not supported: nisa.topk (the GpSimd engine's top-k over a 16-partition snake has no KLR operator"),
    ("nisa.tensor_copy(dst=y, src=t.indirect(c, num_elem=8))",
     "not supported: tensor.indirect (NeuronCore-v4 Tensor Indirection"),
])
def test_unknown_keywords_and_unsupported_values_are_refused_at_the_call(tmp_path, call, message):
    err = refused(tmp_path, f"""
        @nki.jit
        def k(a):
            out = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.shared_hbm)
            t = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
            y = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
            c = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
            p = nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.psum)
            nisa.dma_copy(dst=t, src=a)
            {call}
            nisa.dma_copy(dst=out, src=y)
            return out
    """, ["f32[128,8]"])
    assert message in err
    assert "bad.py:14:" in err  # the call's own line


def test_an_unknown_isa_name_imported_is_refused_at_the_line_that_calls_it(tmp_path):
    err = refused(tmp_path, """
        from nki.isa import tensor_copy, no_such_instruction
        @nki.jit
        def k(a):
            no_such_instruction(a)
            return a
    """, ["f32[8,8]"])
    assert "bad.py:9:" in err and "nki.isa.no_such_instruction" in err


def test_nc_matmul_transpose_mode_marks_the_klr_matmul(tmp_path):
    a = rand(32, 48)
    path = tmp_path / "k.py"
    path.write_text(HEADER + textwrap.dedent("""
        @nki.jit
        def k(a):
            out = nl.ndarray((48, 32), dtype=nl.float32, buffer=nl.shared_hbm)
            t = nl.ndarray((32, 48), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=a)
            d = nl.ndarray((32, 32), dtype=nl.int32, buffer=nl.sbuf)
            nisa.iota(d, [[-1, 32]], channel_multiplier=1)
            eye = nl.ndarray((32, 32), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_scalar(eye, d, nl.equal, 0)
            p = nl.ndarray((48, 32), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_matmul(p, t, eye, is_transpose=True)
            s = nl.ndarray((48, 32), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(s, p)
            nisa.dma_copy(dst=out, src=s)
            return out
    """))
    data = trace_file(path, "k", ["f32[32,48]"])
    from tusk.ir import klr
    kern = klr.read_klr(data).contents.kernel
    mms = [s.op.op for b in kern.bodies for blk in b for s in blk.body if type(s.op.op).__name__ == "NcMatMul"]
    assert [m.isTranspose for m in mms] == [True]
    assert np.array_equal(run_klr(data, {"a": a})["out"], a.T)


def test_activate2_computes_nl_prelu_with_a_number_or_column_relu_param(tmp_path):
    # nl.prelu (NKI 0.4.0): the activation function whose slope for negative inputs is relu_param, which
    # only activate2 has: v if v >= 0 else relu_param * v, v = (data op0 imm0) op1 imm1
    a = rand(128, 16)
    col = rand(128, 1, lo=0.1, hi=0.5)
    res = run(tmp_path, """
        @nki.jit
        def k(a, c):
            out = nl.ndarray((128, 49), dtype=nl.float32, buffer=nl.shared_hbm)
            t = nl.ndarray((128, 16), dtype=nl.float32, buffer=nl.sbuf)
            cc = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=a)
            nisa.dma_copy(dst=cc, src=c)
            y = nl.ndarray((128, 49), dtype=nl.float32, buffer=nl.sbuf)
            nisa.activate2(dst=y[:, 0:16], op=nl.prelu, data=t, imm0=2.0, imm1=0.5, op0=nl.multiply, op1=nl.add,
                           relu_param=0.25)
            nisa.activate2(y[:, 16:32], nl.prelu, t, 1.0, 0.0, nl.subtract, nl.bypass, relu_param=cc,
                           reduce_op=nl.add, reduce_res=y[:, 48:49], reduce_cmd=nisa.reduce_cmd.reset_reduce)
            b = nl.ndarray((128, 16), dtype=nl.bfloat16, buffer=nl.sbuf)
            nisa.activate2(b, nl.prelu, t, 0.0, 0.0, nl.bypass, nl.bypass, relu_param=-3.0)
            nisa.tensor_copy(dst=y[:, 32:48], src=b)
            nisa.dma_copy(dst=out, src=y)
            return out
    """, {"a": a, "c": col})["out"]

    def prelu(v, slope):
        return np.where(v >= 0, v, slope * v).astype(np.float32)

    np.testing.assert_array_equal(res[:, 0:16], prelu(a * np.float32(2) + np.float32(0.5), np.float32(0.25)))
    np.testing.assert_array_equal(res[:, 16:32], prelu(a - np.float32(1), col))
    np.testing.assert_allclose(res[:, 48], prelu(a - np.float32(1), col).sum(1), rtol=1e-5)
    want = prelu(a, np.float32(-3)).view(np.uint32)
    want = ((want + 0x7FFF + ((want >> 16) & 1)) & 0xFFFF0000).view(np.float32)  # rounded to bfloat16
    np.testing.assert_array_equal(res[:, 32:48], want)
    err = refused(tmp_path, """
        @nki.jit
        def k(a):
            t = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=a)
            nisa.activation(dst=t, op=nl.prelu, data=t)
            return a
    """, ["f32[128,8]"])
    assert "bad.py:10: not supported: nisa.activation op nl.prelu (its negative slope is nisa.activate2's " \
        "relu_param" in err, err


def test_activate2_and_exponential_from_a_loaded_sum(tmp_path):
    a, s, z = rand(32, 24), rand(32, 1, lo=0.5, hi=1.5), rand(32, 1)
    res = run(tmp_path, """
        @nki.jit
        def k(a, s, z):
            act = nl.ndarray((32, 24), dtype=nl.float32, buffer=nl.shared_hbm)
            sums = nl.ndarray((32, 2), dtype=nl.float32, buffer=nl.shared_hbm)
            x = nl.ndarray((32, 24), dtype=nl.float32, buffer=nl.sbuf)
            sc = nl.ndarray((32, 1), dtype=nl.float32, buffer=nl.sbuf)
            z0 = nl.ndarray((32, 1), dtype=nl.float32, buffer=nl.sbuf)
            for d, src in ((x, a), (sc, s), (z0, z)):
                nisa.dma_copy(dst=d, src=src)
            y = nl.ndarray((32, 24), dtype=nl.float32, buffer=nl.sbuf)
            r = nl.ndarray((32, 2), dtype=nl.float32, buffer=nl.sbuf)
            nisa.activate2(y, nl.tanh, x, sc, 0.25, nl.multiply, nl.subtract, reduce_op=nl.add, reduce_res=r[:, 0:1],
                           reduce_cmd=nisa.reduce_cmd.reset_reduce)
            e = nl.ndarray((32, 24), dtype=nl.float32, buffer=nl.sbuf)
            nisa.exponential(e, x, reduce_res=r[:, 1:2], reduce_cmd=nisa.reduce_cmd.load_reduce, reduce_init=z0)
            nisa.dma_copy(dst=act, src=y)
            nisa.dma_copy(dst=sums, src=r)
            return act, sums
    """, {"a": a, "s": s, "z": z})
    want = np.tanh(a * s - 0.25)
    np.testing.assert_allclose(res["act"], want, rtol=2e-6, atol=1e-6)
    np.testing.assert_allclose(res["sums"][:, 0], want.sum(axis=1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(res["sums"][:, 1], np.exp(a).sum(axis=1) + z[:, 0], rtol=1e-5)


def test_nl_bypass_passes_data_through_as_an_activation_and_as_an_alu_stage(tmp_path):
    a = rand(32, 24)
    res = run(tmp_path, """
        @nki.jit
        def k(a):
            o1 = nl.ndarray((32, 24), dtype=nl.float32, buffer=nl.shared_hbm)
            o2 = nl.ndarray((32, 24), dtype=nl.float32, buffer=nl.shared_hbm)
            x = nl.ndarray((32, 24), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=x, src=a)
            y = nl.ndarray((32, 24), dtype=nl.float32, buffer=nl.sbuf)
            nisa.activate2(dst=y, op=nl.bypass, data=x, op0=nl.multiply, imm0=2.0, op1=nl.add, imm1=1.0)
            z = nl.ndarray((32, 24), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_scalar(dst=z, data=x, op0=nl.multiply, operand0=3.0, op1=nl.bypass, operand1=5.0)
            nisa.dma_copy(dst=o1, src=y)
            nisa.dma_copy(dst=o2, src=z)
            return o1, o2
    """, {"a": a})
    np.testing.assert_array_equal(res["o1"], a * np.float32(2) + np.float32(1))
    np.testing.assert_array_equal(res["o2"], a * np.float32(3))
    msg = refused(tmp_path, """
        @nki.jit
        def k(a):
            y = nl.bypass(a)
    """, ["f32[32,24]"])
    assert "bad.py:8: not supported: calling nl.bypass (an operator for an ISA call's op=, op0= or op1=)" in msg, msg


def test_nc_stream_shuffle_moves_partitions_within_quadrants(tmp_path):
    a = rand(64, 8)
    got = run(tmp_path, """
        @nki.jit
        def k(a):
            out = nl.ndarray((64, 8), dtype=nl.float32, buffer=nl.shared_hbm)
            x = nl.ndarray((64, 8), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=x, src=a)
            y = nl.ndarray((64, 8), dtype=nl.float32, buffer=nl.sbuf)
            nisa.memset(y, 0.5)
            nisa.nc_stream_shuffle(y, x, [255 if i == 3 else (i + 1) % 32 for i in range(32)])
            nisa.dma_copy(dst=out, src=y)
            return out
    """, {"a": a})["out"]
    want = np.full((64, 8), 0.5, np.float32)
    for q in (0, 32):
        for i in range(32):
            if i != 3:
                want[q + i] = a[q + (i + 1) % 32]
    assert np.array_equal(got, want)


def test_nc_matmul_accumulate_flag_of_a_loop_index_comparison(tmp_path):
    """The NKI docs' hint, ``accumulate=(i > 0)`` in an affine_range loop: the comparison unrolls the loop,
    each iteration's flag is a Python bool."""
    lhsT, rhs = rand(384, 64), rand(384, 128)
    got = run(tmp_path, """
        @nki.jit
        def k(lhsT, rhs):
            out = nl.ndarray((64, 128), dtype=nl.float32, buffer=nl.shared_hbm)
            acc = nl.ndarray((64, 128), dtype=nl.float32, buffer=nl.psum)
            for kk in nl.affine_range(3):
                a = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
                b = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
                nisa.dma_copy(dst=a, src=lhsT[kk * 128:(kk + 1) * 128, :])
                nisa.dma_copy(dst=b, src=rhs[kk * 128:(kk + 1) * 128, :])
                nisa.nc_matmul(dst=acc, stationary=a, moving=b, accumulate=(kk > 0))
            res = nl.ndarray((64, 128), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res, src=acc)
            nisa.dma_copy(dst=out, src=res)
            return out
    """, {"lhsT": lhsT, "rhs": rhs})["out"]
    np.testing.assert_allclose(got, lhsT.T.astype(np.float64) @ rhs, rtol=1e-5, atol=1e-4)


def test_python_state_built_in_one_loop_and_indexed_in_the_next_traces_as_nki_2_runs_it(tmp_path):
    # NKI 2.x runs nl.affine_range as Python's range: a list filled in one loop and indexed by the next
    # loop's index must see every iteration (traced once per loop it held one tile: IndexError)
    a = rand(384, 64)
    got = run(tmp_path, """
        @nki.jit
        def k(a):
            out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            tiles = []
            for i in nl.affine_range(3):
                t = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=t, src=a[i * 128:(i + 1) * 128, :])
                tiles.append(t)
            for i in nl.affine_range(3):
                y = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.sbuf)
                nisa.tensor_scalar(dst=y, data=tiles[2 - i], op0=nl.add, operand0=float(i))
                nisa.dma_copy(dst=out[i * 128:(i + 1) * 128, :], src=y)
            return out
    """, {"a": a})["out"]
    want = np.concatenate([a[(2 - i) * 128:(3 - i) * 128] + i for i in range(3)])
    np.testing.assert_array_equal(got, want)


def test_a_kernel_error_that_unrolling_does_not_cure_is_reported_at_its_line(tmp_path):
    message = refused(tmp_path, """
        @nki.jit
        def k(a):
            out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            tiles = []
            for i in nl.affine_range(2):
                tiles.append(i)
            return out, tiles[5]
    """, ["f32[128,64]"])
    assert "bad.py:12: IndexError" in message, message  # the `return` line, from the first trace


def test_the_unrolled_traces_refusal_is_reported_not_the_loop_traces_python_error(tmp_path):
    """Traced with its loops kept, the kernel fails in Python (tiles[1] of a list of one); unrolled -- the
    program NKI runs -- it reaches a call Tusk refuses: that refusal is the error (nki-library qkv_cte, grid 2)."""
    message = refused(tmp_path, """
        @nki.jit
        def k(a):
            out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            tiles = []
            for i in nl.affine_range(2):
                tiles.append(nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.sbuf))
            for i in nl.affine_range(2):
                nisa.dma_copy(dst=tiles[i], src=a[:, i * 64:(i + 1) * 64])
                nisa.dma_copy(dst=out[:, i * 64:(i + 1) * 64], src=tiles[i])
            nisa.sendrecv(out, out, 1, 1, 0)
            return out
    """, ["f32[128,128]"])
    assert "bad.py:15: not supported: nisa.sendrecv" in message, message


@pytest.mark.parametrize("arch, doubled", [(None, False), ("trn2", False), ("trn3", True), ("gen2", False)])
def test_get_nc_version_answers_the_traced_architecture(tmp_path, arch, doubled):
    """A kernel's choice by NeuronCore generation follows ``--arch``, at the file's top level as in the kernel."""
    path = tmp_path / "k.py"
    path.write_text(HEADER + textwrap.dedent("""
        AT_LOAD = nisa.get_nc_version()

        @nki.jit
        def k(x):
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            assert nisa.get_nc_version() == AT_LOAD and nisa.get_nc_sub_version() == 0
            t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(t, x)
            if nisa.get_nc_version() >= nisa.nc_version.gen4:
                nisa.tensor_scalar(t, t, nl.multiply, 2.0)
            nisa.dma_copy(out, t)
            return out
    """))
    x = np.arange(512, dtype=np.float32).reshape(128, 4)
    got = run_klr(trace_file(path, "k", ["f32[128,4]"], arch=arch), {"x": x})["out"]
    np.testing.assert_array_equal(got, 2 * x if doubled else x)


SUM_OF_SQUARES = """
    @nki.jit
    def k(x):
        P, H = x.shape
        out = nl.ndarray((4, P, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        for i in nl.affine_range(4):
            xs = nl.ndarray((P, H), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=xs, src=x)
            DST
            ssq = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.activation_reduce(dst=DSTREF, op=nl.square, data=xs, reduce_op=nl.add, reduce_res=ssq,
                                   scale=float(i + 1))
            nisa.dma_copy(dst=out[i], src=ssq)
        return out
"""


@pytest.mark.parametrize("dst, ref", [
    # the squares only summed: every element onto one (a 0-step access pattern, as nki-library's RMSNorm)
    ("junk = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)", "junk.ap(pattern=[[1, P], [0, H]])"),
    # a bfloat16 destination: the sum is of the float32 squares, not of their rounded copies
    ("junk = nl.ndarray((P, H), dtype=nl.bfloat16, buffer=nl.sbuf)", "junk"),
])
def test_activation_reduce_sums_the_computed_values_not_the_destination(tmp_path, dst, ref):
    from tests.test_isa_ops import through_pipeline
    from tusk.sim.interp import run as run_bir

    x = np.random.default_rng(3).uniform(-2, 2, (128, 64)).astype(np.float32)
    want = np.stack([((x.astype(np.float64) * (i + 1)) ** 2).sum(-1, keepdims=True) for i in range(4)])
    body = SUM_OF_SQUARES.replace("DSTREF", ref).replace("DST", dst)
    got = run(tmp_path, body, {"x": x})["out"]
    np.testing.assert_allclose(got, want, rtol=1e-5)
    # the destination is never read: unrolling's dead-code elimination keeps the instruction for its sum
    path = tmp_path / "k.py"
    bir = through_pipeline(trace_file(path, "k", ["f32[128,64]"]), tmp_path)
    np.testing.assert_array_equal(run_bir(bir, {"x": x, "out": np.full((4, 128, 1), np.nan, np.float32)})["out"],
                                  got)


def test_a_loop_index_as_a_scalar_operand_unrolls_its_loop(tmp_path):
    """NKI 2.x loops are Python's range: ``operand0=k * 4`` is an int in each iteration (elidbc/trn2-moe's form)."""
    x = np.random.default_rng(5).uniform(-1, 1, (128, 64)).astype(np.float32)
    got = run(tmp_path, """
        @nki.jit
        def k(x):
            out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
            t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x)
            for i in nl.affine_range(3):
                nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=i * 4, op1=nl.multiply, operand1=i + 1)
            nisa.dma_copy(dst=out, src=t)
            return out
    """, {"x": x})["out"]
    want = x
    for i in range(3):
        want = (want + np.float32(i * 4)) * np.float32(i + 1)
    np.testing.assert_array_equal(got, want)


def test_gelu_apprx_sigmoid_is_x_times_sigmoid_of_1_702_x(tmp_path):
    """nki-library's own references (ActFnType.Swish): ``x * sigmoid(1.702 x)``, as nl.gelu_apprx_sigmoid and as
    nisa.activation's op (scale and bias applied first; activation_reduce sums the float32 products)."""
    x = np.random.default_rng(2).uniform(-4, 4, (128, 64)).astype(np.float32)
    got = run(tmp_path, """
        @nki.jit
        def k(x):
            out = nl.ndarray((3, 128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
            sums = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
            t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x)
            nisa.dma_copy(dst=out[0], src=nl.gelu_apprx_sigmoid(t))
            a = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
            nisa.activation(dst=a, op=nl.gelu_apprx_sigmoid, data=t, scale=0.5, bias=0.25)
            nisa.dma_copy(dst=out[1], src=a)
            b = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
            r = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.activation_reduce(dst=b, op=nl.gelu_apprx_sigmoid, data=t, reduce_op=nl.add, reduce_res=r)
            nisa.dma_copy(dst=out[2], src=b)
            nisa.dma_copy(dst=sums, src=r)
            return out, sums
    """, {"x": x})

    def gelu(z):
        z = z.astype(np.float64)
        return z / (1 + np.exp(-1.702 * z))

    np.testing.assert_allclose(got["out"][0], gelu(x), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["out"][1], gelu(x * 0.5 + 0.25), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got["out"][2], got["out"][0])
    np.testing.assert_allclose(got["sums"], gelu(x).sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-4)


BARRIER = """
    from nki.isa import core_barrier

    @nki.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=a)
        core_barrier(out, CORES)
        return out
"""


def test_core_barrier_of_one_program_waits_for_nothing(tmp_path):
    """router_topk's form at LNC 1: the barrier after the store is no instruction; the result stands."""
    a = np.random.default_rng(6).uniform(-1, 1, (128, 16)).astype(np.float32)
    got = run(tmp_path, BARRIER.replace("CORES", "(0, 1)"), {"a": a})["out"]
    np.testing.assert_array_equal(got, a)


def test_core_barrier_of_other_cores_is_refused(tmp_path):
    """Between the programs of a launch, the barrier orders them: tests/test_frontend_phases.py."""
    path = tmp_path / "k.py"
    body = BARRIER.replace("CORES", "(0, 2)").replace("        core_barrier(", "        nisa.core_barrier(")
    path.write_text(HEADER + textwrap.dedent(body))
    with pytest.raises(TraceError, match=r"cores=\(0, 2\)"):
        trace_file(path, "k", ["f32[128,16]"])


def test_a_kernel_config_class_called_without_a_field_is_the_kernels_error(tmp_path):
    message = refused(tmp_path, """
        from dataclasses import dataclass

        @dataclass
        class Dims(nl.NKIObject):
            a: int
            b: int

        @nki.jit
        def k(a):
            d = Dims(a=1)
            return a
    """, ["f32[128,64]"])
    assert "bad.py:15: TypeError: Dims.__init__() missing 1 required positional argument: 'b'" in message, message
    assert "internal error" not in message


def test_a_tensor_engine_transpose_moves_infinities_and_nans_as_they_are(tmp_path):
    """NeuronCore-v3 on, the PE's transpose is bit-accurate: a masked attention row of -inf stays -inf (as a
    multiply by the identity it was -inf * 0 = NaN in every column; attention_tkg's masked runs were all NaN)."""
    x = np.random.default_rng(7).standard_normal((128, 4)).astype(np.float32)
    x[0:64] = -np.inf
    x[70, 1], x[71, 2] = np.nan, np.inf
    got = run(tmp_path, """
        @nki.jit
        def k(x):
            out = nl.ndarray((2, 4, 128), dtype=nl.float32, buffer=nl.shared_hbm)
            t = nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x)
            ps = nl.ndarray((4, 128), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_transpose(ps, t)
            nisa.dma_copy(dst=out[0], src=ps)
            ident = nl.shared_identity_matrix(n=128, dtype=nl.float32)
            ps2 = nl.ndarray((4, 128), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_matmul(ps2, stationary=t, moving=ident, is_transpose=True)
            nisa.dma_copy(dst=out[1], src=ps2)
            return out
    """, {"x": x})["out"]
    np.testing.assert_array_equal(got[0], x.T)
    np.testing.assert_array_equal(got[1], x.T)


def test_scalar_tensor_tensor_reduces_into_the_vector_registers_as_nki_0_7_documents(tmp_path):
    # NKI 0.7.0 added reduce_cmd / reduce_op / reduce_res to scalar_tensor_tensor: the reduction of the float32
    # results (not dst's bfloat16 ones) along the free axes; reduce_cmd.reduce continues the registers
    a, b, c = rand(128, 64), rand(128, 64), rand(128, 1, lo=0.5, hi=2.0)
    res = run(tmp_path, """
        @nki.jit
        def k(a, b, c):
            out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
            sums = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
            peak = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
            x = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
            y = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
            col = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=x, src=a)
            nisa.dma_copy(dst=y, src=b)
            nisa.dma_copy(dst=col, src=c)
            r = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
            s = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.scalar_tensor_tensor(dst=r, data=x, op0=nl.multiply, operand0=col, op1=nl.add, operand1=y,
                                      reduce_op=nl.add, reduce_res=s)
            h = nl.ndarray((128, 64), dtype=nl.bfloat16, buffer=nl.sbuf)
            m = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.scalar_tensor_tensor(h[:, 0:32], x[:, 0:32], nl.subtract, col, nl.multiply, y[:, 0:32],
                                      reduce_op=nl.maximum)
            nisa.scalar_tensor_tensor(h[:, 32:64], x[:, 32:64], nl.subtract, col, nl.multiply, y[:, 32:64],
                                      reduce_cmd=nisa.reduce_cmd.reduce, reduce_op=nl.maximum, reduce_res=m)
            nisa.dma_copy(dst=out, src=r)
            nisa.dma_copy(dst=sums, src=s)
            nisa.dma_copy(dst=peak, src=m)
            return out, sums, peak
    """, {"a": a, "b": b, "c": c})
    want = a * c + b
    np.testing.assert_allclose(res["out"], want, rtol=1e-6)
    np.testing.assert_allclose(res["sums"], want.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(res["peak"], ((a - c) * b).max(axis=1, keepdims=True), rtol=1e-6)


@pytest.mark.parametrize("call, message", [
    ("nisa.scalar_tensor_tensor(y, t, nl.add, 1.0, nl.add, t, reduce_res=c)",
     "nisa.scalar_tensor_tensor reduce_res='...' (a reduction needs its reduce_op"),
    ("nisa.scalar_tensor_tensor(y, t, nl.add, 1.0, nl.add, t, reduce_op=nl.add, reduce_res=c, "
     "reduce_cmd=nisa.reduce_cmd.load_reduce)", "nisa.scalar_tensor_tensor reduce_cmd=nisa.reduce_cmd.load_reduce"),
    ("nisa.activation(y, nl.exp, t, reduce_op=nl.add, reduce_res=c, reduce_cmd=nisa.reduce_cmd.reset_reduce, "
     "engine=nisa.engine.gpsimd)", "the accumulator (reduce_op, reduce_res, reduce_cmd) is the Scalar engine's"),
    ("nisa.activate2(y, nl.exp, t, 1.0, 0.0, nl.multiply, nl.add, engine=nisa.engine.vector)",
     "nisa.activate2 engine=nisa.engine.vector"),
])
def test_nki_0_7_reduction_and_engine_parameters_refuse_what_nki_does_not_do(tmp_path, call, message):
    err = refused(tmp_path, f"""
        @nki.jit
        def k(a):
            out = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.shared_hbm)
            t = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
            y = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
            c = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=a)
            {call}
            nisa.dma_copy(dst=out, src=y)
            return out
    """, ["f32[128,8]"])
    assert message in err


@pytest.mark.parametrize("engine", ["nisa.engine.scalar", "nisa.engine.gpsimd"])
def test_activation_and_activate2_take_nki_0_7s_engine(tmp_path, engine):
    a = rand(128, 32)
    res = run(tmp_path, f"""
        @nki.jit
        def k(a):
            out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
            t = nl.ndarray((128, 32), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=a)
            y = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
            nisa.activation(dst=y[:, 0:32], op=nl.exp, data=t, scale=0.5, engine={engine})
            nisa.activate2(y[:, 32:64], nl.tanh, t, 2.0, 1.0, nl.multiply, nl.add, engine={engine})
            nisa.dma_copy(dst=out, src=y)
            return out
    """, {"a": a})["out"]
    np.testing.assert_allclose(res[:, :32], np.exp(a * 0.5), rtol=2e-6)
    np.testing.assert_allclose(res[:, 32:], np.tanh(2 * a + 1), rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("call, message", [
    ("nisa.tensor_scalar(dst=y, data=t, op0=nl.sigmoid, operand0=0.0)",
     "nisa.tensor_scalar op nl.sigmoid (not an ALU operator"),
    ("nisa.tensor_tensor(y, t, t, np.sinh)", "nisa.tensor_tensor op np.sinh (not an ALU operator"),
    ("nisa.activation(y, nl.maximum, t)", "nisa.activation op nl.maximum (an nl activation function)"),
    ("nisa.affine_select(y, [[-1, 8]], 0, 1, t, -1.0)",
     "Since NKI 0.3.0 offset is the keyword offset="),
])
def test_refusals_name_operators_as_kernels_spell_them_and_point_at_moved_arguments(tmp_path, call, message):
    err = refused(tmp_path, f"""
        @nki.jit
        def k(a):
            out = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.shared_hbm)
            t = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
            y = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=a)
            {call}
            nisa.dma_copy(dst=out, src=y)
            return out
    """, ["f32[128,8]"])
    assert message in err
    assert "<function" not in err


def test_nki_scalars_load_compute_store_address_and_bound_loops(tmp_path):
    # nisa.scalar_load / scalar_store / NkiScalar (NKI 0.7.0+): int32 arithmetic wraps at 32 bits, as NKI
    # documents (100000 * 100000 is 1410065408)
    path = tmp_path / "k.py"
    path.write_text(HEADER + textwrap.dedent("""
        @nki.jit
        def k(index, table):
            vals = nl.ndarray((1, 6), dtype=nl.int32, buffer=nl.shared_hbm)
            out = nl.ndarray((1, 8), dtype=nl.float32, buffer=nl.shared_hbm)
            t = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=index)
            i = nisa.scalar_load(t)
            assert isinstance(i, nisa.NkiScalar)
            j = i * 4 + 1
            r = nl.ndarray((1, 6), dtype=nl.int32, buffer=nl.sbuf)
            for col, v in enumerate((j, 10 - i, -i, i * j, i - j, i * 20000 * 100000)):
                nisa.scalar_store(r[0:1, col:col + 1], v)
            nisa.dma_copy(dst=vals, src=r)
            row = nl.ndarray((1, 8), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=row, src=table.ap(pattern=[[8, 1], [1, 8]], offset=0, scalar_offset=i * 2 + 1,
                                                indirect_dim=0))
            acc = nl.ndarray((1, 8), dtype=nl.float32, buffer=nl.sbuf)
            nisa.memset(acc, 0.0)

            def body(_):
                nisa.tensor_tensor(dst=acc, data1=acc, data2=row, op=nl.add)

            nl.fori_loop(0, i - 2, body)
            nisa.dma_copy(dst=out, src=acc)
            return vals, out
    """))
    table = rand(16, 8)
    got = run_klr(trace_file(path, "k", ["i32[1,1]", "f32[16,8]"]),
                  {"index": np.array([[5]], np.int32), "table": table})
    assert got["vals"].tolist() == [[21, 5, -5, 105, -16, 1410065408]]
    np.testing.assert_allclose(got["out"], 3 * table[11:12], rtol=1e-6)


@pytest.mark.parametrize("call, message", [
    ("nisa.scalar_store(t, 3)", "nisa.scalar_store value=3 (an NkiScalar"),
    ("nisa.scalar_load(f)", "nisa.scalar_load of a float32 tile"),
    ("nisa.scalar_store(f, nisa.scalar_load(t))", "into a float32 tile"),
    ("x = nisa.scalar_load(t) < 3", "comparing an NkiScalar"),
    ("x = nisa.scalar_load(t) // 2", "NKI's scalars have +, - and *"),
])
def test_nki_scalar_misuse_is_refused(tmp_path, call, message):
    err = refused(tmp_path, f"""
        @nki.jit
        def k(a):
            out = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.shared_hbm)
            t = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
            f = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.memset(t, 1)
            {call}
            nisa.dma_copy(dst=out, src=f)
            return out
    """, ["f32[1,1]"])
    assert message in err and "bad.py:12:" in err, err


def test_an_nki_scalar_or_tile_moves_an_sbuf_access_of_dmas_and_compute_instructions(tmp_path):
    # NKI: "a scalar of either dtype can be used as a scalar_offset ... on an SBUF or PSUM operand the offset must
    # be nl.int32" (nisa.scalar_load); an nl.fori_loop index too.  Compute instructions read and write the moved
    # access through a DMA-staged tile
    path = tmp_path / "k.py"
    path.write_text(HEADER + textwrap.dedent("""
        @nki.jit
        def k(a, index):
            out = nl.ndarray((8, 64), dtype=nl.float32, buffer=nl.shared_hbm)
            t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=a)
            it = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
            nisa.dma_copy(dst=it, src=index)
            i = nisa.scalar_load(it)
            y = nl.ndarray((8, 64), dtype=nl.float32, buffer=nl.sbuf)
            nisa.memset(y, 0.0)
            # rows 1..2, columns i..i+7: by a DMA, by a copy, by tensor_scalar (a tile offset), by nl.exp
            nisa.dma_copy(dst=y[0:2, 0:8], src=t.ap(pattern=[[64, 2], [1, 8]], offset=64, scalar_offset=i,
                                                    indirect_dim=1))
            nisa.tensor_copy(dst=y[0:2, 8:16], src=t.ap(pattern=[[64, 2], [1, 8]], offset=64, scalar_offset=i,
                                                        indirect_dim=1))
            nisa.tensor_scalar(dst=y[0:2, 16:24], data=t.ap(pattern=[[64, 2], [1, 8]], offset=64,
                                                            scalar_offset=it, indirect_dim=1),
                               op0=nl.multiply, operand0=3.0)
            e = nl.exp(t.ap(pattern=[[64, 2], [1, 8]], offset=0, scalar_offset=i * 2, indirect_dim=0))
            nisa.tensor_copy(dst=y[0:2, 24:32], src=e)
            # written: rows i+2..i+3 of y (a partition offset) by tensor_tensor; the rest of y kept
            nisa.tensor_tensor(dst=y.ap(pattern=[[64, 2], [1, 8]], offset=128 + 32, scalar_offset=i,
                                        indirect_dim=0),
                               data1=t[0:2, 0:8], data2=t[2:4, 0:8], op=nl.add)
            # an nl.fori_loop index moving both a source and the destination
            def body(j):
                nisa.tensor_tensor(dst=y.ap(pattern=[[64, 1], [1, 4]], offset=7 * 64, scalar_offset=j,
                                            indirect_dim=1),
                                   data1=t.ap(pattern=[[64, 1], [1, 4]], offset=0, scalar_offset=j, indirect_dim=1),
                                   data2=t[5:6, 0:4], op=nl.subtract)
            nl.fori_loop(0, 16, body, step=4)
            nisa.dma_copy(dst=out, src=y)
            return out
    """))
    klr = trace_file(path, "k", ["f32[128,64]", "i32[1,1]"])
    a = rand(128, 64)
    for i in (0, 3):
        got = run_klr(klr, {"a": a, "index": np.array([[i]], np.int32)})["out"]
        want = np.zeros((8, 64), np.float32)
        want[0:2, 0:8] = want[0:2, 8:16] = a[1:3, i:i + 8]
        want[0:2, 16:24] = a[1:3, i:i + 8] * np.float32(3)
        want[2 + i:4 + i, 32:40] = a[0:2, 0:8] + a[2:4, 0:8]
        np.testing.assert_allclose(got[0:2, 24:32], np.exp(a[2 * i:2 * i + 2, 0:8]), rtol=2e-6)
        got[0:2, 24:32] = 0
        want[7, 0:16] = a[0, 0:16] - np.tile(a[5, 0:4], 4)
        np.testing.assert_array_equal(got, want)
    # the Vector engine's register continued from an instruction whose destination was moved (and copied back)
    path.write_text(HEADER + textwrap.dedent("""
        @nki.jit
        def k(a):
            out = nl.ndarray((128, 66), dtype=nl.float32, buffer=nl.shared_hbm)
            t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=a)
            it = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
            nisa.memset(it, 8)
            i = nisa.scalar_load(it)
            y = nl.ndarray((128, 66), dtype=nl.float32, buffer=nl.sbuf)
            nisa.memset(y, 0.0)
            nisa.tensor_scalar_cumulative(dst=y.ap(pattern=[[66, 128], [1, 16]], offset=0, scalar_offset=i,
                                                   indirect_dim=1),
                                          src=t[:, 0:16], op0=nl.multiply, op1=nl.add, imm0=1.0,
                                          reduce_cmd=nisa.reduce_cmd.reset_reduce)
            nisa.tensor_scalar_cumulative(dst=y[:, 40:56], src=t[:, 16:32], op0=nl.multiply, op1=nl.add, imm0=1.0,
                                          reduce_cmd=nisa.reduce_cmd.reduce)
            nisa.dma_copy(dst=out, src=y)
            return out
    """))
    got = run_klr(trace_file(path, "k", ["f32[128,64]"]), {"a": a})["out"]
    want = np.zeros((128, 66), np.float32)
    want[:, 8:24] = np.cumsum(a[:, 0:16], 1)
    want[:, 40:56] = a[:, 0:16].sum(1, keepdims=True) + np.cumsum(a[:, 16:32], 1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    err = refused(tmp_path, """
        @nki.jit
        def k(a):
            t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.psum)
            it = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
            nisa.memset(it, 5)
            y = nl.ndarray((2, 8), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=y, src=t.ap(pattern=[[64, 2], [1, 8]], offset=0, scalar_offset=it, indirect_dim=0))
            return a
    """, ["f32[128,64]"])
    assert "bad.py:12: not supported: ap(scalar_offset=...) of psum tile t" in err, err


def test_nl_int64_tensors_move_by_dma_and_load_into_64_bit_nki_scalars(tmp_path):
    # nl.int64 / nl.uint64 (NKI 0.7.0): tensors DMAs move and views reinterpret; scalar_load of an int64 tile is
    # an int64 NkiScalar, not truncated, stored back at 64 bits and usable as an HBM access's scalar_offset
    path = tmp_path / "k.py"
    path.write_text(HEADER + textwrap.dedent("""
        @nki.jit
        def k(a, u, v, table):
            out = nl.ndarray((128, 8), dtype=nl.int64, buffer=nl.shared_hbm)
            halves = nl.ndarray((128, 16), dtype=nl.int32, buffer=nl.shared_hbm)
            uout = nl.ndarray((2, 4), dtype=nl.uint64, buffer=nl.shared_hbm)
            back = nl.ndarray((1, 1), dtype=nl.int64, buffer=nl.shared_hbm)
            row = nl.ndarray((1, 8), dtype=nl.float32, buffer=nl.shared_hbm)
            t = nl.ndarray((128, 8), dtype=nl.int64, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=a)
            nisa.dma_copy(dst=out, src=t)
            nisa.dma_copy(dst=halves, src=t.view(nl.int32))
            ut = nl.ndarray((2, 4), dtype=nl.uint64, buffer=nl.sbuf)
            nisa.dma_copy(dst=ut, src=u)
            nisa.dma_copy(dst=uout, src=ut)
            vt = nl.ndarray((1, 2), dtype=nl.int64, buffer=nl.sbuf)
            nisa.dma_copy(dst=vt, src=v)
            big = nisa.scalar_load(vt[0:1, 0:1])
            assert big.dtype == nl.int64
            r = nl.ndarray((1, 1), dtype=nl.int64, buffer=nl.sbuf)
            nisa.scalar_store(r, big)
            nisa.dma_copy(dst=back, src=r)
            i = nisa.scalar_load(vt[0:1, 1:2])
            rt = nl.ndarray((1, 8), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=rt, src=table.ap(pattern=[[8, 1], [1, 8]], offset=0, scalar_offset=i, indirect_dim=0))
            nisa.dma_copy(dst=row, src=rt)
            return out, halves, uout, back, row
    """))
    a = np.arange(128 * 8, dtype=np.int64).reshape(128, 8) * 3_000_000_007 - 5
    u = (np.arange(8, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)).reshape(2, 4)
    v = np.array([[(1 << 40) + 5, 11]], np.int64)
    table = rand(16, 8)
    got = run_klr(trace_file(path, "k", ["i64[128,8]", "u64[2,4]", "i64[1,2]", "f32[16,8]"]),
                  {"a": a, "u": u, "v": v, "table": table})
    np.testing.assert_array_equal(got["out"], a)
    np.testing.assert_array_equal(got["halves"], a.view(np.int32))
    np.testing.assert_array_equal(got["uout"], u)
    assert got["back"].tolist() == [[(1 << 40) + 5]]
    np.testing.assert_array_equal(got["row"], table[11:12])
    for call, message in [
        ("nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=1)", "an instruction (tensor_scalar) on a 64-bit "
         "integer tile (NKI's compute instructions take no nl.int64"),
        ("nisa.dma_copy(dst=w, src=a)", "an instruction (copy) on a 64-bit integer tile"),
        ("x = s + 1", "arithmetic on an nl.int64 NkiScalar (NKI wraps it at 64 bits; KLR's register ALU computes 32"),
        ("nisa.tensor_copy(dst=w, src=w.ap(pattern=[[1, 1], [1, 1]], offset=0, scalar_offset=s, indirect_dim=1))",
         "ap(scalar_offset=<an nl.int64 NkiScalar>) of on-chip tile w (NKI: on SBUF or PSUM the offset must be "
         "nl.int32)"),
        ("nl.fori_loop(0, s, lambda j: None)", "nl.fori_loop bounded by an nl.int64 NkiScalar"),
        ("nisa.scalar_store(w, s)", "into a int32 tile (an nl.int64 scalar is stored at its own width)"),
        ("nisa.register_load(nisa.register_alloc(), t)", "nisa.register_load of a int64 tile (NKI: a scalar value "
         "of up to 32 bits"),
    ]:
        err = refused(tmp_path, f"""
            @nki.jit
            def k(a):
                t = nl.ndarray((1, 1), dtype=nl.int64, buffer=nl.sbuf)
                w = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
                nisa.dma_copy(dst=t, src=a)
                s = nisa.scalar_load(t)
                {call}
                return a
        """, ["i64[1,1]"])
        assert message in err and "bad.py:12:" in err, err


def test_rand_get_state_reads_back_what_rand_set_state_set_and_restores_the_stream(tmp_path):
    # nisa.rand_set_state / rand_get_state: a uint32 XORWOW state per partition, 6 words on GpSimd (the default),
    # 24 on the Vector engine; a state read and set again continues the same numbers
    path = tmp_path / "k.py"
    path.write_text(HEADER + textwrap.dedent("""
        @nki.jit
        def k(s6, s24):
            g6 = nl.ndarray((128, 6), dtype=nl.uint32, buffer=nl.shared_hbm)
            g24 = nl.ndarray((128, 24), dtype=nl.uint32, buffer=nl.shared_hbm)
            r = nl.ndarray((128, 96), dtype=nl.float32, buffer=nl.shared_hbm)
            t6 = nl.ndarray((128, 6), dtype=nl.uint32, buffer=nl.sbuf)
            t24 = nl.ndarray((128, 24), dtype=nl.uint32, buffer=nl.sbuf)
            nisa.dma_copy(dst=t6, src=s6)
            nisa.dma_copy(dst=t24, src=s24)
            rr = nl.ndarray((128, 96), dtype=nl.float32, buffer=nl.sbuf)
            # still seeded: its state read, two draws, the state set again, the same draws
            seeded = nl.ndarray((128, 24), dtype=nl.uint32, buffer=nl.sbuf)
            nisa.rand_get_state(seeded, engine=nisa.engine.vector)
            nisa.rand2(rr[:, 0:16], 0.0, 1.0)
            nisa.rand_set_state(seeded, engine=nisa.engine.vector)
            nisa.rand2(rr[:, 16:32], 0.0, 1.0)
            nisa.rand_set_state(t6)
            nisa.rand_set_state(src_seeds=t24, engine=nisa.engine.vector)
            o6 = nl.ndarray((128, 6), dtype=nl.uint32, buffer=nl.sbuf)
            nisa.rand_get_state(o6)
            nisa.dma_copy(dst=g6, src=o6)
            saved = nl.ndarray((128, 24), dtype=nl.uint32, buffer=nl.sbuf)
            nisa.rand_get_state(dst=saved, engine=nisa.engine.vector)
            nisa.dma_copy(dst=g24, src=saved)
            nisa.rand2(rr[:, 32:64], -1.0, 1.0)
            nisa.rand_set_state(saved, engine=nisa.engine.vector)
            nisa.rand2(rr[:, 64:96], -1.0, 1.0)
            nisa.dma_copy(dst=r, src=rr)
            return g6, g24, r
    """))
    gen = np.random.default_rng(3)
    s6 = gen.integers(0, 2 ** 32, size=(128, 6), dtype=np.uint64).astype(np.uint32)
    s24 = gen.integers(0, 2 ** 32, size=(128, 24), dtype=np.uint64).astype(np.uint32)
    got = run_klr(trace_file(path, "k", ["u32[128,6]", "u32[128,24]"]), {"s6": s6, "s24": s24})
    np.testing.assert_array_equal(got["g6"], s6)
    np.testing.assert_array_equal(got["g24"], s24)
    r = got["r"]
    np.testing.assert_array_equal(r[:, 0:16], r[:, 16:32])
    np.testing.assert_array_equal(r[:, 32:64], r[:, 64:96])
    assert 0.0 <= r[:, 0:16].min() and r[:, 0:16].max() < 1.0 and -1.0 <= r[:, 32:].min() and r[:, 32:].max() < 1.0
    assert len(np.unique(r[:, 32:64])) > 4000  # random: 4096 draws
    for call, message in [
        ("nisa.rand_set_state(w)", "nisa.rand_set_state of a [128, 24] tile (6 words per partition on the GpSimd"),
        ("nisa.rand_get_state(f, engine=nisa.engine.vector)", "nisa.rand_get_state of a float32 tile (nl.uint32)"),
        ("nisa.rand_get_state(w, engine=nisa.engine.scalar)", "nisa.rand_get_state engine="),
    ]:
        err = refused(tmp_path, f"""
            @nki.jit
            def k(a):
                w = nl.ndarray((128, 24), dtype=nl.uint32, buffer=nl.sbuf)
                f = nl.ndarray((128, 24), dtype=nl.float32, buffer=nl.sbuf)
                nisa.memset(w, 0)
                {call}
                return a
        """, ["f32[1,1]"])
        assert message in err and "bad.py:11:" in err, err


def test_nl_tiles_and_alloc_tiles_address_tiles_rows_and_clamped_final_tiles(tmp_path):
    # NKI 0.7.0 tile grids: tile (i, j) of tile_shape (tp, tf) is src[i*tp:(i+1)*tp, j*tf:(j+1)*tf], the final
    # tile clamped; an int consumes its grid axis, a slice keeps it; .data is the selection, .element_shape its
    # extent; nl.alloc_tiles is a new tensor as a grid; NkiTensor.data is the tensor itself
    path = tmp_path / "k.py"
    path.write_text(HEADER + textwrap.dedent("""
        @nki.jit
        def k(src):
            src_tiles = nl.tiles(src, tile_shape=(128, 64))
            dst = nl.ndarray(src.shape, dtype=src.dtype, buffer=nl.shared_hbm)
            dst_tiles = nl.tiles(dst, tile_shape=(128, 64))
            assert src_tiles.shape == (3, 4) and src_tiles.tile_shape == (128, 64)
            for i in range(src_tiles.shape[0]):
                for j in range(src_tiles.shape[1]):
                    st = src_tiles[i, j]
                    assert st.shape == () and isinstance(st, nl.NkiTileGrid) and st.is_data_representable
                    t = nl.ndarray(st.element_shape, dtype=src.dtype, buffer=nl.sbuf)
                    nisa.dma_copy(dst=t.data, src=st.data)
                    nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=float(i * 10 + j))
                    nisa.dma_copy(dst=dst_tiles[i, j].data, src=t.data)
            row = src_tiles[1, :]
            assert row.shape == (4,) and row.element_shape == (128, 200)
            sb = nl.alloc_tiles(tile_shape=(128, 64), element_shape=row.element_shape, buffer=nl.sbuf,
                                dtype=nl.float32)
            assert sb.shape == (1, 4) and isinstance(sb, nl.NkiGrid) and sb.dtype == nl.float32
            nisa.dma_copy(dst=sb.data, src=row.data)
            assert sb[0, -1].element_shape == (128, 8)
            assert src_tiles[:, 3][2:].element_shape == (44, 8) and src_tiles[..., 1:3].shape == (3, 2)
            picked = nl.ndarray((128, 72), dtype=nl.float32, buffer=nl.shared_hbm)
            t = nl.ndarray((128, 72), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=t[:, 0:64], src=sb[0, 1].data)
            nisa.tensor_copy(dst=t[:, 64:72], src=sb[0, -1].data)
            nisa.dma_copy(dst=picked, src=t)
            return dst, picked
    """))
    a = rand(300, 200)
    got = run_klr(trace_file(path, "k", ["f32[300,200]"]), {"src": a})
    scale = np.add.outer(np.repeat(np.arange(3) * 10, 128)[:300], np.repeat(np.arange(4), 64)[:200])
    np.testing.assert_array_equal(got["dst"], a * scale.astype(np.float32))
    np.testing.assert_array_equal(got["picked"], np.concatenate([a[128:256, 64:128], a[128:256, 192:200]], 1))
    for call, message in [
        ("nl.tiles(a)", "nl.tiles without tile_shape"),
        ("nl.tiles(a.reshape((2, 4, 8)), tile_shape=(4, 8))", "Tusk tiles every dimension: a leading untiled prefix"),
        ("nl.tiles(a, tile_shape=(8, 0))", "nl.tiles tile_shape=(8, 0) (a tuple of positive ints)"),
        ("nl.tiles(a, tile_shape=(4, 4))[0:2:2]", "a tile grid sliced with step 2"),
        ("nl.tiles(a, tile_shape=(4, 4))[2, 0]", "tile index 2 of a grid axis of 2 tiles"),
        ("nl.tiles(a, tile_shape=(4, 4)).is_remainder", "NkiTileGrid.is_remainder"),
        ("nl.tiles(nl.tiles(a, tile_shape=(4, 4)), tile_shape=(2, 2))", "nl.tiles of a tile or block grid"),
    ]:
        err = refused(tmp_path, f"""
            @nki.jit
            def k(a):
                {call}
                return a
        """, ["f32[8,8]"])
        assert message in err and "bad.py:8:" in err, err


def test_an_nki_scalar_starts_an_nl_fori_loop(tmp_path):
    # NkiScalar "Bound of nki.language.fori_loop(): supported, including an arithmetic expression": the start too
    path = tmp_path / "k.py"
    path.write_text(HEADER + textwrap.dedent("""
        @nki.jit
        def k(index, table):
            out = nl.ndarray((1, 8), dtype=nl.float32, buffer=nl.shared_hbm)
            seen = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.shared_hbm)
            t = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=index)
            lo = nisa.scalar_load(t)
            acc = nl.ndarray((1, 8), dtype=nl.float32, buffer=nl.sbuf)
            nisa.memset(acc, 0.0)
            row = nl.ndarray((1, 8), dtype=nl.float32, buffer=nl.sbuf)
            last = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)

            def body(i):
                nisa.dma_copy(dst=row, src=table.ap(pattern=[[8, 1], [1, 8]], offset=0, scalar_offset=i,
                                                    indirect_dim=0))
                nisa.tensor_tensor(dst=acc, data1=acc, data2=row, op=nl.add)
                nisa.scalar_store(last, i)

            nl.fori_loop(lo, lo + 5, body, step=2)
            nisa.dma_copy(dst=out, src=acc)
            nisa.dma_copy(dst=seen, src=last)
            return out, seen
    """))
    table = rand(16, 8)
    got = run_klr(trace_file(path, "k", ["i32[1,1]", "f32[16,8]"]),
                  {"index": np.array([[3]], np.int32), "table": table})
    np.testing.assert_allclose(got["out"], (table[3] + table[5] + table[7])[None], rtol=1e-6)
    assert got["seen"].tolist() == [[7]]


def test_an_on_chip_tile_indexed_by_ints_stays_at_least_2d(tmp_path):
    # NkiTensor.__getitem__: "On-chip tensors ... Result is always at least 2D"; HBM ones drop the axis
    a = rand(128, 64)
    got = run(tmp_path, """
        @nki.jit
        def k(a):
            out = nl.ndarray((128, 2), dtype=nl.float32, buffer=nl.shared_hbm)
            t = nl.ndarray((128, 4, 16), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=a)
            col = t[:, 1, 3]
            assert col.shape == (128, 1) and t[5, 0, 0].shape == (1, 1) and t[:, 2].shape == (128, 16)
            assert a[3].shape == (64,)
            c = nl.ndarray(col.shape, dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_scalar(dst=c, data=col, op0=nl.multiply, operand0=2.0)
            o = nl.ndarray((128, 2), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=o[:, 0:1], src=c)
            nisa.tensor_copy(dst=o[:, 1:2], src=t[:, 3, 15])
            nisa.dma_copy(dst=out, src=o)
            return out
    """, {"a": a})["out"]
    np.testing.assert_array_equal(got, np.stack([2 * a[:, 19], a[:, 63]], axis=1))


def test_exponential_shares_the_vector_engines_accumulator_registers(tmp_path):
    # NKI: exponential keeps "a running sum ... using shared internal reduction registers in the Vector
    # Engine" (shared with tensor_scalar_reduce, tensor_scalar_cumulative, ...). It was taken as the Scalar
    # engine's: a later Vector reduce continued from a stale sum (silently), and chains were refused
    a = rand(128, 64)
    got = run(tmp_path, """
        @nki.jit
        def k(a):
            chained = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
            mixed = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
            t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=a)
            y = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
            r1 = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
            r2 = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.exponential(dst=y[:, 0:32], src=t[:, 0:32], max_value=1.0,
                             reduce_cmd=nisa.reduce_cmd.reset_reduce)
            nisa.exponential(dst=y[:, 32:64], src=t[:, 32:64], max_value=1.0, reduce_res=r1,
                             reduce_cmd=nisa.reduce_cmd.reduce)
            nisa.tensor_scalar_reduce(dst=y[:, 0:16], data=t[:, 0:16], op0=nl.add, operand0=100.0,
                                      reduce_op=nl.add)
            nisa.exponential(dst=y[:, 16:32], src=t[:, 16:32], reduce_res=r2,
                             reduce_cmd=nisa.reduce_cmd.reset_reduce)
            nisa.tensor_scalar_reduce(dst=y[:, 32:64], data=t[:, 32:64], op0=nl.multiply, operand0=1.0,
                                      reduce_op=nl.add, reduce_res=r2, reduce_cmd=nisa.reduce_cmd.reduce)
            nisa.dma_copy(dst=chained, src=r1)
            nisa.dma_copy(dst=mixed, src=r2)
            return chained, mixed
    """, {"a": a})
    np.testing.assert_allclose(got["chained"], np.exp(a - 1).sum(axis=1, keepdims=True), rtol=1e-5)
    np.testing.assert_allclose(got["mixed"], np.exp(a[:, 16:32]).sum(axis=1, keepdims=True)
                               + a[:, 32:].sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-5)
