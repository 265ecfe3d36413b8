"""What `tusk compile` shows while it runs.

On a terminal (``Live``): an overall bar with the steps resolved, how many
were cached, run or failed, the elapsed time and an estimate of the time
left; under it one line per task the executor says is executing -- kernel,
pass, part i/n, worker, seconds since it started -- and how many tasks are
queued (submitted, not executing: waiting at the scheduler or behind a busy
worker).  Between and after the steps the build's own phases (starting the
cluster, stopping it, putting the outputs in place, writing the timelines,
the build trace and report.html: ``PHASES``) replace the task lines, with
their seconds so far.  Elsewhere (a pipe, a CI log; ``Plain``): one line per
unit done and per pass that ran long, a line when a cluster starts and when
each phase starts (and, if it took long, ends), and every 30 s a line naming
what runs or the phase.

Which tasks run is observed, never guessed: ``tusk.workflows.task_states``
(a Dask worker plugin reporting each task's entry into and exit from the
worker's ``executing`` state; in this process, the executor itself).

The estimate (``tusk.workflows.eta``) comes from earlier builds: each
unit's seconds per step (the pass plus fetching, hashing and storing around
it, and writing the outputs) are kept in the store as a note
(``pass-times``, by kernel file and unit), and the phases' seconds as
another (``build-phases``, by kernel directory).  What remains of each unit
is a serial chain; the chains are packed onto the worker slots, then the
phases follow.  Without history it says "estimating".

Dask's own log (its "Worker process still alive ... killing" and the like)
goes to ``OUT/tusk.log`` instead of the terminal: :func:`route_dask_logs`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from rich.console import Console, Group
from rich.progress_bar import ProgressBar
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text

from tusk.workflows.compile import BuildEvents

NOTE_KIND = "pass-times"
PHASE_NOTE = "build-phases"
WRITE = "write_bir_json"


class Terminal(Console):
    """A rich Console that goes quiet when its reader leaves (``tusk compile | head``) instead of
    exiting mid-build, as rich's own does: the build finishes and writes its outputs."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self.file.fileno())
        except (OSError, ValueError, AttributeError):
            pass


# ====================================================================== Dask's log


class LogFile(logging.FileHandler):
    """Appends to a file, creating its directory when the first record comes; never raises."""

    def __init__(self, filename: str, mode: str = "a", encoding: str | None = "utf-8", delay: bool = True):
        super().__init__(filename, mode, encoding, delay=True)

    def _open(self):
        os.makedirs(os.path.dirname(self.baseFilename) or ".", exist_ok=True)
        return super()._open()

    def handleError(self, record) -> None:  # a log line is never worth a traceback on the terminal
        pass


def _dask_logging(path: str) -> dict:
    return {
        "version": 1, "disable_existing_loggers": False,
        "formatters": {"tusk": {"format": "%(asctime)s %(process)d %(name)s %(levelname)s: %(message)s"}},
        "handlers": {"tusk-log": {"class": f"{__name__}.LogFile", "filename": path, "formatter": "tusk"}},
        "loggers": {name: {"handlers": ["tusk-log"], "level": level, "propagate": False}
                    for name, level in (("distributed", "WARNING"), ("tornado", "ERROR"), ("bokeh", "ERROR"),
                                        ("asyncio", "ERROR"))},
    }


class _Route:
    """Where Dask's log records go while a build runs (see :func:`route_dask_logs`)."""

    def __init__(self, spec: dict):
        self.spec = spec
        self.handler: LogFile | None = None
        self.swapped: list[tuple[logging.Logger, list, bool, int]] = []

    def adopt(self) -> None:
        """Point Dask's loggers in this process at the file (once Dask is imported; again is harmless)."""
        if "distributed" not in sys.modules or self.swapped:
            return
        self.handler = LogFile(self.spec["handlers"]["tusk-log"]["filename"])
        self.handler.setFormatter(logging.Formatter(self.spec["formatters"]["tusk"]["format"]))
        for name, cfg in self.spec["loggers"].items():
            lg = logging.getLogger(name)
            self.swapped.append((lg, list(lg.handlers), lg.propagate, lg.level))
            lg.handlers = [self.handler]
            lg.propagate = False
            lg.setLevel(cfg["level"])

    def restore(self) -> None:
        for lg, handlers, propagate, level in self.swapped:
            lg.handlers, lg.propagate = handlers, propagate
            lg.setLevel(level)
        self.swapped.clear()
        if self.handler is not None:
            self.handler.close()
            self.handler = None


