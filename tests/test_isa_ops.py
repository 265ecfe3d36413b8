"""The NKI ISA operators beyond the core set: KLR (written with KernelWriter.operator) -> BIR -> verified ->
interpreted, each against a numpy reference written from the NKI ISA documentation."""

from __future__ import annotations

import re

import numpy as np
import pytest

from tusk.frontend.klr_writer import DTYPE_BYTES, KernelWriter
from tusk.ir import bir_json, klr
from tusk.ir.columns import Record
from tusk.ir.enums import FnKind
from tusk.ir.errors import PassError
from tusk.ir.module import Function, Module
from tusk.ir.verify import verify
from tusk.sim.interp import run
from tusk.stages.klr_codegen import KlirToBirCodegen

RNG = np.random.default_rng(7)
# the head of the traced test kernels (they record ISA ops with the tracer's own tr.op, as the front end does)
TRACED = """
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
from tusk.frontend.tracer import current


@nki.jit
"""


class Kernel:
    """A KernelWriter with SBUF tiles placed one after another, inputs loaded and outputs stored by DMA."""

    def __init__(self, name: str = "k"):
        self.k = KernelWriter(name)
        self.addr = 0
        self.inputs: dict[str, np.ndarray] = {}

    def tile(self, name: str, shape, dtype: str = "float32"):
        t = self.k.sbuf(name, shape, dtype, addr=self.addr)
        self.addr += -(-int(np.prod(shape[1:], dtype=np.int64)) * DTYPE_BYTES[dtype] // 64) * 64
        return t

    def load(self, name: str, value: np.ndarray, dtype: str = "float32"):
        x = self.k.input(name, value.shape, dtype)
        t = self.tile("t_" + name, value.shape, dtype)
        self.k.dma(t, x)
        self.inputs[name] = value
        return t

    def store(self, name: str, t) -> None:
        y = self.k.output(name, t.shape, t.tn.dtype.name)
        self.k.dma(y, t)

    def op(self, ctor: str, **fields) -> str:
        return self.k.operator(ctor, **fields)

    def lower(self) -> Module:
        """Through the KLR file format, to BIR, verified, and through BIR-JSON (which must round-trip)."""
        kernel = klr.read_klr(self.k.to_bytes()).contents.kernel
        fn = Function(self.k.name, FnKind.NKI)
        KlirToBirCodegen(fn, kernel).codegen_lnc_kernel()
        m = Module([fn], attributes=Record.of({"neuron_core_id": 0}))
        verify(m)
        back = bir_json.loads(bir_json.dumps(m))
        assert back == m
        return back

    def run(self) -> dict[str, np.ndarray]:
        return run(self.lower(), self.inputs)


def f32(*shape, lo=-2.0, hi=2.0) -> np.ndarray:
    return RNG.uniform(lo, hi, size=shape).astype(np.float32)


def opcodes(m: Module) -> list[str]:
    fn = m.functions[0]
    return [fn.inst(i).opname for i in range(len(fn.insts))]


# --------------------------------------------------------------------------- reductions fused with compute


def test_activation_reduce_writes_the_activation_and_its_row_sum():
    x = f32(64, 48)
    g = Kernel()
    t = g.load("x", x)
    y, r = g.tile("y", (64, 48)), g.tile("r", (64, 1))
    g.op("activationReduce", dst=y, src=t, activationFunc="exp", scale=0.5, reduceOp="add", reduceRes=r)
    g.store("y", y)
    g.store("r", r)
    out = g.run()
    want = np.exp(x * np.float32(0.5))
    np.testing.assert_allclose(out["y"], want, rtol=1e-6)
    np.testing.assert_allclose(out["r"][:, 0], want.sum(axis=1), rtol=1e-5)


@pytest.mark.parametrize("tile_operand", [False, True])
def test_tensor_scalar_reduce(tile_operand):
    x, s = f32(32, 40), f32(32, 1)
    g = Kernel()
    t = g.load("x", x)
    operand = g.load("s", s) if tile_operand else 1.5
    y, r = g.tile("y", (32, 40)), g.tile("r", (32, 1))
    g.op("tensorScalarReduce", dst=y, src=t, operand0=operand, op0="mult", reduceOp="max", reduceRes=r,
         reduceCmd="ZeroAccumulate")
    g.store("y", y)
    g.store("r", r)
    out = g.run()
    want = x * (s if tile_operand else np.float32(1.5))
    np.testing.assert_array_equal(out["y"], want)
    np.testing.assert_array_equal(out["r"][:, 0], want.max(axis=1))


def test_tensor_scalar_reduce_load_accumulate_starts_from_reduce_init_and_accumulate_is_refused():
    x = f32(16, 8)
    g = Kernel()
    t = g.load("x", x)
    y, r = g.tile("y", (16, 8)), g.tile("r", (16, 1))
    g.op("tensorScalarReduce", dst=y, src=t, operand0=2.0, op0="add", reduceOp="add", reduceRes=r,
         reduceCmd="LoadAccumulate", reduceInit=10.0)
    g.store("r", r)
    np.testing.assert_allclose(g.run()["r"][:, 0], (x + 2).sum(axis=1) + 10, rtol=1e-6)
    g2 = Kernel()
    t = g2.load("x", x)
    g2.op("tensorScalarReduce", dst=t, src=t, operand0=2.0, op0="add", reduceOp="add", reduceRes=g2.tile("r", (16, 1)),
          reduceCmd="Accumulate")
    with pytest.raises(PassError, match="reduceCmd Accumulate .*accumulator state.*inst.2"):
        g2.lower()


# --------------------------------------------------------------------------- selection and masks


@pytest.mark.parametrize("cmp", ["is_ge", "is_equal", "is_gt"])
def test_affine_select_is_a_causal_mask(cmp):
    x = f32(64, 64)
    g = Kernel()
    t = g.load("x", x)
    y = g.tile("y", (64, 64))
    # value = 3 + p - j (iota's form); keep where cmp(value, 0)
    g.op("ncAffineSelect", dst=y, pred=(3, [[-1, 64]], 1), onTrueTile=t, onFalseValue=-9984.0, cmpOp=cmp)
    g.store("y", y)
    out = g.run()
    p, j = np.meshgrid(np.arange(64), np.arange(64), indexing="ij")
    v = 3 + p - j
    keep = {"is_ge": v >= 0, "is_equal": v == 0, "is_gt": v > 0}[cmp]
    np.testing.assert_array_equal(out["y"], np.where(keep, x, np.float32(-9984.0)))


def test_copy_predicated_keeps_the_destination_where_false():
    x, d = f32(32, 16), f32(32, 16)
    pred = RNG.integers(0, 2, size=(32, 16)).astype(np.uint8)
    for rev in (False, True):
        g = Kernel()
        t, dst, pr = g.load("x", x), g.load("d", d), g.load("p", pred, "uint8")
        g.op("copyPredicated", dst=dst, src=t, predicate=pr, reversePred=rev)
        g.store("y", dst)
        mask = (pred != 0) ^ rev
        np.testing.assert_array_equal(g.run()["y"], np.where(mask, x, d))


def test_select_reduce_selects_and_reduces():
    x = f32(32, 24)
    pred = RNG.integers(0, 2, size=(32, 24)).astype(np.uint8)
    g = Kernel()
    t, pr = g.load("x", x), g.load("p", pred, "uint8")
    y, r = g.tile("y", (32, 24)), g.tile("r", (32, 1))
    g.op("selectReduce", dst=y, predicate=pr, onTrue=t, onFalse=-5.0, reduceRes=r, reduceOp="max")
    g.store("y", y)
    g.store("r", r)
    out = g.run()
    want = np.where(pred != 0, x, np.float32(-5))
    np.testing.assert_array_equal(out["y"], want)
    np.testing.assert_array_equal(out["r"][:, 0], want.max(axis=1))


def test_range_select_follows_the_documented_numpy():
    x = f32(16, 32)
    b0 = RNG.integers(0, 16, size=(16, 1)).astype(np.float32)
    b1 = b0 + RNG.integers(1, 16, size=(16, 1)).astype(np.float32)
    g = Kernel()
    t, l0, l1 = g.load("x", x), g.load("b0", b0), g.load("b1", b1)
    y, r = g.tile("y", (16, 32)), g.tile("r", (16, 1))
    fill = -3.4028235e38
    g.op("ncRangeSelect", dst=y, onTrueTile=t, compOp0="is_ge", compOp1="is_lt", bound0=l0, bound1=l1,
         reduceRes=r, reduceOp="max", rangeStart=2.0, onFalseValue=fill, reduceCommand="ZeroAccumulate")
    g.store("y", y)
    g.store("r", r)
    out = g.run()
    idx = 2 + np.arange(32, dtype=np.float32)[None, :]
    want = np.where((idx >= b0) & (idx < b1), x, np.float32(fill))
    np.testing.assert_array_equal(out["y"], want)
    np.testing.assert_array_equal(out["r"][:, 0], want.max(axis=1))


# --------------------------------------------------------------------------- scans and two-operator forms


@pytest.mark.parametrize("rev0,rev1", [(False, False), (True, False), (False, True)])
def test_tensor_tensor_scan(rev0, rev1):
    a, b, init = f32(8, 20, lo=0.5, hi=1.0), f32(8, 20), f32(8, 1)
    g = Kernel()
    ta, tb, ti = g.load("a", a), g.load("b", b), g.load("i", init)
    y = g.tile("y", (8, 20))
    rev = {(False, False): "none", (True, False): "first", (False, True): "second"}[(rev0, rev1)]
    g.op("tensorTensorScan", dst=y, src0=ta, src1=tb, op0="mult", op1="subtract", imm0=ti, reverseOperands=rev)
    g.store("y", y)
    out = g.run()["y"]
    want = np.empty_like(a)
    prev = init[:, 0]
    for k in range(20):
        x = prev * a[:, k]                                      # mult: order does not change the value
        prev = (b[:, k] - x) if rev1 else (x - b[:, k])
        want[:, k] = prev
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)


