"""Edges of loop unrolling the other tests do not reach.

* trip counts when ``ub - lb`` is not a multiple of the stride (odd,
  negative strides), and the axis values of every clone;
* negative coefficients of loop indices in offsets, block indices,
  predicates and symbolic immediates (reversed tile order), folded with
  their sign;
* full_unroll level 2 erases every dependence edge, the input's too;
* a DynamicForLoop's induction register steps by the loop's stride.

Meaning is checked with the interpreter, which runs loops as Python
``range(lb, ub, stride)`` and evaluates expressions itself: before and
after must give the same outputs bit for bit, and the outputs are also
checked against what the program means (so a change that the pass and the
interpreter share would not hide).
"""

from __future__ import annotations

from contextlib import ExitStack

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tusk.ir.builder import Builder
from tusk.ir.enums import Edge, FnAttr, Op
from tusk.ir.expr import AffinePredicate, const
from tusk.ir.module import CARRIED_LOOP, CARRIED_UNROLL, LoopAxis, Module
from tusk.ir.verify import verify
from tusk.sim.interp import random_inputs, run, same_outputs
from tusk.stages.full_unroll import FullUnroll
from tusk.stages.lower_dynamic import lower_dynamic_exprs
from tusk.stages.unroll import Unroll

ROWS, WIDTH = 4, 4


def unrolled(m: Module) -> Module:
    out, _ = Unroll().run(m)
    verify(out)
    assert not (out.functions[0].insts["opcode"] == Op.Loop).any()
    return out


def outputs_agree(before: Module, after: Module, seed: int = 0) -> dict[str, np.ndarray]:
    inputs = random_inputs(before, seed)
    want = run(before, inputs)
    assert same_outputs(want, run(after, inputs))
    return {**inputs, **want}


def clone_names(m: Module, prefix: str) -> list[str]:
    return [n for n in m.functions[0].inst_names() if n.startswith(prefix + "-it")]


# ----------------------------------------------------------------------------- trip counts


def test_trip_count_is_the_length_of_the_range():
    for lb in range(-7, 8):
        for ub in range(-7, 8):
            for stride in (-5, -3, -2, -1, 1, 2, 3, 4, 7):
                assert LoopAxis("i", lb, ub, stride).trip_count == len(range(lb, ub, stride)), (lb, ub, stride)


SPANS = [  # (lb, ub, stride): ub - lb not a multiple of the stride, odd and negative strides
    (0, 7, 3), (1, 10, 4), (0, 1, 5), (2, 9, 2), (-3, 4, 2),
    (7, 0, -3), (5, -6, -4), (6, 1, -2), (3, 2, -5),
]


def _copy_rows(lb: int, ub: int, stride: int) -> Module:
    """y row slot(v) <- x row slot(v) + 1 for every v in range(lb, ub, stride), slot(v) = v + 8."""
    b = Builder()
    x = b.dram("x", (24 * ROWS, WIDTH), kind="ExternalInput")
    y = b.dram("y", (24 * ROWS, WIDTH), kind="ExternalOutput")
    t = b.sbuf("t", (ROWS, WIDTH), addr=0)
    b.memset(t.ap(), 0.0)
    for r in range(24):
        b.dma(y.tile(r * ROWS, ROWS, 0, WIDTH), t.ap())  # a known value everywhere
    with b.loop("i", lb, ub, stride) as i:
        b.dma(t.ap(), x.tile((i + 8) * ROWS, ROWS, 0, WIDTH), name="ld")
        b.tensor_scalar(t.ap(), t.ap(), "add", 1.0, name="inc")
        b.dma(y.tile((i + 8) * ROWS, ROWS, 0, WIDTH), t.ap(), name="st")
    return b.module()


@pytest.mark.parametrize("lb,ub,stride", SPANS)
def test_strides_that_do_not_divide_the_span_unroll_every_iteration(lb, ub, stride):
    m = _copy_rows(lb, ub, stride)
    out = unrolled(m)
    values = list(range(lb, ub, stride))
    assert len(clone_names(out, "ld")) == len(clone_names(out, "st")) == len(values)
    fn = out.functions[0]
    loads = [r for r in range(fn.n_insts) if fn.inst_name(r).startswith("ld-it")]
    assert [fn.inst(r).ins[0].offset for r in loads] == [(v + 8) * ROWS * WIDTH for v in values]
    data = outputs_agree(m, out)
    want = np.zeros((24 * ROWS, WIDTH), np.float32)
    for v in values:
        want[(v + 8) * ROWS:(v + 9) * ROWS] = data["x"][(v + 8) * ROWS:(v + 9) * ROWS] + 1
    assert np.array_equal(data["y"], want)


