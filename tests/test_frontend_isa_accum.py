"""The Vector and Scalar engines' accumulators across instructions (``reduce_cmd.reduce``), FP8 double-row matmuls, masks on
the top-8 instructions and ``--arg`` values that name NKI / numpy objects: kernels written for these tests,
traced, run in the interpreter and compared with numpy."""

from __future__ import annotations

import math
import textwrap

import numpy as np
import pytest

from tusk.frontend import TraceError, trace_file
from tusk.frontend.args import arg_text, parse_value
from tusk.frontend.check import run_klr

V1 = """\
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
"""
V2 = """\
import numpy as np
import nki
import nki.isa as nisa
import nki.language as nl
"""
RNG = np.random.default_rng(7)


def run(tmp_path, header: str, body: str, inputs: dict[str, np.ndarray], args=None) -> dict[str, np.ndarray]:
    path = tmp_path / "k.py"
    path.write_text(header + textwrap.dedent(body))
    specs = [f"f32[{','.join(map(str, a.shape))}]" for a in inputs.values()]
    return run_klr(trace_file(path, "k", specs, args=args), inputs)


def refused(tmp_path, header: str, body: str, specs: list[str]) -> str:
    path = tmp_path / "bad.py"
    path.write_text(header + textwrap.dedent(body))
    with pytest.raises(TraceError) as e:
        trace_file(path, "k", specs)
    return str(e.value)


def rand(*shape: int) -> np.ndarray:
    return RNG.uniform(-1, 1, size=shape).astype(np.float32)


CUMULATIVE_CHAIN = """
    @nki.jit
    def k(x, op0, op1):
        out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.load(x)
        first = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
        second = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar_cumulative(src=t, dst=first, op0=op0, op1=op1, imm0=0.25,
                                      reduce_cmd=nisa.reduce_cmd.reset_reduce)
        nisa.tensor_scalar_cumulative(src=t, dst=second, op0=op0, op1=op1, imm0=0.25,
                                      reduce_cmd=nisa.reduce_cmd.reduce)
        nl.store(out, second)
        return out
"""


