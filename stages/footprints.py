"""The boxes of memory every instruction of a straight-line function reads and writes, and their cells.

:func:`footprints` gives them; :func:`cells` cuts the boxes of one space into the pieces every byte of
which has the same access history; the edges built on them are :mod:`~tusk.stages.deps`'s.

Footprints.  Every access-pattern operand becomes one box in one memory
*space*: rows ``[p_lo, p_hi]`` x bytes ``[b_lo, b_hi)``.  Spaces are SBUF,
PSUM, the shared DRAM space (allocated DRAM locations), one private space
per unallocated DRAM location, and one space per register.  In SBUF/PSUM a
row is a partition; a private DRAM buffer is viewed as the rows of its
tensor (``tensor_shape[1:]`` bytes per row); the shared DRAM space is one
linear row.

* Physical operands: the box is exact for a pattern whose column part stays
  inside a row (every contiguous or row-strided tile the builder and the
  backend write); otherwise the box spans the element range's rows and the
  whole row width.  A strided pattern's box is its bounding box, so two
  interleaved strided accesses are reported as conflicting (conservative);
  likewise a multi-row tile in the linear shared DRAM space.
* Symbolic operands whose address is a constant are resolved to their
  memory location; other symbolic operands, register-addressed operands and
  operands with dynamic info (runtime offsets, gathers) conflict with their
  whole memory space.  Unallocated SB/PSUM locations count as the whole space.
* Registers: register operands read (ins) or write (outs) their register; a
  register in a symbolic address, a register AP or a dynamic offset is read.
* An ``NKIKernel`` call also reads and writes the whole of SBUF and PSUM
  (the callee's scratch buffers live there).

Reads are ``ins`` and ``indirection_ins``; writes are ``outs``.

Cells: the boxes of one space cut each other into pieces (a box that overlaps no other distinct box is
its own cell), so every byte of a cell has the same access history; an isolated box touched by a single
access cannot order anything and is dropped early.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tusk.ir.arch import PARTITIONS
from tusk.ir.columns import one_of, thaw
from tusk.ir.enums import DTYPE_SIZE_ARRAY, DTYPE_SIZES, LOOP_OPCODES, Kind, Mem, Op, Role
from tusk.ir.errors import TuskError
from tusk.ir.expr import IntRuntimeValue, QuasiAffine, expr_from_json
from tusk.ir.module import Function, _ranges
from tusk.ir.module import distinct as _unique

SPACE_SB, SPACE_PSUM, SPACE_DRAM = 0, 1, 2
WHOLE = 1 << 42  # "every byte" of a space


@dataclass
class Footprints:
    """One row per access: instruction, read (0) / write (1), space and box (rows x bytes),
    sorted by instruction (reads before writes)."""

    inst: np.ndarray
    rw: np.ndarray
    space: np.ndarray
    plo: np.ndarray
    phi: np.ndarray   # inclusive
    blo: np.ndarray
    bhi: np.ndarray   # exclusive

    def __len__(self) -> int:
        return len(self.inst)


def _control_register_reads(fn: Function, lo: int, hi: int) -> list[tuple[int, int]]:
    """(row, register) pairs that loop and branch rows in [lo, hi) read outside their operands:
    a DynamicForLoop's bounds and induction register, a DoWhile's condition."""
    out: list[tuple[int, int]] = []
    opc = fn.insts["opcode"][lo:hi]
    for k in np.flatnonzero(np.isin(opc, list(LOOP_OPCODES))).tolist():
        row = lo + k
        attrs = fn.record(fn.insts.get("attrs", row))
        names: list[str] = []
        ax = attrs.get("DynamicForLoopAxis") or attrs.get("LoopAxis")
        if ax is not None:
            for key in ("lb", "ub", "stride"):
                names += _register_names(ax.get(key))
        for key in ("induction_register", "cond"):
            if isinstance(attrs.get(key), str):
                names.append(attrs[key])
        for name in names:
            r = fn.reg_by_name(name)
            if r >= 0:
                out.append((row, r))
    return out


def _register_names(bound) -> list[str]:
    """Registers a loop bound reads: a register name, or the runtime values of an expression."""
    if isinstance(bound, str):
        return [bound]
    if isinstance(bound, dict) or hasattr(bound, "items"):
        try:
            e = expr_from_json(thaw(bound))
        except TuskError:
            return []
        return [a.reg for a in e.walk() if isinstance(a, IntRuntimeValue)]
    return []


def _pattern_arrays(fn: Function) -> tuple[np.ndarray, np.ndarray]:
    """Per pattern id: steps and counts padded to the widest pattern (count 1 = no dim)."""
    pats = fn.patterns.items
    width = max([len(p) for p in pats] + [1])
    steps = np.zeros((max(len(pats), 1), width), dtype=np.int64)
    nums = np.ones((max(len(pats), 1), width), dtype=np.int64)
    for k, p in enumerate(pats):
        for d, (s, n) in enumerate(p):
            steps[k, d], nums[k, d] = s, n
    return steps, nums


CHUNK = 1 << 15  # instructions per chunk: keeps the per-operand temporaries in cache


def footprints(fn: Function) -> Footprints:
    """The boxes every instruction of ``fn`` reads and writes (see the module docstring)."""
    n = len(fn.insts)
    tables = _pattern_arrays(fn) + _row_geometry(fn)
    chunks = [_footprints(fn, lo, min(lo + CHUNK, n), tables) for lo in range(0, n, CHUNK)]
    if not chunks:
        z = np.zeros(0, np.int64)
        return Footprints(z, z.astype(np.int8), z, z, z, z, z)
    fp = Footprints(*(np.concatenate([getattr(c, f) for c in chunks])
                      for f in ("inst", "rw", "space", "plo", "phi", "blo", "bhi")))
    return _with_loop_bodies(fn, fp)


def _with_loop_bodies(fn: Function, fp: Footprints) -> Footprints:
    """``fp`` where every kept loop row also accesses what its body (nested loops included) accesses.

    The loop row is the last row of the region before the loop, and the body runs after it starts: a DMA
    of that region still in flight when the loop starts must be waited for when the body reads what it
    writes (Flow), writes it too (Output) or overwrites what it reads (Anti).  Edges stay inside a region,
    so these accesses order the loop only against the rows before it."""
    loops = np.isin(fn.insts["opcode"], list(LOOP_OPCODES))
    if not loops.any() or not len(fp):
        return fp
    owner = fn.blocks["parent"][fn.insts["block"]].astype(np.int64)  # loop row owning each row's block
    rows = np.arange(len(owner), dtype=np.int64)
    pairs_row, pairs_loop = [], []
    anc = owner
    while (anc >= 0).any():  # one step up the loop nest per round
        inside = anc >= 0
        pairs_row.append(rows[inside])
        pairs_loop.append(anc[inside])
        anc = np.where(inside, owner[np.maximum(anc, 0)], -1)
    r, loop = np.concatenate(pairs_row), np.concatenate(pairs_loop)
    lo, hi = np.searchsorted(fp.inst, r, "left"), np.searchsorted(fp.inst, r, "right")
    acc = _ranges(lo, hi - lo)
    summary = take_accesses(fp, acc)
    summary.inst = np.repeat(loop, hi - lo)
    cols = [np.concatenate([getattr(fp, f), getattr(summary, f)]) for f in FP_FIELDS]
    order = np.argsort(cols[0] * 2 + cols[1], kind="stable")
    return Footprints(*(c[order] for c in cols))


def _footprints(fn: Function, lo: int, hi: int, tables) -> Footprints:
    """Footprints of instructions [lo, hi), sorted by (instruction, read before write)."""
    ins, ops, ml = fn.insts, fn.operands, fn.memlocs
    nops = ins["nops"][lo:hi].astype(np.int64)
    rows = _ranges(ins["ops"][lo:hi], nops)
    owner = np.repeat(np.arange(lo, hi, dtype=np.int64), nops)
    kind = ops["kind"][rows]
    role = ops["role"][rows]
    n_ml = len(ml)
    reg_space0 = 3 + n_ml
    parts: list[tuple] = []  # (inst, rw, space, plo, phi, blo, bhi) array tuples

    def whole(space, inst, rw, rows=None):
        k = len(inst)
        last = np.full(k, PARTITIONS - 1, np.int64) if rows is None else rows - 1
        parts.append((inst, rw, space, np.zeros(k, np.int64), last, np.zeros(k, np.int64), np.full(k, WHOLE, np.int64)))

    def mem_space(m: np.ndarray) -> np.ndarray:
        mt = ml["mtype"][m]
        return np.where(mt == Mem.SB, SPACE_SB, np.where(mt == Mem.PSUM, SPACE_PSUM,
                        np.where(ml["addr"][m] >= 0, SPACE_DRAM, 3 + m))).astype(np.int64)

    # ---- access patterns
    is_ap = one_of(kind, (Kind.PHYSICAL, Kind.SYMBOLIC, Kind.REGISTER_AP, Kind.SYMBOLIC_DIMS))
    rw_all = (role == Role.OUT).astype(np.int8)
    memloc = ops["memloc"][rows].astype(np.int64)
    offset = ops["offset"][rows].astype(np.int64)
    dyn = ops["dyn"][rows]
    exact = is_ap & (kind == Kind.PHYSICAL) & (dyn < 0)

    # Symbolic operands with a constant address become exact; the rest are whole-space.
    sym = np.flatnonzero(is_ap & (kind == Kind.SYMBOLIC))
    # register APs, dynamic physical APs and per-dimension symbolic APs touch their whole location
    vague: list[int] = list(np.flatnonzero(is_ap & ((kind == Kind.REGISTER_AP) | (kind == Kind.SYMBOLIC_DIMS)
                                         | ((kind == Kind.PHYSICAL) & (dyn >= 0)))))
    reg_reads: list[tuple[int, int]] = []  # (inst, register row)
    if len(sym):
        set_of = ml["set"]
        for k in sym.tolist():
            sa = fn.values[int(ops["aux"][rows[k]])]
            reg_reads += [(int(owner[k]), r) for r in _regs_in(fn, sa.offset, sa.block)]
            if sa.offset.is_const and (sa.block is None or sa.block.is_const):
                m = int(memloc[k])
                if sa.block is not None:
                    hits = np.flatnonzero((set_of == set_of[m]) & (ml["tensor_id"] == sa.block.c))
                    if not len(hits):
                        vague.append(k)
                        continue
                    m = int(hits[0])
                memloc[k], offset[k] = m, sa.offset.c
                exact[k] = True
            else:
                vague.append(k)
    for k in np.flatnonzero(is_ap & (kind == Kind.PHYSICAL) & (dyn >= 0)).tolist():
        d = fn.values[int(dyn[k])]
        reg_reads += [(int(owner[k]), r) for e, _ in d.aff_expr for r in _regs_in(fn, e)]
    for k in np.flatnonzero(is_ap & (kind == Kind.REGISTER_AP)).tolist():
        if ops["aux"][rows[k]] >= 0:  # a register_ap may name no register (real dumps)
            reg_reads.append((int(owner[k]), int(ops["aux"][rows[k]])))
    reg_reads += _control_register_reads(fn, lo, hi)

    ex = np.flatnonzero(exact)
    if len(ex):
        parts.append(_exact_boxes(fn, owner[ex], rw_all[ex], memloc[ex], offset[ex],
                                  ops["dtype"][rows[ex]], ops["pattern"][rows[ex]], tables))
    if vague:
        v = np.asarray(sorted(vague), dtype=np.int64)
        mv = memloc[v]
        dram = ml["mtype"][mv] == Mem.DRAM
        whole(mem_space(mv), owner[v], rw_all[v], np.where(dram, tables[3][mv], PARTITIONS))

    # ---- registers
    is_reg = np.flatnonzero(kind == Kind.REGISTER)
    inst_r = np.concatenate([owner[is_reg], np.array([a for a, _ in reg_reads], dtype=np.int64)])
    reg_r = np.concatenate([ops["aux"][rows[is_reg]].astype(np.int64),
                            np.array([r for _, r in reg_reads], dtype=np.int64)])
    rw_r = np.concatenate([rw_all[is_reg], np.zeros(len(reg_reads), np.int8)])
    if len(inst_r):
        k = len(inst_r)
        parts.append((inst_r, rw_r, reg_space0 + reg_r, np.zeros(k, np.int64), np.zeros(k, np.int64),
                      np.zeros(k, np.int64), np.ones(k, np.int64)))

    # ---- kernel calls: the callee's scratch lives in SBUF and PSUM
    calls = lo + np.flatnonzero(ins["opcode"][lo:hi] == Op.NKIKernel).astype(np.int64)
    if len(calls):
        for space in (SPACE_SB, SPACE_PSUM):
            for rw in (0, 1):
                whole(np.full(len(calls), space, np.int64), calls, np.full(len(calls), rw, np.int8))

    if not parts:
        z = np.zeros(0, np.int64)
        return Footprints(z, z.astype(np.int8), z, z, z, z, z)
    cols = [np.concatenate([p[c] for p in parts]) for c in range(7)]
    order = np.argsort(cols[0] * 2 + cols[1], kind="stable")
    return Footprints(*(c[order].astype(np.int8 if k == 1 else np.int64) for k, c in enumerate(cols)))


def _regs_in(fn: Function, *exprs: QuasiAffine | None) -> list[int]:
    out = []
    for e in exprs:
        if e is None:
            continue
        for atom in e.walk():
            if isinstance(atom, IntRuntimeValue):
                r = fn.reg_by_name(atom.reg)
                if r >= 0:
                    out.append(r)
    return out


def _row_geometry(fn: Function) -> tuple[np.ndarray, np.ndarray]:
    """Per memory location: bytes per row and number of rows of its footprint coordinates.

    SB/PSUM: a row is a partition (row bytes = pbytes, 128 rows).  A private
    DRAM buffer is viewed as the rows of its tensor (row bytes = the bytes of
    tensor_shape[1:]), so a 2-D tile of a DRAM tensor is an exact box rather
    than a long linear range; the shared DRAM space stays linear (one row,
    row bytes 0), since memory locations of different shapes share it.
    """
    ml = fn.memlocs
    n = len(ml)
    row_bytes = np.zeros(n, np.int64)
    rows = np.ones(n, np.int64)
    onchip = one_of(ml["mtype"], (Mem.SB, Mem.PSUM))
    row_bytes[onchip] = ml["pbytes"][onchip]
    rows[onchip] = PARTITIONS
    private = np.flatnonzero((ml["mtype"] == Mem.DRAM) & (ml["addr"] < 0))
    sets = ml["set"][private]
    for s in np.unique(sets).tolist():
        shape = tuple(fn.value(fn.sets.get("shape", s)) or ())
        if len(shape) < 2:
            continue
        dsize = DTYPE_SIZES[fn.sets.get("dtype", s)]
        rb = int(np.prod(shape[1:], dtype=np.int64)) * dsize
        if rb <= 0:
            continue
        sel = private[sets == s]
        total = np.maximum(ml["pbytes"][sel].astype(np.int64), int(np.prod(shape, dtype=np.int64)) * dsize)
        row_bytes[sel] = rb
        rows[sel] = np.maximum(-(-total // rb), 1)
    return row_bytes, rows


def _exact_boxes(fn: Function, inst, rw, memloc, offset, dtype, pattern, tables) -> tuple:
    """Boxes of exact operands.  Everything but the offset depends on (pattern, memory location, dtype), of
    which a function has few: that part is worked out once per distinct triple, the rest per access."""
    ml = fn.memlocs
    steps_t, nums_t, row_bytes_t, _ = tables
    n_ml, n_dt = max(len(ml), 1), len(DTYPE_SIZE_ARRAY)
    key = (pattern.astype(np.int64) * n_ml + memloc) * n_dt + dtype
    combos = _unique(key)
    inv = np.searchsorted(combos, key)
    c_pat, c_ml, c_dt = combos // (n_ml * n_dt), (combos // n_dt) % n_ml, combos % n_dt
    # ---- per combination
    sc, nn = steps_t[c_pat], nums_t[c_pat]
    keep_c = (nn > 0).all(axis=1)  # an empty pattern touches nothing
    size_c = DTYPE_SIZE_ARRAY[c_dt].astype(np.int64)
    mtype_c = ml["mtype"][c_ml]
    addr_c = ml["addr"][c_ml].astype(np.int64)
    base_c = ml["base"][c_ml].astype(np.int64)
    ext = sc * (nn - 1)
    lo_c, hi_c = np.minimum(ext, 0).sum(axis=1), np.maximum(ext, 0).sum(axis=1)
    onchip_c = (mtype_c == Mem.SB) | (mtype_c == Mem.PSUM)
    space_c = np.where(mtype_c == Mem.SB, SPACE_SB, np.where(mtype_c == Mem.PSUM, SPACE_PSUM,
                       np.where(addr_c >= 0, SPACE_DRAM, 3 + c_ml))).astype(np.int64)
    R_c = row_bytes_t[c_ml]
    rowed_c = (onchip_c & (addr_c >= 0)) | ((mtype_c == Mem.DRAM) & (addr_c < 0) & (R_c > 0))
    pitch = R_c // size_c
    # SB/PSUM rows hold pbytes // size elements by definition; a DRAM row view needs whole elements
    ok_c = (pitch > 0) & (onchip_c | (R_c % size_c == 0))
    pitch_c = np.where(ok_c, pitch, 1)
    pdim = (sc % pitch_c[:, None]) == 0
    pext = np.where(pdim, ext // pitch_c[:, None], 0)
    cext = np.where(pdim, 0, ext)
    plo_c, phi_c = np.minimum(pext, 0).sum(axis=1), np.maximum(pext, 0).sum(axis=1)
    clo_c, chi_c = np.minimum(cext, 0).sum(axis=1), np.maximum(cext, 0).sum(axis=1)
    # ---- per access
    if not keep_c.all():
        sel = np.flatnonzero(keep_c[inv])
        inst, rw, offset, inv = inst[sel], rw[sel], offset[sel], inv[sel]
    k = len(inst)
    size, addr, space = size_c[inv], addr_c[inv], space_c[inv]
    lo_all, hi_all = lo_c[inv], hi_c[inv]
    plo = np.zeros(k, np.int64)
    phi = np.zeros(k, np.int64)
    # linear DRAM (the shared space): one row (private buffers start at 0)
    dbase = np.maximum(addr, 0)
    blo = dbase + (offset + lo_all) * size
    bhi = dbase + (offset + hi_all + 1) * size
    rowed = np.flatnonzero(rowed_c[inv])
    if len(rowed):
        c = inv[rowed]
        sz, R, oc, ok, pitch_s = size_c[c], R_c[c], onchip_c[c], ok_c[c], pitch_c[c]
        off = offset[rowed]
        q0, r0 = np.divmod(off, pitch_s)
        c_lo, c_hi = clo_c[c], chi_c[c]
        fits = (r0 + c_lo >= 0) & (r0 + c_hi < pitch_s)
        b0 = np.where(oc, base_c[c], 0)
        a0 = np.where(oc, addr_c[c], 0)
        e_lo, e_hi = off + lo_c[c], off + hi_c[c]
        cp_lo = np.where(fits, b0 + q0 + plo_c[c], b0 + np.floor_divide(e_lo, pitch_s))
        cp_hi = np.where(fits, b0 + q0 + phi_c[c], b0 + np.floor_divide(e_hi, pitch_s))
        cb_lo = np.where(fits, a0 + (r0 + c_lo) * sz, a0)
        cb_hi = np.where(fits, a0 + (r0 + c_hi + 1) * sz, a0 + pitch_s * sz)
        # Rows that do not hold whole elements: on chip the whole space; in DRAM the rows the bytes span.
        bad_chip, bad_dram = ~ok & oc, ~ok & ~oc
        R_s = np.maximum(R, 1)
        cp_lo = np.where(bad_chip, 0, np.where(bad_dram, np.floor_divide(e_lo * sz, R_s), cp_lo))
        cp_hi = np.where(bad_chip, PARTITIONS - 1, np.where(bad_dram, np.floor_divide(e_hi * sz + sz - 1, R_s), cp_hi))
        cb_lo = np.where(~ok, 0, cb_lo)
        cb_hi = np.where(bad_chip, WHOLE, np.where(bad_dram, R, cb_hi))
        plo[rowed], phi[rowed], blo[rowed], bhi[rowed] = cp_lo, cp_hi, cb_lo, cb_hi
    # unallocated on-chip locations: the whole space
    un = np.flatnonzero((onchip_c & (addr_c < 0))[inv])
    plo[un], phi[un], blo[un], bhi[un] = 0, PARTITIONS - 1, 0, WHOLE
    return inst, rw, space, plo, phi, blo, bhi


# =========================================================================== edges


def lookup(ids: np.ndarray, fn_of_id) -> np.ndarray:
    """``fn_of_id(i)`` for every (small, non-negative) id of ``ids``, evaluated once per distinct id."""
    if len(ids) == 0:
        return np.zeros(0, np.int64)
    present = np.zeros(int(ids.max()) + 1, dtype=bool)
    present[ids] = True
    table = np.full(len(present), -1, dtype=np.int64)
    for i in np.flatnonzero(present).tolist():
        table[i] = fn_of_id(i)
    return table[ids]


def _group_ids(*cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Ids of equal rows (over the given columns) and the index of each group's first row."""
    n = len(cols[0])
    order = np.lexsort(cols[::-1])
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    change = np.zeros(n, dtype=bool)
    change[0] = True
    for c in cols:
        cs = c[order]
        change[1:] |= cs[1:] != cs[:-1]
    gid_sorted = np.cumsum(change) - 1
    ids = np.empty(n, np.int64)
    ids[order] = gid_sorted
    return ids, order[change]


