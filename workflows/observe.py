"""Listeners of a build: several at once (:class:`Tee`) and the one that writes the build report.

:class:`Reporter`, when the build is over and while its store is still
open, writes

* ``OUT/report.html`` (``tusk.workflows.report_html``),
* ``OUT/build-trace.json`` (the tasks by worker, Chrome trace format),
* ``OUT/<kernel>/timeline.json`` (engine timelines, Chrome trace format;
  not rewritten while the modules and the timing model are the same),

and keeps each unit's seconds per step for the next build's estimate
(``tusk.workflows.progress.History``).  Its own failures never fail the
build: they become a warning, the traceback goes to ``OUT/tusk.log``.
"""

from __future__ import annotations

import json
import time
import traceback
from pathlib import Path

from tusk.workflows.compile import LOG_FILE, BuildEvents
from tusk.workflows.progress import History, State
from tusk.workflows.task_log import TaskLog, TaskRecord, build_trace
from tusk.workflows.trace import TIMELINE_FILE, Phase, _model, timeline_signature, write_kernel_timeline

REPORT = "report.html"
BUILD_TRACE = "build-trace.json"
TIMELINE = TIMELINE_FILE


class Tee(BuildEvents):
    """Hands every event to each listener in turn; a listener that raises never stops the build
    (its first error is kept in ``errors`` and it hears nothing more)."""

    def __init__(self, *listeners: BuildEvents):
        self.listeners = [x for x in listeners if x is not None]
        self.errors: list[str] = []

    def _each(self, method: str, *args) -> None:
        for x in list(self.listeners):
            try:
                getattr(x, method)(*args)
            except Exception as e:  # noqa: BLE001 - progress and reports are never worth a failed build
                self.errors.append(f"{type(x).__name__}.{method}: {type(e).__name__}: {e}")
                self.listeners.remove(x)

    def pipeline(self, resolved) -> None:
        self._each("pipeline", resolved)

    def start(self, n_units: int, n_steps: int) -> None:
        self._each("start", n_units, n_steps)

    def executor_starting(self, what: str) -> None:
        self._each("executor_starting", what)

    def executor(self, ex) -> None:
        self._each("executor", ex)

    def startup(self, event) -> None:
        self._each("startup", event)

    def step(self, event: str, unit, label: str) -> None:
        self._each("step", event, unit, label)

    def task(self, event: str, key: str, unit, what: str, result: dict) -> None:
        self._each("task", event, key, unit, what, result)

    def finished(self, result, store) -> None:
        self._each("finished", result, store)

    def phase(self, key: str | None) -> None:
        self._each("phase", key)

    def timing(self) -> str:
        from tusk.workflows.timings import MAKESPANS, NONE, TIMELINES

        wanted = {x.timing() for x in self.listeners} or {MAKESPANS}
        return next(w for w in (TIMELINES, MAKESPANS, NONE) if w in wanted)


def _write(path: Path, text: str) -> None:
    from tusk.workflows.outputs import write_atomic

    write_atomic(path, text.encode("utf-8"))


def _current(path: Path, signature: str) -> bool:
    """``path`` is a timeline.json written for ``signature`` (its head names it)."""
    try:
        with open(path, encoding="utf-8") as fh:
            return signature in fh.read(4096)
    except OSError:
        return False


def _changed_nothing(result) -> bool:
    """True for a rebuild that ran nothing and wrote nothing, into an OUT that has its report."""
    rep = result.report
    if rep is None or rep.n_executed or result.failed or result.traces("executed", "failed"):
        return False
    if any(kr.written for kr in result.kernels):
        return False
    if any(t.status not in ("cached", "skipped") for kr in result.kernels for u in kr.units for t in u.timings):
        return False
    return (Path(result.out) / REPORT).is_file()


def kept_trace_note(path: Path) -> str:
    """What the report says of a build-trace.json that a build which ran no task left in place."""
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(path.stat().st_mtime))
    return (f"NOT of this build, which ran no task (every step came from the cache): the tasks of the "
            f"earlier build into this directory that ran them, written {when} (Chrome trace format)")


