"""Where a build's tasks run: this process (:class:`InlineExecutor`), a local cluster of worker processes
(:func:`local_cluster_executor`), an existing scheduler (:func:`scheduler_executor`) or a client the caller
owns (:func:`client_executor`).  The build (:mod:`tusk.workflows.graph`) hands each executor tasks and takes
their results back in the order they finish."""

from __future__ import annotations

import heapq
import itertools
import os
import time
from collections import deque
from typing import Any, Callable

from tusk.ir.errors import ENVIRONMENT, EnvError
from tusk.workflows import tasks


class ExecutorUnavailable(EnvError):
    """No executor could be created (scheduler unreachable, cluster failed to start): the build stops."""


class InlineExecutor:
    """Runs tasks in this process, one at a time, in submission order (tests, ``--workers 0``)."""

    description = "in-process"
    is_cluster = False
    dashboard_link = None

    def __init__(self) -> None:
        self._queue: deque = deque()

    def submit(self, key: str, fn: Callable, *args: Any, worker: str | None = None, priority: int = 0,
               anywhere: bool = False, size: int = 0, batch: int | None = None) -> None:
        self._queue.append((key, fn, args))

    def next_batch(self) -> int:
        return 0

    def discard(self, key: str) -> bool:
        """Drop a queued task (it never runs); False when there is none of that key."""
        for item in self._queue:
            if item[0] == key:
                self._queue.remove(item)
                return True
        return False

    def __len__(self) -> int:
        return len(self._queue)

    def next(self) -> tuple[str, dict]:
        key, fn, args = self._queue.popleft()
        return key, fn(*args)

    def close(self) -> None:
        self._queue.clear()

    def warm_up(self, targets: list[str]) -> dict[str, dict]:
        return {"this process": tasks.warm_up(targets)}


SLOTS_EVERY = 5.0  # seconds between looks at the cluster's worker threads while parts wait for one


