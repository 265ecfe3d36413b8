"""Dependence analysis: the edges of a straight-line function, from the memory each instruction touches.

:func:`build_fdeps` rebuilds ``fn.deps`` from the boxes :mod:`~tusk.stages.footprints` finds; the passes that use it are
:mod:`~tusk.stages.build_fdeps` and :mod:`~tusk.stages.clear_inst_deps` (which drops them).

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

import numpy as np

from tusk.ir import enums
from tusk.ir.columns import Table
from tusk.ir.enums import LOOP_OPCODES, Edge, Engine, Op
from tusk.ir.module import CARRIED_LOOP, CARRIED_SCHEMA, DEP_SCHEMA, Function, _ranges
from tusk.ir.module import distinct as _unique
from tusk.stages.footprints import CHUNK, Footprints, cells, footprints, lookup, written_only

BRANCH_OPCODES = frozenset({Op.CompareAndBranch, Op.UnconditionalBranch})
EDGE_KINDS = ("Ordered", "Anti", "Output", "Flow")


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
    cell, inst, rw = cells(fp, keep_all=exposed)
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

    q = lookup(ins["attrs"][dma].astype(np.int64) + 1, lambda a: queue_id(a - 1))
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
    old = {k: c.column(k)[keep] for k in c.names}
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
