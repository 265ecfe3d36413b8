"""Makespans and engine timelines: build steps of their own, keyed by content like passes.

A pass does its job and nothing else; what the summary and the report say
about a kernel's speed is measured here, once per kernel:

* **which modules** (:func:`phases`): the module before the first rotation
  pass ("before rotation") and the final one ("after rotation"); a pipeline
  without rotation has only the final one (timeline only: the summary's
  makespan columns are about rotation);
* **what**: the timing model (``tusk.sim.timing``) on the module with its
  dependences rebuilt by ``build_fdeps`` (as the backend would), giving the
  module's makespan in cycles (the summary's ``makespan`` / ``rotated``
  columns), what binds it and how busy each engine is
  (``tusk.sim.explain.explain_makespan``: the lower bound, its binding
  resource, utilisation per engine, queue and shared DMA resource, in
  cycles; in stats.json and ``--json``) and, when the report is written, each kernel function's engine
  timeline (``tusk.workflows.trace.engine_timeline``);
* **where**: a ``timing-<kernel>`` task on a worker, submitted as soon as the
  module's hash is known -- in parallel with the unit's later passes and
  with other kernels;
* **cache**: two store notes keyed by the module's content hash and the code
  that measures it (every source file of tusk.ir, tusk.stages, tusk.sim and
  the timeline module): ``makespan`` (a few bytes of JSON), ``makespan-explain`` (what binds it) and
  ``engine-timeline`` (the timelines, with their trace events rendered by the step:
  ``trace.stored_timeline``).  No pickle.  A rebuild finds them
  and runs nothing; the report only reads them, it never recomputes.

Modules above the timeline limit (setting ``timeline_limit``) are not timed
at all; the client decides that from the step records' instruction counts,
without loading anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

# 2: explain_makespan's record beside the makespan; 3: timeline notes hold rendered trace events; 4: the
# events in a note of their own
TIMING_FORMAT = 4
MAKESPAN_NOTE = "makespan"
EXPLAIN_NOTE = "makespan-explain"  # explain_makespan's record, beside the few bytes of the makespan note
TIMELINE_NOTE = "engine-timeline"  # the kind earlier builds used for their report timelines
# the rendered trace events of each timeline of the note above, apart: the report reads only what it draws
# (~13 KB a timeline; with the events ~2 MB, and reading 16 of them was 0.13 s of an 8-kernel build's tail)
EVENTS_NOTE = "engine-timeline-events"

# what a build measures: nothing, makespans for the summary, or makespans and timelines for the report
NONE, MAKESPANS, TIMELINES = "none", "makespans", "timelines"


@dataclass(frozen=True)
class PhaseSpec:
    """A module of the chain worth timing: the input of step ``index`` (len(steps): the final module)."""

    title: str
    index: int
    summary: str | None  # "makespan_before" | "makespan_after" | None (report only)


def phases(step_names: list[str], rotation_passes: frozenset[str], what: str) -> list[PhaseSpec]:
    """The modules of a pipeline that are timed when a build measures ``what``."""
    if what == NONE:
        return []
    first = next((i for i, name in enumerate(step_names) if name in rotation_passes), None)
    n = len(step_names)
    if first is None:
        return [PhaseSpec("final (this pipeline does not rotate)", n, None)] if what == TIMELINES else []
    return [PhaseSpec("before rotation", first, "makespan_before"), PhaseSpec("after rotation", n, "makespan_after")]


@dataclass
class Timed:
    """What a unit's timing step found for one phase (kept in the unit's report)."""

    title: str
    hash: str
    summary: str | None = None
    makespan: float | None = None      # cycles of the module's entry function; None: not timed
    timelines: str | None = None       # the engine-timeline note key (None: not wanted or not timed)
    why: str = ""                      # why not timed
    status: str = ""                   # "cached" | "executed" | "skipped"
    seconds: float = 0.0
    explain: dict | None = None        # tusk.sim.explain.explain_makespan of the module (cycles); None: not timed

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


_CODE: dict[str, str] = {}


def code() -> str:
    """Digest of what a timing result depends on besides the module: the passes' code (the model and
    build_fdeps live in tusk.sim and tusk.stages) and the timeline module."""
    if "code" not in _CODE:
        import hashlib

        from tusk.cache.keys import package_digest
        from tusk.workflows import trace

        h = hashlib.sha256(f"tusk-timing-{TIMING_FORMAT}:{package_digest()}".encode())
        h.update(Path(trace.__file__).read_bytes())
        _CODE["code"] = h.hexdigest()
    return _CODE["code"]


def note_key(module_hash: str) -> str:
    from tusk.cache.keys import digest

    return digest({"timing": TIMING_FORMAT, "module": module_hash, "code": code()})


def lookup(store, module_hash: str, timelines: bool) -> dict | None:
    """The stored result for ``module_hash`` (makespan, and the timeline note key when asked), or None."""
    key = note_key(module_hash)
    note = store.get_note(MAKESPAN_NOTE, key)
    if not isinstance(note, dict) or note.get("format") != TIMING_FORMAT:
        return None
    if timelines and not note.get("timelines"):
        return None
    if timelines and (store.get_note(TIMELINE_NOTE, key) is None or store.get_note(EVENTS_NOTE, key) is None):
        return None
    explain = store.get_note(EXPLAIN_NOTE, key)
    return {**note, "explain": explain if isinstance(explain, dict) else None}


def makespan_of(module) -> float | None:
    """The module's makespan on the timing model with its dependences rebuilt (what the summary shows)."""
    from tusk.sim.timing import makespan
    from tusk.stages.build_fdeps import BuildFDeps

    return makespan(BuildFDeps().run(module)[0])


