"""What `tusk compile` shows while it runs.

On a terminal (``Live``): an overall bar with the steps resolved, how many
were cached, run or failed, the elapsed time and an estimate of the time
left, and one line per running task -- kernel, pass, part i/n, seconds so
far.  Elsewhere (a pipe, a CI log; ``Plain``): one line per pass that ran or
failed, a line when a cluster starts, and every 30 s a line naming what
still runs.

Which tasks run is modelled from the build's task events: an executor with
*W* worker slots runs the *W* oldest unfinished tasks (the in-process
executor and Dask both start tasks in submission order, Dask within the
limits of worker affinity).

The estimate comes from earlier builds: after a build, each unit's seconds
per step (the pass plus fetching, hashing and storing around it, and
writing the outputs) are kept in the store as a note (``pass-times``, by
kernel file and unit), and the next build sums them over what is left,
divided by the worker slots.  Without history there is no estimate.

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
from typing import Any, Iterator

from rich.console import Console, Group
from rich.progress_bar import ProgressBar
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text

from tusk.workflows.compile import BuildEvents

NOTE_KIND = "pass-times"
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
                    for name, level in (("distributed", "WARNING"), ("tornado", "ERROR"), ("bokeh", "ERROR"))},
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
    """Seconds per step of each unit in earlier builds (store notes); empty without a store."""

    def __init__(self, store=None):
        self.store = store
        self._seen: dict[str, dict[str, float]] = {}

    @classmethod
    def of(cls, cfg) -> "History":
        """The history kept in the configured cache (none for a memory:// cache or one that cannot be opened)."""
        url = str(cfg.cache_dir)
        if url.startswith("memory://"):
            return cls(None)
        try:
            from tusk.cache.store import Store

            return cls(Store(url))
        except Exception:  # noqa: BLE001 - no history then; the build itself will say what is wrong
            return cls(None)

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

    def record(self, report, write_seconds: dict[str, float]) -> None:
        """Keep this build's seconds for every executed step (and output writing) of every unit."""
        if self.store is None or report is None:
            return
        for u in report.units:
            known = dict(self.get(u.unit))
            changed = False
            for s in u.steps:
                if s.status == "executed":
                    extra = sum(v for k, v in s.timing.items() if k in ("fetch", "hash", "store", "verify")
                                and isinstance(v, (int, float)))
                    known[s.label] = round(s.seconds + extra, 4)
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


@dataclass
class _Task:
    unit: str
    what: str
    submitted: float
    started: float | None = None


@dataclass
class _Unit:
    name: str
    expected: dict[str, float]
    resolved: set[str] = field(default_factory=set)
    failed: bool = False
    done: bool = False
    last_event: float = 0.0


class State:
    """Counts, running tasks and the estimate; shared by the live and the plain display."""

    def __init__(self, history: History):
        self.history = history
        self.labels: list[str] = []
        self.n_units = 0
        self.total = 0
        self.cached = self.run = self.failed = 0
        self.units: dict[str, _Unit] = {}
        self.tasks: dict[str, _Task] = {}
        self.slots = 1
        self.t0 = time.perf_counter()
        self.write_seconds: dict[str, float] = {}
        self.starting: str | None = None
        self.lock = threading.RLock()

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

    def resolve(self, ur, label: str, status: str) -> None:
        with self.lock:
            u = self.unit(ur)
            now = self.now()
            if status == "done":
                if not u.failed:
                    self.write_seconds[u.name] = now - u.last_event
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
            u.last_event = now

    def task(self, event: str, key: str, ur, what: str) -> None:
        with self.lock:
            self.unit(ur)
            if event == "submitted":
                self.tasks[key] = _Task(ur.unit.name, what, self.now())
            else:
                self.tasks.pop(key, None)
            self._model()

    def _model(self) -> list[_Task]:
        """The tasks running now: the ``slots`` oldest unfinished ones (their start time set on entry)."""
        running = list(self.tasks.values())[:max(1, self.slots)]
        now = self.now()
        for t in running:
            if t.started is None:
                t.started = now
        return running

    def running(self) -> tuple[list[_Task], int]:
        with self.lock:
            running = self._model()
            return running, len(self.tasks) - len(running)

    # ------------------------------------------------------------ the estimate
    def eta(self) -> float | None:
        """Seconds left, from earlier builds; None without any history for what is left."""
        with self.lock:
            left = 0.0
            known = False
            pending = max(0, self.n_units - len(self.units))
            for u in self.units.values():
                for label in [*self.labels, WRITE]:
                    if label in u.resolved:
                        continue
                    pending += 1
                    if label in u.expected:
                        left += u.expected[label]
                        known = True
            if not pending:
                return 0.0
            if not known:
                return None
            now = self.now()
            for t in self._model():  # a running step is partly done
                u = self.units.get(t.unit)
                label = t.what.split(" ", 1)[0]
                if u is not None and t.started is not None and label in u.expected:
                    left -= min(now - t.started, u.expected[label])
            unseen = max(0, self.n_units - len(self.units))
            if unseen and self.units:
                left *= (len(self.units) + unseen) / len(self.units)
            return max(0.0, left) / max(1, self.slots)


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
        self.verbose = verbose
        self.dashboard = dashboard

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
        self.state.starting = what
        self.say(f"starting {what} ...")

    def executor(self, ex) -> None:
        adopt_dask_logs()
        self.state.starting = None
        why = f" ({ex.reason})" if self.verbose and getattr(ex, "reason", "") else ""
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
        if event.workers and (self.verbose or len(event.workers) > 1 or "this process" not in event.workers):
            slow = max(w.get("seconds", 0.0) for w in event.workers.values())
            self.say(f"{len(event.workers)} worker(s) ready in {event.started + event.ready:.1f}s "
                     f"(start {event.started:.1f}s, imports {slow:.1f}s)")

    def step(self, event: str, unit, label: str) -> None:
        self.state.resolve(unit, label, event)

    def task(self, event: str, key: str, unit, what: str, result: dict) -> None:
        self.state.task(event, key, unit, what)

    def finished(self, result, store) -> None:
        self.state.starting = "writing the build report" if result.kernels else None

    def say(self, text: str) -> None:
        if getattr(self, "_muted", False):
            return
        try:
            self.console.print(text, soft_wrap=True, highlight=False, markup=False)
        except OSError:  # the reader went away (| head): stay quiet, let the build finish
            self._muted = True

    def stop(self) -> None:
        """The build is over (or failed): the display lets go of the terminal."""


class Live(Display):
    """A rich live view: the bar with counts and ETA, then one line per running task."""

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
        if self._on:
            self._live.stop()
            self._on = False

    def say(self, text: str) -> None:
        try:
            self.console.print(Text(text), soft_wrap=True)  # printed above the live view
        except OSError:
            pass

    def executor_starting(self, what: str) -> None:
        self.state.starting = what  # the live view says it (with a spinner)

    def render(self):
        st = self.state
        elapsed = time.perf_counter() - st.t0
        if st.starting:
            what = st.starting if st.starting.startswith("writing") else f"starting {st.starting}"
            self._spinner.text = Text(f"{what} ...", style="yellow")
            grid = Table.grid(padding=(0, 1))
            grid.add_row(Text(" "), self._spinner)
            return Group(self._bar(elapsed), grid)
        running, waiting = st.running()
        lines = Table.grid(padding=(0, 2))
        lines.add_column(no_wrap=True, style="bold")
        lines.add_column(no_wrap=True)
        lines.add_column(justify="right", no_wrap=True, style="cyan")
        now = time.perf_counter()
        width = max((len(t.unit) for t in running[:self.MAX_LINES]), default=0)
        for t in running[:self.MAX_LINES]:
            lines.add_row("  " + t.unit.ljust(width), t.what, _seconds(now - (t.started or now)))
        more = len(running) - self.MAX_LINES
        parts = []
        if more > 0:
            parts.append(f"{more} more running")
        if waiting:
            parts.append(f"{waiting} waiting")
        body = [self._bar(elapsed), lines]
        if parts:
            body.append(Text("  " + ", ".join(parts), style="dim"))
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
                               f"  {_clock(elapsed)}", f"  ETA {_clock(eta)}" if eta is not None else "")
        grid.add_row(Text("compiling", style="bold"), ProgressBar(total=total, completed=min(done, total), width=30),
                     counts)
        return grid


class Plain(Display):
    """Line-oriented progress for pipes and logs: executed and failed steps, cluster start, a heartbeat."""

    HEARTBEAT = 30.0

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

    LONG = 2.0  # seconds: a step this long gets its own line

    def step(self, event: str, unit, label: str) -> None:
        super().step(event, unit, label)
        st = self.state
        done = sum(1 for u in st.units.values() if u.done or u.failed)
        where = f"[{done}/{st.n_units}]"
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

    def _beat(self) -> None:
        while not self._stop.wait(1.0):
            if time.perf_counter() - self._last < self.HEARTBEAT:
                continue
            running, waiting = self.state.running()
            if running:
                now = time.perf_counter()
                what = ", ".join(f"{t.unit}: {t.what} ({_seconds(now - (t.started or now))})" for t in running[:4])
                more = f" and {len(running) - 4} more" if len(running) > 4 else ""
                self.say(f"[{self.state.completed}/{self.state.total}] running {what}{more}"
                         + (f"; {waiting} waiting" if waiting else ""))
            else:
                self._last = time.perf_counter()

    def stop(self) -> None:
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
