"""HeuristicUnroll: decides which loops get fully unrolled; clones nothing (seed 000).

A loop is eligible iff it is innermost and free of runtime ("symbolic")
access patterns: every address in its body folds to a constant once its
loop indices are known (no register values, gather indices or dynamic
access info).  There is no trip-count threshold.  The only budget is the
MAXHU environment variable (or the ``maxhu`` option), a cap on how many loops
are marked across the whole run.  Marked loops carry ``"unroll": true``;
``unroll{loops=marked}`` flattens exactly those.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from tusk.ir.enums import LOOP_OPCODES, Kind, Op
from tusk.ir.expr import AffineIdx, FloorDivExpr, ModuloExpr, ShardIdx
from tusk.ir.errors import PassError
from tusk.ir.module import Function, Module
from tusk.stages.base import Pass, Stats


@dataclass(frozen=True)
class HeuristicUnrollOptions:
    enabled: bool = True
    maxhu: int = -1  # cap on marked loops; -1: read the MAXHU environment variable (unset: no cap)


def maxhu_from_env() -> int:
    text = os.environ.get("MAXHU", "").strip()
    if not text:
        return -1
    try:
        return int(text)
    except ValueError:
        raise PassError(f"MAXHU must be an integer, got {text!r}") from None


class HeuristicUnroll(Pass):
    """Mark innermost, fully static loops for full unroll (see module docstring)."""

    name = "heuristic_unroll"
    version = "1"
    Options = HeuristicUnrollOptions

    def run(self, module: Module, options: HeuristicUnrollOptions) -> tuple[Module, Stats]:
        if not options.enabled:
            self.log.info("Heuristic unroll is off.")
            return module, {"eligible": 0, "marked": 0}
        cap = options.maxhu if options.maxhu >= 0 else maxhu_from_env()
        out = module.copy()
        self.marked = 0
        self.cap = cap
        total = 0
        for fn in out.functions:
            for b in fn.top_blocks():
                total += self._block(fn, b)
            fn.invalidate()
        self.log.info("Heuristically unrolled %d loops.", total)
        return out, {"eligible": total, "marked": self.marked}

    def _block(self, fn: Function, b: int) -> int:
        count = 0
        rows = fn.block_rows()[b].tolist()
        for row in rows:
            if int(fn.insts.get("opcode", row)) != Op.Loop:
                continue
            bodies = fn.body_blocks(row)
            if not _innermost(fn, row):
                for c in bodies:
                    count += self._block(fn, c)
                continue
            if _contains_symbolic(fn, row):
                continue
            if len(bodies) != 1:
                raise PassError(f"heuristic_unroll: loop {fn.inst_name(row)} has {len(bodies)} body blocks; "
                                f"an eligible loop must have exactly one")
            if self.cap >= 0 and self.marked >= self.cap:
                self.log.debug("skip (cap %d reached): %s", self.cap, fn.inst_name(row))
            else:
                self.log.debug("unroll: %s", fn.inst_name(row))
                rec = fn.inst(row).attrs.with_(unroll=True)
                fn.insts.set("attrs", row, fn.intern_record(rec))
                self.marked += 1
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
            if kind == Kind.REGISTER_AP or ops.get("dyn", j) >= 0:
                return True
            if kind == Kind.SYMBOLIC:
                sa = fn.values[ops.get("aux", j)]
                exprs = [sa.offset] + ([sa.block] if sa.block is not None else [])
                for e in exprs:
                    if any(not isinstance(a, (AffineIdx, ShardIdx, FloorDivExpr, ModuloExpr)) for a in e.walk()):
                        return True
    return False
