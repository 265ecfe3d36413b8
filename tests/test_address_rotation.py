"""AddressRotation: meaning kept (interpreter before == after), rings, safety, dispatch, logs, split/merge."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.programs import recurring_buffers_module
from tusk import stages
from tusk.examples import bir_kernels
from tusk.ir.builder import Builder
from tusk.ir.enums import FnAttr, Mem, Op
from tusk.ir.errors import PassError, VerifyError
from tusk.ir.expr import AffinePredicate
from tusk.ir.liveness import instances
from tusk.ir.module import Module
from tusk.ir.serial import content_hash
from tusk.ir.verify import live_overlap_problems, verify
from tusk.sim.interp import random_inputs, run, same_outputs
from tusk.stages.address_rotation import IF_ELSE, SKIP
from tusk.stages.address_rotation_psum import prefer_bank_alignment, psum_bank_alignment
from tusk.stages.address_rotation_sb import sb_budget, sb_schedule
from tusk.stages.base import OptionError
from tusk.stages.rotation_rings import unalias
from tusk.stages.unroll import Unroll
from tusk.workflows.timings import makespan_of

ROTATIONS = ("address_rotation_psum", "address_rotation_sb", "address_rotation_dram")


ROTATION_FLAGS = {FnAttr.ROTATE_PSUM_AND_SB, FnAttr.ROTATE_SB_ONLY, FnAttr.ROTATE_DRAM, FnAttr.KERNEL_SCOPE}


def unrolled(m: Module, attrs=(FnAttr.ROTATE_PSUM_AND_SB,)) -> Module:
    """``m`` unrolled, its functions carrying exactly the rotation flags ``attrs``."""
    for fn in m.functions:
        fn.attrs = (fn.attrs - ROTATION_FLAGS) | set(attrs)
    out, _ = Unroll().run(m)
    return out


def same_meaning(before: Module, after: Module, seed: int = 0) -> bool:
    inp = random_inputs(before, seed)
    return same_outputs(run(before, inp), run(after, inp))


def apply(name: str, m: Module, **options) -> tuple[Module, dict]:
    out, stats = stages.make_pass(name, **options).run(m)
    verify(out)
    assert same_meaning(m, out), name
    return out, stats


def slots_of(fn, name: str) -> list[str]:
    """Memory location written by each full write of buffer ``name`` (or its ring slots), in order."""
    out = []
    for i in range(fn.n_insts):
        for o in fn.inst(i).outs:
            n = o.memloc_name or ""
            if n == name or n.startswith(name + "_rot"):
                out.append(n)
    return out


# --------------------------------------------------------------------------- meaning and rings


@pytest.mark.parametrize("make, kw", [(bir_kernels.tiled_exp, {"tiles": 12}),
                                       (bir_kernels.tiled_matmul, {"m": 512, "k": 384, "n": 256}),
                                       (bir_kernels.tiled_softmax, {"tiles": 8})])
def test_every_rotation_pass_and_the_scheduler_keep_the_meaning(make, kw):
    m = unrolled(make(**kw)[0])
    cur = m
    total = 0
    for name in ROTATIONS + ("clear_inst_deps", "build_fdeps", "schedule", "address_rotation_psum_post_schedule",
                             "address_rotation_sb", "clear_inst_deps", "build_fdeps"):
        cur, stats = apply(name, cur)
        total += stats.get("rotations", 0)
        if name.startswith("address_rotation"):  # a pass reports what it did; makespans are the build's steps
            assert "rotations" in stats and not {"makespan_before", "makespan_after"} & set(stats)
    assert total > 0
    assert same_meaning(m, cur, seed=7)


def test_successive_instances_get_different_slots_of_the_ring():
    m = unrolled(bir_kernels.tiled_exp(tiles=12)[0])
    out, stats = apply("address_rotation_sb", m)
    fn = out.functions[0]
    loads = [fn.inst(i).outs[0].memloc_name for i in range(fn.n_insts) if fn.inst(i).opname == "DMACopy"
             and fn.inst(i).outs[0].memloc.mtype == Mem.SB]
    assert loads[:5] == ["t", "t_rot1", "t_rot2", "t_rot3", "t_rot4"]   # target 1 (DMA-written): period 5
    assert loads[5:10] == loads[:5] and all(a != b for a, b in zip(loads, loads[1:]))
    assert stats["rotations"] == 12 - 3  # instances 0, 5 and 10 stay in the original slot
    # each instance keeps its in-place exp and its store on the same slot (one instance, never split)
    for i in range(fn.n_insts):
        v = fn.inst(i)
        if v.opname == "Activation":
            assert v.ins[0].memloc_name == v.outs[0].memloc_name
    assert makespan_of(out) < makespan_of(m)


def test_a_slot_is_free_during_the_whole_live_range_of_what_moves_there():
    """Brute force over the rotated program: no two memory locations with overlapping boxes have
    overlapping spans (first to last access), unless one of them was never moved."""
    m = unrolled(recurring_buffers_module([("load", "a", 0), ("exp", "a"), ("store", "a", 0), ("load", "a", 1),
                                           ("copy", "b", "a"), ("store", "b", 1), ("load", "a", 2), ("exp", "a"),
                                           ("store", "a", 2), ("load", "c", 3), ("store", "c", 3)]))
    out, stats = apply("address_rotation_sb", m)
    assert stats["rotations"] > 0
    fn = out.functions[0]
    ml = fn.memlocs
    span = {}
    for i in range(fn.n_insts):
        for o in fn.inst(i).operands:
            if o.memloc is not None and o.memloc.mtype == Mem.SB:
                lo, hi = span.get(o.memloc.m, (i, i))
                span[o.memloc.m] = (min(lo, i), max(hi, i))
    moved = [mm for mm in span if fn.strings[ml.get("name", mm)].count("_rot")]
    for a in moved:
        for b in span:
            if a == b:
                continue
            pa, pb = (ml.get("base", a), ml.get("base", a) + ml.get("nparts", a)), \
                (ml.get("base", b), ml.get("base", b) + ml.get("nparts", b))
            ba, bb = (ml.get("addr", a), ml.get("addr", a) + ml.get("pbytes", a)), \
                (ml.get("addr", b), ml.get("addr", b) + ml.get("pbytes", b))
            boxes = pa[0] < pb[1] and pb[0] < pa[1] and ba[0] < bb[1] and bb[0] < ba[1]
            times = span[a][0] <= span[b][1] and span[b][0] <= span[a][1]
            assert not (boxes and times)


def test_a_deliberately_wrong_rotation_is_caught_by_verifier_and_interpreter():
    b = Builder("main", attrs=(FnAttr.ROTATE_PSUM_AND_SB,))
    x = b.dram("x", (256, 64), kind="ExternalInput")
    y = b.dram("y", (256, 64), kind="ExternalOutput")
    t = b.sbuf("t", (128, 64), addr=0)
    u = b.sbuf("u", (128, 64), addr=1024)
    b.dma(u.ap(), x.tile(128, 128, 0, 64))     # 0: u is live from here ...
    b.dma(t.ap(), x.tile(0, 128, 0, 64))       # 1
    b.activation(t.ap(), t.ap(), "Exp")        # 2
    b.dma(y.tile(0, 128, 0, 64), t.ap())       # 3
    b.dma(y.tile(128, 128, 0, 64), u.ap())     # 4: ... to here
    good = b.module()
    verify(good)
    bad = good.copy()
    fn = bad.functions[0]
    wrong = fn.add_memloc(fn.memlocs.get("set", 0 + fn.memloc_by_name("t")), "t_rot1", Mem.SB, addr=1024,
                          pbytes=256, nparts=128)   # onto u, while u is live
    for i in (1, 2, 3):
        for j in fn.inst(i).operand_rows():
            if fn.operands.get("memloc", j) == fn.memloc_by_name("t"):
                fn.operands.set("memloc", j, wrong)
    with pytest.raises(VerifyError, match="t_rot1 and u overlap while both are live|u and t_rot1 overlap"):
        verify(bad)
    assert not same_meaning(good, bad)
    out, stats = apply("address_rotation_sb", good)  # the pass itself never does that
    assert stats["rotations"] == 0  # single instances: nothing recurs


# --------------------------------------------------------------------------- PSUM


def _psum_groups(groups: int, width_banks: int = 1, base: int = 0, nparts: int = 128, addr: int = 0,
                 other: tuple | None = None, attrs=(FnAttr.ROTATE_PSUM_AND_SB,)):
    """``groups`` accumulation groups (two matmuls each) into one PSUM tile, each evicted and stored."""
    b = Builder("main", attrs=attrs)
    n = 512 * width_banks
    x = b.dram("x", (128, n), kind="ExternalInput")
    y = b.dram("y", (nparts * groups, n), kind="ExternalOutput")
    w = b.sbuf("w", (128, 128), addr=0)
    v = b.sbuf("v", (128, n), addr=512)
    o = b.sbuf("o", (128, n), addr=512 + 4 * n, base=0)
    ps = b.psum("ps", (nparts, n), addr=addr, base=base)
    if other is not None:
        q = b.psum("q", (other[1], 512), addr=other[0], base=other[2])
        b.memset(q.ap(), 1.0)
    b.dma(w.ap(), x.tile(0, 128, 0, 128))
    b.dma(v.ap(), x.ap())
    for g in range(groups):
        b.matmul(ps.ap(), w.tile(0, 128, 0, nparts), v.ap(), accumulate=0)
        b.matmul(ps.ap(), w.tile(0, 128, 0, nparts), v.ap(), accumulate=1)
        b.copy(o.tile(0, nparts, 0, n), ps.ap(), engine="Activation")
        b.dma(y.tile(g * nparts, nparts, 0, n), o.tile(0, nparts, 0, n))
    if other is not None:
        b.dma(y.tile(0, 1, 0, 4), q.tile(0, 1, 0, 4))
    return b.module()


def test_psum_sweeps_after_one_that_moved_nothing_are_logged_not_run(caplog, monkeypatch):
    """The three sweeps with the skip give the function and the log lines that running all three gives."""
    from tusk.ir.arch import get_arch
    from tusk.stages import address_rotation_psum as rot

    m = _psum_groups(6)
    log = logging.getLogger("tusk.address_rotation_psum")
    arch = get_arch(m.arch)
    ran = []
    real = rot.psum_rotation
    monkeypatch.setattr(rot, "psum_rotation", lambda *a, **k: ran.append(1) or real(*a, **k))
    with caplog.at_level(logging.INFO, logger=log.name):
        fast = m.functions[0].copy()
        moved = rot.sweeps(fast, arch, log)
        said = [r.getMessage() for r in caplog.records]
    assert moved == 5 and len(ran) == 2   # the second sweep moved nothing: the third is not run
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=log.name):
        whole = m.functions[0].copy()
        assert sum(real(whole, arch, log) for _ in range(rot.PSUM_SWEEPS)) == moved
        assert [r.getMessage() for r in caplog.records] == said
    assert content_hash(m.replaced([fast])) == content_hash(m.replaced([whole]))


def test_psum_rings_over_banks_keep_accumulation_groups_whole(caplog):
    m = _psum_groups(6)
    with caplog.at_level(logging.INFO, logger="tusk.address_rotation_psum"):
        out, stats = apply("address_rotation_psum", m)
    fn = out.functions[0]
    groups = [[fn.inst(i).outs[0].memloc for i in range(fn.n_insts) if fn.inst(i).opname == "Matmult"][k:k + 2]
              for k in range(0, 12, 2)]
    assert all(g[0].m == g[1].m for g in groups)            # both matmuls of a group accumulate in one bank
    banks = [g[0].bank for g in groups]
    assert banks == [0, 1, 2, 3, 4, 5] and stats["rotations"] == 5
    evicts = [fn.inst(i).ins[0].memloc.bank for i in range(fn.n_insts) if fn.inst(i).opname == "TensorCopy"]
    assert evicts == banks
    msgs = [r.getMessage() for r in caplog.records]
    assert sum(msg.startswith("PSUM Rotation rotated") for msg in msgs) == 3   # three sweeps, no convergence loop
    assert "Attempting to find a rotation for ps" in msgs
    assert any(msg.startswith("Rotating ps from start bank 0 picked new range") for msg in msgs)


def test_psum_banks_are_searched_with_bank_alignment_per_band(caplog):
    assert psum_bank_alignment(2048) == 1 and psum_bank_alignment(4096) == 2 and psum_bank_alignment(6000) == 3
    assert prefer_bank_alignment(2, 2) and not prefer_bank_alignment(3, 2) and prefer_bank_alignment(8, 4)
    # a 2-bank tile starts on even banks; another tensor holds bank 2 of the same band for the whole kernel
    out, _ = apply("address_rotation_psum", _psum_groups(4, width_banks=2, other=(2 * 2048, 128, 0)))
    fn = out.functions[0]
    starts = [fn.inst(i).outs[0].memloc.bank for i in range(fn.n_insts) if fn.inst(i).opname == "Matmult"][::2]
    assert starts == [0, 4, 6, 0]  # ring of 3: banks 0-1 (own), 4-5, 6-7; 2-3 are taken
    # the same tensor on partitions 64..95 (band 2) does not block partitions 0..31 (band 0)
    out, _ = apply("address_rotation_psum", _psum_groups(3, nparts=32, other=(2048, 32, 64)))
    fn = out.functions[0]
    starts = [fn.inst(i).outs[0].memloc.bank for i in range(fn.n_insts) if fn.inst(i).opname == "Matmult"][::2]
    assert starts == [0, 1, 2]
    # no free bank at all: left in place, with the seed's log line
    with caplog.at_level(logging.INFO, logger="tusk.address_rotation_psum"):
        out, stats = apply("address_rotation_psum", _psum_groups(2, width_banks=4, other=(4 * 2048, 128, 0)))
    assert stats["rotations"] == 0
    assert "Cannot Rotate PSUM Bank for ps from start bank 0" in [r.getMessage() for r in caplog.records]


# --------------------------------------------------------------------------- dispatch


def test_dispatch_follows_the_function_attributes(caplog):
    plain = unrolled(bir_kernels.tiled_exp(tiles=4)[0], attrs=())
    with caplog.at_level(logging.INFO):
        out, stats = apply("address_rotation_sb", plain)
    assert stats["rotations"] == 0 and stats["skipped"] == SKIP and out == plain
    assert SKIP in [r.getMessage() for r in caplog.records]
    # attribute 10: SB only
    psum = _psum_groups(3, attrs=(FnAttr.ROTATE_SB_ONLY,))
    assert apply("address_rotation_psum", psum)[1]["rotations"] == 0
    # attribute 12 (after scheduling): the post-schedule PSUM pass rotates, the first one does not
    post = _psum_groups(3, attrs=(FnAttr.KERNEL_SCOPE,))
    assert apply("address_rotation_psum", post)[1]["rotations"] == 0
    assert apply("address_rotation_psum_post_schedule", post)[1]["rotations"] == 2
    assert apply("address_rotation_sb", unrolled(bir_kernels.tiled_exp(tiles=4)[0], (FnAttr.KERNEL_SCOPE,)))[1][
        "rotations"] == 3


def test_if_else_regions_are_refused(caplog):
    b = Builder("main", attrs=(FnAttr.ROTATE_PSUM_AND_SB,))
    t = b.sbuf("t", (128, 4), addr=0)
    r = b.register("r")
    b.emit("CompareAndBranch", "SP", [r, 0], [], attrs={"comp_op": "IS_EQIMM", "imm": 0, "on_true": "else",
                                                        "on_false": "then"})
    b.new_block("then")
    b.memset(t.ap(), 1.0)
    b.emit("UnconditionalBranch", "Unassigned", attrs={"target": "join"})
    b.new_block("else")
    b.memset(t.ap(), 2.0)
    b.new_block("join")
    b.memset(t.ap(), 3.0)
    with caplog.at_level(logging.INFO):
        out, stats = stages.make_pass("address_rotation_sb").run(b.module())
    assert stats["skipped"] == IF_ELSE and IF_ELSE in [r_.getMessage() for r_ in caplog.records]


def test_sb_schedule_and_budget_follow_the_seed():
    assert sb_budget(128) == 56 and sb_budget(64) == 32
    std = sb_schedule("standard", 128)
    assert [(r.target, r.period) for r in std] == [(1, 5), (2, 20), (5, 10), (7, 20), (3, 10), (12, 60)]
    post = sb_schedule("post", 128)
    assert [(r.target, r.period, r.lo, r.hi, r.rotate, r.engine) for r in post] == [
        (1, 5, 32, 56, True, 0), (2, 20, 0, 128, False, 0), (5, 10, 32, 56, True, 0), (7, 20, 32, 56, True, 0),
        (3, 10, 0, 32, True, 0), (4, 1, 0, 32, False, 5), (4, 1, 0, 32, False, 1)]


def _host_calling(kernel: Module, scope: int, shape) -> Module:
    """A host ``main`` with attribute 9 calling ``kernel`` (its DRAM tensors bound by name)."""
    k = kernel.functions[0]
    k.name = "kern"
    b = Builder("main", attrs=(FnAttr.ROTATE_PSUM_AND_SB,))
    x = b.dram("x", (128 * 8, 512), kind="ExternalInput")
    y = b.dram("y", (128 * 8, 512), kind="ExternalOutput")
    attrs = {"func": "kern", "func_args": {"x": "x"}, "func_outs": {"y": "y"}, "address_rotation_scope_val": scope}
    if shape is not None:
        attrs["sb_buf_shape"] = list(shape)
    b.emit("NKIKernel", "Unassigned", [x.ap()], [y.ap()], attrs=attrs)
    return Module([b.function(), k], attributes=kernel.attributes)


def test_kernel_scope_rotates_a_callee_inside_its_sb_shape(caplog):
    kernel = unrolled(bir_kernels.tiled_exp(tiles=8)[0], attrs=())
    with caplog.at_level(logging.INFO):
        out, stats = apply("address_rotation_sb", _host_calling(kernel.copy(), 1, (0, 0)))
    assert stats["rotations"] == 0
    assert "Skipping kernel-scoped address rotation for nki_kernel0 - SB shape not set" in \
        [r.getMessage() for r in caplog.records]
    out, stats = apply("address_rotation_sb", _host_calling(kernel.copy(), 1, (128, 4 * 2048 * 2)))
    addrs = {ml for ml in out.functions[1].memlocs["addr"].tolist()}
    assert stats["rotations"] > 0 and max(addrs) + 2048 <= 4 * 2048 * 2  # inside the kernel's SB shape
    assert apply("address_rotation_sb", _host_calling(kernel.copy(), 0, (128, 16384)))[1]["rotations"] == 0


# --------------------------------------------------------------------------- DRAM


def _dram_scratch(attrs=(FnAttr.ROTATE_DRAM,), addr: int = 0):
    """Tiles staged through an internal DRAM scratch inside a dynamic loop, read back after it."""
    b = Builder("main", attrs=attrs)
    x = b.dram("x", (128, 64), kind="ExternalInput")
    n_in = b.dram("n", (1, 1), "int32", kind="ExternalInput")
    y = b.dram("y", (128, 64), kind="ExternalOutput")
    scratch = b.dram("scratch", (128, 64), addr=addr)
    other = b.dram("other", (8, 8), addr=addr + 128 * 64 * 4)
    t = b.sbuf("t", (128, 64), addr=0)
    cnt = b.sbuf("cnt", (1, 1), "int32", addr=1024)
    n = b.register("n")
    b.dma(cnt.ap(), n_in.ap())
    b.tensor_load(n, cnt.ap())
    b.dma(other.ap(), t.tile(0, 8, 0, 8))
    with b.dynamic_loop("k", 0, n):
        b.dma(t.ap(), x.ap())
        b.dma(scratch.ap(), t.ap())
    b.dma(t.ap(), scratch.ap())
    b.dma(y.ap(), t.ap())
    return b.module()


def test_dram_rotation_lays_internal_buffers_out_above_the_high_water_mark(caplog):
    m = _dram_scratch()
    with caplog.at_level(logging.INFO, logger="tusk.address_rotation_dram"):
        out, stats = apply("address_rotation_dram", m)
    msgs = [r.getMessage() for r in caplog.records]
    assert "Runtime page size at 64 MB" in msgs and "DRAM hwm before rotation 33024" in msgs
    fn = out.functions[0]
    assert fn.memlocs.get("addr", fn.memloc_by_name("scratch")) == 64 << 20 and stats["rotations"] == 1
    assert fn.memlocs.get("addr", fn.memloc_by_name("other")) == 128 * 64 * 4  # one block only: stays
    inp = random_inputs(m, 0)
    inp["n"] = np.array([[2]], dtype=np.int32)
    assert same_outputs(run(m, inp), run(out, inp))
    assert apply("address_rotation_dram", m, disable_dram_rotation=True)[0] == m
    assert apply("address_rotation_dram", _dram_scratch(attrs=()))[1]["rotations"] == 0


def test_dram_rotation_refusals():
    with pytest.raises(OptionError, match="Setting rotation maximum memory size beyond 8G can cause runtime to "
                                          "complain"):
        stages.make_pass("address_rotation_dram", dram_rotation_size=9)
    with pytest.raises(PassError, match="Internal DRAM node not allocated"):
        stages.make_pass("address_rotation_dram").run(_dram_scratch(addr=-1))


# --------------------------------------------------------------------------- split and merge


def _banded(tiles: int = 8) -> Module:
    """Four independent streams, one per 32-partition band: four SB batches."""
    b = Builder("main", attrs=(FnAttr.ROTATE_PSUM_AND_SB,))
    x = b.dram("x", (32 * tiles, 4 * 64), kind="ExternalInput")
    y = b.dram("y", (32 * tiles, 4 * 64), kind="ExternalOutput")
    ts = [b.sbuf(f"t{k}", (32, 64), addr=0, base=32 * k) for k in range(4)]
    for i in range(tiles):
        for k, t in enumerate(ts):
            b.dma(t.ap(), x.tile(32 * i, 32, 64 * k, 64))
            b.activation(t.ap(), t.ap(), "Exp")
            b.dma(y.tile(32 * i, 32, 64 * k, 64), t.ap())
    return b.module()


def test_sb_rotation_splits_by_band_batch_and_merges_to_the_serial_result():
    m = _banded()
    p = stages.make_pass("address_rotation_sb")
    parts = p.split(m)
    assert parts is not None and len(parts) == 4
    assert all(part.functions[0].n_insts == 8 * 3 for part in parts)  # each part keeps its own stream
    serial, s1 = p.run(m)
    merged, s2 = p.run_split(m)
    assert content_hash(serial) == content_hash(merged)
    assert s1["rotations"] == s2["rotations"] > 0 and s2["parts"] == 4
    assert same_meaning(m, merged)


# --------------------------------------------------------------------------- generated programs

STEP = st.one_of(
    st.tuples(st.just("load"), st.sampled_from("abc"), st.integers(0, 3)),
    st.tuples(st.just("exp"), st.sampled_from("abc")),
    st.tuples(st.just("add"), st.sampled_from("abc"), st.sampled_from("abc")),
    st.tuples(st.just("copy"), st.sampled_from("abc"), st.sampled_from("abc")),
    st.tuples(st.just("half"), st.sampled_from("abc"), st.integers(-2, 2)),
    st.tuples(st.just("mm"), st.booleans()),
    st.tuples(st.just("evict"), st.sampled_from("abc")),
    st.tuples(st.just("store"), st.sampled_from("abc"), st.integers(0, 3)),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(STEP, min_size=1, max_size=24), st.sampled_from([(9,), (10,), (12,), (9, 12)]))
def test_generated_programs_keep_their_meaning_through_rotation_and_scheduling(steps, attrs):
    m = recurring_buffers_module(steps, attrs=attrs)
    verify(m)
    cur = m
    for name in ROTATIONS + ("build_fdeps", "schedule", "address_rotation_psum_post_schedule",
                             "address_rotation_sb", "build_fdeps"):
        cur, _ = stages.make_pass(name).run(cur)
        verify(cur)
    assert same_meaning(m, cur, seed=len(steps))
    inst = instances(cur.functions[0])
    assert (np.asarray(cur.functions[0].insts["opcode"]) != Op.NKIKernel).all() and inst is not None


def test_a_ring_slot_over_the_original_address_is_a_failed_rebind():
    from tusk.stages.rotation_rings import analyse, new_location, rebind, ring_of
    fn = unrolled(bir_kernels.tiled_exp(tiles=4)[0]).functions[0]
    sp = analyse(fn, Mem.SB)
    t = fn.memloc_by_name("t")
    bad = new_location(fn, t, 1, 1024)  # overlaps t's 2048 bytes from 0
    with pytest.raises(PassError, match="success && failed to allocate back to original address range !"):
        rebind(sp, t, ring_of(4, 5, 2), [t, bad])


def test_a_kernel_whose_caller_holds_sb_buffers_across_the_call_is_left_alone(caplog):
    kernel = unrolled(bir_kernels.tiled_exp(tiles=8)[0])
    host = _host_calling(kernel, 0, (128, 2048))
    main = host.functions[0]
    keep = Builder(fn=main).sbuf("keep", (128, 64), addr=60000)
    b = Builder(fn=main)
    b.memset(keep.ap(), 1.0)
    with caplog.at_level(logging.INFO):
        out, stats = apply("address_rotation_sb", host)
    assert stats["rotations"] == 0
    assert "SB rotation of kern skipped: its caller main holds SB buffers across the call" in \
        [r.getMessage() for r in caplog.records]


def test_kernels_called_with_scope_global_take_the_entry_flags():
    kernel = unrolled(bir_kernels.tiled_exp(tiles=8)[0], attrs=())
    assert apply("address_rotation_sb", _host_calling(kernel.copy(), 0, (128, 2048)))[1]["rotations"] == 0
    out, stats = apply("address_rotation_sb", _host_calling(kernel.copy(), 2, (128, 2048)))
    assert stats["rotations"] == 6 and any(n.startswith("t_rot") for n in
                                           (out.functions[1].strings[s] for s in out.functions[1].memlocs["name"]))


def test_a_loop_made_of_blocks_and_a_back_branch_is_not_an_if_else():
    from tusk.stages.address_rotation import has_if_else
    b = Builder("main", attrs=(FnAttr.ROTATE_PSUM_AND_SB,))
    t = b.sbuf("t", (128, 4), addr=0)
    r = b.register("r")
    b.register_move(r, 0)
    b.new_block("head")
    b.memset(t.ap(), 1.0)
    b.register_alu(r, r, "add", 1)
    b.emit("CompareAndBranch", "SP", [r, 3], [], attrs={"comp_op": "IS_LTIMM", "imm": 3, "on_true": "head",
                                                        "on_false": "exit"})
    b.new_block("exit")
    b.memset(t.ap(), 2.0)
    assert not has_if_else(b.fn)
    out, stats = stages.make_pass("address_rotation_sb").run(b.module())
    assert stats.get("skipped") != IF_ELSE


def test_a_post_schedule_rotation_that_moves_a_buffer_rebuilds_that_functions_edges():
    """After scheduling no later step rebuilds the edges: the rotation itself must leave them valid."""
    from tusk.examples import bir_kernels
    from tusk.stages.deps import dependence_edges

    m = unrolled(bir_kernels.tiled_matmul(m=512, k=128, n=128)[0])
    m = apply("build_fdeps", m)[0]
    for fn in m.functions:
        fn.attrs.add(FnAttr.KERNEL_SCOPE)
    out, stats = apply("address_rotation_psum_post_schedule", m)
    assert stats["rotations"] > 0
    fn = out.functions[0]
    src, dst, kind = dependence_edges(fn)
    have = set(zip(fn.deps["src"].tolist(), fn.deps["dst"].tolist(), fn.deps["kind"].tolist()))
    assert have == set(zip(src.tolist(), dst.tolist(), kind.tolist()))  # exactly the edges of the new addresses
    assert same_meaning(m, out)


def _two_bank_matmul(mt: int = 4, kt: int = 3):
    """C[128 mt, 1024] = A @ B with one 2-bank PSUM tile (128 x 1024 fp32) per M tile, written as two 1-bank
    matmul halves (512 columns each) that each accumulate over kt K tiles: no single instruction overwrites
    the whole tile."""
    b = Builder("main", attrs=(FnAttr.ROTATE_PSUM_AND_SB,))
    at = b.dram("at", (128 * kt, 128 * mt), kind="ExternalInput")
    bb = b.dram("b", (128 * kt, 1024), kind="ExternalInput")
    c = b.dram("c", (128 * mt, 1024), kind="ExternalOutput")
    ta = b.sbuf("ta", (128, 128), addr=0)
    tb = b.sbuf("tb", (128, 1024), addr=512)
    tc = b.sbuf("tc", (128, 1024), addr=8192)
    ps = b.psum("ps", (128, 1024), addr=0)
    with b.loop("mi", 0, mt) as mi:
        with b.loop("ki", 0, kt) as ki:
            b.dma(ta.ap(), at.tile(ki * 128, 128, mi * 128, 128), name="load_a")
            b.dma(tb.ap(), bb.tile(ki * 128, 128, 0, 1024), name="load_b")
            for h in range(2):
                b.matmul(ps.tile(0, 128, 512 * h, 512), ta.ap(), tb.tile(0, 128, 512 * h, 512), accumulate=ki,
                         name=f"mm{h}")
        b.copy(tc.ap(), ps.ap(), engine="Activation", name="evict")
        b.dma(c.tile(mi * 128, 128, 0, 1024), tc.ap(), name="store")
    return unrolled(b.module())


def test_a_psum_tile_wider_than_a_bank_is_rotated_on_even_banks():
    """The two halves' first matmuls together overwrite the tile: an instance starts there, so the 2-bank
    tile gets a ring, aligned to even banks (getPsumBankAlignment 2)."""
    m = _two_bank_matmul()
    out, stats = apply("address_rotation_psum", m)
    assert stats["rotations"] > 0
    fn = out.functions[0]
    mms = [fn.inst(i).outs[0].memloc for i in range(fn.n_insts) if fn.inst(i).opname == "Matmult"]
    per_tile = [mms[k:k + 6] for k in range(0, len(mms), 6)]        # 3 K tiles x 2 halves per M tile
    assert all(len({x.m for x in g}) == 1 for g in per_tile)        # one tile's matmuls stay on one location
    starts = [g[0].bank for g in per_tile]
    assert all(s % 2 == 0 for s in starts) and len(set(starts[:2])) == 2   # successive tiles: other banks
    evicts = [fn.inst(i).ins[0].memloc for i in range(fn.n_insts) if fn.inst(i).opname == "TensorCopy"]
    assert [e.m for e in evicts] == [g[0].m for g in per_tile]      # each eviction reads its own tile


def _dram_scratch_static(tiles: int = 3):
    """The scratch kernel with a static loop: unrolled, every access is in the one block left."""
    b = Builder("main", attrs=(FnAttr.ROTATE_DRAM,))
    x = b.dram("x", (128 * tiles, 64), kind="ExternalInput")
    y = b.dram("y", (128 * tiles, 64), kind="ExternalOutput")
    scratch = b.dram("scratch", (128, 64), addr=0)
    t = b.sbuf("t", (128, 64), addr=0)
    with b.loop("i", 0, tiles) as i:
        b.dma(t.ap(), x.tile(128 * i, 128, 0, 64))
        b.dma(scratch.ap(), t.ap())
        b.dma(t.ap(), scratch.ap())
        b.dma(y.tile(128 * i, 128, 0, 64), t.ap())
    return b.module()


def _through_default_pipeline(m: Module) -> dict[str, dict]:
    from tusk.workflows.pipeline import DEFAULT_ORDER

    stats = {}
    cur = m
    for name in DEFAULT_ORDER:
        cur, st = stages.make_pass(name).run(cur)
        verify(cur)
        stats.setdefault(name, st)
    inp = random_inputs(m, 0)
    if "n" in inp:
        inp["n"] = np.array([[2]], dtype=np.int32)
    assert same_outputs(run(m, inp), run(cur, inp))
    return stats


def test_the_default_pipeline_rotates_dram_exactly_where_the_seed_allows_it():
    """dram_rotation takes internal DRAM buffers that are not isSingleBBAccessed: after unroll that needs
    a block other than the function's one, i.e. a loop the pipeline keeps (docs/architecture.md)."""
    kept = _through_default_pipeline(_dram_scratch())
    assert kept["address_rotation_dram"]["rotations"] == 1    # the dynamic loop stays a loop: two blocks
    unrolled_away = _through_default_pipeline(_dram_scratch_static())
    assert unrolled_away["address_rotation_dram"]["rotations"] == 0
    assert unrolled_away["address_rotation_dram"]["functions"] == 1   # it ran: nothing qualifies


