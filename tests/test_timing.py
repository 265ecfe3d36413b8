"""The timing model on toys whose schedule is computed by hand."""

from __future__ import annotations

import numpy as np
import pytest

from tests.programs import tiled_exp_module
from tusk.ir.builder import Builder
from tusk.ir.errors import TuskError
from tusk.sim.timing import CostTable, instruction_costs, simulate
from tusk.stages.deps import build_fdeps

# DMA: 10 + bytes / 4; Activation: 5 + elements per partition; PE: 3 + moving columns.
TOY = CostTable(dma_fixed=10, dma_bytes_per_cycle=4, act_fixed=5, act_elems_per_cycle=1, pe_fixed=3,
                pe_columns_per_cycle=1, dve_fixed=2, dve_elems_per_cycle=2)


def _toy():
    """Two tiles through one DMA queue and the Activation engine (double-buffered)."""
    b = Builder()
    x = b.dram("x", (4, 4), kind="ExternalInput")
    y = b.dram("y", (4, 4), kind="ExternalOutput")
    t = [b.sbuf(f"t{k}", (2, 4), addr=16 * k) for k in range(2)]
    u = [b.sbuf(f"u{k}", (2, 4), addr=64 + 16 * k) for k in range(2)]
    b.dma(t[0].ap(), x.tile(0, 2, 0, 4), queue="q0")      # 0
    b.activation(u[0].ap(), t[0].ap(), "Exp")             # 1
    b.dma(t[1].ap(), x.tile(2, 2, 0, 4), queue="q0")      # 2
    b.activation(u[1].ap(), t[1].ap(), "Exp")             # 3
    b.dma(y.tile(0, 2, 0, 4), u[0].ap(), queue="q0")      # 4
    b.dma(y.tile(2, 2, 0, 4), u[1].ap(), queue="q0")      # 5
    return b.function()


def test_two_engine_toy_by_hand():
    # DMA of a 2x4 float32 tile: 10 + 32/4 = 18 cycles; Exp over 4 elements per partition: 5 + 4 = 9.
    #   0 load t0   q0   [0, 18)
    #   1 exp u0    ACT  [18, 27)   waits for 0
    #   2 load t1   q0   [18, 36)   queue busy until 18
    #   3 exp u1    ACT  [36, 45)   waits for 2
    #   4 store u0  q0   [36, 54)   queue busy until 36
    #   5 store u1  q0   [54, 72)
    tl = simulate(build_fdeps(_toy()), TOY)
    assert tl.start.tolist() == [0, 18, 18, 36, 36, 54]
    assert tl.end.tolist() == [18, 27, 36, 45, 54, 72]
    assert tl.makespan == 72
    assert tl.busy["q0"] == 72 and tl.busy["Activation"] == 18
    assert tl.lower_bound == 72 and tl.efficiency == 1.0
    assert [tl.lanes[k] for k in tl.lane] == ["q0", "Activation", "q0", "Activation", "q0", "q0"]


def test_dependencies_delay_the_start():
    fn = _toy()
    free = simulate(fn, TOY)             # no edges: only in-order issue per lane
    assert free.start[1] == 0 and free.makespan == 72
    dep = simulate(build_fdeps(fn), TOY)
    assert dep.start[1] == 18            # the exp waits for its load
    # a second queue removes the DMA bottleneck: the stores no longer wait behind the loads
    fn2 = _toy()
    for i in (4, 5):
        fn2.insts.set("attrs", i, fn2.intern_record({"queue": "q1"}))
    tl = simulate(build_fdeps(fn2), TOY)
    # 4 store u0 on q1 waits for exp u0 (27) -> [27, 45); 5 waits for exp u1 (45) -> [45, 63)
    assert tl.start[4] == 27 and tl.start[5] == 45 and tl.makespan == 63
    assert tl.busy["q0"] == 36 and tl.busy["q1"] == 36 and tl.lower_bound == 36


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


def test_a_module_runs_its_entry_function():
    from tusk.ir.module import Module
    tl = simulate(Module([build_fdeps(_toy())]), TOY)
    assert tl.makespan == 72 and len(tl.start) == 6 and isinstance(tl.start, np.ndarray)
