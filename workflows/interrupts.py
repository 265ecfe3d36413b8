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
    os._exit(code)


@contextlib.contextmanager
def handled():
    """SIGINT and SIGTERM through the handler above while the block runs (main thread only)."""
    state = {"seen": False}

    def handler(signum, frame):  # noqa: ARG001
        if state["seen"]:
            _kill_children_and_exit()
        state["seen"] = True

        def watchdog() -> None:
            time.sleep(GRACE)
            _kill_children_and_exit()

        threading.Thread(target=watchdog, name="tusk-interrupt-watchdog", daemon=True).start()
        raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
