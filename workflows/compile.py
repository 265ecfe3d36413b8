"""`tusk compile`: the kernels of a directory through the pipeline, results into OUT.

The driver: check the request, find the kernels, turn each into build units
(one per logical core), run the build graph (``tusk.workflows.graph``) and
have ``tusk.workflows.outputs`` write each kernel's directory.

Failures are sorted by fault (``tusk.ir.errors``): a kernel's own (exit 1,
its earlier output removed), the environment's (exit 2, its earlier output
kept) or Tusk's (an internal error, exit 1: one line on the terminal, the
traceback in ``OUT/tusk.log``).  The other kernels are always built.

Before anything is written the request is checked: the input directory
exists, OUT is not a file and is not the input directory (it may lie inside it),
``--core-id`` is not negative, a ``--scheduler`` answers; then OUT is locked
against other builds (``tusk.workflows.out_lock``: a second build into it is
refused).  Per kernel,
``OUT/<kernel>`` may not be a symbolic link, be or contain the input
directory or an input file, or be a directory Tusk did not write; such a
kernel fails with the reason and its directory is left alone.  Outputs of
kernels no longer in the input directory are left in place (not pruned).
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tusk import __version__
from tusk.ir.errors import ENVIRONMENT, INPUT, INTERNAL, UsageError
from tusk.workflows import config as config_mod
from tusk.workflows import out_lock, timings, why
from tusk.workflows.build_report import BuildReport, BuildUnit, UnitReport
from tusk.workflows.graph import build, check_workers_reach_store, local_cluster_executor, scheduler_executor
from tusk.workflows.kernels import (
    HOST_VERSION,
    Kernel,
    Skipped,
    artifact_dir,
    discover,
    file_digests,
    given_host_module,
    host_module,
    kernel_dir,
    output_name,
    relative_name,
)
from tusk.workflows.outputs import (
    NOCACHE_PREFIX,
    OutputWriter,
    clean_leftovers,
    output_problem,
    owned_dir,
    write_atomic,
)
from tusk.workflows.pipeline import apply_defaults, apply_sets, default_pipeline, load_pipeline, resolve


@dataclass
class CompileRequest:
    directory: Path
    out: Path
    workers: int | None = None
    scheduler: str | None = None
    dashboard: bool = False
    cache_dir: str | None = None
    no_cache: bool = False
    core_id: int | None = None
    sets: list[str] = field(default_factory=list)
    pipeline: Path | None = None
    stages: bool | list[str] = False  # True: every step's output; a list: the steps (labels or pass names) named
    verify: str | None = None    # "none" | "ends" | "all"; None: the setting (default "ends")
    flatten: bool = False        # write each core's kernel as functions[0] "sg0000" (what real-dump checkers read)
    settings: dict[str, Any] = field(default_factory=dict)  # more config overrides (arch, maxhu, ...)
    # kernels written in Python (tusk.toml [kernels.NAME]: project.PythonKernel); None: read DIR's tusk.toml
    traced: list | None = None
    # what the timing steps measure (tusk.workflows.timings): "makespans" (the summary's columns), "timelines"
    # (also the report's engine timelines) or "none"; None: what the listeners need (BuildEvents.timing)
    timing: str | None = None


LOG_FILE = "tusk.log"


class BuildEvents:
    """What a front end hears of a build (the CLI draws its progress from it); override what you need."""

    def pipeline(self, resolved: Any) -> None:
        """The resolved pipeline, before anything is read or built."""

    def start(self, n_units: int, n_steps: int) -> None:
        """The build is about to start: ``n_units`` units of ``n_steps`` steps each."""

    def executor(self, ex: Any) -> None:
        """An executor (a cluster, or this process) was started for the steps that must run."""

    def step(self, event: str, unit: UnitReport, label: str) -> None:
        """A step of a unit was ``cached``, ``executed`` or ``failed``, or the unit is ``done``."""

    def task(self, event: str, key: str, unit: UnitReport, what: str, result: dict) -> None:
        """A task was ``submitted`` to the executor or has ``finished`` (``result``: what it returned).

        ``what`` names the work: a step label, ``"<label> part 3/8"``, ``"<label> (split)"``,
        ``"<label> (merge)"`` or ``"write_bir_json"``.
        """

    def executor_starting(self, what: str) -> None:
        """An executor is being started (a local cluster takes seconds); ``executor`` follows."""

    def startup(self, event: Any) -> None:
        """The executor's processes are ready (``tusk.workflows.build_report.StartUp``): what start-up cost."""

    def phase(self, key: str | None) -> None:
        """The build entered a phase besides its steps (``tusk.workflows.progress.PHASES``: "close",
        "outputs" ...), or left it (None)."""

    def finished(self, result: "CompileResult", store: Any) -> None:
        """The build is over and ``store`` still open (a --no-cache store is removed after this)."""

    def timing(self) -> str:
        """What this listener needs measured (``tusk.workflows.timings``): the summary's makespans by default."""
        return "makespans"


