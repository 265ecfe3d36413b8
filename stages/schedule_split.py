"""Scheduling one big straight-line function in parts: ranges of whole segments.

Each segment (``schedule.segments``: a straight-line run between fences, at
most ``max_segment`` rows) is list-scheduled on its own, so a range of whole
segments schedules the same with or without the rest of the function.  A
part holds such a range of rows; it builds its own graph (its rows' deps,
their data edges and Ordered edges: ``deps_split.part_edges``), schedules,
and hands the merge its rows in their new order and its exposed rows.  The
merge adds the edges between parts -- data edges from the exposed rows
(``deps_split.cross_edges``), the function's own deps and the Ordered edges
that cross -- and reorders the whole function once, so the result equals
the unsplit run (content hash and BIR-JSON bytes; tests/test_split_passes.py).

The part's row order travels in its marker as little-endian uint32 in
base64 (4 bytes a row: a JSON list of a 300k-row part would be ten times
the size and slow to intern).
"""

from __future__ import annotations

import base64

import numpy as np

from tusk.ir.columns import Table
from tusk.ir.enums import Edge, FnAttr
from tusk.ir.errors import InternalError
from tusk.ir.module import DEP_SCHEMA, Module
from tusk.stages.base import Slice
from tusk.stages.deps import _extra_edges, _merge
from tusk.stages.deps_split import cross_edges, part_edges, part_of, plan_ranges, range_slices, splits

# module attribute of a part of schedule: the function and row range it holds
PART_KEY = "schedule_part"


def split(p, module: Module) -> list[Module | Slice] | None:
    """The slices of every function worth splitting (:func:`function_slices`), or None."""
    if PART_KEY in module.attributes:
        return None
    parts: list[Module | Slice] = []
    for k in range(len(module.functions)):
        parts += function_slices(p, module, k)
    return parts or None


def function_slices(p, module: Module, k: int) -> list[Slice]:
    """The parts of function ``k`` (none when it is too small or not straight-line), as slices
    (``deps_split.take_range`` cuts them).  Each marker names the priorities the merge will compare
    (:func:`tusk.stages.schedule.priorities` of the whole function): a part alone cannot tell, and a function
    beyond ``compare_limit`` keeps the first priority's order."""
    from tusk.stages.schedule import priorities, segments

    fn = module.functions[k]
    segs = segments(fn, p.max_segment) if splits(fn) else []
    ranges = plan_ranges(len(fn.insts), p.split_min, p.split_part_size, p.split_max_parts,
                         starts=np.array([a for a, _ in segs], dtype=np.int64)) if segs else None
    return range_slices(module, k, ranges or [], PART_KEY,
                        {"priorities": list(priorities(len(fn.insts), p.compare_limit))})


def run_part(p, module: Module):
    """Schedule one part on its own graph by each priority its marker names (all of them when it names
    none); the marker gains the new row orders and the exposed rows.  The part's function holds only its edges
    (in the first priority's order) and attributes: all the merge reads of it."""
    from tusk.stages.schedule import PRIORITIES, schedule_with_edges

    marker = module.attributes[PART_KEY]
    fn = module.functions[0]
    src, dst, kind, exposed = part_edges(fn, list(marker["written"]))
    osrc, odst = _extra_edges(fn, True)  # DMA queue and random-generator order, as dependence_edges
    edges = (np.concatenate([src, osrc]), np.concatenate([dst, odst]),
             np.concatenate([kind, np.full(len(osrc), Edge.Ordered, np.uint8)]))
    wanted = [q for q in PRIORITIES if q in marker.get("priorities", PRIORITIES)]
    tries = [schedule_with_edges(fn, edges, max_segment=p.max_segment, priority=q) for q in wanted]
    new, moved, _ = tries[0]
    orders = {q: _pack(order) for q, (_, _, order) in zip(wanted, tries)}
    out = module.replaced([p.marked(fn, new).edges_only()]).with_attributes(
        **{PART_KEY: {**dict(marker), "exposed": exposed.tolist(), "orders": orders}})
    return out, {"moved": moved}


def merge(p, module: Module, parts: list[Module]):
    from tusk.stages.schedule import fastest, priorities, schedule_function

    by_fn: dict[int, list] = {}
    for part in parts:
        marker = part.attributes[PART_KEY]
        by_fn.setdefault(int(marker["function"]), []).append((marker, part.functions[0]))
    out = module.copy()
    moved = marked = 0
    for k, fn in enumerate(module.functions):
        got = sorted(by_fn.get(k, ()), key=lambda mp: int(mp[0]["lo"]))
        if not got:
            new, m = schedule_function(fn, max_segment=p.max_segment, compare_limit=p.compare_limit)
            new = p.marked(fn, new)
        else:
            tries = [_merge_function(fn, got, q) for q in priorities(len(fn.insts), p.compare_limit)]
            new, m = fastest(fn, tries, compare_limit=p.compare_limit)  # as the unsplit run decides
        out.functions[k] = new
        moved += m
        marked += int(FnAttr.KERNEL_SCOPE in new.attrs and FnAttr.KERNEL_SCOPE not in fn.attrs)
    return out, {"moved": moved, "marked": marked, "parts": len(parts)}