def _box_ids(fp: Footprints) -> tuple[np.ndarray, np.ndarray]:
    """Ids of equal boxes (space, plo, phi, blo, bhi) and each box's first access.

    Fast path: (dense space rank, first row, row count, blo) packed into one
    int64 when their bit widths fit, so the grouping is one stable sort plus
    a check that equal keys have equal ``bhi``.
    """
    if len(fp) == 0:
        return _group_ids(fp.space, fp.plo, fp.phi, fp.blo, fp.bhi)
    used = np.zeros(int(fp.space.max()) + 1, dtype=np.int64)
    used[fp.space] = 1
    rank = np.cumsum(used) - 1
    height = fp.phi - fp.plo
    if int(fp.plo.min()) < 0 or int(fp.blo.min()) < 0 or int(height.min()) < 0:
        return _group_ids(fp.space, fp.plo, fp.phi, fp.blo, fp.bhi)
    widths = [max(int(x).bit_length(), 1) for x in (rank[-1], fp.plo.max(), height.max(), fp.blo.max())]
    if sum(widths) > 63:
        return _group_ids(fp.space, fp.plo, fp.phi, fp.blo, fp.bhi)
    key = rank[fp.space]
    for col, w in zip((fp.plo, height, fp.blo), widths[1:]):
        key = (key << w) | col
    order = np.argsort(key, kind="stable")
    ks, hs = key[order], fp.bhi[order]
    same_key = ks[1:] == ks[:-1]
    if (same_key & (hs[1:] != hs[:-1])).any():  # one (space, partitions, blo) with two widths
        return _group_ids(fp.space, fp.plo, fp.phi, fp.blo, fp.bhi)
    change = np.empty(len(ks), dtype=bool)
    change[0] = True
    np.logical_not(same_key, out=change[1:])
    ids = np.empty(len(ks), np.int64)
    ids[order] = np.cumsum(change) - 1
    return ids, order[change]


