"""AddressRotation: address_rotation_psum, _sb, _dram and address_rotation_psum_post_schedule (seed 002).

One pass class; the registered names differ by one construction flag, the
memory they rotate (``space``), and the post-schedule PSUM variant by a
second (``post_schedule``).  ``run`` follows the seed's rotateAddrs:

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

The SB pass splits into one part per independent partition-band batch
(:mod:`stages.rotation_sb`); the parts' results merge into exactly what
``run`` computes.  Every pass reports ``rotations`` (instances moved and kept),
``reverted`` and ``rescheduled`` (functions); the makespans the summary shows
are the build's own cached steps (``tusk.workflows.timings``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from tusk.ir import enums
from tusk.ir.arch import PARTITIONS, get_arch
from tusk.ir.columns import Record
from tusk.ir.enums import FnAttr, Mem, Op
from tusk.ir.errors import PassError
from tusk.ir.module import Function, Module, _ranges
from tusk.ir.verify import live_overlap_problems
from tusk.stages.base import OptionError, Pass, Stats, option
from tusk.stages.deps import build_fdeps
from tusk.stages.rotation_dram import MAX_GIB, TOO_BIG, dram_rotation
from tusk.stages.rotation_psum import psum_rotation
from tusk.stages.rotation_rings import analyse, unalias
from tusk.stages.rotation_sb import Region, batches, part_rows, sb_rotation_batch, sb_schedule
from tusk.stages.schedule import COMPARE_LIMIT, MAX_SEGMENT, TIE, makespan_or_none, schedule_timed

SKIP = "Skipping pass due to no instruction or uncovered structure."
IF_ELSE = "Detected If else structure, skip DMA optimization for now"
PART_KEY = "address_rotation_part"
PSUM_SWEEPS = 3


@dataclass(frozen=True)
class Job:
    """One function to rotate: ``kind`` "psum", "dram", or the SB schedule "standard" / "post"."""

    fn: int
    kind: str
    region: Region | None = None


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
            callee = names.get(fn.record(fn.insts.get("attrs", row)).get("func"))
            if callee is not None:
                out.setdefault(callee, fn.name)
    return out


def _uncovered_psum(fn: Function) -> bool:
    """has_uncovered_live_range: some PSUM buffer's instances cannot be followed."""
    if _accessed_unallocated(fn, Mem.PSUM):
        return True
    sp = analyse(fn, Mem.PSUM)
    used = np.isin(sp.memlocs, fn.operands["memloc"])
    return bool((used & ~sp.inst.simple[sp.memlocs]).any())


