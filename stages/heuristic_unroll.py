"""HeuristicUnroll: decides which loops get fully unrolled; clones nothing (seed 000).

A loop is eligible iff it is innermost and free of runtime ("symbolic")
access patterns: every address in its body folds to a constant once its
loop indices are known (no register values, gather indices or dynamic
access info).  There is no trip-count threshold.  The only budget is the
``maxhu`` option, a cap on how many loops are marked across the whole run
(the backend reads it from the MAXHU environment variable; Tusk's CLI does
too, once, and passes it here).  Marked loops carry ``"unroll": true``;
``unroll{loops=marked}`` flattens exactly those.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from tusk.ir.enums import LOOP_OPCODES, Kind, Op
from tusk.ir.errors import PassError
from tusk.ir.expr import AffineIdx, FloorDivExpr, ModuloExpr, ShardIdx
from tusk.ir.module import Function, Module
from tusk.stages.base import OptionError, Pass, Stats, option

log = logging.getLogger("tusk.heuristic_unroll")


@dataclass(frozen=True)
class HeuristicUnroll(Pass):
    """Mark innermost, fully static loops for full unroll (see module docstring)."""

    name = "heuristic_unroll"
    version = "1"

    enabled: bool = option(True, "mark loops at all (false: the pass changes nothing)")
    maxhu: int | None = option(None, "cap on the loops marked in the whole module (the backend's MAXHU); "
                                     "none: no cap")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.maxhu is not None and self.maxhu < 0:
            raise OptionError(f"option heuristic_unroll.maxhu must be 0 or more, got {self.maxhu}")

    def run(self, module: Module) -> tuple[Module, Stats]:
        if not self.enabled:
            log.info("Heuristic unroll is off.")
            return module, {"eligible": 0, "marked": 0}
        out = module.copy()
        budget = _Budget(self.maxhu)
        total = 0
        for fn in out.functions:
            for b in fn.top_blocks():
                total += _mark_block(fn, b, budget)
            fn.invalidate()
        log.info("Heuristically unrolled %d loops.", total)
        return out, {"eligible": total, "marked": budget.marked}


@dataclass
class _Budget:
    """The MAXHU cap and how much of it this run has used."""

    cap: int | None
    marked: int = 0


def _mark_block(fn: Function, b: int, budget: _Budget) -> int:
    """Mark the eligible loops of block ``b`` (recursively); returns how many were eligible."""
    count = 0
    for row in fn.block_rows()[b].tolist():
        if int(fn.insts.get("opcode", row)) != Op.Loop:
            continue
        bodies = fn.body_blocks(row)
        if not _innermost(fn, row):
            for c in bodies:
                count += _mark_block(fn, c, budget)
            continue
        if _contains_symbolic(fn, row):
            continue
        if len(bodies) != 1:
            raise PassError(f"heuristic_unroll: loop {fn.inst_name(row)} has {len(bodies)} body blocks; "
                            f"an eligible loop must have exactly one")
        if budget.cap is not None and budget.marked >= budget.cap:
            log.debug("skip (cap %d reached): %s", budget.cap, fn.inst_name(row))
        else:
            log.debug("unroll: %s", fn.inst_name(row))
            rec = fn.inst(row).attrs.with_(unroll=True)
            fn.insts.set("attrs", row, fn.intern_record(rec))
            budget.marked += 1
        count += 1
    return count


def _subtree(fn: Function, loop: int) -> list[int]:
    out: list[int] = []
    rows_of = fn.block_rows()
    for b in fn.body_blocks(loop):
        for r in rows_of[b].tolist():
            out.append(r)
            if int(fn.insts.get("opcode", r)) in LOOP_OPCODES:
                out.extend(_subtree(fn, r))
    return out


def _innermost(fn: Function, loop: int) -> bool:
    return not any(int(fn.insts.get("opcode", r)) in LOOP_OPCODES for r in _subtree(fn, loop))


def _contains_symbolic(fn: Function, loop: int) -> bool:
    """True when some address in the loop body depends on run-time values."""
    ops = fn.operands
    for r in _subtree(fn, loop):
        start, n = fn.insts.get("ops", r), fn.insts.get("nops", r)
        for j in range(start, start + n):
            kind = ops.get("kind", j)
            if kind in (Kind.REGISTER_AP, Kind.SYMBOLIC_DIMS) or ops.get("dyn", j) >= 0:
                return True
            if kind == Kind.SYMBOLIC:
                sa = fn.values[ops.get("aux", j)]
                exprs = [sa.offset] + ([sa.block] if sa.block is not None else [])
                for e in exprs:
                    if any(not isinstance(a, (AffineIdx, ShardIdx, FloorDivExpr, ModuloExpr)) for a in e.walk()):
                        return True
    return False
