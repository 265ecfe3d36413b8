"""address_rotation_psum: a ring of banks over a [band][bank] occupancy grid (seed 002, psum_rotation).

The driver (dispatch, what follows a rotation) is :mod:`~tusk.stages.address_rotation`'s; the
post-schedule variant (:mod:`~tusk.stages.address_rotation_psum_post_schedule`) is this pass on
scheduled functions too.

PSUM is a row of 2 KiB banks; a memory location spans ``width`` banks and
its partitions fall in 32-partition *bands* (``get_psum_partition``: band =
partition >> 5).  The occupancy grid says, per time bucket, which
[band][bank] cells some memory location holds.  A recurring PSUM buffer
(an accumulation group per output tile, say) gets a ring of up to
``numBanks`` slots: its own banks plus free banks found by a search over
start banks ``s`` aligned to ``ceil(size / 2048)`` (``getPsumBankAlignment``),
with ``prefer_bank_alignment`` as the tie-break.  Slots are handed out
breadth-first (every candidate's second slot before anyone's third), so one
buffer cannot take every bank.  The pass runs this sweep three times, as
the backend does (no convergence loop).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from tusk.ir.arch import BAND_PARTITIONS, PSUM_BANK_BYTES, Arch, get_arch
from tusk.ir.enums import FnAttr, Mem
from tusk.ir.liveness import Instances
from tusk.ir.module import Function, Module
from tusk.stages.address_rotation import AddressRotation, Job, _accessed_unallocated
from tusk.stages.rotation_rings import analyse, bucket_range, buckets, grow_rings, new_location, rebind, ring_of

PSUM_SWEEPS = 3


def prefer_bank_alignment(s: int, align: int) -> bool:
    """The seed's tie-break: an even start for 2-bank tensors, a multiple of 4 (3) for 4 (3)."""
    if align in (2, 3, 4):
        return s % align == 0
    return True