def _live_in_neighbour():
    """``t`` holds what was in SBUF before the kernel (read before its first write, by the store to z),
    at the bytes where rotation would put ``u``'s second slot; ``u``'s two tiles come first."""
    b = Builder("main", attrs=(FnAttr.ROTATE_PSUM_AND_SB,))
    x = b.dram("x", (256, 128), kind="ExternalInput")
    y = b.dram("y", (256, 128), kind="ExternalOutput")
    z = b.dram("z", (128, 128), kind="ExternalOutput")
    u = b.sbuf("u", (128, 128), addr=0)
    t = b.sbuf("t", (128, 128), addr=57344)
    for i in range(2):
        b.dma(u.ap(), x.tile(128 * i, 128, 0, 128))
        b.activation(u.ap(), u.ap(), "Exp")
        b.dma(y.tile(128 * i, 128, 0, 128), u.ap())
    b.dma(z.ap(), t.ap())                       # reads t's live-in value
    b.dma(t.ap(), x.tile(0, 128, 0, 128))       # t's first write
    b.dma(y.tile(0, 128, 0, 128), t.ap())
    return b.module()


def test_a_buffer_read_before_its_first_write_holds_its_bytes_from_the_start():
    m = _live_in_neighbour()
    out, stats = apply("address_rotation_sb", m)
    fn = out.functions[0]
    assert stats["rotations"] >= 1                                    # u does get a second slot ...
    slot = fn.memloc_by_name("u_rot1")
    a = int(fn.memlocs.get("addr", slot))
    assert not (a < 57344 + 512 and 57344 < a + 512)                  # ... but not over t's live-in bytes


