"""The build graph: every (kernel, pass) a Dask task keyed by its action, run only when needed.

How a build proceeds (:func:`build`):

1. Each build unit (a kernel compiled for one logical core) starts as a host
   module, put into the store.  Its hash is the input of the first step.
2. The client walks each unit's chain through the action records: the key
   of step *i* is the digest of (pass name, version, code digest, options,
   content hash of step *i*'s input, the settings that affect output, and
   -- for the first step and every step of a pass that reads the files the
   module names (``reads_files``: translate) -- the digests of the kernel
   files).  While records
   hit, the client just follows their output hashes.  **If every chain
   resolves, no cluster is started at all.**
3. The first miss of a chain becomes a Dask task whose key starts with the
   pass name (``unroll-<digest>``; the dashboard's task stream colours tasks
   by that prefix).  When it finishes, the client resumes walking the chain
   from its output hash -- so a pass that re-ran but produced the same
   bytes as before hits the next record: **early cutoff** falls out of
   keying on content.
4. A pass that can split becomes a split task, one task per part (each
   part cached on its own content hash) and a merge task.  With two or more
   workers, a pass that splits ahead of the one before it
   (``Pass.split_ahead``: schedule after build_fdeps) is split from that
   pass's input as soon as that pass fans out, so both passes' parts run
   side by side; its merge then takes the earlier pass's output.
5. A failing pass ends its unit with an error record; the others carry on.
   A task whose input object turns out missing or damaged makes the client
   drop the record that produced it and run that step again; from then on
   the unit's tasks re-hash objects they find already stored instead of
   trusting them (``check``), so each damaged object costs about one repair
   (the unit gives up past ``MAX_REPAIRS`` + two per step).  Failures that
   are not the kernel's (cache, cluster, file system) have fault ``environment``:
   the caller keeps the kernel's earlier output.

The executor is created once, at the first miss; if it cannot be created
(no scheduler at the address) the whole build stops with
:class:`ExecutorUnavailable` -- no unit is blamed for it.

Tasks run on a lazily created executor: a ``distributed`` cluster (local
processes or an existing scheduler) or, for ``workers=0`` and tests, the
calling process.
"""

from __future__ import annotations

import os
import time
import traceback
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Callable, Iterable

from tusk.cache.keys import Uncacheable, action_key
from tusk.cache.objects import ObjectDamaged
from tusk.cache.store import ObjectMissing, Store
from tusk.ir.errors import ENVIRONMENT, INPUT, EnvError, TuskError, fault_of
from tusk.workflows import tasks, timings, write_tasks
from tusk.workflows.build_report import (  # noqa: F401 - importable from here too
    BuildEvent,
    BuildReport,
    BuildUnit,
    ExecutorReady,
    StartUp,
    StepEvent,
    StepResult,
    TaskFinished,
    TaskSubmitted,
    UnitReport,
)
from tusk.workflows.executors import (  # noqa: F401 - importable from here too
    QUIET_CLUSTER,
    DaskExecutor,
    ExecutorUnavailable,
    InlineExecutor,
    check_workers_reach_store,
    client_executor,
    local_cluster_executor,
    scheduler_executor,
)
from tusk.workflows.pipeline import ROTATION_PASSES, Step

MAX_REPAIRS = 8  # per unit, beyond two per step (each damaged object of a chain costs about one)
PART_WRITE_INSTS = 200_000  # a final module this big is written in parts, one per worker, joined by the client


# ====================================================================== task kinds


class TaskKind(StrEnum):
    """What a submitted task does for its unit: how its answer is handled, where it may run and how urgent
    it is (:meth:`placement`)."""

    STEP = "step"              # a pass on a whole module
    SPLIT = "split"            # a pass cutting its input into parts (or running whole when it does not pay)
    PART = "part"              # one part of a split pass
    AHEAD_SPLIT = "ahead-split"  # the next pass's split, from the input of a pass still running (split_ahead)
    AHEAD_PART = "ahead-part"  # one part of it
    MERGE = "merge"            # a split pass joining its parts
    CHECK = "check"            # a piece of the verifier's checks of a big output
    EMIT = "emit"              # a unit's output files, written whole
    EMIT_PART = "emit-part"    # part k of a big final module's BIR-JSON, rendered
    EMIT_PLACE = "emit-place"  # part k put at its offset into the file
    TIMING = "timing"          # a makespan (and timelines) of one module: off the critical path
    KERNEL = "kernel"          # a kernel's own files once all its units are done

    def placement(self, j: int) -> tuple[bool, bool, int]:
        """(may run on any worker, waits in the executor for a free thread, Dask priority) of task ``j``.

        A chain's step goes to the worker that ran the unit's last task (its input is in that worker's
        memory).  Parts, checks, timing and kernel tasks read their inputs from the store: pinned to the
        unit's worker, every part of a big kernel ran there while the others stood idle; so do a final
        module's write parts but the first (pinned, the second waited ~2 s for work stealing).  Parts, checks
        and write parts go out no more at a time than there are worker threads, biggest first
        (``DaskExecutor``); a timing step is not held with them (queued last, it would keep a part from a free
        thread).  The first write part is held too though it prefers its worker: sent at once, it took no slot,
        so a 0.7 s check went out beside the two parts and sat in that worker's queue ahead of the placement
        the build waits for (large_matmul, 2 workers).  The placement goes to whichever worker is free: it
        reads a file, not a module in memory; it is held as well, else a check sent beside it waited in a busy
        worker's queue while the other worker stood idle.  The write parts and placements outrank the
        checks: the last part rendered decides when the file is placed."""
        part_of_write = self is TaskKind.EMIT_PART and j > 0
        anywhere = self in (TaskKind.TIMING, TaskKind.PART, TaskKind.AHEAD_PART, TaskKind.KERNEL, TaskKind.CHECK,
                            TaskKind.EMIT_PLACE) or part_of_write
        held = self in (TaskKind.PART, TaskKind.AHEAD_PART, TaskKind.CHECK, TaskKind.EMIT_PART, TaskKind.EMIT_PLACE)
        priority = {TaskKind.TIMING: -1000, TaskKind.EMIT_PART: 1, TaskKind.EMIT_PLACE: 2}.get(self, 0)
        return anywhere, held, priority


