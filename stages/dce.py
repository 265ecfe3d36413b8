"""Dead-code elimination after unrolling (FullUnroll's ``dce``).

An instruction is dead when everything it writes is an internal buffer that
nothing reads, not even through another buffer overlapping it in physical
memory (outputs and other non-internal buffers count as read: the outside
sees them), and it has no other effect (registers, control flow, calls,
barriers, DMA to outputs).  Symbolic accesses may reach any block of their
set, so their writers stay and their reads keep the whole set alive.  Removing one can make its producers dead, so
the sweep repeats to a fixpoint.  Outputs of the kernel are never internal,
so what a program computes is unchanged.
"""

from __future__ import annotations

import numpy as np

from tusk.ir.enums import AP_KINDS, LOOP_OPCODES, RNG_OPCODES, Kind, Mem, Op, Role, TensorKind
from tusk.ir.module import Function, distinct
from tusk.stages.deps import accumulator_setters

SIDE_EFFECT_OPS = LOOP_OPCODES | {Op.NKIKernel, Op.NKIKLIRKernel, Op.Call, Op.CoreBarrier, Op.CompareAndBranch,
                                  Op.UnconditionalBranch, Op.RegisterMove, Op.RegisterAlu, Op.TensorLoad,
                                  Op.DMABlock, Op.NoOp}
SIDE_EFFECT_OPS |= RNG_OPCODES  # the engines' random generators: seeding sets them, every draw advances them


def _table(values) -> np.ndarray:
    """A lookup table over the uint8 codes (opcodes, operand kinds): one gather, where ``np.isin``
    sorts."""
    table = np.zeros(256, dtype=bool)
    table[list(values)] = True
    return table


_AP = _table(AP_KINDS)
_SYMBOLIC = _table((Kind.SYMBOLIC, Kind.SYMBOLIC_DIMS))
_SIDE_EFFECT = _table(SIDE_EFFECT_OPS)


def _owners(fn: Function) -> np.ndarray:
    return np.repeat(np.arange(len(fn.insts), dtype=np.int64), fn.insts["nops"].astype(np.int64))


def removable(fn: Function, *, symbolic_writes: bool = False, owner: np.ndarray | None = None) -> np.ndarray:
    """Per instruction: could DCE ever remove it (all its outputs are internal buffers, no side effect)?

    ``symbolic_writes``: count writes through symbolic access patterns as
    removable too (what they become once unrolled); DCE itself does not.
    """
    ins, ops = fn.insts, fn.operands
    n = len(ins)
    owner = _owners(fn) if owner is None else owner
    kind = ops["kind"]
    internal_set = fn.sets["kind"] == TensorKind.Internal
    out_mask = ops["role"] == Role.OUT
    bad_out = out_mask & (~_AP[kind] | ~internal_set[fn.memlocs["set"][np.maximum(ops["memloc"], 0)]])
    if not symbolic_writes:
        # a symbolic access may reach any block of its set: its writer stays
        bad_out |= out_mask & _SYMBOLIC[kind]
    out_internal = np.ones(n, dtype=bool)  # every output is an internal buffer
    out_internal[owner[bad_out]] = False
    has_out = np.zeros(n, dtype=bool)
    has_out[owner[out_mask]] = True
    keep = _SIDE_EFFECT[ins["opcode"]]
    setters = accumulator_setters(fn)
    if len(setters):  # an accumulating instruction also sets its engine's reduce registers, read later
        keep = keep.copy()
        keep[setters] = True
    return out_internal & has_out & ~keep


def dce(fn: Function) -> tuple[Function, int]:
    """``fn`` without its dead instructions, and how many were removed."""
    ins, ops = fn.insts, fn.operands
    n = len(ins)
    if n == 0:
        return fn, 0
    owner = _owners(fn)
    candidate = removable(fn, owner=owner)
    if not candidate.any():
        return fn, 0
    is_ap = _AP[ops["kind"]]
    memloc = ops["memloc"]
    internal_set = fn.sets["kind"] == TensorKind.Internal
    out_mask = ops["role"] == Role.OUT
    # symbolic reads count for every memloc of their set
    symbolic = _SYMBOLIC[ops["kind"]]
    overlap = _overlap_matrix(fn)
    mset = fn.memlocs["set"]
    observable = ~internal_set[mset]  # outputs, inputs, consts: what the outside sees
    alive = np.ones(n, dtype=bool)
    reads = (ops["role"] != Role.OUT) & is_ap
    out_ap = out_mask & is_ap
    while True:
        live = alive[owner]
        live_reads = reads & live
        read_memlocs = observable.copy()
        read_memlocs[memloc[live_reads]] = True
        sym_sets = distinct(mset[memloc[live_reads & symbolic]])
        read_memlocs |= np.isin(mset, sym_sets)
        touched = np.asarray(overlap[:, read_memlocs].any(axis=1)) if read_memlocs.any() else \
            np.zeros(len(fn.memlocs), bool)
        # a candidate stays alive if one of its outputs lands in (or overlaps) something read
        out_rows = np.flatnonzero(out_ap & live & candidate[owner])
        needed = np.zeros(n, dtype=bool)
        needed[owner[out_rows[touched[memloc[out_rows]]]]] = True
        dead = candidate & alive & ~needed
        if not dead.any():
            break
        alive &= ~dead
    removed = int((~alive).sum())
    if not removed:
        return fn, 0
    return fn.take_insts(np.flatnonzero(alive)), removed


def _overlap_matrix(fn: Function) -> np.ndarray:
    """overlap[a, b]: memory locations a and b share at least one byte."""
    ml = fn.memlocs
    m = len(ml)
    mtype, addr, pbytes = ml["mtype"], ml["addr"], ml["pbytes"]
    base, nparts = ml["base"], ml["nparts"]
    same = np.eye(m, dtype=bool)
    alloc = addr >= 0
    a_lo, a_hi = addr[:, None], (addr + pbytes)[:, None]
    b_lo, b_hi = addr[None, :], (addr + pbytes)[None, :]
    bytes_meet = (a_lo < b_hi) & (b_lo < a_hi)
    parts_meet = (base[:, None] < (base + nparts)[None, :]) & (base[None, :] < (base + nparts)[:, None])
    onchip = np.isin(mtype, (Mem.SB, Mem.PSUM))
    space = mtype[:, None] == mtype[None, :]
    both = alloc[:, None] & alloc[None, :]
    meet = space & both & bytes_meet & np.where(onchip[:, None], parts_meet, True)
    return same | meet