class DaskExecutor:
    """Submits tasks to a ``distributed`` client and hands back results as they complete.

    Tasks that may run anywhere (``anywhere``: the parts of a split step, a big output's checks, the write
    parts of a big final module but the first; their inputs are in the store) go to the scheduler no more
    of them at a time than there are worker threads, the most urgent first, then the biggest; the rest wait
    here.  Handed over at once, Dask placed each on a
    worker up front (two per single-thread worker, its default worker-saturation), in submission order: on
    large_matmul one worker sat idle 0.8 s while the other still had a part of address_rotation_sb#2
    queued behind the one it was running.  A task that continues a kernel's chain goes at once, to the
    worker that holds its input, and does not hold parts back: counted against the threads too, the 8
    large_matmul variants' chains kept one kernel's unroll parts waiting 2.3 s."""

    is_cluster = True

    def __init__(self, client, cluster=None, description: str = "", retries: int = 1):
        from distributed import as_completed

        self.client = client
        self.cluster = cluster
        self.description = description or f"dask {client.scheduler.address}"
        self.retries = retries
        self._ac = as_completed()
        self._futures: dict[str, Any] = {}
        self._held: list[tuple] = []  # a heap of tasks that may run anywhere, not yet handed to the scheduler
        self._anywhere: set[str] = set()  # those handed over and not yet answered
        self._order = itertools.count()
        self.slots = 1  # worker threads: known once the workers are ready (warm_up), then looked up again
        self._slots_seen = 0.0  # when (time.monotonic) -- an existing cluster may gain or lose workers
        self.owns_client = True

    serves_dashboard = True  # a local cluster started without --dashboard has none

    @property
    def dashboard_link(self) -> str | None:
        if not self.serves_dashboard:
            return None
        try:
            return self.client.dashboard_link
        except Exception:  # noqa: BLE001
            return None

    def submit(self, key: str, fn: Callable, *args: Any, worker: str | None = None, priority: int = 0,
               anywhere: bool = False, size: int = 0, batch: int | None = None) -> None:
        """``worker``: the worker to prefer (it holds the input); ``priority``: higher runs first;
        ``anywhere``: hold the task until a worker thread is free.  Equally urgent held tasks go out by
        ``batch`` (tasks submitted together, such as a split's parts: the earlier batch first; default: a
        batch of its own), then by ``size`` (the biggest first).  Biggest first across batches starved
        small parts: one variant's 0.01 s unroll part waited 3.2 s behind seven other kernels' parts while
        its whole chain stood still."""
        if anywhere:
            order = next(self._order)
            heapq.heappush(self._held, (-priority, order if batch is None else batch, -size, order, key, fn, args,
                                        worker))
            self._release()
        else:
            self._send(key, fn, args, worker, priority)

    def next_batch(self) -> int:
        """A batch number for :meth:`submit`: later than every task and batch submitted so far."""
        return next(self._order)

    def discard(self, key: str) -> bool:
        """Drop a held task no one waits for any more (it never runs); False once it went to the scheduler."""
        for k, item in enumerate(self._held):
            if item[4] == key:
                del self._held[k]
                heapq.heapify(self._held)
                return True
        return False

    def _send(self, key: str, fn: Callable, args: tuple, worker: str | None, priority: int) -> None:
        hint = {"workers": [worker], "allow_other_workers": True} if worker else {}
        fut = self.client.submit(fn, *args, key=key, pure=False, retries=self.retries, priority=priority, **hint)
        self._futures[key] = fut
        self._ac.add(fut)

    def _release(self) -> None:
        """Hand held tasks to the scheduler while fewer of them run than there are worker threads."""
        if self._held and len(self._anywhere) >= self.slots and time.monotonic() - self._slots_seen > SLOTS_EVERY:
            self._count_slots()
        while self._held and len(self._anywhere) < self.slots:
            priority, _, _, _, key, fn, args, worker = heapq.heappop(self._held)
            self._send(key, fn, args, worker, -priority)
            self._anywhere.add(key)  # after the send: one that raised (a closed client) takes no slot

    def __len__(self) -> int:
        return len(self._futures) + len(self._held)

    def next(self) -> tuple[str, dict]:
        # held tasks go out for the slots the last answer freed only now, after the build has answered it:
        # the task it submitted then (the next step of that unit, placed on the worker that holds its input;
        # a write part's placement) goes before them, instead of waiting behind a 0.5 s check while the
        # other worker stood idle (large_matmul, 2 workers)
        self._release()
        fut = next(self._ac)
        key = fut.key
        try:
            result = fut.result()
        except Exception as e:  # noqa: BLE001 - a lost task is this unit's failure, not the build's
            result = {"status": "error", "error": f"task {key} failed: {type(e).__name__}: {e}",
                      "fault": ENVIRONMENT}
        self._futures.pop(key, None)
        fut.release()
        self._anywhere.discard(key)
        return key, result

    worker_pids: list[int] = []  # of a local cluster: killed if a graceful close does not end them

    def warm_up(self, targets: list[str]) -> dict[str, dict]:
        """Every worker imports what the tasks need (see :func:`tasks.warm_up`): worker -> what it took."""
        try:
            ready = dict(self.client.run(tasks.warm_up, targets))
        except Exception:  # noqa: BLE001 - the first tasks then pay it, as before
            ready = {}
        self.slots = max(1, len(ready))
        self._count_slots()
        self._release()
        return ready

    def _count_slots(self) -> None:
        self._slots_seen = time.monotonic()
        try:
            self.slots = max(1, sum(self.client.nthreads().values()))
        except Exception:  # noqa: BLE001 - the last count (at least one task at a time) still finishes the build
            pass

    def close(self) -> None:
        """Close the client (and a local cluster) within a few seconds, whatever the workers are doing;
        worker processes of a local cluster that are still alive then are killed: none outlives a build."""
        self.close_soon()
        self.closed()

    def close_soon(self) -> None:
        """Start closing and return: the caller writes the build's outputs and report meanwhile (half a
        second of a 2-worker build's tail) and calls :meth:`closed` before it ends."""
        import threading

        self._futures.clear()
        self._held.clear()
        self._anywhere.clear()
        if not self.owns_client or getattr(self, "_closing", None) is not None:
            return

        def shutdown() -> None:
            for close in (lambda: self.client.close(timeout=3),
                          lambda: self.cluster.close(timeout=5) if self.cluster is not None else None):
                try:
                    close()
                except Exception:  # noqa: BLE001 - closing is best effort; the processes are killed below
                    pass

        self._closing = threading.Thread(target=shutdown, name="tusk-cluster-close", daemon=True)
        self._closing.start()

    def closed(self) -> None:
        """Wait for :meth:`close_soon` (10 s at most; 1 s after Ctrl-C, when the workers have had the signal
        too), then kill what is left of a local cluster."""
        import signal

        from tusk.workflows.interrupts import INTERRUPTED

        t = getattr(self, "_closing", None)
        if t is None or getattr(self, "_closed", False):
            return
        self._closed = True
        t.join(1 if INTERRUPTED.is_set() else 10)
        for pid in self.worker_pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


