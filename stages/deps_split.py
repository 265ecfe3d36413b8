"""The dependence graph of one big straight-line function, computed by instruction ranges.

A function is cut into consecutive row ranges (parts).  Each part computes
the edges between its own rows (:func:`part_edges`): the last-writer graph
restricted to a range is exactly the whole graph's edges between rows of
that range, since whether ``s -> d`` is an edge depends only on the accesses
between ``s`` and ``d``, byte by byte.  An edge between two parts joins two
*exposed* accesses: the later one has no write to its bytes before it in its
part, the earlier one none after it in its part.  So each part also names its
exposed rows, and :func:`cross_edges` runs the same graph over only the
exposed rows of every part, keeping the pairs that cross a part boundary:
per byte, the exposed accesses include every access such an edge can join
and, between any two of them, the part's first or last write to that byte,
so no edge is missed and none is invented.  Accesses to spaces no row of the
whole function writes (inputs that are only read) order nothing and are
never exposed; the split names the spaces some row may write.

Ordered (DMA queue) edges are whole-function facts and cheap; the merge
computes them on the whole function.  Parts + merge give the edges of the
whole, in the same order (tests/test_split_passes.py).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from tusk.ir.enums import AP_KINDS, Kind, Mem, Role
from tusk.ir.module import Function, Module, _ranges
from tusk.stages.base import Slice
from tusk.stages.deps import _data_edges, checked_kinds, straight_line_regions
from tusk.stages.footprints import SPACE_DRAM, footprints, take_accesses, written_only


def plan_ranges(n: int, min_size: int, part_size: int, max_parts: int,
                starts: np.ndarray | None = None) -> list[tuple[int, int]] | None:
    """Consecutive row ranges of about ``part_size`` rows (2 to ``max_parts`` of them, an even number where
    more than two) covering ``n`` rows, or None below ``min_size``; each range begins at one of ``starts``
    (default: any row)."""
    if n < max(min_size, 2):
        return None
    k = min(max_parts, max(2, math.ceil(n / max(part_size, 1))))
    # an even count: two (or four) workers run the parts in whole rounds -- large_matmul's 5 parts took three
    # rounds of a fifth on two workers (60 % of the serial time), 4 parts take two rounds of a quarter
    k -= k % 2 if k > 2 else 0
    want = [round(n * j / k) for j in range(1, k)]
    if starts is None:
        cuts = want
    else:
        starts = np.asarray(starts, dtype=np.int64)
        idx = np.clip(np.searchsorted(starts, want), 0, max(len(starts) - 1, 0))
        cuts = starts[idx].tolist() if len(starts) else []
    bounds = sorted({c for c in cuts if 0 < c < n})
    if not bounds:
        return None
    edges = [0, *bounds, n]
    return list(itertools.pairwise(edges))


def splits(fn: Function) -> bool:
    """Straight-line functions only: a kept loop or branch brings regions and loop-carried edges."""
    return straight_line_regions(fn) is None


def range_slices(module: Module, k: int, ranges: list[tuple[int, int]], key: str,
                 extra: dict | None = None) -> list[Slice]:
    """One slice per row range of function ``k`` (:func:`take_range` cuts it): those rows, and a marker under
    ``key`` naming the range and the memory the function writes (what a merge needs to find the edges
    between ranges), with ``extra``'s entries."""
    if not ranges:
        return []  # no parts: the writes are not worth collecting
    fn = module.functions[k]
    written = written_spaces(fn)
    return [Slice({"key": key, "marker": {"function": k, "name": fn.name, "lo": int(a), "hi": int(b),
                                          "written": written, **(extra or {})}}, int(b - a))
            for a, b in ranges]


def take_range(module: Module, spec) -> Module:
    """The part a slice of :func:`range_slices` names."""
    m = spec["marker"]
    fn = module.functions[int(m["function"])]
    return Module([fn.take_insts(np.arange(int(m["lo"]), int(m["hi"])))], module.arch, module.version,
                  module.attributes.with_(**{spec["key"]: m}), module.artifact_dir, module.queues, module.extras)


def written_spaces(fn: Function) -> list[int]:
    """Footprint spaces beyond SB/PSUM/shared DRAM that some row of ``fn`` may write: the private DRAM
    spaces of every set with a written memory location (a symbolic block index may pick any location of
    its set) and the written registers.  A superset, so an access it leaves out is never written."""
    ops, ml = fn.operands, fn.memlocs
    out_rows = ops["role"] == Role.OUT
    kinds = ops["kind"]
    ap = out_rows & np.isin(kinds, list(AP_KINDS)) & (ops["memloc"] >= 0)
    sets = np.unique(ml["set"][ops["memloc"][ap]])
    private = np.flatnonzero(np.isin(ml["set"], sets) & (ml["mtype"] == Mem.DRAM) & (ml["addr"] < 0))
    regs = np.unique(ops["aux"][out_rows & (kinds == Kind.REGISTER)])
    return sorted((3 + private).tolist() + (3 + len(ml) + regs[regs >= 0]).tolist())