def measure(store, module_hash: str, module, timelines: bool, limit: int | None = None) -> dict:
    """Time ``module`` (content hash ``module_hash``; the body of the timing task): store the notes, return
    the makespan note.  ``limit``: the build's ``timeline_limit``."""
    from tusk.workflows.trace import _model, engine_timeline, kernel_functions, stored_timeline

    if _model() is None:
        note: dict[str, Any] = {"format": TIMING_FORMAT, "makespan": None, "why": "this Tusk has no timing model",
                                "timelines": False}
        store.put_note(MAKESPAN_NOTE, note_key(module_hash), note)
        return note
    from tusk.sim.explain import explain_makespan
    from tusk.stages.build_fdeps import BuildFDeps

    timed = BuildFDeps().run(module)[0]  # the model follows dependence edges: rebuilt, as the backend would
    # one run of the model: the entry's timeline holds its kernels' (a second run per kernel for the timelines
    # was a third of a build of the large_matmul variants)
    whole, why = _simulated(timed)
    lines = [engine_timeline(fn, timed, timeline=_kernel_timeline(timed, whole, fn), limit=limit)
             for fn in kernel_functions(timed)] if timelines else []
    if not timed.functions:
        explain: dict = {"ok": False, "why": "no functions"}
    elif whole is None:
        explain = {"ok": False, "function": _entry_name(timed), "why": why}
    else:
        explain = explain_makespan(timed, timeline=whole)
    span = None if whole is None else whole.makespan
    note = {"format": TIMING_FORMAT, "makespan": None if span is None else float(span),
            "why": "" if span is not None else "the timing model cannot time it (loops kept?)",
            "timelines": bool(timelines), "instructions": module.n_insts()}
    key = note_key(module_hash)
    if explain.get("ok"):
        store.put_note(EXPLAIN_NOTE, key, explain)
    if timelines:
        stored = [stored_timeline(tl) for tl in lines]
        store.put_note(EVENTS_NOTE, key, {"format": TIMING_FORMAT,
                                          "events": [tl.pop("events_zstd", None) for tl in stored]})
        store.put_note(TIMELINE_NOTE, key, {"format": TIMING_FORMAT, "timelines": stored})
    store.put_note(MAKESPAN_NOTE, key, note)  # last: a makespan note that promises timelines has them
    return {**note, "explain": explain if explain.get("ok") else None}


def _simulated(module):
    """(the timing model's timeline of the module's entry, "") or (None, why it cannot be timed)."""
    from tusk.ir.errors import TuskError
    from tusk.sim.timing import simulate

    try:
        return simulate(module), ""
    except TuskError as e:
        return None, str(e)


def _entry_name(module) -> str:
    from tusk.sim.timing import entry

    return entry(module).name


def _kernel_timeline(module, whole, fn):
    """``simulate(fn)`` taken from the entry's timeline ``whole`` (the entry itself, or a kernel it calls),
    or None when it holds none: a function that calls kernels is timed alone, and refused, by the timeline."""
    from tusk.ir.enums import Op
    from tusk.sim.timing import entry

    if whole is None:
        return None
    main = entry(module)
    if fn is main:
        tl = whole
    else:
        rows = (main.insts["opcode"] == Op.NKIKernel).nonzero()[0].tolist()
        tl = next((whole.calls[r] for r in rows if r in whole.calls and main.inst(r).attrs.get("func") == fn.name),
                  None)
    return tl if tl is not None and not tl.calls else None


def timed_from(spec: PhaseSpec, module_hash: str, note: dict, status: str, seconds: float = 0.0) -> Timed:
    span = note.get("makespan")
    explain = note.get("explain")
    return Timed(spec.title, module_hash, spec.summary, float(span) if isinstance(span, (int, float)) else None,
                 note_key(module_hash) if note.get("timelines") else None, str(note.get("why") or ""), status, seconds,
                 explain if isinstance(explain, dict) else None)


def load_phase(store, unit: str, t: Timed, events: bool = False):
    """The report's view of one timed phase: its timelines from the store, or why there are none; with
    ``events``, each timeline also has its rendered trace events (``events_zstd``, for timeline.json)."""
    from tusk.workflows.trace import Phase

    ph = Phase(unit, t.title, t.hash)
    if t.timelines is None:
        ph.note = t.why or "not timed"
        return ph
    try:
        data = store.get_note(TIMELINE_NOTE, t.timelines)
    except Exception:  # noqa: BLE001 - a damaged note costs the picture, not the report
        data = None
    lines = list(data.get("timelines") or []) if isinstance(data, dict) else None
    if events and lines is not None:
        try:
            rendered = store.get_note(EVENTS_NOTE, t.timelines)
        except Exception:  # noqa: BLE001
            rendered = None
        rendered = rendered.get("events") if isinstance(rendered, dict) else None
        if not isinstance(rendered, list) or len(rendered) != len(lines):
            lines = None
        else:
            lines = [{**tl, "events_zstd": ev} if isinstance(ev, str) else tl for tl, ev in zip(lines, rendered)]
    if lines is None:
        ph.note = f"the timelines of module {t.hash[:12]} are not in the cache any more"
        return ph
    ph.timelines = lines
    return ph