_ROUTE: _Route | None = None


def adopt_dask_logs() -> None:
    """Called when a cluster starts or is connected: Dask may have been imported since the route was set."""
    if _ROUTE is not None:
        _ROUTE.adopt()


@contextlib.contextmanager
def route_dask_logs(path: Path) -> Iterator[None]:
    """Dask's log records (this process and the workers it starts) go to ``path`` for the duration.

    Workers read their logging set-up from the environment
    (``DASK_DISTRIBUTED__LOGGING``); in this process, where Dask may already
    be imported, the handlers of its loggers are swapped for the file (now,
    and when an executor starts: :func:`adopt_dask_logs`).
    """
    global _ROUTE
    spec = _dask_logging(str(Path(path).resolve()))
    var = "DASK_DISTRIBUTED__LOGGING"
    old_env = os.environ.get(var)
    os.environ[var] = repr(spec)
    route, previous = _Route(spec), _ROUTE
    _ROUTE = route
    route.adopt()
    try:
        yield
    finally:
        _ROUTE = previous
        if old_env is None:
            os.environ.pop(var, None)
        else:
            os.environ[var] = old_env
        route.restore()


# ====================================================================== history


def _note_key(unit) -> str:
    from tusk.cache.keys import digest

    return digest({"unit": unit.name, "source": unit.source})


class History:
    """Seconds per step of each unit in earlier builds, and of the build's own phases (store notes); empty
    without a store.  ``scope`` names the build the phases are kept for (the kernel directory)."""

    def __init__(self, store=None, scope: str = ""):
        self.store = store
        self.scope = scope
        self._seen: dict[str, dict[str, float]] = {}
        self._phases: dict[str, float] | None = None

    @classmethod
    def of(cls, cfg, scope: str = "") -> "History":
        """The history kept in the configured cache (none for a memory:// cache or one that cannot be opened)."""
        url = str(cfg.cache_dir)
        if url.startswith("memory://"):
            return cls(None)
        try:
            from tusk.cache.store import Store

            return cls(Store(url), scope)
        except Exception:  # noqa: BLE001 - no history then; the build itself will say what is wrong
            return cls(None)

    def _phase_key(self) -> str:
        from tusk.cache.keys import digest

        return digest({"build-phases": 1, "scope": self.scope})

    def phases(self) -> dict[str, float]:
        """Seconds each phase of the build (``PHASES``) took last time."""
        if self._phases is None:
            note = None
            if self.store is not None and self.scope:
                try:
                    note = self.store.get_note(PHASE_NOTE, self._phase_key())
                except Exception:  # noqa: BLE001 - history is a nicety
                    note = None
            secs = note.get("seconds") if isinstance(note, dict) else None
            self._phases = {k: float(v) for k, v in (secs or {}).items() if isinstance(v, (int, float)) and v >= 0}
        return self._phases

    def record_phases(self, seconds: dict[str, float]) -> None:
        """Keep this build's phase seconds for the next estimate (start-up is the cluster's, not kept)."""
        kept = {k: round(v, 4) for k, v in seconds.items() if k != "start"}
        if self.store is None or not self.scope or not kept:
            return
        try:
            self.store.put_note(PHASE_NOTE, self._phase_key(), {"seconds": kept, "at": time.time()})
        except Exception:  # noqa: BLE001
            pass

    def get(self, unit) -> dict[str, float]:
        if unit.name not in self._seen:
            note = None
            if self.store is not None:
                try:
                    note = self.store.get_note(NOTE_KIND, _note_key(unit))
                except Exception:  # noqa: BLE001 - history is a nicety: a bad note is no note
                    note = None
            secs = note.get("seconds") if isinstance(note, dict) else None
            self._seen[unit.name] = {k: float(v) for k, v in (secs or {}).items()
                                     if isinstance(v, (int, float)) and v >= 0}
        return self._seen[unit.name]

    def record(self, report, write_seconds: dict[str, float], step_wall: dict | None = None) -> None:
        """Keep this build's seconds for every executed step (and output writing) of every unit: the step's
        wall time as the executor reported its tasks (``step_wall``: from the first one's start to the last
        one's end -- a split step's split, parts and merge), else the pass plus the work around it."""
        if self.store is None or report is None:
            return
        for u in report.units:
            known = dict(self.get(u.unit))
            changed = False
            for s in u.steps:
                if s.status == "executed":
                    extra = sum(v for k, v in s.timing.items() if k in ("fetch", "hash", "store", "verify")
                                and isinstance(v, (int, float)))
                    wall = (step_wall or {}).get((u.unit.name, s.label))
                    known[s.label] = round(wall[1] - wall[0] if wall and wall[1] is not None else
                                           s.seconds + extra, 4)
                    changed = True
            if u.unit.name in write_seconds and u.outputs.get("status") == "written":  # not "up to date"
                known[WRITE] = round(write_seconds[u.unit.name], 4)
                changed = True
            if changed:
                try:
                    self.store.put_note(NOTE_KIND, _note_key(u.unit), {"seconds": known, "at": time.time()})
                except Exception:  # noqa: BLE001
                    pass


