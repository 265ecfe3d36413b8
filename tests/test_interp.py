"""The interpreter computes what docs/semantics.md says, checked against independent numpy."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.programs import tiled_exp_module
from tusk.ir.builder import Builder
from tusk.ir.columns import Record
from tusk.ir.enums import Dt, Engine, FnKind, Kind, Op, Role
from tusk.ir.errors import TuskError
from tusk.ir.expr import AffinePredicate, indirect, runtime
from tusk.ir.module import Module
from tusk.ir.values import DynamicAPInfo
from tusk.sim.interp import random_inputs, run, same_outputs
from tusk.sim.memory import bf16_to_f32, f32_to_bf16

RNG = np.random.default_rng(1234)


def _unary_program(shape=(4, 8), dtype="float32", out_dtype=None):
    """x (DRAM) -> t (SB); the caller adds instructions from t to u; u -> y (DRAM)."""
    b = Builder()
    x = b.dram("x", shape, dtype, kind="ExternalInput")
    y = b.dram("y", shape, out_dtype or dtype, kind="ExternalOutput")
    t = b.sbuf("t", shape, dtype, addr=0)
    u = b.sbuf("u", shape, out_dtype or dtype, addr=1024)
    b.dma(t.ap(), x.ap())
    return b, x, y, t, u


def _finish(b, y, u):
    b.dma(y.ap(), u.ap())
    return b.module()


# --------------------------------------------------------------------------- data movement


def test_dma_round_trip_is_bit_exact_including_nan_payloads():
    b, x, y, t, u = _unary_program()
    b.copy(u.ap(), t.ap())
    m = _finish(b, y, u)
    a = RNG.standard_normal((4, 8)).astype(np.float32)
    a.view(np.uint32)[0, 0] = 0x7FC01234  # a NaN with a payload
    a[1, 1] = -0.0
    out = run(m, {"x": a})["y"]
    assert out.dtype == np.float32 and out.shape == (4, 8)
    assert np.array_equal(out.view(np.uint32), a.view(np.uint32))


def test_a_memory_location_beyond_the_machine_is_refused_by_name():
    """A DRAM tensor placed (or sized) past anything the machine can hold is an input error naming it; numpy's
    MemoryError ("Unable to allocate 16.0 TiB") escaped before."""
    b, x, y, t, u = _unary_program()
    b.copy(u.ap(), t.ap())
    m = _finish(b, y, u)
    fn = m.functions[0]
    row = [fn.strings[n] for n in fn.memlocs["name"].tolist()].index("y")
    fn.memlocs.set("addr", row, 1 << 50)
    with pytest.raises(TuskError, match=r"DRAM needs 1,125,899,906,842,\d+ bytes, more than this machine has free"):
        run(m, {"x": np.zeros((4, 8), np.float32)})


def test_random_inputs_beyond_the_machine_are_refused_by_name():
    b = Builder()
    b.dram("x", (1 << 20, 1 << 22), "float32", kind="ExternalInput")
    with pytest.raises(TuskError, match=r"input x of shape \[1048576, 4194304\] is more than this machine has free"):
        random_inputs(b.module())


def test_random_inputs_the_process_may_not_allocate_are_refused_by_name(monkeypatch):
    """Free by /proc/meminfo but not to this process (a ulimit; bench/fuzz_inputs.py --seed 26 under
    ``ulimit -v``): numpy's MemoryError is the same refusal, not a crash."""
    from tusk.sim import interp

    def no_memory(rng, shape, dt):
        raise MemoryError("Unable to allocate 4.00 GiB")

    monkeypatch.setattr(interp, "_random_values", no_memory)
    b = Builder()
    b.dram("x", (16384, 256, 256), "float32", kind="ExternalInput")
    with pytest.raises(TuskError, match=r"input x of shape \[16384, 256, 256\] is more than this machine has free"):
        random_inputs(b.module())


def test_an_instruction_the_machine_cannot_hold_is_an_error_at_that_instruction(monkeypatch):
    """An access pattern of 2^31 x 64 elements (a mutated KLR file's iota) made numpy raise MemoryError out of the
    interpreter; it is an input error located at the instruction."""
    from tusk.sim import control

    b, x, y, t, u = _unary_program()
    b.copy(u.ap(), t.ap())
    m = _finish(b, y, u)

    def too_big(fr, i):
        raise MemoryError("Unable to allocate 1.00 TiB for an array with shape (64, 2147483648)")

    table = list(control._table())
    table[Op.TensorCopy] = too_big
    monkeypatch.setattr(control, "TABLE", table)
    with pytest.raises(TuskError, match=r"instruction \S+ \(\w+\): it needs more memory than this machine has"):
        run(m, {"x": np.zeros((4, 8), np.float32)})


