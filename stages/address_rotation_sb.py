"""address_rotation_sb: rings of SBUF tiles, batch by partition band (seed 002, sb_rotation / sb_rotation_batch).

The driver (dispatch, what follows a rotation) is :mod:`~tusk.stages.address_rotation`'s.

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

from tusk.ir.arch import PARTITIONS, band_of, get_arch
from tusk.ir.columns import Record
from tusk.ir.enums import Engine, FnAttr, Mem, Op
from tusk.ir.errors import InternalError, PassError
from tusk.ir.liveness import Instances
from tusk.ir.module import Function, Module, _ranges
from tusk.stages import rotation_split
from tusk.stages.address_rotation import AddressRotation, Job, _accessed_unallocated, _scope, callee_of
from tusk.stages.base import Slice, Stats, materialized
from tusk.stages.rotation_rings import (
    Space,
    analyse,
    bucket_range,
    buckets,
    first_writer_engine,
    grow_rings,
    new_location,
    rebind,
    ring_of,
)

PART_KEY = "address_rotation_part"
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
    return band_batches(sp.fn, sp.memlocs)


def sb_memlocs(fn: Function) -> np.ndarray:
    """The allocated SB memory locations of ``fn`` (``analyse``'s entries; unaliasing keeps them all)."""
    ml = fn.memlocs
    return np.flatnonzero((ml["mtype"] == Mem.SB) & (ml["addr"] >= 0)).astype(np.int64)


def band_batches(fn: Function, memlocs: np.ndarray) -> list[np.ndarray]:
    """:func:`batches` of the memory locations ``memlocs`` of ``fn``: boxes alone decide them."""
    ml = fn.memlocs
    if not len(memlocs):
        return []
    base = ml["base"][memlocs].astype(np.int64)
    b0 = np.array([band_of(int(p)) for p in base.tolist()], dtype=np.int64)
    b1 = np.array([band_of(int(p)) for p in (base + ml["nparts"][memlocs] - 1).tolist()], dtype=np.int64)
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


@dataclass(frozen=True)
class AddressRotationSB(AddressRotation):
    """address_rotation_sb: rings of SBUF tiles by the seed's target schedule, one part per band batch."""

    name = "address_rotation_sb"
    space = "sb"
    mtype = Mem.SB
    splittable = True

    def _jobs(self, module: Module) -> list[Job]:
        arch = get_arch(module.arch)
        jobs: list[Job] = []
        kernel_scoped: dict[int, Job] = {}
        names = {fn.name: k for k, fn in enumerate(module.functions)}
        for k, fn in enumerate(module.functions):
            flags = self.flags(module, fn)
            region = Region(PARTITIONS, arch.sb_bytes_per_partition, arch.sb_bytes_per_partition - arch.sb_reserved)
            if FnAttr.KERNEL_SCOPE in flags:
                jobs.append(Job(k, "post", region))
            elif flags & {FnAttr.ROTATE_PSUM_AND_SB, FnAttr.ROTATE_SB_ONLY}:
                jobs.append(Job(k, "standard", region))
                kernel_scoped.update(self._kernel_scoped(fn, names))
        jobs = [j for j in jobs if j.fn not in kernel_scoped] + sorted(kernel_scoped.values(), key=lambda j: j.fn)
        return [j for j in jobs if not _accessed_unallocated(module.functions[j.fn], Mem.SB)]

    def _kernel_scoped(self, fn: Function, names: dict[str, int]) -> dict[int, Job]:
        """The callees of ``fn``'s kernel calls with AddressRotationScope 1, each rotated in its call's SB shape."""
        out: dict[int, Job] = {}
        for row in np.flatnonzero(fn.insts["opcode"] == Op.NKIKernel).tolist():
            attrs = fn.record(fn.insts.get("attrs", row))
            callee = callee_of(attrs, names)
            if _scope(attrs) != 1 or callee is None:
                continue
            shape = attrs.get("sb_buf_shape") or (0, 0)
            nparts, size = (int(shape[0]), int(shape[1])) if len(shape) == 2 else (0, 0)
            if nparts == 0 or size == 0:
                self.log.info("Skipping kernel-scoped address rotation for %s - SB shape not set", fn.inst_name(row))
                continue
            out[callee] = Job(callee, "standard", Region(nparts, size, size))
        return out

    def _rotate(self, out: Module, jobs: list[Job], known: dict[int, Instances] | None = None) -> dict[int, int]:
        moved: dict[int, int] = {}
        for job in jobs:
            region = _region(job)
            sp = analyse(out.functions[job.fn], Mem.SB, inst=(known or {}).pop(job.fn, None))
            rules = sb_schedule(job.kind, region.partitions)
            here = sum(sb_rotation_batch(sp, batch, rules, region, self.log) for batch in batches(sp))
            moved[job.fn] = moved.get(job.fn, 0) + here
        return moved

    def run(self, module: Module) -> tuple[Module, Stats]:
        marker = module.attributes.get(PART_KEY)
        if marker is not None:
            return self._run_part(module, marker)
        return rotation_split.run_part(self, module) or super().run(module)

    def split(self, module: Module) -> list[Module] | None:
        return materialized(self, module, self.split_refs(module))

    def take(self, base: Module, spec) -> Module:
        return rotation_split.take(base, spec)

    def split_refs(self, module: Module) -> list[Module | Slice] | None:
        """One part per band batch with work; else, after scheduling, the rotation done here and the
        rescheduling of a big function in parts (:mod:`~tusk.stages.rotation_split`); else None."""
        if PART_KEY in module.attributes or rotation_split.is_part(module):
            return None
        jobs, why = self.jobs(module)
        if why is not None:
            return None
        # batches depend on boxes only: with fewer than two, unaliasing and analysing here would be wasted
        if sum(len(band_batches(module.functions[j.fn], sb_memlocs(module.functions[j.fn]))) for j in jobs) >= 2:
            parts = self._batch_parts(module, jobs)
            if parts is not None:
                return list(parts)
        return rotation_split.split(self, module, jobs) if rotation_split.worth_it(self, module, jobs) else None

    def _batch_parts(self, module: Module, jobs: list[Job]) -> list[Module] | None:
        module = self._unaliased(module, jobs)
        parts: list[Module] = []
        for job in jobs:
            fn = module.functions[job.fn]
            sp = analyse(fn, Mem.SB)
            names = [fn.strings[s] for s in fn.memlocs["name"].tolist()]
            pinned = sorted(names[int(m)] for m in sp.memlocs[sp.pinned].tolist())
            for k, batch in enumerate(batches(sp)):
                if not _has_work(sp, batch):
                    continue
                members = sp.memlocs[batch]
                region = _region(job)
                marker = {"function": fn.name, "job": job.fn, "kind": job.kind, "batch": k,
                          "region": [region.partitions, region.nbytes, region.usable],
                          "memlocs": [names[int(m)] for m in members.tolist()], "pinned": pinned}
                part_fn = fn.take_insts(part_rows(fn, members))
                parts.append(Module([part_fn], module.arch, module.version,
                                    module.attributes.with_(**{PART_KEY: marker}), module.artifact_dir,
                                    module.queues, module.extras))
        return parts if len(parts) >= 2 else None

    def _run_part(self, module: Module, marker: Record) -> tuple[Module, Stats]:
        out = module.copy()
        fn = out.functions[0]
        sp = analyse(fn, Mem.SB, frozenset(marker["pinned"]))
        names = [fn.strings[s] for s in fn.memlocs["name"].tolist()]
        want = set(marker["memlocs"])
        batch = np.array([e for e, m in enumerate(sp.memlocs.tolist()) if names[m] in want], dtype=np.int64)
        region = Region(*marker["region"])
        moved = sb_rotation_batch(sp, batch, sb_schedule(marker["kind"], region.partitions), region, self.log)
        return out, {"rotations": moved}

    def merge(self, module: Module, parts: list[Module], part_stats: list[Stats]) -> tuple[Module, Stats]:
        if any(rotation_split.is_part(p) for p in parts):
            return rotation_split.merge(self, module, parts, part_stats)
        jobs = self.jobs(module)[0]
        base = self._unaliased(module, jobs)  # as split and run start from
        out = base.copy()
        for part in parts:
            marker = part.attributes[PART_KEY]
            fn = out.functions[int(marker["job"])]
            orig = base.functions[int(marker["job"])]
            if fn.name != marker["function"]:
                raise PassError(f"{self.name}: part for function {marker['function']} does not match {fn.name}")
            names = {orig.strings[s]: m for m, s in enumerate(orig.memlocs["name"].tolist())}
            members = np.array([names[n] for n in marker["memlocs"]], dtype=np.int64)
            _merge_part(fn, orig, part.functions[0], part_rows(orig, members))
        moved: dict[int, int] = {j.fn: 0 for j in jobs}  # a job without parts is left as it came, as in run
        for part, st in zip(parts, part_stats):
            k = int(part.attributes[PART_KEY]["job"])
            moved[k] = moved.get(k, 0) + int(st.get("rotations", 0))
        stats: Stats = {**self._settle(out, module, moved), "parts": len(parts),
                        "functions": len({int(p.attributes[PART_KEY]["job"]) for p in parts})}
        return out, stats


def _region(job: Job) -> Region:
    if job.region is None:
        raise InternalError(f"address_rotation_sb: the job for function {job.fn} has no SBUF region")
    return job.region


def _has_work(sp, batch) -> bool:
    return any(not sp.pinned[e] and len(sp.instances_of(int(sp.memlocs[e]))) >= 2 for e in batch.tolist())


def _merge_part(fn: Function, orig: Function, part: Function, rows: np.ndarray) -> None:
    """Copy a part's new sets and memory locations into ``fn`` and repoint the operands it moved."""
    n_sets, n_ml = len(orig.sets), len(orig.memlocs)
    set_map: dict[int, int] = {}
    for s in range(n_sets, len(part.sets)):
        r = part.sets.row(s)
        set_map[s] = fn.add_set(part.strings[r["name"]], r["kind"], r["dtype"], part.value(r["shape"]) or (),
                                tclass=r["tclass"], is_block=bool(r["is_block"]), n_blocks=r["n_blocks"],
                                extra=part.record(r["extra"]))
    ml_map: dict[int, int] = {}
    for m in range(n_ml, len(part.memlocs)):
        r = part.memlocs.row(m)
        ml_map[m] = fn.add_memloc(set_map.get(r["set"], r["set"]), part.strings[r["name"]], r["mtype"], addr=r["addr"],
                                  pbytes=r["pbytes"], nparts=r["nparts"], base=r["base"], bank=r["bank"],
                                  tensor_id=r["tensor_id"], const_path=part.string(r["const_path"]),
                                  extra=part.record(r["extra"]))
    if not ml_map:
        return
    p_ops = part.operands["memloc"]
    p_start = part.insts["ops"].astype(np.int64)
    nops = part.insts["nops"].astype(np.int64)
    o_start = fn.insts["ops"][rows].astype(np.int64)
    p_rows = _ranges(p_start, nops)
    o_rows = _ranges(o_start, nops)
    new = p_ops[p_rows].astype(np.int64)
    sel = np.flatnonzero(new >= n_ml)
    if len(sel):
        lookup = np.array([ml_map[m] for m in range(n_ml, len(part.memlocs))], dtype=np.int64)
        fn.operands["memloc"][o_rows[sel]] = lookup[new[sel] - n_ml]