# ====================================================================== the build


@dataclass
class _Split:
    parts: list[str | dict]  # a stored part's content hash, or a slice: {"base": hash, "spec": ...}
    seconds: float
    insts_in: int | None
    outputs: dict[int, tuple[str, dict]] = field(default_factory=dict)
    part_run: dict[int, float] = field(default_factory=dict)  # part number -> seconds, of the parts that ran
    worker: str | None = None  # where the split ran: the step's input is in its memory, the merge goes there
    sizes: list[int] = field(default_factory=list)  # instructions of each part

    def answered(self, j: int, res: dict) -> None:
        """Part ``j`` is done: run (``res`` a task's answer, status "executed"), or found cached."""
        self.outputs[j] = (res["output"], dict(res.get("stats") or {}))
        if res.get("status") == "executed":
            self.part_run[j] = float(res.get("seconds") or 0)


@dataclass
class _Ahead:
    """Step ``index``'s split, cut from the input of the step before it while that one still runs
    (``Pass.split_ahead``: build_fdeps' parts and schedule's run side by side).  The step adopts it once its
    own input is known -- the merge takes the parts' outputs and that input -- unless it was turned down (then
    ``_State.ahead`` is None again)."""
    index: int
    split: _Split | None = None  # None until the split task answers; the step's own once it adopts it


@dataclass
class _Writing:
    items: list[list[str]]
    parts: int = 0          # the final module in this many parts (0: whole)
    # the tasks not answered yet: (EMIT, -1) the other files, (EMIT_PART, k) rendering part k,
    # (EMIT_PLACE, k) writing part k at its offset
    pending: set[tuple[TaskKind, int]] = field(default_factory=set)
    results: dict[int, dict] = field(default_factory=dict)  # -1: the other files; k: part k rendered
    size: int = 0           # of the whole file, once every part is rendered


@dataclass
class _Checks:
    """The verifier's checks of step ``index``'s output, run as tasks while the output is written: its action
    record is written once they all pass (``tasks.verify_checks``)."""
    index: int
    key: str
    record: dict
    tasks: list
    names: list[str]                                        # the output's functions, for the verdict's text
    results: dict[int, dict] = field(default_factory=dict)
    write_failed: dict | None = None                        # the write's error, held until the verdict


@dataclass
class _State:
    report: UnitReport
    hashes: list[str]
    keys: list[str] = field(default_factory=list)
    parts: list[dict] = field(default_factory=list)
    i: int = 0
    started: float = 0.0
    split: _Split | None = None
    ahead: _Ahead | None = None  # the next step's split, made while this one runs
    done: bool = False
    gen: int = 0          # bumped when in-flight results of this unit become stale
    writing: _Writing | None = None  # the unit's output files being written
    worker: str | None = None  # where the unit's last task ran (its output is in that worker's memory)
    timing_started: set[int] = field(default_factory=set)   # phases (timings.PhaseSpec.index) asked for
    timing_pending: set[int] = field(default_factory=set)   # ... whose task has not answered yet
    checking: _Checks | None = None  # the verifier's checks of a big final output, running beside its write
    written: bool = False      # the chain is complete and its outputs written: done once no timing is pending


def _dead(st: _State) -> list[str]:
    """The unit's modules that no task of its chain reads again: those before its current step's input.  A
    worker that ran parts of an earlier step may still keep one (the base its slices were cut from); it lets
    them go before it loads the next one, so the new module reuses their memory instead of fresh pages."""
    current = st.hashes[st.i] if st.i < len(st.hashes) else None
    return sorted({h for h in st.hashes[:st.i] if h and h != current})


