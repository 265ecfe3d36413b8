"""SB rotation: rings of SBUF tiles, batch by partition band (seed 002, sb_rotation / sb_rotation_batch).

The pass runs a *schedule* of ``(target, period, lo, hi, rotate, engine)``
tuples.  Tusk's reading of the seed's arguments:

* ``target`` -- a class of buffers by the engine that first writes them
  (``TARGET_ENGINES``: 1 DMA-loaded tiles, 2 PE, 3 Activation, 4 DVE or Pool,
  5 DVE, 7 SP, 12 any); a buffer is handled by the first tuple whose class
  (and ``engine`` filter, 0 = any) it matches;
* ``period`` -- the ring size: at most that many slots per buffer;
* ``lo``, ``hi`` -- the SBUF *slice* the ring's new slots must lie in, in
  units of ``1/N`` of a partition's bytes (``N`` partitions; the budget
  ``8 * ceil((2N/5) / 8)`` and its half give the seed's bounds);
* ``rotate`` -- 0: the buffers are claimed but stay where they are.

SBUF rotation only moves byte addresses, never partitions, so memory
locations whose partition bands do not overlap can never collide: the
function's SB memory locations fall into independent *batches* (connected
groups of overlapping band ranges).  Each batch is rotated against a
pyroaring bitmap of occupied tiles -- (time bucket, 8-byte granule) -- with
a first-fit free-slot allocator; a buffer whose ring cannot grow keeps the
slots it has (at worst only its original address: rotation is best effort).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
from pyroaring import BitMap

from tusk.ir.arch import band_of
from tusk.ir.enums import Engine
from tusk.ir.module import Function
from tusk.stages.rotation_rings import (
    Space,
    bucket_range,
    buckets,
    first_writer_engine,
    grow_rings,
    new_location,
    rebind,
    ring_of,
)

GRANULE = 8  # bytes: slots are 8-byte aligned (the seed's roundup8)
TARGET_ENGINES: dict[int, frozenset[int] | None] = {
    1: frozenset({Engine.DMA}), 2: frozenset({Engine.PE}), 3: frozenset({Engine.Activation}),
    4: frozenset({Engine.DVE, Engine.Pool}), 5: frozenset({Engine.DVE}), 7: frozenset({Engine.SP}), 12: None,
}


def roundup8(x: int) -> int:
    return 8 * (-(-x // 8))


def sb_budget(partitions: int) -> int:
    """The per-target SBUF slice: 8 * ceil((2N/5) / 8)."""
    return roundup8(2 * partitions // 5)


@dataclass(frozen=True)
class Rule:
    target: int
    period: int
    lo: int
    hi: int
    rotate: bool
    engine: int = 0  # 0: any


def sb_schedule(kind: str, partitions: int) -> list[Rule]:
    """The seed's tuples: ``"standard"`` (functions with attribute 9 or 10, and kernel scope) or
    ``"post"`` (attribute 12: the post-schedule re-run)."""
    n = partitions
    b = sb_budget(n)
    half = roundup8(b >> 1)
    if kind == "post":
        return [Rule(1, 5, half, b, True), Rule(2, 20, 0, n, False), Rule(5, 10, half, b, True),
                Rule(7, 20, half, b, True), Rule(3, 10, 0, half, True),
                Rule(4, 1, 0, roundup8(n // 5), False, Engine.DVE), Rule(4, 1, 0, roundup8(n // 5), False, Engine.Pool)]
    return [Rule(1, 5, half, b, True), Rule(2, 20, 0, n, True), Rule(5, 10, half, b, True), Rule(7, 20, half, b, True),
            Rule(3, 10, 0, half, True), Rule(12, 60, 0, n, True)]


@dataclass(frozen=True)
class Region:
    """The SBUF a rotation may use: ``partitions`` x ``nbytes`` (``usable`` of them for new slots)."""

    partitions: int
    nbytes: int
    usable: int

    def window(self, rule: Rule) -> tuple[int, int]:
        """Granules [g0, g1) of the rule's slice."""
        unit = self.nbytes / self.partitions
        lo = int(rule.lo * unit)
        hi = min(int(rule.hi * unit), self.usable)
        return -(-lo // GRANULE), hi // GRANULE


def batches(sp: Space) -> list[np.ndarray]:
    """Entries of ``sp.memlocs`` grouped into independent batches: connected groups of overlapping
    32-partition band ranges (is_memloc_in_batch), in order of their first band."""
    ml = sp.fn.memlocs
    if not len(sp.memlocs):
        return []
    base = ml["base"][sp.memlocs].astype(np.int64)
    b0 = np.array([band_of(int(p)) for p in base.tolist()], dtype=np.int64)
    b1 = np.array([band_of(int(p)) for p in (base + ml["nparts"][sp.memlocs] - 1).tolist()], dtype=np.int64)
    order = np.lexsort((b1, b0))
    groups: list[list[int]] = []
    reach = -1
    for e in order.tolist():
        if not groups or b0[e] > reach:
            groups.append([e])
        else:
            groups[-1].append(e)
        reach = max(reach, int(b1[e]))
    return [np.array(sorted(g), dtype=np.int64) for g in groups]


class Occupancy:
    """Occupied SBUF tiles of one batch: one pyroaring bitmap of 8-byte granules per time bucket."""

    def __init__(self, n_buckets: int):
        self.occ = [BitMap() for _ in range(n_buckets)]

    def add(self, b0: int, b1: int, g0: int, g1: int) -> None:
        for b in range(b0, b1):
            self.occ[b].add_range(g0, g1)

    def first_fit(self, b0: int, b1: int, width: int, g0: int, g1: int) -> int | None:
        """Lowest granule ``g`` in [g0, g1 - width] with [g, g + width) free in every bucket of [b0, b1)."""
        if g1 - g0 < width:
            return None
        used = BitMap.union(*self.occ[b0:b1]) if b1 - b0 > 1 else self.occ[b0]
        taken = np.asarray(used.to_array(), dtype=np.int64)
        taken = taken[(taken >= g0) & (taken < g1)]
        starts = np.concatenate([[g0], taken + 1])
        ends = np.concatenate([taken, [g1]])
        ok = np.flatnonzero(ends - starts >= width)
        return int(starts[ok[0]]) if len(ok) else None


def sb_rotation_batch(sp: Space, batch: np.ndarray, rules: list[Rule], region: Region,
                      log: logging.Logger) -> int:
    """Rotate one batch of ``sp`` in place; returns the number of instances moved."""
    fn = sp.fn
    ml = fn.memlocs
    used = batch[sp.span_hi[batch] >= 0]
    if not len(used):
        return 0
    edges = buckets(sp, used)
    occ = Occupancy(len(edges) - 1)
    geo = {}
    for e in used.tolist():
        m = int(sp.memlocs[e])
        addr, size = ml.get("addr", m), ml.get("pbytes", m)
        b0, b1 = bucket_range(edges, int(sp.span_lo[e]), int(sp.span_hi[e]))
        occ.add(b0, b1, addr // GRANULE, -(-(addr + size) // GRANULE))
        geo[e] = (b0, b1, -(-roundup8(size) // GRANULE))
    claimed: set[int] = set()
    moved = 0
    for rule in rules:
        cands = []
        for e in used.tolist():
            m = int(sp.memlocs[e])
            if e in claimed or sp.pinned[e] or len(sp.instances_of(m)) < 2:
                continue
            eng = first_writer_engine(sp, m)
            engines = TARGET_ENGINES.get(rule.target)
            if (engines is not None and eng not in engines) or (rule.engine and eng != rule.engine):
                continue
            cands.append(e)
        claimed.update(cands)
        if not rule.rotate or rule.period < 2 or not cands:
            continue
        cands.sort(key=lambda e: (int(sp.span_lo[e]), int(sp.memlocs[e])))
        g0, g1 = region.window(rule)

        def next_slot(e: int) -> int | None:
            b0, b1, width = geo[e]
            g = occ.first_fit(b0, b1, width, g0, g1)
            if g is None:
                return None
            occ.add(b0, b1, g, g + width)
            return g * GRANULE

        first = {e: int(ml.get("addr", int(sp.memlocs[e]))) for e in cands}
        count = {e: len(sp.instances_of(int(sp.memlocs[e]))) for e in cands}
        slots = grow_rings(cands, first, count, rule.period, next_slot)
        for e in cands:
            m = int(sp.memlocs[e])
            if len(slots[e]) < 2:
                continue
            name = fn.strings[ml.get("name", m)]
            mems = [m]
            for k, a in enumerate(slots[e][1:], start=1):
                mems.append(new_location(fn, m, k, a))
                log.info("%s picked new range for %s %d %d", name, fn.strings[ml.get("name", mems[-1])], a,
                         ml.get("base", m))
            moved += rebind(sp, m, ring_of(len(sp.instances_of(m)), rule.period, len(slots[e])), mems)
    return moved


def part_rows(fn: Function, memlocs: np.ndarray) -> np.ndarray:
    """Rows of the instructions that access any of ``memlocs`` (what a split part keeps)."""
    ops = fn.operands
    member = np.zeros(len(fn.memlocs) + 1, dtype=bool)
    member[memlocs] = True
    owner = np.repeat(np.arange(len(fn.insts), dtype=np.int64), fn.insts["nops"].astype(np.int64))
    m = ops["memloc"][:len(owner)]
    touch = member[np.where(m >= 0, m, len(fn.memlocs))]
    keep = np.zeros(len(fn.insts), dtype=bool)
    keep[owner[touch]] = True
    return np.flatnonzero(keep)