def test_copy_converts_float_to_int_rounding_half_to_even_and_saturating():
    b, x, y, t, u = _unary_program(shape=(1, 6), out_dtype="int8")
    b.copy(u.ap(), t.ap())
    m = _finish(b, y, u)
    a = np.array([[0.5, 1.5, -2.5, 300.0, -300.0, np.nan]], dtype=np.float32)
    out = run(m, {"x": a})["y"]
    assert out.dtype == np.int8
    assert out.tolist() == [[0, 2, -2, 127, -128, 0]]


def test_bfloat16_storage_rounds_to_nearest_even():
    # 1 + 2^-8 is exactly half way between two bf16 neighbours: ties go to the even one (1.0);
    # 1 + 3*2^-8 is half way too and rounds up to the even 1 + 2^-6.
    vals = np.array([1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-9, -2.0, np.inf], dtype=np.float32)
    assert bf16_to_f32(f32_to_bf16(vals)).tolist() == [1.0, 1 + 2**-6, 1.0, -2.0, np.inf]
    b, x, y, t, u = _unary_program(shape=(1, 5), out_dtype="bfloat16")
    b.copy(u.ap(), t.ap())
    m = _finish(b, y, u)
    out = run(m, {"x": vals.reshape(1, 5)})["y"]
    assert out.dtype == np.float32 and out.reshape(-1).tolist() == [1.0, 1 + 2**-6, 1.0, -2.0, np.inf]


def test_fp8_is_copied_byte_for_byte_and_computed_in_float32():
    b, x, y, t, u = _unary_program(shape=(2, 4), dtype="float8e4")
    b.copy(u.ap(), t.ap())
    m = _finish(b, y, u)
    raw = np.arange(8, dtype=np.uint8).reshape(2, 4) * 17
    raw[1, 3] = 0x7D  # a NaN code with its own payload
    assert np.array_equal(run(m, {"x": raw})["y"], raw)
    # e4m3 (Neuron's, largest 240): exp(1) = 2.718 -> 2.75 (steps of 1/4 in [2, 4)), exp(2) = 7.389 -> 7.5,
    # exp(6) = 403 overflows to infinity, exp(-10) = 4.5e-5 is under half the smallest subnormal (2^-9)
    b, x, y, t, u = _unary_program(shape=(1, 5), dtype="float8e4")
    b.activation(u.ap(), t.ap(), "Exp")
    vals = np.array([[0.0, 1.0, 2.0, 6.0, -10.0]], np.float32)
    got = run(_finish(b, y, u), {"x": vals})["y"]
    assert got.dtype == np.uint8
    assert got.tolist() == [[0x38, 0x43, 0x4F, 0x78, 0x00]]


def test_fp8_kinds_overflow_as_their_format_says():
    vals = np.array([[15.5, 16.0, 448.0, 464.0, 470.0, -1e6]], np.float32)
    b, x, y, t, u = _unary_program(shape=(1, 6), dtype="float32", out_dtype="float8_e4m3fn")
    b.copy(u.ap(), t.ap())
    # e4m3fn has no infinity (15.5 ties to the even 16); 464 is the tie between 448 (even code) and NaN; past it, NaN
    assert run(_finish(b, y, u), {"x": vals})["y"].tolist() == [[0x58, 0x58, 0x7E, 0x7E, 0x7F, 0xFF]]
    b, x, y, t, u = _unary_program(shape=(1, 6), dtype="float32", out_dtype="float8e3")
    b.copy(u.ap(), t.ap())
    # e3m4 (IEEE-like, bias 3): 15.5 is the largest, 15.75 and up are infinity
    assert run(_finish(b, y, u), {"x": vals})["y"].tolist() == [[0x6F, 0x70, 0x70, 0x70, 0x70, 0xF0]]


def test_packed_mx_dtypes_are_moved_but_not_computed():
    b, x, y, t, u = _unary_program(shape=(2, 4), dtype="float8_e4m3fn_x4")
    b.activation(u.ap(), t.ap(), "Exp")
    with pytest.raises(TuskError, match="dtype float8_e4m3fn_x4 not supported by the interpreter"):
        run(_finish(b, y, u), {"x": np.zeros((2, 4), np.uint32)})


def test_partition_offset_tile_copy():
    """A tile of rows 2..3, columns 4..7 lands where the pitch-form addressing says."""
    b = Builder()
    x = b.dram("x", (4, 8), kind="ExternalInput")
    y = b.dram("y", (2, 4), kind="ExternalOutput")
    t = b.sbuf("t", (4, 8), addr=0)
    s = b.sbuf("s", (2, 4), addr=512, base=5)
    b.dma(t.ap(), x.ap())
    b.copy(s.ap(), t.tile(2, 2, 4, 4))
    b.dma(y.ap(), s.ap())
    a = RNG.standard_normal((4, 8)).astype(np.float32)
    assert np.array_equal(run(b.module(), {"x": a})["y"], a[2:4, 4:8])


# --------------------------------------------------------------------------- ALU families

