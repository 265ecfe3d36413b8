"""AddressRotation: the base and driver of the four rotation passes (seed 002).

The passes live one per module, named as the backend names them:
:mod:`~tusk.stages.address_rotation_psum`, :mod:`~tusk.stages.address_rotation_sb`,
:mod:`~tusk.stages.address_rotation_dram` and
:mod:`~tusk.stages.address_rotation_psum_post_schedule`; each says which
functions it rotates (``_jobs``) and how (``_rotate``); the rings they share
are :mod:`~tusk.stages.rotation_rings`.  ``run`` follows the seed's rotateAddrs:

1. refuse if/else regions (a block other than a loop body with more than one
   predecessor): "Detected If else structure, skip DMA optimization for now";
2. pick the functions by their attribute flags (:meth:`AddressRotation.flags`:
   a function's own -- a kernel handed over by the front end carries its own --
   plus the entry function's 11 and 12, and its 9/10 for kernels called with
   AddressRotationScope Global):

   * attribute 12 (post-schedule / kernel scope; ``schedule`` sets it):
     the post-schedule PSUM pass rotates PSUM (three sweeps), the SB pass runs
     the post-schedule SB schedule;
   * attribute 11: the DRAM pass lays out internal DRAM buffers (unless
     ``disable_dram_rotation``);
   * attribute 9 without 10: the PSUM pass rotates PSUM (three sweeps) --
     unless a PSUM buffer's live range is not covered by the analysis;
   * attribute 9 or 10: the SB pass runs the standard SB schedule; kernel
     calls with AddressRotationScope 1 (Kernel) rotate the callee inside its
     own SB shape ("Skipping kernel-scoped address rotation for <name> - SB
     shape not set" when the call has none);

3. nothing to do: "Skipping pass due to no instruction or uncovered structure.".

What follows a rotation (:meth:`AddressRotation._settle`), per function it
changed:

* a scheduled function (attribute 12) has its edges dropped and rebuilt
  against the new addresses (the seed's clearInstDeps, then build_fdeps) and
  is scheduled again: the seed's downstream list scheduler is what turns the
  freed slots into overlap (load(i+1) with compute(i)); without it the
  order the first schedule chose around the aliasing buffers stays, and the
  rotation gains nothing (add_tiles.klr: 319 instances moved, 559,027 ->
  559,027 cycles);
* a function of at most ``compare_limit`` rows is then timed (edges rebuilt,
  as the build times it) against the function as it came in, and keeps what
  it had when rotation made it slower ("reverted"): rotation never makes a
  makespan worse.

Every pass reports ``rotations`` (instances moved and kept), ``reverted`` and
``rescheduled`` (functions); the makespans the summary shows are the build's
own cached steps (``tusk.workflows.timings``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, ClassVar

import numpy as np

from tusk.ir import enums
from tusk.ir.columns import Record
from tusk.ir.enums import FnAttr, Op
from tusk.ir.module import Function, Module
from tusk.ir.verify import live_overlap_problems
from tusk.stages.base import Pass, Stats, option
from tusk.stages.deps import build_fdeps
from tusk.stages.rotation_rings import unalias_known
from tusk.stages.schedule import COMPARE_LIMIT, MAX_SEGMENT, TIE, makespan_or_none, schedule_timed

if TYPE_CHECKING:
    from tusk.ir.liveness import Instances
    from tusk.stages.address_rotation_sb import Region

SKIP = "Skipping pass due to no instruction or uncovered structure."
IF_ELSE = "Detected If else structure, skip DMA optimization for now"


@dataclass(frozen=True)
class Job:
    """One function to rotate: ``kind`` "psum", "dram", or the SB schedule "standard" / "post"."""

    fn: int
    kind: str
    region: Region | None = None  # the SB pass's: the SBUF it may use
    # the input function's instances when choosing the job found them (unaliasing starts from them)
    inst: Instances | None = field(default=None, compare=False, repr=False)


def entry_function(module: Module) -> Function | None:
    for fn in module.functions:
        if fn.name == "main":
            return fn
    return module.functions[0] if module.functions else None


def has_if_else(fn: Function) -> bool:
    """Does a top-level block have more than one forward predecessor (a join of branches)?

    A backward branch makes a loop (a KLR dynamic loop is blocks and a branch back to its header); the
    header it reaches is a loop block, not a join."""
    opc = fn.insts["opcode"]
    if not np.isin(opc, (Op.CompareAndBranch, Op.UnconditionalBranch)).any():
        return False
    top = fn.top_blocks()
    index = {fn.strings[fn.blocks.get("name", b)]: k for k, b in enumerate(top)}
    rows = fn.block_rows()
    preds = [0] * len(top)
    for k, b in enumerate(top):
        r = rows[b]
        last = int(r[-1]) if len(r) else -1
        op = int(opc[last]) if last >= 0 else -1
        attrs = fn.record(fn.insts.get("attrs", last)) if last >= 0 else Record()
        succ = []
        if op == Op.UnconditionalBranch:
            succ = [attrs.get("target")]
        elif op == Op.CompareAndBranch:
            succ = [attrs.get("on_true"), attrs.get("on_false") or (k + 1)]
        elif op not in (81, 82, 17):  # Return, Exit, Halt
            succ = [k + 1]
        for s in succ:
            t = index.get(s) if isinstance(s, str) else s
            if isinstance(t, int) and k < t < len(top):
                preds[t] += 1
    return any(p > 1 for p in preds)


def _scope(attrs: Record) -> int:
    v = attrs.get("address_rotation_scope_val", 0)
    return enums.ROTATION_SCOPES.get(v, -1) if isinstance(v, str) else int(v or 0)


def callee_of(attrs: Record, names: dict[str, int]) -> int | None:
    """The function a kernel call's attributes name, by its index in ``names``."""
    func = attrs.get("func")
    return names.get(func) if isinstance(func, str) else None