# Dask's periodic work, in every server of a local cluster (each worker; the scheduler and the nannies in this
# process): the statistical profiler walks the task thread's stack every 10 ms, the event-loop tick runs every
# 20 ms, the memory monitors call psutil every 100 ms and the system monitor every 500 ms.  Each wakes its
# event loop, which takes the GIL from the task thread.  They feed the dashboard; Tusk times its own tasks
# (figures: docs/architecture.md, "Executors").  The memory monitor still runs (the terminate threshold),
# once a second.  Kept as Dask has it with --dashboard.
QUIET_CLUSTER: dict[str, Any] = {
    "distributed.worker.profile.enabled": False,
    "distributed.admin.tick.interval": "1s",
    "distributed.admin.tick.limit": "30s",
    "distributed.admin.system-monitor.interval": "2s",
    "distributed.worker.memory.monitor-interval": "1s",
}


def local_cluster_executor(workers: int, dashboard: bool = False, local_directory: str | None = None,
                           memory: int | None = None) -> DaskExecutor:
    """A ``LocalCluster`` of ``workers`` single-threaded processes (real parallelism past the GIL).

    Each worker's ``memory_limit`` is ``memory`` (the build's setting; default: the environment's, else the
    machine's RAM) divided by ``workers``.  Every server binds to 127.0.0.1; the scheduler serves its dashboard (a
    free port, when bokeh is installed) only with ``dashboard``.
    ``local_directory`` is where workers keep their scratch space and their
    lock files (default: Dask's, under the system temporary directory).
    """
    import dask
    from distributed import Client, LocalCluster

    extra: dict[str, Any] = {"local_directory": local_directory} if local_directory else {}
    from tusk.workflows import config
    from tusk.workflows.tasks import machine_memory

    # an explicit budget per worker (the memory setting, else the machine's RAM, shared out): each worker
    # sizes its module memo from it (tasks.memory_budget)
    total = memory or config.load().memory or machine_memory()
    extra["memory_limit"] = max(1, total // max(1, workers))
    from tusk.workflows.malloc_setup import environment

    settings: dict[str, Any] = {
        # Dask's default sets MALLOC_TRIM_THRESHOLD_ in each worker, which turns off glibc's adaptive mmap
        # threshold: every large numpy temporary is then mmapped and page-faulted afresh, and build_fdeps
        # on a 1.2M-instruction kernel took 9-12 s in a worker against 5-6 s in-process.  Workers keep freed
        # memory as the client does (malloc_setup); Dask's other variables stay.
        "distributed.nanny.pre-spawn-environ": {**{k: v for k, v in
                                                   (dask.config.get("distributed.nanny.pre-spawn-environ") or {}).items()
                                                   if k != "MALLOC_TRIM_THRESHOLD_"}, **environment()}}
    from tusk.workflows import worker_start

    settings.update(worker_start.settings())  # forked from this process where safe: no second start-up
    if not dashboard:
        settings.update(QUIET_CLUSTER)
    if local_directory:
        # Dask's "temporary-directory" is where nannies and workers put their work space and its
        # global/purge locks; local_directory alone still leaves those in /tmp/dask-scratch-space.
        settings["temporary-directory"] = local_directory
    try:
        with dask.config.set(settings):
            # the scheduler's HTTP server (health checks; the dashboard when bokeh is installed) always runs:
            # on loopback and a free port; its link is shown only with --dashboard
            from tusk.workflows.interrupts import children_stderr

            with children_stderr():  # a worker's own output (a Ctrl-C traceback) goes to OUT/tusk.log
                # the dashboard's pages only when asked for: with bokeh installed the scheduler otherwise
                # imports it and builds them anyway (0.35-0.45 s of every build's start, in this process)
                cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                                       dashboard_address="127.0.0.1:0", worker_dashboard_address=None,
                                       scheduler_kwargs={"dashboard": dashboard}, **extra)
    except Exception as e:  # noqa: BLE001 - whatever stops the cluster from starting stops the build
        raise ExecutorUnavailable(f"cannot start a local Dask cluster of {workers} worker(s): "
                                  f"{type(e).__name__}: {e}") from None
    client = Client(cluster)
    quicker_round_trips(client, cluster.scheduler)
    ex = DaskExecutor(client, cluster, f"local cluster, {workers} worker process(es)")
    ex.serves_dashboard = dashboard
    try:
        ex.worker_pids = sorted(client.run(os.getpid).values())
    except Exception:  # noqa: BLE001 - without the pids a graceful close is all there is
        ex.worker_pids = []
    return ex