def test_reduce_continues_the_register_the_previous_cumulative_left_1x(tmp_path):
    x = rand(64, 32)
    got = run(tmp_path, V1, CUMULATIVE_CHAIN, {"x": x}, args={"op0": parse_value("nl.add"),
                                                              "op1": parse_value("np.add")})["out"]
    shifted = x + 0.25
    want = shifted.sum(1, keepdims=True) + np.cumsum(shifted, axis=1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_reduce_after_load_reduce_and_a_max_register_2x(tmp_path):
    x, init = rand(32, 16), rand(32, 1)
    got = run(tmp_path, V2, """
        @nki.jit
        def k(x, init):
            out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
            t = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
            i = nl.ndarray(init.shape, dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x)
            nisa.dma_copy(dst=i, src=init)
            a = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
            b = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_scalar_cumulative(a, t, nl.multiply, nl.maximum, -1.0, imm1=i,
                                          reduce_cmd=nisa.reduce_cmd.load_reduce)
            nisa.tensor_scalar_cumulative(b, t, nl.multiply, nl.maximum, 2.0, reduce_cmd=nisa.reduce_cmd.reduce)
            nisa.dma_copy(dst=out, src=b)
            return out
    """, {"x": x, "init": init})["out"]
    reg = np.maximum(init[:, 0], (-x).max(1))
    want = np.maximum.accumulate(np.concatenate([reg[:, None], 2 * x], axis=1), axis=1)[:, 1:]
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_range_select_reduce_chains_the_running_maximum(tmp_path):
    x, lo, hi = rand(16, 64), np.zeros((16, 1), np.float32), np.full((16, 1), 100.0, np.float32)
    got = run(tmp_path, V1, """
        @nki.jit
        def k(x, lo, hi):
            res = nl.ndarray((16, 1), dtype=nl.float32, buffer=nl.shared_hbm)
            t, b0, b1 = nl.load(x), nl.load(lo), nl.load(hi)
            r = nl.ndarray((16, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.range_select(on_true_tile=t, comp_op0=np.greater_equal, comp_op1=np.less, bound0=b0,
                              bound1=b1, reduce_cmd=nisa.reduce_cmd.reset_reduce, reduce_op=np.max,
                              range_start=0, on_false_value=-9.0)
            nisa.range_select(on_true_tile=t, comp_op0=np.greater_equal, comp_op1=np.less, bound0=b0,
                              bound1=b1, reduce_cmd=nisa.reduce_cmd.reduce, reduce_res=r, reduce_op=np.max,
                              range_start=64, on_false_value=-9.0)
            nl.store(res, r)
            return res
    """, {"x": x, "lo": lo, "hi": hi})["res"]
    first = x.max(1)                                   # positions 0..63 all inside [0, 100)
    second = np.where(np.arange(64) + 64 < 100, x, -9.0).max(1)
    np.testing.assert_array_equal(got[:, 0], np.maximum(first, second))


def test_reduce_with_nothing_to_continue_is_refused_at_its_line(tmp_path):
    msg = refused(tmp_path, V1, """
        @nki.jit
        def k(x):
            out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
            t = nl.load(x)
            d = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_scalar_cumulative(src=t, dst=d, op0=nl.add, op1=nl.add, imm0=0.0,
                                          reduce_cmd=nisa.reduce_cmd.reduce)
            nl.store(out, d)
            return out
    """, ["f32[8,8]"])
    assert "bad.py:11:" in msg and "nisa.tensor_scalar_cumulative reduce_cmd=nisa.reduce_cmd.reduce" in msg


SCALAR_CHAIN = """
    @nki.jit
    def k(x):
        P, F = x.shape
        t = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        e = nl.ndarray((P, F), dtype=nl.bfloat16, buffer=nl.sbuf)
        s = nl.ndarray((P, 4), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=e[:, 0:8], op=nl.exp, data=t[:, 0:8], reduce_cmd=nisa.reduce_cmd.reset_reduce)
        nisa.activation(dst=e[:, 8:16], op=nl.exp, data=t[:, 8:16], reduce_op=nl.add, reduce_res=s[:, 0:1],
                        reduce_cmd=nisa.reduce_cmd.reduce)
        # the Vector engine's register is another one: a cumulative between leaves the Scalar one as it was
        nisa.tensor_scalar_cumulative(src=t, dst=t, op0=nl.multiply, op1=nl.add, imm0=1.0,
                                      reduce_cmd=nisa.reduce_cmd.reset_reduce)
        nisa.activation(dst=e[:, 16:24], op=nl.exp, data=t[:, 16:24], reduce_op=nl.add, reduce_res=s[:, 1:2],
                        reduce_cmd=nisa.reduce_cmd.reduce)
        nisa.activation(dst=e[:, 0:8], op=nl.copy, data=t[:, 0:8], reduce_res=s[:, 2:3])  # idle: read out
        nisa.activation(dst=e[:, 0:8], op=nl.copy, data=t[:, 0:8], reduce_res=s[:, 3:4],
                        reduce_cmd=nisa.reduce_cmd.reset)
        out = nl.ndarray((P, 4), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=s)
        return out
"""


def test_the_scalar_engine_register_is_zeroed_started_continued_and_read_out_2x(tmp_path):
    x = rand(32, 24)
    got = run(tmp_path, V2, SCALAR_CHAIN, {"x": x})["out"]
    cum = np.cumsum(x, axis=1)  # what the cumulative left in t (for the third activation's data)
    e = np.exp(x[:, :16]).sum(1)
    total = e + np.exp(cum[:, 16:24]).sum(1)
    np.testing.assert_allclose(got, np.stack([e, total, total, np.zeros_like(e)], axis=1), rtol=1e-5)


def test_activation_continuing_a_reduction_in_1x_form(tmp_path):
    x = rand(16, 32)
    got = run(tmp_path, V1, """
        @nki.jit
        def k(x):
            out = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
            t = nl.load(x)
            s = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
            a = nisa.activation(op=nl.tanh, data=t[:, 0:16], reduce_op=nl.add, reduce_res=s)
            b = nisa.activation(op=nl.tanh, data=t[:, 16:32], reduce_op=nl.add, reduce_res=s,
                                reduce_cmd=nisa.reduce_cmd.reduce)
            nl.store(out, s)
            return out
    """, {"x": x})["out"]
    np.testing.assert_allclose(got[:, 0], np.tanh(x).sum(1), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("cmd, first", [("reduce", ""), ("idle", ""),
                                        ("reduce", "nisa.tensor_scalar_cumulative(src=t, dst=d, op0=nl.add, "
                                                   "op1=nl.add, imm0=0.0)")])
def test_a_scalar_register_read_with_nothing_started_is_refused(tmp_path, cmd, first):
    """Nothing started the Scalar engine's register (a Vector engine cumulative starts the other one)."""
    msg = refused(tmp_path, V2, f"""
        @nki.jit
        def k(x):
            out = nl.ndarray((8, 1), dtype=nl.float32, buffer=nl.shared_hbm)
            t = nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.sbuf)
            d = nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.sbuf)
            s = nl.ndarray((8, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x)
            {first or "pass"}
            nisa.activation(dst=d, op=nl.exp, data=t, reduce_op=nl.add, reduce_res=s,
                            reduce_cmd=nisa.reduce_cmd.{cmd})
            nisa.dma_copy(dst=out, src=s)
            return out
    """, ["f32[8,8]"])
    assert "bad.py:14:" in msg and f"nisa.activation reduce_cmd=nisa.reduce_cmd.{cmd} reads an accumulation" in msg
    assert "no earlier activation of this kernel started" in msg


def test_reduce_across_a_loop_body_is_refused(tmp_path):
    msg = refused(tmp_path, V1, """
        @nki.jit
        def k(x):
            out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
            t = nl.load(x)
            d = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_scalar_cumulative(src=t, dst=d, op0=nl.add, op1=nl.add, imm0=0.0)
            for i in nl.affine_range(2):
                nisa.tensor_scalar_cumulative(src=t, dst=d, op0=nl.add, op1=nl.add, imm0=0.0,
                                              reduce_cmd=nisa.reduce_cmd.reduce)
            nl.store(out, d)
            return out
    """, ["f32[8,8]"])
    assert "bad.py:13:" in msg and "another loop body" in msg


@pytest.mark.parametrize("header, call", [
    (V1, "c = nisa.nc_matmul(a, b, perf_mode='double_row_gen3')"),
    (V2, "c = nl.ndarray((8, 64), dtype=nl.float32, buffer=nl.psum)\n"
         "            nisa.nc_matmul(c, a, b, perf_mode=nisa.matmul_perf_mode.double_row)"),
])
def test_double_row_matmul_sums_both_packed_rows(tmp_path, header, call):
    sa, sb = rand(128, 2, 8), rand(128, 2, 64)
    got = run(tmp_path, header, f"""
        @nki.jit
        def k(sa, sb):
            out = nl.ndarray((8, 64), dtype=nl.float32, buffer=nl.shared_hbm)
            a, b = nl.load(sa), nl.load(sb)
            {call}
            nl.store(out, c)
            return out
    """, {"sa": sa, "sb": sb})["out"]
    np.testing.assert_allclose(got, np.einsum("kli,klj->ij", sa, sb), rtol=1e-4, atol=1e-4)


def test_max8_and_match_replace8_keep_to_their_mask(tmp_path):
    x = rand(16, 64)
    got = run(tmp_path, V1, """
        @nki.jit
        def k(x):
            out = nl.ndarray((8, 32), dtype=nl.float32, buffer=nl.shared_hbm)
            t = nl.load(x)
            ip, jf = nl.mgrid[0:16, 0:64]
            top = nisa.max8(src=t[ip, jf], mask=(ip < 8) & (jf < 32))
            r = nisa.nc_match_replace8(data=t[ip, jf], vals=top, imm=5.0, mask=(ip < 8) & (jf < 32))
            nl.store(out, r[0:8, 0:32])
            return out
    """, {"x": x})["out"]
    want = x[:8, :32].copy()
    idx = np.argsort(-want, axis=1)[:, :8]
    np.put_along_axis(want, idx, 5.0, axis=1)
    np.testing.assert_array_equal(got, want)


def test_arg_values_name_nki_and_numpy_objects():
    from tusk.frontend.nki import language as nl
    from tusk.frontend.nki.isa_signature import reduce_cmd

    assert parse_value("np.greater_equal") is np.greater_equal
    assert parse_value("nl.add") is nl.add
    assert parse_value("nisa.reduce_cmd.load_reduce") is reduce_cmd.load_reduce
    assert parse_value("-inf") == -math.inf and math.isnan(parse_value("nan"))
    assert parse_value("np.no_such_name") == "np.no_such_name"
    assert parse_value("nl._private") == "nl._private"
    assert arg_text(parse_value("nl.add")) == "tusk.frontend.nki.language.add"  # no address in the key
    assert arg_text(parse_value("np.less")) == "numpy.less"


def test_a_cumulative_reduce_continues_the_register_tensor_scalar_reduce_left(tmp_path):
    """NKI: tensor_scalar_reduce's registers are the ones tensor_scalar_cumulative continues."""
    x = RNG.integers(-8, 8, (8, 8)).astype(np.float32)
    got = run(tmp_path, V2, """
        @nki.jit
        def k(x):
            out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
            t = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x)
            d = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
            r = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_scalar_cumulative(d, t, nl.add, nl.add, 0.0)
            nisa.tensor_scalar_reduce(d, t, nl.multiply, 2.0, nl.add, r)
            nisa.tensor_scalar_cumulative(d, t, nl.add, nl.add, 0.0, reduce_cmd=nisa.reduce_cmd.reduce)
            nisa.dma_copy(dst=out, src=d)
            return out
    """, {"x": x})["out"]
    np.testing.assert_array_equal(got, (2 * x).sum(1, keepdims=True) + np.cumsum(x, axis=1))


TSR_CHAIN = """
    @nki.jit
    def k(x):
        P, F = x.shape
        out = nl.ndarray((P, 2), dtype=nl.float32, buffer=nl.shared_hbm)
        ys = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        y = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
        r = nl.ndarray((P, 2), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar_reduce(dst=y[:, 0:16], data=t[:, 0:16], op0=nl.multiply, operand0=2.0,
                                  reduce_op=RED, reduce_res=None, reduce_cmd=nisa.reduce_cmd.reset_reduce)
        nisa.tensor_scalar_reduce(dst=y[:, 16:32], data=t[:, 16:32], op0=nl.multiply, operand0=2.0,
                                  reduce_op=RED, reduce_res=r[:, 0:1], reduce_cmd=nisa.reduce_cmd.reduce)
        nisa.tensor_scalar_reduce(dst=y[:, 32:48], data=t[:, 32:48], op0=nl.multiply, operand0=2.0,
                                  reduce_op=RED, reduce_cmd=nisa.reduce_cmd.reduce)
        nisa.tensor_scalar_reduce(dst=y[:, 48:64], data=t[:, 48:64], op0=nl.multiply, operand0=2.0,
                                  reduce_op=RED, reduce_res=r[:, 1:2], reduce_cmd=nisa.reduce_cmd.reduce,
                                  reduce_res_negate=True)
        nisa.dma_copy(dst=out, src=r)
        nisa.dma_copy(dst=ys, src=y)
        return out, ys
"""


@pytest.mark.parametrize("red, fold", [("nl.add", np.sum), ("nl.maximum", np.max), ("nl.minimum", np.min),
                                       ("nl.multiply", np.prod)])
def test_tensor_scalar_reduce_chain_keeps_the_registers_between_calls_without_reduce_res(tmp_path, red, fold):
    """NKI 0.6.0: reduce_res=None keeps the reduction in the Vector engine's registers; reduce continues them
    and a later reduce_res reads them out (negated with reduce_res_negate, the registers keep their sign)."""
    values = [-1.0, -0.5, 0.5, 1.0] if red == "nl.multiply" else range(-8, 8)  # exact in float32
    x = RNG.choice(np.array(values, np.float32), (16, 64))
    got = run(tmp_path, V2, TSR_CHAIN.replace("RED", red), {"x": x})
    y = 2 * x
    np.testing.assert_array_equal(got["ys"], y)
    np.testing.assert_array_equal(got["out"][:, 0], fold(y[:, :32], axis=1))
    np.testing.assert_array_equal(got["out"][:, 1], -fold(y, axis=1))


@pytest.mark.parametrize("init", ["2.5", "i"])
def test_tensor_scalar_reduce_load_reduce_starts_the_registers_from_reduce_init(tmp_path, init):
    x = RNG.integers(-8, 8, (16, 32)).astype(np.float32)
    i0 = RNG.integers(-8, 8, (16, 1)).astype(np.float32)
    got = run(tmp_path, V2, f"""
        @nki.jit
        def k(x, init):
            out = nl.ndarray((16, 2), dtype=nl.float32, buffer=nl.shared_hbm)
            t = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
            i = nl.ndarray(init.shape, dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x)
            nisa.dma_copy(dst=i, src=init)
            y = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
            r = nl.ndarray((16, 2), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_scalar_reduce(y[:, 0:16], t[:, 0:16], nl.add, 1.0, nl.add, r[:, 0:1],
                                      reduce_cmd=nisa.reduce_cmd.load_reduce, reduce_init={init})
            nisa.tensor_scalar_reduce(y[:, 16:32], t[:, 16:32], nl.add, 1.0, nl.add, r[:, 1:2],
                                      reduce_cmd=nisa.reduce_cmd.reduce)
            nisa.dma_copy(dst=out, src=r)
            return out
    """, {"x": x, "init": i0})["out"]
    start = np.float32(2.5) if init == "2.5" else i0[:, 0]
    first = start + (x[:, :16] + 1).sum(1)
    np.testing.assert_array_equal(got[:, 0], first)
    np.testing.assert_array_equal(got[:, 1], first + (x[:, 16:] + 1).sum(1))


def test_tensor_scalar_reduce_shares_the_registers_with_select_reduce_and_range_select(tmp_path):
    """A range_select starts the running maximum, tensor_scalar_reduce continues it without reading it out,
    select_reduce continues it and reads it out."""
    x = RNG.integers(-50, 50, (16, 96)).astype(np.float32)
    got = run(tmp_path, V2, """
        @nki.jit
        def k(x, lo, hi):
            out = nl.ndarray((16, 1), dtype=nl.float32, buffer=nl.shared_hbm)
            t = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
            b0 = nl.ndarray((16, 1), dtype=nl.float32, buffer=nl.sbuf)
            b1 = nl.ndarray((16, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x)
            nisa.dma_copy(dst=b0, src=lo)
            nisa.dma_copy(dst=b1, src=hi)
            a = nl.ndarray((16, 32), dtype=nl.float32, buffer=nl.sbuf)
            nisa.range_select(a, t[:, 0:32], nl.greater_equal, nl.less, b0, b1,
                              reduce_cmd=nisa.reduce_cmd.reset_reduce, reduce_op=nl.maximum)
            nisa.tensor_scalar_reduce(a, t[:, 32:64], nl.subtract, 100.0, nl.maximum,
                                      reduce_cmd=nisa.reduce_cmd.reduce)
            p = nl.ndarray((16, 32), dtype=nl.uint8, buffer=nl.sbuf)
            nisa.memset(p, 1)
            r = nl.ndarray((16, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.select_reduce(a, p, t[:, 64:96], -1000.0, reduce_res=r, reduce_cmd=nisa.reduce_cmd.reduce,
                               reduce_op=nl.maximum)
            nisa.dma_copy(dst=out, src=r)
            return out
    """, {"x": x, "lo": np.zeros((16, 1), np.float32), "hi": np.full((16, 1), 100.0, np.float32)})["out"]
    want = np.maximum(np.maximum(x[:, :32].max(1), (x[:, 32:64] - 100).max(1)), x[:, 64:].max(1))
    np.testing.assert_array_equal(got[:, 0], want)


TSR_REFUSED = """
    @nki.jit
    def k(x):
        out = nl.ndarray((8, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        y = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
        r = nl.ndarray((8, 1), dtype=nl.float32, buffer=nl.sbuf)
        CALLS
        nisa.dma_copy(dst=out, src=r)
        return out
"""


def test_tensor_scalar_reduce_continued_inside_a_loop_is_refused(tmp_path):
    """A continuation already made (reset_reduce then reduce) is still one tile: a loop body that reduces
    into it would read the pre-loop value on every iteration."""
    msg = refused(tmp_path, V2, TSR_REFUSED.replace("CALLS", """\
nisa.tensor_scalar_reduce(y, t, nl.add, 0.0, nl.add, reduce_cmd=nisa.reduce_cmd.reset_reduce)
        nisa.tensor_scalar_reduce(y, t, nl.add, 0.0, nl.add, reduce_cmd=nisa.reduce_cmd.reduce)
        for i in nl.affine_range(2):
            nisa.tensor_scalar_reduce(y, t, nl.add, 0.0, nl.add, r, reduce_cmd=nisa.reduce_cmd.reduce)"""),
                    ["f32[8,8]"])
    assert "bad.py:16:" in msg and "another loop body" in msg


IDLE_WHY = "reduce_cmd=nisa.reduce_cmd.idle (NKI documents reset_reduce, reduce and load_reduce"


@pytest.mark.parametrize("args, why", [
    ("r, reduce_cmd=nisa.reduce_cmd.reduce", "reads an accumulation that no earlier"),
    ("r, reduce_cmd=nisa.reduce_cmd.idle", IDLE_WHY),
    ("reduce_cmd=nisa.reduce_cmd.reset", "reduce_cmd=nisa.reduce_cmd.reset (NKI documents"),
    ("r, reduce_cmd=nisa.reduce_cmd.load_reduce", "reduce_init=None (reduce_cmd.load_reduce loads"),
    ("r, reduce_cmd=nisa.reduce_cmd.reduce, reduce_init=1.0", "reduce_init=1.0 (only with"),
    ("reduce_init=1.0", "reduce_init=1.0 (only with reduce_cmd.load_reduce, not reset_reduce)"),
    # with reduce_res too: a number init was dropped and a tile one added, so neither is taken
    ("r, reduce_init=1.0", "reduce_init=1.0 (only with reduce_cmd.load_reduce, not reset_reduce)"),
])
def test_tensor_scalar_reduce_commands_nki_does_not_document_are_refused_at_their_line(tmp_path, args, why):
    msg = refused(tmp_path, V2, TSR_REFUSED.replace("CALLS", f"nisa.tensor_scalar_reduce(y, t, nl.add, 0.0, nl.add, {args})"),
                  ["f32[8,8]"])
    assert "bad.py:13:" in msg and "nisa.tensor_scalar_reduce" in msg and why in msg, msg


def test_fp8_e5m2_double_row_matmul_runs_in_the_interpreter(tmp_path):
    sa = RNG.integers(-3, 4, (128, 2, 4)).astype(np.float32)
    sb = RNG.integers(-3, 4, (128, 2, 32)).astype(np.float32)
    path = tmp_path / "k.py"
    path.write_text(V1 + textwrap.dedent("""
        @nki.jit
        def k(sa, sb):
            out = nl.ndarray((4, 32), dtype=nl.float32, buffer=nl.shared_hbm)
            c = nisa.nc_matmul(nl.load(sa), nl.load(sb), perf_mode="double_row_gen3")
            nl.store(out, c)
            return out
    """))
    got = run_klr(trace_file(path, "k", ["fp8_e5m2[128,2,4]", "fp8_e5m2[128,2,32]"]), {"sa": sa, "sb": sb})["out"]
    np.testing.assert_array_equal(got, np.einsum("kli,klj->ij", sa, sb))


def test_e5m2_rounds_to_nearest_even_and_overflows_to_infinity():
    from tusk.sim.minifloat import FORMATS

    e5m2 = FORMATS["float8e5"]
    x = np.array([1.125, 1.375, -1.75, 57344.0, 61439.0, 61440.0, 2.0 ** -17, np.nan], np.float32)
    got = e5m2.decode(e5m2.encode(x))
    np.testing.assert_array_equal(got[:6], [1.0, 1.5, -1.75, 57344.0, 57344.0, np.inf])
    assert got[6] == 0.0 and np.isnan(got[7])  # 2**-17 is halfway to the smallest subnormal: even, zero


def test_double_row_matmul_of_tiles_picked_by_a_flattened_grid_index(tmp_path):
    # the [K, 2, M] operand indexes a [K, 2 * M] tile by i_t * M + i_m: each packed row's run is checked as
    # that row's, not against a dim the row subscript dropped
    sa, sb = rand(128, 32), rand(128, 2, 64)
    got = run(tmp_path, V1, """
        @nki.jit
        def k(sa, sb):
            out = nl.ndarray((8, 64), dtype=nl.float32, buffer=nl.shared_hbm)
            a, b = nl.load(sa), nl.load(sb)
            i_k, i_t, i_m = nl.mgrid[0:128, 0:2, 0:8]
            c = nisa.nc_matmul(a[i_k, 16 + i_t * 8 + i_m], b, perf_mode='double_row_gen3')
            nl.store(out, c)
            return out
    """, {"sa": sa, "sb": sb})["out"]
    want = np.einsum("kli,klj->ij", sa[:, 16:32].reshape(128, 2, 8), sb)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("order", ["t, col", "col, t"])
def test_tensor_tensor_broadcasts_a_column_along_the_free_axis(tmp_path, order):
    x, s = rand(16, 40), rand(16, 1)
    got = run(tmp_path, V1, f"""
        @nki.jit
        def k(x, s):
            out = nl.ndarray((16, 40), dtype=nl.float32, buffer=nl.shared_hbm)
            t, col = nl.load(x), nl.load(s)
            nl.store(out, nisa.tensor_tensor({order}, nl.subtract))
            return out
    """, {"x": x, "s": s})["out"]
    np.testing.assert_allclose(got, x - s if order == "t, col" else s - x, rtol=1e-6)


@pytest.mark.parametrize("dtype, negate", [("nl.float32", True), ("nl.bfloat16", False), ("nl.bfloat16", True)])
def test_a_reduce_continues_the_registers_not_a_negated_or_rounded_read_out(tmp_path, dtype, negate):
    """reset_reduce read out negated (or rounded into bf16), then reduce: the registers kept the exact sum; they
    were rebuilt from what was read out, so the continuation started from -sum (0 in the end, not 2 sum)."""
    x = RNG.integers(-4, 4, (16, 8)).astype(np.float32)
    got = run(tmp_path, V2, f"""
        @nki.jit
        def k(x):
            out = nl.ndarray((16, 1), dtype=nl.float32, buffer=nl.shared_hbm)
            t = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x)
            y = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
            r = nl.ndarray((16, 1), dtype={dtype}, buffer=nl.sbuf)
            nisa.tensor_scalar_reduce(y, t, nl.add, 0.0, nl.add, r, reduce_res_negate={negate})
            nisa.tensor_scalar_reduce(y, t, nl.add, 0.0, nl.add, r, reduce_cmd=nisa.reduce_cmd.reduce)
            o = nl.ndarray((16, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(o, r)
            nisa.dma_copy(dst=out, src=o)
            return out
    """, {"x": x})["out"]
    np.testing.assert_array_equal(got[:, 0], 2 * x.sum(1))
