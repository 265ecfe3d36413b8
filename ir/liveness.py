"""Live ranges of on-chip memory locations: the *instances* (webs) of a buffer.

A memory location that a loop reuses holds one value per iteration.  After
unrolling, every iteration's value is an *instance*: it starts with a write
that overwrites the whole memory location (a *kill*) and lasts until its last
access before the next kill.  Address rotation moves instances; the verifier
checks that two memory locations do not overlap while both are live.

A write is a kill when it

* covers every element of the memory location exactly once (offset 0 and a
  pattern that enumerates ``[0, capacity)``),
* is done by an instruction that overwrites without reading the old value
  (a read-modify-write -- a matmul accumulating into PSUM, a CCE DMA, an
  Activation accumulating, a predicated copy -- joins the instance it
  updates), and
* is unpredicated, and its instruction does not read the same memory
  location (an in-place operation is one instance: the check_no_in_place
  guard).

Accesses before a memory location's first kill form instance 0; if it reads,
it reads what was there before the function (*live-in*).

With ``groups=True`` (address rotation asks for it), a *group kill* starts an
instance too: a write that would be a kill but covers only part of the
location (one 1-bank matmul half of a 2-bank PSUM tile, say), when the
location's next accesses overwrite the rest the same way before anything
reads an element not yet overwritten (:func:`group_kills`).

Only *simple* memory locations get instances: allocated SB/PSUM locations
whose every access is a physical access pattern (no symbolic, register or
dynamic addressing) outside loop bodies, in a function without branches or
kernel calls.
The others are reported so that callers can treat them as fixed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tusk.ir.columns import one_of
from tusk.ir.enums import DTYPE_SIZE_ARRAY, OPCODE_BY_NAME, READ_ACCUMULATOR_OPCODES, Kind, Mem, Op, Role
from tusk.ir.errors import InputError
from tusk.ir.module import Function, concat_ranges

BRANCHES = (Op.CompareAndBranch, Op.UnconditionalBranch)
# instructions whose output overwrites every element they address (unless an attribute says it accumulates):
# the interpreter (sim.ops, sim.ops_isa) writes their outputs without reading what the outputs held.  An
# Activation's ``acc`` is its engine's reduce registers, not its output (tusk.sim.accumulators)
KILLING = frozenset({Op.DMACopy, Op.Load, Op.Save, Op.TensorCopy, Op.GenericCopy, Op.TensorTensor, Op.TensorScalar,
                     Op.TensorScalarPtr, Op.Activation, Op.TensorReduce, Op.Matmult, Op.Memset, Op.Iota,
                     Op.TensorSave, 18,  # 18: DMA
                     # the select, sort, gather and shuffle family, as NKI kernels write fresh tiles with them
                     Op.TensorScalarAffineSelect, Op.Select, Op.Max, Op.Gather, Op.Exponential,
                     *(OPCODE_BY_NAME[n] for n in ("RangeSelect", "StreamTranspose", "MaxIndex", "MatchReplace",
                                                   "MaxIndexAndMatchReplace", "GetSequenceBounds",
                                                   "StreamShuffle")), *READ_ACCUMULATOR_OPCODES})
STREAM_SHUFFLE = OPCODE_BY_NAME["StreamShuffle"]


@dataclass
class Instances:
    """Accesses grouped into instances.  Per access (sorted by memloc, row, read before write):
    ``memloc``, ``row``, ``write``, ``op`` (operand row), ``inst`` (instance id).  Per instance:
    ``memloc``, ``first``/``last`` access rows, ``first_write`` (-1: none), ``last_read`` (-1: none),
    ``live_in``, ``kill`` (it starts with a kill).  Per memory location: ``simple``."""

    a_memloc: np.ndarray
    a_row: np.ndarray
    a_write: np.ndarray
    a_op: np.ndarray
    a_inst: np.ndarray
    i_memloc: np.ndarray
    i_first: np.ndarray
    i_last: np.ndarray
    i_first_write: np.ndarray
    i_last_read: np.ndarray
    i_live_in: np.ndarray
    i_kill: np.ndarray
    simple: np.ndarray
    a_plain_kill: np.ndarray | None = None  # per access: a kill without group kills (``groups`` only)

    def __len__(self) -> int:
        return len(self.i_memloc)

    def of_memloc(self, m: int) -> np.ndarray:
        """Instance ids of memory location ``m``, in program order (instances are numbered by memory location,
        then row: a binary search, not a scan -- the rotation asks once per candidate, 0.3 ms a scan on
        large_matmul)."""
        lo, hi = np.searchsorted(self.i_memloc, [m, m + 1])
        return np.arange(lo, hi, dtype=np.int64)


def full_cover(pattern, offset: int, capacity: int) -> bool:
    """Does ``offset + sum(i_k * step_k)`` enumerate ``[0, capacity)`` exactly once?"""
    if offset != 0:
        return False
    dims = sorted((int(s), int(n)) for s, n in pattern if n != 1)
    if any(n <= 0 for _, n in dims):
        return False
    expect = 1
    for s, n in dims:
        if s != expect:
            return False
        expect *= n
    return expect == capacity


def _rmw(fn: Function, row: int) -> bool:
    """Does the instruction's write read the old value (accumulate), whatever it covers?"""
    opc = int(fn.insts.get("opcode", row))
    if opc not in KILLING:
        return True
    attrs = fn.record(fn.insts.get("attrs", row))
    if opc == Op.Matmult:
        flag = attrs.get("accumulation_flag", 0)
        return not (isinstance(flag, (int, float)) and not isinstance(flag, bool) and flag == 0) and flag is not False
    if opc in (Op.DMACopy, 18):
        # CCE with constants is a DMA compute over its inputs (nisa.dma_compute): it only writes its output;
        # a DMA that skips out-of-bounds parts (oob_is_err false, addressed at run time) may leave its
        # destination, or rows of it, as they were
        return (attrs.get("mode") == "CCE" and "constants" not in attrs) or \
            attrs.get("dst_rmw_op") not in (None, "", "bypass") or attrs.get("oob_is_err", True) is False
    if opc == STREAM_SHUFFLE:  # a partition whose mask entry is 255 (or missing) keeps its value
        mask = attrs.get("mask", ())
        return not isinstance(mask, (list, tuple)) or len(mask) < 32 or any(m == 255 for m in mask)
    return False


