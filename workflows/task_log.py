"""The build's own timeline: every task as it was submitted and finished, and ``OUT/build-trace.json``.

:class:`TaskLog` listens to the build's task events (a :class:`BuildEvents`); :func:`build_trace` writes them
in the Chrome trace-event format (one thread per worker, one complete event per task, with its wall split and
what it cost its thread: :mod:`tusk.workflows.task_usage`), which Perfetto and chrome://tracing open.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from tusk.workflows.compile import BuildEvents


@dataclass
class TaskRecord:
    key: str
    unit: str
    what: str
    submitted: float                 # wall clock (time.time())
    started: float | None = None     # as the task reported it
    ended: float | None = None
    worker: str = ""
    status: str = ""
    timing: dict[str, Any] = field(default_factory=dict)
    usage: dict[str, Any] = field(default_factory=dict)  # CPU seconds and page faults (task_usage.measured)


class TaskLog(BuildEvents):
    """Every task of the build as it was submitted and finished (build-trace.json, the report)."""

    def __init__(self) -> None:
        self.tasks: dict[str, TaskRecord] = {}
        self.t0 = time.time()
        self._worker: dict[str, str] = {}  # unit -> the worker its last task ran on

    def task(self, event: str, key: str, unit, what: str, result: dict) -> None:
        now = time.time()
        if event == "submitted":
            self.tasks[key] = TaskRecord(key, unit.unit.name, what, now)
            return
        if result.get("status") == "discarded":  # taken back before it ran (a dropped split ahead's part)
            self.tasks.pop(key, None)
            return
        rec = self.tasks.get(key)
        if rec is None:
            return
        got = result.get("timing")
        timing: dict[str, Any] = got if isinstance(got, dict) else {}
        rec.status = str(result.get("status") or "")
        ran = rec.status in ("executed", "split", "whole", "error", "written", "part-rendered", "part-placed",
                             "checked")
        started = timing.get("started") if ran else None
        rec.started = float(started) if isinstance(started, (int, float)) else None
        ended = result.get("ended")
        rec.ended = float(ended) if isinstance(ended, (int, float)) else now
        if rec.started is None and rec.status == "written":
            rec.started = rec.submitted  # writing reports no clock of its own: from submission (an upper bound)
        if rec.started is None or rec.started > rec.ended:
            rec.started = rec.ended
        worker = result.get("worker_address")
        if worker:
            self._worker[rec.unit] = str(worker)
        # a task that does not say where it ran (writing the outputs) was placed with the unit's last task
        rec.worker = str(worker or self._worker.get(rec.unit) or "this process")
        rec.timing = {k: v for k, v in timing.items() if k != "started" and isinstance(v, (int, float))}
        usage = result.get("usage")
        rec.usage = {k: v for k, v in usage.items() if isinstance(v, (int, float))} if isinstance(usage, dict) else {}

    def ended_tasks(self) -> list[TaskRecord]:
        """The tasks that finished (a name of its own: ``finished`` is the build's end, a BuildEvents event)."""
        return [t for t in self.tasks.values() if t.ended is not None]


def build_trace(log: TaskLog, result) -> dict[str, Any]:
    """The build's worker timeline in the Chrome trace-event format."""
    tasks = log.ended_tasks()
    t0 = min([t.submitted for t in tasks] + [log.t0])
    workers = sorted({t.worker for t in tasks})
    tid = {w: i + 1 for i, w in enumerate(workers)}
    events: list[dict] = [{"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "tusk compile"}}]
    for w, i in tid.items():
        events.append({"ph": "M", "pid": 1, "tid": i, "name": "thread_name", "args": {"name": w}})
        events.append({"ph": "M", "pid": 1, "tid": i, "name": "thread_sort_index", "args": {"sort_index": i}})
    for t in sorted(tasks, key=lambda t: (t.started or 0.0)):
        end = t.ended if t.ended is not None else t.submitted  # ended_tasks: never None
        start = t.started if t.started is not None else end
        events.append({"ph": "X", "pid": 1, "tid": tid[t.worker], "name": f"{t.unit}: {t.what}",
                       "cat": t.what.split(" ", 1)[0], "ts": round((start - t0) * 1e6, 1),
                       "dur": round(max(0.0, end - start) * 1e6, 1),
                       "args": {"unit": t.unit, "status": t.status, "task": t.key,
                                "queued_s": round(max(0.0, start - t.submitted), 6),
                                **{f"{k}_s": v for k, v in t.timing.items()}, **t.usage}})
    other = {"tusk_trace": "build", "out": str(result.out), "executor": result.report.executor if result.report
             else "none", "seconds": result.seconds}
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}