@pytest.mark.parametrize("lb,ub,stride", [(0, 5, -1), (3, 3, 2), (4, 1, 3), (-2, -2, -3)])
def test_loops_that_run_zero_times_vanish_with_their_bodies(lb, ub, stride):
    m = _copy_rows(lb, ub, stride)
    out = unrolled(m)
    assert clone_names(out, "ld") == clone_names(out, "st") == []
    data = outputs_agree(m, out)
    assert not data["y"].any()


def test_nested_odd_and_negative_strides_and_clone_order():
    b = Builder()
    x = b.dram("x", (64 * ROWS, WIDTH), kind="ExternalInput")
    y = b.dram("y", (64 * ROWS, WIDTH), kind="ExternalOutput")
    t = b.sbuf("t", (ROWS, WIDTH), addr=0)
    with b.loop("i", 9, -1, -4) as i:      # 9, 5, 1
        with b.loop("j", 1, 8, 3) as j:    # 1, 4, 7
            b.dma(t.ap(), x.tile((i * 6 + j) * ROWS, ROWS, 0, WIDTH), name="ld")
            b.dma(y.tile((i * 6 + j) * ROWS, ROWS, 0, WIDTH), t.ap(), name="st")
    m = b.module()
    out = unrolled(m)
    fn = out.functions[0]
    loads = [r for r in range(fn.n_insts) if fn.inst_name(r).startswith("ld-it")]
    assert [fn.inst(r).ins[0].offset // (ROWS * WIDTH) for r in loads] == [
        i * 6 + j for i in (9, 5, 1) for j in (1, 4, 7)]
    outputs_agree(m, out)


def _edge_names(m: Module) -> set[tuple[str, str]]:
    fn = m.functions[0]
    return {(fn.inst_name(s), fn.inst_name(d)) for s, d in zip(fn.deps["src"].tolist(), fn.deps["dst"].tolist())}


@pytest.mark.parametrize("flavour", ["distance", "predicated"])
def test_carried_edges_under_a_negative_stride_that_does_not_divide_the_span(flavour):
    b = Builder()
    acc = b.sbuf("acc", (ROWS, WIDTH), addr=0)
    tmp = b.sbuf("tmp", (ROWS, WIDTH), addr=64)
    with b.loop("i", 10, -1, -3) as i:  # 10, 7, 4, 1
        a = b.tensor_scalar(tmp.ap(), acc.ap(), "mult", 2.0, name="dbl")
        c = b.copy(acc.ap(), tmp.ap(), name="back")
    if flavour == "distance":
        payload = b.fn.intern((1,))
        b.fn.carried.append((c, a, Edge.Flow, CARRIED_LOOP, payload))
        want = {(f"back-it{k}", f"dbl-it{k + 1}") for k in range(3)}
    else:  # the source iteration is i + 3 (the previous one), only where 4 - i >= 0
        payload = b.fn.intern(((i + 3,), (AffinePredicate(4 - i, "ge"),)))
        b.fn.carried.append((c, a, Edge.Flow, CARRIED_UNROLL, payload))
        want = {("back-it1", "dbl-it2"), ("back-it2", "dbl-it3")}
    edges = _edge_names(unrolled(b.module()))
    assert {e for e in edges if e[0].startswith("back")} == want


def test_a_carried_distance_stays_inside_each_outer_iteration_with_odd_strides():
    b = Builder()
    acc = b.sbuf("acc", (ROWS, WIDTH), addr=0)
    with b.loop("i", 2, -1, -2):          # 2, 0
        with b.loop("j", 0, 5, 2):        # 0, 2, 4
            u = b.tensor_scalar(acc.ap(), acc.ap(), "add", 1.0, name="upd")
    b.fn.carried.append((u, u, Edge.Flow, CARRIED_LOOP, b.fn.intern((1,))))
    edges = _edge_names(unrolled(b.module()))
    assert edges == {("upd-it0", "upd-it1"), ("upd-it1", "upd-it2"), ("upd-it3", "upd-it4"), ("upd-it4", "upd-it5")}


# ----------------------------------------------------------------------------- negative coefficients


TILES = 5