# ====================================================================== state

# the build's phases besides its steps, in the order they come: key -> what the display says
PHASES = {"start": "starting the executor", "close": "stopping the cluster",
          "outputs": "putting the outputs in place",
          "timelines": "writing the engine timelines", "trace": "writing the build trace",
          "report": "writing report.html"}
POST_BUILD = ("close", "outputs", "timelines", "trace", "report")


@dataclass
class _Task:
    unit: str
    what: str
    submitted: float
    started: float | None = None       # when the executor said it started executing (None: queued)
    worker: str = ""


@dataclass
class _Unit:
    name: str
    expected: dict[str, float]
    resolved: set[str] = field(default_factory=set)
    failed: bool = False
    done: bool = False
    last_event: float = 0.0


class State:
    """Counts, the tasks the executor says run or wait, the phase, the estimate; shared by the displays."""

    def __init__(self, history: History):
        self.history = history
        self.labels: list[str] = []
        self.n_units = 0
        self.total = 0
        self.cached = self.run = self.failed = 0
        self.units: dict[str, _Unit] = {}
        self.tasks: dict[str, _Task] = {}
        self.early: dict[str, tuple[str, str, float]] = {}  # task states heard before the task's submission
        self.slots = 1
        self.observed = False             # the executor reports which tasks execute
        self.workers: dict[str, str] = {}  # address -> w1, w2 ... in the order they were first seen
        self.t0 = time.perf_counter()
        self.write_seconds: dict[str, float] = {}
        self.phase: tuple[str, str, float] | None = None   # (key, text, since)
        self.phases_done: dict[str, float] = {}
        self.on_phase = lambda key, text, ended: None  # the display's hook: (key, text, seconds of the one ended)
        self.step_wall: dict[tuple[str, str], list] = {}  # (unit, step) -> [first task's start, last one's end]
        self.inline_writes = False         # outputs written by the client itself (no cluster): no task to time
        self._writing: tuple[str, float] | None = None  # (unit, since): its last step resolved, its outputs next
        self.lock = threading.RLock()

    @property
    def starting(self) -> str | None:
        return self.phase[1] if self.phase else None

    # ------------------------------------------------------------ events
    def unit(self, ur) -> _Unit:
        u = self.units.get(ur.unit.name)
        if u is None:
            u = self.units[ur.unit.name] = _Unit(ur.unit.name, self.history.get(ur.unit), last_event=self.now())
        return u

    def now(self) -> float:
        return time.perf_counter()

    @property
    def completed(self) -> int:
        return sum(len(u.resolved) for u in self.units.values())

    def _event(self) -> None:
        """Any event: when the client writes outputs itself it does so between the unit's last step and
        the next event of the build (one thread), so that interval is the writing's."""
        if self._writing is not None:
            unit, since = self._writing
            self._writing = None
            self.write_seconds[unit] = self.write_seconds.get(unit, 0.0) + self.now() - since

    def resolve(self, ur, label: str, status: str) -> None:
        with self.lock:
            self._event()
            u = self.unit(ur)
            now = self.now()
            if status == "done":  # (its output writing was timed when the executor said the task ended)
                u.done = True
                u.resolved.add(WRITE)
            elif status == "failed":
                u.failed = True
                self.failed += 1
                u.resolved.update(self.labels)
                u.resolved.add(WRITE)
            else:
                if label not in u.resolved:
                    if status == "cached":
                        self.cached += 1
                    else:
                        self.run += 1
                u.resolved.add(label)
                if self.inline_writes and self.labels and all(x in u.resolved for x in self.labels):
                    self._writing = (u.name, now)
            u.last_event = now

    def task(self, event: str, key: str, ur, what: str) -> None:
        with self.lock:
            self._event()
            self.unit(ur)
            if event == "submitted":
                t = self.tasks[key] = _Task(ur.unit.name, what, self.now())
                early = self.early.pop(key, None)
                if early is not None and early[0] == "executing":
                    t.started, t.worker = early[2], early[1]
                    self._began(t, early[2])
            else:
                ended = self.tasks.pop(key, None)
                if ended is not None and ended.what == WRITE and ended.started is not None:  # its end not reported yet
                    self.write_seconds[ended.unit] = self.write_seconds.get(ended.unit, 0.0) + self.now() - ended.started

    def _began(self, t: _Task, at: float) -> None:
        wall = self.step_wall.setdefault((t.unit, t.what.split(" ", 1)[0]), [at, None])
        wall[0] = min(wall[0], at)

    def task_state(self, key: str, state: str, worker: str, ago: float) -> None:
        """What the executor said of task ``key`` (``tusk.workflows.task_states``)."""
        with self.lock:
            self._event()
            at = self.now() - ago
            # one process runs everything with --workers 0: no worker to name
            name = self.workers.setdefault(worker, f"w{len(self.workers) + 1}") \
                if worker and worker != "this process" else ""
            t = self.tasks.get(key)
            if t is None:  # the event overtook the submission's bookkeeping
                if state == "executing":
                    self.early[key] = (state, name, at)
                else:
                    self.early.pop(key, None)
                return
            if state == "executing":
                t.started, t.worker = at, name
                self._began(t, at)
            elif state == "done":
                wall = self.step_wall.get((t.unit, t.what.split(" ", 1)[0]))
                if wall is not None:
                    wall[1] = at if wall[1] is None else max(wall[1], at)
                self.tasks.pop(key, None)
                if t.what == WRITE and t.started is not None:  # the write task's own time, not its wait
                    self.write_seconds[t.unit] = self.write_seconds.get(t.unit, 0.0) + max(0.0, at - t.started)

    def running(self) -> tuple[list[_Task], int]:
        """(the tasks executing now, oldest start first; how many are submitted and not executing)."""
        with self.lock:
            running = sorted((t for t in self.tasks.values() if t.started is not None), key=lambda t: t.started or 0)
            return running, len(self.tasks) - len(running)

    # ------------------------------------------------------------ phases
    def set_phase(self, key: str | None, text: str | None = None) -> None:
        """The build is now in phase ``key`` (None: in none); the one before it ends."""
        with self.lock:
            self._event()
            ended = 0.0
            if self.phase is not None:
                ended = self.now() - self.phase[2]
                self.phases_done[self.phase[0]] = self.phases_done.get(self.phase[0], 0.0) + ended
            before = self.phase
            self.phase = None if key is None else (key, text or PHASES.get(key, key), self.now())
        self.on_phase(key, self.phase[1] if self.phase else None, (before[0], before[1], ended) if before else None)

    # ------------------------------------------------------------ the estimate
    def eta(self) -> float | None:
        """Seconds left (``tusk.workflows.eta``); None while there is no history to estimate from."""
        from tusk.workflows.eta import Chain, remaining, typical

        with self.lock:
            now = self.now()
            chains = []
            for u in self.units.values():
                if u.done or u.failed:
                    continue
                left = [(label, u.expected.get(label)) for label in [*self.labels, WRITE] if label not in u.resolved]
                if not left:
                    continue
                first = left[0][0]
                started = [t.started for t in self.tasks.values()
                           if t.unit == u.name and t.started is not None and t.what.split(" ", 1)[0] == first]
                chains.append(Chain(left, now - min(started) if started else 0.0))
            unseen = max(0, self.n_units - len(self.units))
            expected = self.history.phases()
            # no cluster running (in this process, or everything cached so far): none to stop
            post = [k for k in POST_BUILD if k not in self.phases_done
                    and not (k == "close" and (self.inline_writes or not self.observed))]
            phases_left: list[float | None] = []
            for k in post:
                if self.phase is not None and k == self.phase[0]:
                    phases_left.append(max(0.0, expected[k] - (now - self.phase[2])) if k in expected else None)
                elif k in expected:  # a phase earlier builds had (no cluster: no "stopping the cluster")
                    phases_left.append(expected[k])
            if not chains and not unseen and not post:
                return 0.0
            return remaining(chains, unseen, self.slots, phases_left,
                             typical([u.expected for u in self.units.values() if u.expected]))