def _merge_function(fn, got, priority: str):
    """(fn reordered as the parts scheduled it by ``priority``, rows moved, order)."""
    from tusk.stages.schedule import PRIORITIES, sorted_edges

    n = len(fn.insts)
    ranges = [(int(m["lo"]), int(m["hi"])) for m, _ in got]
    if [a for a, _ in ranges][1:] != [b for _, b in ranges][:-1] or ranges[0][0] != 0 or ranges[-1][1] != n:
        raise InternalError(f"schedule merge: the parts of {fn.name} do not tile its {n} rows")
    order = np.concatenate([a + _unpack(m["orders"][priority]) for (m, _), (a, _) in zip(got, ranges)])
    starts = np.asarray([a for a, _ in ranges], dtype=np.int64)
    # edges between parts, in the old numbering: data edges, the function's own, Ordered
    cs, cd, ck = cross_edges(fn, ranges, [m["exposed"] for m, _ in got])
    d = fn.deps
    osrc, odst = _extra_edges(fn, True)  # DMA queue and random-generator order, as dependence_edges
    s_all = np.concatenate([cs, d["src"].astype(np.int64), osrc])
    d_all = np.concatenate([cd, d["dst"].astype(np.int64), odst])
    k_all = np.concatenate([ck, d["kind"], np.full(len(osrc), Edge.Ordered, np.uint8)])
    cross = part_of(s_all, starts) != part_of(d_all, starts)
    s_all, d_all, k_all = _merge(s_all[cross], d_all[cross], k_all[cross], n)
    moved = int((order != np.arange(n)).sum())
    deps = _joined(got, ranges, s_all, d_all, k_all, order) if priority == PRIORITIES[0] else None
    if deps is None:
        # the parts' own edges are numbered in their first priority's rows: back to the old numbering
        first = [_unpack(m["orders"][PRIORITIES[0]]) for m, _ in got]
        ps = [a + o[g.deps["src"].astype(np.int64)] for (_, g), (a, _), o in zip(got, ranges, first)]
        pd = [a + o[g.deps["dst"].astype(np.int64)] for (_, g), (a, _), o in zip(got, ranges, first)]
        pk = [g.deps["kind"] for _, g in got]
        deps = sorted_edges(np.concatenate([s_all, *ps]), np.concatenate([d_all, *pd]),
                            np.concatenate([k_all, *pk]), order)
    new = fn.take_insts(order, deps) if moved else fn.copy()
    new.deps = deps
    if any(FnAttr.KERNEL_SCOPE in g.attrs for _, g in got):
        new.attrs |= {FnAttr.KERNEL_SCOPE}
    return new, moved, order


def _joined(got, ranges, s_cross, d_cross, k_cross, order: np.ndarray):
    """``sorted_edges`` of the parts' edges and the edges between parts (old numbering, one per pair) for the
    order the parts' first priority gave: then the new rows lo..hi of each range are its part's rows as
    it scheduled them, so a part's edges, numbered in those rows and sorted by (dst, src), are already the
    new function's, in order, ranges after ranges.  Only the few edges between parts are renumbered and
    sorted, then slotted in (no pair is both: one joins two parts, the other stays in one).  None when
    some part's edges are not sorted (the caller sorts everything).  Sorting every edge again was half of
    the merge: 0.45 of 0.82 s on large_matmul's 1.2M rows and 2.8M edges."""
    n = len(order)
    ps = np.concatenate([a + g.deps["src"].astype(np.int64) for (_, g), (a, _) in zip(got, ranges)])
    pd = np.concatenate([a + g.deps["dst"].astype(np.int64) for (_, g), (a, _) in zip(got, ranges)])
    pk = np.concatenate([g.deps["kind"] for _, g in got]).astype(np.uint8, copy=False)
    key = pd * max(n, 1) + ps
    if len(key) > 1 and not (key[1:] > key[:-1]).all():
        return None
    pos = np.empty(n, np.int64)
    pos[order] = np.arange(n, dtype=np.int64)
    xs, xd, xk = _merge(pos[s_cross], pos[d_cross], k_cross, n)
    at = np.searchsorted(key, xd * max(n, 1) + xs)
    return Table.from_arrays(DEP_SCHEMA, {"src": np.insert(ps, at, xs).astype(np.int32),
                                          "dst": np.insert(pd, at, xd).astype(np.int32),
                                          "kind": np.insert(pk, at, xk.astype(np.uint8))})


def _pack(order: np.ndarray) -> str:
    return base64.b64encode(np.asarray(order, dtype="<u4").tobytes()).decode("ascii")


def _unpack(text: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), dtype="<u4").astype(np.int64)