@dataclass(frozen=True)
class AddressRotation(Pass):
    """Rotate recurring buffers over rings of free slots so that successive instances do not alias."""

    space: ClassVar[str] = "sb"
    post_schedule: ClassVar[bool] = False
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
        arch = get_arch(module.arch)
        jobs: list[Job] = []
        kernel_scoped: dict[int, Job] = {}
        names = {fn.name: k for k, fn in enumerate(module.functions)}
        for k, fn in enumerate(module.functions):
            flags = self.flags(module, fn)
            if self.space == "psum":
                if (FnAttr.KERNEL_SCOPE in flags and self.post_schedule) or \
                        (FnAttr.ROTATE_PSUM_AND_SB in flags and FnAttr.ROTATE_SB_ONLY not in flags):
                    if _uncovered_psum(fn):
                        self.log.info("PSUM rotation of %s skipped: a PSUM live range is not covered", fn.name)
                    else:
                        jobs.append(Job(k, "psum"))
            elif self.space == "dram":
                if FnAttr.ROTATE_DRAM in flags and not getattr(self, "disable_dram_rotation", False):
                    jobs.append(Job(k, "dram"))
            else:
                region = Region(PARTITIONS, arch.sb_bytes_per_partition, arch.sb_bytes_per_partition - arch.sb_reserved)
                if FnAttr.KERNEL_SCOPE in flags:
                    jobs.append(Job(k, "post", region))
                elif flags & {FnAttr.ROTATE_PSUM_AND_SB, FnAttr.ROTATE_SB_ONLY}:
                    jobs.append(Job(k, "standard", region))
                    for row in np.flatnonzero(fn.insts["opcode"] == Op.NKIKernel).tolist():
                        attrs = fn.record(fn.insts.get("attrs", row))
                        callee = names.get(attrs.get("func"))
                        if _scope(attrs) != 1 or callee is None:
                            continue
                        shape = attrs.get("sb_buf_shape") or (0, 0)
                        nparts, size = (int(shape[0]), int(shape[1])) if len(shape) == 2 else (0, 0)
                        if nparts == 0 or size == 0:
                            self.log.info("Skipping kernel-scoped address rotation for %s - SB shape not set",
                                          fn.inst_name(row))
                            continue
                        kernel_scoped[callee] = Job(callee, "standard", Region(nparts, size, size))
        if self.space == "sb":
            jobs = [j for j in jobs if j.fn not in kernel_scoped] + sorted(kernel_scoped.values(), key=lambda j: j.fn)
            jobs = [j for j in jobs if not _accessed_unallocated(module.functions[j.fn], Mem.SB)]
        if self.space in ("sb", "psum"):
            mtype = Mem.SB if self.space == "sb" else Mem.PSUM
            busy = _callers_holding(module, mtype)
            for j in jobs:
                if j.fn in busy:
                    self.log.info("%s rotation of %s skipped: its caller %s holds %s buffers across the call",
                                  self.space.upper(), module.functions[j.fn].name, busy[j.fn], self.space.upper())
            jobs = [j for j in jobs if j.fn not in busy]
        if not jobs:
            return [], SKIP
        return jobs, None

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
        marker = module.attributes.get(PART_KEY)
        if marker is not None:
            return self._run_part(module, marker)
        jobs, why = self.jobs(module)
        out = self._unaliased(module, jobs)
        stats: Stats = {"rotations": 0, "functions": 0}
        if why is not None:
            self.log.info(why)
            stats["skipped"] = why
        else:
            stats.update(self._settle(out, module, self._rotate(out, jobs)))
            stats["functions"] = len({j.fn for j in jobs})
        return out, stats

    def _unaliased(self, module: Module, jobs: list[Job]) -> Module:
        """A copy of ``module`` whose SB / PSUM jobs' aliases that live one after the other are one memory
        location (rotation_rings.unalias): what run, split and merge all start from."""
        out = module.copy()
        if self.space in ("sb", "psum"):
            mtype = Mem.SB if self.space == "sb" else Mem.PSUM
            for k in sorted({j.fn for j in jobs}):
                unalias(out.functions[k], mtype)
        return out

    def _rotate(self, out: Module, jobs: list[Job]) -> dict[int, int]:
        """Rotate in place; instances moved per function."""
        arch = get_arch(out.arch)
        moved: dict[int, int] = {}
        dram = [j.fn for j in jobs if j.kind == "dram"]
        if dram:
            before = {k: out.functions[k].memlocs["addr"].copy() for k in dram}
            dram_rotation(out, dram, getattr(self, "dram_rotation_size", -1), self.log)
            for k in dram:
                moved[k] = int((out.functions[k].memlocs["addr"] != before[k]).sum())
        for job in jobs:
            fn = out.functions[job.fn]
            here = 0
            if job.kind == "psum":
                for _ in range(PSUM_SWEEPS):
                    here += psum_rotation(fn, arch, self.log)
            elif job.kind in ("standard", "post"):
                sp = analyse(fn, Mem.SB)
                rules = sb_schedule(job.kind, job.region.partitions)
                for batch in batches(sp):
                    here += sb_rotation_batch(sp, batch, rules, job.region, self.log)
            moved[job.fn] = moved.get(job.fn, 0) + here
        return moved

    def _settle(self, out: Module, module: Module, moved: dict[int, int]) -> Stats:
        """What follows rotation in each function it changed (the module docstring): edges rebuilt and
        scheduled again after scheduling, and the input kept where rotation is slower."""
        kept = rescheduled = reverted = 0
        for k, here in sorted(moved.items()):
            if not here:  # nothing moved: not even the aliases' accesses are repointed
                out.functions[k] = module.functions[k].copy()
                continue
            fn, old = out.functions[k], module.functions[k]
            t_new: float | None = None
            if live_overlap_problems(fn) and not live_overlap_problems(old):
                # a ring slot that shares bytes with a location live at the same time: never kept (the verifier
                # would refuse the module); the function stays as it came
                self.log.info("Rotation of %s reverted: it would overlap live memory locations", fn.name)
                out.functions[k] = old.copy()
                reverted += 1
                continue
            if FnAttr.KERNEL_SCOPE in fn.attrs:  # its edges are then the rebuilt ones, as the build times it
                again, _, t_again = schedule_timed(build_fdeps(fn), max_segment=MAX_SEGMENT,
                                                   compare_limit=self.compare_limit)
                # the new order must keep locations that share bytes live one after the other (the verifier's
                # rule); where it does not, the rotated function keeps the order it was rotated in
                if not live_overlap_problems(again):
                    fn, t_new = again, t_again
                    out.functions[k] = fn
                    rescheduled += 1
            if fn.n_insts <= self.compare_limit and self._slower(fn, old, t_new):
                self.log.info("Rotation of %s reverted: the timing model finds it slower", fn.name)
                out.functions[k] = old.copy()
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

    # ------------------------------------------------------------ split / merge (SB batches)
    def split(self, module: Module) -> list[Module] | None:
        if self.space != "sb" or PART_KEY in module.attributes:
            return None
        jobs, why = self.jobs(module)
        if why is not None:
            return None
        module = self._unaliased(module, jobs)
        parts: list[Module] = []
        for job in jobs:
            fn = module.functions[job.fn]
            sp = analyse(fn, Mem.SB)
            names = [fn.strings[s] for s in fn.memlocs["name"].tolist()]
            pinned = sorted(names[int(m)] for m in sp.memlocs[sp.pinned].tolist())
            for k, batch in enumerate(batches(sp)):
                if not _has_work(sp, batch):
                    continue
                members = sp.memlocs[batch]
                marker = {"function": fn.name, "job": job.fn, "kind": job.kind, "batch": k,
                          "region": [job.region.partitions, job.region.nbytes, job.region.usable],
                          "memlocs": [names[int(m)] for m in members.tolist()], "pinned": pinned}
                part_fn = fn.take_insts(part_rows(fn, members))
                parts.append(Module([part_fn], module.arch, module.version,
                                    module.attributes.with_(**{PART_KEY: marker}), module.artifact_dir,
                                    module.queues, module.extras))
        return parts if len(parts) >= 2 else None

    def _run_part(self, module: Module, marker: Record) -> tuple[Module, Stats]:
        out = module.copy()
        fn = out.functions[0]
        sp = analyse(fn, Mem.SB, frozenset(marker["pinned"]))
        names = [fn.strings[s] for s in fn.memlocs["name"].tolist()]
        want = set(marker["memlocs"])
        batch = np.array([e for e, m in enumerate(sp.memlocs.tolist()) if names[m] in want], dtype=np.int64)
        region = Region(*marker["region"])
        moved = sb_rotation_batch(sp, batch, sb_schedule(marker["kind"], region.partitions), region, self.log)
        return out, {"rotations": moved}

    def merge(self, module: Module, parts: list[Module], part_stats: list[Stats]) -> tuple[Module, Stats]:
        jobs = self.jobs(module)[0]
        base = self._unaliased(module, jobs)  # as split and run start from
        out = base.copy()
        for part in parts:
            marker = part.attributes[PART_KEY]
            fn = out.functions[int(marker["job"])]
            orig = base.functions[int(marker["job"])]
            if fn.name != marker["function"]:
                raise PassError(f"{self.name}: part for function {marker['function']} does not match {fn.name}")
            names = {orig.strings[s]: m for m, s in enumerate(orig.memlocs["name"].tolist())}
            members = np.array([names[n] for n in marker["memlocs"]], dtype=np.int64)
            _merge_part(fn, orig, part.functions[0], part_rows(orig, members))
        moved: dict[int, int] = {j.fn: 0 for j in jobs}  # a job without parts is left as it came, as in run
        for part, st in zip(parts, part_stats):
            k = int(part.attributes[PART_KEY]["job"])
            moved[k] = moved.get(k, 0) + int(st.get("rotations", 0))
        stats: Stats = {**self._settle(out, module, moved), "parts": len(parts),
                        "functions": len({int(p.attributes[PART_KEY]["job"]) for p in parts})}
        return out, stats