@dataclass
class KernelResult:
    kernel: Kernel
    units: list[UnitReport] = field(default_factory=list)
    error: str | None = None
    written: bool = False        # False: output was already up to date
    stats: dict[str, Any] = field(default_factory=dict)
    keep: bool = False           # on error: leave OUT/<kernel> as it is (the failure is not the kernel's)
    fault: str = ""              # with error: "input" | "environment" | "internal"
    traceback: str = ""          # of an internal error (goes to OUT/tusk.log)

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class CompileResult:
    kernels: list[KernelResult]
    skipped: list[Skipped]
    report: BuildReport | None
    unavailable: list[tuple[str, str]]
    pipeline: list[str]
    store: str
    out: Path
    seconds: float
    dashboard: str | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def failed(self) -> list[KernelResult]:
        return [k for k in self.kernels if not k.ok]

    def traces(self, *status: str) -> int:
        """How many Python kernels were traced in this build (``executed``; ``failed``: the trace raised), or
        taken from the cache (``cached``)."""
        return sum(1 for k in self.kernels if k.kernel.trace.get("status") in status)

    @property
    def exit_code(self) -> int:
        """0: every kernel built; 2: the environment failed some kernel; 1: some kernel failed otherwise."""
        if any(k.fault == ENVIRONMENT for k in self.failed):
            return 2
        return 1 if self.failed else 0

    def to_json(self) -> dict[str, Any]:
        return {
            "out": str(self.out), "store": self.store, "seconds": self.seconds,
            "cluster_started": bool(self.report and self.report.cluster_started),
            "executor": self.report.executor if self.report else "none",
            "executed": self.report.n_executed if self.report else 0,
            "cached": self.report.n_cached if self.report else 0,
            "traced": self.traces("executed", "failed"), "trace_cached": self.traces("cached"),
            "pipeline": self.pipeline,
            "not_available": [{"step": label, "reason": why} for label, why in self.unavailable],
            "kernels": [k.stats or {"kernel": k.kernel.name, "source": str(k.kernel.source), "error": k.error,
                                    **({"trace": k.kernel.trace} if k.kernel.trace else {})}
                        for k in self.kernels],
            "failed": [{"kernel": k.kernel.name, "error": k.error, "fault": k.fault} for k in self.failed],
            "skipped": [{"path": str(s.path), "reason": s.reason} for s in self.skipped],
            "warnings": self.warnings,
        }


# ====================================================================== driver