BINARY = {
    "add": lambda a, b: a + b,
    "subtract": lambda a, b: a - b,
    "mult": lambda a, b: a * b,
    "divide": lambda a, b: a / b,
    "max": np.maximum,
    "min": np.minimum,
    "pow": lambda a, b: np.power(np.abs(a), b),
    "is_equal": lambda a, b: (a == b).astype(np.float32),
    "not_equal": lambda a, b: (a != b).astype(np.float32),
    "is_gt": lambda a, b: (a > b).astype(np.float32),
    "is_ge": lambda a, b: (a >= b).astype(np.float32),
    "is_lt": lambda a, b: (a < b).astype(np.float32),
    "is_le": lambda a, b: (a <= b).astype(np.float32),
    "average": lambda a, b: (a + b) / 2,
    "abs_max": lambda a, b: np.maximum(np.abs(a), np.abs(b)),
    "abs_min": lambda a, b: np.minimum(np.abs(a), np.abs(b)),
    "logical_and": lambda a, b: ((a != 0) & (b != 0)).astype(np.float32),
    "logical_or": lambda a, b: ((a != 0) | (b != 0)).astype(np.float32),
}


def _binary_program(op, dtype="float32", shape=(4, 8)):
    b = Builder()
    x0 = b.dram("x0", shape, dtype, kind="ExternalInput")
    x1 = b.dram("x1", shape, dtype, kind="ExternalInput")
    y = b.dram("y", shape, dtype, kind="ExternalOutput")
    t0 = b.sbuf("t0", shape, dtype, addr=0)
    t1 = b.sbuf("t1", shape, dtype, addr=256)
    u = b.sbuf("u", shape, dtype, addr=512)
    b.dma(t0.ap(), x0.ap())
    b.dma(t1.ap(), x1.ap())
    b.tensor_tensor(u.ap(), t0.ap(), t1.ap(), op)
    b.dma(y.ap(), u.ap())
    return b.module()


@pytest.mark.parametrize("op", sorted(BINARY))
def test_tensor_tensor_float_ops(op):
    a = RNG.uniform(-3, 3, (4, 8)).astype(np.float32)
    c = RNG.uniform(-3, 3, (4, 8)).astype(np.float32)
    c[0, :4] = a[0, :4]  # some equal pairs for the comparisons
    c[1, :2] = 0.0
    if op == "pow":
        a = np.abs(a)
    with np.errstate(divide="ignore", invalid="ignore"):
        want = BINARY[op](a.astype(np.float64), c.astype(np.float64))
    got = run(_binary_program(op), {"x0": a, "x1": c})["y"]
    np.testing.assert_allclose(got, want.astype(np.float32), rtol=2e-6, atol=1e-6)


INT_BINARY = {
    "add": lambda a, b: a + b,
    "divide": lambda a, b: np.where(b == 0, 0, a // np.where(b == 0, 1, b)),
    "mod": lambda a, b: np.where(b == 0, 0, a % np.where(b == 0, 1, b)),
    "bitwise_and": lambda a, b: a & b,
    "bitwise_or": lambda a, b: a | b,
    "bitwise_xor": lambda a, b: a ^ b,
    "arith_shift_left": lambda a, b: a << b,
    "arith_shift_right": lambda a, b: a >> b,
    "average": lambda a, b: (a + b) // 2,
    "is_lt": lambda a, b: (a < b).astype(np.int64),
}


@pytest.mark.parametrize("op", sorted(INT_BINARY))
def test_tensor_tensor_int_ops(op):
    a = RNG.integers(-50, 50, (4, 8)).astype(np.int32)
    c = RNG.integers(0, 6, (4, 8)).astype(np.int32)
    got = run(_binary_program(op, "int32"), {"x0": a, "x1": c})["y"]
    assert got.dtype == np.int32
    assert np.array_equal(got, INT_BINARY[op](a.astype(np.int64), c.astype(np.int64)).astype(np.int32))


def test_bitwise_op_on_floats_is_an_error():
    with pytest.raises(TuskError, match="bitwise_and.*integer operands"):
        run(_binary_program("bitwise_and"), {"x0": np.ones((4, 8), np.float32), "x1": np.ones((4, 8), np.float32)})


def test_tensor_scalar_chain_and_reverse():
    b, x, y, t, u = _unary_program()
    b.tensor_scalar(u.ap(), t.ap(), "subtract", 1.5, "mult", 4.0, reverse0=True)  # (1.5 - x) * 4
    m = _finish(b, y, u)
    a = RNG.standard_normal((4, 8)).astype(np.float32)
    np.testing.assert_array_equal(run(m, {"x": a})["y"], (np.float32(1.5) - a) * np.float32(4.0))


def test_tensor_scalar_ptr_uses_one_scalar_per_partition():
    b, x, y, t, u = _unary_program()
    col = b.sbuf("col", (4, 1), addr=2048)
    b.iota(col.ap(), 1, [[1, 1]], 10)  # col[p] = 1 + 10 p
    b.tensor_scalar_ptr(u.ap(), t.ap(), col.ap(), "mult", "add", scalar1=col.ap())
    m = _finish(b, y, u)
    a = RNG.standard_normal((4, 8)).astype(np.float32)
    c = (1 + 10 * np.arange(4, dtype=np.float32))[:, None]
    np.testing.assert_array_equal(run(m, {"x": a})["y"], a * c + c)


ACT = {
    "Identity": lambda x: x,
    "Copy": lambda x: x,
    "Exp": np.exp,
    "Relu": lambda x: np.maximum(x, 0),
    "Gelu": lambda x: 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2))),
    "Gelu_apprx_tanh": lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))),
    "Sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "Silu": lambda x: x / (1 + np.exp(-x)),
    "Tanh": np.tanh,
    "Sqrt": lambda x: np.sqrt(np.abs(x)),
    "Rsqrt": lambda x: 1 / np.sqrt(np.abs(x)),
    "Reciprocal": lambda x: 1 / x,
    "Square": lambda x: x * x,
    "Ln": lambda x: np.log(np.abs(x)),
    "Abs": np.abs,
    "Sin": np.sin,
    "Sign": np.sign,
    "Softplus": lambda x: np.log1p(np.exp(x)),
    "Erf": lambda x: np.vectorize(math.erf)(x),
}
NEEDS_POSITIVE = {"Sqrt", "Rsqrt", "Ln"}