def test_reversed_tile_order_folds_negative_coefficients():
    """Load tile T-1-i, store tile i: y is x with its tiles in reverse order."""
    b = Builder()
    x = b.dram("x", (TILES * ROWS, WIDTH), kind="ExternalInput")
    y = b.dram("y", (TILES * ROWS, WIDTH), kind="ExternalOutput")
    t = b.sbuf("t", (ROWS, WIDTH), addr=0)
    with b.loop("i", 0, TILES) as i:
        b.dma(t.ap(), x.tile((TILES - 1 - i) * ROWS, ROWS, 0, WIDTH), name="ld")
        b.dma(y.tile(i * ROWS, ROWS, 0, WIDTH), t.ap(), name="st")
    m = b.module()
    out = unrolled(m)
    fn = out.functions[0]
    loads = [r for r in range(fn.n_insts) if fn.inst_name(r).startswith("ld-it")]
    assert [fn.inst(r).ins[0].offset for r in loads] == [(TILES - 1 - k) * ROWS * WIDTH for k in range(TILES)]
    data = outputs_agree(m, out)
    tiles = data["x"].reshape(TILES, ROWS, WIDTH)
    assert np.array_equal(data["y"], tiles[::-1].reshape(TILES * ROWS, WIDTH))


def test_negative_coefficients_in_predicates_blocks_and_immediates():
    b = Builder()
    y = b.dram("y", (TILES * ROWS, WIDTH), "int32", kind="ExternalOutput")
    w = b.dram("w", (TILES * ROWS, WIDTH), "int32", kind="ExternalOutput")
    z = b.dram("z", (ROWS, WIDTH), "int32", kind="ExternalOutput")
    t = b.sbuf("t", (ROWS, WIDTH), "int32", addr=0)
    ring = b.sbuf("ring", (ROWS, WIDTH), "int32", addr=64, blocks=TILES)
    for k in range(TILES):
        b.memset(ring.ap(block=k), 0)
    b.memset(t.ap(), 0)
    for r in range(TILES):
        b.dma(y.tile(r * ROWS, ROWS, 0, WIDTH), t.ap())
    with b.loop("i", 0, TILES) as i:
        b.memset(t.ap(), 0)
        b.emit("TensorTensor", "DVE", [t.ap(), 100 - 7 * i], [t.ap()], attrs={"op": "add"}, name="imm")
        b.copy(ring.ap(block=TILES - 1 - i), t.ap(), name="blk")                    # block index 4 - i
        b.dma(y.tile(i * ROWS, ROWS, 0, WIDTH), t.ap(), name="st",
              pred=[AffinePredicate(2 - i, "ge")])                                 # i <= 2
        b.dma(z.ap(), t.ap(), name="last", pred=[AffinePredicate(3 - i, "lt")])                 # i > 3
    for k in range(TILES):
        b.dma(w.tile(k * ROWS, ROWS, 0, WIDTH), ring.ap(block=k))
    m = b.module()
    out = unrolled(m)
    assert clone_names(out, "st") == ["st-it0", "st-it1", "st-it2"]
    assert clone_names(out, "last") == ["last-it4"]
    data = outputs_agree(m, out)
    per_tile = data["y"].reshape(TILES, ROWS, WIDTH)[:, 0, 0].tolist()
    assert per_tile == [100, 93, 86, 0, 0]
    assert (data["z"] == 100 - 7 * 4).all()
    assert data["w"].reshape(TILES, ROWS, WIDTH)[:, 0, 0].tolist() == [100 - 7 * (TILES - 1 - k) for k in range(TILES)]
    fn = out.functions[0]
    blocks = [fn.inst(r).outs[0].memloc_name for r in range(fn.n_insts) if fn.inst_name(r).startswith("blk-it")]
    assert blocks == [f"ring_b{TILES - 1 - k}" for k in range(TILES)]


# ----------------------------------------------------------------------------- generated programs