class Build:
    """One build; see :func:`build`."""

    def __init__(self, store: Store, steps: list[Step], *, env: dict[str, Any] | None = None,
                 executor: Callable[[], Any] | Any | None = None, verify: str | bool = "none",
                 previous: dict[str, dict[str, dict]] | None = None,
                 on_final: Callable[[UnitReport, str], list | None] | None = None,
                 on_event: Callable[["BuildEvent"], None] | None = None,
                 timing: str = timings.NONE, timeline_limit: int = 400_000, write_parts: int | None = None,
                 defer_checks: bool | None = None, split_ahead: bool | None = None,
                 on_kernel_done: Callable[[list[UnitReport]], tuple[Callable, tuple, str] | None] | None = None):
        self.store = store
        self.steps = steps
        # the timing steps: which modules of each chain are measured, and whether timelines are kept
        self.timing = timing
        self.timeline_limit = timeline_limit
        self.phases = timings.phases([s.name for s in steps], ROTATION_PASSES, timing)
        self.env = env or {}
        self._executor_factory = executor if callable(executor) or executor is None else (lambda: executor)
        self.executor = None
        # "ends": the kernel as translated (the first step, or a pass that reads the kernel's files) and the
        # final output; "all": after every pass; "none"
        self.verify = {True: "all", False: "none"}.get(verify, verify) if isinstance(verify, bool) else verify
        self.previous = previous or {}
        self.on_final = on_final
        self.emit = on_event or (lambda event: None)  # every BuildEvent, in the order things happen
        self.write_parts = write_parts                # None: by size and workers (tests force a number)
        # a big final output's checks as tasks beside its write (None: with 2+ workers; tests force it)
        self.defer_checks = defer_checks
        # a pass's split made while the pass before it still runs (Pass.split_ahead; None: with 2+ workers)
        self.split_ahead = split_ahead
        # called when every unit of a kernel is done: a task that writes the kernel's own files (its timeline.json)
        # while the build goes on, on a worker, instead of one kernel after another when the build is over
        self.on_kernel_done = on_kernel_done
        self._kernels: dict[str, list[_State]] = {}   # kernel -> its units' states
        self._tasks: dict[str, tuple[UnitReport, str]] = {}  # task key -> (unit, what) while it runs
        self.waiting: dict[str, list[tuple[_State, TaskKind, int, int]]] = {}
        self._inflight: dict[str, str] = {}          # action -> task key of its submitted task
        self._timing_due: list[tuple] = []           # timing steps found due, submitted after the chain steps
        self._submitted: dict[str, tuple[float, str]] = {}  # task key -> (submit time, action)
        self._warm_modules: list[str] = []           # modules every process imports at start-up (run() decides)

    # ------------------------------------------------------------ keys
    def _key(self, st: _State, i: int) -> tuple[str, dict]:
        step = self.steps[i]
        parts = {**step.key_parts(), "input": st.hashes[i], "env": self.env}
        if i == 0 or step.reads_files:  # the module names the kernel files but does not hold them
            parts["files"] = st.report.unit.files
        try:
            return action_key(parts), parts
        except Uncacheable:
            import uuid

            return uuid.uuid4().hex * 2, parts  # never hits: fail towards a miss

    def _ctx(self, st: _State, i: int | None = None) -> dict[str, Any]:
        """What a task of the unit needs besides the step: the store, flags, the unit's locations."""
        verify: bool | str = i is not None and self._verifies(i)
        defer = self.defer_checks if self.defer_checks is not None else self._ready_workers() >= 2
        if verify and i == len(self.steps) - 1 and defer:
            verify = tasks.DEFER  # a big final output is checked by tasks beside its write, not before it
        return {"store": self.store.url, "verify": verify, "check": st.report.repairs > 0,
                "where": st.report.unit.where, "dead": _dead(st)}

    def _verifies(self, i: int) -> bool:
        if self.verify == "all":
            return True
        if self.verify == "ends":
            return i == 0 or i == len(self.steps) - 1 or self.steps[i].reads_files
        return False

    def _task_key(self, prefix: str, key: str, st: _State) -> str:
        """``<pass>-<kernel>-<digest8>``: the dashboard groups by pass and names the kernel."""
        suffix = f"-r{st.report.repairs}" if st.report.repairs else ""
        unit = "".join(c if c.isalnum() or c in "._" else "_" for c in st.report.unit.name)[:48]
        return f"{prefix}-{unit}-{key[:8]}{suffix}"

    # ------------------------------------------------------------ running
    def _submit(self, prefix: str, key: str, st: _State, kind: TaskKind, j: int, fn: Callable, *args: Any,
                what: str = "", on: str | None = None, priority: int | None = None, size: int = 0,
                batch: int | None = None) -> None:
        """Submit a task for action ``key`` (or join the one already submitted for it by another unit); ``on``:
        the worker to prefer (else the unit's last worker, or none for tasks whose inputs are in the store);
        ``priority``: Dask's (higher first; default by kind); ``size``: orders equally urgent parts (the
        biggest first) within their ``batch`` (tasks submitted together: an earlier batch goes first)."""
        executor = self._started()
        action = f"{prefix}-{key}-{st.report.repairs}"
        task_key = self._inflight.get(action)
        if task_key is None:  # the same action for two units runs once
            task_key = self._inflight[action] = self._task_key(prefix, key, st)
            self._submitted[task_key] = (time.time(), action)
            anywhere, held, placed_priority = kind.placement(j)
            executor.submit(task_key, fn, *args, worker=on or (None if anywhere else st.worker),
                                 priority=placed_priority if priority is None else priority, anywhere=held, size=size,
                                 batch=batch)
            label = what or (self.steps[st.i].label if kind is not TaskKind.EMIT else "write_bir_json")
            what = {TaskKind.SPLIT: f"{label} (split)", TaskKind.MERGE: f"{label} (merge)"}.get(kind, label)
            self._tasks[task_key] = (st.report, what)
            self.emit(TaskSubmitted(task_key, st.report, what))
        self.waiting.setdefault(task_key, []).append((st, kind, j, st.gen))

    def _ready_workers(self) -> int:
        """Workers the executor has warmed up (0 before it starts)."""
        return len(getattr(self.executor, "workers_ready", {}) or {})

    def _started(self):
        """The executor, started (and its workers warmed up) by the first task the build submits."""
        if self.executor is None:
            factory = self._executor_factory or InlineExecutor
            t_start = time.perf_counter()
            try:
                self.executor = factory()
            except ExecutorUnavailable:
                raise
            except TuskError as e:
                raise ExecutorUnavailable(str(e)) from None
            self.executor.started_seconds = time.perf_counter() - t_start  # type: ignore[union-attr]
            self.emit(ExecutorReady(self.executor))
            t_warm = time.perf_counter()
            warm = self.executor.warm_up(sorted({s.task_spec()["target"] for s in self.steps}) + self._warm_modules)
            self.executor.workers_ready = warm  # type: ignore[union-attr]
            self.emit(StartUp(self.executor.description, self.executor.started_seconds,
                              time.perf_counter() - t_warm, warm))
        return self.executor

    def _advance(self, st: _State) -> None:
        """Follow action records from step ``st.i`` until one misses (submit it) or the chain ends."""
        while st.i < len(self.steps):
            i = st.i
            step = self.steps[i]
            key, parts = self._key(st, i)
            del st.keys[i:], st.parts[i:]
            st.keys.append(key)
            st.parts.append(parts)
            rec = self.store.get_action(key)
            if rec is not None:
                self.store.touch_action(key)
                self._record(st, i, "cached", rec)
                continue
            failed = self.store.get_failure(key)
            if failed is not None:  # this pass failed on this very input before: report it again
                self.store.touch_action(key)
                self._fail(st, failed["error"], cached=True)
                return
            args = (self._ctx(st, i), step.task_spec(), st.hashes[i], key, parts)
            if step.splittable:
                if self._adopt(st):
                    return
                self._submit(f"{step.name}-split", key, st, TaskKind.SPLIT, i, tasks.split_step, *args)
            else:
                self._submit(step.name, key, st, TaskKind.STEP, i, tasks.run_step, *args)
            return
        self._final(st)

    def _record(self, st: _State, i: int, status: str, rec: dict) -> None:
        step = self.steps[i]
        res = StepResult(label=step.label, name=step.name, status=status, key=st.keys[i], input=st.hashes[i],
                         output=rec["output"], seconds=float(rec.get("seconds") or 0.0),
                         stats=dict(rec.get("stats") or {}), insts_in=rec.get("insts_in"),
                         insts_out=rec.get("insts_out"), parts_total=int(rec.get("parts_total") or 0),
                         parts_executed=int(rec.get("parts_executed") or 0), key_parts=st.parts[i],
                         split_seconds=rec.get("split_seconds"), part_seconds=list(rec.get("part_seconds") or []))
        if status == "executed":
            res.reason = self._reason(st, i)
            res.timing = dict(rec.get("timing") or {})
        st.report.steps[i:] = [res]
        st.hashes[i + 1:] = [rec["output"]]
        st.i = i + 1
        if st.ahead is not None and st.ahead.index <= i:  # merged, or the step was cached after all
            self._drop_ahead(st)
        self.emit(StepEvent(status, st.report, step.label))
        self._time(st)

    # ------------------------------------------------------------ timing steps
    def _time(self, st: _State) -> None:
        """Start the timing step of every phase whose module is now known (once per unit)."""
        for spec in self.phases:
            if spec.index in st.timing_started or len(st.hashes) <= spec.index:
                continue
            st.timing_started.add(spec.index)
            h = st.hashes[spec.index]
            n = st.report.steps[spec.index - 1].insts_out if spec.index else st.report.steps[0].insts_in
            if isinstance(n, int) and n > self.timeline_limit:
                st.report.timings.append(timings.Timed(
                    spec.title, h, spec.summary, why=f"{n:,} instructions: above the {self.timeline_limit:,} this "
                                                     f"build times (setting timeline_limit)", status="skipped"))
                continue
            want = self.timing == timings.TIMELINES
            note = timings.lookup(self.store, h, want)
            if note is not None:
                st.report.timings.append(timings.timed_from(spec, h, note, "cached"))
                continue
            st.timing_pending.add(spec.index)
            self._timing_due.append((st, spec, h, want))

    def _submit_timing(self) -> None:
        """Submit the timing steps :meth:`_time` found due, after the chain steps submitted with them: a timing
        step sent first took the worker the chain's next step was pinned to (large_matmul variants: the
        final write waited 0.6 s behind the makespan while the other worker stood idle)."""
        due, self._timing_due = self._timing_due, []
        for st, spec, h, want in due:
            self._submit("timing", timings.note_key(h) + ("t" if want else "m"), st, TaskKind.TIMING, spec.index,
                         tasks.time_module, self.store.url, h, want, self.timeline_limit, what=f"timing ({spec.title})")

    def _timed(self, st: _State, index: int, res: dict) -> None:
        spec = next(p for p in self.phases if p.index == index)
        h = st.hashes[index] if index < len(st.hashes) else ""
        if res.get("status") in ("executed", "cached"):
            timed = timings.timed_from(spec, h, res, res["status"], float(res.get("seconds") or 0.0))
        else:  # a timing step that cannot run costs the figure, never the kernel
            timed = timings.Timed(spec.title, h, spec.summary, why=str(res.get("error") or "not timed"),
                                  status="failed")
        st.report.timings.append(timed)
        st.timing_pending.discard(index)
        if st.written:
            self._done(st)

    def _received(self, task_key: str, res: dict) -> dict:
        """A task's result, with ``queued`` (from submission until a worker started it: waiting for a free
        worker, not overhead) and ``handover`` (from the task's end until the client has its result:
        the scheduler's round trip), from wall clocks on both sides."""
        sent, action = self._submitted.pop(task_key, (None, None))
        self._inflight.pop(action, None)
        timing = res.get("timing")
        if sent is not None and isinstance(timing, dict) and isinstance(timing.get("started"), float):
            now = time.time()
            timing = {k: v for k, v in timing.items() if k != "started"}
            timing["queued"] = round(max(0.0, timing_start(res) - sent), 6)
            if isinstance(res.get("ended"), float):
                timing["handover"] = round(max(0.0, now - res["ended"]), 6)
            res = {**res, "timing": timing}
        return res

    def _reason(self, st: _State, i: int) -> str:
        from tusk.workflows.why import reason

        label = self.steps[i].label
        return reason(self.previous.get(st.report.unit.name, {}).get(label), st.parts[i], label)

    def _fail(self, st: _State, message: str, cached: bool = False, fault: str = INPUT, tb: str = "") -> None:
        if st.done:
            return
        st.report.fault, st.report.traceback = fault, tb
        step = self.steps[st.i] if st.i < len(self.steps) else None
        if step is not None:
            st.report.steps[st.i:] = [StepResult(label=step.label, name=step.name, status="failed",
                                                 key=st.keys[st.i] if st.i < len(st.keys) else "",
                                                 input=st.hashes[st.i],
                                                 reason=("cached failure: " if cached else "") + message)]
        st.report.error = message
        st.report.seconds = time.perf_counter() - st.started
        st.done = True
        self.emit(StepEvent("failed", st.report, step.label if step else ""))

    def _give_up(self, st: _State, why: str) -> bool:
        """Count a repair; True (and the unit failed, not by its kernel's fault) past the limit."""
        st.report.repairs += 1
        st.gen += 1  # every task in flight for the unit is stale, its ahead split's among them
        st.checking = None
        st.ahead = None
        if st.report.repairs > MAX_REPAIRS + 2 * len(self.steps):
            self._fail(st, f"giving up after {st.report.repairs - 1} repairs of damaged cache objects ({why}); "
                           f"check the cache at {self.store.url} (tusk cache verify --remove)", fault=ENVIRONMENT)
            return True
        return False

    def _repair(self, st: _State, i: int, why: str) -> None:
        """Step ``i``'s input object is gone: forget the record that made it and run that step again."""
        if self._give_up(st, why):
            return
        if i == 0:
            unit = st.report.unit
            module = unit.module if unit.module is not None else (unit.reload() if unit.reload else None)
            if module is None:
                self._fail(st, f"host module {st.hashes[0]} is missing from the store and cannot be rebuilt",
                           fault=ENVIRONMENT)
                return
            self.store.put_hashed(module, st.hashes[0], check=True)
            st.i = 0
        else:
            self.store.drop_action(st.keys[i - 1])
            st.i = i - 1
        st.split = None
        self._advance(st)

    def _final(self, st: _State) -> None:
        final = st.hashes[len(self.steps)] if len(st.hashes) > len(self.steps) else st.hashes[-1]
        st.report.final = final
        items = None
        if self.on_final is not None:
            try:
                items = self.on_final(st.report, final)
            except (ObjectMissing, ObjectDamaged) as e:
                st.report.final = None
                self._repair(st, len(self.steps), e.message)
                return
            except TuskError as e:
                st.report.final = None
                self._fail(st, str(e), fault=fault_of(e, kernel=True))
                return
        if items:
            self._write(st, [[str(x) for x in item] for item in items])
            return
        self._done(st)

    # ------------------------------------------------------------ writing the outputs
    def _parts_for(self, st: _State, item: list[str]) -> int:
        """Into how many parts the final module is written in parallel (1: whole, by one task)."""
        if "flatten" in item[3:] or not hasattr(write_tasks.bir_json_parts(), "render_part"):
            return 1
        if self.write_parts is not None:
            return max(1, self.write_parts)
        n = st.report.steps[-1].insts_out if st.report.steps else None
        workers = self._ready_workers()
        if not getattr(self.executor, "is_cluster", False) or workers < 2 or not isinstance(n, int) \
                or n < PART_WRITE_INSTS or write_tasks.written_before(self.store, item[0], False):
            return 1
        return workers

    def _write(self, st: _State, items: list[list[str]]) -> None:
        """The one place a unit's BIR-JSON files are written: by write_bir_json tasks on the cluster, else in
        this process.  The final module of a big kernel is written in parts, one per worker: each renders its
        part into a file, then the later parts are copied to their offsets in the file part 0 started
        (:func:`write_tasks.write_part`, :func:`write_tasks.place_part`), which the client renames into place."""
        n = self._parts_for(st, items[0])
        rest = items if n == 1 else items[1:]
        st.writing = _Writing(items, n if n > 1 else 0)
        cluster = getattr(self.executor, "is_cluster", False)
        if not cluster and n == 1:
            self._wrote(st, TaskKind.EMIT, 0, write_tasks.write_outputs(self.store.url, items))
            return
        from tusk.cache.keys import digest

        st.writing.pending.update([(TaskKind.EMIT, -1)] if rest else [])
        st.writing.pending.update((TaskKind.EMIT_PART, k) for k in range(n if n > 1 else 0))
        if rest:
            if cluster:
                self._submit("write_bir_json", digest(rest), st, TaskKind.EMIT, -1, write_tasks.write_outputs,
                             self.store.url, rest, what="write_bir_json")
            else:
                self._wrote(st, TaskKind.EMIT, -1, write_tasks.write_outputs(self.store.url, rest))
        for k in range(n if n > 1 else 0):
            h, path, art = items[0][:3]
            self._submit("write_bir_json", digest([items[0], k, n]), st, TaskKind.EMIT_PART, k, write_tasks.write_part,
                         self.store.url, h, path, art, k, n, what=f"write_bir_json part {k + 1}/{n}")

    def _place(self, st: _State) -> None:
        """Every part is rendered: place parts 1.. at their offsets (from their files, by any worker)."""
        from tusk.cache.keys import digest

        w = st.writing
        h, path, art = w.items[0][:3]
        offset = 0
        for k in range(w.parts):
            if k:
                w.pending.add((TaskKind.EMIT_PLACE, k))
                self._submit("write_bir_json", digest([w.items[0], k, w.parts, "place"]), st, TaskKind.EMIT_PLACE, k,
                             write_tasks.place_part, self.store.url, h, path, art, k, w.parts, offset,
                             what=f"write_bir_json place {k + 1}/{w.parts}")
            offset += int(w.results[k]["size"])
        w.size = offset

    def _wrote(self, st: _State, kind: TaskKind, j: int, res: dict) -> None:
        """A write task answered; when the last one has, the parts' file is put in place and the outputs
        checked."""
        w = st.writing
        if w is None:
            return
        if kind is TaskKind.EMIT and not w.pending:  # the whole write, in this process
            st.writing = None
            self._on_written(st, w.items, res)
            return
        if res.get("status") not in ("written", "part-rendered", "part-placed"):
            st.writing = None
            if w.parts:
                write_tasks.drop_parts(w.items[0][1], w.parts)
            self._on_written(st, w.items, res)
            return
        w.pending.discard((kind, j))
        if kind is not TaskKind.EMIT_PLACE:
            w.results[j] = res
        if kind is TaskKind.EMIT_PART and not any(p[0] is TaskKind.EMIT_PART for p in w.pending):
            self._place(st)
        if w.pending:
            return
        st.writing = None
        files, consts = list(w.results.get(-1, {}).get("files") or []), set(w.results.get(-1, {}).get("consts") or [])
        if w.parts:
            h, path, art = w.items[0][:3]
            try:
                size = write_tasks.finish_parts(path, w.parts, w.size)
            except OSError as e:
                self._on_written(st, w.items, {"status": "error", "fault": ENVIRONMENT,
                                               "error": f"writing {path} in {w.parts} parts failed: {e}"})
                return
            names = sorted(w.results[0].get("consts") or [])
            write_tasks.note_written(self.store, h, False, path, art, names)
            files.insert(0, [path, size, "this process"])
            consts.update(names)
        self._on_written(st, w.items, {"status": "written", "files": files, "consts": sorted(consts)})

    def _done(self, st: _State) -> None:
        st.written = True
        if st.timing_pending or st.checking is not None:
            return  # done when the last timing step or check answers
        titles = [p.title for p in self.phases]
        st.report.timings.sort(key=lambda t: titles.index(t.title) if t.title in titles else len(titles))
        st.report.seconds = time.perf_counter() - st.started
        st.done = True
        self.emit(StepEvent("done", st.report, ""))
        self._kernel_task(st)

    def _kernel_task(self, st: _State) -> None:
        """Once the last unit of ``st``'s kernel is done, submit the kernel's own task (``on_kernel_done``) to
        the executor already running; a build that started none leaves the work to its caller."""
        states = self._kernels.get(st.report.unit.kernel, [st])
        if self.on_kernel_done is None or self.executor is None or not all(s.done for s in states):
            return
        task = self.on_kernel_done([s.report for s in states])
        if task is None:
            return
        from tusk.cache.keys import digest

        fn, args, what = task
        self._submit(what, digest([st.report.unit.kernel, [s.report.final for s in states], repr(args)]), st,
                     TaskKind.KERNEL, 0, fn, *args, what=what)

    def _on_written(self, st: _State, items: list, res: dict) -> None:
        """Outputs were written (maybe on a worker): check they are here, else write them on the client."""
        status = res.get("status")
        if status == "input-missing":
            h = res.get("input")
            idx = st.hashes.index(h) if h in st.hashes else len(self.steps)
            st.report.final = None
            self._repair(st, idx, res.get("error", "output object missing"))
            return
        if status != "written":
            st.report.final = None
            if st.checking is not None:  # the output may be invalid: the verifier's verdict is reported first
                st.checking.write_failed = res
                return
            self._fail(st, res.get("error", f"writing outputs failed: {res!r}"),
                       fault=res.get("fault") or ENVIRONMENT, tb=res.get("traceback", ""))
            return
        sizes = {path: size for path, size, *_ in res.get("files", [])}
        missing = [item for item in items
                   if not (os.path.isfile(item[1]) and os.path.getsize(item[1]) == sizes.get(item[1]))]
        st.report.outputs = res
        if missing:  # written on a machine that does not share this directory
            res = write_tasks.write_outputs(self.store.url, missing)
            if res.get("status") != "written":
                self._on_written(st, missing, res)
                return
        self._done(st)

    # ------------------------------------------------------------ task results
    def _on_result(self, st: _State, kind: TaskKind, j: int, res: dict) -> None:
        if st.done:  # a kernel task's answer among them: the caller checks the files it wrote
            return
        status = res.get("status")
        if kind is TaskKind.TIMING:
            self._timed(st, j, res)
            return
        if kind in (TaskKind.EMIT, TaskKind.EMIT_PART, TaskKind.EMIT_PLACE):
            self._wrote(st, kind, j, res)
            return
        if kind is TaskKind.CHECK:
            self._checked(st, j, res)
            return
        if kind in (TaskKind.AHEAD_SPLIT, TaskKind.AHEAD_PART):
            self._ahead_answered(st, kind, j, res)
            return
        i = st.i
        step = self.steps[i]
        if status == "error":
            self._fail(st, res.get("error", "unknown error"), cached=bool(res.get("cached")),
                       fault=res.get("fault") or INPUT, tb=res.get("traceback", ""))
            return
        if status == "input-missing":
            if kind in (TaskKind.MERGE, TaskKind.PART) and (res.get("part") or kind is TaskKind.PART):
                # a part object vanished: split again (the part records will mostly hit)
                st.split = None
                self._drop_ahead(st)
                if self._give_up(st, res.get("error", "part missing")):
                    return
                self._advance(st)
                return
            self._repair(st, i, res.get("error", "input missing"))
            return
        if kind in (TaskKind.STEP, TaskKind.MERGE, TaskKind.SPLIT) and status in ("executed", "cached"):
            if kind is TaskKind.MERGE and st.split is not None:
                sp = st.split
                res = {**res, "seconds": sp.seconds + sum(sp.part_run.values()) + float(res.get("seconds") or 0)}
            st.split = None
            checks = self._check(st, i, res) if res.get("checks") else None
            self._record(st, i, "executed" if status == "executed" else "cached", res)
            self._advance(st)
            if checks is not None:
                checks()  # after the final module's write parts: they are the longer way to the end
            return
        if kind is TaskKind.SPLIT and status == "split":
            st.split = _split_of(res)
            self._submit_parts(st)
            if not st.done:  # (a part's cached refusal has failed the unit)
                self._split_ahead(st)
            return
        if kind is TaskKind.PART and status in ("executed", "cached") and st.split is not None:
            st.split.answered(j, res)
            self._maybe_merge(st)
            return
        self._fail(st, f"unexpected task result {res!r} for {step.label}")

    # ------------------------------------------------------------ the verifier's checks as tasks
    def _check(self, st: _State, i: int, res: dict) -> Callable[[], None]:
        """Step ``i`` stored a big output without checking it: check it in parts while it is written.  The unit
        waits for the checks from now; the returned function submits them."""
        from tusk.cache.keys import digest

        c = st.checking = _Checks(i, st.keys[i], dict(res["record"]), list(res["checks"]), list(res["functions"]))
        inputs = (res["output"], st.hashes[i])

        def submit() -> None:
            # in their order (the biggest of a big function first; ir.verify.verify_tasks), each after the write
            # parts and before a timing step
            for j, task in enumerate(c.tasks):
                self._submit("verify", digest([inputs[0], task]), st, TaskKind.CHECK, j, tasks.verify_checks,
                             self.store.url, *inputs, task, what=f"verify {j + 1}/{len(c.tasks)}",
                             priority=-j)
        return submit

    def _checked(self, st: _State, j: int, res: dict) -> None:
        """A check answered; once all have, the step's record is written (or the unit fails as verify fails)."""
        from tusk.ir.errors import VerifyError
        from tusk.ir.verify import verify_join

        c = st.checking
        if c is None:
            return
        if res.get("status") != "checked":
            st.checking = None
            if res.get("status") == "input-missing":
                self._repair(st, c.index, res.get("error", "output object missing"))
                return
            st.i = c.index
            self._fail(st, res.get("error", f"verifying failed: {res!r}"), fault=res.get("fault") or ENVIRONMENT,
                       tb=res.get("traceback", ""))
            return
        c.results[j] = res
        if len(c.results) < len(c.tasks):
            return
        st.checking = None
        step = self.steps[c.index]
        blame = next((r["blame"] for r in c.results.values() if r.get("blame")), None)
        if blame:  # the kernel placed its memory so: its fault, recorded like any refusal of its input
            self.store.put_action(c.key, tasks.failure_record(step.name, step.label, blame, "KernelOverlap",
                                                              c.record.get("parts") or {}, "this process"))
            st.i = c.index
            self._fail(st, blame, fault=INPUT)
            return
        try:
            verify_join(c.names, c.tasks, [c.results[k]["problems"] for k in range(len(c.tasks))])
        except VerifyError as e:
            st.i = c.index
            self._fail(st, f"pass {step.name} produced invalid IR: {e}", fault=fault_of(e, kernel=True))
            return
        timing = dict(c.record.get("timing") or {})
        timing["verify"] = round(sum(float(r.get("timing", {}).get("run") or 0.0) for r in c.results.values()), 6)
        self.store.put_action(c.key, {**c.record, "timing": timing})
        if 0 <= c.index < len(st.report.steps):
            st.report.steps[c.index].timing["verify"] = timing["verify"]
        if c.write_failed is not None:  # a valid output that could not be written
            self._on_written(st, [], c.write_failed)
        elif st.written:
            self._done(st)

    def _part_key(self, step: Step, part: str | dict) -> tuple[str, dict]:
        """A part's action key: by its content hash, or a slice's by its base's content hash and its spec."""
        if isinstance(part, str):
            parts = {**step.key_parts(), "input": part, "env": self.env, "part": True}
        else:
            from tusk.cache.keys import digest

            # "base": what its record names as its input (the object the slice is cut from: kept while it is)
            parts = {**step.key_parts(), "input": digest(["slice", part["base"], part["spec"]]), "env": self.env,
                     "part": True, "slice": True, "base": part["base"]}
        return action_key(parts), parts

    def _submit_parts(self, st: _State, sp: _Split | None = None, index: int | None = None,
                      kind: TaskKind = TaskKind.PART) -> None:
        """Submit the parts of split ``sp`` of step ``index`` (default: the unit's split of its current step; an
        ahead split's parts are ``AHEAD_PART``), those not cached; merge when every part is done."""
        sp = sp or st.split
        step = self.steps[st.i if index is None else index]
        ctx = self._ctx(st)
        if kind is TaskKind.AHEAD_PART:  # their base is an earlier step's input, which the unit may have passed
            bases = {p["base"] for p in sp.parts if isinstance(p, dict)}
            ctx["dead"] = [h for h in ctx["dead"] if h not in bases]
        sizes = sp.sizes
        # the biggest part first, where the split ran (the parts are in its memory): fetched by another worker,
        # the rotation carrier (the whole 1.2M-row module) cost 0.5 s and ended last, the merge waiting on it
        home = sizes.index(max(sizes)) if sizes and len(sizes) == len(sp.parts) else -1
        batch = None
        for j in sorted(range(len(sp.parts)), key=lambda j: j != home):
            h = sp.parts[j]
            key, parts = self._part_key(step, h)
            rec = self.store.get_action(key)
            if rec is not None:
                self.store.touch_action(key)
                sp.answered(j, rec)
                continue
            failed = self.store.get_failure(key)
            if failed is not None:
                if kind is TaskKind.AHEAD_PART:  # the usual split meets the refusal itself
                    self._ahead_answered(st, kind, j, {"status": "error"})
                else:
                    self._fail(st, failed["error"], cached=True)
                return
            batch = self._started().next_batch() if batch is None else batch
            self._submit(f"{step.name}-part", key, st, kind, j, tasks.run_part, ctx,
                         step.task_spec(), h, key, parts, on=sp.worker if j == home else None,
                         size=sizes[j] if j < len(sizes) else 0, batch=batch, what=f"{step.label} part {j + 1}/{len(sp.parts)}")
        if kind is TaskKind.PART:
            self._maybe_merge(st)

    # ------------------------------------------------------------ splitting ahead
    def _ahead_on(self) -> bool:
        if self.split_ahead is not None:
            return self.split_ahead
        return bool(getattr(self.executor, "is_cluster", False)) and self._ready_workers() >= 2

    def _split_ahead(self, st: _State) -> None:
        """Step ``st.i`` has fanned out: when the next step's pass splits ahead of it (``Pass.split_ahead``),
        split the next step now, from this step's input, so its parts run beside this step's parts and merge
        (one worker stood idle through build_fdeps' last part, its merge and schedule's split: 0.9 s of
        large_matmul's 15 s on two workers)."""
        nxt = st.i + 1
        if st.ahead is not None or nxt >= len(self.steps) or not self._ahead_on():
            return
        step, before = self.steps[nxt], self.steps[st.i]
        from tusk.stages import REGISTRY

        # the registered pass of that name (the reason it may go ahead is what that pass changes), not a
        # module:Class pass that calls itself so
        if not step.splittable or before.name not in step.splits_ahead_of or REGISTRY.get(before.name) != before.target:
            return
        from tusk.cache.keys import digest

        st.ahead = _Ahead(nxt)
        self._submit(f"{step.name}-split", digest(["ahead", step.key_parts(), st.hashes[st.i], self.env]), st,
                     TaskKind.AHEAD_SPLIT, nxt, tasks.split_ahead, self._ctx(st), step.task_spec(),
                     st.hashes[st.i], what=f"{step.label} (split ahead)", on=st.split.worker if st.split else None)

    def _adopt(self, st: _State) -> bool:
        """Whether step ``st.i`` takes the split made ahead of it (merging once its parts are done) or waits for
        that split's answer; False: the step splits as usual."""
        a = st.ahead
        if a is None or a.index != st.i:
            return False
        if a.split is None:
            return True  # the split answers soon
        st.split = a.split
        self._maybe_merge(st)
        return True

    def _ahead_answered(self, st: _State, kind: TaskKind, j: int, res: dict) -> None:
        a = st.ahead
        if a is None:
            return
        status = res.get("status")
        if kind is TaskKind.AHEAD_SPLIT and status == "split":
            a.split = _split_of(res)
            self._submit_parts(st, a.split, a.index, TaskKind.AHEAD_PART)
            self._adopt(st)  # when the step waits for it (and a cached refusal has not dropped it)
            return
        adopted = a.split is not None and st.split is a.split
        if kind is TaskKind.AHEAD_PART and status in ("executed", "cached") and a.split is not None:
            a.split.answered(j, res)
            if adopted:
                self._maybe_merge(st)
            return
        # declined (the input has edges of its own), or a task of it failed: the step splits as usual, after
        # the step before it, and meets any error of its own there
        self._drop_ahead(st)
        if st.i == a.index:
            if adopted:
                st.split = None
            self._advance(st)

    def _drop_ahead(self, st: _State) -> None:
        """Forget the unit's ahead split; its tasks still in flight answer no one."""
        if st.ahead is None:
            return
        st.ahead = None
        for key, waiting in list(self.waiting.items()):
            kept = [w for w in waiting if not (w[0] is st and w[1] in (TaskKind.AHEAD_SPLIT, TaskKind.AHEAD_PART))]
            if len(kept) < len(waiting):
                waiting[:] = kept
                if not kept and self._discard(key):
                    del self.waiting[key]

    def _discard(self, task_key: str) -> bool:
        """Take back a task no one waits for any more, if the executor still holds it (it never runs: a
        dropped ahead split's parts would otherwise run before the parts the unit needs); False once sent."""
        discard = getattr(self.executor, "discard", None)
        if discard is None or not discard(task_key):
            return False
        _, action = self._submitted.pop(task_key, (None, None))
        self._inflight.pop(action, None)
        if task_key in self._tasks:
            self.emit(TaskFinished(task_key, *self._tasks.pop(task_key), {"status": "discarded"}))
        return True

    def _maybe_merge(self, st: _State) -> None:
        sp = st.split
        if len(sp.outputs) < len(sp.parts):
            return
        step = self.steps[st.i]
        key = st.keys[st.i]
        outs = [sp.outputs[j][0] for j in range(len(sp.parts))]
        stats = [sp.outputs[j][1] for j in range(len(sp.parts))]
        self._submit(f"{step.name}-merge", key, st, TaskKind.MERGE, 0, tasks.merge_step, self._ctx(st, st.i),
                     step.task_spec(), st.hashes[st.i], outs, stats, key, st.parts[st.i], sp.seconds,
                     [sp.part_run.get(j) for j in range(len(sp.parts))], on=sp.worker)

    # ------------------------------------------------------------ driver
    def run(self, units: Iterable[BuildUnit]) -> BuildReport:
        t0 = time.perf_counter()
        tasks.forget_all()  # an in-process build starts from the store, as a fresh `tusk compile` does
        units = list(units)
        # a kernel that is not BIR-JSON (a .klr file, a traced .py) is read by the KLR reader: import it up front
        self._warm_modules = ["tusk.ir.klr.reader"] if any(not u.source.endswith(".json") for u in units) else []
        states = []
        for unit in units:
            st = _State(UnitReport(unit), hashes=[], started=time.perf_counter())
            states.append(st)
            self._kernels.setdefault(unit.kernel, []).append(st)
            try:
                if unit.module is None and (unit.host_hash is None or not self.store.has(unit.host_hash)):
                    unit.module = unit.reload() if unit.reload else None
                if unit.module is not None:
                    unit.host_hash = self.store.put(unit.module)
                elif unit.host_hash is None:
                    raise EnvError(f"{unit.source or unit.name}: host module is not available")
                st.hashes = [unit.host_hash]
            except Exception as e:  # noqa: BLE001 - one kernel's host module fails that kernel, never the build
                st.hashes = [unit.host_hash or ""]
                tb = "" if isinstance(e, (TuskError, OSError)) else traceback.format_exc()
                msg = str(e) if tb == "" else f"internal error storing the host module: {type(e).__name__}: {e}"
                self._fail(st, msg, fault=fault_of(e, kernel=True), tb=tb)
        try:
            for st in states:
                if not st.done:
                    try:
                        self._advance(st)
                    except ExecutorUnavailable:
                        raise
                    except (TuskError, OSError) as e:
                        self._fail(st, str(e), fault=fault_of(e, kernel=True))
            self._submit_timing()
            while self.waiting:
                task_key, res = self.executor.next()
                if task_key in self._tasks:  # before _received drops the worker's start time
                    self.emit(TaskFinished(task_key, *self._tasks.pop(task_key), res))
                res = self._received(task_key, res)
                for n, (st, kind, j, gen) in enumerate(self.waiting.pop(task_key, [])):
                    if gen != st.gen and kind is not TaskKind.TIMING:  # a timing step is keyed by its module: never stale
                        continue  # a result for a submission a repair has superseded
                    if n and res.get("status") == "executed":
                        res = {**res, "status": "cached"}  # ran once, for the first unit that asked
                    if res.get("worker_address"):
                        st.worker = res["worker_address"]
                    try:
                        self._on_result(st, kind, j, res)
                    except ExecutorUnavailable:
                        raise
                    except (TuskError, OSError) as e:
                        self._fail(st, str(e), fault=fault_of(e, kernel=True))
                self._submit_timing()
        finally:
            if self.executor is not None:
                # a cluster closes while the caller puts the outputs in place (it calls closed() on the executor
                # it made); any other executor closes now
                getattr(self.executor, "close_soon", self.executor.close)()
        report = BuildReport([st.report for st in states], cluster_started=bool(getattr(self.executor, "is_cluster", False)),
                             executor=getattr(self.executor, "description", "none (everything cached)"),
                             seconds=time.perf_counter() - t0)
        return report


def _split_of(res: dict) -> _Split:
    """A split task's answer, as the build tracks it."""
    return _Split(parts=list(res["parts"]), seconds=float(res.get("seconds") or 0), insts_in=res.get("insts_in"),
                  worker=res.get("worker_address"), sizes=[int(n) for n in res.get("sizes") or ()])


def timing_start(res: dict) -> float:
    return float(res["timing"]["started"])




def build(units: Iterable[BuildUnit], steps: list[Step], store: Store, **kwargs: Any) -> BuildReport:
    """Build every unit through ``steps``; see the module docstring.

    ``executor`` is a zero-argument factory (or an executor) used only if
    some step must run.  ``on_final(unit_report, final_hash)`` is called on
    the client when a unit's chain is complete; it returns the BIR-JSON
    files to write as ``[(object hash, path), ...]`` (or None).  They are
    written by a ``write_bir_json-*`` task on the cluster when one is
    running (serialising big modules in parallel), else in this process;
    a missing or damaged object found then is recomputed.  ``previous``
    maps unit name -> step label -> key parts of the last build, to say why
    steps re-ran.
    """
    return Build(store, steps, **kwargs).run(units)