def compile_directory(req: CompileRequest, *, executor: Any = None, events: BuildEvents | None = None
                      ) -> CompileResult:
    """Compile every kernel of ``req.directory`` into ``req.out`` (see the module docstring).

    ``executor`` overrides how tasks run (a factory or an executor; tests
    pass an in-process one or a client of their own cluster); ``events``
    hears what happens (see :class:`BuildEvents`).
    """
    events = events or BuildEvents()
    t0 = time.perf_counter()
    plan = _Plan.checked(req, events)
    try:
        store = plan.open_store()
        kernels, skipped = discover(plan.directory, store)
        plan.writer = OutputWriter(plan.out, store, plan.resolved.steps, req.stages, req.flatten)
        kernels, skipped = _with_traced(kernels, skipped, req, plan.directory, store, plan.writer, plan.cfg.arch,
                                        plan.cfg.trace_timeout)
        results, units = plan.units(kernels, skipped, store)
        events.start(len(units), len(plan.resolved.steps))
        timing = req.timing if req.timing is not None else events.timing()
        report = build(units, plan.resolved.steps, store, env=config_mod.output_key(plan.cfg),
                       executor=plan.executor(executor, units, store, events), verify=plan.cfg.verify,
                       previous={u.name: why.previous_parts(plan.out, store, u) for u in units},
                       on_final=plan.writer.on_final,
                       on_event=lambda e: dispatch(events, e),
                       timing=timing, timeline_limit=int(plan.cfg.timeline_limit),
                       on_kernel_done=plan.writer.timeline_task if timing == timings.TIMELINES else None)
        report.unavailable = plan.resolved.unavailable
        events.phase("outputs")
        why.remember(store, report)
        for u in report.units:
            results[u.unit.kernel].units.append(u)
        for kr in results.values():  # the one place a kernel's outputs are put in place (or removed)
            if kr.error is None:
                plan.writer.finish_kernel(kr, plan.resolved)
            elif not kr.keep:
                plan.writer.remove(kr.kernel.name)  # no stale result of an earlier build
        _log_internal_errors(plan.out, results.values())
        result = CompileResult(list(results.values()), skipped, report, plan.resolved.unavailable,
                               [s.spec for s in plan.resolved.steps], store.url, plan.out, time.perf_counter() - t0,
                               plan.dashboard[0] if plan.dashboard else None, list(plan.resolved.warnings))
        events.finished(result, store)
        return result
    finally:
        plan.close()


def dispatch(events: BuildEvents, e: Any) -> None:
    """Hand one typed build event (``tusk.workflows.graph``) to the listener's method for it."""
    from tusk.workflows import build_report

    if isinstance(e, build_report.StepEvent):
        events.step(e.status, e.unit, e.label)
    elif isinstance(e, build_report.TaskSubmitted):
        events.task("submitted", e.key, e.unit, e.what, {})
    elif isinstance(e, build_report.TaskFinished):
        events.task("finished", e.key, e.unit, e.what, e.result)
    elif isinstance(e, build_report.ExecutorReady):
        events.executor(e.executor)
    elif isinstance(e, build_report.StartUp):
        events.startup(e)