@st.composite
def signed_loop_programs(draw):
    """Loop nests with odd/negative strides, spans that strides do not divide, and
    offsets, predicates, block indices and immediates with coefficients of either sign."""
    depth = draw(st.integers(1, 2))
    axes = []  # (name, lb, ub, stride, values)
    for d in range(depth):
        stride = draw(st.sampled_from([-3, -2, -1, 1, 2, 3]))
        lb = draw(st.integers(-4, 4))
        trips = draw(st.integers(1, 3))
        slack = draw(st.integers(1, abs(stride)))  # ub - lb need not be a multiple of the stride
        ub = lb + stride * (trips - 1) + (slack if stride > 0 else -slack)
        values = list(range(lb, ub, stride))
        assert len(values) == trips
        axes.append((f"a{d}", lb, ub, stride, values))
    b = Builder()
    spans = [max(v) - min(v) + 1 for *_, v in axes]
    nrows = int(np.prod(spans))
    x = b.dram("x", (nrows * ROWS, WIDTH), kind="ExternalInput")
    y = b.dram("y", (nrows * ROWS, WIDTH), kind="ExternalOutput")
    acc_out = b.dram("acc_out", (ROWS, WIDTH), kind="ExternalOutput")
    t = b.sbuf("t", (ROWS, WIDTH), addr=0)
    acc = b.sbuf("acc", (ROWS, WIDTH), addr=64)
    nblk = 3
    ring = b.sbuf("ring", (ROWS, WIDTH), addr=128, blocks=nblk)
    b.memset(acc.ap(), 0.25)
    b.memset(t.ap(), 0.0)
    for r in range(nrows):
        b.dma(y.tile(r * ROWS, ROWS, 0, WIDTH), t.ap())
    for k in range(nblk):
        b.memset(ring.ap(block=k), float(k))
    nest = ExitStack()
    exprs = [nest.enter_context(b.loop(name, lb, ub, stride)) for name, lb, ub, stride, _ in axes]

    def row_of(signs):
        """A row index in [0, nrows): mixed radix over per-axis digits v - min or max - v."""
        row, scale = const(0), 1
        for (*_, values), e, span, sign in zip(axes, exprs, spans, signs):
            digit = e - min(values) if sign > 0 else max(values) - e
            row, scale = row + digit * scale, scale * span
        return row

    load_signs = [draw(st.sampled_from([-1, 1])) for _ in axes]
    store_signs = [draw(st.sampled_from([-1, 1])) for _ in axes]
    inner, (*_, inner_values) = exprs[-1], axes[-1]
    b.dma(t.ap(), x.tile(row_of(load_signs) * ROWS, ROWS, 0, WIDTH))
    b.tensor_tensor(acc.ap(), acc.ap(), t.ap(), draw(st.sampled_from(["add", "subtract", "max"])))
    c = draw(st.sampled_from(inner_values))
    rel = draw(st.sampled_from(["ge", "gt", "le", "lt", "ne", "eq"]))
    sign = draw(st.sampled_from([-1, 1]))
    b.copy(ring.ap(block=(max(inner_values) - inner) % nblk), t.ap(), pred=[AffinePredicate((inner - c) * sign, rel)])
    b.tensor_tensor(t.ap(), t.ap(), ring.ap(block=(inner - min(inner_values)) % nblk), "add")
    k = draw(st.integers(-3, 3))
    if k:  # a symbolic immediate
        b.emit("TensorTensor", "DVE", [t.ap(), 5 + k * inner], [t.ap()], attrs={"op": "add"})
    b.dma(y.tile(row_of(store_signs) * ROWS, ROWS, 0, WIDTH), t.ap())
    nest.close()
    b.dma(acc_out.ap(), acc.ap())
    return b.module()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(signed_loop_programs(), st.integers(0, 2))
def test_generated_signed_loop_nests_keep_their_meaning(m, seed):
    verify(m)
    out = unrolled(m)
    outputs_agree(m, out, seed)


# ----------------------------------------------------------------------------- full_unroll level 2


def _function_with_edges(name: str) -> tuple:
    """A function with dependence edges outside and inside a static loop, and a
    carried edge of a dynamic loop (which stays a loop, so its carry survives
    unrolling)."""
    b = Builder(name, attrs=(FnAttr.UNROLLABLE, FnAttr.MARKED_TO_UNROLL))
    x = b.dram("x", (ROWS, WIDTH), kind="ExternalInput")
    y = b.dram("y", (ROWS, WIDTH), kind="ExternalOutput")
    t = b.sbuf("t", (ROWS, WIDTH), addr=0)
    u = b.sbuf("u", (ROWS, WIDTH), addr=64)
    n = b.register("n")
    ld = b.dma(t.ap(), x.ap())
    mv = b.register_move(n, 2)
    b.dep(ld, mv)
    with b.loop("i", 0, 3):
        a = b.tensor_scalar(u.ap(), t.ap(), "mult", 2.0)
        c = b.copy(t.ap(), u.ap())
        b.dep(a, c)
        b.fn.carried.append((c, a, Edge.Flow, CARRIED_LOOP, b.fn.intern((1,))))
        with b.dynamic_loop("k", 0, n):
            p = b.tensor_scalar(u.ap(), t.ap(), "add", 1.0)
            q = b.copy(t.ap(), u.ap())
            b.dep(p, q)
            b.fn.carried.append((q, p, Edge.Flow, CARRIED_LOOP, b.fn.intern((1,))))
    st_ = b.dma(y.ap(), t.ap())
    b.dep(ld, st_)
    return b, b.function()


