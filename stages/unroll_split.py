"""Splitting one large function for Unroll: by top-level unit and by iteration range of the dominant loop.

A function whose unrolled size reaches ``min_size`` is cut into parts along
its top-level block: every top-level instruction (a loop with its whole body,
or a straight-line instruction) is a *unit*, and the dominant top-level loop
``L`` may be cut further into ranges of its iterations.  A part holds the
rows of its units (:meth:`Function.take_insts`); when it holds only the
iterations ``[t0, t1)`` of ``L``, ``L`` gets a static predicate
``lo <= axis <= hi`` so its expansion -- and with it every clone's iteration
number, the name it is written with -- is exactly the serial one, and only
the clones of other iterations are dropped.

Each part unrolls independently; :func:`merge_function` concatenates the
parts' rows in program order (pools re-interned, operand ranges and edges
shifted), takes memory locations and sets from the input and splits block
tensors (``split_block_sets``) over the merged operands, as the serial run
does.  The result equals the serial one (content hash and BIR-JSON bytes).

A function is not split (``plan_split`` returns None) unless this is exact:

* every loop is a static ``Loop`` that is unrolled (no kept or dynamic loops,
  so no cloned blocks, no loop-carried edges left, no LowerDynamicExprs),
  and there are no branches;
* no unrolled loop is empty (the serial run joins edges around empty loops);
* no dependence edge (plain or carried) runs between units in different
  parts, touches the row of a loop cut into ranges, or is a carried edge
  inside such a loop (it could join different iterations).  Plain edges
  inside ``L``'s body are cloned per common iteration, so they stay in
  their part.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tusk.ir.columns import Table
from tusk.ir.enums import LOOP_OPCODES, FnAttr, Op
from tusk.ir.errors import InternalError
from tusk.ir.expr import AffinePredicate, idx
from tusk.ir.module import AUX_VALUE_KINDS, BLOCK_SCHEMA, DEP_SCHEMA, INST_SCHEMA, OPERAND_SCHEMA, Function

IDX = np.int64
BRANCH_OPCODES = (Op.CompareAndBranch, Op.UnconditionalBranch)
# module attribute of a part of a cut function: unroll leaves its block tensors whole (the merge splits them
# over the whole function), so its memory locations stay those of the input
PART_KEY = "unroll_part"
MAX_ROWS = 50_000  # original instructions; the planning below walks them in Python


@dataclass(frozen=True)
class Piece:
    """One part's share of a function: top-level rows, and for the cut loop its iteration range."""

    units: tuple[int, ...]
    loop: int = -1            # the top-level loop cut into ranges (one of ``units``), or -1
    t0: int = 0
    t1: int = 0


def _top_rows(fn: Function) -> np.ndarray:
    """Per row: the top-level row it belongs to (itself for a top-level instruction)."""
    parents, blocks = fn.blocks["parent"], fn.insts["block"]
    top = np.arange(len(fn.insts), dtype=IDX)
    for r in range(len(fn.insts)):  # preorder: a loop row precedes its body
        p = int(parents[int(blocks[r])])
        if p >= 0:
            top[r] = top[p]
    return top