def _per_tile_locations(tiles: int = 4, overlap: bool = False):
    """Every tile in a memory location of its own, all at byte 0 (as the NKI front end traces
    tensor_add_spmd); ``overlap``: the last tile's location is read once more at the end, so it is live while
    the others are."""
    b = Builder("main", attrs=(FnAttr.ROTATE_PSUM_AND_SB,))
    x = b.dram("x", (128 * tiles, 128), kind="ExternalInput")
    y = b.dram("y", (128 * (tiles + 1), 128), kind="ExternalOutput")
    ts = [b.sbuf(f"t{i}", (128, 128), addr=0) for i in range(tiles)]
    if overlap:
        b.dma(ts[-1].ap(), x.tile(0, 128, 0, 128))
    for i, t in enumerate(ts):
        b.dma(t.ap(), x.tile(128 * i, 128, 0, 128))
        b.activation(t.ap(), t.ap(), "Exp")
        b.dma(y.tile(128 * i, 128, 0, 128), t.ap())
    if overlap:
        b.dma(y.tile(128 * tiles, 128, 0, 128), ts[-1].ap())
    return b.module()


def test_aliases_that_live_one_after_the_other_rotate_as_one_buffer():
    out, stats = apply("address_rotation_sb", _per_tile_locations())
    fn = out.functions[0]
    written = [fn.inst(i).outs[0].memloc for i in range(fn.n_insts) if fn.inst(i).opname == "DMACopy"
               and fn.inst(i).outs[0].memloc.mtype == Mem.SB]
    assert stats["rotations"] >= 1
    assert len({w.addr for w in written[:2]}) == 2            # tiles 0 and 1 no longer share bytes
    # live at the same time: real aliases, pinned, nothing moves and nothing is repointed
    m = _per_tile_locations(overlap=True)
    out, stats = apply("address_rotation_sb", m)
    assert stats["rotations"] == 0 and out == m