@dataclass
class _Plan:
    """One compile request, checked: its settings, pipeline, directories; what it opened (closed at the end)."""

    req: CompileRequest
    cfg: Any
    resolved: Any
    directory: Path
    src: Path
    out: Path
    memory: bool
    connected: Any = None
    scratch: str | None = None
    writer: OutputWriter | None = None
    dashboard: list[str] = field(default_factory=list)
    made: list[Any] = field(default_factory=list)  # the executors this build made
    lock: str | None = None  # OUT's lock (tusk.workflows.out_lock), released last

    @classmethod
    def checked(cls, req: CompileRequest, events: BuildEvents) -> _Plan:
        """Everything the request can be refused for, before anything is written."""
        cfg = config_mod.load({**req.settings, "cache_dir": req.cache_dir, "workers": req.workers,
                               "scheduler": req.scheduler, "verify": req.verify})
        from tusk.workflows import tasks

        tasks.use_memory_setting(cfg.memory)  # what this process keeps, when it runs the passes itself
        if req.core_id is not None and req.core_id < 0:
            raise UsageError(f"--core-id must be a logical core number (0 or more), got {req.core_id}")
        entries = load_pipeline(req.pipeline) if req.pipeline else default_pipeline()
        apply_defaults(entries, config_mod.pass_defaults(cfg))
        apply_sets(entries, req.sets)
        resolved = resolve(entries)
        events.pipeline(resolved)
        directory = Path(req.directory)
        if not directory.is_dir():
            raise UsageError(f"{directory}: no such directory" if not directory.exists() else
                             f"{directory} is not a directory")
        src = Path(os.path.realpath(directory))
        out = Path(req.out).resolve()
        if out.exists() and not out.is_dir():
            raise UsageError(f"{req.out}: the output directory is an existing file")
        if out == src:
            # OUT inside the input directory is fine (the input is not searched recursively), OUT == input is
            # not: every kernel's output directory would sit among the kernels
            raise UsageError(f"the output directory {out} is the input directory; choose another -o")
        memory = not req.no_cache and str(cfg.cache_dir).startswith("memory://")
        plan = cls(req, cfg, resolved, directory, src, out, memory)
        if cfg.scheduler and not memory:
            plan.connected = scheduler_executor(cfg.scheduler)  # fail fast, before anything is written
        return plan

    def open_store(self):
        """The store (a --no-cache one inside OUT), OUT made, locked and cleaned of dead builds' leftovers."""
        from tusk.cache.store import Store

        store = None
        if not self.req.no_cache:
            store = Store(self.cfg.cache_dir).open_for_writing()  # a directory that is not a store is refused
            if self.connected is not None:
                check_workers_reach_store(self.connected, store)  # before anything is written into OUT
        self.lock = out_lock.acquire(self.out, str(self.req.out))  # OUT made; another build writing it: refused
        try:
            clean_leftovers(self.out)
            if self.req.no_cache:
                self.scratch = str(owned_dir(self.out, NOCACHE_PREFIX, "cache"))
        except OSError as e:
            raise UsageError(f"cannot write the output directory {self.req.out}: {e.strerror or e}") from None
        if store is None:
            store = Store(os.path.join(self.scratch, "store")).open_for_writing()
            if self.connected is not None:
                check_workers_reach_store(self.connected, store)
        return store

    def units(self, kernels: list[Kernel], skipped: list[Skipped], store
              ) -> tuple[dict[str, KernelResult], list[BuildUnit]]:
        """Each kernel's result record and build units; a kernel that cannot be built fails here, alone."""
        req, out, writer = self.req, self.out, self.writer
        assert writer is not None, "the output writer is made before the units"
        results: dict[str, KernelResult] = {}
        units: list[BuildUnit] = []
        for k in kernels:
            if req.core_id is not None and k.error is None and k.fmt != "host" and req.core_id >= k.ncores:
                skipped.append(Skipped(k.source, f"a kernel of {k.ncores} logical core(s): --core-id {req.core_id} "
                                               f"is past them", kernel=True))
                continue
            kr = results[k.name] = KernelResult(k)
            if k.bad_name:  # OUT/<name> would not be a directory of its own: touch nothing
                kr.error, kr.keep, kr.fault = k.error, True, k.fault
                continue
            problem = output_problem(out / k.name, self.src, k)
            if problem:  # OUT/<kernel> is not ours to write: the kernel fails, the directory stays as it is
                kr.error, kr.keep, kr.fault = f"{k.source}: {problem}", True, INPUT
                continue
            if k.error:
                kr.error, kr.fault, kr.traceback = k.error, k.fault, k.traceback
                continue
            try:
                # passes stage files into the kernel's staging directory, never into OUT/<kernel> itself
                units.extend(_units(k, out, req.core_id, self.cfg, store, str(writer.staging_for(k.name))))
            except Exception as e:  # noqa: BLE001 - one kernel's trouble never stops the others
                k.fail(e)
                kr.error, kr.fault, kr.traceback = k.error, k.fault, k.traceback
        return results, units

    def executor(self, given: Any, units: list[BuildUnit], store, events: BuildEvents) -> Any:
        """What runs the tasks: ``given``, the --scheduler's cluster, a local cluster (started only at the
        first task), or this process."""
        choice = choose_executor(self.cfg.workers, units, self.connected is not None or self.memory)
        if given is None and self.memory:
            from tusk.workflows.graph import InlineExecutor

            given = InlineExecutor  # a memory:// store lives in this process only
        if given is None:
            if self.connected is not None:
                given = lambda: self.connected  # noqa: E731
            elif choice.workers > 0:
                # worker scratch space inside the store (local stores): nothing written elsewhere
                scratch_dir = store.fs.path("dask-scratch") if "://" not in store.url else None

                def given() -> Any:
                    events.executor_starting(f"a local cluster of {choice.workers} worker process(es)")
                    return local_cluster_executor(choice.workers, self.req.dashboard, scratch_dir, self.cfg.memory)
        if given is None:
            from tusk.workflows.graph import InlineExecutor

            given = InlineExecutor
        factory = given if callable(given) else (lambda: given)

        def make() -> Any:
            ex = _announcing_close(factory(), events)
            self.made.append(ex)  # a cluster the build closes "soon" has closed when the command ends
            if not getattr(ex, "reason", ""):
                ex.reason = choice.reason if self.connected is None else "the scheduler given with --scheduler"
            link = getattr(ex, "dashboard_link", None)
            if link and (self.req.dashboard or self.cfg.scheduler):
                self.dashboard.append(link)
            return ex

        return make

    def close(self) -> None:
        for ex in self.made:
            getattr(ex, "closed", lambda: None)()
        if self.writer is not None:
            self.writer.discard_staging()  # left only when the build stopped half-way
        if self.connected is not None:
            self.connected.close()
        if self.scratch:
            shutil.rmtree(self.scratch, ignore_errors=True)
        if self.lock is not None:
            out_lock.release(self.lock)