@pytest.mark.parametrize("func", sorted(ACT))
def test_activation_functions(func):
    b, x, y, t, u = _unary_program()
    b.activation(u.ap(), t.ap(), func)
    m = _finish(b, y, u)
    a = RNG.uniform(-3, 3, (4, 8)).astype(np.float32)
    a[a == 0] = 0.5
    if func in NEEDS_POSITIVE:
        a = np.abs(a)
    want = ACT[func](a.astype(np.float64))
    np.testing.assert_allclose(run(m, {"x": a})["y"], want, rtol=3e-6, atol=3e-7)


def test_activation_scale_and_per_partition_bias():
    b, x, y, t, u = _unary_program()
    bias = b.sbuf("bias", (4, 1), addr=2048)
    b.iota(bias.ap(), 0, [[1, 1]], 1)  # bias[p] = p
    b.activation(u.ap(), t.ap(), "Relu", scale=-2.0, bias=bias.ap())
    m = _finish(b, y, u)
    a = RNG.standard_normal((4, 8)).astype(np.float32)
    want = np.maximum(a * np.float32(-2.0) + np.arange(4, dtype=np.float32)[:, None], 0)
    np.testing.assert_array_equal(run(m, {"x": a})["y"], want)


def test_unknown_activation_function_is_an_error():
    b, x, y, t, u = _unary_program()
    b.activation(u.ap(), t.ap(), "Dsqrt")
    with pytest.raises(TuskError, match="activation function 'Dsqrt' is not supported"):
        run(_finish(b, y, u), {"x": np.ones((4, 8), np.float32)})


@pytest.mark.parametrize("op,axis", [("add", "X"), ("max", "X"), ("min", "X"), ("mult", "X"), ("add", "XY")])
def test_tensor_reduce(op, axis):
    b = Builder()
    x = b.dram("x", (4, 2, 3), kind="ExternalInput")
    t = b.sbuf("t", (4, 6), addr=0)
    b.dma(t.ap(), x.ap())
    if axis == "X":
        y = b.dram("y", (4, 2), kind="ExternalOutput")
        r = b.sbuf("r", (4, 2), addr=256)
    else:
        y = b.dram("y", (4, 1), kind="ExternalOutput")
        r = b.sbuf("r", (4, 1), addr=256)
    b.reduce(r.ap(), t.ap([[6, 4], [3, 2], [1, 3]]), op, axis=axis)
    b.dma(y.ap(), r.ap())
    a = RNG.uniform(0.5, 2, (4, 2, 3)).astype(np.float32)
    f = {"add": np.sum, "max": np.max, "min": np.min, "mult": np.prod}[op]
    want = f(a.astype(np.float64), axis=2 if axis == "X" else (1, 2)).reshape(y.shape)
    np.testing.assert_allclose(run(b.module(), {"x": a})["y"], want, rtol=1e-6)


def test_memset_and_iota():
    b = Builder()
    y = b.dram("y", (4, 6), "int32", kind="ExternalOutput")
    z = b.dram("z", (4, 6), kind="ExternalOutput")
    t = b.sbuf("t", (4, 6), "int32", addr=0)
    f = b.sbuf("f", (4, 6), addr=256)
    b.iota(t.ap(), 7, [[2, 3], [10, 2]], channel_multiplier=100)
    b.memset(f.ap(), 2.5)
    b.dma(y.ap(), t.ap())
    b.dma(z.ap(), f.ap())
    out = run(b.module(), {})
    p, i, j = np.meshgrid(np.arange(4), np.arange(3), np.arange(2), indexing="ij")
    assert np.array_equal(out["y"], (7 + 100 * p + 2 * i + 10 * j).reshape(4, 6))
    assert np.array_equal(out["z"], np.full((4, 6), 2.5, np.float32))