def test_split_and_merge_rotate_per_tile_aliases_as_the_serial_run_does():
    b = Builder("main", attrs=(FnAttr.ROTATE_PSUM_AND_SB,))
    x = b.dram("x", (32 * 4, 4 * 64), kind="ExternalInput")
    y = b.dram("y", (32 * 4, 4 * 64), kind="ExternalOutput")
    for i in range(4):
        for k in range(4):  # band k, tile i: a memory location of its own, at the band's one place
            t = b.sbuf(f"t{k}_{i}", (32, 64), addr=0, base=32 * k)
            b.dma(t.ap(), x.tile(32 * i, 32, 64 * k, 64))
            b.activation(t.ap(), t.ap(), "Exp")
            b.dma(y.tile(32 * i, 32, 64 * k, 64), t.ap())
    m = b.module()
    p = stages.make_pass("address_rotation_sb")
    serial, stats = p.run(m)
    parts = p.split(m)
    assert parts is not None and len(parts) == 4 and stats["rotations"] > 0
    results = [p.run(part) for part in parts]
    merged, _ = p.merge(m, [r[0] for r in results], [r[1] for r in results])
    assert content_hash(merged) == content_hash(serial)
    assert same_meaning(m, merged)


def test_merge_leaves_a_function_without_work_as_it_came_like_the_serial_run():
    """Band-split work in one function; in another, per-tile aliases that a partial overlap pins (nothing to
    rotate): run restores that function untouched, and so must merge."""
    main = _banded(4).functions[0]
    b = Builder("other", attrs=(FnAttr.ROTATE_PSUM_AND_SB,))
    x = b.dram("x", (256, 64), kind="ExternalInput")
    y = b.dram("y", (256, 64), kind="ExternalOutput")
    t0, t1 = b.sbuf("t0", (128, 64), addr=0), b.sbuf("t1", (128, 64), addr=0)
    u = b.sbuf("u", (128, 64), addr=128)           # overlaps the second half of t's bytes
    for i, t in enumerate((t0, t1)):
        b.dma(t.ap(), x.tile(128 * i, 128, 0, 64))
        b.dma(y.tile(128 * i, 128, 0, 64), t.ap())
    b.dma(u.ap(), x.tile(0, 128, 0, 64))
    b.dma(y.tile(0, 128, 0, 64), u.ap())
    m = Module([main, b.function()])
    p = stages.make_pass("address_rotation_sb")
    serial, _ = p.run(m)
    parts = p.split(m)
    assert parts is not None
    results = [p.run(part) for part in parts]
    merged, _ = p.merge(m, [r[0] for r in results], [r[1] for r in results])
    assert content_hash(merged) == content_hash(serial)
    assert content_hash(Module([merged.functions[1]])) == content_hash(Module([m.functions[1]]))


