"""Random legal orders of final programs: none beats the lower bound, all compute what program order does.

A legal order is a topological order of the dependence graph build_fdeps derives (tests/legal_orders.py).
Two properties per program:

* the timing model's ``lower_bound`` is a property of the program: every order has the same one, and no
  order's makespan is below it (docs/timing.md, "Lower bound");
* the edges are sufficient: the interpreter computes the same outputs in every such order as in program
  order (a missing edge lets some order read or clobber a value too early).

Programs: corpus kernels after the default pipeline, the kernels of tests/programs.py after it, random
kernels over recurring buffers after it, and random kernels that exercise the DMA trigger engines,
named queues and the in-flight limit directly.
"""

from __future__ import annotations

import dataclasses
import functools
import tempfile
from pathlib import Path

import numpy as np
import pytest

from tests.legal_orders import random_legal_order, straight_line, with_edges
from tests.programs import eight_tiles, every_family_module, recurring_buffers_module, tiled_exp_module
from tusk import stages
from tusk.examples import klr_kernels
from tusk.examples.generate import KERNELS
from tusk.ir.builder import Builder
from tusk.ir.enums import Op
from tusk.ir.module import Module
from tusk.sim.interp import random_inputs, run, same_outputs
from tusk.sim.timing import DEFAULT_COSTS, CostTable, simulate
from tusk.stages.host import host_module_for
from tusk.workflows.pipeline import DEFAULT_ORDER

# small enough for CI: the pipeline, 5 orders timed and interpreted, in about a second each
SMALL_CORPUS = ["banded_exp.json", "block_tensor.json", "tiled_exp.json", "predicated_accumulate.json", "rmsnorm.klr"]
ALL_CORPUS = sorted(p.name for p in KERNELS.iterdir() if p.suffix in (".json", ".klr") and p.stem != "dynamic_loop")
# no lower bound headroom assumed: the model is deterministic, only float rounding separates equal numbers
EPS = 1e-9

# cost tables that stress different terms: default; small latencies with one slot and fine buckets (the
# bandwidth calendar's granularity matters); tight DRAM and few DMA engines (bandwidth-bound)
COSTS = {
    "default": DEFAULT_COSTS,
    "one slot, fine buckets": dataclasses.replace(DEFAULT_COSTS, dma_fixed=10, dma_trigger=3, sync_latency=5,
                                                  dma_inflight=1, dma_queues_per_engine=1, bucket=16),
    "bandwidth-bound": dataclasses.replace(DEFAULT_COSTS, dram_bytes_per_cycle=8, dma_engines=2, dma_fixed=50),
}


def pipeline(module: Module) -> Module:
    for step in DEFAULT_ORDER:
        module, _ = stages.make_pass(step).run(module)
    return module


@functools.cache
def final_corpus(name: str) -> Module:
    out = tempfile.mkdtemp(prefix="tusk-legal-orders-")
    return pipeline(host_module_for(str(KERNELS / name), 0, str(Path(out) / name)))


def corpus_inputs(name: str, module: Module) -> dict:
    stem = Path(name).stem
    if name.endswith(".klr") and stem in klr_kernels.KERNELS:
        return klr_kernels.inputs_for(stem, seed=3)
    return random_inputs(module, 3)


def timed_units(module: Module) -> list[Module]:
    """The module (its entry runs its kernel calls) and each straight-line function without calls on its own."""
    units = [module]
    for fn in module.functions:
        if straight_line(fn) and not (fn.insts["opcode"] == Op.NKIKernel).any() and len(module.functions) > 1:
            units.append(dataclasses.replace(module, functions=[fn]))
    return units


def check_legal_orders(module: Module, orders: int, seed: int, inputs: dict | None = None,
                       costs: tuple[CostTable, ...] = (DEFAULT_COSTS,)) -> None:
    """The two properties on ``orders`` random legal orders of ``module`` (edges rebuilt first)."""
    m = with_edges(module)
    if inputs is None:
        inputs = random_inputs(m, seed)
    want = run(m, inputs)
    rng = np.random.default_rng(seed)
    shuffled = [random_legal_order(m, rng) for _ in range(orders)]
    for order in shuffled:
        assert same_outputs(want, run(order, inputs)), "a legal order computes something else"
    for table in costs:
        for k, unit in enumerate(timed_units(m)):
            base = simulate(unit, table)
            assert base.makespan >= base.lower_bound * (1 - EPS)
            for order in shuffled:
                tl = simulate(timed_units(order)[k], table)
                assert tl.lower_bound == pytest.approx(base.lower_bound, rel=1e-12), "the bound depends on the order"
                assert tl.makespan >= base.lower_bound * (1 - EPS), (
                    f"an order ran in {tl.makespan:,.0f} cycles, below the bound {base.lower_bound:,.0f} "
                    f"({base.binding})")


# --------------------------------------------------------------------------- random kernels

STEPS = ("load", "exp", "add", "copy", "half", "mm", "evict", "store")


def random_steps(rng: np.random.Generator, n: int, tiles: int = 4) -> list[tuple]:
    """Steps for tests/programs.recurring_buffers_module; every buffer is loaded first."""
    bufs = ("a", "b", "c")
    steps: list[tuple] = [("load", name, k) for k, name in enumerate(bufs)]
    for _ in range(n):
        op = STEPS[int(rng.integers(len(STEPS)))]
        name, other = bufs[int(rng.integers(3))], bufs[int(rng.integers(3))]
        if op in ("load", "store"):
            steps.append((op, name, int(rng.integers(tiles))))
        elif op in ("exp", "evict"):
            steps.append((op, name))
        elif op in ("add", "copy"):
            steps.append((op, name, other))
        elif op == "half":
            steps.append((op, name, float(rng.integers(-3, 4))))
        else:
            steps.append((op, bool(rng.integers(2)) if steps[-1][0] == "mm" else False))
    return steps


