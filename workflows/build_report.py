"""What a build reports: its units, each step's result, the whole build's report, and the events a build
emits while it runs (:class:`tusk.workflows.graph.Build`; the CLI's progress lines, the report and the trace
listen to them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:  # types only: reading a report needs neither numpy nor the timing model
    from tusk.ir.module import Module
    from tusk.workflows import timings

# ====================================================================== data


@dataclass
class BuildUnit:
    """One compilation: a host module (one kernel, one logical core) through the pipeline."""

    name: str                       # unique in a build: "kernel" or "kernel[core]"
    module: Module | None           # the host module (None when only its hash is known)
    host_hash: str | None = None
    files: dict[str, str] = field(default_factory=dict)  # path -> sha256 of files the kernel reads
    kernel: str = ""                # output directory name
    core: int | None = None
    source: str = ""                # the kernel file (for messages)
    data: dict[str, Any] = field(default_factory=dict)   # free use by the caller
    reload: Callable[[], Module] | None = None          # rebuilds the host module if the store lost it
    where: dict[str, str] = field(default_factory=dict)  # artifact_dir, kernel_dir: bound at run time, not keyed
    size: int = 0                   # instructions after unrolling (estimate): sizes the executor


@dataclass
class StepResult:
    label: str
    name: str
    status: str                     # "cached" | "executed" | "failed"
    key: str = ""
    input: str = ""
    output: str = ""
    seconds: float = 0.0            # time the pass took when it ran (also for cached results)
    stats: dict[str, Any] = field(default_factory=dict)
    insts_in: int | None = None
    insts_out: int | None = None
    parts_total: int = 0
    parts_executed: int = 0
    reason: str = ""                # why it ran (executed steps)
    key_parts: dict[str, Any] = field(default_factory=dict)
    timing: dict[str, float] = field(default_factory=dict)  # executed: fetch, run, hash, store, handover (s)
    # a split step that ran: the split's own seconds and each part's (None: the part came from the cache);
    # ``seconds`` is their sum with the merge's
    split_seconds: float | None = None
    part_seconds: list[float | None] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass
class UnitReport:
    unit: BuildUnit
    steps: list[StepResult] = field(default_factory=list)
    final: str | None = None
    error: str | None = None
    seconds: float = 0.0
    repairs: int = 0
    outputs: dict[str, Any] = field(default_factory=dict)  # what writing the outputs reported
    fault: str = ""                 # on failure: "input" | "environment" | "internal" (tusk.ir.errors)
    traceback: str = ""             # of an internal error (written to the build's log, not the terminal)
    timings: list[timings.Timed] = field(default_factory=list)  # the timing steps' results (makespans, timelines)

    def makespan(self, summary: str) -> float | None:
        """``makespan_before`` / ``makespan_after`` from the unit's timing steps (None: not timed)."""
        return next((t.makespan for t in self.timings if t.summary == summary), None)

    @property
    def ok(self) -> bool:
        return self.error is None and self.final is not None

    @property
    def executed(self) -> list[str]:
        return [s.label for s in self.steps if s.status == "executed"]

    @property
    def cached(self) -> list[str]:
        return [s.label for s in self.steps if s.status == "cached"]


@dataclass
class BuildReport:
    units: list[UnitReport]
    cluster_started: bool = False
    executor: str = ""
    seconds: float = 0.0
    unavailable: list[tuple[str, str]] = field(default_factory=list)

    def unit(self, name: str) -> UnitReport:
        for u in self.units:
            if u.unit.name == name:
                return u
        raise KeyError(name)

    def executions(self) -> list[tuple[str, str]]:
        """(unit, step label) of every pass that really ran in this build."""
        return [(u.unit.name, s.label) for u in self.units for s in u.steps if s.status == "executed"]

    @property
    def n_executed(self) -> int:
        return len(self.executions())

    @property
    def n_cached(self) -> int:
        return sum(len(u.cached) for u in self.units)

    @property
    def failed(self) -> list[UnitReport]:
        return [u for u in self.units if not u.ok]


# ====================================================================== events


@dataclass(frozen=True)
class StepEvent:
    """A step of a unit was ``cached``, ``executed`` or ``failed``; or the unit is ``done`` (label "")."""

    status: str
    unit: UnitReport
    label: str


@dataclass(frozen=True)
class TaskSubmitted:
    """A task went to the executor; ``what`` names the work (a step label, ``"<label> part 3/8"``,
    ``"<label> (split)"``, ``"<label> (split ahead)"`` (``Pass.split_ahead``), ``"<label> (merge)"``, ``"write_bir_json"``, ``"timing (before rotation)"``)."""

    key: str
    unit: UnitReport
    what: str


@dataclass(frozen=True)
class TaskFinished:
    """A task's result came back (``result``: what the task returned, with its clocks)."""

    key: str
    unit: UnitReport
    what: str
    result: dict


@dataclass(frozen=True)
class ExecutorReady:
    """The executor (a cluster, or this process) was created for the steps that must run."""

    executor: Any


@dataclass(frozen=True)
class StartUp:
    """The executor is ready: starting it took ``started`` s, readying its processes ``ready`` s (imports,
    the code digest), ``workers``: worker -> {"seconds", "started" (wall clock), "pid"}.  Its own event:
    never charged to the first pass that runs on a worker."""

    executor: str
    started: float
    ready: float
    workers: dict[str, dict]


BuildEvent = StepEvent | TaskSubmitted | TaskFinished | ExecutorReady | StartUp
