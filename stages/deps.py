"""Dependence analysis: the edges of a straight-line function, from the memory each instruction touches.

:func:`build_fdeps` rebuilds ``fn.deps``; the passes that use it are
:mod:`~tusk.stages.build_fdeps` and :mod:`~tusk.stages.clear_inst_deps` (which drops them).

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

Edges (``src -> dst``: dst waits for src), computed per *cell* — the pieces
into which the boxes of one space cut each other (a box that overlaps no other
distinct box is its own cell), so every byte of a cell has the same access
history (an isolated box touched by a single access cannot order anything and is
dropped early):

* Flow(4):   from the most recent writer of the cell to each later reader;
* Output(3): from the most recent writer of the cell to the next writer;
* Anti(2):   from each reader to the next writer of the cell after it.

That is the classic "last writer / readers since the last write" graph: every
pair of conflicting instructions is connected by a path (conflicts through a
later overwrite are reached transitively, never by a redundant direct edge),
and the number of edges stays linear in the number of accesses.  Each pair
gets one edge whose kind is the *maximum* conflict between the two
instructions' boxes (Flow > Output > Anti), so an edge is always a real
conflict of that kind.

* Ordered(1) (option ``ordered``): between consecutive DMA-engine
  instructions that name the same queue (``attrs["queue"]``), when no data
  edge joins them already.  DMAs without a queue get none.
* Ordered(1), always: between consecutive instructions that use one
  engine's random generator (SetRandState seeds it, Rng/Rand2/Dropout draw
  from it: hidden state, no memory access joins them), so the draws keep
  their order and their numbers; the same between consecutive users of an
  engine's reduce registers (an accumulating Activation sets them, a
  read-accumulator reads them: tusk.sim.accumulators).

Complexity: sorting and interval sweeps over the access arrays, no pair
loops: O(A log A) for A accesses (plus the cells of boxes that partially
overlap others).  A function that still has loops or branches gets the
graph of each straight-line region (control flow orders the regions); a
loop or branch row closes the region before it and reads the registers of
its bounds, induction register or condition.  A kept loop whose body is one
straight-line region also gets loop-carried edges (``fn.carried``, distance
1) from iteration k to iteration k + 1: the graph of the body run twice.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tusk.ir import enums
from tusk.ir.arch import PARTITIONS
from tusk.ir.columns import Table, one_of, thaw
from tusk.ir.enums import DTYPE_SIZE_ARRAY, DTYPE_SIZES, LOOP_OPCODES, Edge, Engine, Kind, Mem, Op, Role
from tusk.ir.errors import TuskError
from tusk.ir.expr import IntRuntimeValue, QuasiAffine, expr_from_json
from tusk.ir.module import CARRIED_LOOP, CARRIED_SCHEMA, DEP_SCHEMA, Function, _ranges
from tusk.ir.module import distinct as _unique

SPACE_SB, SPACE_PSUM, SPACE_DRAM = 0, 1, 2
WHOLE = 1 << 42  # "every byte" of a space
BRANCH_OPCODES = frozenset({Op.CompareAndBranch, Op.UnconditionalBranch})
EDGE_KINDS = ("Ordered", "Anti", "Output", "Flow")


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


# =========================================================================== footprints


def straight_line_regions(fn: Function) -> np.ndarray | None:
    """Region id per instruction, or None for a straight-line function.

    A function with control flow (loops kept as loops, blocks joined by
    branches) is cut into straight-line regions: maximal runs of rows in one
    block, each closed by a loop or branch row, which belongs to the region
    it closes (it reads the registers of its bounds or condition, so the
    instructions that set them need edges to it).  Control flow orders the
    regions, so dependence edges are only needed inside one.
    """
    opc = fn.insts["opcode"]
    control = np.isin(opc, list(LOOP_OPCODES | BRANCH_OPCODES))
    if not control.any():
        return None
    block = fn.insts["block"]
    start = np.ones(len(opc), dtype=bool)
    start[1:] = (block[1:] != block[:-1]) | control[:-1]
    return np.cumsum(start)


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
    summary = _take(fp, acc)
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
    vague = list(np.flatnonzero(is_ap & ((kind == Kind.REGISTER_AP) | (kind == Kind.SYMBOLIC_DIMS)
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
    inst_r = [owner[is_reg]] + [np.array([a for a, _ in reg_reads], dtype=np.int64)]
    reg_r = [ops["aux"][rows[is_reg]].astype(np.int64)] + [np.array([r for _, r in reg_reads], dtype=np.int64)]
    rw_r = [rw_all[is_reg], np.zeros(len(reg_reads), np.int8)]
    inst_r, reg_r, rw_r = np.concatenate(inst_r), np.concatenate(reg_r), np.concatenate(rw_r)
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


def _lookup(ids: np.ndarray, fn_of_id) -> np.ndarray:
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


def _cells(fp: Footprints, keep_all: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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
    return fp if keep.all() else _take(fp, np.flatnonzero(keep))


def _take(fp: Footprints, rows: np.ndarray) -> Footprints:
    return Footprints(*(getattr(fp, f)[rows] for f in FP_FIELDS))


FP_FIELDS = ("inst", "rw", "space", "plo", "phi", "blo", "bhi")


def _data_edges(fp: Footprints, exposed: bool = False):
    """(src, dst) pairs of the last-writer / readers-since-last-write graph, unique, sorted by (dst, src).

    ``exposed``: also the sorted instructions with an access that an instruction outside ``fp``'s range
    could conflict with: one with no write to its cell before it (it reads what was there, or is the
    first write) or none after it (its value, or its read, is still live at the end).  Those are all the
    accesses an edge leaving or entering the range can join (``stages.deps_split``).
    """
    z = np.zeros(0, np.int64)
    if len(fp) == 0:
        return (z, z, z) if exposed else (z, z)
    cell, inst, rw = _cells(fp, keep_all=exposed)
    if len(cell) == 0:
        return (z, z, z) if exposed else (z, z)
    n2 = 2 * (int(inst.max()) + 1)
    if int(cell.max()) < (1 << 62) // n2:
        # one packed key per incidence: sorting values is much faster than a 3-key lexsort
        key = _unique(cell * n2 + inst * 2 + rw)  # an instruction reading one cell twice counts once
        cell, rest = np.divmod(key, n2)
        inst, rw = rest >> 1, rest & 1
    else:
        order = np.lexsort((rw, inst, cell))
        cell, inst, rw = cell[order], inst[order], rw[order]
        keep = np.ones(len(cell), dtype=bool)
        keep[1:] = (cell[1:] != cell[:-1]) | (inst[1:] != inst[:-1]) | (rw[1:] != rw[:-1])
        cell, inst, rw = cell[keep], inst[keep], rw[keep]
    L = len(cell)
    pos = np.arange(L, dtype=np.int64)
    new = np.ones(L, dtype=bool)
    new[1:] = cell[1:] != cell[:-1]
    seg_start = np.maximum.accumulate(np.where(new, pos, 0))
    last = np.ones(L, dtype=bool)
    last[:-1] = new[1:]
    seg_end = np.minimum.accumulate(np.where(last, pos + 1, L)[::-1])[::-1]
    is_w = rw == 1
    lastw = np.maximum.accumulate(np.where(is_w, pos, -1))
    prev_w = np.concatenate([[-1], lastw[:-1]])
    has_prev = prev_w >= seg_start
    nextw = np.minimum.accumulate(np.where(is_w, pos, L)[::-1])[::-1]
    next_w = np.concatenate([nextw[1:], [L]])
    has_next = (~is_w) & (next_w < seg_end)
    # flow (reader) and output (writer) edges from the previous writer; anti edges to the next writer
    src = np.concatenate([inst[prev_w[has_prev]], inst[has_next]])
    dst = np.concatenate([inst[has_prev], inst[next_w[has_next]]])
    ok = src < dst
    src, dst = src[ok], dst[ok]
    n = int(inst.max()) + 1
    keys = _unique(dst * n + src)  # sorted by (dst, src)
    if exposed:
        return keys % n, keys // n, _unique(inst[~has_prev | (next_w >= seg_end)])
    return keys % n, keys // n


def _edge_kinds(fp: Footprints, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """The strongest conflict between the boxes of src and dst (Flow > Output > Anti, 0 if none)."""
    if len(src) == 0:
        return np.zeros(0, np.uint8)
    n = int(max(fp.inst.max(), dst.max())) + 1
    bounds = np.searchsorted(fp.inst, np.arange(n + 1))
    start, count = bounds[:-1], np.diff(bounds)
    # chunks of edges: dst is sorted and src is near it, so each chunk reads a narrow, cached slice of fp
    return np.concatenate([_edge_kinds_chunk(fp, start, count, src[k:k + CHUNK], dst[k:k + CHUNK])
                           for k in range(0, len(src), CHUNK)])


def _edge_kinds_chunk(fp: Footprints, start, count, src, dst) -> np.ndarray:
    ca, cb = count[src], count[dst]
    pairs = ca * cb
    t = _ranges(np.zeros(len(src), np.int64), pairs)
    e = np.repeat(np.arange(len(src)), pairs)
    cbe = cb[e]
    ia = start[src][e] + t // cbe
    ib = start[dst][e] + t % cbe
    hit = ((fp.space[ia] == fp.space[ib]) & (fp.plo[ia] <= fp.phi[ib]) & (fp.plo[ib] <= fp.phi[ia])
           & (fp.blo[ia] < fp.bhi[ib]) & (fp.blo[ib] < fp.bhi[ia]))
    wa, wb = fp.rw[ia] == 1, fp.rw[ib] == 1
    k = np.where(wa & ~wb, Edge.Flow, np.where(wa & wb, Edge.Output, np.where(wb, Edge.Anti, 0)))
    k = np.where(hit, k, 0)
    starts = np.concatenate([[0], np.cumsum(pairs)[:-1]])
    return np.maximum.reduceat(k, starts).astype(np.uint8)


def _ordered_edges(fn: Function) -> tuple[np.ndarray, np.ndarray]:
    """Consecutive DMA-engine instructions on the same named queue."""
    ins = fn.insts
    dma = np.flatnonzero(ins["engine"] == Engine.DMA)
    if len(dma) < 2:
        z = np.zeros(0, np.int64)
        return z, z
    names: dict[str, int] = {}

    def queue_id(a: int) -> int:
        q = fn.record(a).get("queue") if a >= 0 else None
        return names.setdefault(q, len(names)) if isinstance(q, str) and q else -1

    q = _lookup(ins["attrs"][dma].astype(np.int64) + 1, lambda a: queue_id(a - 1))
    sel = q >= 0
    rows, q = dma[sel].astype(np.int64), q[sel]
    order = np.lexsort((rows, q))
    rows, q = rows[order], q[order]
    same = q[1:] == q[:-1]
    return rows[:-1][same], rows[1:][same]


def accumulator_setters(fn: Function) -> np.ndarray:
    """Rows whose ``acc`` (or ``reduce_cmd``) is not Idle: they set their engine's reduce registers
    (tusk.sim.accumulators).  Ascending."""
    ins = fn.insts
    cand = np.flatnonzero(np.isin(ins["opcode"], list(enums.ACCUMULATING_OPCODES)))
    if not len(cand):
        return cand
    ids = ins["attrs"][cand]
    # an attribute record is shared by every row that has it: each distinct one is looked at once
    setting = [a for a in _unique(ids).tolist() if a >= 0 and any(
        fn.record(a).get(k) not in enums.IDLE_ACCUMULATION for k in ("acc", "reduce_cmd"))]
    return cand[np.isin(ids, setting)]


def engine_state_chains(fn: Function, lo: int = 0, hi: int | None = None) -> dict[object, list[int]]:
    """Rows in [lo, hi) that use each engine's hidden state, in order: its random generator (a seeding names
    it ``rng_engine``) and its reduce registers."""
    ins = fn.insts
    rows = np.flatnonzero(np.isin(ins["opcode"], list(enums.RNG_OPCODES)))
    by_engine: dict[object, list[int]] = {}
    for i in rows.tolist():
        if i < lo or (hi is not None and i >= hi):
            continue
        a = int(ins["attrs"][i])
        gen = fn.record(a).get("rng_engine") if a >= 0 else None
        by_engine.setdefault(gen if gen is not None else enums.ENGINE_NAMES[int(ins["engine"][i])], []).append(i)
    reads = np.flatnonzero(np.isin(ins["opcode"], list(enums.READ_ACCUMULATOR_OPCODES)))
    users = np.sort(np.concatenate([accumulator_setters(fn), reads]))
    users = users[(users >= lo) & (users < (len(ins) if hi is None else hi))]
    for i in users.tolist():
        by_engine.setdefault(("reduce registers", enums.ENGINE_NAMES[int(ins["engine"][i])]), []).append(i)
    return by_engine


def _state_edges(fn: Function) -> tuple[np.ndarray, np.ndarray]:
    """Consecutive users of one engine's hidden state (random generator, reduce registers)."""
    chains = engine_state_chains(fn).values()
    src = [r for chain in chains for r in chain[:-1]]
    dst = [r for chain in chains for r in chain[1:]]
    return np.array(src, np.int64), np.array(dst, np.int64)