def dma_mix(seed: int, n: int = 30) -> Module:
    """A straight-line kernel whose DMAs are triggered by SP, Activation and Pool, some on named queues,
    mixed with compute on every engine: the terms of the bound for queues and engines all play."""
    rng = np.random.default_rng(seed)
    b = Builder("main")
    x = b.dram("x", (128 * 4, 64), kind="ExternalInput")
    y = b.dram("y", (128 * 4, 64), kind="ExternalOutput")
    ts = [b.sbuf(f"t{k}", (128, 64), addr=256 * k) for k in range(4)]
    p = b.psum("p", (16, 64), addr=0)
    for k, t in enumerate(ts):
        b.dma(t.ap(), x.tile(128 * k, 128, 0, 64))
    for _ in range(n):
        t, u = ts[int(rng.integers(4))], ts[int(rng.integers(4))]
        r = int(rng.integers(4))
        what = int(rng.integers(7))
        if what <= 1:  # a load or a store, triggered by one of three engines, sometimes on a named queue
            queue = [None, None, "qa", "qb"][int(rng.integers(4))]
            trigger = ["DMA", "SP", "Activation", "Pool"][int(rng.integers(4))]
            src, dst = (x.tile(128 * r, 128, 0, 64), t.ap()) if what == 0 else (t.ap(), y.tile(128 * r, 128, 0, 64))
            b.emit("DMACopy", trigger, [src], [dst], attrs={"queue": queue} if queue else None)
        elif what == 2:
            b.activation(t.ap(), u.ap(), "Identity", scale=0.5)
        elif what == 3:
            b.tensor_tensor(t.ap(), t.ap(), u.ap(), "add", engine=["DVE", "Pool"][int(rng.integers(2))])
        elif what == 4:
            b.matmul(p.ap(), t.tile(0, 32, 0, 16), u.tile(0, 32, 0, 64))  # small: the interpreter is exact
        elif what == 5:
            b.copy(t.tile(0, 16, 0, 64), p.ap(), engine="Activation")
        else:
            b.tensor_scalar(t.ap(), u.ap(), "mult", 0.25, engine="SP")
    for k, t in enumerate(ts):
        b.dma(y.tile(128 * k, 128, 0, 64), t.ap())
    return b.module()


# --------------------------------------------------------------------------- CI

@pytest.mark.parametrize("name", SMALL_CORPUS)
def test_corpus_kernels_after_the_pipeline(name):
    m = final_corpus(name)
    check_legal_orders(m, orders=5, seed=1, inputs=corpus_inputs(name, m))


@pytest.mark.parametrize("module", [tiled_exp_module(tiles=4), every_family_module(), Module([eight_tiles(2)])],
                         ids=["tiled_exp_module", "every_family_module", "eight_tiles"])
def test_shared_test_programs_after_the_pipeline(module):
    check_legal_orders(pipeline(module), orders=5, seed=2)


@pytest.mark.parametrize("seed", range(6))
def test_random_recurring_buffer_kernels_after_the_pipeline(seed):
    steps = random_steps(np.random.default_rng(seed), 14)
    check_legal_orders(pipeline(recurring_buffers_module(steps)), orders=5, seed=seed)


@pytest.mark.parametrize("seed", range(8))
def test_random_dma_mixes_under_several_cost_tables(seed):
    check_legal_orders(dma_mix(seed), orders=5, seed=seed, costs=tuple(COSTS.values()))


def test_an_order_that_breaks_an_edge_is_caught():
    """The execution check can fail: drop one flow edge of tiled_exp and some order reads a tile too early."""
    m = with_edges(pipeline(tiled_exp_module(tiles=2)))
    fn = m.functions[0]
    loads = np.flatnonzero(fn.insts["opcode"] == Op.DMACopy)[:1]
    src, dst = fn.deps["src"], fn.deps["dst"]
    keep = ~np.isin(src, loads)  # the first load's consumers no longer wait for it
    broken = fn.copy()
    broken.deps = fn.deps.take(np.flatnonzero(keep))
    inputs = random_inputs(m, 0)
    want = run(m, inputs)
    rng = np.random.default_rng(0)
    orders = [random_legal_order(Module([broken]), rng) for _ in range(20)]
    assert not all(same_outputs(want, run(o, inputs)) for o in orders)
    assert len(dst) > keep.sum()


# --------------------------------------------------------------------------- the bigger version

@pytest.mark.slow
@pytest.mark.parametrize("name", ALL_CORPUS)
def test_every_corpus_kernel_many_orders(name):
    m = final_corpus(name)
    check_legal_orders(m, orders=20, seed=5, inputs=corpus_inputs(name, m), costs=tuple(COSTS.values()))


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(40))
def test_many_random_kernels(seed):
    steps = random_steps(np.random.default_rng(1000 + seed), 40)
    check_legal_orders(pipeline(recurring_buffers_module(steps)), orders=10, seed=seed, costs=tuple(COSTS.values()))
    check_legal_orders(dma_mix(1000 + seed, n=80), orders=10, seed=seed, costs=tuple(COSTS.values()))
