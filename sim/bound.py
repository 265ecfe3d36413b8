"""A true lower bound on the makespan of a straight-line function: a property of the program.

``simulate`` runs one order of the instructions; this module says what no order can beat on the same
machine model (docs/timing.md, "Lower bound").  Every term only uses what the order cannot change:
each instruction's cost and lane (fixed by its engine and shapes), the dependence edges, and the
resources' capacities.  The bound is the largest of

* **dependence chain**: the longest path through ``fn.deps``, every instruction at its minimum
  latency (a DMA: trigger + fixed latency + its data at its own rate, no contention), with the
  semaphore hand-off wherever the model adds one;
* **engine X**: the engine's total work (its instructions and its DMA triggers: it issues one at a
  time), plus the earliest any of them can start and the shortest chain that must follow the last;
* **DMA queues of X** / **DMA queue Q**: the transfers that may only use those queues, each at its
  solo time (latency + data at its own rate), over the in-flight slots of those queues
  (queues x ``dma_inflight``), with the same head and tail;
* **DRAM** and **DMA engines**: bytes through DRAM and engine-cycles of data movement over the
  capacity of the model's bandwidth calendar, counted in its buckets (a bucket of capacity can be
  used by transfers that start inside it, so the count is in whole buckets, not a fluid division);
* **kernel calls**: the calls run one after the other as barriers, each no shorter than its
  callee's own bound.

Head and tail: a resource cannot be used before the earliest moment any of its users can start on
the dependence graph, and after its last use the rest of that user's chain still has to run, so
``head + work / capacity + tail`` is a bound too (the classic head-body-tail bound).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # the timing model imports this module; only the types flow the other way
    from tusk.sim.timing import CostTable, Plan

CHAIN = "dependence chain"
DRAM = "DRAM"
DMA_ENGINES = "DMA engines"
CALLS = "kernel calls"


def engine_term(name: str) -> str:
    return f"engine {name}"


def queues_term(engine: str) -> str:
    return f"DMA queues of {engine}"


def queue_term(name: str) -> str:
    return f"DMA queue {name}"


def term_kind(term: str) -> str:
    """The kind of resource a term of the bound names: engine, DMA queues, DRAM, DMA engines,
    dependence chain or kernel calls."""
    if term.startswith("engine "):
        return "engine"
    if term.startswith("DMA queue"):
        return "DMA queues"
    return term


def lower_bound_terms(p: Plan, src: np.ndarray, dst: np.ndarray, costs: CostTable,
                      call_bound: dict[int, float] | None = None) -> dict[str, float]:
    """The terms of the bound (cycles), keyed by the resource they measure; the bound is their max.

    ``p`` is the function's :class:`~tusk.sim.timing.Plan`, ``src``/``dst`` its dependence edges
    (``src < dst``), ``call_bound`` the lower bound of the callee of each kernel-call row.
    """
    call_bound = call_bound or {}
    n = len(p.cost)
    terms: dict[str, float] = {}
    if n == 0:
        return {CHAIN: 0.0}
    dma = p.is_dma
    trigger = np.where(dma, p.cost, 0.0)
    solo = np.where(dma, p.latency + p.work / p.rate, 0.0)  # a transfer's slot time, alone on the machine
    dur = p.cost + solo                                      # start (a DMA: its trigger) to end
    for i, c in call_bound.items():
        dur[i] = c
    lane = p.lane
    # the lane a predecessor finished on, as the model sees it for the hand-off: a DMA its queue (never
    # a compute lane, so the hand-off always applies), a kernel call none
    where = np.where(dma, len(p.lanes), lane)
    if call_bound:
        where[list(call_bound)] = -1
    head, tail = _heads_and_tails(n, src, dst, dur, lane, where, float(costs.sync_latency))
    terms[CHAIN] = float((head + dur).max())

    def head_body_tail(sel: np.ndarray, body: float, post: np.ndarray, use_start: np.ndarray) -> float:
        return float(use_start[sel].min() + body + post[sel].min())

    from tusk.sim.timing import COMPUTE_ENGINES

    for k, name in enumerate(COMPUTE_ENGINES):
        sel = lane == k
        if sel.any() and p.cost[sel].sum() > 0:
            # after the engine's part (a trigger) the transfer still runs, then the chain behind it
            terms[engine_term(name)] = head_body_tail(sel, float(p.cost[sel].sum()), solo + tail, head)
    slots = max(int(costs.dma_inflight), 1)
    after_trigger = head + trigger
    for k, qs in p.engine_queues.items():
        sel = dma & (p.queue < 0) & (lane == k)
        if sel.any():
            body = float(solo[sel].sum()) / (slots * len(qs))
            terms[queues_term(COMPUTE_ENGINES[k])] = head_body_tail(sel, body, tail, after_trigger)
    for q in np.unique(p.queue[dma & (p.queue >= 0)]).tolist():
        sel = dma & (p.queue == q)
        terms[queue_term(p.lanes[q])] = head_body_tail(sel, float(solo[sel].sum()) / slots, tail, after_trigger)
    data_start = after_trigger + np.where(dma, p.latency, 0.0)
    bucket = float(costs.bucket)
    for name, amount, per_cycle in ((DMA_ENGINES, p.work, float(costs.dma_engines)),
                                    (DRAM, p.dram, float(costs.dram_bytes_per_cycle))):
        sel = dma & (amount > 0)
        if sel.any():
            terms[name] = _bucketed(float(amount[sel].sum()), per_cycle * bucket, float(data_start[sel].min()),
                                    bucket) + float(tail[sel].min())
    if call_bound:
        terms[CALLS] = float(sum(call_bound.values()))
    return terms


def _bucketed(total: float, per_bucket: float, first: float, bucket: float) -> float:
    """The earliest the calendar can finish booking ``total`` at ``per_bucket`` per bucket when no booking
    starts before ``first``: the bookings fill whole buckets from ``first``'s bucket on, and the transfer
    that books the last of them ends no earlier than that bucket's start."""
    buckets = math.ceil(total / per_bucket * (1 - 1e-12))
    return max(bucket * (buckets + math.floor(first / bucket) - 1), first)