def _accessed_unallocated(fn: Function, mtype: int) -> bool:
    ml = fn.memlocs
    bad = np.flatnonzero((ml["mtype"] == mtype) & (ml["addr"] < 0))
    return bool(len(bad)) and bool(np.isin(fn.operands["memloc"], bad).any())


def _callers_holding(module: Module, mtype: int) -> dict[int, str]:
    """Functions called (NKIKernel) from a function that itself uses allocated buffers of memory ``mtype``:
    a slot chosen inside the callee could clobber the caller's buffers, so they are not rotated."""
    names = {fn.name: k for k, fn in enumerate(module.functions)}
    out: dict[int, str] = {}
    for fn in module.functions:
        calls = np.flatnonzero(fn.insts["opcode"] == Op.NKIKernel)
        if not len(calls):
            continue
        ml = fn.memlocs
        mine = np.flatnonzero((ml["mtype"] == mtype) & (ml["addr"] >= 0))
        if not len(mine) or not np.isin(fn.operands["memloc"], mine).any():
            continue
        for row in calls.tolist():
            callee = callee_of(fn.record(fn.insts.get("attrs", row)), names)
            if callee is not None:
                out.setdefault(callee, fn.name)
    return out


@dataclass(frozen=True)
class AddressRotation(Pass):
    """Rotate recurring buffers over rings of free slots so that successive instances do not alias."""

    space: ClassVar[str] = ""
    mtype: ClassVar[int | None] = None  # SB / PSUM: the memory whose aliases are merged and held across calls
    version = "2"

    compare_limit: int = option(COMPARE_LIMIT, "functions up to this many rows are timed before and after "
                                               "rotation and keep what they had when rotation is slower")

    # ------------------------------------------------------------ dispatch
    def jobs(self, module: Module) -> tuple[list[Job], str | None]:
        """The functions to rotate and how, or why the pass does nothing."""
        if module.n_insts() == 0:
            return [], SKIP
        if any(has_if_else(fn) for fn in module.functions):
            return [], IF_ELSE
        jobs = self._jobs(module)
        if self.mtype is not None:
            busy = _callers_holding(module, self.mtype)
            for j in jobs:
                if j.fn in busy:
                    self.log.info("%s rotation of %s skipped: its caller %s holds %s buffers across the call",
                                  self.space.upper(), module.functions[j.fn].name, busy[j.fn], self.space.upper())
            jobs = [j for j in jobs if j.fn not in busy]
        if not jobs:
            return [], SKIP
        return jobs, None

    def _jobs(self, module: Module) -> list[Job]:
        """The functions this pass's flags select, in the order they are rotated."""
        raise NotImplementedError

    def _rotate(self, out: Module, jobs: list[Job], known: dict[int, Instances] | None = None) -> dict[int, int]:
        """Rotate the jobs' functions of ``out`` in place; instances moved per function.  ``known``: instances
        of functions as they are now (:meth:`_unaliased`), taken out as a rotation changes its function."""
        raise NotImplementedError

    @staticmethod
    def flags(module: Module, fn: Function) -> set[int]:
        """The rotation flags that apply to ``fn``: its own; for the entry function's 9/10 (rotate this
        function) only the entry itself and kernels called with scope Global; its 11 and 12 everywhere."""
        entry = entry_function(module)
        own = set(fn.attrs)
        if entry is None or fn is entry:
            return own
        inherited = set(entry.attrs) & {FnAttr.ROTATE_DRAM, FnAttr.KERNEL_SCOPE}
        for row in np.flatnonzero(entry.insts["opcode"] == Op.NKIKernel).tolist():
            attrs = entry.record(entry.insts.get("attrs", row))
            if attrs.get("func") == fn.name and _scope(attrs) == 2:
                inherited |= set(entry.attrs) & {FnAttr.ROTATE_PSUM_AND_SB, FnAttr.ROTATE_SB_ONLY}
        return own | inherited

    # ------------------------------------------------------------ the work
    def run(self, module: Module) -> tuple[Module, Stats]:
        jobs, why = self.jobs(module)
        known: dict[int, Instances] = {}
        out = self._unaliased(module, jobs, known)
        stats: Stats = {"rotations": 0, "functions": 0}
        if why is not None:
            self.log.info(why)
            stats["skipped"] = why
        else:
            stats.update(self._settle(out, module, self._rotate(out, jobs, known)))
            stats["functions"] = len({j.fn for j in jobs})
        return out, stats

    def _unaliased(self, module: Module, jobs: list[Job], known: dict[int, Instances] | None = None) -> Module:
        """A copy of ``module`` whose SB / PSUM jobs' aliases that live one after the other are one memory
        location (rotation_rings.unalias): what run, split and merge all start from.  ``known`` gets the
        instances of each function that unaliasing left as it was (the rotation's analysis starts from them)."""
        mine = {j.fn for j in jobs}
        # only the jobs' functions are changed (in place: unaliased here, rotated after); the others are shared
        out = module.replaced([f.copy() if k in mine else f for k, f in enumerate(module.functions)])
        if self.mtype is not None:
            found = {j.fn: j.inst for j in jobs if j.inst is not None}
            for k in sorted(mine):
                _, inst = unalias_known(out.functions[k], self.mtype, found.get(k))
                if known is not None and inst is not None:
                    known[k] = inst
        return out

    def _settle(self, out: Module, module: Module, moved: dict[int, int],
                rescheduled_by: Callable[[int, Function], tuple[Function, float | None] | None] | None = None,
                overlapping: set[int] | None = None) -> Stats:
        """What follows rotation in each function it changed (the module docstring): edges rebuilt and
        scheduled again after scheduling, and the input kept where rotation is slower.  ``rescheduled_by(k,
        fn)`` gives function ``k`` rescheduled (and its makespan when timed) where that was done in parts
        (:mod:`~tusk.stages.rotation_split`), None where it is to be done here; ``overlapping``: the functions
        whose rotation overlaps live memory locations, where that was found in parts (None: found here)."""
        kept = rescheduled = reverted = 0
        for k, here in sorted(moved.items()):
            if not here:  # nothing moved: not even the aliases' accesses are repointed (the input's function)
                out.functions[k] = module.functions[k]
                continue
            fn, old = out.functions[k], module.functions[k]
            t_new: float | None = None
            overlaps = k in overlapping if overlapping is not None else bool(live_overlap_problems(fn))
            if overlaps and not live_overlap_problems(old):
                # a ring slot that shares bytes with a location live at the same time: never kept (the verifier
                # would refuse the module); the function stays as it came
                self.log.info("Rotation of %s reverted: it would overlap live memory locations", fn.name)
                out.functions[k] = old
                reverted += 1
                continue
            if FnAttr.KERNEL_SCOPE in fn.attrs:  # its edges are then the rebuilt ones, as the build times it
                done = rescheduled_by(k, fn) if rescheduled_by is not None else None
                if done is None:
                    again, _, t_again = schedule_timed(build_fdeps(fn), max_segment=MAX_SEGMENT,
                                                       compare_limit=self.compare_limit)
                else:
                    again, t_again = done
                # the new order must keep locations that share bytes live one after the other (the verifier's
                # rule); where it does not, the rotated function keeps the order it was rotated in
                if not live_overlap_problems(again):
                    fn, t_new = again, t_again
                    out.functions[k] = fn
                    rescheduled += 1
            if fn.n_insts <= self.compare_limit and self._slower(fn, old, t_new):
                self.log.info("Rotation of %s reverted: the timing model finds it slower", fn.name)
                out.functions[k] = old
                reverted += 1
                continue
            kept += here
        return {"rotations": kept, "rescheduled": rescheduled, "reverted": reverted}

    @staticmethod
    def _slower(fn: Function, old: Function, t_fn: float | None) -> bool:
        """Is ``fn`` (makespan ``t_fn`` when known) slower than ``old``, both with their edges rebuilt?"""
        t_new = t_fn if t_fn is not None else makespan_or_none(build_fdeps(fn))
        t_old = makespan_or_none(build_fdeps(old)) if t_new is not None else None
        return t_new is not None and t_old is not None and t_new > t_old * (1 + TIE)