def scheduler_executor(address: str, timeout: float = 5.0) -> DaskExecutor:
    """An executor on an existing ``distributed`` scheduler; ExecutorUnavailable if it does not answer.

    The scheduler must answer an identity request within ``timeout``
    seconds before a client is made: a server that accepts connections and
    never answers (or is not a Dask scheduler) would otherwise hang the
    client's handshake for good.
    """
    import asyncio

    from distributed import Client

    try:
        asyncio.run(asyncio.wait_for(_ping_scheduler(address, timeout), timeout))
    except (asyncio.TimeoutError, TimeoutError):
        raise ExecutorUnavailable(f"the Dask scheduler at {address!r} did not answer within {timeout:.0f} s "
                                  f"(is it a Dask scheduler, and is it running?)") from None
    except Exception as e:  # noqa: BLE001 - bad scheme (ValueError), refused (OSError) ...
        raise ExecutorUnavailable(f"cannot connect to the Dask scheduler at {address!r}: "
                                  f"{str(e) or type(e).__name__}") from None
    try:
        client = Client(address, timeout=timeout)
    except Exception as e:  # noqa: BLE001
        raise ExecutorUnavailable(f"cannot connect to the Dask scheduler at {address!r}: "
                                  f"{str(e) or type(e).__name__}") from None
    quicker_round_trips(client)
    return DaskExecutor(client, None, f"scheduler {address}")


# Dask batches each stream's messages, sending at most once per interval: 10 ms from a client to the scheduler,
# 5 ms from the scheduler to each worker.  A build's chain sends a message (releasing the answer it just
# read) and, a few milliseconds later, the next step, which then waited for the interval: a no-op task's
# submit-to-answer took 10.6 ms median against 6.1 ms with both at 2 ms (60 in a row on a 1-worker local
# cluster).  large_matmul's chain waits for ~24 such hand-offs.
ROUND_TRIP_INTERVAL = 0.002


def quicker_round_trips(client, scheduler=None) -> None:
    """Shorter batching intervals on the streams of a client this build owns (and its local scheduler's streams
    to the workers already connected); where Dask has no such attribute, nothing changes."""
    streams = [getattr(client, "scheduler_comm", None),
               *(getattr(scheduler, "stream_comms", {}) or {}).values()]
    for stream in streams:
        if stream is not None and isinstance(getattr(stream, "interval", None), (int, float)):
            stream.interval = min(stream.interval, ROUND_TRIP_INTERVAL)


async def _ping_scheduler(address: str, timeout: float) -> None:
    from distributed.comm import connect

    comm = await connect(address, timeout=timeout)
    try:
        await comm.write({"op": "identity", "reply": True})
        answer = await comm.read()
        if not isinstance(answer, dict) or "type" not in answer:
            raise OSError(f"the server at {address} answered, but not as a Dask scheduler")
    finally:
        comm.abort()


def check_workers_reach_store(executor: DaskExecutor, store, timeout: float = 30.0) -> None:
    """Every worker of the cluster reads a probe the client wrote into the store and writes one back;
    ExecutorUnavailable, naming the worker, if any cannot (it would fail every task it gets)."""
    import concurrent.futures
    import hashlib
    import uuid

    token = uuid.uuid4().hex
    store.put_note("probe", token, {"token": token})
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        job = pool.submit(executor.client.run, tasks.probe_store, store.url, token)
        try:
            answers = job.result(timeout=timeout)
        except concurrent.futures.TimeoutError:
            raise ExecutorUnavailable(f"the Dask workers did not answer a store probe within {timeout:.0f} s") from None
        except Exception as e:  # noqa: BLE001
            raise ExecutorUnavailable(f"probing the Dask workers failed: {type(e).__name__}: {e}") from None
    if not answers:
        raise ExecutorUnavailable(f"the Dask scheduler at {executor.client.scheduler.address} has no workers")
    bad = []
    for address, res in sorted(answers.items()):
        if not res.get("ok"):
            bad.append(f"worker {address}: {res.get('why')}")
        elif store.get_note("probe", hashlib.sha256(f"{token}:{res['worker']}".encode()).hexdigest()) is None:
            bad.append(f"worker {address}: what it writes into the store does not reach this client")
    if bad:
        raise ExecutorUnavailable(
            f"not every Dask worker can use the store {store.url}: " + "; ".join(bad) + ". Give all workers the "
            "same store: a path on a file system every machine mounts at the same place, or an fsspec URL "
            "(--cache-dir s3://bucket/tusk-cache); see the README's \"Builds across machines\"")


def client_executor(client) -> DaskExecutor:
    """An executor on a client the caller owns (it is not closed by the build)."""
    ex = DaskExecutor(client, None, f"client of {client.scheduler.address}")
    ex.owns_client = False
    return ex