def _overlaps_another(sp: np.ndarray, lo: np.ndarray, hi: np.ndarray, K: int) -> np.ndarray:
    """Per interval [lo, hi) (0 <= lo < hi < K): does it intersect another interval of its space?"""
    nb = len(sp)
    order = np.lexsort((lo, sp))
    s_sp, s_lo, s_hi = sp[order], lo[order], hi[order]
    base = s_sp * K
    cm = np.maximum.accumulate(base + s_hi)
    prev = np.concatenate([[-1], cm[:-1]])
    earlier = (prev >= base) & (prev - base > s_lo)                  # an earlier interval reaches past lo
    later = np.zeros(nb, dtype=bool)
    later[:-1] = (s_sp[1:] == s_sp[:-1]) & (s_lo[1:] < s_hi[:-1])   # the next one starts before hi
    out = np.zeros(nb, dtype=bool)
    out[order] = earlier | later
    return out


def cells(fp: Footprints, keep_all: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(cell, inst, rw) incidences: every access expanded to the cells its box covers (``keep_all``:
    also the isolated boxes touched once, which order nothing here but may in a wider range)."""
    box, first = _box_ids(fp)
    nb = len(first)
    sp, plo, phi, blo, bhi = (a[first] for a in (fp.space, fp.plo, fp.phi, fp.blo, fp.bhi))
    # ---- which distinct boxes may overlap another one?  A box that overlaps no other box of its space in
    # bytes, or none in rows, overlaps nothing (conservative: one test per dimension, not in 2-D).
    vals = _unique(np.concatenate([blo, bhi]))
    K = len(vals) + 1
    rlo, rhi = np.searchsorted(vals, blo), np.searchsorted(vals, bhi)
    shared = _overlaps_another(sp, rlo, rhi, K)
    if shared.any():
        PK = int(phi.max()) + 2
        shared &= _overlaps_another(sp, plo, phi + 1, PK)
    # ---- isolated boxes are one cell each; the others are cut by every boundary of their space
    cell_start = np.zeros(nb, np.int64)
    cell_count = np.ones(nb, np.int64)
    iso = np.flatnonzero(~shared)
    sh = np.flatnonzero(shared)
    cells_of_box = [iso.astype(np.int64)]  # cell id = box id for isolated boxes
    cell_start[iso] = np.arange(len(iso))
    if len(sh):
        ssp = sp[sh]
        PK = int(phi[sh].max()) + 2
        pk = _unique(np.concatenate([ssp * PK + plo[sh], ssp * PK + phi[sh] + 1]))
        bk = _unique(np.concatenate([ssp * K + rlo[sh], ssp * K + rhi[sh]]))
        p0 = np.searchsorted(pk, ssp * PK + plo[sh])
        p1 = np.searchsorted(pk, ssp * PK + phi[sh] + 1)
        b0 = np.searchsorted(bk, ssp * K + rlo[sh])
        b1 = np.searchsorted(bk, ssp * K + rhi[sh])
        npc, nbc = p1 - p0, b1 - b0
        cnt = npc * nbc
        t = _ranges(np.zeros(len(sh), np.int64), cnt)
        owner = np.repeat(np.arange(len(sh)), cnt)
        pc = p0[owner] + t // nbc[owner]
        bc = b0[owner] + t % nbc[owner]
        cell = pc * len(bk) + bc
        cell, cnt = _classes(np.searchsorted(_unique(cell), cell), owner, cnt)
        cell = nb + cell  # dense ids, beyond the isolated boxes' ids
        cell_start[sh] = len(iso) + np.concatenate([[0], np.cumsum(cnt)[:-1]])
        cell_count[sh] = cnt
        cells_of_box.append(cell)
    cells_of_box_a = np.concatenate(cells_of_box)
    # ---- expand accesses; an isolated box touched by a single access (a DRAM tile loaded once) has no edges
    useful = shared | (np.bincount(box, minlength=nb) > (0 if keep_all else 1))
    a = np.flatnonzero(useful[box])
    cs, cc = cell_start[box[a]], cell_count[box[a]]
    idx = _ranges(cs, cc)
    return cells_of_box_a[idx], np.repeat(fp.inst[a], cc), np.repeat(fp.rw[a], cc)


def _box_word(box: np.ndarray, seed: int) -> np.ndarray:
    """A pseudo-random 64-bit word per box number (splitmix64): two sums of them name a set of boxes."""
    with np.errstate(over="ignore"):
        z = box.astype(np.uint64) + np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def _classes(cell: np.ndarray, owner: np.ndarray, cnt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The cells of overlapping boxes (``cell``: dense ids, box ``owner[k]`` for incidence ``k``, ``cnt`` per box,
    in box order) merged into classes: cells that the same boxes cover see the same accesses in the same order,
    so they order the same pairs.  A tile read whole and also row by row and slice by slice was cut into
    rows x slices cells, each expanded for every access of the whole tile (36.8M incidences for 39k accesses of
    a 15k-instruction attention kernel, 5 GB); its cells now fall into as many classes as there are distinct
    sets of covering boxes.  Returns (class per incidence, deduplicated within each box; classes per box)."""
    if len(cell) == 0:
        return cell, cnt
    order = np.argsort(cell, kind="stable")
    starts = np.flatnonzero(np.concatenate([[True], np.diff(cell[order]) != 0]))  # cell k's run: ids are dense
    with np.errstate(over="ignore"):  # sums wrap around: a hash of the set, not a number
        sig = np.stack([np.add.reduceat(_box_word(owner, seed)[order], starts) for seed in (1, 2)])
    classes, per_cell = np.unique(sig, axis=1, return_inverse=True)
    if classes.shape[1] == len(starts):
        return cell, cnt  # every cell its own class: nothing to merge
    klass = np.asarray(per_cell).reshape(-1)[cell]
    # each box's classes, once each, in box order
    n = int(klass.max()) + 1
    key = _unique(owner * n + klass)
    box, klass = np.divmod(key, n)
    return klass, np.bincount(box, minlength=len(cnt)).astype(np.int64)


def written_only(fp: Footprints) -> Footprints:
    """``fp`` without the accesses to spaces nobody writes (inputs only read): they order nothing."""
    if len(fp) == 0:
        return fp
    written = np.zeros(int(fp.space.max()) + 1, dtype=bool)
    written[fp.space[fp.rw == 1]] = True
    keep = written[fp.space]
    return fp if keep.all() else take_accesses(fp, np.flatnonzero(keep))


def take_accesses(fp: Footprints, rows: np.ndarray) -> Footprints:
    return Footprints(*(getattr(fp, f)[rows] for f in FP_FIELDS))


FP_FIELDS = ("inst", "rw", "space", "plo", "phi", "blo", "bhi")