def _groups(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(index of an element of each group, group of every element) for the distinct values of ``key`` (an
    integer array), groups in ascending key order.  Any element stands for its group (callers
    evaluate a function of the key).  Keys in a range not much wider than their count (attribute records,
    opcodes, patterns) are grouped through a table indexed by key, in linear time; others by a sort (numpy's
    quicksort: 3x its stable sort on millions of int64)."""
    if not len(key):
        return np.zeros(0, np.int64), np.zeros(0, np.int32)
    lo = int(key.min())
    span = int(key.max()) - lo + 1
    if span <= max(1 << 12, 2 * len(key)):  # the table costs about what the keys do
        k = key - lo if lo else key
        pos = np.full(span, -1, dtype=np.int64)
        pos[k] = np.arange(len(k), dtype=np.int64)  # an element of each key (the last one written)
        present = pos >= 0
        rank = np.cumsum(present.view(np.uint8), dtype=np.int32) - 1
        return pos[present], rank[k]
    order = np.argsort(key)
    ks = key[order]
    new = np.ones(len(ks), dtype=bool)
    new[1:] = ks[1:] != ks[:-1]
    gid = np.cumsum(new.view(np.uint8), dtype=np.int32) - 1
    back = np.empty(len(ks), dtype=np.int32)
    back[order] = gid
    return order[new], back


def _operand_rows(ins, nops: np.ndarray, n_operands: int) -> tuple[np.ndarray | None, np.ndarray]:
    """(the operand rows of the instructions in order, or None when that is every row of the table in
    table order -- how builders and the loaders lay it out --; the instruction of each)."""
    owner = np.repeat(np.arange(len(ins), dtype=np.int64), nops)
    starts = ins["ops"]
    if len(owner) == n_operands and (not len(starts) or int(starts[0]) == 0) and \
            np.array_equal(starts[1:], np.cumsum(nops[:-1])):
        return None, owner
    return concat_ranges(starts, nops), owner


def _access_order(a_memloc: np.ndarray, a_row: np.ndarray, a_write: np.ndarray, n_ml: int, n: int) -> np.ndarray:
    """The permutation that sorts accesses by (memory location, row, read before write).  Accesses come in
    row order; when every instruction lists its reads before its writes, a stable sort by memory location
    alone keeps the rest, and on a small-integer key numpy's stable sort is a radix sort (7x)."""
    write_then_read = (a_row[1:] == a_row[:-1]) & a_write[:-1] & ~a_write[1:]
    if n_ml <= np.iinfo(np.uint16).max and not write_then_read.any():
        return np.argsort(a_memloc.astype(np.uint16), kind="stable")
    return np.argsort((a_memloc * (n + 1) + a_row) * 2 + a_write, kind="stable")


def _at_instance_ends(ni: int, inst: np.ndarray, rows: np.ndarray, first: bool, missing: int) -> np.ndarray:
    """Per instance, the row of its first (or last) entry among ``inst`` (nondecreasing instance ids, one per
    access of a kind, in access order); ``missing`` where it has none."""
    out = np.full(ni, missing, dtype=np.int64)
    if len(inst):
        edge = np.empty(len(inst), dtype=bool)
        if first:
            edge[0] = True
            np.not_equal(inst[1:], inst[:-1], out=edge[1:])
        else:
            edge[-1] = True
            np.not_equal(inst[:-1], inst[1:], out=edge[:-1])
        out[inst[edge]] = rows[edge]
    return out


def instances(fn: Function, spaces=(Mem.SB, Mem.PSUM), groups: bool = False) -> Instances:
    """The instances of every simple memory location of ``fn`` in ``spaces`` (``groups``: group kills
    start instances too)."""
    ins, ops, ml = fn.insts, fn.operands, fn.memlocs
    n, n_ml = len(ins), len(ml)
    nops = ins["nops"].astype(np.int64)
    rows, owner = _operand_rows(ins, nops, len(ops))
    kind = ops["kind"] if rows is None else ops["kind"][rows]
    m = (ops["memloc"] if rows is None else ops["memloc"][rows]).astype(np.int64)
    if len(m) and int(m.min()) < -1:
        m = np.maximum(m, -1)
    # per memory location and one entry past them, which "none" (-1) indexes: a gather per operand where a
    # mask and a gather of the masked ones cost twice as much (8 of 140 ms on large_matmul's SB accesses)
    in_space = np.zeros(n_ml + 1, dtype=bool)
    in_space[:n_ml] = one_of(ml["mtype"], spaces)
    on = one_of(kind, (Kind.PHYSICAL, Kind.SYMBOLIC, Kind.REGISTER_AP)) & in_space[m]
    simple = in_space[:n_ml] & (ml["addr"] >= 0)
    # not simple: non-physical or dynamic accesses, accesses inside loop bodies, functions with branches
    exact = (kind == Kind.PHYSICAL) & ((ops["dyn"] if rows is None else ops["dyn"][rows]) < 0)
    in_loop = fn.blocks["parent"][ins["block"]] >= 0 if len(ins) else np.zeros(0, dtype=bool)
    bad = on & (~exact | in_loop[owner])
    simple[m[bad]] = False
    if len(ins) and one_of(ins["opcode"], BRANCHES + (Op.NKIKernel,)).any():
        simple[:] = False  # control flow, or a callee whose scratch buffers live in the same memories
    sel = np.flatnonzero(on & np.append(simple, False)[m]) if n_ml else np.zeros(0, np.int64)
    a_memloc, a_row, a_op = m[sel], owner[sel], (sel if rows is None else rows[sel])
    a_write = (ops["role"][a_op] == Role.OUT)
    # the operand columns a kill needs are read here, in operand order, and sorted with the accesses: a gather
    # in sorted (memory location) order jumps about the table (17 of 135 ms on large_matmul's SB accesses)
    may_kill = np.flatnonzero(a_write & (ops["offset"][a_op] == 0))
    w_key = np.full(len(a_op), -1, dtype=np.int64)  # (pattern + 1) * 64 + dtype + 1, of the writes at offset 0
    w_key[may_kill] = (ops["pattern"][a_op[may_kill]].astype(np.int64) + 1) * 64 + ops["dtype"][a_op[may_kill]] + 1
    order = _access_order(a_memloc, a_row, a_write, n_ml, n)
    a_memloc, a_row, a_op, a_write, w_key = a_memloc[order], a_row[order], a_op[order], a_write[order], w_key[order]
    na = len(a_op)
    # ---- kills: full-cover writes (only offset 0 can cover), by distinct (pattern, capacity)
    kill = np.zeros(na, dtype=bool)
    w = np.flatnonzero(w_key >= 0)
    if len(w):
        size = DTYPE_SIZE_ARRAY[w_key[w] % 64 - 1]
        mw = a_memloc[w]
        cap = np.where(ml["mtype"][mw] == Mem.DRAM, ml["pbytes"][mw] // size,
                       (ml["pbytes"][mw] // size) * ml["nparts"][mw]).astype(np.int64)
        pat = w_key[w] // 64 - 1
        first, back = _groups((pat + 1) * (int(cap.max()) + 1) + cap)  # pat >= -1, cap >= 0: one key a pair
        vals = np.array([full_cover(fn.patterns[int(pat[f])] if pat[f] >= 0 else (), 0, int(cap[f]))
                         for f in first.tolist()], dtype=bool)
        kill[w] = vals[back]
    cand = np.flatnonzero(kill)
    if len(cand):
        r = a_row[cand]
        pred = ins["pred"][r] >= 0
        # read-modify-write depends on the opcode and the attribute record only
        first, back = _groups(ins["attrs"][r].astype(np.int64) * 256 + ins["opcode"][r])
        rmw = np.array([_rmw(fn, int(r[f])) for f in first.tolist()], dtype=bool)[back]
        # the same instruction also reads this memory location (the access just before, reads sort first) or
        # writes it again (the access just after): in place, not a kill
        same = (a_memloc[1:] == a_memloc[:-1]) & (a_row[1:] == a_row[:-1])
        prev = np.concatenate([[False], same])
        nxt = np.concatenate([same, [False]])
        kill[cand] = ~(pred | rmw | prev[cand] | nxt[cand])
    plain = kill.copy() if groups else None
    if groups and na:
        kill |= group_kills(fn, a_memloc, a_row, a_write, a_op, kill)
    # ---- instances: a new one at each kill and at each memory location's first access
    start = kill.copy()
    if na:
        start[0] = True
        start[1:] |= a_memloc[1:] != a_memloc[:-1]
    a_inst = np.cumsum(start) - 1
    firsts = np.flatnonzero(start)
    ni = len(firsts)
    lasts = np.concatenate([firsts[1:], [na]]) - 1 if ni else firsts
    i_memloc = a_memloc[firsts]
    i_first = a_row[firsts]
    i_last = a_row[lasts]   # rows increase within an instance
    # rows do not decrease within an instance: its first write (read) is its earliest, its last read its latest
    w_at = np.flatnonzero(a_write)
    r_at = np.flatnonzero(~a_write)
    i_first_write = _at_instance_ends(ni, a_inst[w_at], a_row[w_at], first=True, missing=-1)
    i_last_read = _at_instance_ends(ni, a_inst[r_at], a_row[r_at], first=False, missing=-1)
    # live-in: an instance that does not start with a kill and reads before (or without) writing
    first_read = _at_instance_ends(ni, a_inst[r_at], a_row[r_at], first=True, missing=np.iinfo(np.int64).max)
    starts_with_kill = kill[firsts]
    i_live_in = ~starts_with_kill & (i_last_read >= 0) & ((i_first_write < 0) | (first_read <= i_first_write))
    return Instances(a_memloc, a_row, a_write, a_op, a_inst, i_memloc, i_first, i_last, i_first_write, i_last_read,
                     i_live_in, starts_with_kill, simple, plain)


def boxes(fn: Function, memlocs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(first partition, end partition, first byte, end byte) of each memory location."""
    ml = fn.memlocs
    base = ml["base"][memlocs].astype(np.int64)
    addr = ml["addr"][memlocs].astype(np.int64)
    return base, base + ml["nparts"][memlocs], addr, addr + ml["pbytes"][memlocs]


def overlapping_pairs(fn: Function, memlocs: np.ndarray) -> list[tuple[int, int]]:
    """Pairs (a, b), a < b, of the given memory locations whose boxes overlap in the same memory."""
    memlocs = np.asarray(memlocs, dtype=np.int64)
    if len(memlocs) < 2:
        return []
    mtype = fn.memlocs["mtype"][memlocs]
    p0, p1, b0, b1 = boxes(fn, memlocs)
    out: list[tuple[int, int]] = []
    order = np.argsort(b0, kind="stable")
    # sweep by first byte: only candidates that start before this one ends can overlap
    ends = b1[order]
    starts = b0[order]
    for k in range(len(order)):
        j = k + 1
        hi = np.searchsorted(starts, ends[k], side="left")
        if hi <= j:
            continue
        cand = order[j:hi]
        a = order[k]
        hit = cand[(mtype[cand] == mtype[a]) & (p0[cand] < p1[a]) & (p0[a] < p1[cand]) & (b0[cand] < b1[a])
                   & (b0[a] < b1[cand])]
        for c in hit.tolist():
            x, y = int(memlocs[a]), int(memlocs[c])
            out.append((min(x, y), max(x, y)))
    return sorted(set(out))



def _clean_writes(fn: Function, a_memloc, a_row, a_write) -> np.ndarray:
    """Writes that overwrite what they address without reading it: not read-modify-write, unpredicated,
    and their instruction does not also access the memory location (the kill conditions but the cover)."""
    ins = fn.insts
    clean = np.zeros(len(a_row), dtype=bool)
    w = np.flatnonzero(a_write)
    if not len(w):
        return clean
    r = a_row[w]
    first, back = _groups(ins["attrs"][r].astype(np.int64) * 256 + ins["opcode"][r])
    rmw = np.array([_rmw(fn, int(r[f])) for f in first.tolist()], dtype=bool)[back]
    same = (a_memloc[1:] == a_memloc[:-1]) & (a_row[1:] == a_row[:-1])
    prev = np.concatenate([[False], same])
    nxt = np.concatenate([same, [False]])
    clean[w] = ~((ins["pred"][r] >= 0) | rmw | prev[w] | nxt[w])
    return clean


MAX_ELEMENTS = 1 << 28  # elements of one access listed one by one (2 GiB of indices): an SBUF partition has 192 KiB


def pattern_elements(fn: Function, pattern: int, offset: int) -> np.ndarray:
    """Element indices ``offset + sum(i_k * step_k)`` of pattern ``pattern`` of ``fn`` (-1: the one element)."""
    dims = fn.patterns[pattern] if pattern >= 0 else ()
    n = math.prod(max(int(num), 0) for _, num in dims)
    if n > MAX_ELEMENTS:
        raise InputError(f"function {fn.name}: an access pattern {[list(d) for d in dims]} of {n:,} elements, "
                         f"more than an access can address")
    idx = np.array([offset], dtype=np.int64)
    for step, num in dims:
        idx = (idx[:, None] + int(step) * np.arange(max(int(num), 0), dtype=np.int64)[None, :]).ravel()
    return idx


ATOM_WORK = 1 << 31   # cells x slices above which each cell stays its own atom (atoms would cost more to find)
ATOM_CELLS = 1 << 23  # ... or cells (8 bytes a cell, four times that while np.unique renumbers them)


def atoms(slices: list[np.ndarray], n_cells: int) -> tuple[list[np.ndarray], int]:
    """(per slice, the atoms it touches; how many atoms) of ``slices``, lists of cells in ``[0, n_cells)``:
    an atom is a set of cells every slice touches all of or none of (the cells no slice touches are one).
    Each slice halves the atoms it cuts (an id doubles and takes one bit), renumbered before the ids
    outgrow 63 bits.  Exact: two cells share an atom only if every slice treats them alike."""
    if not n_cells or n_cells > ATOM_CELLS or len(slices) * n_cells > ATOM_WORK:
        return slices, n_cells
    atom = np.zeros(n_cells, dtype=np.int64)
    room = max(1, 62 - n_cells.bit_length())
    for k, cells in enumerate(slices):
        atom <<= 1
        atom[cells] |= 1
        if k % room == room - 1:
            atom = np.unique(atom, return_inverse=True)[1].reshape(-1).astype(np.int64)
    ids, atom = np.unique(atom, return_inverse=True)
    atom = atom.reshape(-1)
    return [_marked(atom[cells], len(ids)) for cells in slices], len(ids)


def _marked(ids: np.ndarray, n: int) -> np.ndarray:
    """The distinct values of ``ids`` (in ``[0, n)``), sorted (np.unique hashes: 17 ms a slice of 130k)."""
    mark = np.zeros(n, dtype=bool)
    mark[ids] = True
    return np.flatnonzero(mark)


def _elements_of(fn: Function, ops: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
    """(the element lists of the distinct (pattern, offset) of the operand rows ``ops``, the one of each row):
    an unrolled loop reads the same slice of a tile again and again (24 of the 118 s a 123k-instruction
    attention kernel took to build were spent making the same element lists)."""
    key = np.stack([fn.operands["pattern"][ops], fn.operands["offset"][ops]], axis=1).astype(np.int64)
    slices, of_row = np.unique(key, axis=0, return_inverse=True)
    return [pattern_elements(fn, int(p), int(o)) for p, o in slices.tolist()], of_row.reshape(-1)


def group_kills(fn: Function, a_memloc, a_row, a_write, a_op, kill) -> np.ndarray:
    """Accesses that start a group kill: a clean write (:func:`_clean_writes`) from which the memory
    location's accesses, in order, overwrite every element by clean writes before any access reads
    (a read, or a read-modify-write) an element not yet overwritten.  Then nothing from before the write
    is read again, so an instance may start there.  Memory locations accessed with more than one data type
    are left alone (their elements are not one index space)."""
    out = np.zeros(len(a_op), dtype=bool)
    clean = _clean_writes(fn, a_memloc, a_row, a_write) & ~kill
    if not clean.any():
        return out
    ml, ops = fn.memlocs, fn.operands
    bounds = np.flatnonzero(np.concatenate([[True], a_memloc[1:] != a_memloc[:-1], [True]]))
    for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        if not clean[lo:hi].any():
            continue
        m = int(a_memloc[lo])
        dts = np.unique(ops["dtype"][a_op[lo:hi]])
        if len(dts) != 1:
            continue
        size = int(DTYPE_SIZE_ARRAY[dts[0]])
        cap = int(ml.get("pbytes", m)) // size * int(ml.get("nparts", m))
        if cap > MAX_ELEMENTS:  # more than any SBUF or PSUM tile holds: found no group kill (the safe answer)
            continue
        slices, of_access = _elements_of(fn, a_op[lo:hi])
        if any(len(e) and (e.min() < 0 or e.max() >= cap) for e in slices):
            continue
        # on atoms, not elements (an element's coverage is its atom's): 21k accesses of one tile over its 524k
        # elements took 2.3 s, in 41 distinct slices
        units, n_units = atoms(slices, cap)
        out[lo:hi] = _group_starts([units[k] for k in of_access.tolist()], clean[lo:hi], n_units)
    return out


_NEVER = np.iinfo(np.int64).max


def _group_starts(elems: list[np.ndarray], clean: np.ndarray, cap: int) -> np.ndarray:
    """Per access of one memory location (in order; ``elems`` the elements each addresses), whether a group
    kill starts there: it is clean, and from it the clean writes cover all ``cap`` elements (first at ``T(c)``)
    before any other access reaches an element they have not yet covered.

    In linear passes, not a scan per candidate (one per clean write, each to the end of the group: 2.9 of the
    3.4 s address_rotation_sb#2 took on a 15k-instruction attention kernel, 90 s at 123k): ``L(j)``, for an
    access ``j`` that is not a clean write, is the latest start from which the clean writes before ``j`` cover
    its elements (forward, the last clean write of each element); ``T(c)`` grows with ``c`` (a later start has
    fewer writes), so two pointers find it with a count of covering writes per element; a start ``c`` holds
    when every ``j`` in ``[c, T(c))`` has ``L(j) >= c`` (a minimum over the window, from a sparse table)."""
    n = len(elems)
    starts = np.zeros(n, dtype=bool)
    last = np.full(cap, -1, np.int64)
    reach = np.full(n, _NEVER, np.int64)  # L(j); clean writes never stop a group
    for k, e in enumerate(elems):
        if clean[k]:
            last[e] = k
        elif len(e):
            reach[k] = last[e].min()
    uniq = []  # the clean writes' elements, once each
    distinct: dict[int, np.ndarray] = {}  # by list: the accesses of one slice share their element list
    for k, e in enumerate(elems):
        if clean[k] and id(e) not in distinct:
            distinct[id(e)] = _distinct(e)
        uniq.append(distinct[id(e)] if clean[k] else e[:0])
    count = np.zeros(cap, np.int64)
    uncovered, t = cap, -1
    done = np.full(n, _NEVER, np.int64)  # T(c)
    for c in range(n):
        while uncovered and t + 1 < n:
            t += 1
            if clean[t]:
                e = uniq[t]
                uncovered -= int(np.count_nonzero(count[e] == 0))
                count[e] += 1
        if uncovered:
            break  # the writes from c on never cover everything: nor from any later start
        done[c] = t
        if clean[c]:
            e = uniq[c]
            count[e] -= 1
            uncovered += int(np.count_nonzero(count[e] == 0))
    cand = np.flatnonzero(clean & (done < _NEVER))
    if not len(cand):
        return starts
    first_bad = _window_min(reach, cand, done[cand])
    starts[cand] = first_bad >= cand
    return starts


def _distinct(e: np.ndarray) -> np.ndarray:
    """The elements of ``e`` once each (np.unique's hash table cost 1.3 ms an access of 100k elements)."""
    if len(e) < 2:
        return e
    s = np.sort(e)
    keep = s[1:] != s[:-1]
    return s if keep.all() else s[np.concatenate([[True], keep])]


def _window_min(values: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``min(values[lo[k]:hi[k]])`` per k (an empty window: no bound), by a sparse table."""
    table = [values]
    width = 1
    while 2 * width <= len(values):
        prev = table[-1]
        table.append(np.minimum(prev[:-width], prev[width:]))
        width *= 2
    out = np.full(len(lo), _NEVER, np.int64)
    size = hi - lo
    some = size > 0
    level = np.zeros(len(lo), np.int64)
    level[some] = np.floor(np.log2(size[some])).astype(np.int64)
    for k in np.unique(level[some]).tolist():
        sel = some & (level == k)
        row = table[k]
        out[sel] = np.minimum(row[lo[sel]], row[hi[sel] - (1 << k)])
    return out
