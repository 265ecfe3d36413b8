"""Ctrl-C and SIGTERM end a build promptly, whatever Dask is doing.

The first signal raises KeyboardInterrupt in the main thread, so the build
unwinds normally (the cluster is closed, staging directories are removed,
the message says the next build continues from the cache).  It also starts
a watchdog: if the process has not ended ``GRACE`` seconds later -- a
cluster half-way through starting, an interpreter shutdown waiting on a
Dask thread -- every process Tusk started is killed and Tusk exits 130.  A
second signal does that at once.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time

GRACE = 15.0
CHILD_STDERR: list[str] = []  # where processes started now write their stderr (set by the CLI: OUT/tusk.log)
INTERRUPTED = threading.Event()  # set by the first signal: closing a cluster then waits a moment, not seconds
_SAID = threading.Event()        # the caller reported the interrupt: the watchdog stays silent
AT_KILL: list = []               # callables run once the children are killed (the CLI: OUT's temporary dirs)


def _kill_children_and_exit(code: int = 130) -> None:
    try:
        import psutil  # a dependency of dask.distributed

        for child in psutil.Process().children(recursive=True):
            try:
                child.kill()
            except psutil.Error:
                pass
    except ImportError:  # pragma: no cover
        pass
    for cleanup in list(AT_KILL):
        try:
            cleanup()
        except Exception:  # noqa: BLE001 - the process ends regardless; the next build cleans up
            pass
    os._exit(code)


def said() -> None:
    """The caller has told the user about the interrupt (the watchdog need not)."""
    _SAID.set()


@contextlib.contextmanager
def handled(message: str = "interrupted: the build's processes were killed before it had stopped by itself; "
                           "the next build continues from the cache", at_kill=None):
    """SIGINT and SIGTERM through the handler above while the block runs (main thread only).  ``message`` is
    what the watchdog writes to the terminal if it has to end the process (unless :func:`said` came first);
    ``at_kill``, what it cleans up then (in :data:`AT_KILL` while the block runs)."""
    state = {"seen": False}
    INTERRUPTED.clear()
    _SAID.clear()
    # the terminal's stderr as it is now: while a cluster starts, fd 2 goes to OUT/tusk.log
    terminal = os.dup(2) if threading.current_thread() is threading.main_thread() else None

    def say_and_exit() -> None:
        if not _SAID.is_set() and terminal is not None:
            # a raw write: the main thread may hold the locks of sys.stderr or of a logging handler
            try:
                os.write(terminal, f"\n{message}\n".encode())
            except OSError:
                pass
        _kill_children_and_exit()

    def handler(signum, frame):  # noqa: ARG001
        if state["seen"]:
            say_and_exit()
        state["seen"] = True
        INTERRUPTED.set()

        def watchdog() -> None:
            time.sleep(GRACE)
            say_and_exit()

        threading.Thread(target=watchdog, name="tusk-interrupt-watchdog", daemon=True).start()
        raise KeyboardInterrupt

    if terminal is None:
        yield
        return
    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    if at_kill is not None:
        AT_KILL.append(at_kill)
    try:
        yield
    finally:
        if at_kill is not None:
            AT_KILL.remove(at_kill)
        for sig, old in previous.items():
            signal.signal(sig, old)
        if not state["seen"]:  # else the watchdog may still need it; the process ends soon anyway
            os.close(terminal)


@contextlib.contextmanager
def children_stderr(path: str | None = None):
    """Processes started in the block (a local cluster's workers) write their stderr to ``path`` (default:
    ``CHILD_STDERR``) for life, not to the terminal: Ctrl-C reaches every process of the terminal's
    group, and a worker interrupted half-way through starting prints a traceback the user cannot act on.
    This process's own stderr is back on the terminal when the block ends."""
    path = path or (CHILD_STDERR[-1] if CHILD_STDERR else None)
    if path is None:
        yield
        return
    import sys

    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        log = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError:  # no log file: the children keep the terminal
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(log, 2)
    os.close(log)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


@contextlib.contextmanager
def children_write_to(path: str):
    """``children_stderr`` uses ``path`` while the block runs (the CLI: OUT/tusk.log during a build)."""
    CHILD_STDERR.append(path)
    try:
        yield
    finally:
        CHILD_STDERR.remove(path)


def end_now(code: int = 130) -> None:
    """Leave at once after an interrupt was reported: every process Tusk started is killed and no
    interpreter shutdown runs (Dask's exit hooks would print tracebacks of a cluster half-way up)."""
    import sys

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    _kill_children_and_exit(code)