# --------------------------------------------------------------------------- matmul


def _matmul_program(accumulate, loop: int = 0):
    b = Builder()
    w = b.dram("w", (8, 4), kind="ExternalInput")   # stationary [K=8, M=4]
    v = b.dram("v", (8, 5), kind="ExternalInput")   # moving [K=8, N=5]
    y = b.dram("y", (4, 5), kind="ExternalOutput")
    tw = b.sbuf("tw", (8, 4), addr=0)
    tv = b.sbuf("tv", (8, 5), addr=64)
    ps = b.psum("ps", (4, 5), addr=0)
    o = b.sbuf("o", (4, 5), addr=128)
    b.dma(tw.ap(), w.ap())
    b.dma(tv.ap(), v.ap())
    b.memset(ps.ap(), 100.0)
    if loop:
        with b.loop("k", 0, loop) as k:
            b.matmul(ps.ap(), tw.ap(), tv.ap(), accumulate=k)  # zero on the first pass, then accumulate
    else:
        b.matmul(ps.ap(), tw.ap(), tv.ap(), accumulate=accumulate)
    b.copy(o.ap(), ps.ap())
    b.dma(y.ap(), o.ap())
    return b.module()


def test_matmul_overwrites_or_accumulates_psum():
    w = RNG.integers(-3, 4, (8, 4)).astype(np.float32)
    v = RNG.integers(-3, 4, (8, 5)).astype(np.float32)
    prod = w.T @ v
    assert np.array_equal(run(_matmul_program(0), {"w": w, "v": v})["y"], prod)
    assert np.array_equal(run(_matmul_program(1), {"w": w, "v": v})["y"], prod + 100)
    assert np.array_equal(run(_matmul_program(None, loop=3), {"w": w, "v": v})["y"], 3 * prod)


# --------------------------------------------------------------------------- registers and dynamic addressing


def _gather_program(scalar: str | None = None):
    """out[r] = table[ids[r]] (a gather), or table rows at a runtime scalar offset."""
    b = Builder()
    fn = b.fn
    table = b.dram("table", (16, 8), kind="ExternalInput")
    ids = b.dram("ids", (4, 1), "int32", kind="ExternalInput")
    out = b.dram("out", (4, 8), kind="ExternalOutput")
    tidx = b.sbuf("tidx", (4, 1), "int32", addr=0)
    tdst = b.sbuf("tdst", (4, 8), addr=64)
    b.dma(tidx.ap(), ids.ap())
    pat = fn.pattern_id([[8, 4], [1, 8]])
    if scalar == "register":
        r = b.register("r")
        b.tensor_load(r, tidx.ap([[1, 1], [1, 1]]))  # r = ids[0]
        dyn = DynamicAPInfo(((8, 4), (1, 8)), ((runtime("r"), 8),), 0)
        rows = [(Role.IN, Kind.PHYSICAL, Dt.float32, table.memlocs[0], 8, pat, -1, fn.intern(dyn), -1)]
    else:
        dyn = DynamicAPInfo(((8, 4), (1, 8)), ((indirect(1), 8),), 0, indirect_dim=0, indirect_dim_max_index=16)
        n_idx = 1 if scalar == "memory" else 4
        rows = [(Role.IN, Kind.PHYSICAL, Dt.float32, table.memlocs[0], 8 if scalar else 0, pat, -1,
                 fn.intern(dyn), -1),
                (Role.INDIRECT, Kind.PHYSICAL, Dt.int32, tidx.memlocs[0], 0, fn.pattern_id([[1, n_idx], [1, 1]]),
                 -1, -1, -1)]
    rows.append((Role.OUT, Kind.PHYSICAL, Dt.float32, tdst.memlocs[0], 0, pat, -1, -1, -1))
    fn.add_inst(Op.DMACopy, Engine.DMA, b._block, "gather", rows)
    b.dma(out.ap(), tdst.ap())
    return b.module()


def test_gather_by_index_vector():
    table = RNG.standard_normal((16, 8)).astype(np.float32)
    ids = np.array([[5], [0], [15], [5]], dtype=np.int32)
    assert np.array_equal(run(_gather_program(), {"table": table, "ids": ids})["out"], table[[5, 0, 15, 5]])


@pytest.mark.parametrize("where", ["register", "memory"])
def test_scalar_runtime_offset(where):
    """Static offset 8 (one row) + 8 * ids[0] rows."""
    table = RNG.standard_normal((16, 8)).astype(np.float32)
    ids = np.array([[3], [9], [9], [9]], dtype=np.int32)
    got = run(_gather_program(where), {"table": table, "ids": ids})["out"]
    assert np.array_equal(got, table[4:8])


