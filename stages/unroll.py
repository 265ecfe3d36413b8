"""Unroll: the production loop flattener (seed 000, "Unroll").

Per function: lower dynamic loops' induction variables to registers
(LowerDynamicExprs), flatten every static InstLoop by cloning its body once
per iteration (folding loop indices into offsets, block indices,
immediates, predicates, attributes and dependence carries), split block
tensors into one memory-location set per block, mark the function unrolled
(attribute 16), renumber core barriers and enforce the module's instruction
limit.  The heavy lifting is columnar: see stages/unroll_expand.py and
stages/unroll_materialize.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np

from tusk.ir.enums import FnAttr, Kind, Mem, Op, TensorKind
from tusk.ir.errors import InternalError, PassError
from tusk.ir.module import Function, Module
from tusk.stages.base import Pass, Stats, option
from tusk.stages.limits import check_instruction_limit, instruction_limit_check, memory_check
from tusk.stages.lower_dynamic import INDUCTION_KEY, lower_dynamic_exprs
from tusk.stages.unroll_expand import IDX, Expander, concat
from tusk.stages.unroll_materialize import Plan, evaluate_predicates, materialize
from tusk.stages.unroll_split import PART_KEY, Piece, merge_function, part_function, plan_split


def loop_selector(fn: Function, loops: str) -> Callable[[int], bool]:
    if loops == "all":
        return lambda row: True
    if loops == "marked":
        return lambda row: bool(fn.inst(row).attrs.get("unroll", False))
    raise PassError(f"unroll: option loops must be 'all' or 'marked', not {loops!r}")


def clone_counts(fn: Function, loops: str = "all") -> np.ndarray:
    """Per original instruction: how many instructions it becomes if no predicate drops a clone.

    Cheap (builds nothing); unrolled loop rows count 0, a DynamicForLoop not
    lowered yet counts 3 (itself plus LowerDynamicExprs' iv_init and iv_step).
    Exact Python integers: a bound may not fit in int64.
    """
    unroll = loop_selector(fn, loops)
    opcodes, blocks, parents = fn.insts["opcode"], fn.insts["block"], fn.blocks["parent"]
    factor = np.ones(len(fn.blocks), dtype=object)
    for b in range(len(fn.blocks)):  # parents precede their body blocks, so one sweep suffices
        p = int(parents[b])
        if p >= 0:
            f = factor[int(blocks[p])]
            if int(opcodes[p]) == Op.Loop and unroll(p):
                f = f * fn.loop_axis(p).trip_count
            factor[b] = f
    counts = factor[blocks.astype(np.int64)] if len(blocks) else np.zeros(0, dtype=object)
    for r, o in enumerate(opcodes.tolist()):
        if o == Op.Loop and unroll(r):
            counts[r] = 0
        elif o == Op.DynamicForLoop and INDUCTION_KEY not in fn.inst(r).attrs:
            counts[r] = counts[r] * 3
    return counts


def clone_count_bound(fn: Function, loops: str = "all") -> int:
    """Instructions after unrolling if no predicate drops a clone (see :func:`clone_counts`)."""
    return int(sum(clone_counts(fn, loops)))


def plan_function(fn: Function, loops: str = "all") -> Plan:
    """Expand ``fn``'s iteration space (no instruction is built yet)."""
    expander = Expander(fn, loop_selector(fn, loops))
    parts, tops = [], []
    for b in fn.top_blocks():
        e = expander.expand_block(b)
        parts.append(e)
        tops.append(np.full(len(e), b, IDX))
    exp = concat(parts)
    top_of = np.concatenate(tops) if tops else np.zeros(0, IDX)
    return Plan(fn, expander, exp, top_of)


def unroll_function(fn: Function, *, loops: str = "all", check_in_place: bool = False,
                    limit_check: Callable[[int], None] | None = None,
                    split_sets: bool = True) -> tuple[Function, Stats]:
    """The unrolled copy of ``fn`` and its statistics.

    ``limit_check(count)`` is called with the number of instructions the
    function will have, before the clones are built, so a budget can fail fast.
    """
    t0 = time.perf_counter()
    before = len(fn.insts)
    fn = lower_dynamic_exprs(fn)
    _check_block_memlocs(fn, check_in_place)
    bound = clone_count_bound(fn, loops)
    if not (fn.insts["pred"] >= 0).any():
        # without predicates the bound is exact: refuse an explosion before building anything
        if limit_check is not None:
            limit_check(bound)
    memory_check(bound)  # with predicates, the plan covers every clone before they drop some
    plan = plan_function(fn, loops)
    pred_ids = evaluate_predicates(plan)
    total = int(plan.keep.sum())
    if limit_check is not None:
        limit_check(total)
    out = materialize(plan, pred_ids)
    split = split_block_sets(out) if split_sets else 0  # a part of a cut function: the merge splits them
    out.attrs.add(FnAttr.UNROLLED)
    validate_topological_order(out)
    return out, {"insts_before": before, "insts_after": len(out.insts), "clones_dropped_by_predicate":
                 int(len(plan.keep) - total), "block_sets_split": split, "deps": len(out.deps),
                 "seconds": round(time.perf_counter() - t0, 6)}


def _check_block_memlocs(fn: Function, check_in_place: bool) -> None:
    """tensorSplit's guard: with check-in-place on, every block memloc must be allocated."""
    if not check_in_place:
        return
    ml = fn.memlocs
    block_sets = np.nonzero(fn.sets["is_block"] == 1)[0]
    for m in np.nonzero(np.isin(ml["set"], block_sets) & (ml["addr"] < 0))[0].tolist():
        if fn.sets.get("kind", int(ml["set"][m])) != TensorKind.Pointer:
            raise PassError(f"mem.isAllocated(): block memory location {fn.strings[ml.get('name', m)]} "
                            f"is not allocated (unroll with check_in_place)")


def split_block_sets(fn: Function) -> int:
    """Give every block of a block tensor its own set (tensorSplit), in place on ``fn``.

    A set stays whole while a symbolic access still picks its block at run
    time (a block tensor used as a ring inside a dynamic loop).
    """
    ops = fn.operands
    still_symbolic = set()
    for j in np.nonzero(ops["kind"] == Kind.SYMBOLIC)[0].tolist():
        if fn.values[int(ops["aux"][j])].block is not None:
            still_symbolic.add(int(fn.memlocs.get("set", int(ops["memloc"][j]))))
    sets, ml = fn.sets, fn.memlocs
    split = 0
    emptied = []
    taken = {fn.strings[n] for n in sets["name"].tolist()}
    onchip_sets = set(ml["set"][np.isin(ml["mtype"], (Mem.SB, Mem.PSUM))].tolist())
    for s in np.nonzero(sets["is_block"] == 1)[0].tolist():
        # DRAM block tensors stay whole: they are the kernel's interface (shapes, names)
        if s in still_symbolic or s not in onchip_sets:
            continue
        row = sets.row(s)
        for m in np.nonzero(ml["set"] == s)[0].tolist():
            name = f"{fn.strings[ml.get('name', m)]}_set"
            while name in taken:
                name += "_"
            taken.add(name)
            new = fn.add_set(name, row["kind"], row["dtype"], fn.value(row["shape"]) or (),
                             tclass=row["tclass"], extra=fn.record(row["extra"]))
            ml.set("set", m, new)
            ml.set("tensor_id", m, -1)
        split += 1
        emptied.append(s)
    if emptied:
        _drop_sets(fn, emptied)
    return split


def _drop_sets(fn: Function, sets: list[int]) -> None:
    keep = np.setdiff1d(np.arange(len(fn.sets)), np.asarray(sets))
    remap = np.full(len(fn.sets), -1, np.int32)
    remap[keep] = np.arange(len(keep), dtype=np.int32)
    fn.sets = fn.sets.take(keep)
    fn.memlocs["set"][:] = remap[fn.memlocs["set"]]


def validate_topological_order(fn: Function) -> None:
    """CFG::validateTopologicalOrdering: every edge runs forward in program order."""
    d = fn.deps
    bad = np.nonzero(d["src"] >= d["dst"])[0]
    if len(bad):
        e = int(bad[0])
        raise PassError(f"Unroll produced a dependency against program order in {fn.name}: "
                        f"{fn.inst_name(int(d['src'][e]))} -> {fn.inst_name(int(d['dst'][e]))}")


def check_budgets(total: int, limit: int | None) -> None:
    """The backend's 25M ceiling, then the module's own ``max_instruction_limit``."""
    instruction_limit_check(total)
    check_instruction_limit(total, limit)


def renumber_core_barriers(module: Module) -> None:
    """Core barriers get consecutive ids in program order after cloning (per function)."""
    for fn in module.functions:
        rows = np.nonzero(fn.insts["opcode"] == Op.CoreBarrier)[0].tolist()
        for k, row in enumerate(rows):
            rec = fn.inst(row).attrs
            if rec.get("id") != k:
                fn.insts.set("attrs", row, fn.intern_record(rec.with_(id=k)))


@dataclass(frozen=True)
class Unroll(Pass):
    """Flatten every static loop of every function (see module docstring)."""

    name = "unroll"
    version = "1"
    splittable = True

    loops: Literal["all", "marked"] = option("all", "which static loops to flatten: every one, or only those "
                                                    "heuristic_unroll marked")

    def run(self, module: Module) -> tuple[Module, Stats]:
        self.log.info("INFO (Unroll) Start unrolling at %s", time.ctime())
        out = module.copy()
        limit = module.instruction_limit
        totals: Stats = {"insts_before": module.n_insts(), "insts_after": 0, "functions": 0}
        for k, fn in enumerate(out.functions):
            done = totals["insts_after"]  # functions still to come can only add: fail fast on what is known
            out.functions[k], _ = unroll_function(
                fn, loops=self.loops, check_in_place=module.check_in_place,
                limit_check=lambda n: check_budgets(done + n, limit),
                split_sets=not module.attributes.get(PART_KEY, False))
            totals["insts_after"] += len(out.functions[k].insts)
            totals["functions"] += 1
        self.log.info("INFO (Unroll) DONE unrolling %s", time.ctime())
        renumber_core_barriers(out)
        check_budgets(out.n_insts(), limit)
        return out, totals

    # one function is cut into parts (stages/unroll_split.py) only from this many unrolled instructions,
    # into parts of about ``split_part_size`` (at most ``split_max_parts``); class attributes, so the
    # output never depends on them (tests lower them)
    split_min: ClassVar[int] = 200_000
    split_part_size: ClassVar[int] = 300_000
    split_max_parts: ClassVar[int] = 16

    def _pieces(self, module: Module) -> list[list[Piece] | None]:
        """Per function: its pieces when it is cut, else None (a part of its own, or the whole run)."""
        out = []
        for f in module.functions:
            counts = clone_counts(f, self.loops)
            out.append(plan_split(f, self.loops, counts, self.split_min, self.split_part_size,
                                  self.split_max_parts))
        return out

    def split(self, module: Module) -> list[Module] | None:
        pieces = self._pieces(module)
        if len(module.functions) < 2 and all(p is None for p in pieces):
            return None
        # the parts run apart: refuse an explosion of the whole now (what predicates cannot shrink is exact)
        check_budgets(sum(clone_count_bound(f, self.loops) for f in module.functions
                          if not (f.insts["pred"] >= 0).any()), module.instruction_limit)
        parts = []
        for f, ps in zip(module.functions, pieces):
            fns = [f] if ps is None else [part_function(f, pc, self.loops) for pc in ps]
            attributes = module.attributes if ps is None else module.with_attributes(**{PART_KEY: True}).attributes
            parts += [Module([g], module.arch, module.version, attributes, module.artifact_dir,
                             module.queues, module.extras) for g in fns]
        return parts

    def merge(self, module: Module, parts: list[Module], part_stats: list[Stats]) -> tuple[Module, Stats]:
        pieces = self._pieces(module)
        if len(parts) != sum(1 if ps is None else len(ps) for ps in pieces):
            raise InternalError(f"unroll: {len(parts)} parts do not match the split of this module")
        fns, at = [], 0
        for f, ps in zip(module.functions, pieces):
            if ps is None:
                fns.append(parts[at].functions[0])
                at += 1
            else:
                fns.append(merge_function(f, [p.functions[0] for p in parts[at:at + len(ps)]]))
                at += len(ps)
        out = Module(fns, module.arch, module.version, module.attributes,
                     module.artifact_dir, module.queues, module.extras)
        renumber_core_barriers(out)
        check_budgets(out.n_insts(), module.instruction_limit)
        return out, {"insts_before": module.n_insts(), "insts_after": out.n_insts(),
                     "functions": len(module.functions), "parts": len(parts)}