class Reporter(BuildEvents):
    """Writes report.html, build-trace.json and timeline.json files when the build is over."""

    def __init__(self, history: History | None = None, state: State | None = None, report: bool = True,
                 warn=None):
        self.history = history
        self.state = state
        self.report = report
        self.log = TaskLog()
        self.warn = warn or (lambda text: None)
        self.files: dict[str, str] = {}    # OUT-relative path -> what it is
        self.phases: dict[str, list[Phase]] = {}
        self.seconds = 0.0
        self.startup_event = None          # graph.StartUp: shown in the report's header and build trace

    def start(self, n_units: int, n_steps: int) -> None:
        self.log.t0 = time.time()

    def timing(self) -> str:
        from tusk.workflows.timings import MAKESPANS, TIMELINES

        return TIMELINES if self.report else MAKESPANS

    def task(self, event: str, key: str, unit, what: str, result: dict) -> None:
        self.log.task(event, key, unit, what, result)

    def startup(self, event) -> None:
        """Each worker's start-up is a bar of its own in the build trace and the report's build timeline."""
        self.startup_event = event
        for worker, w in event.workers.items():
            started = float(w.get("started") or time.time())
            key = f"start-up-{worker}"
            self.log.tasks[key] = TaskRecord(key, "(workers)", "start-up", started, started,
                                             started + float(w.get("seconds") or 0.0), str(w.get("worker") or worker),
                                             "ready")

    def _phase(self, key: str | None) -> None:
        if self.state is not None:
            self.state.set_phase(key)

    def finished(self, result, store) -> None:
        t0 = time.perf_counter()
        if self.history is not None:
            try:
                self.history.record(result.report, self.state.write_seconds if self.state else {},
                                    self.state.step_wall if self.state else None)
            except Exception:  # noqa: BLE001
                pass
        if self.report and result.kernels and _changed_nothing(result):
            self.files[REPORT] = "this page"  # the report of the build that did the work stays, as its outputs do
        elif self.report and result.kernels:
            try:
                self._write_all(result, store)
            except Exception as e:  # noqa: BLE001 - the build's outputs stand; the report is extra
                self._failed(result.out, e)
        self._phase(None)
        if self.history is not None and self.state is not None:
            self.history.record_phases(self.state.phases_done)  # the next build's estimate includes them
        self.seconds = time.perf_counter() - t0

    def _failed(self, out: Path, e: BaseException) -> None:
        log = Path(out) / LOG_FILE
        try:
            with open(log, "a", encoding="utf-8") as fh:
                fh.write(f"\n== build report ({time.strftime('%Y-%m-%d %H:%M:%S')})\n{traceback.format_exc()}\n")
        except OSError:
            pass
        self.warn(f"the build report could not be written ({type(e).__name__}: {e}); details in {log}")

    def _write_all(self, result, store) -> None:
        from tusk.workflows.report_html import render
        from tusk.workflows.timings import load_phase

        out = Path(result.out)
        model_note = "" if _model() is not None else "This Tusk has no timing model (tusk.sim.timing): " \
                                                     "no engine timelines."
        self._phase("timelines")
        for kr in result.kernels:
            if not kr.ok:
                continue
            kernel_phases: list[Phase] = []
            for u in kr.units:
                # the build's timing steps measured them; the report only reads their results
                phases = [load_phase(store, u.unit.name, t) for t in u.timings] if _model() is not None else []
                if phases:
                    self.phases[u.unit.name] = phases
                kernel_phases.extend(phases)
            kdir = out / kr.kernel.name
            if kernel_phases and kdir.is_dir():
                path = kdir / TIMELINE
                # a write_timeline task of the build has mostly written it (into the staging directory, on a
                # worker); the events come rendered by the timing steps: the same bytes either way
                if not _current(path, timeline_signature(kernel_phases)):  # with the events this time
                    write_kernel_timeline(path, kr.kernel.name, [load_phase(store, u.unit.name, t, events=True)
                                                                 for u in kr.units for t in u.timings])
                self.files[f"{kr.kernel.name}/{TIMELINE}"] = "engine timelines (Chrome trace format)"
        self._phase("trace")
        if self.log.ended_tasks():
            _write(out / BUILD_TRACE, json.dumps(build_trace(self.log, result), separators=(",", ":")))
            self.files[BUILD_TRACE] = "the build's tasks by worker (Chrome trace format)"
        elif (out / BUILD_TRACE).is_file():  # this build ran no task: the one there is of another build
            self.files[BUILD_TRACE] = kept_trace_note(out / BUILD_TRACE)
        self.files[REPORT] = "this page"
        self._phase("report")
        _write(out / REPORT, render(result, self.phases, self.log, {k: v for k, v in self.files.items()
                                                                    if k != REPORT}, model_note))

    def lines(self, out: Path) -> list[str]:
        """What the terminal is told about these files."""
        if not self.files or REPORT not in self.files:
            return []
        return [f"report: {Path(out) / REPORT}"]