def test_register_ops_and_tensor_save():
    b = Builder()
    y = b.dram("y", (1, 4), "int32", kind="ExternalOutput")
    t = b.sbuf("t", (1, 4), "int32", addr=0)
    r, s = b.register("r"), b.register("s")
    b.register_move(r, 7)
    b.register_alu(s, r, "mult", 6)       # 42
    b.register_alu(s, s, "subtract", 2)   # 40
    b.tensor_save(t.tile(0, 1, 0, 1), s)
    b.register_alu(r, r, "arith_shift_left", 2)  # 28
    b.tensor_save(t.tile(0, 1, 1, 1), r)
    b.tensor_load(s, t.tile(0, 1, 0, 1))
    b.register_alu(s, s, "divide", 3)    # 13
    b.tensor_save(t.tile(0, 1, 2, 1), s)
    b.register_alu(s, s, "is_gt", 12)    # 1
    b.tensor_save(t.tile(0, 1, 3, 1), s)
    b.dma(y.ap(), t.ap())
    assert run(b.module(), {})["y"].tolist() == [[40, 28, 13, 1]]


# --------------------------------------------------------------------------- control flow


def test_static_loop_over_tiles(tiled_module):
    inp = random_inputs(tiled_module, 3)
    out = run(tiled_module, inp, strict=True)
    assert np.array_equal(out["y"], np.exp(inp["x"]))


def _counter_program(kind: str, n: int):
    """acc = 0; repeat n times: acc += 1 (a loop of the given kind); y = acc."""
    b = Builder()
    y = b.dram("y", (2, 4), kind="ExternalOutput")
    acc = b.sbuf("acc", (2, 4), addr=0)
    b.memset(acc.ap(), 0.0)
    r = b.register("r")
    b.register_move(r, n)
    if kind == "dynamic":
        with b.dynamic_loop("i", 0, r):
            b.tensor_scalar(acc.ap(), acc.ap(), "add", 1.0)
    elif kind == "dowhile":
        with b.do_while(r):
            b.tensor_scalar(acc.ap(), acc.ap(), "add", 1.0)
            b.register_alu(r, r, "subtract", 1)
    else:
        with b.loop("i", 0, 2 * n, 2):
            b.tensor_scalar(acc.ap(), acc.ap(), "add", 1.0)
    b.dma(y.ap(), acc.ap())
    return b.module()


@pytest.mark.parametrize("kind", ["static", "dynamic", "dowhile"])
def test_loops_run_their_trip_count(kind):
    assert np.array_equal(run(_counter_program(kind, 3), {})["y"], np.full((2, 4), 3.0, np.float32))


def test_dynamic_loop_reads_its_bound_when_it_starts():
    assert np.array_equal(run(_counter_program("dynamic", 5), {})["y"], np.full((2, 4), 5.0, np.float32))


def test_infinite_do_while_hits_the_step_limit():
    b = Builder()
    acc = b.sbuf("acc", (1, 1), addr=0)
    r = b.register("r")
    b.register_move(r, 1)
    with b.do_while(r):
        b.memset(acc.ap(), 1.0)
    with pytest.raises(TuskError, match="step limit"):
        run(b.module(), {}, max_steps=10_000)


def test_predicates_skip_instructions():
    b = Builder()
    y = b.dram("y", (1, 5), kind="ExternalOutput")
    t = b.sbuf("t", (1, 5), addr=0)
    b.memset(t.ap(), 0.0)
    with b.loop("i", 0, 5) as i:
        # column i gets 1 only where i >= 2 and i != 3
        b.memset(t.ap([[5, 1], [1, 1]], offset=i), 1.0, pred=[AffinePredicate(i - 2, "ge"), AffinePredicate(i - 3, "ne")])
    b.dma(y.ap(), t.ap())
    assert run(b.module(), {})["y"].tolist() == [[0, 0, 1, 0, 1]]


def test_block_tensor_index_selects_the_block():
    b = Builder()
    x = b.dram("x", (2, 4), kind="ExternalInput")
    y = b.dram("y", (2, 4), kind="ExternalOutput")
    blk = b.sbuf("blk", (1, 4), addr=0, blocks=2)
    with b.loop("i", 0, 2) as i:
        b.dma(blk.ap(block=i), x.tile(i, 1, 0, 4))
    with b.loop("j", 0, 2) as j:
        b.dma(y.tile(j, 1, 0, 4), blk.ap(block=1 - j))  # reversed
    a = RNG.standard_normal((2, 4)).astype(np.float32)
    assert np.array_equal(run(b.module(), {"x": a})["y"], a[::-1])