def _extra_edges(fn: Function, ordered: bool) -> tuple[np.ndarray, np.ndarray]:
    """The Ordered edges that are not data edges: DMA queue order (``ordered``) and the order of the users of
    an engine's hidden state (random generator, reduce registers)."""
    osrc, odst = _ordered_edges(fn) if ordered else (np.zeros(0, np.int64), np.zeros(0, np.int64))
    rsrc, rdst = _state_edges(fn)
    return np.concatenate([osrc, rsrc]), np.concatenate([odst, rdst])


def dependence_edges(fn: Function, *, ordered: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(src, dst, kind) arrays of the graph described in the module docstring, sorted by (dst, src).

    Functions with control flow get the graph of each straight-line region
    (see :func:`straight_line_regions`).
    """
    regions = straight_line_regions(fn)
    if regions is not None:
        src, dst, kind = _edges(fn, ordered)
        same = regions[src] == regions[dst]
        return src[same], dst[same], kind[same]
    return _edges(fn, ordered)


def loop_carried_edges(fn: Function) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(src, dst, kind) of the edges from iteration k to iteration k + 1 of every kept loop whose body
    is one straight-line region (no nested loop or branch): the graph of the body run twice, keeping
    the edges from the first run into the second (distance 1)."""
    opc = fn.insts["opcode"]
    loops = np.flatnonzero(np.isin(opc, list(LOOP_OPCODES)))
    z = np.zeros(0, np.int64)
    if not len(loops):
        return z, z, z.astype(np.uint8)
    control = np.isin(opc, list(LOOP_OPCODES | BRANCH_OPCODES))
    block = fn.insts["block"]
    parents = fn.blocks["parent"]
    bodies = []
    for L in loops.tolist():
        blocks = np.flatnonzero(parents == L)
        if len(blocks) != 1:
            continue
        rows = np.flatnonzero(block == blocks[0])
        if not len(rows) or control[rows].any() or rows[-1] - rows[0] + 1 != len(rows):
            continue
        bodies.append((int(rows[0]), int(rows[-1]) + 1))
    if not bodies:
        return z, z, z.astype(np.uint8)
    fp = footprints(fn)
    out_s, out_d, out_k = [], [], []
    rng = False
    for lo, hi in bodies:
        # a generator's last draw of iteration k comes before its first draw of iteration k + 1
        chains = list(engine_state_chains(fn, lo, hi).values())
        if chains:
            rng = True
            out_s.append(np.array([c[-1] for c in chains], np.int64))
            out_d.append(np.array([c[0] for c in chains], np.int64))
            out_k.append(np.full(len(chains), Edge.Ordered, np.uint8))
        a, b = np.searchsorted(fp.inst, [lo, hi])
        if a == b:
            continue
        width = hi - lo
        sel = slice(a, b)
        two = Footprints(*(np.concatenate([getattr(fp, f)[sel], getattr(fp, f)[sel] + (width if f == "inst" else 0)])
                           for f in ("inst", "rw", "space", "plo", "phi", "blo", "bhi")))
        two.inst -= lo
        src, dst = _data_edges(two)
        keep = (src < width) & (dst >= width)
        src, dst = src[keep], dst[keep]
        if not len(src):
            continue
        kind = _edge_kinds(two, src, dst)
        out_s.append(src + lo)
        out_d.append(dst - width + lo)
        out_k.append(kind)
    if not out_s:
        return z, z, z.astype(np.uint8)
    src, dst, kind = np.concatenate(out_s), np.concatenate(out_d), np.concatenate(out_k).astype(np.uint8)
    return _merge(src, dst, kind, len(fn.insts)) if rng else (src, dst, kind)


def data_edges(fn: Function) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(src, dst, kind) of the memory and register conflicts of ``fn`` (no Ordered edges, no regions)."""
    fp = written_only(footprints(fn))
    src, dst = _data_edges(fp)
    return src, dst, checked_kinds(fp, src, dst)


def checked_kinds(fp: Footprints, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    kind = _edge_kinds(fp, src, dst)
    if (kind < Edge.Anti).any():  # cannot happen: every edge joins two accesses of one cell
        raise AssertionError("build_fdeps produced an edge without a conflict")
    return kind


def _edges(fn: Function, ordered: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    src, dst, kind = data_edges(fn)
    osrc, odst = _extra_edges(fn, ordered)
    if len(osrc):
        src = np.concatenate([src, osrc])
        dst = np.concatenate([dst, odst])
        kind = np.concatenate([kind, np.full(len(osrc), Edge.Ordered, np.uint8)])
        return _merge(src, dst, kind, len(fn.insts))
    return src, dst, kind  # already one edge per pair, sorted by (dst, src)


def _merge(src, dst, kind, n) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One edge per pair, the strongest kind wins; sorted by (dst, src)."""
    src, dst, kind = np.asarray(src, np.int64), np.asarray(dst, np.int64), np.asarray(kind, np.int64)
    if len(src) == 0:
        return src, dst, kind.astype(np.uint8)
    n = max(n, 1)
    # (dst, src, strongest kind first) packed in one int64; the input is mostly sorted already,
    # which the stable sort (timsort / radix) exploits.
    packed = np.sort(((dst * n + src) << 3) | (7 - kind), kind="stable")
    key = packed >> 3
    first = np.ones(len(key), dtype=bool)
    np.not_equal(key[1:], key[:-1], out=first[1:])
    key, kind = key[first], (7 - (packed[first] & 7)).astype(np.uint8)
    return key % n, key // n, kind


def _install(fn: Function, src, dst, kind, keep_existing: bool) -> None:
    if keep_existing and len(fn.deps):
        d = fn.deps
        src, dst, kind = _merge(np.concatenate([d["src"], src]), np.concatenate([d["dst"], dst]),
                                np.concatenate([d["kind"], kind]), len(fn.insts))
    fn.deps = Table.from_arrays(DEP_SCHEMA, {"src": src.astype(np.int32), "dst": dst.astype(np.int32),
                                             "kind": kind.astype(np.uint8)})
    _install_carried(fn, keep_existing)


def _install_carried(fn: Function, keep_existing: bool) -> None:
    """Loop-carried edges (distance 1) of kept loops; unroll_dependencies (flavour 2) given by the front
    end are kept, and so are the existing loop-carried ones when ``keep_existing``."""
    src, dst, kind = loop_carried_edges(fn)
    c = fn.carried
    keep = np.ones(len(c), dtype=bool) if keep_existing else c["flavour"] != CARRIED_LOOP
    if not len(src) and keep.all():
        return
    payload = fn.intern((1,))
    old = {k: c[k][keep] for k in c.names}
    rows = {"src": np.concatenate([old["src"], src]), "dst": np.concatenate([old["dst"], dst]),
            "kind": np.concatenate([old["kind"], kind]),
            "flavour": np.concatenate([old["flavour"], np.full(len(src), CARRIED_LOOP)]),
            "payload": np.concatenate([old["payload"], np.full(len(src), payload)])}
    key = np.stack([rows["src"], rows["dst"], rows["kind"], rows["flavour"], rows["payload"]]).astype(np.int64)
    _, first = np.unique(key, axis=1, return_index=True)
    first = np.sort(first)
    fn.carried = Table.from_arrays(CARRIED_SCHEMA, {k: v[first] for k, v in rows.items()})


def build_fdeps(fn: Function, *, ordered: bool = True, keep_existing: bool = False) -> Function:
    """A copy of ``fn`` whose deps (and kept loops' carried edges) are rebuilt from memory footprints."""
    out = fn.copy()
    src, dst, kind = dependence_edges(out, ordered=ordered)
    _install(out, src, dst, kind, keep_existing)
    return out


def edge_counts(fn: Function) -> dict[str, int]:
    kinds = fn.deps["kind"]
    return {name: int((kinds == k).sum()) for k, name in enumerate(EDGE_KINDS, start=1)}
