"""Which of a build's tasks are running, as the executor says, not as a model guesses.

* **Dask** (a local cluster or ``--scheduler``): a worker plugin
  (:class:`TaskStates`) reports every task entering and leaving the
  worker's ``executing`` state as a Dask event on the topic ``tusk-tasks``;
  the client subscribes to it.  A task submitted but not executing is
  *queued* (at the scheduler, or waiting on a busy worker), whatever its
  age.  When the plugin is installed it also reports what already executes.
* **In this process** (``--workers 0``): the executor runs one task at a
  time; its ``next`` is wrapped to say which, before it runs it.
* Any other executor: nothing is known; the display says how many tasks are
  submitted, never which run.

:func:`observe` hooks an executor up to a callback
``on_state(key, state, worker, seconds_ago)`` (``state``: "executing" or
"done"); it returns a function that unhooks it.
"""

from __future__ import annotations

import functools
import time
from typing import Any, Callable

TOPIC = "tusk-tasks"
PLUGIN = "tusk-task-states"

@functools.cache
def _task_states_class() -> type:
    """The worker plugin class, made on first use: an in-process build never imports distributed (1-2 s)."""
    from distributed.diagnostics.plugin import WorkerPlugin

    class TaskStates(WorkerPlugin):
        """A Dask worker plugin: each task's entry into and exit from ``executing``, as an event."""

        name = PLUGIN

        def setup(self, worker) -> None:
            self.worker = worker
            try:
                running = [ts.key for ts in list(worker.state.executing)]
            except Exception:  # noqa: BLE001 - an older worker state layout: only later transitions are seen
                running = []
            for key in running:
                self._say(key, "executing")

        def transition(self, key, start, finish, **kwargs: Any) -> None:
            if finish == "executing":
                self._say(key, "executing")
            elif start == "executing":
                self._say(key, "done")

        def _say(self, key, state: str) -> None:
            try:
                self.worker.log_event(TOPIC, {"key": str(key), "state": state, "t": time.time(),
                                              "worker": str(self.worker.address)})
            except Exception:  # noqa: BLE001 - progress never costs a task
                pass

    TaskStates.__module__, TaskStates.__qualname__ = __name__, "TaskStates"  # pickled by reference: workers
    # find it through the module __getattr__ below
    return TaskStates


def __getattr__(name: str) -> Any:
    if name == "TaskStates":
        return _task_states_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


OnState = Callable[[str, str, str, float], None]


def observe(ex, on_state: OnState) -> Callable[[], None] | None:
    """Report the executor's task states to ``on_state``; None when this executor cannot say."""
    client = getattr(ex, "client", None)
    if client is not None and getattr(ex, "is_cluster", False):
        return _observe_dask(client, on_state)
    if hasattr(ex, "_queue") and hasattr(ex, "next"):
        return _observe_inline(ex, on_state)
    return None


def _observe_dask(client, on_state: OnState) -> Callable[[], None] | None:
    def handler(event) -> None:
        try:
            _stamp, msg = event
            ago = max(0.0, time.time() - float(msg.get("t", time.time())))
            on_state(str(msg["key"]), str(msg["state"]), str(msg.get("worker", "")), ago)
        except Exception:  # noqa: BLE001 - a malformed event is ignored
            pass

    try:
        client.subscribe_topic(TOPIC, handler)
        client.register_plugin(_task_states_class()(), name=PLUGIN)
    except Exception:  # noqa: BLE001 - then nothing is known about which task runs
        return None

    def stop() -> None:
        try:
            client.unsubscribe_topic(TOPIC)
        except Exception:  # noqa: BLE001
            pass
        try:
            client.unregister_worker_plugin(PLUGIN)
        except Exception:  # noqa: BLE001 - the cluster may be closed already
            pass

    return stop


def _observe_inline(ex, on_state: OnState) -> Callable[[], None]:
    run_next = ex.next

    def next_observed():
        key = str(ex._queue[0][0]) if ex._queue else ""
        if key:
            on_state(key, "executing", "this process", 0.0)
        try:
            return run_next()
        finally:
            if key:
                on_state(key, "done", "this process", 0.0)

    ex.next = next_observed

    def stop() -> None:
        ex.next = run_next

    return stop