def _edges(m: Module) -> list[tuple[int, int]]:
    return [(len(fn.deps), len(fn.carried)) for fn in m.functions]


def test_full_unroll_level2_erases_every_dependence_edge_including_the_inputs():
    b, main = _function_with_edges("main")
    _, other = _function_with_edges("other")
    m = Module([main, other], attributes=b.module().attributes)
    before = _edges(m)
    assert all(d > 0 and c > 0 for d, c in before)
    # the control: level 1 unrolls the first function and keeps edges (the kept loop's carry too)
    one, _ = FullUnroll(level=1).run(m)
    assert all(d > 0 and c > 0 for d, c in _edges(one))
    out, stats = FullUnroll(level=2).run(m)
    verify(out)
    assert stats["unrolled_functions"] == 2
    assert _edges(out) == [(0, 0), (0, 0)]
    assert _edges(m) == before  # the input is not touched
    outputs_agree(m, out)


# ----------------------------------------------------------------------------- dynamic loop strides


def _dynamic_stride_program(lb: int, stride: int, ub: int) -> Module:
    """For k in range(lb, ub_register, stride): column k of y gets k + 1 (via the index in an offset)."""
    b = Builder()
    y = b.dram("y", (1, 16), "int32", kind="ExternalOutput")
    t = b.sbuf("t", (1, 16), "int32", addr=0)
    n = b.register("n")
    b.register_move(n, ub)
    b.memset(t.ap(), 0)
    with b.dynamic_loop("k", lb, n, stride, name="dl") as k:
        b.emit("TensorTensor", "DVE", [t.ap([[16, 1], [1, 1]], k), k + 1], [t.ap([[16, 1], [1, 1]], k)],
               attrs={"op": "add"})
    b.dma(y.ap(), t.ap())
    return b.module()


@pytest.mark.parametrize("lb,stride,ub", [(0, 2, 9), (1, 3, 16), (0, 5, 16), (14, -3, 0), (15, -2, 2)])
def test_a_dynamic_loop_register_steps_by_the_stride(lb, stride, ub):
    m = _dynamic_stride_program(lb, stride, ub)
    want = np.zeros(16, np.int32)
    for v in range(lb, ub, stride):
        want[v] = v + 1
    assert np.array_equal(run(m, {})["y"][0], want)
    lowered = Module([lower_dynamic_exprs(m.functions[0])], attributes=m.attributes)
    verify(lowered)
    fn = lowered.functions[0]
    assert fn.reg_by_name("iv_k") >= 0
    assert np.array_equal(run(lowered, {})["y"][0], want)
    out = unrolled(m)  # Unroll lowers dynamic loops as it goes
    assert (out.functions[0].insts["opcode"] == Op.DynamicForLoop).sum() == 1
    assert np.array_equal(run(out, {})["y"][0], want)


def test_dynamic_loops_with_strides_inside_unrolled_loops():
    b = Builder()
    y = b.dram("y", (3, 16), "int32", kind="ExternalOutput")
    t = b.sbuf("t", (3, 16), "int32", addr=0)
    n = b.register("n")
    b.register_move(n, 13)
    b.memset(t.ap(), 0)
    with b.loop("i", 2, -1, -1) as i:  # 2, 1, 0
        with b.dynamic_loop("k", 1, n, 4) as k:  # 1, 5, 9
            b.emit("TensorTensor", "DVE", [t.ap([[16, 1], [1, 1]], i * 16 + k), k * 10 - i],
                   [t.ap([[16, 1], [1, 1]], i * 16 + k)], attrs={"op": "add"})
    b.dma(y.ap(), t.ap())
    m = b.module()
    out = unrolled(m)
    want = np.zeros((3, 16), np.int32)
    for i in (2, 1, 0):
        for k in (1, 5, 9):
            want[i, k] = k * 10 - i
    assert np.array_equal(run(m, {})["y"], want)
    assert np.array_equal(run(out, {})["y"], want)