def _clock(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def _seconds(s: float) -> str:
    return f"{s:.1f}s" if s < 60 else _clock(s)


# ====================================================================== displays


class Display(BuildEvents):
    """Common part of the live and the plain display: the state and the executor lines."""

    def __init__(self, console: Console, history: History | None = None, verbose: bool = False,
                 dashboard: bool = False):
        self.console = console
        self.state = State(history or History())
        self.state.on_phase = self._phase_changed
        self.verbose = verbose
        self.dashboard = dashboard
        self._unobserve: Callable[[], None] | None = None

    def pipeline(self, resolved) -> None:
        from tusk.workflows.report import print_pipeline

        self.state.labels = [s.label for s in resolved.steps]
        if self.verbose:
            print_pipeline(self.console, [s.spec for s in resolved.steps], resolved.unavailable)

    def start(self, n_units: int, n_steps: int) -> None:
        self.state.n_units = n_units
        self.state.total = n_units * (n_steps + 1)  # + writing the outputs of each unit
        self.state.t0 = time.perf_counter()

    def executor_starting(self, what: str) -> None:
        _expect_slots(self.state, what)
        self.state.set_phase("start", f"starting {what}")
        self.say(f"starting {what} ...")

    def phase(self, key: str | None) -> None:
        """The build entered one of its phases besides the steps (``PHASES``), or left it (None)."""
        if key == "close":
            self.unobserve()  # while the client still answers: the workers' plugin goes with it
        self.state.set_phase(key)

    def _phase_changed(self, key: str | None, text: str | None, ended: tuple[str, str, float] | None) -> None:
        """A phase started (``text``) or ``ended`` (key, text, seconds): plain lines say so."""

    def executor(self, ex) -> None:
        adopt_dask_logs()
        if self.state.phase is not None and self.state.phase[0] == "start":  # its workers import Tusk next
            self.state.set_phase("start", "the workers are importing Tusk" if getattr(ex, "is_cluster", False)
                                 else "importing the passes")
        from tusk.workflows.task_states import observe

        self._unobserve = observe(ex, self.state.task_state)
        self.state.inline_writes = not getattr(ex, "is_cluster", False)
        self.state.observed = self._unobserve is not None
        reason = str(getattr(ex, "reason", "") or "")
        why = f" ({reason})" if self.verbose and reason else ""
        if getattr(ex, "is_cluster", False):
            self.say(f"started {ex.description}{why}")
            try:
                self.state.slots = max(1, sum(ex.client.nthreads().values()))
            except Exception:  # noqa: BLE001
                self.state.slots = 1
        else:
            self.say(f"running passes in this process, no cluster{why}")
        if self.dashboard:
            link = getattr(ex, "dashboard_link", None)
            try:
                import bokeh  # noqa: F401
                note = ""
            except ImportError:
                note = " (the dashboard needs bokeh: pip install 'tusk[dashboard]')"
            self.say(f"dashboard: {link}{note}" if link else f"dashboard: not available{note}")

    def startup(self, event) -> None:
        """Start-up is a line of its own (never charged to the first pass on a worker)."""
        if self.state.phase is not None and self.state.phase[0] == "start":
            self.state.set_phase(None)
        if event.workers and (self.verbose or len(event.workers) > 1 or "this process" not in event.workers):
            slow = max(w.get("seconds", 0.0) for w in event.workers.values())
            self.say(f"{len(event.workers)} worker(s) ready in {event.started + event.ready:.1f}s "
                     f"(start {event.started:.1f}s, imports {slow:.1f}s)")

    def step(self, event: str, unit, label: str) -> None:
        self.state.resolve(unit, label, event)

    def task(self, event: str, key: str, unit, what: str, result: dict) -> None:
        self.state.task(event, key, unit, what)

    def unobserve(self) -> None:
        stop, self._unobserve = self._unobserve, None
        if stop is not None:
            stop()

    def say(self, text: str) -> None:
        if getattr(self, "_muted", False):
            return
        try:
            self.console.print(text, soft_wrap=True, highlight=False, markup=False)
        except OSError:  # the reader went away (| head): stay quiet, let the build finish
            self._muted = True

    def stop(self) -> None:
        """The build is over (or failed): the display lets go of the terminal."""
        self.unobserve()


class Live(Display):
    """A rich live view: the bar with counts and ETA, then one line per task the executor says is running
    (or the phase the build is in), then how many are queued."""

    MAX_LINES = 8

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        from rich.live import Live as RichLive

        self._live = RichLive(console=self.console, refresh_per_second=8, transient=True,
                              get_renderable=self.render)
        self._spinner = Spinner("dots")
        self._on = False

    def start(self, n_units: int, n_steps: int) -> None:
        super().start(n_units, n_steps)
        if not self._on:
            self._live.start()
            self._on = True

    def stop(self) -> None:
        super().stop()
        if self._on:
            self._live.stop()
            self._on = False

    def say(self, text: str) -> None:
        try:
            self.console.print(Text(text), soft_wrap=True)  # printed above the live view
        except OSError:
            pass

    def executor_starting(self, what: str) -> None:
        _expect_slots(self.state, what)
        self.state.set_phase("start", f"starting {what}")  # the live view says it (with a spinner)

    def _phase_changed(self, key: str | None, text: str | None, ended: tuple[str, str, float] | None) -> None:
        if self._on and key is not None:
            try:
                self._live.refresh()  # every phase is drawn at least once, however short
            except Exception:  # noqa: BLE001 - a display that cannot draw never stops the build
                pass

    def render(self):
        st = self.state
        now = time.perf_counter()
        phase = st.phase
        if phase is not None:
            self._spinner.text = Text(f"{phase[1]} ... {_seconds(now - phase[2])}", style="yellow")
            grid = Table.grid(padding=(0, 1))
            grid.add_row(Text(" "), self._spinner)
            return Group(self._bar(now - st.t0), grid)
        running, queued = st.running()
        lines = Table.grid(padding=(0, 2))
        lines.add_column(no_wrap=True, style="bold")
        lines.add_column(no_wrap=True)
        lines.add_column(no_wrap=True, style="dim")
        lines.add_column(justify="right", no_wrap=True, style="cyan")
        width = max((len(t.unit) for t in running[:self.MAX_LINES]), default=0)
        for t in running[:self.MAX_LINES]:
            lines.add_row("  " + t.unit.ljust(width), t.what, t.worker, _seconds(now - (t.started or now)))
        body = [self._bar(now - st.t0), lines]
        note = _waiting_note(st, running, queued, self.MAX_LINES)
        if note:
            body.append(Text("  " + note, style="dim"))
        return Group(*body)

    def _bar(self, elapsed: float):
        st = self.state
        done, total = st.completed, max(1, st.total)
        grid = Table.grid(padding=(0, 1))
        for _ in range(3):
            grid.add_column(no_wrap=True)
        eta = st.eta()
        counts = Text.assemble(f"{done}/{total} steps  ", (f"{st.cached} cached", "green"), " · ",
                               (f"{st.run} run", "cyan"), " · ",
                               (f"{st.failed} failed", "red" if st.failed else "dim"),
                               f"  {_clock(elapsed)}", f"  ETA {_clock(eta)}" if eta is not None else
                               "  ETA estimating")
        grid.add_row(Text("compiling", style="bold"), ProgressBar(total=total, completed=min(done, total), width=30),
                     counts)
        return grid


def _expect_slots(st: State, what: str) -> None:
    """While "a local cluster of N worker process(es)" starts, the estimate already counts its N slots."""
    import re

    m = re.search(r"\bof (\d+) worker", what)
    if m:
        st.slots = max(1, int(m.group(1)))


def _waiting_note(st: State, running: list, queued: int, shown: int) -> str:
    """``2 more running, 5 queued`` -- or, when the executor does not say which task runs, how many are out."""
    if not st.observed:
        return f"{len(st.tasks)} task(s) submitted" if st.tasks else ""
    parts = []
    if len(running) > shown:
        parts.append(f"{len(running) - shown} more running")
    if queued:
        parts.append(f"{queued} queued")
    return ", ".join(parts)


class Plain(Display):
    """Line-oriented progress for pipes and logs: executed and failed steps, cluster start, every phase of
    the build, and a heartbeat naming what runs (as the executor says) or the phase it is in."""

    HEARTBEAT = 30.0
    LONG = 2.0  # seconds: a step or a phase this long gets its own line

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._last = time.perf_counter()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def say(self, text: str) -> None:
        self._last = time.perf_counter()
        super().say(text)

    def start(self, n_units: int, n_steps: int) -> None:
        super().start(n_units, n_steps)
        if self._thread is None:
            self._thread = threading.Thread(target=self._beat, name="tusk-progress", daemon=True)
            self._thread.start()

    def _phase_changed(self, key: str | None, text: str | None, ended: tuple[str, str, float] | None) -> None:
        if ended is not None and ended[0] != "start" and ended[2] >= self.LONG:
            self.say(f"{self._where()} {ended[1]}: {ended[2]:.1f}s")
        if key is not None and key != "start" and text:
            self.say(f"{self._where()} {text} ...")

    def _where(self) -> str:
        st = self.state
        return f"[{sum(1 for u in st.units.values() if u.done or u.failed)}/{st.n_units}]"

    def step(self, event: str, unit, label: str) -> None:
        super().step(event, unit, label)
        where = self._where()
        if event == "executed":
            secs = next((s.seconds for s in unit.steps if s.label == label), 0.0)
            if secs >= self.LONG:
                self.say(f"{' ' * len(where)} {unit.unit.name}: {label} ran in {secs:.1f}s")
        elif event == "failed":
            self.say(f"{where} {unit.unit.name}: failed at {label or 'reading the kernel'}")
        elif event == "done":
            ran, cached = len(unit.executed), len(unit.cached)
            secs = sum(s.seconds for s in unit.steps if s.status == "executed")
            self.say(f"{where} {unit.unit.name}: {ran} pass(es) ran ({secs:.2f}s), {cached} cached")

    def heartbeat_line(self) -> str | None:
        """What the heartbeat says now: the phase, or what the executor says runs; None: nothing to say."""
        st = self.state
        now = time.perf_counter()
        eta = st.eta()
        tail = f"; ETA {_clock(eta)}" if eta is not None else "; ETA estimating"
        phase = st.phase
        if phase is not None:
            return f"[{st.completed}/{st.total}] {phase[1]} ({_seconds(now - phase[2])}){tail}"
        running, queued = st.running()
        if not running and not st.tasks:
            return None
        what = ", ".join(f"{t.unit}: {t.what} ({_seconds(now - (t.started or now))}"
                         + (f" on {t.worker})" if t.worker else ")") for t in running[:4])
        note = _waiting_note(st, running, queued, 4)
        text = f"running {what}" if running else "no task running" if st.observed else ""
        return f"[{st.completed}/{st.total}] " + "; ".join(x for x in (text, note) if x) + tail

    def _beat(self) -> None:
        while not self._stop.wait(1.0):
            if time.perf_counter() - self._last < self.HEARTBEAT:
                continue
            line = self.heartbeat_line()
            if line:
                self.say(line)
            else:
                self._last = time.perf_counter()

    def stop(self) -> None:
        super().stop()
        self._stop.set()


class Quiet(Display):
    """No progress at all (``--progress off``); the executor lines only with -v."""

    def say(self, text: str) -> None:
        if self.verbose:
            super().say(text)


def make_display(mode: str, console: Console, **kwargs: Any) -> Display:
    """``auto``: live on a terminal, plain lines elsewhere; or ``live``, ``plain``, ``off``."""
    if mode == "auto":
        mode = "live" if console.is_terminal and not console.is_dumb_terminal else "plain"
    return {"live": Live, "plain": Plain, "off": Quiet}[mode](console, **kwargs)