def _has_work(sp, batch) -> bool:
    return any(not sp.pinned[e] and len(sp.instances_of(int(sp.memlocs[e]))) >= 2 for e in batch.tolist())


def _merge_part(fn: Function, orig: Function, part: Function, rows: np.ndarray) -> None:
    """Copy a part's new sets and memory locations into ``fn`` and repoint the operands it moved."""
    n_sets, n_ml = len(orig.sets), len(orig.memlocs)
    set_map: dict[int, int] = {}
    for s in range(n_sets, len(part.sets)):
        r = part.sets.row(s)
        set_map[s] = fn.add_set(part.strings[r["name"]], r["kind"], r["dtype"], part.value(r["shape"]) or (),
                                tclass=r["tclass"], is_block=bool(r["is_block"]), n_blocks=r["n_blocks"],
                                extra=part.record(r["extra"]))
    ml_map: dict[int, int] = {}
    for m in range(n_ml, len(part.memlocs)):
        r = part.memlocs.row(m)
        ml_map[m] = fn.add_memloc(set_map.get(r["set"], r["set"]), part.strings[r["name"]], r["mtype"], addr=r["addr"],
                                  pbytes=r["pbytes"], nparts=r["nparts"], base=r["base"], bank=r["bank"],
                                  tensor_id=r["tensor_id"], const_path=part.string(r["const_path"]),
                                  extra=part.record(r["extra"]))
    if not ml_map:
        return
    p_ops = part.operands["memloc"]
    p_start = part.insts["ops"].astype(np.int64)
    nops = part.insts["nops"].astype(np.int64)
    o_start = fn.insts["ops"][rows].astype(np.int64)
    p_rows = _ranges(p_start, nops)
    o_rows = _ranges(o_start, nops)
    new = p_ops[p_rows].astype(np.int64)
    sel = np.flatnonzero(new >= n_ml)
    if len(sel):
        lookup = np.array([ml_map[m] for m in range(n_ml, len(part.memlocs))], dtype=np.int64)
        fn.operands["memloc"][o_rows[sel]] = lookup[new[sel] - n_ml]