def psum_bank_alignment(size: int) -> int:
    """getPsumBankAlignment: the banks a tensor of ``size`` bytes spans, also its start alignment."""
    return max(1, -(-size // PSUM_BANK_BYTES))


def _search(free: np.ndarray, width: int, align: int) -> int | None:
    """A start bank with ``width`` free banks from it, aligned; the preferred alignment first."""
    found = []
    for s in range(0, len(free) - width + 1):
        if s % align or not free[s:s + width].all():
            continue
        if prefer_bank_alignment(s, align):
            return s
        found.append(s)
    return found[0] if found else None


def psum_rotation(fn: Function, arch: Arch, log: logging.Logger | logging.LoggerAdapter, target: int = 0,
                  inst: Instances | None = None) -> int:
    """One sweep over ``fn`` in place; returns the number of instances moved to another bank.  ``inst``:
    ``fn``'s PSUM instances (with group kills) when already known."""
    sp = analyse(fn, Mem.PSUM, inst=inst)
    ml = fn.memlocs
    nbanks = arch.psum_banks
    nbands = max(1, arch.psum_partitions // BAND_PARTITIONS)
    rows = np.arange(len(sp.memlocs))
    used = rows[sp.span_hi >= 0]
    moved = 0
    if len(used):
        edges = buckets(sp, used)
        occ = np.zeros((len(edges) - 1, nbands, nbanks), dtype=bool)
        geo = {}
        for e in used.tolist():
            m = int(sp.memlocs[e])
            base, nparts = ml.get("base", m), ml.get("nparts", m)
            addr, size = ml.get("addr", m), ml.get("pbytes", m)
            band0, band1 = base >> 5, (base + nparts - 1) >> 5            # get_psum_partition
            bank0, bank1 = addr // PSUM_BANK_BYTES, (addr + max(size, 1) - 1) // PSUM_BANK_BYTES
            b0, b1 = bucket_range(edges, int(sp.span_lo[e]), int(sp.span_hi[e]))
            occ[b0:b1, band0:band1 + 1, bank0:min(bank1, nbanks - 1) + 1] = True   # update_psum_partition
            geo[e] = (band0, band1, bank0, bank1 - bank0 + 1, psum_bank_alignment(size), b0, b1)
        cands = [e for e in used.tolist() if not sp.pinned[e] and len(sp.instances_of(int(sp.memlocs[e]))) >= 2]
        cands.sort(key=lambda e: (int(sp.span_lo[e]), int(sp.memlocs[e])))
        for e in cands:
            log.info("Attempting to find a rotation for %s", fn.strings[ml.get("name", int(sp.memlocs[e]))])

        def next_slot(e: int) -> int | None:
            m = int(sp.memlocs[e])
            band0, band1, bank0, width, align, b0, b1 = geo[e]
            free = np.asarray(~occ[b0:b1, band0:band1 + 1, :].any(axis=(0, 1)))
            s = _search(free, width, align)
            name = fn.strings[ml.get("name", m)]
            if s is None:
                log.info("Cannot Rotate PSUM Bank for %s from start bank %d", name, bank0)
                return None
            occ[b0:b1, band0:band1 + 1, s:s + width] = True
            log.info("Rotating %s from start bank %d picked new range [%d, %d)", name, bank0, s, s + width)
            return s * PSUM_BANK_BYTES + int(ml.get("addr", m)) % PSUM_BANK_BYTES

        first = {e: int(ml.get("addr", int(sp.memlocs[e]))) for e in cands}
        count = {e: len(sp.instances_of(int(sp.memlocs[e]))) for e in cands}
        slots = grow_rings(cands, first, count, nbanks, next_slot)
        for e in cands:
            m = int(sp.memlocs[e])
            if len(slots[e]) < 2:
                continue
            slot_of = ring_of(len(sp.instances_of(m)), nbanks, len(slots[e]))
            mems = [m] + [new_location(fn, m, k, a, bank=a // PSUM_BANK_BYTES) for k, a in enumerate(slots[e]) if k]
            moved += rebind(sp, m, slot_of, mems)
    log.info("PSUM Rotation rotated %d PSUM address for target %d", moved, target)
    return moved


class _Said(logging.LoggerAdapter):
    """A logger that also keeps what it was told at INFO (to say it again)."""

    def __init__(self, log: logging.Logger) -> None:
        super().__init__(log, {})
        self.said: list[tuple[str, tuple]] = []
        self.on = log.isEnabledFor(logging.INFO)

    def info(self, msg, *args, **kwargs) -> None:  # type: ignore[override]
        if self.on:
            self.said.append((msg, args))
            self.logger.info(msg, *args)


def sweeps(fn: Function, arch: Arch, log: logging.Logger, inst: Instances | None = None) -> int:
    """The backend's three sweeps of :func:`psum_rotation` over ``fn`` (no convergence test); instances moved.

    A sweep that moves nothing leaves ``fn`` as it found it (no memory location added), and a sweep is a
    function of ``fn`` alone, so the sweeps after it would move nothing and log the same lines: they are
    not run, their lines are logged again.  A sweep on large_matmul's 1.2M rows costs 0.12 s, and the
    post-schedule pass's three found nothing to move."""
    moved = 0
    for k in range(PSUM_SWEEPS):
        said = _Said(log)
        n_ml, n_sets = len(fn.memlocs), len(fn.sets)
        here = psum_rotation(fn, arch, said, inst=inst if k == 0 else None)
        moved += here
        if here == 0 and len(fn.memlocs) == n_ml and len(fn.sets) == n_sets:
            for _ in range(k + 1, PSUM_SWEEPS):
                for msg, args in said.said:
                    log.info(msg, *args)
            break
    return moved


def _uncovered_psum(fn: Function) -> tuple[bool, Instances | None]:
    """has_uncovered_live_range: some PSUM buffer's instances cannot be followed; and the PSUM instances
    (with group kills) found on the way."""
    if _accessed_unallocated(fn, Mem.PSUM):
        return True, None
    sp = analyse(fn, Mem.PSUM)
    used = np.isin(sp.memlocs, fn.operands["memloc"])
    return bool((used & ~sp.inst.simple[sp.memlocs]).any()), sp.inst


@dataclass(frozen=True)
class AddressRotationPSUM(AddressRotation):
    """address_rotation_psum: rings of PSUM banks for recurring PSUM buffers (attribute 9 without 10)."""

    name = "address_rotation_psum"
    space = "psum"
    mtype = Mem.PSUM

    @staticmethod
    def selects(flags: set[int]) -> bool:
        """Do a function's rotation flags ask for PSUM rotation?"""
        return FnAttr.ROTATE_PSUM_AND_SB in flags and FnAttr.ROTATE_SB_ONLY not in flags

    def _jobs(self, module: Module) -> list[Job]:
        jobs: list[Job] = []
        for k, fn in enumerate(module.functions):
            if not self.selects(self.flags(module, fn)):
                continue
            uncovered, inst = _uncovered_psum(fn)
            if uncovered:
                self.log.info("PSUM rotation of %s skipped: a PSUM live range is not covered", fn.name)
            else:
                jobs.append(Job(k, "psum", inst=inst))
        return jobs

    def _rotate(self, out: Module, jobs: list[Job], known: dict[int, Instances] | None = None) -> dict[int, int]:
        arch = get_arch(out.arch)
        moved: dict[int, int] = {}
        for job in jobs:
            moved[job.fn] = moved.get(job.fn, 0) + sweeps(out.functions[job.fn], arch, self.log,
                                                          (known or {}).pop(job.fn, None))
        return moved