def _exposable(fp, written: list[int]):
    """``fp`` without accesses to spaces no row of the whole function writes."""
    if len(fp) == 0:
        return fp
    ok = np.zeros(max(int(fp.space.max()), SPACE_DRAM, *written, 0) + 1, dtype=bool)
    ok[:SPACE_DRAM + 1] = True
    ok[np.asarray(written, dtype=np.int64)] = True
    return take_accesses(fp, np.flatnonzero(ok[fp.space]))


def part_edges(part: Function, written: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(src, dst, kind, exposed rows) of a part (rows numbered within it), edges sorted by (dst, src)."""
    # accesses to a space only read here but written elsewhere add no edge inside the part, only exposure
    fp = _exposable(footprints(part), written)
    src, dst, exposed = _data_edges(fp, exposed=True)
    return src, dst, checked_kinds(fp, src, dst), exposed


def cross_edges(fn: Function, ranges: list[tuple[int, int]], exposed: list[np.ndarray]
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(src, dst, kind) of the edges of ``fn`` between rows of different ranges, from each range's
    exposed rows (numbered within the range)."""
    rows = np.concatenate([np.asarray(e, dtype=np.int64) + a for e, (a, _) in zip(exposed, ranges)]) \
        if exposed else np.zeros(0, np.int64)
    z = np.zeros(0, np.int64)
    if len(rows) < 2:
        return z, z, z.astype(np.uint8)
    fp = written_only(footprints(_rows_view(fn, rows)))
    src, dst = _data_edges(fp)
    starts = np.asarray([a for a, _ in ranges], dtype=np.int64)
    part = part_of(rows, starts)
    keep = part[src] != part[dst]
    src, dst = src[keep], dst[keep]
    kind = checked_kinds(fp, src, dst)
    return rows[src], rows[dst], kind


def part_of(rows: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """The part (1..) of each row, parts starting at ``starts``: ``searchsorted(starts, rows, "right")`` by
    one comparison a part (a few parts, millions of rows: 5x the binary search)."""
    out = np.zeros(len(rows), dtype=np.int16)
    for s in starts.tolist():
        out += rows >= s
    return out


def _rows_view(fn: Function, rows: np.ndarray) -> Function:
    """``fn.take_insts(rows)`` for reading footprints only: the instructions and their operands are taken,
    every other table and pool is shared with ``fn`` instead of copied (a copy of a 1M-row function's
    tables costs more than the footprints of a few thousand rows)."""
    view = Function.__new__(Function)
    view.__dict__.update(fn.__dict__)
    nops = fn.insts["nops"][rows].astype(np.int64)
    view.operands = fn.operands.take(_ranges(fn.insts["ops"][rows], nops))
    view.insts = fn.insts.take(rows)
    view.insts["ops"][:] = np.concatenate([[0], np.cumsum(nops)[:-1]]) if len(rows) else 0
    view.invalidate()
    return view


def merged_edges(fn: Function, ranges: list[tuple[int, int]], part_deps: list, exposed: list[np.ndarray],
                 ordered: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The (src, dst, kind) ``dependence_edges(fn)`` gives, from the parts' own edges (numbered within
    each range) and exposed rows."""
    from tusk.ir.enums import Edge
    from tusk.stages.deps import _extra_edges, _merge

    if [a for a, _ in ranges][1:] != [b for _, b in ranges][:-1] or ranges[0][0] != 0 \
            or ranges[-1][1] != len(fn.insts):
        from tusk.ir.errors import InternalError

        raise InternalError(f"build_fdeps merge: the parts of {fn.name} do not tile its {len(fn.insts)} rows")
    src = [d["src"].astype(np.int64) + a for d, (a, _) in zip(part_deps, ranges)]
    dst = [d["dst"].astype(np.int64) + a for d, (a, _) in zip(part_deps, ranges)]
    kind = [d["kind"] for d in part_deps]
    cs, cd, ck = cross_edges(fn, ranges, exposed)
    os_, od = _extra_edges(fn, ordered)  # DMA queue order and random-generator order, over the whole function
    src += [cs, os_]
    dst += [cd, od]
    kind += [ck, np.full(len(os_), Edge.Ordered, np.uint8)]
    return _merge(np.concatenate(src), np.concatenate(dst), np.concatenate(kind), len(fn.insts))