@dataclass(frozen=True)
class AddressRotationPSUM(AddressRotation):
    """address_rotation_psum: rings of PSUM banks for recurring PSUM buffers (attribute 9 without 10)."""

    name = "address_rotation_psum"
    space = "psum"


@dataclass(frozen=True)
class AddressRotationSB(AddressRotation):
    """address_rotation_sb: rings of SBUF tiles by the seed's target schedule, one part per band batch."""

    name = "address_rotation_sb"
    space = "sb"
    splittable = True


@dataclass(frozen=True)
class AddressRotationDRAM(AddressRotation):
    """address_rotation_dram: internal DRAM buffers live across blocks laid out in a capped window."""

    name = "address_rotation_dram"
    space = "dram"

    dram_rotation_size: int = option(-1, "window in GiB for rotated DRAM buffers (at most 8; -1: the DRAM "
                                          "high-water mark before rotation)")
    disable_dram_rotation: bool = option(False, "leave DRAM buffers where they are")

    def __post_init__(self) -> None:
        super().__post_init__()
        if isinstance(self.dram_rotation_size, int) and self.dram_rotation_size > MAX_GIB:
            raise OptionError(f"option {self.name}.dram_rotation_size: {TOO_BIG}")


@dataclass(frozen=True)
class AddressRotationPSUMPostSchedule(AddressRotation):
    """address_rotation_psum_post_schedule: PSUM rings again after scheduling (attribute 12)."""

    name = "address_rotation_psum_post_schedule"
    space = "psum"
    post_schedule = True

