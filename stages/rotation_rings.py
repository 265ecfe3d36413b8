"""What address rotation moves, and where it may move it.

A buffer that a loop reuses has one *instance* per iteration once the loop
is unrolled (:mod:`tusk.ir.liveness`).  Rotation gives such a buffer a *ring*
of slots -- its original place plus free places of the same shape -- and
binds instance ``j`` to slot ``j mod R``, so successive instances live in
different places and the scheduler may overlap them.

Safety: a memory location (a buffer with all its instances) occupies its box
(partitions x bytes) over its *span*, from its first access (the start of the
function if its first instance reads what was there before) to its last.  A
new slot must be free over the whole span: no other memory location occupies
any of its bytes in any of those instructions.  Memory locations the
analysis cannot follow -- not simple (:mod:`tusk.ir.liveness`), unallocated,
or overlapping another memory location (aliases) -- are *pinned*: they stay
put and occupy their box for the whole function.

A slot other than the original becomes a new memory location (and set),
named ``<name>_rot<k>``, at the slot's address; the accesses of the instances
bound to it are repointed there.

A front end may give every tile a memory location of its own at the same
bytes (tensor_add_spmd's trace: ``sbuf``, ``sbuf.4``, ``sbuf.7`` ... all at
byte 0).  Those aliases would be pinned; :func:`unalias` first repoints the
accesses of such a group -- same box, same tensor type, live one after the
other, each after the first starting with a kill (else its accesses would
join the instance before it) -- to its first member, which then has one
instance per tile and gets a ring like any recurring buffer.  Same bytes, so the meaning cannot change;
a memory location no instruction accesses occupies nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from tusk.ir.errors import PassError
from tusk.ir.liveness import Instances, instances, overlapping_pairs
from tusk.ir.module import Function


@dataclass
class Space:
    """The memory locations of one memory (SB or PSUM) of a function, analysed for rotation."""

    fn: Function
    mtype: int
    inst: Instances
    memlocs: np.ndarray        # rows of the allocated memory locations of this memory
    pinned: np.ndarray         # per entry of ``memlocs``
    span_lo: np.ndarray        # first row of the span (-1: never accessed)
    span_hi: np.ndarray        # last row
    n_rows: int

    def index(self, m: int) -> int:
        return int(np.searchsorted(self.memlocs, m))

    def instances_of(self, m: int) -> np.ndarray:
        return self.inst.of_memloc(m)


def analyse(fn: Function, mtype: int, pinned_names: frozenset[str] | None = None,
            inst: Instances | None = None) -> Space:
    """Instances, pinned memory locations and spans of memory ``mtype`` in ``fn``.

    ``pinned_names`` adds memory locations to pin (a split part passes what
    the whole function decided, since a part does not see all of it).
    ``inst``: ``fn``'s instances with group kills, when already known (:func:`unalias_known`).
    """
    inst = inst if inst is not None else instances(fn, (mtype,), groups=True)
    ml = fn.memlocs
    n = len(fn.insts)
    memlocs = np.flatnonzero((ml["mtype"] == mtype) & (ml["addr"] >= 0)).astype(np.int64)
    pinned = ~inst.simple[memlocs]
    used = memlocs[np.isin(memlocs, fn.operands["memloc"])]
    for a, b in overlapping_pairs(fn, used):
        pinned[np.searchsorted(memlocs, a)] = True
        pinned[np.searchsorted(memlocs, b)] = True
    if pinned_names:
        names = [fn.strings[s] for s in ml["name"][memlocs].tolist()]
        pinned |= np.array([nm in pinned_names for nm in names], dtype=bool)
    lo = np.full(len(memlocs), -1, np.int64)
    hi = np.full(len(memlocs), -1, np.int64)
    if len(inst):
        k = np.searchsorted(memlocs, inst.i_memloc)
        first = np.where(inst.i_live_in, 0, inst.i_first)
        lo_i = np.full(len(memlocs), np.iinfo(np.int64).max, np.int64)
        np.minimum.at(lo_i, k, first)
        np.maximum.at(hi, k, inst.i_last)
        lo = np.where(hi >= 0, lo_i, -1)
    lo[pinned] = 0
    hi[pinned] = max(n - 1, 0)
    return Space(fn, mtype, inst, memlocs, pinned, lo, hi, n)


def buckets(space: Space, rows: np.ndarray) -> np.ndarray:
    """Time-bucket edges: every span boundary of the given memory-location entries (compressed time)."""
    lo, hi = space.span_lo[rows], space.span_hi[rows]
    used = hi >= 0
    return np.unique(np.concatenate([lo[used], hi[used] + 1, [0, space.n_rows + 1]]))


def bucket_range(edges: np.ndarray, lo: int, hi: int) -> tuple[int, int]:
    """Buckets [b0, b1) covering rows [lo, hi]."""
    b0 = int(np.searchsorted(edges, lo, side="right")) - 1
    b1 = int(np.searchsorted(edges, hi + 1, side="left"))
    return max(b0, 0), max(b1, b0 + 1)


def grow_rings(cands: list[int], first: dict[int, int], count: dict[int, int], period: int,
               next_slot: Callable[[int], int | None]) -> dict[int, list[int]]:
    """Slot addresses of each candidate's ring, starting with its own address ``first[e]``.

    Breadth first: every candidate gets its second slot before any gets a
    third, so one buffer cannot take all the free space; a candidate stops
    growing at ``period`` slots, at its instance count, or when
    ``next_slot(e)`` (which reserves what it returns) finds nothing.
    """
    slots = {e: [first[e]] for e in cands}
    active = list(cands)
    for k in range(1, period):
        still = []
        for e in active:
            if count[e] <= k:
                continue
            a = next_slot(e)
            if a is None:
                continue
            slots[e].append(a)
            still.append(e)
        active = still
    return slots


def ring_of(count: int, period: int, slots: int) -> np.ndarray:
    """Slot of each of ``count`` instances on a ring of ``slots`` slots (at most ``period``)."""
    return np.arange(count, dtype=np.int64) % max(1, min(period, slots))


def new_location(fn: Function, m: int, k: int, addr: int, *, bank: int | None = None) -> int:
    """A copy of memory location ``m`` (in a set of its own) at ``addr``: ring slot ``k``."""
    ml, sets = fn.memlocs, fn.sets
    names = {fn.strings[s] for s in ml["name"].tolist()}
    base = fn.strings[ml.get("name", m)]
    while f"{base}_rot{k}" in names:  # an earlier rotation already made this slot name: take the next
        k += 1
    name = f"{base}_rot{k}"
    set_names = {fn.strings[s] for s in sets["name"].tolist()}
    set_name = f"{name}_set"
    while set_name in set_names:
        set_name += "_"
    s = ml.get("set", m)
    row = sets.row(s)
    new_set = fn.add_set(set_name, row["kind"], row["dtype"], fn.value(row["shape"]) or (), tclass=row["tclass"],
                         extra=fn.record(row["extra"]))
    r = ml.row(m)
    return fn.add_memloc(new_set, name, r["mtype"], addr=addr, pbytes=r["pbytes"], nparts=r["nparts"], base=r["base"],
                         bank=r["bank"] if bank is None else bank, tensor_id=-1,
                         const_path=fn.string(r["const_path"]), extra=fn.record(r["extra"]))


REBIND_FAILED = "success && failed to allocate back to original address range !"


def rebind(space: Space, m: int, slot_of: list[int] | np.ndarray, slot_memlocs: list[int]) -> int:
    """Point the accesses of ``m``'s instances at their slots' memory locations; returns instances moved.

    Slot 0 is ``m`` itself: instances that got no other slot stay bound to the original address, which
    must still be ``m``'s alone -- a ring slot on top of it is the seed's failed re-bind, an error.
    """
    ml = space.fn.memlocs
    a0, size = int(ml.get("addr", m)), int(ml.get("pbytes", m))
    for s in slot_memlocs[1:]:
        a = int(ml.get("addr", s))
        if a < a0 + size and a0 < a + size:
            raise PassError(REBIND_FAILED)
    inst = space.inst
    ids = space.instances_of(m)
    slot = np.asarray(slot_of, dtype=np.int64)
    moving = slot > 0
    if not moving.any():
        return 0
    target = np.full(len(inst), -1, np.int64)
    target[ids[moving]] = np.asarray(slot_memlocs, dtype=np.int64)[slot[moving]]
    sel = np.flatnonzero(target[inst.a_inst] >= 0)
    space.fn.operands["memloc"][inst.a_op[sel]] = target[inst.a_inst[sel]]
    return int(moving.sum())


def first_writer_engine(space: Space, m: int) -> int:
    """Engine of the first instruction that writes ``m`` (-1 if none does)."""
    inst = space.inst
    sel = np.flatnonzero((inst.a_memloc == m) & inst.a_write)
    if not len(sel):
        return -1
    return int(space.fn.insts.get("engine", int(inst.a_row[sel[0]])))


def _starts_with_kill(inst: Instances) -> set[int]:
    """Memory locations whose first access overwrites all of them (a kill as the verifier sees it: no group
    kills), from instances with group kills.  Kills do not change when aliases that never share an
    instruction are merged, so such a member starts an instance of its own in the merged location too."""
    if not len(inst.a_memloc) or inst.a_plain_kill is None:
        return set()
    first = np.flatnonzero(np.concatenate([[True], inst.a_memloc[1:] != inst.a_memloc[:-1]]))  # sorted by memloc
    return set(inst.a_memloc[first[inst.a_plain_kill[first]]].tolist())


def unalias(fn: Function, mtype: int) -> int:
    """Repoint the accesses of aliases that live one after the other to the group's first member (in place;
    see the module docstring); returns how many memory locations lost their accesses."""
    return unalias_known(fn, mtype)[0]


def _spans(inst: Instances) -> dict[int, tuple[int, int]]:
    """Memory location -> (first row, last row) its instances span (a live-in instance from row 0)."""
    if not len(inst.i_memloc):
        return {}
    first = np.where(inst.i_live_in, 0, inst.i_first)
    order = np.argsort(inst.i_memloc, kind="stable")  # instances come by memory location already: a no-op sort
    mem, first, last = inst.i_memloc[order], first[order], inst.i_last[order]
    starts = np.flatnonzero(np.concatenate([[True], mem[1:] != mem[:-1]]))
    lo, hi = np.minimum.reduceat(first, starts), np.maximum.reduceat(last, starts)
    return dict(zip(mem[starts].tolist(), zip(lo.tolist(), hi.tolist())))


def unalias_known(fn: Function, mtype: int, inst: Instances | None = None) -> tuple[int, Instances | None]:
    """:func:`unalias`, and ``fn``'s instances (with group kills) when it left ``fn`` as it was: the
    rotation's analysis (:func:`analyse`) then need not find them again.  ``inst``: those instances, when
    already known (of ``fn``, or of a function with its content)."""
    inst = inst if inst is not None else instances(fn, (mtype,), groups=True)
    if not len(inst):
        return 0, inst
    ml, sets = fn.memlocs, fn.sets
    span = _spans(inst)
    groups: dict[tuple, list[int]] = {}
    for m in sorted(span):
        if not inst.simple[m]:
            continue
        s = int(ml.get("set", m))
        key = (int(ml.get("addr", m)), int(ml.get("base", m)), int(ml.get("nparts", m)), int(ml.get("pbytes", m)),
               int(ml.get("bank", m)), int(sets.get("kind", s)), int(sets.get("dtype", s)), repr(fn.value(sets.get("shape", s))))
        groups.setdefault(key, []).append(m)
    killed = _starts_with_kill(inst)
    target = np.arange(len(ml), dtype=np.int64)
    merged = 0
    for members in groups.values():
        members.sort(key=lambda m: span[m])
        if len(members) < 2 or any(span[a][1] >= span[b][0] for a, b in zip(members, members[1:])):
            continue  # live at the same time: real aliases
        head = members[0]
        for m in members[1:]:
            # a member whose first access is not a kill would join the instance before it (of another member),
            # stretching that live range over whatever else used these bytes in between: it heads a new group
            if m in killed:
                target[m] = head
                merged += 1
            else:
                head = m
    if merged:
        ops = fn.operands["memloc"]
        sel = np.flatnonzero(ops >= 0)
        ops[sel] = target[ops[sel]]
    return merged, None if merged else inst
