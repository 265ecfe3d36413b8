"""Unroll: structure of the clones, and meaning preserved (interpreter before == after)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.programs import every_family_module, tiled_exp_module
from tusk.ir import bir_json
from tusk.ir.builder import Builder
from tusk.ir.enums import Edge, FnAttr, Kind, Op
from tusk.ir.errors import PassError
from tusk.ir.expr import AffinePredicate, ModuloExpr, const, idx
from tusk.ir.module import CARRIED_LOOP, CARRIED_UNROLL, Module
from tusk.ir.verify import verify
from tusk.sim.interp import random_inputs, run, same_outputs
from tusk.stages.unroll import Unroll, clone_count_bound


def unrolled(m: Module, **kw) -> Module:
    out, _ = Unroll(**kw).run(m)
    verify(out)
    return out


def assert_same_meaning(before: Module, after: Module, seed: int = 0) -> None:
    inputs = random_inputs(before, seed)
    assert same_outputs(run(before, inputs), run(after, inputs))


def names(m: Module) -> list[str]:
    return m.functions[0].inst_names()


def test_tiled_kernel_clones_once_per_iteration(tiled_module):
    out = unrolled(tiled_module)
    fn = out.functions[0]
    assert fn.n_insts == 4 * 3
    assert not np.isin(fn.insts["opcode"], [Op.Loop]).any()
    assert names(out)[:4] == ["dma_copy0-it0", "activation0-it0", "dma_copy1-it0", "dma_copy0-it1"]
    assert FnAttr.UNROLLED in fn.attrs
    loads = [fn.inst(i) for i in range(fn.n_insts) if fn.inst(i).opname == "DMACopy" and fn.inst(i).ins[0].memloc_name == "x"]
    assert [ld.ins[0].offset for ld in loads] == [0, 8192, 16384, 24576]
    assert all(o.kind == Kind.PHYSICAL for i in range(fn.n_insts) for o in fn.inst(i).operands)
    assert_same_meaning(tiled_module, out)


def test_intra_iteration_dependencies_are_cloned(tiled_module):
    fn = unrolled(tiled_module).functions[0]
    edges = {(fn.inst_name(s), fn.inst_name(d)) for s, d in zip(fn.deps["src"].tolist(), fn.deps["dst"].tolist())}
    assert {("dma_copy0-it2", "activation0-it2"), ("activation0-it2", "dma_copy1-it2")} <= edges
    assert len(edges) == 8


def test_every_family_with_blocks_and_predicate(family_module):
    out = unrolled(family_module)
    fn = out.functions[0]
    n = names(out)
    assert "tensor_tensor1-it0" not in n and "tensor_tensor1-it1" in n  # predicate i - 1 >= 0
    # the block tensor became one set per block
    set_names = {fn.strings[s] for s in fn.sets["name"].tolist()}
    assert {"blk_b0_set", "blk_b1_set"} <= set_names and "blk_set" not in set_names
    assert_same_meaning(family_module, out)


def test_nested_loops_strides_and_clone_names_are_stable():
    b = Builder()
    x = b.dram("x", (64, 8), kind="ExternalInput")
    y = b.dram("y", (64, 8), kind="ExternalOutput")
    t = b.sbuf("t", (8, 8), addr=0)
    with b.loop("i", 1, 7, 3) as i:     # i = 1, 4
        with b.loop("j", 0, 4) as j:    # j = 0..3
            b.dma(t.ap(), x.tile(i * 8 + j * 2, 8, 0, 8), name="ld")
            b.tensor_scalar(t.ap(), t.ap(), "mult", 2.0, name="ts")
            b.dma(y.tile(i * 8 + j * 2, 8, 0, 8), t.ap(), name="st")
    m = b.module()
    out = unrolled(m)
    assert names(out)[:6] == ["ld-it0", "ts-it0", "st-it0", "ld-it1", "ts-it1", "st-it1"]
    assert len(names(out)) == 2 * 4 * 3
    assert names(unrolled(m)) == names(out)
    fn = out.functions[0]
    offsets = [fn.inst(r).ins[0].offset for r in range(0, fn.n_insts, 3)]
    assert offsets == [(i * 8 + j * 2) * 8 for i in (1, 4) for j in range(4)]
    assert_same_meaning(m, out)


def _carried_program(flavour: int):
    b = Builder()
    acc = b.sbuf("acc", (128, 4), addr=0)
    tmp = b.sbuf("tmp", (128, 4), addr=64)
    y = b.dram("y", (128, 4), kind="ExternalOutput")
    b.memset(acc.ap(), 1.0)
    with b.loop("i", 0, 4):
        a = b.tensor_scalar(tmp.ap(), acc.ap(), "mult", 2.0, name="dbl")
        c = b.copy(acc.ap(), tmp.ap(), name="back")
    b.dma(y.ap(), acc.ap())
    fn = b.fn
    if flavour == CARRIED_LOOP:
        payload = fn.intern((1,))
    else:
        payload = fn.intern(((idx("i") - 1,), (AffinePredicate(idx("i") - 2, "ge"),)))
    fn.carried.append((c, a, Edge.Flow, flavour, payload))
    b.dep(a, c)
    return b.module()


def test_loop_carried_distance_joins_iteration_k_minus_1_to_k():
    m = _carried_program(CARRIED_LOOP)
    fn = unrolled(m).functions[0]
    edges = {(fn.inst_name(s), fn.inst_name(d)) for s, d in zip(fn.deps["src"].tolist(), fn.deps["dst"].tolist())}
    assert {("back-it0", "dbl-it1"), ("back-it1", "dbl-it2"), ("back-it2", "dbl-it3")} <= edges
    assert not any(d == "dbl-it0" for s, d in edges if s.startswith("back"))
    assert len(fn.carried) == 0
    assert_same_meaning(m, unrolled(m))


def test_predicated_carry_survives_only_where_its_predicate_holds():
    fn = unrolled(_carried_program(CARRIED_UNROLL)).functions[0]
    edges = {(fn.inst_name(s), fn.inst_name(d)) for s, d in zip(fn.deps["src"].tolist(), fn.deps["dst"].tolist())}
    carried = {e for e in edges if e[0].startswith("back")}
    assert carried == {("back-it1", "dbl-it2"), ("back-it2", "dbl-it3")}


def test_dynamic_loop_is_kept_and_its_index_becomes_a_register_ring():
    b = Builder()
    x = b.dram("x", (128, 8), kind="ExternalInput")
    y = b.dram("y", (128, 8), kind="ExternalOutput")
    t = b.sbuf("t", (128, 8), addr=0, blocks=3)
    n = b.register("n")
    b.dma(t.ap(block=0), x.ap())
    b.register_move(n, 2)  # k + 1 stays inside the 3 blocks, so the ring index changes nothing
    with b.loop("i", 0, 2):
        with b.dynamic_loop("k", 0, n) as k:
            b.tensor_scalar(t.ap(block=k + 1), t.ap(block=k), "add", 1.0)
    b.dma(y.ap(), t.ap(block=1))
    m = b.module()
    out = unrolled(m)
    fn = out.functions[0]
    assert (fn.insts["opcode"] == Op.DynamicForLoop).sum() == 2
    assert fn.reg_by_name("iv_k") >= 0
    syms = [fn.values[int(a)] for a, kk in zip(fn.operands["aux"].tolist(), fn.operands["kind"].tolist())
            if kk == Kind.SYMBOLIC]
    assert syms and all(isinstance(s.block.terms[0][0], ModuloExpr) for s in syms)
    assert "k" not in set().union(*(s.block.free_axes() for s in syms))
    assert_same_meaning(m, out)


def test_marked_mode_unrolls_only_marked_loops():
    b = Builder()
    t = b.sbuf("t", (128, 4), addr=0)
    with b.loop("i", 0, 3):
        b.memset(t.ap(), 0)
    with b.loop("j", 0, 2, name="marked"):
        b.memset(t.ap(), 1)
    fn = b.fn
    row = fn.inst_by_name("marked")
    fn.insts.set("attrs", row, fn.intern_record(fn.inst(row).attrs.with_(unroll=True)))
    out = unrolled(b.module(), loops="marked")
    ops = out.functions[0].insts["opcode"].tolist()
    assert ops.count(Op.Loop) == 1 and len(ops) == 2 + 2


def test_instruction_limit_is_checked_before_clones_are_built():
    b = Builder()
    t = b.sbuf("t", (128, 4), addr=0)
    with b.loop("i", 0, 10**3):
        with b.loop("j", 0, 10**3):
            b.memset(t.ap(), 0)
    assert clone_count_bound(b.fn) == 10**6
    m = b.module(max_instruction_limit=1000)
    with pytest.raises(PassError, match=r"total_count=1000000, max_instruction_limit=1000"):
        Unroll().run(m)
    b = Builder()
    t = b.sbuf("t", (128, 4), addr=0)
    with b.loop("i", 0, 10**6):
        with b.loop("j", 0, 10**6):
            b.memset(t.ap(), 0)
    with pytest.raises(PassError, match=r"Compiler generated too many instructions.*total_count=1000000000000"):
        Unroll().run(b.module())  # the backend's 25M ceiling holds without a module budget too


def test_split_and_merge_equal_the_serial_run():
    m = every_family_module()
    second = tiled_exp_module().functions[0]
    second.name = "other"
    m.functions.append(second)
    serial, _ = Unroll().run(m)
    parts = Unroll().split(m)
    assert len(parts) == 2
    merged, _ = Unroll().run_split(m)
    assert bir_json.dumps(merged) == bir_json.dumps(serial)


def test_input_module_is_not_mutated(tiled_module):
    before = bir_json.dumps(tiled_module)
    unrolled(tiled_module)
    assert bir_json.dumps(tiled_module) == before


# ----------------------------------------------------------------------------- generated loop nests


@st.composite
def loop_programs(draw):
    """Loop nests over tiles of x: loads, elementwise ops, a block tensor ring, predicates, stores."""
    depth = draw(st.integers(1, 2))
    axes = []
    for d in range(depth):
        lb = draw(st.integers(0, 2))
        stride = draw(st.integers(1, 2))
        trips = draw(st.integers(1, 3))
        axes.append((f"a{d}", lb, lb + stride * trips, stride, trips))
    width = 4
    rows = 16
    span = 1
    for _, lb, ub, stride, trips in axes:
        span = span * (lb + stride * trips + 1)
    b = Builder()
    x = b.dram("x", (rows * span, width), kind="ExternalInput")
    y = b.dram("y", (rows * span, width), kind="ExternalOutput")
    acc = b.sbuf("acc", (rows, width), addr=0)
    t = b.sbuf("t", (rows, width), addr=64)
    nblk = draw(st.integers(2, 3))
    ring = b.sbuf("ring", (rows, width), addr=128, blocks=nblk)
    b.memset(acc.ap(), 0.5)
    for k in range(nblk):
        b.memset(ring.ap(block=k), float(k))
    ctx = []
    exprs = []
    for name, lb, ub, stride, _ in axes:
        ctx.append(b.loop(name, lb, ub, stride))
        exprs.append(ctx[-1].__enter__())
    # linear row index into x/y: mixed radix over the axis values
    row = const(0)
    scale = 1
    for (name, lb, ub, stride, trips), e in zip(reversed(axes), reversed(exprs)):
        row = row + e * scale
        scale *= lb + stride * trips + 1
    inner = exprs[-1]
    pred_c = draw(st.integers(0, 3))
    b.dma(t.ap(), x.tile(row * rows, rows, 0, width))
    op = draw(st.sampled_from(["add", "mult", "max", "subtract"]))
    update = b.tensor_tensor(acc.ap(), acc.ap(), t.ap(), op, name="update")
    # the accumulator carries a true dependence from one iteration of the innermost loop to the next
    b.fn.carried.append((update, update, Edge.Flow, CARRIED_LOOP, b.fn.intern((1,))))
    b.copy(ring.ap(block=inner % nblk), t.ap(), pred=[AffinePredicate(inner - pred_c, "ge")])
    b.tensor_tensor(t.ap(), t.ap(), ring.ap(block=(inner + 1) % nblk), "add")
    b.dma(y.tile(row * rows, rows, 0, width), t.ap())
    for c in reversed(ctx):
        c.__exit__(None, None, None)
    out = b.dram("out_acc", (rows, width), kind="ExternalOutput")
    b.dma(out.ap(), acc.ap())
    return b.module()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(loop_programs(), st.integers(0, 3))
def test_generated_loop_nests_keep_their_meaning(m, seed):
    verify(m)
    out = unrolled(m)
    fn = out.functions[0]
    assert not (fn.insts["opcode"] == Op.Loop).any()
    assert_same_meaning(m, out, seed)
    # the carried edge joins consecutive iterations of the innermost loop, never across outer iterations
    src = m.functions[0]
    inner = max((src.loop_axis(r) for r in range(src.n_insts) if src.inst(r).opname == "Loop"),
                key=lambda ax: ax.name).trip_count
    carried = [(fn.insts.get("iter", s), fn.insts.get("iter", d)) for s, d in
               zip(fn.deps["src"].tolist(), fn.deps["dst"].tolist())
               if fn.inst_name(s).startswith("update") and fn.inst_name(d).startswith("update")]
    updates = int(sum(fn.inst_name(r).startswith("update-") for r in range(fn.n_insts)))
    assert sorted(carried) == [(k, k + 1) for k in range(updates - 1) if (k + 1) % inner]
    again = bir_json.loads(bir_json.dumps(out))
    assert again == out


def test_a_dynamic_loop_dropped_by_its_predicate_takes_its_body_block_with_it():
    b = Builder()
    t = b.sbuf("t", (128, 4), addr=0)
    n = b.register("n")
    b.register_move(n, 1)
    with b.loop("i", 0, 3) as i:
        with b.dynamic_loop("k", 0, n, name="dyn"):
            b.memset(t.ap(), 1.0)
        fn = b.fn
    row = fn.inst_by_name("dyn")
    fn.insts.set("pred", row, fn.intern((AffinePredicate(i - 1, "ge"),)))
    out = unrolled(b.module())
    f = out.functions[0]
    assert (f.insts["opcode"] == Op.DynamicForLoop).sum() == 2
    assert len(f.blocks) == 1 + 2  # Block1 and the two surviving bodies, no orphan block
    assert set(f.blocks["parent"].tolist()) - {-1} == set(np.nonzero(f.insts["opcode"] == Op.DynamicForLoop)[0].tolist())


# ----------------------------------------------------------------------------- review regressions


def _ring_program(pred_expr=None, imm=None, ub_outer=False):
    """An outer static loop around a dynamic loop; optional mixed (static + dynamic) expressions."""
    b = Builder()
    x = b.dram("x", (128, 4), kind="ExternalInput")
    y = b.dram("y", (128, 4), kind="ExternalOutput")
    t = b.sbuf("t", (128, 4), addr=0)
    n = b.register("n")
    b.dma(t.ap(), x.ap())
    b.register_move(n, 2)
    with b.loop("i", 0, 3) as i:
        with b.dynamic_loop("k", 0, n) as k:
            pred = [AffinePredicate(pred_expr(i, k), "ge")] if pred_expr else ()
            b.tensor_scalar(t.ap(), t.ap(), "add", 1.0, pred=pred)
            if imm is not None:
                b.emit("TensorTensor", "DVE", [t.ap(), imm(i, k)], [t.ap()], attrs={"op": "add"})
    b.dma(y.ap(), t.ap())
    return b.module()


@pytest.mark.parametrize("case", ["predicate", "immediate"])
def test_expressions_mixing_unrolled_and_runtime_indices_get_the_known_part_substituted(case):
    if case == "predicate":
        m = _ring_program(pred_expr=lambda i, k: i + k - 2)
    else:
        m = _ring_program(imm=lambda i, k: i * 10 + k)
    out = unrolled(m)
    assert_same_meaning(m, out)
    assert bir_json.loads(bir_json.dumps(out)) == out


def test_a_dynamic_loop_bound_may_use_an_outer_static_index():
    b = Builder()
    y = b.dram("y", (1, 1), "int32", kind="ExternalOutput")
    t = b.sbuf("t", (1, 1), "int32", addr=0)
    b.memset(t.ap(), 0)
    with b.loop("i", 0, 3, name="outer") as i:
        row = b.emit("DynamicForLoop", "Unassigned", attrs={"DynamicForLoopAxis": {
            "name": "k", "lb": 0, "ub": i + 1, "stride": 1}}, name="tri")
        outer_block = b._block
        b._block = b.fn.add_block("tri_body", row)
        b.tensor_scalar(t.ap(), t.ap(), "add", 1.0)
        b._block = outer_block
    b.dma(y.ap(), t.ap())
    m = b.module()
    out = unrolled(m)
    assert run(out, {})["y"][0, 0] == 1 + 2 + 3
    assert_same_meaning(m, out)


def test_a_predicate_on_an_unrolled_loop_guards_its_body():
    b = Builder()
    x = b.dram("x", (128, 4), kind="ExternalInput")
    y = b.dram("y", (128, 4), kind="ExternalOutput")
    t = b.sbuf("t", (128, 4), addr=0)
    b.dma(t.ap(), x.ap())
    with b.loop("i", 0, 3, name="outer") as i:
        with b.loop("j", 0, 2, name="inner"):
            b.tensor_scalar(t.ap(), t.ap(), "add", 1.0)
    b.dma(y.ap(), t.ap())
    fn = b.fn
    fn.insts.set("pred", fn.inst_by_name("inner"), fn.intern((AffinePredicate(i - 1, "ge"),)))
    m = b.module()
    out = unrolled(m)
    assert out.functions[0].n_insts == 2 + 2 * 2  # the two DMAs, and the body for i = 1, 2 only
    assert_same_meaning(m, out)


def test_nested_dynamic_loops_each_step_their_register_and_lowering_is_idempotent():
    b = Builder()
    y = b.dram("y", (1, 8), "int32", kind="ExternalOutput")
    t = b.sbuf("t", (1, 8), "int32", addr=0)
    n, m_ = b.register("n"), b.register("m")
    b.register_move(n, 3)
    b.register_move(m_, 2)
    b.memset(t.ap(), 0)
    with b.dynamic_loop("k", 0, n) as k:
        with b.dynamic_loop("q", 0, m_):
            b.emit("TensorTensor", "DVE", [t.ap([[8, 1], [1, 1]], k), 1], [t.ap([[8, 1], [1, 1]], k)],
                   attrs={"op": "add"})
    b.dma(y.ap(), t.ap())
    m = b.module()
    once = unrolled(m)
    assert list(run(once, {})["y"][0]) == [2, 2, 2, 0, 0, 0, 0, 0]
    twice = unrolled(once)
    assert bir_json.dumps(twice) == bir_json.dumps(once)


def test_a_register_lower_bound_of_a_dynamic_loop_is_copied_into_the_induction_register():
    b = Builder()
    y = b.dram("y", (1, 8), "int32", kind="ExternalOutput")
    t = b.sbuf("t", (1, 8), "int32", addr=0)
    s, n = b.register("s"), b.register("n")
    b.register_move(s, 2)
    b.register_move(n, 5)
    b.memset(t.ap(), 0)
    row = b.emit("DynamicForLoop", "Unassigned", attrs={"DynamicForLoopAxis": {
        "name": "k", "lb": "s", "ub": {"kind": "IntRuntimeValueKind", "regref": "n"}, "stride": 1}}, name="dl")
    outer = b._block
    b._block = b.fn.add_block("dl_body", row)
    from tusk.ir.expr import idx as axis
    b.emit("TensorTensor", "DVE", [t.ap([[8, 1], [1, 1]], axis("k")), 1], [t.ap([[8, 1], [1, 1]], axis("k"))],
           attrs={"op": "add"})
    b._block = outer
    b.dma(y.ap(), t.ap())
    m = b.module()
    assert_same_meaning(m, unrolled(m))


def test_carries_of_loops_that_stay_loops_stay_carried():
    b = Builder()
    t = b.sbuf("t", (128, 4), addr=0)
    u = b.sbuf("u", (128, 4), addr=64)
    n = b.register("n")
    b.register_move(n, 2)
    with b.loop("i", 0, 2):
        with b.dynamic_loop("k", 0, n):
            a = b.copy(u.ap(), t.ap(), name="A")
            c = b.copy(t.ap(), u.ap(), name="B")
    b.dep(a, c)
    b.fn.carried.append((c, a, Edge.Flow, CARRIED_LOOP, b.fn.intern((1,))))
    fn = unrolled(b.module()).functions[0]
    carried = {(fn.inst_name(s), fn.inst_name(d)) for s, d in zip(fn.carried["src"].tolist(), fn.carried["dst"].tolist())}
    assert carried == {("B-it0", "A-it0"), ("B-it1", "A-it1")}


def test_a_predicated_carry_is_checked_at_every_destination_clone():
    b = Builder()
    t = b.sbuf("t", (128, 4), addr=0)
    u = b.sbuf("u", (128, 4), addr=64)
    with b.loop("i", 0, 3) as i:
        s = b.copy(u.ap(), t.ap(), name="S")
        with b.loop("j", 0, 3) as j:
            d = b.copy(t.ap(), u.ap(), name="D")
    b.fn.carried.append((s, d, Edge.Flow, CARRIED_UNROLL, b.fn.intern(((i - 1,), (AffinePredicate(j - 1, "ge"),)))))
    fn = unrolled(b.module()).functions[0]
    edges = {(fn.inst_name(a), fn.inst_name(c)) for a, c in zip(fn.deps["src"].tolist(), fn.deps["dst"].tolist())}
    assert edges == {("S-it0", "D-it4"), ("S-it0", "D-it5"), ("S-it1", "D-it7"), ("S-it1", "D-it8")}


def test_the_budget_check_does_not_count_later_functions_at_their_loop_size():
    b = Builder("main")
    t = b.sbuf("t", (128, 4), addr=0)
    with b.loop("i", 0, 60):
        b.memset(t.ap(), 0)
    b2 = Builder("other")
    t2 = b2.sbuf("t", (128, 4), addr=0)
    with b2.loop("j", 0, 0):
        for _ in range(49):
            b2.memset(t2.ap(), 0)
    m = Module([b.function(), b2.function()], attributes=b.module().attributes.with_(max_instruction_limit=100))
    serial, _ = Unroll().run(m)
    split, _ = Unroll().run_split(m)
    assert serial.n_insts() == split.n_insts() == 60


def test_dram_block_tensors_keep_their_shape_as_outputs():
    b = Builder()
    y = b.dram("y", (4, 4), kind="ExternalOutput")
    yb = b.fn  # a DRAM block tensor: two blocks of the output
    s = yb.add_set("yb_set", 3, 16, (4, 4), is_block=True, n_blocks=2)
    for k in range(2):
        yb.add_memloc(s, f"yb{k}", 8, pbytes=64, tensor_id=k)
    t = b.sbuf("t", (4, 4), addr=0)
    b.memset(t.ap(), 1.5)
    from tusk.ir.builder import AP, Tensor

    ring = Tensor(b, s, (yb.memlocs.__len__() - 2, yb.memlocs.__len__() - 1), 16, (4, 4), 8, 4)
    with b.loop("i", 0, 2) as i:
        b.dma(AP(ring, ((4, 4), (1, 4)), 0, i, 16), t.ap())
    b.dma(y.ap(), t.ap())
    m = b.module()
    assert_same_meaning(m, unrolled(m))
