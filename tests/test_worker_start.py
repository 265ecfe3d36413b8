"""A local cluster's workers are forked from the client on Linux (no second interpreter start-up) and start as
clean as spawned ones would: default signal handlers, none of the client's clean-up, their own streams."""

from __future__ import annotations

import signal
import sys

import pytest

from tusk.workflows import graph, interrupts, worker_start

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="workers fork on Linux only")


def _worker_view() -> dict:
    import signal as sig
    import sys as s

    from tusk.workflows import interrupts as it
    from tusk.workflows import tasks as tk
    from tusk.workflows import worker_start as ws

    # Ctrl-C in a worker: asyncio's runner (it takes SIGINT only from Python's default handler), as when spawned
    return {"probe": getattr(ws, "PROBE", None), "sigint_default": "Runner._on_sigint" in repr(sig.getsignal(sig.SIGINT)),
            "sigterm_default": sig.getsignal(sig.SIGTERM) == sig.SIG_DFL, "at_kill": len(it.AT_KILL),
            "stderr_writes": s.stderr.write("") == 0, "memo": len(tk._MEMORY), "budget_known": bool(tk._BUDGET)}


def _a_module():
    from tests.programs import tiled_exp_module

    return tiled_exp_module()


def test_workers_are_forked_and_start_clean(tmp_path, monkeypatch):
    monkeypatch.delenv("DASK_DISTRIBUTED__WORKER__MULTIPROCESSING_METHOD", raising=False)
    monkeypatch.setattr(worker_start, "PROBE", "set in the client before the cluster started", raising=False)
    from tusk.workflows import tasks

    tasks.memory_budget()  # the client's own budget, known before the fork: the worker sizes its own
    tasks.remember("client-only", _a_module(), budget=1 << 40)
    with interrupts.handled(at_kill=lambda: None):  # the build's own handlers, as during `tusk compile`
        assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler
        ex = graph.local_cluster_executor(1, local_directory=str(tmp_path / "w"))
        try:
            (view,) = ex.client.run(_worker_view).values()
        finally:
            ex.close()
    tasks.forget_all()
    assert view == {"probe": "set in the client before the cluster started", "sigint_default": True,
                    "sigterm_default": True, "at_kill": 0, "stderr_writes": True, "memo": 0, "budget_known": False}


def test_the_users_own_dask_setting_wins(monkeypatch):
    monkeypatch.setenv("DASK_DISTRIBUTED__WORKER__MULTIPROCESSING_METHOD", "spawn")
    assert worker_start.method() == "spawn"
    monkeypatch.delenv("DASK_DISTRIBUTED__WORKER__MULTIPROCESSING_METHOD")
    assert worker_start.method() == "fork"
    import dask

    with dask.config.set({worker_start.SETTING: "forkserver"}):
        assert worker_start.method() == "forkserver"


def test_spawned_workers_still_work(tmp_path, monkeypatch):
    """With the user's "spawn" the workers are fresh interpreters: nothing of the client's state."""
    monkeypatch.setenv("DASK_DISTRIBUTED__WORKER__MULTIPROCESSING_METHOD", "spawn")
    monkeypatch.setattr(worker_start, "PROBE", "client only", raising=False)
    ex = graph.local_cluster_executor(1, local_directory=str(tmp_path / "w"))
    try:
        (view,) = ex.client.run(_worker_view).values()
    finally:
        ex.close()
    assert view["probe"] is None and view["sigint_default"] and view["at_kill"] == 0


def test_a_fork_of_the_callers_own_keeps_its_state():
    """Tusk as a library: a process the caller forks after a build keeps the caller's handlers and streams."""
    import os

    worker_start.settings()  # the at-fork hook is registered (once per process)
    mine = lambda signum, frame: None  # noqa: E731
    old = signal.signal(signal.SIGINT, mine)
    stderr = sys.stderr
    try:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            os.write(w, b"1" if signal.getsignal(signal.SIGINT) is mine and sys.stderr is stderr else b"0")
            os._exit(0)
        os.close(w)
        got = os.read(r, 1)
        os.waitpid(pid, 0)
        os.close(r)
    finally:
        signal.signal(signal.SIGINT, old)
    assert got == b"1"


ORPHAN_SCRIPT = """
import os, sys, time
from tusk.workflows import worker_start
parent = os.getpid()
child = os.fork()
if child == 0:
    worker_start._exit_with_parent(parent)  # returns never: it ends the process when the parent is gone
    time.sleep(60)  # not reached: the watch ends the process (a watch that returned would leave it alive)
print(child, flush=True)
os._exit(0)  # the parent dies without a word, as a SIGKILLed tusk compile does
"""


def test_a_forked_worker_ends_when_its_parent_dies_without_a_word():
    import subprocess
    import time

    import psutil

    out = subprocess.run([sys.executable, "-c", ORPHAN_SCRIPT], capture_output=True, text=True, timeout=30)
    child = int(out.stdout.split()[0])
    deadline = time.time() + 10
    while time.time() < deadline and psutil.pid_exists(child) and \
            psutil.Process(child).status() != psutil.STATUS_ZOMBIE:
        time.sleep(0.05)
    assert not psutil.pid_exists(child) or psutil.Process(child).status() == psutil.STATUS_ZOMBIE
