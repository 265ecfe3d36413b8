"""schedule: a list scheduler over the timing model (Tusk's stand-in for separate_load_and_compute + post_sched).

Each straight-line region of a function (``stages.deps.straight_line_regions``;
the whole function when it has no control flow) is reordered; a loop or
branch row stays last in its region, and barriers, kernel calls and other
fences stay where they are, cutting their region into segments.

Within a segment the scheduler simulates the machine of ``sim/timing.py``
(in-order compute engines, DMA triggers on their engine, transfers on the
engine's queues with ``dma_inflight`` slots each, the semaphore hand-off
between engines) and repeatedly places, among the instructions whose
predecessors are all placed, the one that can start first; ties go to the
longest critical path to the end of the segment (the bottom level, in timing
model cycles), then to the original order.  The output order is the order of
placement, so an engine's instructions issue in the order they can start
and a DMA trigger that has to wait no longer blocks the triggers behind it.

Every edge is respected: the function's own ``deps`` and the graph
``build_fdeps`` computes now (their union is installed, remapped to the new
order), so the pass is safe even on a module whose edges are stale or
missing.  Scheduled functions get attribute 12, the seed's post-schedule
marker that gates ``clear_inst_deps`` and the post-schedule rotations.

The list scheduler is a heuristic: on some programs its order is slower on
the timing model than the order it was given (attention_bwd, 154,735 ->
155,736 cycles), and which priority works best depends on the program
(``PRIORITIES``).  A function of at most ``compare_limit`` rows is therefore
scheduled by each priority, and the two orders and the input order, with the
same edges, are simulated; the fastest is kept (:func:`fastest`), so
scheduling never makes a makespan worse.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from tusk.ir.columns import Table
from tusk.ir.enums import LOOP_OPCODES, FnAttr, Op
from tusk.ir.errors import TuskError
from tusk.ir.module import DEP_SCHEMA, Function, Module
from tusk.sim.timing import DEFAULT_COSTS, CostTable, plan, simulate
from tusk.stages.base import RowRangeSliced, Slice, Stats, option
from tusk.stages.deps import _merge, dependence_edges, straight_line_regions

# rows a segment may hold by default (the schedule pass's max_segment)
MAX_SEGMENT = 1 << 16
# functions up to this many rows are timed in both orders, and rotations of them kept only when not slower.
# Each comparison is two or three runs of the timing model: at 400,000 rows (the build's timing limit) the
# 8 large_matmul variants (32k-54k rows) cost 90 s CPU in-process against 27 s without; at 20,000 the tiled
# kernels and every traced NKI kernel are still compared (--set ...compare_limit=N raises it)
COMPARE_LIMIT = 20_000
# makespans are sums of floats: a relative difference below this is a tie
TIE = 1e-12

# what the list scheduler prefers among the instructions that can start at once: the longest path to the
# end of the segment (the bottom level), or the earlier row.  The first is the classic choice; on a loop
# whose tiles all have the same chain it starts every tile's first step before any tile's last (the engines'
# in-order streams then hold each tile's stores back: tiled_softmax_large 110,985 cycles against 88,623 in
# row order), so a function the model can time is scheduled both ways and keeps the faster
PRIORITIES = ("critical path", "program order")

# instructions that order everything around them
FENCES = frozenset({Op.NKIKernel, Op.CoreBarrier, 15, 16, 13, 14, 47, 48, 49, 50, 77, 80, 81, 82, 17, Op.Call})


def segments(fn: Function, max_rows: int = 1 << 62) -> list[tuple[int, int]]:
    """Half-open row ranges the scheduler may permute: straight-line regions without their closing
    control row, cut at fences, and into pieces of at most ``max_rows`` rows from the segment's start."""
    n = len(fn.insts)
    if n == 0:
        return []
    regions = straight_line_regions(fn)
    region = regions if regions is not None else np.zeros(n, np.int64)
    opc = fn.insts["opcode"]
    stay = np.isin(opc, list(FENCES))
    if regions is not None:
        stay |= np.isin(opc, list(LOOP_OPCODES | {Op.CompareAndBranch, Op.UnconditionalBranch}))
    cut = np.ones(n, dtype=bool)
    cut[1:] = (region[1:] != region[:-1]) | stay[1:] | stay[:-1]
    starts = np.flatnonzero(cut).tolist() + [n]
    step = max(int(max_rows), 2)
    return [(c, min(c + step, b)) for a, b in itertools.pairwise(starts) if b - a > 1 and not stay[a]
            for c in range(a, b, step) if min(c + step, b) - c > 1]