def _announcing_close(ex: Any, events: BuildEvents) -> Any:
    """``ex`` whose closing first tells ``events`` (closing a cluster takes seconds: a phase of its own).
    ``close_soon`` where the executor has it: its ``close`` starts by calling that, so the phase is told once."""
    name = "close_soon" if hasattr(ex, "close_soon") else "close"
    close = getattr(ex, name, None)
    if close is None or not getattr(ex, "is_cluster", False):
        return ex

    def announced() -> None:
        events.phase("close")
        close()

    try:
        setattr(ex, name, announced)
    except AttributeError:  # an executor that does not take attributes: closed silently, as before
        pass
    return ex


# A local cluster costs ~0.5-1 s to start and a few ms per task.  Two or more kernels share out between its
# workers: 4 large_matmul variants (150k instructions) took 3.9 s with two workers against 4.7 s in this
# process, 2 of them (70k) 2.4 s against 2.3 s.  One big kernel shares out only through its split passes.
# So: a cluster from AUTO_CLUSTER_SHARED instructions (after unrolling, summed over the build) when no unit
# has more than two thirds of them, from AUTO_CLUSTER_INSTRUCTIONS whatever their spread.
AUTO_CLUSTER_INSTRUCTIONS = 300_000
AUTO_CLUSTER_SHARED = 100_000


@dataclass(frozen=True)
class ExecutorChoice:
    workers: int          # local worker processes; 0: in this process
    reason: str


def choose_executor(workers: int | None, units: list[BuildUnit], fixed: bool = False) -> ExecutorChoice:
    """How to run the steps that must run: ``--workers`` when given, else by the size of the build."""
    if fixed:
        return ExecutorChoice(0, "fixed by the store or the scheduler")
    if workers is not None:
        if workers <= 0:
            return ExecutorChoice(0, "--workers 0: in this process")
        return ExecutorChoice(workers, f"--workers {workers}")
    from joblib import cpu_count  # honours the CPU quota of a container, unlike os.cpu_count()

    cpus = max(1, cpu_count())
    size = sum(u.size for u in units)
    if cpus < 2:
        return ExecutorChoice(0, f"one CPU available: in this process (~{size:,} instructions)")
    spread = size >= AUTO_CLUSTER_SHARED and 3 * max((u.size for u in units), default=0) <= 2 * size
    if size < AUTO_CLUSTER_INSTRUCTIONS and not spread:
        return ExecutorChoice(0, f"a small build (~{size:,} instructions after unrolling): in this process, "
                                 f"a cluster would take longer to start than it saves")
    return ExecutorChoice(cpus, f"~{size:,} instructions after unrolling over {len(units)} unit(s): "
                                f"{cpus} worker processes, one per CPU")


def _log_internal_errors(out: Path, results) -> None:
    """Tracebacks of internal errors go to ``OUT/tusk.log``; the terminal gets one line that points there."""
    tracebacks = [(kr, kr.traceback) for kr in results if kr.error and kr.fault == INTERNAL]
    if not tracebacks:
        return
    log = out / LOG_FILE
    lines = [f"tusk {__version__}: internal errors of the build at {time.strftime('%Y-%m-%d %H:%M:%S')}\n"]
    for kr, tb in tracebacks:
        lines.append(f"\n== {kr.kernel.name} ({kr.kernel.source})\n{kr.error}\n{tb or '(no traceback)'}\n")
        kr.error += f" [internal error: please report it; traceback in {log}]"
        kr.stats["error"] = kr.error
    try:
        write_atomic(log, "".join(lines).encode())
    except OSError:
        pass  # the one-line messages still say what failed