def _alias_filled_in_halves() -> Module:
    """``r``, a recurring buffer, rotates; apart from it ``a0``, then ``u`` -- 64 partitions over ``a0``'s
    bytes -- and then ``a1``, ``a0``'s box exactly, first written under a predicate: no kill, so
    merged into ``a0`` its accesses would join ``a0``'s instance and stretch it over ``u``
    (flash_attention_fwd's ``s`` / ``p_t`` / ``q_t`` after scheduling, reduced)."""
    b = Builder("main", attrs=(FnAttr.ROTATE_PSUM_AND_SB,))
    x = b.dram("x", (512, 64), kind="ExternalInput")
    y = b.dram("y", (512, 64), kind="ExternalOutput")
    a0, a1 = b.sbuf("a0", (128, 64), addr=0), b.sbuf("a1", (128, 64), addr=0)
    u, r = b.sbuf("u", (64, 64), addr=0), b.sbuf("r", (128, 64), addr=4096)
    for i in range(2):
        b.dma(r.ap(), x.tile(128 * i, 128, 0, 64))
        b.activation(r.ap(), r.ap(), "Exp")
        b.dma(y.tile(128 * i, 128, 0, 64), r.ap())
    b.dma(a0.ap(), x.tile(0, 128, 0, 64))
    b.dma(y.tile(0, 128, 0, 64), a0.ap())
    b.dma(u.ap(), x.tile(256, 64, 0, 64))
    b.dma(y.tile(256, 64, 0, 64), u.ap())
    w = b.sbuf("w", (128, 64), addr=8192)
    b.dma(w.ap(), x.tile(384, 128, 0, 64))
    b.activation(a1.ap(), w.ap(), "Exp", pred=[AffinePredicate(1, "ge")])
    b.dma(y.tile(384, 128, 0, 64), a1.ap())
    return b.module()