def test_branches_between_top_level_blocks():
    """i = 0; n = 4; loop: if i < n goto body else exit; body: acc += 2; i += 1; goto loop."""
    b = Builder()
    y = b.dram("y", (1, 2), kind="ExternalOutput")
    acc = b.sbuf("acc", (1, 2), addr=0)
    i, n = b.register("i"), b.register("n")
    b.memset(acc.ap(), 0.0)
    b.register_move(i, 0)
    b.register_move(n, 4)
    b.new_block("head")
    b.emit("CompareAndBranch", "SP", [i, n], attrs={"comp_op": "IS_LTREG", "on_true": "body", "on_false": "exit"})
    b.new_block("body")
    b.tensor_scalar(acc.ap(), acc.ap(), "add", 2.0)
    b.register_alu(i, i, "add", 1)
    b.emit("UnconditionalBranch", "SP", attrs={"target": "head"})
    b.new_block("exit")
    b.dma(y.ap(), acc.ap())
    assert run(b.module(), {})["y"].tolist() == [[8.0, 8.0]]


def test_kernel_call_binds_dram_by_func_args():
    k = Builder("kern", kind=FnKind.NKI)
    a = k.dram("a", (4, 8), kind="ExternalInput")
    o = k.dram("o", (4, 8), kind="ExternalOutput")
    s = k.sbuf("s", (4, 8), addr=4096)
    k.dma(s.ap(), a.ap())
    k.activation(s.ap(), s.ap(), "Exp")
    k.dma(o.ap(), s.ap())
    b = Builder("main")
    x = b.dram("x", (4, 8), kind="ExternalInput")
    y = b.dram("y", (4, 8), kind="ExternalOutput")
    b.emit("NKIKernel", "Unassigned", [x.ap()], [y.ap()],
           attrs={"func": "kern", "func_args": {"a": "x"}, "func_outs": {"o": "y"}})
    m = Module([b.function(), k.function()], attributes=Record.of({"neuron_core_id": 0}))
    xa = RNG.standard_normal((4, 8)).astype(np.float32)
    assert np.array_equal(run(m, {"x": xa})["y"], np.exp(xa))


def test_kernel_call_binds_by_equal_names_when_maps_are_empty():
    k = Builder("kern", kind=FnKind.NKI)
    a = k.dram("x", (4, 8), kind="ExternalInput")
    o = k.dram("y", (4, 8), kind="ExternalOutput")
    s = k.sbuf("s", (4, 8), addr=0)
    k.dma(s.ap(), a.ap())
    k.tensor_scalar(s.ap(), s.ap(), "mult", 3.0)
    k.dma(o.ap(), s.ap())
    b = Builder("main")
    x = b.dram("x", (4, 8), kind="ExternalInput")
    y = b.dram("y", (4, 8), kind="ExternalOutput")
    b.emit("NKIKernel", "Unassigned", [x.ap()], [y.ap()], attrs={"func": "kern"})
    m = Module([b.function(), k.function()])
    xa = RNG.standard_normal((4, 8)).astype(np.float32)
    assert np.array_equal(run(m, {"x": xa})["y"], xa * np.float32(3.0))


def test_loop_program_equals_its_hand_unrolled_form():
    rolled = tiled_exp_module(tiles=3, width=16)
    b = Builder()
    x = b.dram("x", (384, 16), kind="ExternalInput")
    y = b.dram("y", (384, 16), kind="ExternalOutput")
    t = b.sbuf("t", (128, 16), addr=0)
    for i in range(3):
        b.dma(t.ap(), x.tile(i * 128, 128, 0, 16))
        b.activation(t.ap(), t.ap(), "Exp")
        b.dma(y.tile(i * 128, 128, 0, 16), t.ap())
    inp = random_inputs(rolled, 7)
    assert same_outputs(run(rolled, inp), run(b.module(), inp))


def test_every_family_program_runs_strict(family_module):
    inp = random_inputs(family_module, 0)
    out = run(family_module, inp, strict=True)
    assert out["out"].shape == (128, 64) and np.isfinite(out["out"]).all()


# --------------------------------------------------------------------------- physical memory


def _two_buffer_program(b_addr: int):
    """t_a <- a; t_b <- b (t_b placed at b_addr); y = t_a + t_b."""
    b = Builder()
    xa = b.dram("a", (4, 16), kind="ExternalInput")
    xb = b.dram("b", (4, 16), kind="ExternalInput")
    y = b.dram("y", (4, 16), kind="ExternalOutput")
    ta = b.sbuf("ta", (4, 16), addr=0)        # bytes [0, 64) of partitions 0..3
    tb = b.sbuf("tb", (4, 16), addr=b_addr)
    tc = b.sbuf("tc", (4, 16), addr=4096)
    b.dma(ta.ap(), xa.ap())
    b.dma(tb.ap(), xb.ap())
    b.tensor_tensor(tc.ap(), ta.ap(), tb.ap(), "add")
    b.dma(y.ap(), tc.ap())
    return b.module()