def _heads_and_tails(n: int, src: np.ndarray, dst: np.ndarray, dur: np.ndarray, lane: np.ndarray,
                     where: np.ndarray, sync: float) -> tuple[np.ndarray, np.ndarray]:
    """Per instruction, the earliest start on the dependence graph (head) and the longest chain that must
    run after it ends (tail), each hop adding the model's hand-off latency where it applies."""
    hop = np.zeros(len(src))
    if len(src):
        w, me = where[src], lane[dst]
        hop = np.where((w >= 0) & (me >= 0) & (w != me), sync, 0.0)
    head = [0.0] * n
    tail = [0.0] * n
    dur_l = dur.tolist()
    done = [0.0] * n  # head + dur of the rows already placed: the same sum, once per row instead of per edge
    by_dst = np.argsort(dst, kind="stable")
    s_l, h_l = src[by_dst].tolist(), hop[by_dst].tolist()
    ptr = np.searchsorted(dst[by_dst], np.arange(n + 1)).tolist()
    # ``if v > best`` is max(best, v) for these floats (no NaN), without a builtin call per edge
    for i in range(n):
        best = 0.0
        for k in range(ptr[i], ptr[i + 1]):
            v = done[s_l[k]] + h_l[k]
            if v > best:
                best = v
        head[i] = best
        done[i] = best + dur_l[i]
    by_src = np.argsort(src, kind="stable")
    d_l, h_l = dst[by_src].tolist(), hop[by_src].tolist()
    ptr = np.searchsorted(src[by_src], np.arange(n + 1)).tolist()
    for i in range(n - 1, -1, -1):
        best = 0.0
        for k in range(ptr[i], ptr[i + 1]):
            j = d_l[k]
            v = h_l[k] + dur_l[j] + tail[j]
            if v > best:
                best = v
        tail[i] = best
    return np.array(head), np.array(tail)