def schedule_function(fn: Function, costs: CostTable = DEFAULT_COSTS, max_segment: int = 1 << 62,
                      compare_limit: int = COMPARE_LIMIT) -> tuple[Function, int]:
    """(scheduled copy of ``fn``, number of rows that moved): the fastest on the timing model of the
    list schedules by each priority and the input order (:func:`fastest`)."""
    out, moved, _ = schedule_timed(fn, costs, max_segment, compare_limit)
    return out, moved


def schedule_timed(fn: Function, costs: CostTable = DEFAULT_COSTS, max_segment: int = 1 << 62,
                   compare_limit: int = COMPARE_LIMIT) -> tuple[Function, int, float | None]:
    """:func:`schedule_function`, and the kept function's makespan when it was timed (None otherwise)."""
    edges = dependence_edges(fn)
    tries = [schedule_with_edges(fn, edges, costs, max_segment, priority=p)
             for p in priorities(len(fn.insts), compare_limit)]
    return fastest_timed(fn, tries, costs, compare_limit)


def priorities(n: int, compare_limit: int) -> tuple[str, ...]:
    """The list-scheduling priorities tried on a function of ``n`` rows: all of them when the orders are
    compared on the timing model, else the critical path alone."""
    return PRIORITIES if n <= compare_limit else PRIORITIES[:1]


def makespan_or_none(fn: Function, costs: CostTable = DEFAULT_COSTS) -> float | None:
    """``fn``'s makespan on the timing model, None when it cannot be timed on its own (loops or branches
    kept, kernel calls)."""
    try:
        return simulate(fn, costs).makespan
    except TuskError:
        return None


def fastest(fn: Function, tries: list[tuple[Function, int, np.ndarray]], costs: CostTable = DEFAULT_COSTS,
            compare_limit: int = COMPARE_LIMIT) -> tuple[Function, int]:
    """(function, rows moved) of the fastest candidate: each try (a copy of ``fn`` with its rows
    reordered, rows moved, ``order`` the old row of each new row) in turn, then ``fn`` in its own order with
    the first try's edges and attributes.  A candidate wins only when it is faster than every earlier one
    (ties keep the earlier); beyond ``compare_limit`` rows, or when the model cannot time ``fn``, the first
    try."""
    out, moved, _ = fastest_timed(fn, tries, costs, compare_limit)
    return out, moved


def fastest_timed(fn: Function, tries: list[tuple[Function, int, np.ndarray]], costs: CostTable = DEFAULT_COSTS,
                  compare_limit: int = COMPARE_LIMIT) -> tuple[Function, int, float | None]:
    """:func:`fastest`, and the winner's makespan (None when nothing was timed)."""
    out, moved, order = tries[0]
    if len(order) > compare_limit:
        return out, moved, None
    kept = fn.copy()
    d = out.deps
    kept.deps = sorted_edges(order[d["src"].astype(np.int64)], order[d["dst"].astype(np.int64)], d["kind"],
                             np.arange(len(order), dtype=np.int64))
    kept.attrs = set(out.attrs)
    best: tuple[Function, int] | None = None
    best_t = 0.0
    for cand, m in [(f, m) for f, m, _ in tries] + [(kept, 0)]:
        t = makespan_or_none(cand, costs)
        if t is None:
            return out, moved, None
        if best is None or t < best_t * (1 - TIE):
            best, best_t = (cand, m), t
    assert best is not None
    return best[0], best[1], best_t