def _with_traced(kernels: list[Kernel], skipped: list[Skipped], req: CompileRequest, directory: Path, store,
                 writer: OutputWriter, arch: str | None = None,
                 trace_timeout: int | None = None) -> tuple[list[Kernel], list[Skipped]]:
    """The kernels of ``directory`` plus those tusk.toml writes in Python, each traced (or taken from the
    cache) into its staging directory (see :mod:`tusk.workflows.traced`).

    Only the .py files the file names are executed; they are not listed as skipped.
    """
    specs = req.traced
    if specs is None:
        from tusk.workflows.project import load

        specs = load(directory).kernels
    if not specs:
        return kernels, skipped
    from tusk.workflows.traced import Tracer

    taken = {k.name: k for k in kernels}
    for spec in specs:
        if spec.name in taken:  # tusk.toml was checked; a kernel file named like the unit appeared since
            raise UsageError(f"tusk.toml names kernel {spec.name!r}, and so does the kernel file "
                             f"{taken[spec.name].path}; rename one of them")
    named = {os.path.realpath(spec.file) for spec in specs}
    skipped = [s for s in skipped if os.path.realpath(s.path) not in named]
    with Tracer(timeout=trace_timeout) as tracer:
        _trace_all(specs, kernels, directory, store, writer, arch, tracer)
    return kernels, skipped


def _trace_all(specs, kernels: list[Kernel], directory: Path, store, writer: OutputWriter, arch: str | None,
               tracer) -> None:
    from tusk.workflows.traced import trace_kernel

    for spec in specs:
        problem = output_problem(writer.out / spec.name, Path(os.path.realpath(directory)),
                                 Kernel(path=Path(spec.file), name=spec.name, origin=Path(spec.file)))
        if problem:  # checked again by the caller; no staging directory for a kernel that cannot be written
            kernels.append(Kernel(path=Path(spec.file), name=spec.name, origin=Path(spec.file)))
            continue
        kernels.append(trace_kernel(spec, store, writer.staging_for(spec.name), arch, tracer))


def _units(k: Kernel, out: Path, core_id: int | None, cfg, store=None, art: str | None = None) -> list[BuildUnit]:
    files = file_digests(k)
    # where this build's files are: bound when a pass that reads files runs, never part of a key
    where = {"artifact_dir": art or artifact_dir(out, k), "kernel_dir": kernel_dir(k)}
    if k.fmt == "host":
        from tusk.cache.keys import digest

        kdir = where["kernel_dir"]
        placeholders = {w: relative_name(p, kdir) for w, p in k.placeholders.items()}
        # the rewritten module's hash, memoised: a no-op rebuild does not parse the host module
        memo = digest({"host": HOST_VERSION, "file": k.digest, "placeholders": placeholders})
        note = store.get_note("host-module", memo) if store is not None else None
        h = note.get("hash") if isinstance(note, dict) else None
        if store is not None and not (isinstance(h, str) and store.has(h)):
            h = store.put(given_host_module(k))
            store.put_note("host-module", memo, {"hash": h})
        return [BuildUnit(k.name, None, host_hash=h, files=files, kernel=k.name, core=None, source=str(k.source),
                          data={"output": output_name(k, None)}, reload=lambda: given_host_module(k), where=where,
                          size=k.size)]
    cores = [core_id] if core_id is not None else list(range(k.ncores))
    units = []
    for c in cores:
        module = host_module(k, c, arch=cfg.arch, instruction_limit=cfg.instruction_limit)
        name = k.name if k.ncores == 1 and core_id is None else f"{k.name}[{c}]"
        units.append(BuildUnit(name, module, files=files, kernel=k.name, core=c, source=str(k.source),
                               data={"output": output_name(k, c)}, where=where, size=k.size))
    return units