def test_tensor_tensor_scan_with_an_immediate_initial_value_is_a_running_sum():
    a, b = f32(4, 33), np.zeros((4, 33), np.float32)
    g = Kernel()
    ta, tb = g.load("a", a), g.load("b", b)
    y = g.tile("y", (4, 33))
    g.op("tensorTensorScan", dst=y, src0=ta, src1=tb, op0="add", op1="add", imm0=1.0)
    g.store("y", y)
    np.testing.assert_allclose(g.run()["y"], 1 + np.cumsum(a, axis=1, dtype=np.float32), rtol=1e-5, atol=1e-5)


def test_scalar_tensor_tensor():
    x, s, z = f32(32, 16), f32(32, 1), f32(32, 16)
    g = Kernel()
    tx, ts, tz = g.load("x", x), g.load("s", s), g.load("z", z)
    y = g.tile("y", (32, 16))
    g.op("ncScalarTensorTensor", dst=y, data=tx, src0=ts, src1=tz, op0="subtract", op1="mult",
         reverseOperands="first")
    y2 = g.tile("y2", (32, 16))
    g.op("ncScalarTensorTensor", dst=y2, data=tx, src0=0.5, src1=tz, op0="mult", op1="subtract",
         reverseOperands="second")
    g.store("y", y)
    g.store("y2", y2)
    out = g.run()
    np.testing.assert_array_equal(out["y"], (s - x) * z)
    np.testing.assert_array_equal(out["y2"], z - x * np.float32(0.5))