def schedule_with_edges(fn: Function, edges, costs: CostTable = DEFAULT_COSTS, max_segment: int = 1 << 62,
                        priority: str = PRIORITIES[0]) -> tuple[Function, int, np.ndarray]:
    """(scheduled copy, rows moved, placement order: old row of each new row) of ``fn`` whose graph
    (besides its own deps) is ``edges``, list-scheduled by ``priority``; the copy's deps are the union,
    sorted by (dst, src)."""
    n = len(fn.insts)
    segs = segments(fn, max_segment)
    d = fn.deps
    src, dst, kind = _merge(np.concatenate([d["src"], edges[0]]), np.concatenate([d["dst"], edges[1]]),
                            np.concatenate([d["kind"], edges[2]]), n)
    order = np.arange(n, dtype=np.int64)
    if segs:
        p = plan(fn, costs)
        dur = p.cost.copy()
        dur[p.is_dma] = p.cost[p.is_dma] + p.latency[p.is_dma] + p.work[p.is_dma] / p.rate[p.is_dma]
        by_dst = np.argsort(dst, kind="stable")
        dst_sorted = dst[by_dst]
        for a, b in segs:
            lo, hi = np.searchsorted(dst_sorted, [a, b])
            e = by_dst[lo:hi]
            inside = src[e] >= a
            order[a:b] = a + _list_schedule(b - a, src[e][inside] - a, dst[e][inside] - a, p, dur, a, costs,
                                            priority)
    moved = int((order != np.arange(n)).sum())
    deps = sorted_edges(src, dst, kind, order)
    out = fn.take_insts(order, deps) if moved else fn.copy()
    out.deps = deps
    if segs:
        out.attrs.add(FnAttr.KERNEL_SCOPE)
    return out, moved, order


def sorted_edges(src, dst, kind, order: np.ndarray) -> Table:
    """The edges renumbered to the new rows (``order``: old row of each new row), sorted by (dst, src)."""
    n = len(order)
    pos = np.empty(n, np.int64)
    pos[order] = np.arange(n, dtype=np.int64)
    s, t, k = _merge(pos[src], pos[dst], kind, n)
    return Table.from_arrays(DEP_SCHEMA, {"src": s.astype(np.int32), "dst": t.astype(np.int32),
                                          "kind": k.astype(np.uint8)})


def _list_schedule(n: int, src: np.ndarray, dst: np.ndarray, p, dur: np.ndarray, off: int,
                   costs: CostTable, priority: str = PRIORITIES[0]) -> np.ndarray:
    """Placement order (segment-relative) of a segment of ``n`` rows with edges src -> dst."""
    lane = p.lane[off:off + n].tolist()
    is_dma = p.is_dma[off:off + n].tolist()
    cost = p.cost[off:off + n].tolist()
    d = dur[off:off + n]
    sync = float(costs.sync_latency)
    succ_order = np.argsort(src, kind="stable")
    s_src, s_dst = src[succ_order], dst[succ_order]
    s_ptr = np.searchsorted(s_src, np.arange(n + 1)).tolist()
    s_dst_l = s_dst.tolist()
    # bottom level: longest path to the end of the segment (rows are a topological order)
    prio_l = d.tolist()
    for i in range(n - 1, -1, -1):
        lo, hi = s_ptr[i], s_ptr[i + 1]
        if lo < hi:  # max(p + sync) == max(p) + sync exactly: rounding is monotonic
            prio_l[i] += max([prio_l[j] for j in s_dst_l[lo:hi]]) + sync
    if priority == PRIORITIES[1]:  # the earlier row first: tiles flow through in the order they were written
        prio_l = [-float(i) for i in range(n)]
    d_l = d.tolist()
    indeg = np.bincount(dst, minlength=n).tolist()
    ready_at = [0.0] * n
    nl = len(p.lanes)
    free = [0.0] * nl
    slots = max(int(costs.dma_queues_per_engine), 1) * max(int(costs.dma_inflight), 1)
    transfer: list[list[float]] = [[] for _ in range(nl)]  # trigger lane -> heap of in-flight transfer ends
    where = [-1] * n
    heap = [(0.0, -prio_l[i], i) for i in range(n) if indeg[i] == 0]
    heapq.heapify(heap)
    pop, push = heapq.heappop, heapq.heappush
    placed: list[int] = []
    while heap:
        t, negp, i = pop(heap)
        ln = lane[i]
        start = ready_at[i]
        if ln >= 0 and free[ln] > start:
            start = free[ln]
        if start > t:
            push(heap, (start, negp, i))
            continue
        if is_dma[i]:
            te = start + cost[i]
            free[ln] = te
            h = transfer[ln]
            while h and h[0] <= te:
                pop(h)
            ts = te if len(h) < slots else max(te, pop(h))
            f = ts + (d_l[i] - cost[i])
            push(h, f)
            wi = where[i] = nl + ln  # its queues: another engine for the hand-off
        else:
            f = start + cost[i]
            if ln >= 0:
                free[ln] = f
            wi = where[i] = ln
        placed.append(i)
        for j in s_dst_l[s_ptr[i]:s_ptr[i + 1]]:
            lj = lane[j]
            r = f + sync if wi >= 0 and lj >= 0 and wi != lj else f
            if r > ready_at[j]:  # noqa: PLR1730 - a comparison is faster than max() in this hot loop
                ready_at[j] = r
            indeg[j] -= 1
            if indeg[j] == 0:
                rj = ready_at[j]
                push(heap, (rj if lj < 0 or rj >= free[lj] else free[lj], -prio_l[j], j))
    if len(placed) != n:  # cannot happen: rows are a topological order of their edges
        raise AssertionError("schedule: the dependence graph of a segment has a cycle")
    return np.asarray(placed, dtype=np.int64)


