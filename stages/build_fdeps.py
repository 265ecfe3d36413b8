"""build_fdeps: rebuild every function's dependence edges from the memory its instructions touch.

The analysis is :mod:`~tusk.stages.deps`'s (the edges and their kinds), on the boxes and cells of
:mod:`~tusk.stages.footprints`; a
straight-line function of many rows splits into row ranges (:mod:`~tusk.stages.deps_split`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from tusk.ir.columns import Table
from tusk.ir.module import DEP_SCHEMA, Module
from tusk.stages.base import RowRangeSliced, Slice, Stats, option
from tusk.stages.deps import EDGE_KINDS, _install, dependence_edges, edge_counts

# module attribute of a part of build_fdeps: the function and row range it holds (see stages/deps_split.py)
PART_KEY = "build_fdeps_part"


@dataclass(frozen=True)
class BuildFDeps(RowRangeSliced):
    """Rebuild every function's dependence edges from physical address overlap (straight-line code)."""

    name = "build_fdeps"
    version = "1"
    splittable = True

    ordered: bool = option(True, "Ordered edges between consecutive DMAs of one queue")
    keep_existing: bool = option(False, "merge with the edges already present instead of replacing them")

    # a straight-line function is cut into row ranges (stages/deps_split.py) only from this many rows, into
    # parts of about ``split_part_size`` (at most ``split_max_parts``); class attributes, so the output never
    # depends on them (tests lower them)
    split_min: ClassVar[int] = 200_000
    split_part_size: ClassVar[int] = 300_000
    split_max_parts: ClassVar[int] = 8

    def run(self, module: Module) -> tuple[Module, Stats]:
        if PART_KEY in module.attributes:
            return self._run_part(module)
        out = module.copy()
        for fn in out.functions:
            src, dst, kind = dependence_edges(fn, ordered=self.ordered)
            _install(fn, src, dst, kind, self.keep_existing)
        return out, _edge_stats(out)

    def split_refs(self, module: Module) -> list[Module | Slice] | None:
        from tusk.stages.deps_split import plan_ranges, range_slices, splits

        if PART_KEY in module.attributes:
            return None
        parts: list[Module | Slice] = []
        for k, fn in enumerate(module.functions):
            ranges = plan_ranges(len(fn.insts), self.split_min, self.split_part_size,
                                 self.split_max_parts) if splits(fn) else None
            parts += range_slices(module, k, ranges or [], PART_KEY)
        return parts or None

    def _run_part(self, module: Module) -> tuple[Module, Stats]:
        """A part's own edges, and its exposed rows in its marker for the merge."""
        from tusk.stages.deps_split import part_edges

        marker = module.attributes[PART_KEY]
        fn = module.functions[0]
        src, dst, kind, exposed = part_edges(fn, list(marker["written"]))
        edges = fn.edges_only(Table.from_arrays(DEP_SCHEMA, {"src": src.astype(np.int32), "dst": dst.astype(np.int32),
                                                             "kind": kind.astype(np.uint8)}))
        out = module.replaced([edges]).with_attributes(**{PART_KEY: {**dict(marker), "exposed": exposed.tolist()}})
        return out, {"edges": len(src), "exposed": len(exposed)}

    def merge(self, module: Module, parts: list[Module], part_stats: list[Stats]) -> tuple[Module, Stats]:
        from tusk.stages.deps_split import merged_edges

        by_fn: dict[int, list] = {}
        for p in parts:
            marker = p.attributes[PART_KEY]
            by_fn.setdefault(int(marker["function"]), []).append((marker, p.functions[0]))
        out = module.copy()
        for k, fn in enumerate(out.functions):
            got = sorted(by_fn.get(k, ()), key=lambda mp: int(mp[0]["lo"]))
            if got:
                src, dst, kind = merged_edges(fn, [(int(m["lo"]), int(m["hi"])) for m, _ in got],
                                              [g.deps for _, g in got], [m["exposed"] for m, _ in got],
                                              self.ordered)
            else:
                src, dst, kind = dependence_edges(fn, ordered=self.ordered)
            _install(fn, src, dst, kind, self.keep_existing)
        return out, {**_edge_stats(out), "parts": len(parts)}



def _edge_stats(module: Module) -> Stats:
    stats: Stats = {"functions": 0, "edges": 0, **{k: 0 for k in EDGE_KINDS}}
    for fn in module.functions:
        stats["functions"] += 1
        stats["edges"] += len(fn.deps)
        for k, v in edge_counts(fn).items():
            stats[k] += v
    return stats