def test_overlapping_live_buffers_clobber_each_other():
    disjoint, overlapping = _two_buffer_program(64), _two_buffer_program(32)
    inp = random_inputs(disjoint, 11)
    good = run(disjoint, inp)
    bad = run(overlapping, inp)
    assert np.array_equal(good["y"], inp["a"] + inp["b"])
    assert not same_outputs(good, bad)
    # t_b covers bytes [32, 96): t_a keeps its first 8 columns, its last 8 now hold b's first 8
    assert np.array_equal(bad["y"][:, :8], inp["a"][:, :8] + inp["b"][:, :8])
    assert np.array_equal(bad["y"][:, 8:], inp["b"][:, :8] + inp["b"][:, 8:])


def test_unaligned_rows_and_patterns_that_wrap_across_partitions():
    b = Builder()
    x = b.dram("x", (4, 8), kind="ExternalInput")
    y = b.dram("y", (4, 8), kind="ExternalOutput")
    flat = b.dram("flat", (1, 32), kind="ExternalOutput")
    t = b.sbuf("t", (4, 8), addr=2)        # float32 rows starting at byte 2
    u = b.sbuf("u", (4, 8), addr=1002)
    b.dma(t.ap(), x.ap())
    b.copy(u.ap(), t.ap())
    b.dma(y.ap(), u.ap())
    b.dma(flat.ap(), t.ap([[1, 32]]))      # 32 consecutive elements: 8 per partition row, 4 rows
    a = np.arange(32, dtype=np.float32).reshape(4, 8)
    out = run(b.module(), {"x": a}, strict=True)
    assert np.array_equal(out["y"], a) and np.array_equal(out["flat"].reshape(4, 8), a)


def test_shared_dram_space_for_allocated_locations():
    b = Builder()
    x = b.dram("x", (1, 8), kind="ExternalInput")
    y = b.dram("y", (1, 8), kind="ExternalOutput")
    d1 = b.dram("d1", (1, 8), addr=0)
    d2 = b.dram("d2", (1, 8), addr=16)  # overlaps d1's second half
    t = b.sbuf("t", (1, 8), addr=0)
    b.dma(d1.ap(), x.ap())
    b.memset(t.ap(), -1.0)
    b.dma(d2.tile(0, 1, 0, 2), t.tile(0, 1, 0, 2))
    b.dma(y.ap(), d1.ap())
    a = np.arange(8, dtype=np.float32).reshape(1, 8)
    assert run(b.module(), {"x": a})["y"].tolist() == [[0, 1, 2, 3, -1, -1, 6, 7]]


# --------------------------------------------------------------------------- errors, strict mode, helpers


def test_strict_mode_flags_an_uninitialised_read():
    b = Builder()
    x = b.dram("x", (4, 8), kind="ExternalInput")
    y = b.dram("y", (4, 8), kind="ExternalOutput")
    t = b.sbuf("t", (4, 8), addr=0)
    u = b.sbuf("u", (4, 8), addr=256)
    b.dma(t.tile(0, 4, 0, 4), x.tile(0, 4, 0, 4))  # only half of t is written
    b.activation(u.ap(), t.ap(), "Exp", name="act_reads_garbage")
    b.dma(y.ap(), u.ap())
    m = b.module()
    inp = random_inputs(m, 0)
    run(m, inp)  # fine without strict mode (memory starts as zeros)
    with pytest.raises(TuskError, match=r"act_reads_garbage.*uninitialised.*memory location t\b"):
        run(m, inp, strict=True)
    assert not same_outputs(run(m, inp, seed=1), run(m, inp, seed=2))


def test_missing_input_is_named():
    with pytest.raises(TuskError, match="missing input.*\\bx\\b"):
        run(tiled_exp_module(), {})


def test_unknown_opcode_is_an_error_not_a_skip():
    b = Builder()
    t = b.sbuf("t", (4, 8), addr=0)
    b.emit("BNGradients", "DVE", [t.ap()], [t.ap()], name="stats")
    with pytest.raises(TuskError, match="stats.*BNGradients is not supported"):
        run(b.module(), {})


def test_random_inputs_are_deterministic_and_typed():
    m = _gather_program()
    a, b = random_inputs(m, 5), random_inputs(m, 5)
    assert same_outputs(a, b) and not same_outputs(a, random_inputs(m, 6))
    assert a["table"].dtype == np.float32 and np.abs(a["table"]).max() <= 2
    assert a["ids"].dtype == np.int32 and 0 <= a["ids"].min() and a["ids"].max() < 8


def test_same_outputs_compares_bits():
    nan = np.array([np.nan], np.float32)
    assert same_outputs({"y": nan}, {"y": nan.copy()})
    assert not same_outputs({"y": np.array([0.0], np.float32)}, {"y": np.array([-0.0], np.float32)})
    assert not same_outputs({"y": nan}, {"z": nan})