def plan_split(fn: Function, loops: str, counts: np.ndarray, min_size: int, part_size: int,
               max_parts: int) -> list[Piece] | None:
    """The pieces of ``fn`` (see module docstring), or None to unroll it whole."""
    from tusk.stages.unroll import loop_selector

    n = len(fn.insts)
    if n == 0:
        return None
    bound = int(sum(counts))
    if bound < max(min_size, 2):
        return None
    opcodes = fn.insts["opcode"]
    unroll = loop_selector(fn, loops)
    loop_rows = [r for r in range(n) if int(opcodes[r]) in LOOP_OPCODES]
    if not loop_rows or n > MAX_ROWS:  # nothing to expand, or mostly straight-line code: run whole
        return None
    if any(int(opcodes[r]) != Op.Loop or not unroll(r) for r in loop_rows):
        return None
    if np.isin(opcodes, list(BRANCH_OPCODES)).any():  # blocks joined by branches: run whole
        return None
    parents, blocks = fn.blocks["parent"], fn.insts["block"]
    # clones each loop produces (its subtree), to find empty loops
    sub = [int(c) for c in counts]
    for r in range(n - 1, -1, -1):
        p = int(parents[int(blocks[r])])
        if p >= 0:
            sub[p] += sub[r]
    if any(sub[r] == 0 for r in loop_rows):
        return None
    top = _top_rows(fn)
    units = [r for r in range(n) if top[r] == r]
    size = {u: sub[u] for u in units}
    k = min(max_parts, max(2, math.ceil(bound / max(part_size, 1))))
    target = bound / k
    # the dominant loop: the largest top-level loop with two or more iterations
    cands = [u for u in units if int(opcodes[u]) == Op.Loop and fn.loop_axis(u).trip_count >= 2]
    big = max(cands, key=lambda u: size[u]) if cands else -1
    pieces: list[Piece] = []
    cur: list[int] = []
    cur_size = 0.0
    rng: tuple[int, int] | None = None

    def close() -> None:
        nonlocal cur, cur_size, rng
        if cur:
            pieces.append(Piece(tuple(cur), big if rng is not None else -1, *(rng or (0, 0))))
        cur, cur_size, rng = [], 0.0, None

    for u in units:
        if u != big or size[u] <= target:
            cur.append(u)
            cur_size += size[u]
            if cur_size >= target:
                close()
            continue
        trips = fn.loop_axis(u).trip_count
        per = size[u] // trips
        t = 0
        while t < trips:
            need = max(target - cur_size, per)
            t1 = min(trips, t + max(1, math.ceil(need / per)))
            cur.append(u)
            rng = (t, t1)
            cur_size += (t1 - t) * per
            t = t1
            if cur_size >= target:
                close()
        # a last range that does not fill its part keeps collecting the units after the loop
    close()
    if len(pieces) < 2:
        return None
    # edges may not cross parts
    part_of: dict[int, int] = {}
    cut = -1
    for j, pc in enumerate(pieces):
        for u in pc.units:
            if u in part_of:
                cut = u
            part_of[u] = j
    if cut >= 0 and sum(1 for pc in pieces if cut in pc.units) < 2:
        cut = -1
    for table, carried in ((fn.deps, False), (fn.carried, True)):
        for s, d in zip(table["src"].tolist(), table["dst"].tolist()):
            ts, td = int(top[s]), int(top[d])
            if ts != td:
                if ts == cut or td == cut or part_of[ts] != part_of[td]:
                    return None
            elif ts == cut and (s == cut or d == cut or carried):
                return None
    return pieces


def part_function(fn: Function, piece: Piece, loops: str) -> Function:
    """The rows of ``piece`` as a function of their own (all top blocks, memory locations, sets, registers)."""
    top = _top_rows(fn)
    rows = np.nonzero(np.isin(top, np.asarray(piece.units, dtype=IDX)))[0]
    part = fn.take_insts(rows)
    orig_parent = fn.blocks["parent"]
    keep = np.nonzero((orig_parent < 0) | (part.blocks["parent"] >= 0))[0]
    if len(keep) < len(fn.blocks):
        remap = np.full(len(fn.blocks), -1, np.int64)
        remap[keep] = np.arange(len(keep))
        part.blocks = part.blocks.take(keep)
        part.insts["block"][:] = remap[part.insts["block"]].astype(np.int32)
    if piece.loop >= 0:
        trips = fn.loop_axis(piece.loop).trip_count
        if (piece.t0, piece.t1) != (0, trips):
            ax = fn.loop_axis(piece.loop)
            v0, v1 = ax.lb + piece.t0 * ax.stride, ax.lb + (piece.t1 - 1) * ax.stride
            lo, hi = min(v0, v1), max(v0, v1)
            row = int(np.searchsorted(rows, piece.loop))
            old = part.insts.get("pred", row)
            preds = tuple(part.values[int(old)]) if old >= 0 else ()
            preds = preds + (AffinePredicate(idx(ax.name) - lo, "ge"), AffinePredicate(idx(ax.name) * -1 + hi, "ge"))
            part.insts.set("pred", row, part.intern(preds))
    part.invalidate()
    return part


def _map_pool(dst_add, items) -> np.ndarray:
    """ids of ``items`` in the destination pool; index -1 (none) maps to -1."""
    out = np.empty(len(items) + 1, np.int64)
    for i, v in enumerate(items):
        out[i] = dst_add(v)
    out[-1] = -1
    return out