def test_tensor_scalar_cumulative():
    x = f32(8, 12)
    g = Kernel()
    t = g.load("x", x)
    y, y2 = g.tile("y", (8, 12)), g.tile("y2", (8, 12))
    g.op("tensorScalarCumulative", dst=y, src=t, op0="mult", op1="add", imm0=2.0, reduceCmd="ZeroAccumulate")
    g.op("tensorScalarCumulative", dst=y2, src=t, op0="add", op1="max", imm0=0.0, imm1=0.5,
         reduceCmd="LoadAccumulate")
    g.store("y", y)
    g.store("y2", y2)
    out = g.run()
    np.testing.assert_allclose(out["y"], np.cumsum(2 * x, axis=1, dtype=np.float32), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(out["y2"], np.maximum.accumulate(np.maximum(x, 0.5), axis=1))


# --------------------------------------------------------------------------- statistics and layout


def test_transpose_on_the_vector_engine():
    x = f32(32, 20)
    g = Kernel()
    t = g.load("x", x)
    y = g.tile("y", (20, 32))
    g.op("transpose", dst=y, src=t, engine="dve")
    g.store("y", y)
    m = g.lower()
    assert "StreamTranspose" in opcodes(m)
    np.testing.assert_array_equal(run(m, g.inputs)["y"], x.T)


def test_transpose_larger_than_32x32_fails_verification():
    g = Kernel()
    t = g.load("x", f32(64, 8))
    g.op("transpose", dst=g.tile("y", (8, 64)), src=t)
    with pytest.raises(Exception, match="32"):
        g.lower()


def test_bn_stats_then_bn_aggr_give_mean_and_variance():
    x = f32(64, 1024)
    g = Kernel()
    t = g.load("x", x)
    stats = g.tile("stats", (64, 12))
    g.op("batchNormStats", dst=stats[:, 0:6], src=t[:, 0:512])
    g.op("batchNormStats", dst=stats[:, 6:12], src=t[:, 512:1024])
    mv = g.tile("mv", (64, 2))
    g.op("batchNormAggregate", dst=mv, src=stats)
    g.store("stats", stats)
    g.store("mv", mv)
    out = g.run()
    even = x[:, 0:512:2].astype(np.float64)
    np.testing.assert_array_equal(out["stats"][:, 0], 256)
    np.testing.assert_allclose(out["stats"][:, 1], even.mean(axis=1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["stats"][:, 2], even.var(axis=1) * 256, rtol=1e-5)
    np.testing.assert_allclose(out["mv"][:, 0], x.astype(np.float64).mean(axis=1), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(out["mv"][:, 1], x.astype(np.float64).var(axis=1), rtol=1e-5)


@pytest.mark.parametrize("op", ["add", "max", "average"])
def test_tensor_partition_reduce(op):
    x = f32(16, 10)
    g = Kernel()
    t = g.load("x", x)
    y = g.tile("y", (1, 10))
    g.op("tensorPartitionReduce", dst=y, op=op, data=t)
    g.store("y", y)
    want = {"add": x.sum(axis=0), "max": x.max(axis=0), "average": x.mean(axis=0)}[op]
    np.testing.assert_allclose(g.run()["y"][0], want, rtol=1e-5, atol=1e-6)


def test_max8_find_index8_and_match_replace8():
    x = np.stack([RNG.permutation(40).astype(np.float32) for _ in range(4)])
    g = Kernel()
    t = g.load("x", x)
    top, idx = g.tile("top", (4, 8)), g.tile("idx", (4, 8), "uint32")
    rep, ridx = g.tile("rep", (4, 40)), g.tile("ridx", (4, 8), "uint32")
    g.op("max8", dst=top, src=t)
    g.op("findIndex8", dst=idx, src=t, vals=top)
    g.op("matchReplace8", dst=rep, src=t, vals=top, replaceValue=-1.0, dstIdx=ridx)
    for name, tile in (("top", top), ("idx", idx), ("rep", rep), ("ridx", ridx)):
        g.store(name, tile)
    out = g.run()
    want_top = -np.sort(-x, axis=1)[:, :8]
    np.testing.assert_array_equal(out["top"], want_top)
    want_idx = np.argsort(-x, axis=1, kind="stable")[:, :8]
    np.testing.assert_array_equal(out["idx"], want_idx)
    np.testing.assert_array_equal(out["ridx"], want_idx)
    want_rep = x.copy()
    np.put_along_axis(want_rep, want_idx, -1.0, axis=1)
    np.testing.assert_array_equal(out["rep"], want_rep)


def test_match_replace8_duplicates_follow_the_documented_example_and_absent_values_are_all_ones():
    data = np.array([[1, 2, 3, 4, 8, 8, 8, 8, 8, 8, 8]], np.float32)
    vals = np.array([[3, 8, 8, 8, 8, 8, 8, 8]], np.float32)
    missing = np.array([[5, 1, 2, 3, 4, 8, 9, 7]], np.float32)
    g = Kernel()
    td, tv, tm = g.load("d", data), g.load("v", vals), g.load("m", missing)
    ridx, fidx = g.tile("ridx", (1, 8), "uint32"), g.tile("fidx", (1, 8), "uint32")
    g.op("matchReplace8", dst=g.tile("rep", (1, 11)), src=td, vals=tv, replaceValue=0.0, dstIdx=ridx)
    g.op("findIndex8", dst=fidx, src=td, vals=tm)
    g.store("ridx", ridx)
    g.store("fidx", fidx)
    out = g.run()
    assert out["ridx"][0].tolist() == [2, 10, 9, 8, 7, 6, 5, 4]
    assert out["fidx"][0].tolist() == [0xFFFFFFFF, 0, 1, 2, 3, 4, 0xFFFFFFFF, 0xFFFFFFFF]


def test_shuffle_moves_partitions_within_each_group_of_32():
    x, d = f32(64, 4), f32(64, 4)
    mask = [(31 - q) for q in range(32)]
    mask[5] = 255
    g = Kernel()
    t, dst = g.load("x", x), g.load("d", d)
    g.op("shuffle", dst=dst, src=t, shuffleMask=mask)
    g.store("y", dst)
    want = d.copy()
    for q in range(64):
        if mask[q % 32] != 255:
            want[q] = x[32 * (q // 32) + mask[q % 32]]
    np.testing.assert_array_equal(g.run()["y"], want)


# --------------------------------------------------------------------------- random numbers


def _random_kernel(seed: int) -> Kernel:
    g = Kernel()
    x = g.load("x", np.ones((32, 256), np.float32))
    s = g.load("seed", np.array([[seed]], np.int32), "int32")
    g.op("setRngSeed", src=s)
    bits, y, u = g.tile("bits", (32, 16), "uint32"), g.tile("y", (32, 256)), g.tile("u", (32, 64))
    g.op("rng", dst=bits, engine="dve")
    g.op("dropout", dst=y, src=x, threshold=0.25, thresholdType="DropRate")
    g.op("rand2", dst=u, min=-1.0, max=3.0)
    for name, tile in (("bits", bits), ("y", y), ("u", u)):
        g.store(name, tile)
    return g


def test_random_numbers_are_deterministic_given_the_seed():
    a, b, c = _random_kernel(5).run(), _random_kernel(5).run(), _random_kernel(6).run()
    for name in ("bits", "y", "u"):
        np.testing.assert_array_equal(a[name], b[name])
    assert not np.array_equal(a["bits"], c["bits"]) and not np.array_equal(a["y"], c["y"])
    assert len(np.unique(a["bits"])) == a["bits"].size  # 512 distinct 32-bit words
    dropped = float((a["y"] == 0).mean())
    assert 0.2 < dropped < 0.3 and set(np.unique(a["y"]).tolist()) == {0.0, 1.0}
    assert a["u"].min() >= -1.0 and a["u"].max() < 3.0 and 0.5 < a["u"].mean() < 1.5


def test_dropout_keep_rate_and_extreme_probabilities():
    x = f32(16, 64)
    g = Kernel()
    t = g.load("x", x)
    all_kept, none_kept = g.tile("a", (16, 64)), g.tile("b", (16, 64))
    g.op("dropout", dst=all_kept, src=t, threshold=0.0, thresholdType="DropRate")
    g.op("dropout", dst=none_kept, src=t, threshold=0.0, thresholdType="KeepRate")
    g.store("a", all_kept)
    g.store("b", none_kept)
    out = g.run()
    np.testing.assert_array_equal(out["a"], x)
    np.testing.assert_array_equal(out["b"], np.zeros_like(x))


# --------------------------------------------------------------------------- wire formats and the pipeline


def _mixed_kernel() -> Kernel:
    x, s, z = f32(32, 32), f32(32, 1), f32(32, 32)
    g = Kernel("mixed")
    tx, ts, tz = g.load("x", x), g.load("s", s), g.load("z", z)
    y, r = g.tile("y", (32, 32)), g.tile("r", (32, 1))
    g.op("tensorScalarReduce", dst=y, src=tx, operand0=ts, op0="add", reduceOp="add", reduceRes=r,
         reduceCmd="ZeroAccumulate")
    g.op("ncAffineSelect", dst=y, pred=(0, [[-1, 32]], 1), onTrueTile=y, onFalseValue=0.0, cmpOp="is_ge")
    w = g.tile("w", (32, 32))
    g.op("tensorTensorScan", dst=w, src0=y, src1=tz, op0="add", op1="mult", imm0=0.0)
    g.op("ncScalarTensorTensor", dst=w, data=w, src0=ts, src1=tz, op0="mult", op1="add")
    tr = g.tile("tr", (32, 32))
    g.op("transpose", dst=tr, src=w)
    st, mv = g.tile("st", (32, 6)), g.tile("mv", (32, 2))
    g.op("batchNormStats", dst=st, src=tr)
    g.op("batchNormAggregate", dst=mv, src=st)
    top = g.tile("top", (32, 8))
    g.op("max8", dst=top, src=tr)
    for name, tile in (("y", y), ("r", r), ("tr", tr), ("mv", mv), ("top", top)):
        g.store(name, tile)
    return g


def test_new_instructions_round_trip_through_bir_json():
    g = _mixed_kernel()
    m = g.lower()
    back = bir_json.loads(bir_json.dumps(m))
    assert back == m
    verify(back)
    want = run(m, g.inputs)
    got = run(back, g.inputs)
    assert all(np.array_equal(want[k], got[k]) for k in want)


def through_pipeline(klr_bytes: bytes, tmp_path, each_step=None) -> Module:
    """The KLR file through every default pass, verified after each (``each_step(step, module)`` too)."""
    from tusk import stages
    from tusk.stages.host import host_module_for
    from tusk.workflows.pipeline import DEFAULT_ORDER

    path = tmp_path / "kernel.klr"
    path.write_bytes(klr_bytes)
    cur = host_module_for(str(path), 0, str(tmp_path / "out"))
    for step in DEFAULT_ORDER:
        cur, _ = stages.make_pass(step).run(cur)
        verify(cur)
        if each_step is not None:
            each_step(step, cur)
    return cur


def test_new_instructions_survive_the_default_pipeline(tmp_path):
    from tusk.sim.interp import same_outputs

    g = _mixed_kernel()
    want = g.run()
    got = run(through_pipeline(g.k.to_bytes(), tmp_path), g.inputs)
    assert same_outputs({k: want[k] for k in got}, got) and set(got) == set(want)


def test_operator_writer_names_unknown_fields():
    g = Kernel()
    t = g.tile("t", (4, 8))
    with pytest.raises(TypeError, match="no field.*reduceResult"):
        g.op("tensorScalarReduce", dst=t, src=t, operand0=1.0, op0="add", reduceOp="add", reduceResult=t)
    with pytest.raises(TypeError, match="is not a AluOp"):
        g.op("tensorPartitionReduce", dst=t, op="plus", data=t)


# --------------------------------------------------------------------------- gathers, bounds, DMA transposes


def test_local_gather_follows_the_documented_numpy():
    src = f32(32, 64, 4, lo=0, hi=100)
    per_core = RNG.integers(0, 64, size=(16, 3))
    index = np.tile(per_core, (2, 1)) * 4      # indices count elements: index * num_elem_per_idx
    g = Kernel()
    ts, ti = g.load("src", src.reshape(32, 256)), g.load("idx", index.astype(np.uint16), "uint16")
    y = g.tile("y", (32, 40 * 4))
    g.op("ncLocalGather", dst=y, src=ts, index=ti, numElemPerIdx=4, numValidIndicies=40)
    g.store("y", y)
    want = np.empty((32, 40, 4), np.float32)
    for c in range(2):
        flat = index[16 * c:16 * c + 16].flatten(order="F")[:40] // 4
        want[16 * c:16 * c + 16] = np.take(src[16 * c:16 * c + 16], flat, axis=1)
    np.testing.assert_array_equal(g.run()["y"], want.reshape(32, 160))


def test_sequence_bounds_of_the_documented_example():
    ids = np.array([[0, 1, 1, 2, 2, 2, 0, 3, 3]], np.int32)
    g = Kernel()
    t = g.load("ids", ids, "int32")
    y = g.tile("y", (1, 2, 9), "int32")
    g.op("sequenceBounds", dst=y, segmentIds=t)
    g.store("y", y)
    assert g.run()["y"][0].tolist() == [[9, 1, 1, 3, 3, 3, 9, 7, 7], [-1, 3, 3, 6, 6, 6, -1, 9, 9]]


@pytest.mark.parametrize("axes", ["XYZW", "WZXY", "ZYXW"])
def test_dma_transpose_permutes_four_dimensions(axes):
    from tusk.ir.verify_isa import TRANSPOSE_AXES

    x = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)
    perm = TRANSPOSE_AXES[axes]
    g = Kernel()
    src = g.k.input("x", x.shape)
    g.inputs["x"] = x
    shape = tuple(x.shape[a] for a in perm)
    dst = g.tile("y", shape)
    g.op("dmaTranspose", dst=dst, src=src, axes=axes)
    g.store("y", dst)
    np.testing.assert_array_equal(g.run()["y"], x.transpose(perm))


def test_traced_ops_reach_the_interpreter_through_the_emitter(tmp_path):
    """The front end's contract: tr.op(KIND, reads, writes, **KLR fields) with Views."""
    from tusk.frontend import trace_file
    from tusk.frontend.check import run_klr

    path = tmp_path / "k.py"
    path.write_text(TRACED + '''def k(x):
    r_out = nl.ndarray((x.shape[0], 1), dtype=x.dtype, buffer=nl.shared_hbm)
    y_out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    tr = current()
    d = tr.tile(t.shape, t.tensor.dtype)
    r = tr.tile((t.shape[0], 1), t.tensor.dtype)
    tr.op("tensor_scalar_reduce", (t,), (d, r), dst=d, src=t, operand0=2.0, op0="mult", reduceOp="add",
          reduceRes=r)
    m = tr.tile(t.shape, t.tensor.dtype)
    tr.op("affine_select", (d,), (m,), dst=m, pred=(0, [[-1, t.shape[1]]], 1), onTrueTile=d,
          onFalseValue=-1.0, cmpOp="is_ge")
    nl.store(r_out, value=r)
    nl.store(y_out, value=m)
    return r_out, y_out
''')
    x = f32(64, 32)
    out = run_klr(trace_file(path, "k", ["f32[64,32]"]), {"x": x})
    np.testing.assert_allclose(out["r_out"][:, 0], (2 * x).sum(axis=1), rtol=1e-5, atol=1e-5)
    p, j = np.meshgrid(np.arange(64), np.arange(32), indexing="ij")
    np.testing.assert_array_equal(out["y_out"], np.where(p - j >= 0, 2 * x, np.float32(-1)))


def test_a_traced_op_with_an_unknown_field_is_a_trace_error_naming_it(tmp_path):
    from tusk.frontend import TraceError, trace_file

    path = tmp_path / "k.py"
    path.write_text(TRACED + '''def k(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    tr = current()
    tr.op("max8", (t,), (t,), dst=t, src=t, count=8)
    nl.store(out, value=t)
    return out
''')
    with pytest.raises(TraceError, match=r"k\.py:12: KLR operator max8 has no field.*count"):
        trace_file(path, "k", ["f32[8,16]"])


def test_every_new_instruction_has_a_cost_on_its_engine():
    from tusk.sim.timing import DEFAULT_COSTS, instruction_costs

    for g in (_mixed_kernel(), _random_kernel(1)):
        fn = g.lower().functions[0]
        cost, lane, _ = instruction_costs(fn)
        for i in range(len(fn.insts)):
            v = fn.inst(i)
            assert cost[i] > 0 and lane[i] >= 0, v
    # a DMA transpose moving the innermost axis pays a descriptor per element; a plain copy one per row
    costs = {}
    for axes in ("None", "XYZW"):
        g = Kernel()
        src = g.k.input("x", (4, 4, 4, 32))
        g.op("dmaTranspose", dst=g.tile("y", (4, 4, 4, 32) if axes == "None" else (32, 4, 4, 4)), src=src, axes=axes)
        fn = g.lower().functions[0]
        cost, _, _ = instruction_costs(fn)
        costs[axes] = cost[0]
    per_descriptor = DEFAULT_COSTS.dma_descriptor_cycles / 16
    assert costs["XYZW"] - costs["None"] >= (512 - 16) * per_descriptor * 0.9


def test_the_emission_contract_table_lists_every_isa_kind():
    import inspect
    import re
    from pathlib import Path

    from tusk.frontend.emit import Emitter

    kinds = {name[3:] for name, f in inspect.getmembers(Emitter, inspect.isfunction)
             if name.startswith("op_") and "_klr_operator" in inspect.getsource(f)}
    doc = Path(__file__).parent.parent / "docs" / "frontend.md"
    text = doc.read_text().split("### ISA operators: the emission contract")[1].split("\n## ")[0]
    listed = set(re.findall(r"`([a-z0-9_]+)`", "\n".join(ln.split("|")[1] for ln in text.splitlines()
                                                         if ln.startswith("| `"))))
    assert kinds == listed


def test_traced_isa_ops_in_a_loop_compile_through_the_default_pipeline(tmp_path):
    """A traced kernel with an affine_range loop of ISA ops: KLR -> every default pass -> the same outputs."""
    from tusk.frontend import trace_file

    path = tmp_path / "loop.py"
    path.write_text(TRACED + '''def loop(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    sums = nl.ndarray((4, 128, 1), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(4):
        t = nl.load(x[i * 128:(i + 1) * 128, :])
        tr = current()
        d = tr.tile(t.shape, t.tensor.dtype)
        r = tr.tile((128, 1), t.tensor.dtype)
        tr.op("tensor_scalar_reduce", (t,), (d, r), dst=d, src=t, operand0=1.0, op0="add", reduceOp="max",
              reduceRes=r)
        s = tr.tile(t.shape, t.tensor.dtype)
        tr.op("tensor_tensor_scan", (d, t), (s,), dst=s, src0=d, src1=t, op0="mult", op1="add", imm0=r)
        nl.store(out[i * 128:(i + 1) * 128, :], value=s)
        nl.store(sums[i], value=r)
    return out, sums
''')
    x = f32(512, 16, lo=-0.5, hi=0.5)
    d = x + 1
    r = d.max(axis=1, keepdims=True)
    want = np.empty_like(x)
    prev = r[:, 0]
    for k in range(16):
        prev = d[:, k] * prev + x[:, k]
        want[:, k] = prev

    def check(step: str, cur: Module) -> None:
        if step not in ("clear_inst_deps", "build_fdeps"):  # after every pass that changes the program
            got = run(cur, {"x": x})
            np.testing.assert_allclose(got["out"], want, rtol=1e-5, atol=1e-6)
            np.testing.assert_array_equal(got["sums"].reshape(512, 1), r)

    through_pipeline(trace_file(path, "loop", ["f32[512,16]"]), tmp_path, check)


def _bad(build) -> str:
    g = Kernel()
    build(g)
    with pytest.raises(Exception) as e:
        g.lower()
    return str(e.value)


@pytest.mark.parametrize("build,message", [
    (lambda g: g.op("batchNormStats", dst=g.tile("s", (8, 6)), src=g.tile("x", (8, 600))), "600 elements.*at most 512"),
    (lambda g: g.op("batchNormAggregate", dst=g.tile("m", (8, 2)), src=g.tile("s", (8, 7))), "multiple of 3"),
    (lambda g: g.op("max8", dst=g.tile("m", (8, 4)), src=g.tile("x", (8, 64))), "4 elements.*8 are needed"),
    (lambda g: g.op("ncAffineSelect", dst=g.tile("y", (8, 16)), pred=(0, [[1, 8]], 1), onTrueTile=g.tile("x", (8, 16)),
                    onFalseValue=0.0, cmpOp="is_ge"), "16 elements.*pattern has 8"),
    (lambda g: g.op("rng", dst=g.tile("y", (8, 16))), "float32, not an integer"),
    (lambda g: g.op("copyPredicated", dst=g.tile("y", (8, 16)), src=g.tile("x", (8, 16)),
                    predicate=g.tile("p", (8, 16))), "predicate is float32"),
    (lambda g: g.op("findIndex8", dst=g.tile("i", (8, 8)), src=g.tile("x", (8, 32)), vals=g.tile("v", (8, 8))),
     "indices; its output is float32"),
    (lambda g: g.op("tensorTensorScan", dst=g.tile("y", (8, 16)), src0=g.tile("a", (8, 16)), src1=g.tile("b", (8, 12)),
                    op0="add", op1="add", imm0=0.0), "differ"),
    (lambda g: g.op("tensorPartitionReduce", dst=g.tile("y", (2, 16)), op="add", data=g.tile("x", (8, 16))),
     "writes shape \\(1, 16\\)"),
    (lambda g: g.op("shuffle", dst=g.tile("y", (32, 4)), src=g.tile("x", (32, 4)), shuffleMask=[40] * 32),
     "each a partition 0..31 or 255"),
    (lambda g: g.op("sequenceBounds", dst=g.tile("y", (1, 9)), segmentIds=g.tile("x", (1, 9))), "2 x 9"),
    (lambda g: g.op("ncLocalGather", dst=g.tile("y", (8, 4)), src=g.tile("x", (8, 16)),
                    index=g.tile("i", (8, 4), "uint16")), "multiples of 16"),
    (lambda g: g.op("dropout", dst=g.tile("y", (8, 16), "bfloat16"), src=g.tile("x", (8, 16)), threshold=0.5),
     "dtypes must match"),
])
def test_the_verifier_checks_isa_shapes_and_dtypes(build, message):
    assert re.search(message, _bad(build)), _bad(build)


def test_exponential_subtracts_the_max_and_sums():
    x, top, init = f32(16, 40), f32(16, 1), f32(16, 1)
    g = Kernel()
    t, tm, ti = g.load("x", x), g.load("m", top), g.load("i", init)
    y, r, r2 = g.tile("y", (16, 40)), g.tile("r", (16, 1)), g.tile("r2", (16, 1))
    g.op("exponential", dst=y, src=t, maxValue=tm, reduceRes=r, reducecmd="ZeroAccumulate")
    g.op("exponential", dst=y, src=t, maxValue=tm, reduceRes=r2, reducecmd="LoadAccumulate", reduceInit=ti)
    for name, tile in (("y", y), ("r", r), ("r2", r2)):
        g.store(name, tile)
    out = g.run()
    want = np.exp(x - top)
    np.testing.assert_allclose(out["y"], want, rtol=1e-6)
    np.testing.assert_allclose(out["r"][:, 0], want.sum(axis=1), rtol=1e-5)
    np.testing.assert_allclose(out["r2"][:, 0], want.sum(axis=1) + init[:, 0], rtol=1e-5)
    g2 = Kernel()
    t = g2.load("x", x)
    g2.op("exponential", dst=t, src=t, maxValue=0.0, reduceRes=g2.tile("r", (16, 1)))
    with pytest.raises(PassError, match="exponential with a reduceRes and reduceCmd Idle"):
        g2.lower()


@pytest.mark.parametrize("with_bias", [False, True])
def test_activation_with_a_per_partition_scale_tile(with_bias):
    x, sc, b = f32(32, 24), f32(32, 1), f32(32, 1)
    g = Kernel()
    t, ts, tb = g.load("x", x), g.load("s", sc), g.load("b", b)
    y, r = g.tile("y", (32, 24)), g.tile("r", (32, 1))
    g.op("activationReduce", dst=y, src=t, activationFunc="tanh", scale=ts, bias=tb if with_bias else None,
         reduceOp="max", reduceRes=r)
    g.store("y", y)
    g.store("r", r)
    out = g.run()
    want = np.tanh(x * sc + (b if with_bias else 0))
    np.testing.assert_allclose(out["y"], want, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(out["r"][:, 0], want.max(axis=1), rtol=1e-6)


def test_nc_activate_kind_takes_a_scale_tile(tmp_path):
    from tusk.frontend import trace_file
    from tusk.frontend.check import run_klr

    path = tmp_path / "k.py"
    path.write_text(TRACED + '''def k(x, s):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t, sc = nl.load(x), nl.load(s)
    tr = current()
    d = tr.tile(t.shape, t.tensor.dtype)
    tr.op("nc_activate", (t, sc), (d,), dst=d, src=t, activationFunc="exp", scale=sc)
    nl.store(out, value=d)
    return out
''')
    x, s = f32(16, 8), f32(16, 1)
    out = run_klr(trace_file(path, "k", ["f32[16,8]", "f32[16,1]"]), {"x": x, "s": s})
    np.testing.assert_allclose(out["out"], np.exp(x * s), rtol=1e-6)


def test_activate2_scale_bias_then_function_then_reduce():
    x, s0 = f32(16, 20), f32(16, 1)
    g = Kernel()
    t, ts = g.load("x", x), g.load("s", s0)
    y, r = g.tile("y", (16, 20)), g.tile("r", (16, 1))
    g.op("activate2", dst=y, src=t, op0="mult", imm0=ts, op1="subtract", imm1=0.25, reverse1=True,
         activationFunc="tanh", reduceOp="add", reduceRes=r, reduceCmd="ZeroAccumulate")
    g.store("y", y)
    g.store("r", r)
    out = g.run()
    want = np.tanh(np.float32(0.25) - x * s0)
    np.testing.assert_allclose(out["y"], want, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(out["r"][:, 0], want.sum(axis=1), rtol=1e-5, atol=1e-6)
    g2 = Kernel()
    t = g2.load("x", x)
    g2.op("activate2", dst=t, src=t, op0="add", imm0=1.0, op1="bypass", imm1=0.0, activationFunc="exp",
          reduceOp="add", reduceRes=g2.tile("r", (16, 1)))
    with pytest.raises(PassError, match="activate2 with a reduceRes and reduceCmd Idle"):
        g2.lower()


def test_dce_keeps_seeding_and_draws_whose_results_are_unused():
    from tusk.stages.dce import dce

    g = Kernel()
    s = g.load("seed", np.array([[3]], np.int32), "int32")
    g.op("setRngSeed", src=s)
    g.op("rng", dst=g.tile("unused", (4, 8), "uint32"))          # advances the generator; result never read
    bits = g.tile("bits", (4, 8), "uint32")
    g.op("rng", dst=bits)
    g.store("bits", bits)
    m = g.lower()
    want = run(m, g.inputs)
    fn, removed = dce(m.functions[0])
    assert removed == 0
    got = run(Module([fn], attributes=m.attributes), g.inputs)
    np.testing.assert_array_equal(got["bits"], want["bits"])


def test_random_draws_are_ordered_for_the_scheduler_and_survive_the_pipeline(tmp_path):
    from tusk.stages.deps import dependence_edges

    g = _random_kernel(9)
    fn = g.lower().functions[0]
    src, dst, _ = dependence_edges(fn)
    names = {(fn.inst(int(a)).opname, fn.inst(int(b)).opname) for a, b in zip(src, dst)}
    assert {("SetRandState", "Rng"), ("Rng", "Dropout"), ("Dropout", "Rand2")} <= names
    want = g.run()
    got = run(through_pipeline(g.k.to_bytes(), tmp_path), g.inputs)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])


def test_a_kept_loop_of_draws_carries_their_order_to_the_next_iteration(tmp_path):
    from tusk import stages
    from tusk.frontend import trace_file
    from tusk.ir.enums import LOOP_OPCODES
    from tusk.stages.deps import loop_carried_edges
    from tusk.stages.host import host_module_for

    path = tmp_path / "draws.py"
    path.write_text(TRACED + '''def draws(x):
    out = nl.ndarray((8, 4, 16), dtype=nl.uint32, buffer=nl.shared_hbm)
    for i in nl.affine_range(8):
        tr = current()
        t = tr.tile((4, 16), nl.uint32)
        tr.op("rng", (), (t,), dst=t, engine="dve")
        nl.store(out[i], value=t)
    return out
''')
    klr_file = tmp_path / "draws.klr"
    klr_file.write_bytes(trace_file(path, "draws", ["f32[1,1]"]))
    cur = host_module_for(str(klr_file), 0, str(tmp_path / "out"))
    for step in ("translate_nki_ast_to_bir", "raise_loops"):
        cur, _ = stages.make_pass(step).run(cur)
    fn = next(f for f in cur.functions if np.isin(f.insts["opcode"], list(LOOP_OPCODES)).any())
    src, dst, _ = loop_carried_edges(fn)
    rng = [i for i in range(len(fn.insts)) if fn.inst(i).opname == "Rng"]
    assert len(rng) == 1 and (rng[0], rng[0]) in set(zip(src.tolist(), dst.tolist()))
    bits = run(cur, {"x": np.zeros((1, 1), np.float32)})["out"]
    assert len(np.unique(bits)) == bits.size  # every iteration drew new numbers


def test_nc_n_gather_gathers_within_each_partition():
    data = f32(16, 4, 8)
    idx = RNG.integers(0, 32, size=(16, 20)).astype(np.uint32)
    g = Kernel()
    td, ti = g.load("d", data.reshape(16, 32)), g.load("i", idx, "uint32")
    y = g.tile("y", (16, 20))
    g.op("ncNGather", dst=y, data=td, indices=ti)
    g.store("y", y)
    np.testing.assert_array_equal(g.run()["y"], np.take_along_axis(data.reshape(16, 32), idx.astype(np.int64), 1))


def test_the_older_range_select_form_with_immediate_bounds():
    x = f32(8, 16)
    g = Kernel()
    t = g.load("x", x)
    y = g.tile("y", (8, 16))
    g.op("rangeSelect", dst=y, src=t, reduceCommand="ZeroAccumulate", reduceOp="max", base=1.0, fillValue=-7.0,
         compOp0="is_ge", compOp1="is_le", bound0=4, bound1=9.0)
    g.store("y", y)
    idx = 1 + np.arange(16)[None, :]
    np.testing.assert_array_equal(g.run()["y"], np.where((idx >= 4) & (idx <= 9), x, np.float32(-7)))


def test_an_affine_select_pattern_that_depends_on_a_loop_index_is_refused_at_its_line(tmp_path):
    from tusk.frontend import TraceError, trace_file

    path = tmp_path / "k.py"
    path.write_text(TRACED + '''def k(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(2):
        t = nl.load(x[i * 64:(i + 1) * 64, :])
        tr = current()
        m = tr.tile(t.shape, t.tensor.dtype)
        tr.op("affine_select", (t,), (m,), dst=m, pred=(i * 64, [[-1, 16]], 1), onTrueTile=t, onFalseValue=0.0)
        nl.store(out[i * 64:(i + 1) * 64, :], value=m)
    return out
''')
    with pytest.raises(TraceError, match=r"k\.py:14: .*ncAffineSelect.pred: .* is not a compile-time integer"):
        trace_file(path, "k", ["f32[128,16]"])


def test_nonzero_with_count_lowers_runs_and_is_shape_checked():
    from tusk.sim.timing import instruction_costs

    x = (f32(32, 16, lo=0, hi=1) > 0.5).astype(np.float32)
    g = Kernel()
    t = g.load("x", x)
    r = g.tile("r", (32, 17), "int32")
    g.op("nonzeroWithCount", dst=r, src=t, indexOffset=3, paddingVal=-1)
    g.store("y", r)
    fn = g.lower().functions[0]
    assert "NonzeroWithCount" in opcodes(g.lower())
    cost, lane, _ = instruction_costs(fn)
    assert all(c > 0 for c in cost) and all(ln >= 0 for ln in lane)
    got = g.run()["y"]
    for p in (0, 16):
        nz = np.flatnonzero(x[p])
        want = np.full(17, -1)
        want[:nz.size] = nz + 3
        want[16] = nz.size
        np.testing.assert_array_equal(got[p], want)
    bad = Kernel()
    src = bad.load("x", x)
    bad.op("nonzeroWithCount", dst=bad.tile("r", (32, 16), "int32"), src=src, indexOffset=0, paddingVal=-1)
    with pytest.raises(Exception, match="nonzero_with_count"):
        bad.lower()
