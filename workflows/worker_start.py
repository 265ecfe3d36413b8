"""How a local cluster's worker processes start: forked from ``tusk compile`` where that is safe (Linux).

Dask spawns its workers by default: each is a fresh interpreter that imports Python, numpy, Dask and Tusk
again (~0.5 s of CPU each) before it can run a task, and on two cores the two workers' imports and the
client compete for the CPU.  A forked worker starts with everything the client has imported: on the 8
large_matmul variants with two workers, the cluster was ready in 0.3 s instead of 0.6-0.7 s and the build
used ~1.2 s less CPU (docs/architecture.md, "Executors").

A fork copies one thread of a process that has several (the client's event loop, the progress line), so
:func:`_fresh_child` gives the worker what a spawned one would have had: the default signal handlers (not
the build's Ctrl-C watchdog), no clean-up of the client's to run, standard streams whose locks no other
thread can be holding, and a watch that ends it when the client dies.  The malloc and BLAS settings the
worker needs are already the client's (``malloc_setup``, ``blas_threads``).  The hook acts only in
processes Dask starts: a process the caller forks (Tusk used as a library) keeps what it inherits.  macOS
and Windows keep spawning: forking there is unsafe or absent.
The user's own Dask setting (``DASK_DISTRIBUTED__WORKER__MULTIPROCESSING_METHOD``, or a Dask config file)
wins.
"""

from __future__ import annotations

import os
import signal
import sys

SETTING = "distributed.worker.multiprocessing-method"
DASK_STARTER = "AsyncProcess"  # distributed.process.AsyncProcess forks from a thread named so
_HOOKED: list[bool] = []
_PARENT: list[int] = []  # the forking process's id, from just before the fork
PARENT_POLL = 0.25  # seconds between a forked worker's looks at its parent
EXIT_ORPHANED = 70  # a forked worker's exit code when its parent died (EX_SOFTWARE)


def method() -> str:
    """The start method for this build's local workers: the user's Dask setting if they made one, else ``fork``
    on Linux, else Dask's default (``spawn``)."""
    import dask

    chosen = dask.config.get(SETTING, "spawn")
    if chosen != "spawn" or not sys.platform.startswith("linux"):
        return chosen
    if _user_set_spawn():
        return "spawn"
    return "fork"


def _user_set_spawn() -> bool:
    """Whether "spawn" is the user's choice (an environment variable or a Dask config file), not the default."""
    if os.environ.get("DASK_DISTRIBUTED__WORKER__MULTIPROCESSING_METHOD"):
        return True
    import dask

    for source in dask.config.collect_yaml(dask.config.paths):
        if (source.get("distributed", {}) or {}).get("worker", {}).get("multiprocessing-method"):
            return True
    return False


def settings() -> dict[str, str]:
    """Dask settings for starting a local cluster's workers (and, for ``fork``, the child's clean start)."""
    chosen = method()
    if chosen == "fork" and not _HOOKED:
        os.register_at_fork(before=_remember_parent, after_in_child=_fresh_child)
        _HOOKED.append(True)
    return {SETTING: chosen}


def _remember_parent() -> None:
    """Before a fork, the process id the child will watch (read in the child, the parent may be gone already)."""
    _PARENT[:] = [os.getpid()]


def _exit_with_parent(parent: int) -> None:
    """End this worker when ``tusk compile`` (its parent) is gone, killed without a word (SIGKILL, OOM).

    Dask's own watch -- a pipe from the parent whose end-of-file ends the worker -- fails for forked workers:
    a worker forked after another one holds a copy of that one's pipe end, and each can keep the other
    alive for ever (a SIGKILLed build left both workers running, 1 run in 3).  The kernel re-parents an
    orphan, so a changed parent id is the parent's death."""
    import time

    while os.getppid() == parent:
        time.sleep(PARENT_POLL)
    os._exit(EXIT_ORPHANED)


def _fresh_child() -> None:
    """In a process just forked from ``tusk compile``: what a spawned worker would have had.  Only Dask's
    process starts (their thread's name; a test checks it) -- not a fork of the caller's own, where Tusk is
    a library in a bigger program."""
    import threading

    if not threading.current_thread().name.startswith(DASK_STARTER):
        return
    from tusk.workflows import interrupts, tasks

    for sig, default in ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, signal.SIG_DFL)):
        try:
            signal.signal(sig, default)
        except ValueError:  # pragma: no cover - not the main thread: signals are the main thread's
            pass
    interrupts.AT_KILL.clear()
    interrupts.INTERRUPTED.clear()
    parent = _PARENT[0] if _PARENT else os.getppid()
    threading.Thread(target=_exit_with_parent, args=(parent,), name="tusk-parent-watch", daemon=True).start()
    tasks.fresh_process()  # its memo is sized from the worker's own memory limit, not the client's
    # a thread of the parent may have held a stream's lock at the fork: new stream objects on the same fds
    for name, fd in (("stdout", 1), ("stderr", 2)):
        old = getattr(sys, name)
        try:
            fresh = open(fd, "w", buffering=1, encoding=getattr(old, "encoding", None) or "utf-8",
                         errors="backslashreplace", closefd=False)
        except OSError:
            continue
        setattr(sys, name, fresh)