def test_an_alias_whose_first_write_is_no_kill_is_not_merged():
    m = _alias_filled_in_halves()
    fn = m.functions[0].copy()
    assert not live_overlap_problems(fn)
    unalias(fn, Mem.SB)
    assert not live_overlap_problems(fn)        # the merge must not make a live range the verifier refuses
    out, stats = apply("address_rotation_sb", m)
    assert stats["rotations"] >= 1 and stats["reverted"] == 0


def _flash_attention_before_the_last_rotation() -> Module:
    from tests.test_rotation_gain import traced
    from tusk.workflows.pipeline import DEFAULT_ORDER

    m = traced("flash_attention_fwd")
    for name in DEFAULT_ORDER[:-1]:
        m, _ = stages.make_pass(name).run(m)
    assert DEFAULT_ORDER[-1] == "address_rotation_sb"
    return m


def test_flash_attention_is_rotated_after_scheduling_without_overlapping_live_slots():
    """The traced corpus kernel's post-schedule SB rotation used to merge ``p_t`` and ``s.3`` into ``s``
    (``s.3``'s first write is no kill), one live range over ``q_t.2``'s bytes: the guard reverted it."""
    m = _flash_attention_before_the_last_rotation()
    p = stages.make_pass("address_rotation_sb")
    jobs, why = p.jobs(m)
    assert why is None and jobs
    rotated = p._unaliased(m, jobs)
    assert p._rotate(rotated, jobs)[jobs[0].fn] > 0
    for k in {j.fn for j in jobs}:              # the ring assignment itself, before any guard
        assert not live_overlap_problems(rotated.functions[k])
    out, stats = p.run(m)
    verify(out)
    assert stats["rotations"] > 0 and stats["reverted"] == 0
    assert same_meaning(m, out) and same_meaning(m, rotated)
