"""The timing model: hand-computed toys, and one test per behaviour of docs/timing.md."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tests.programs import tiled_exp_module
from tusk.ir.builder import Builder
from tusk.ir.errors import TuskError
from tusk.ir.module import Module
from tusk.sim.timing import DEFAULT_COSTS, CostTable, descriptor_count, instruction_costs, simulate
from tusk.stages.deps import build_fdeps

# No latencies or overheads, one queue with one transfer in flight, unlimited bandwidth:
# a DMA costs 10 + bytes / (engines it spreads over); Activation 5 + elements per partition.
TOY = CostTable(dma_fixed=10, dma_engine_bytes_per_cycle=1, dram_bytes_per_cycle=1e9, dma_descriptor_cycles=0,
                dma_trigger=0, sync_latency=0, dma_queues_per_engine=1, dma_inflight=1, act_fixed=5,
                act_elems_per_cycle=1, pe_fixed=3, pe_columns_per_cycle=1, dve_fixed=2, dve_elems_per_cycle=2)


def _toy():
    """Two 2x4 float32 tiles: load, exp, store (double-buffered)."""
    b = Builder()
    x = b.dram("x", (4, 4), kind="ExternalInput")
    y = b.dram("y", (4, 4), kind="ExternalOutput")
    t = [b.sbuf(f"t{k}", (2, 4), addr=16 * k) for k in range(2)]
    u = [b.sbuf(f"u{k}", (2, 4), addr=64 + 16 * k) for k in range(2)]
    b.dma(t[0].ap(), x.tile(0, 2, 0, 4))      # 0
    b.activation(u[0].ap(), t[0].ap(), "Exp")  # 1
    b.dma(t[1].ap(), x.tile(2, 2, 0, 4))      # 2
    b.activation(u[1].ap(), t[1].ap(), "Exp")  # 3
    b.dma(y.tile(0, 2, 0, 4), u[0].ap())      # 4
    b.dma(y.tile(2, 2, 0, 4), u[1].ap())      # 5
    return b.function()


def test_two_engine_toy_by_hand():
    # A tile moves 32 bytes in 2 descriptors (one per partition) over 2 DMA engines: 10 + 32 / 2 = 26.
    #   0 load t0   [0, 26)
    #   1 exp u0    [26, 35)    waits for 0
    #   2 load t1   [26, 52)    one transfer in flight: waits for 0 to finish
    #   3 exp u1    [52, 61)
    #   4 store u0  [52, 78)    the queue is in order
    #   5 store u1  [78, 104)
    tl = simulate(build_fdeps(_toy()), TOY)
    assert tl.end.tolist() == [26, 35, 52, 61, 78, 104]
    assert tl.makespan == 104 and tl.busy["Activation"] == 18 and tl.busy["SP.q0"] == 104
    # two transfers in flight per queue: the second load overlaps the first, exp u1 waits for the ACT
    # engine (35), store u0 starts with its exp (35), store u1 with its (44)
    tl2 = simulate(build_fdeps(_toy()), dataclasses.replace(TOY, dma_inflight=2))
    assert tl2.end.tolist() == [26, 35, 26, 44, 61, 70] and tl2.makespan == 70


def test_dependencies_and_engine_hand_offs_delay_the_start():
    fn = _toy()
    free = simulate(fn, TOY)  # no edges: only in-order issue per queue
    assert free.end[1] == 9
    dep = simulate(build_fdeps(fn), dataclasses.replace(TOY, sync_latency=7))
    assert dep.start[1] == 26 + 7  # the exp waits for its load, plus the semaphore hand-off


def test_dmas_are_triggered_by_an_engine_and_use_its_queues():
    b = Builder()
    x = b.dram("x", (128, 64), kind="ExternalInput")
    t = [b.sbuf(f"t{k}", (128, 64), addr=256 * k) for k in range(3)]
    b.dma(t[0].ap(), x.ap())
    b.dma(t[1].ap(), x.ap(), queue="named")
    b.emit("DMACopy", "Activation", [x.ap()], [t[2].ap()])  # a DMA placed on the Activation engine
    costs = dataclasses.replace(DEFAULT_COSTS, dma_trigger=50)
    tl = simulate(b.function(), costs)
    cost, lane, lanes = instruction_costs(b.function(), costs)
    assert [lanes[k] for k in lane] == ["SP", "SP", "Activation"]
    assert tl.busy["SP"] == 100 and tl.busy["Activation"] == 50  # the triggers
    assert {"named", "SP.q0", "Activation.q0"} <= set(tl.busy)


def test_double_buffering_helps_with_one_queue():
    from tests.programs import eight_tiles

    one_queue = dataclasses.replace(DEFAULT_COSTS, dma_queues_per_engine=1)
    single = simulate(eight_tiles(1), one_queue).makespan
    double = simulate(eight_tiles(2), one_queue).makespan
    assert double < 0.8 * single


def test_bandwidth_caps_the_gain_from_more_queues():
    def loads(n: int = 32):
        b = Builder()
        x = b.dram("x", (128 * n, 1024), kind="ExternalInput")
        for i in range(n):
            b.dma(b.sbuf(f"t{i}", (128, 1024), addr=4096 * (i % 48)).ap(), x.tile(i * 128, 128, 0, 1024))
        return b.function()

    fn = loads()
    spans = {q: simulate(fn, dataclasses.replace(DEFAULT_COSTS, dma_queues_per_engine=q, dma_inflight=1)).makespan
             for q in (1, 2, 4, 8, 16)}
    tl = simulate(fn, dataclasses.replace(DEFAULT_COSTS, dma_queues_per_engine=16, dma_inflight=1))
    dram = tl.bounds["DRAM"]
    engines = tl.bounds["DMA engines"]
    assert spans[2] < 0.75 * spans[1]                 # a second queue overlaps the fixed latencies
    assert spans[16] >= max(dram, engines) * 0.98      # but nothing beats the shared bandwidth
    assert spans[16] > 0.9 * spans[8]                  # so more queues stop paying
    assert tl.lower_bound == max(tl.bounds.values()) == dram and tl.binding == "DRAM"
    # the bucketed engine term is no weaker than the fluid one here (the first data moves after 2 buckets)
    from tusk.sim.timing import plan
    assert engines >= plan(fn).work.sum() / DEFAULT_COSTS.dma_engines
    assert spans[16] < 1.01 * dram                     # and the DRAM bound is what the machine reaches
    # the old number, from this run's busy times, stays available under its own name
    assert tl.busy_bound == pytest.approx(max([*tl.busy.values(), plan(fn).work.sum() / 16]))


def test_strided_small_element_dmas_cost_more_than_contiguous_ones():
    assert descriptor_count(((512, 128), (1, 512)), True, 512) == 128       # one run per partition
    assert descriptor_count(((512, 128), (1, 512)), False, 0) == 1          # one contiguous DRAM range
    assert descriptor_count(((1, 128), (128, 512)), False, 0) == 128 * 512  # transposing: 4-byte runs
    b = Builder()
    x = b.dram("x", (512, 128), kind="ExternalInput")
    t = b.sbuf("t", (128, 512), addr=0)
    b.dma(t.ap(), x.ap([[1, 128], [128, 512]]))   # element-strided (a transpose through DMA)
    b.dma(t.ap(), x.ap([[512, 128], [1, 512]]))   # the same bytes, row-contiguous
    cost, _, _ = instruction_costs(b.function())
    assert cost[0] > 4 * cost[1]


def test_descriptor_fan_out_follows_the_split_factor():
    from tusk.sim.timing import plan
    b = Builder()
    x = b.dram("x", (128, 64), kind="ExternalInput")
    for parts in (128, 127, 96):
        b.dma(b.sbuf(f"t{parts}", (parts, 64), addr=1024 * (parts % 7)).ap(), x.tile(0, parts, 0, 64))
    p = plan(b.function())
    assert p.rate.tolist() == [16, 1, 16]  # 127 descriptors have no divisor <= 16 but 1


def test_costs_come_from_shapes():
    b = Builder()
    w = b.sbuf("w", (8, 4), addr=0)
    v = b.sbuf("v", (8, 6), addr=64)
    p = b.psum("p", (4, 6), addr=0)
    o = b.sbuf("o", (4, 6), addr=256)
    b.matmul(p.ap(), w.ap(), v.ap())                  # PE: 3 + N=6
    b.tensor_scalar(o.ap(), p.ap(), "mult", 2.0)      # DVE: 2 + 6/2
    b.register_move(b.register("r"), 1)               # register op
    cost, lane, lanes = instruction_costs(b.function(), TOY)
    assert cost.tolist() == [9, 5, TOY.register_op]
    assert [lanes[k] for k in lane] == ["PE", "DVE", "SP"]


def test_unassigned_instructions_cost_nothing():
    b = Builder()
    t = b.sbuf("t", (2, 4), addr=0)
    b.memset(t.ap(), 0.0, engine="DVE")
    b.emit("NoOp", "Unassigned")
    tl = simulate(b.function(), TOY)
    assert tl.end[1] == tl.start[1] and tl.lane[1] == -1


def test_loops_are_refused():
    with pytest.raises(TuskError, match="not straight-line"):
        simulate(tiled_exp_module())


def test_a_module_runs_its_entry_function_and_kernel_calls():
    tl = simulate(Module([build_fdeps(_toy())]), TOY)
    assert tl.makespan == 104 and len(tl.start) == 6 and isinstance(tl.start, np.ndarray)
    kernel = build_fdeps(_toy())
    kernel.name = "k"
    b = Builder("main")
    b.emit("NKIKernel", "Unassigned", attrs={"func": "k", "func_args": {}, "func_outs": {}})
    b.emit("NKIKernel", "Unassigned", attrs={"func": "k", "func_args": {}, "func_outs": {}})
    m = Module([b.function(), kernel])
    assert simulate(m, TOY).makespan == 2 * 104
    with pytest.raises(TuskError, match="simulate the module"):
        simulate(b.function(), TOY)


# --------------------------------------------------------------------------- the lower bound (sim/bound.py)
# Each test below has one legal order that reaches the bound, so the bound must equal the makespan: a
# bound that drops the term the program is limited by (the chain, one engine's work, a queue's slots,
# the DRAM or DMA-engine capacity) or the head and tail around it comes out lower and fails the test.

def test_a_chain_across_engines_is_bound_by_its_dependences():
    b = Builder()
    t = b.sbuf("t", (2, 4), addr=0)
    b.memset(t.ap(), 1.0, engine="DVE")
    for k in range(6):  # in place, alternating engines: every step waits for the last plus the hand-off
        if k % 2:
            b.tensor_scalar(t.ap(), t.ap(), "mult", 2.0)
        else:
            b.activation(t.ap(), t.ap(), "Exp")
    costs = dataclasses.replace(TOY, sync_latency=7)
    tl = simulate(build_fdeps(b.function()), costs)
    assert tl.makespan == 4 + 3 * 9 + 3 * 4 + 6 * 7   # memset 2 + 4/2, exp 5 + 4, mult 2 + 4/2, 6 hand-offs
    assert tl.lower_bound == tl.makespan and tl.binding == "dependence chain"
    assert tl.bounds["engine Activation"] < tl.makespan  # no engine's work explains it


@pytest.mark.parametrize("engine", ["PE", "Activation", "Pool", "DVE", "SP"])
def test_independent_work_on_one_engine_is_bound_by_that_engine(engine):
    b = Builder()
    w = b.sbuf("w", (8, 4), addr=0)
    for k in range(10):
        if engine == "PE":
            b.matmul(b.psum(f"p{k}", (4, 6), addr=64 * k).ap(), w.ap(), w.ap())
        else:
            b.memset(b.sbuf(f"t{k}", (2, 4), addr=64 + 64 * k).ap(), float(k), engine=engine)
    tl = simulate(build_fdeps(b.function()), TOY)
    assert tl.makespan == pytest.approx(tl.busy[engine]) and tl.busy[engine] > 0
    assert tl.lower_bound == pytest.approx(tl.makespan) and tl.binding == f"engine {engine}"


def test_an_engine_term_counts_the_chain_before_and_after_it():
    b = Builder()
    x = b.dram("x", (2, 4), kind="ExternalInput")
    y = b.dram("y", (2, 4), kind="ExternalOutput")
    t = b.sbuf("t", (2, 4), addr=0)
    b.dma(t.ap(), x.ap())                              # head: the load every exp waits for
    us = [b.sbuf(f"u{k}", (2, 4), addr=64 + 64 * k) for k in range(8)]
    for u in us:
        b.activation(u.ap(), t.ap(), "Exp")
    b.tensor_tensor(t.ap(), us[-1].ap(), us[-2].ap())  # tail: after the last exp, an add and a store
    b.dma(y.ap(), t.ap())
    tl = simulate(build_fdeps(b.function()), TOY)
    # load 10 + 32/2, 8 exps of 9, add 2 + 4/2, store 26
    assert tl.makespan == 26 + 8 * 9 + 4 + 26
    assert tl.bounds["engine Activation"] == tl.makespan == tl.lower_bound


@pytest.mark.parametrize("named", [True, False])
def test_transfers_are_bound_by_the_in_flight_slots_they_may_use(named):
    b = Builder()
    x = b.dram("x", (2, 4), kind="ExternalInput")
    for k in range(8):
        b.dma(b.sbuf(f"t{k}", (2, 4), addr=64 * k).ap(), x.ap(), queue="named" if named else None)
    costs = dataclasses.replace(TOY, dma_queues_per_engine=2, dma_inflight=2)
    tl = simulate(b.function(), costs)  # no edges (build_fdeps would order a named queue's transfers)
    slots = 2 if named else 4  # a named queue has its own slots; otherwise both SP queues may take it
    assert tl.makespan == 8 * 26 / slots
    term = "DMA queue named" if named else "DMA queues of SP"
    assert tl.bounds[term] == tl.lower_bound == tl.makespan


@pytest.mark.parametrize("limit", ["DRAM", "DMA engines"])
def test_transfers_are_bound_by_the_shared_bandwidth(limit):
    b = Builder()
    x = b.dram("x", (128 * 16, 512), kind="ExternalInput")
    for k in range(16):
        b.dma(b.sbuf(f"t{k}", (128, 512), addr=2048 * (k % 8)).ap(), x.tile(128 * k, 128, 0, 512), queue=f"q{k}")
    tight = {"DRAM": {"dram_bytes_per_cycle": 16.0}, "DMA engines": {"dma_engines": 1}}[limit]
    costs = dataclasses.replace(DEFAULT_COSTS, **tight)
    tl = simulate(b.function(), costs)  # no edges: sixteen queues, nothing but bandwidth in the way
    assert tl.binding == limit
    assert tl.lower_bound <= tl.makespan < 1.02 * tl.lower_bound


def test_the_bound_does_not_depend_on_the_order():
    """Two legal orders of one program: tile by tile (each store's trigger waits for its exp and holds up
    the next load's on SP) or all loads first.  Their makespans differ, their bound is the same, and the
    faster order is not below it."""
    def kernel(tile_by_tile: bool):
        b = Builder()
        x = b.dram("x", (128 * 4, 512), kind="ExternalInput")
        y = b.dram("y", (128 * 4, 512), kind="ExternalOutput")
        ts = [b.sbuf(f"t{k}", (128, 512), addr=2048 * k) for k in range(4)]
        steps = [[lambda k=k: b.dma(ts[k].ap(), x.tile(128 * k, 128, 0, 512)),
                  lambda k=k: b.activation(ts[k].ap(), ts[k].ap(), "Exp"),
                  lambda k=k: b.dma(y.tile(128 * k, 128, 0, 512), ts[k].ap())] for k in range(4)]
        order = [s for tile in steps for s in tile] if tile_by_tile else [tile[j] for j in range(3) for tile in steps]
        for step in order:
            step()
        return build_fdeps(b.function())

    a, c = simulate(kernel(True)), simulate(kernel(False))
    assert a.makespan > 1.2 * c.makespan
    assert a.lower_bound == pytest.approx(c.lower_bound) and a.bounds == pytest.approx(c.bounds)
    assert c.makespan >= c.lower_bound


def test_a_transfer_too_long_for_the_calendar_is_refused_at_once():
    """A changed KLR file's DMA of 4 TB walked the bandwidth calendar bucket by bucket for minutes (a build that
    seemed to hang in schedule); the model refuses it at once, and the schedule keeps its first order."""
    import time

    from tusk.stages.schedule import Schedule

    b = Builder()
    x = b.dram("x", (1 << 20, 1 << 20), "float32", kind="ExternalInput")
    y = b.dram("y", (1 << 20, 1 << 20), "float32", kind="ExternalOutput")
    b.dma(y.ap(), x.ap())
    module = b.module()
    t0 = time.perf_counter()
    with pytest.raises(TuskError, match=r"moves 4,398,046,511,104 bytes of DRAM .* longer than the timing model"):
        simulate(module)
    out, _ = Schedule().run(module)  # the model cannot time it: the first priority's order, no comparison
    assert out.n_insts() == module.n_insts() and time.perf_counter() - t0 < 30
