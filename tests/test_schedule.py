"""schedule: the list scheduler keeps the meaning, respects every edge and finds the software pipeline."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.test_deps import _build, programs
from tusk import stages
from tusk.examples import bir_kernels
from tusk.ir.builder import Builder
from tusk.ir.enums import FnAttr, Op
from tusk.ir.module import Module
from tusk.sim.interp import random_inputs, run, same_outputs
from tusk.sim.timing import makespan, simulate
from tusk.stages.deps import build_fdeps
from tusk.stages.schedule import Schedule, schedule_function, segments
from tusk.stages.unroll import Unroll


def _same(a: Module, b: Module, seed: int = 0) -> bool:
    inp = random_inputs(a, seed)
    return same_outputs(run(a, inp), run(b, inp))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_any_program_keeps_its_meaning_and_edges_run_forward(insts):
    """Random straight-line programs over buffers that overlap on purpose (see test_deps)."""
    fn = _build(insts, io=True)
    m = Module([fn])
    out, _stats = Schedule().run(m)       # no edges given: the pass computes them itself
    d = out.functions[0].deps
    assert (d["src"] < d["dst"]).all()
    assert _same(m, out)


def test_rotated_tiles_are_software_pipelined():
    m, _ = bir_kernels.tiled_exp(tiles=16)
    m.functions[0].attrs.add(FnAttr.ROTATE_PSUM_AND_SB)
    u, _ = Unroll().run(m)
    r, _ = stages.make_pass("address_rotation_sb").run(u)
    r, _ = stages.make_pass("build_fdeps").run(r)
    out, stats = Schedule().run(r)
    fn = out.functions[0]
    names = fn.inst_names()
    # loads run ahead of the compute of earlier tiles (up to the ring's depth of 5)
    assert names.index("load-it1") < names.index("exp-it0") and names.index("load-it3") < names.index("store-it0")
    assert names.index("load-it5") > names.index("store-it0")   # slot 0 is reused only after its store
    # the build graph times a kernel in steps of its own (sim.timing.makespan); the pass reports no makespans
    assert "makespan_after" not in stats
    tl = simulate(out)
    assert tl.makespan < 0.6 * makespan(r)
    assert tl.makespan < 1.2 * tl.lower_bound  # 16 tiles: the pipeline fill and drain are a few percent
    assert FnAttr.KERNEL_SCOPE in fn.attrs and stats["marked"] == 1
    assert _same(u, out)
    assert FnAttr.KERNEL_SCOPE not in Schedule(mark_post_schedule=False).run(r)[0].functions[0].attrs


def test_without_rotation_nothing_can_overlap():
    u, _ = Unroll().run(bir_kernels.tiled_exp(tiles=8)[0])
    u = build_fdeps(u.functions[0])
    _out, moved = schedule_function(u)
    assert moved == 0  # one buffer: every tile waits for the previous one (the edges say so)


def test_control_rows_and_fences_stay_in_place():
    b = Builder()
    x = b.dram("x", (128, 8), kind="ExternalInput")
    t = b.sbuf("t", (128, 8), addr=0)
    u = b.sbuf("u", (128, 8), addr=64)
    n = b.register("n")
    b.memset(t.ap(), 1.0)                       # 0
    b.dma(u.ap(), x.ap())                        # 1
    b.register_move(n, 2)                        # 2
    with b.dynamic_loop("k", 0, n):              # 3 closes the region 0..3
        b.tensor_scalar(t.ap(), t.ap(), "add", 1.0)   # 4
    b.emit("CoreBarrier", "Unassigned")          # 5 a fence
    b.memset(u.ap(), 2.0)                        # 6
    b.memset(t.ap(), 3.0)                        # 7
    fn = b.function()
    assert segments(fn) == [(0, 3), (6, 8)]
    out, _ = schedule_function(fn)
    opc = out.insts["opcode"].tolist()
    assert opc[3] == Op.DynamicForLoop and opc[5] == Op.CoreBarrier
    assert _same(Module([fn]), Module([out]))


def test_the_scheduled_order_is_a_topological_order_of_the_input_edges():
    m, _ = bir_kernels.tiled_matmul(m=512, k=512, n=256)
    m.functions[0].attrs.add(FnAttr.ROTATE_PSUM_AND_SB)
    u, _ = Unroll().run(m)
    for name in ("address_rotation_psum", "address_rotation_sb", "build_fdeps"):
        u, _ = stages.make_pass(name).run(u)
    fn = u.functions[0]
    out, moved = schedule_function(fn)
    assert moved > 0
    pos = {nm: k for k, nm in enumerate(out.inst_names())}
    names = fn.inst_names()
    for s, d in zip(fn.deps["src"].tolist(), fn.deps["dst"].tolist()):
        assert pos[names[s]] < pos[names[d]]
    assert np.array_equal(np.sort(out.insts["opcode"]), np.sort(fn.insts["opcode"]))
    assert _same(Module([fn]), Module([out]))


@settings(max_examples=20, deadline=None)
@given(st.integers(2, 12), st.integers(1, 3))
def test_tile_counts_and_ring_depths(tiles, slots):
    b = Builder()
    x = b.dram("x", (128 * tiles, 64), kind="ExternalInput")
    y = b.dram("y", (128 * tiles, 64), kind="ExternalOutput")
    ts = [b.sbuf(f"t{k}", (128, 64), addr=256 * k) for k in range(slots)]
    for i in range(tiles):
        t = ts[i % slots]
        b.dma(t.ap(), x.tile(i * 128, 128, 0, 64))
        b.activation(t.ap(), t.ap(), "Exp")
        b.dma(y.tile(i * 128, 128, 0, 64), t.ap())
    fn = build_fdeps(b.function())
    out, _ = schedule_function(fn)
    assert simulate(out).makespan <= simulate(fn).makespan * 1.0001
    assert _same(Module([fn]), Module([out]))


def _pairs(src, dst) -> set[tuple[int, int]]:
    return set(zip(np.asarray(src).tolist(), np.asarray(dst).tolist()))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(), st.integers(0, 2**16))
def test_the_scheduled_functions_edges_are_complete(insts, seed):
    """The edges the pass installs must be the whole graph of the new order (Flow, Output and Anti): a
    later pass trusts them (the timing model, the post-schedule rotations), so every pair build_fdeps
    finds in the scheduled order must be there, and any order that keeps them computes the same."""
    from tests.legal_orders import random_topological_order
    from tusk.stages.deps import dependence_edges

    m = Module([_build(insts, io=True)])
    out = Schedule().run(m)[0]
    fn = out.functions[0]
    src, dst, kind = dependence_edges(fn)
    have = _pairs(fn.deps["src"], fn.deps["dst"])
    assert _pairs(src, dst) <= have
    kinds = {(s, d): k for s, d, k in zip(fn.deps["src"].tolist(), fn.deps["dst"].tolist(),
                                          fn.deps["kind"].tolist())}
    assert all(kinds[(s, d)] >= k for s, d, k in zip(src.tolist(), dst.tolist(), kind.tolist()))
    order = random_topological_order(fn.n_insts, fn.deps["src"].astype(np.int64), fn.deps["dst"].astype(np.int64),
                                     np.random.default_rng(seed))
    assert _same(out, Module([fn.take_insts(order)]), seed % 7)
