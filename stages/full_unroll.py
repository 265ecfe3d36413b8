"""FullUnroll: the level-gated unroller with the hard 25M-instruction ceiling (seed 000).

* level 0 — memloc generation only: each block tensor held in one memory
  location gets one ``<set>_sub<b>`` location per block, in place;
* level 1 — unroll the first function when it is unrollable (attribute 2)
  and marked to unroll (attribute 1);
* level 2 — unroll every function, then erase all dependencies (everything
  is statically scheduled).

Dead code is removed after unrolling, and the post-unroll total must stay
below 25,000,000 instructions (the backend's literal is 24,999,999 with a
strict compare).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from tusk.ir.columns import Table
from tusk.ir.enums import FnAttr
from tusk.ir.errors import PassError
from tusk.ir.module import CARRIED_SCHEMA, DEP_SCHEMA, Function, Module
from tusk.stages.base import Pass, Stats, option
from tusk.stages.dce import dce, removable
from tusk.stages.limits import CEILING, instruction_limit_check, memory_check  # noqa: F401 (CEILING: API)
from tusk.stages.unroll import clone_counts, renumber_core_barriers, unroll_function

LEVEL_MESSAGE = "Need to set full_unroll level, 0: only memloc generation; 1: unroll some; 2: unroll all"
def memlocs_generation(fn: Function) -> int:
    """Level 0: split single-memloc block tensors into per-block ``_sub<b>`` memlocs, in place.

    The copies keep bank, base partition and address, as reset_and_generate_memlocs
    does; block sets that already carry one memloc per block are left alone.
    Returns the number of sets split.
    """
    sets, ml = fn.sets, fn.memlocs
    split = 0
    for s in range(len(sets)):
        locs = np.nonzero(ml["set"] == s)[0].tolist()
        if not locs:
            raise PassError(f"MemlocSet cannot be empty: {fn.strings[sets.get('name', s)]}")
        if not sets.get("is_block", s):
            if len(locs) == 1:
                ml.set("tensor_id", locs[0], 0 if ml.get("tensor_id", locs[0]) < 0 else ml.get("tensor_id", locs[0]))
            continue
        if len(locs) != 1:
            continue  # already one memloc per block
        orig = locs[0]
        row = ml.row(orig)
        set_name = fn.strings[sets.get("name", s)]
        first = None
        for b in range(sets.get("n_blocks", s)):
            m = fn.add_memloc(s, f"{set_name}_sub{b}", row["mtype"], addr=row["addr"], pbytes=row["pbytes"],
                              nparts=row["nparts"], base=row["base"], bank=row["bank"], tensor_id=b,
                              const_path=fn.string(row["const_path"]), extra=fn.record(row["extra"]))
            first = m if first is None else first
        ops = fn.operands
        refs = ops["memloc"] == orig
        ops["memloc"][refs] = first
        keep = np.array([m for m in range(len(ml)) if m != orig])
        remap = np.full(len(ml), -1, np.int64)
        remap[keep] = np.arange(len(keep))
        fn.memlocs = ml.take(keep)
        ml = fn.memlocs
        aps = ops["memloc"] >= 0
        ops["memloc"][aps] = remap[ops["memloc"][aps]]
        split += 1
    fn.invalidate()
    return split


def _surviving(fn: Function, unrolled: bool) -> int:
    """A lower bound of ``fn``'s instruction count after (unrolling and) DCE."""
    counts = clone_counts(fn) if unrolled else np.ones(len(fn.insts), dtype=object)
    return int(sum(counts[~removable(fn, symbolic_writes=True)]))


def erase_all_dependencies(fn: Function) -> None:
    fn.deps = Table(DEP_SCHEMA)
    fn.carried = Table(CARRIED_SCHEMA)


@dataclass(frozen=True)
class FullUnroll(Pass):
    """Level-gated full unroll with the 25M ceiling (see module docstring)."""

    name = "full_unroll"
    version = "1"

    level: int = option(-1, "0: memloc generation only; 1: unroll the first function if marked; 2: unroll "
                            "every function and drop all dependencies (-1: not set, an error)")

    def run(self, module: Module) -> tuple[Module, Stats]:
        level = self.level
        if level == -1:
            raise PassError(LEVEL_MESSAGE)
        if level not in (0, 1, 2):
            raise PassError(f"full_unroll level must be 0, 1 or 2, not {level}")
        out = module.copy()
        stats: Stats = {"level": level, "insts_before": module.n_insts(), "unrolled_functions": 0,
                        "sets_split": 0, "dce_removed": 0}
        if level == 0:
            for fn in out.functions:
                stats["sets_split"] += memlocs_generation(fn)
            self._dce(out, stats)
            stats["insts_after"] = out.n_insts()
            return out, stats
        self.log.info("INFO (FullUnroll) Start unrolling at %s", time.ctime())
        targets: list[int] = []
        if level == 2:
            targets = list(range(len(out.functions)))
        elif out.functions:
            f0 = out.functions[0]
            if FnAttr.UNROLLABLE in f0.attrs:
                if FnAttr.MARKED_TO_UNROLL in f0.attrs:
                    targets = [0]
                else:
                    self._dce(out, stats)
                    self.log.info("DONE DCE, no unrolling needed, running BirCodeGen with unroll pass")
            else:
                self.log.info("No unrolling needed, running hhir pass")
        # The ceiling applies after DCE, but what DCE can never remove (side effects, writes to
        # outputs) already counts: an explosion of those fails before any clone is built.
        instruction_limit_check(sum(_surviving(fn, k in targets) for k, fn in enumerate(out.functions)))
        memory_check(sum(int(clone_counts(fn).sum()) for k, fn in enumerate(out.functions) if k in targets))
        for k in targets:
            out.functions[k], _ = unroll_function(out.functions[k], check_in_place=module.check_in_place)
            stats["unrolled_functions"] += 1
        if targets:
            renumber_core_barriers(out)
            self._dce(out, stats)
            self.log.info("INFO (FullUnroll) DONE unrolling %s", time.ctime())
        total = out.n_insts()
        self.log.info("InstProfiler: total_count=%d", total)
        instruction_limit_check(total)
        if level == 2:
            for fn in out.functions:
                erase_all_dependencies(fn)
        stats["insts_after"] = total
        return out, stats

    def _dce(self, module: Module, stats: Stats) -> None:
        for k, fn in enumerate(module.functions):
            module.functions[k], removed = dce(fn)
            stats["dce_removed"] += removed