@dataclass(frozen=True)
class Schedule(RowRangeSliced):
    """Reorder each straight-line region by the timing model's critical path, respecting every dependence."""

    name = "schedule"
    version = "3"
    splittable = True

    mark_post_schedule: bool = option(True, "give scheduled functions attribute 12 (the post-schedule marker)")
    max_segment: int = option(MAX_SEGMENT, "rows a segment may hold: a longer straight-line run is scheduled in "
                                       "pieces of this many rows, each on its own (so one big kernel splits)")
    compare_limit: int = option(COMPARE_LIMIT, "functions up to this many rows are timed in the scheduled and "
                                               "in the input order, and keep the input order when it is faster")

    # a straight-line function is cut into ranges of whole segments (stages/schedule_split.py) only from this
    # many rows, into parts of about ``split_part_size`` (at most ``split_max_parts``); class attributes, so
    # the output never depends on them (tests lower them)
    split_min: ClassVar[int] = 200_000
    split_part_size: ClassVar[int] = 300_000
    split_max_parts: ClassVar[int] = 8
    # build_fdeps' parts and schedule's run side by side: see split_ahead
    splits_ahead_of: ClassVar[frozenset[str]] = frozenset({"build_fdeps"})

    def run(self, module: Module) -> tuple[Module, Stats]:
        from tusk.stages.schedule_split import PART_KEY, run_part

        if PART_KEY in module.attributes:
            return run_part(self, module)
        out = module.copy()
        moved = 0
        scheduled = 0
        for k, fn in enumerate(out.functions):
            new, m = schedule_function(fn, max_segment=self.max_segment, compare_limit=self.compare_limit)
            out.functions[k] = self.marked(fn, new)
            scheduled += int(FnAttr.KERNEL_SCOPE in out.functions[k].attrs and FnAttr.KERNEL_SCOPE not in fn.attrs)
            moved += m
        return out, {"moved": moved, "marked": scheduled}

    def marked(self, before: Function, after: Function) -> Function:
        if not self.mark_post_schedule:
            after.attrs = set(before.attrs)
        return after

    def split_refs(self, module: Module) -> list[Module | Slice] | None:
        from tusk.stages.schedule_split import split

        return split(self, module)

    def split_ahead(self, module: Module) -> list[Module | Slice] | None:
        """The parts of build_fdeps(``module``), from ``module``: build_fdeps changes only the edges (and the
        loop-carried ones of kept loops: a function that has loops is never split), and a part unions its
        rows' edges with the ones it finds from their footprints -- the same union when ``module`` has none.
        A module with edges of its own (build_fdeps keep_existing, or no clear_inst_deps before it) splits
        after build_fdeps as usual."""
        if any(len(fn.deps) for fn in module.functions):
            return None
        return self.split_refs(module)

    def merge(self, module: Module, parts: list[Module], part_stats: list[Stats]) -> tuple[Module, Stats]:
        from tusk.stages.schedule_split import merge

        return merge(self, module, parts)