def _cat_tables(tables: list[dict], schema) -> Table:
    # one copy per column: the parts' columns are only read (a copy of each first, and astype's copy after
    # the concatenation, were two thirds of the merge: 0.29 s of large_matmul's 1.2M rows)
    return Table.from_arrays(schema, {c: (np.concatenate([t[c] for t in tables]).astype(dt, copy=False) if tables
                                          else np.zeros(0, dt)) for c, dt in schema})


def merge_function(fn: Function, parts: list[Function]) -> Function:
    """The unrolled ``fn`` from the unrolled parts (in order); see the module docstring."""
    from tusk.stages.unroll import split_block_sets, validate_topological_order

    out = Function(fn.name, fn.kind, set(fn.attrs))
    out.extras = fn.extras
    out.strings, out.patterns, out.values = fn.strings.copy(), fn.patterns.copy(), fn.values.copy()
    out.regs, out.memlocs, out.sets = fn.regs.copy(), fn.memlocs.copy(), fn.sets.copy()
    insts, ops, deps, blocks = [], [], [], None
    n_insts = n_ops = 0
    aux_value = np.asarray(AUX_VALUE_KINDS)
    # a stored module lists memory locations by set (serial.py); a part was stored, its input maybe not
    by_set = np.argsort(fn.memlocs["set"], kind="stable")
    fn_sets = fn.memlocs["set"][by_set]
    mmap = np.append(by_set, -1)
    for p in parts:
        if len(p.carried) or (len(p.blocks) and (p.blocks["parent"] >= 0).any()):
            raise InternalError(f"unroll merge: part of {fn.name} kept a loop")
        if len(p.regs) != len(fn.regs) or len(p.memlocs) != len(fn.memlocs) or len(p.sets) != len(fn.sets):
            raise InternalError(f"unroll merge: part of {fn.name} changed its registers or memory locations")
        if not np.array_equal(p.memlocs["set"], fn_sets):
            raise InternalError(f"unroll merge: part of {fn.name} has its memory locations in another order")
        smap = _map_pool(out.strings.add, p.strings.items)
        pmap = _map_pool(out.patterns.add, p.patterns.items)
        vmap = _map_pool(out.values.add, p.values.items)
        a = dict(p.insts.arrays())  # read only: every changed column below is a new array
        a["name"] = smap[a["name"]].astype(np.int32)
        a["attrs"] = vmap[a["attrs"]].astype(np.int32)
        a["pred"] = vmap[a["pred"]].astype(np.int32)
        a["ops"] = a["ops"] + n_ops
        insts.append(a)
        o = dict(p.operands.arrays())
        o["pattern"] = pmap[o["pattern"]].astype(np.int32)
        o["memloc"] = mmap[o["memloc"]].astype(np.int32)
        o["dyn"] = vmap[o["dyn"]].astype(np.int32)
        o["extra"] = vmap[o["extra"]].astype(np.int32)
        sel = np.isin(o["kind"], aux_value)
        o["aux"] = np.where(sel, vmap[o["aux"]], o["aux"]).astype(np.int32)
        ops.append(o)
        e = dict(p.deps.arrays())
        e["src"] = (e["src"] + n_insts).astype(np.int32)
        e["dst"] = (e["dst"] + n_insts).astype(np.int32)
        deps.append(e)
        if blocks is None:
            b = {c: v.copy() for c, v in p.blocks.arrays().items()}
            b["name"] = smap[b["name"]].astype(np.int32)
            b["extra"] = vmap[b["extra"]].astype(np.int32)
            blocks = b
        elif len(p.blocks) != len(blocks["name"]):
            raise InternalError(f"unroll merge: parts of {fn.name} have different blocks")
        n_insts += len(p.insts)
        n_ops += len(p.operands)

    out.insts = _cat_tables(insts, INST_SCHEMA)
    out.operands = _cat_tables(ops, OPERAND_SCHEMA)
    out.deps = _cat_tables(deps, DEP_SCHEMA)
    out.blocks = _cat_tables([blocks] if blocks is not None else [], BLOCK_SCHEMA)
    out.invalidate()
    split_block_sets(out)
    out.attrs.add(FnAttr.UNROLLED)
    validate_topological_order(out)
    return out
