"""Timelines of a build: the engine timeline of each kernel (timing model) and the build's own.

* :func:`engine_timeline` runs the timing model (``tusk.sim.timing``) on a
  kernel function and returns its segments, one lane per engine and per
  DMA queue, with a detailed form (every instruction, up to
  ``DETAIL_LIMIT`` segments) and an overview for drawing (at most
  ``OVERVIEW_LIMIT``: neighbouring instructions on a lane are merged into
  one segment that counts them).  Results are kept in the store as notes
  by module hash and timing-model source, so a rebuild does not time the
  same module again.
* :func:`timeline_trace` and :func:`build_trace` write the Chrome
  trace-event format (``{"traceEvents": [...]}``, ``ph: "X"`` complete
  events, microseconds), which Perfetto (ui.perfetto.dev) and
  chrome://tracing open: ``OUT/<kernel>/timeline.json`` (before and after
  rotation, one process each, one thread per lane) and
  ``OUT/build-trace.json`` (one thread per worker, one event per task).

The timing model is being rewritten; this module reads it through
:func:`_model` only and degrades to "no timeline" (with the reason) when
the model is missing or refuses the function (loops kept, say).
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from tusk.workflows.compile import BuildEvents

TIMELINE_FORMAT = 1
NOTE_KIND = "engine-timeline"
DETAIL_LIMIT = 200_000    # segments written to timeline.json before neighbours are merged
OVERVIEW_LIMIT = 2_500    # segments drawn in report.html per timeline
UTILIZATION_BINS = 400    # time slices of the utilisation view of a timeline too large to draw
# instructions: larger functions are not timed for the report.  The model takes ~10 s per million
# instructions on the client, twice (before and after rotation): a 1.2M-instruction kernel's timelines cost
# ~25 s, more than its passes.  The setting timeline_limit (TUSK_TIMELINE_LIMIT) moves it.
TIME_LIMIT = 400_000


def _time_limit() -> int:
    from tusk.workflows import config

    try:
        return int(config.load().timeline_limit)
    except Exception:  # noqa: BLE001 - a bad value is reported where settings are checked; keep the default
        return TIME_LIMIT
DEFAULT_GHZ = 1.4


# ====================================================================== the build's tasks


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
        rec = self.tasks.get(key)
        if rec is None:
            return
        timing = result.get("timing") if isinstance(result.get("timing"), dict) else {}
        rec.status = str(result.get("status") or "")
        ran = rec.status in ("executed", "split") or rec.status == "error"
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

    def finished(self) -> list[TaskRecord]:
        return [t for t in self.tasks.values() if t.ended is not None]


def build_trace(log: TaskLog, result) -> dict[str, Any]:
    """The build's worker timeline in the Chrome trace-event format."""
    tasks = log.finished()
    t0 = min([t.submitted for t in tasks] + [log.t0])
    workers = sorted({t.worker for t in tasks})
    tid = {w: i + 1 for i, w in enumerate(workers)}
    events: list[dict] = [{"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "tusk compile"}}]
    for w, i in tid.items():
        events.append({"ph": "M", "pid": 1, "tid": i, "name": "thread_name", "args": {"name": w}})
        events.append({"ph": "M", "pid": 1, "tid": i, "name": "thread_sort_index", "args": {"sort_index": i}})
    for t in sorted(tasks, key=lambda t: (t.started or 0.0)):
        start = t.started if t.started is not None else t.ended
        events.append({"ph": "X", "pid": 1, "tid": tid[t.worker], "name": f"{t.unit}: {t.what}",
                       "cat": t.what.split(" ", 1)[0], "ts": round((start - t0) * 1e6, 1),
                       "dur": round(max(0.0, t.ended - start) * 1e6, 1),
                       "args": {"unit": t.unit, "status": t.status, "task": t.key,
                                "queued_s": round(max(0.0, start - t.submitted), 6),
                                **{f"{k}_s": v for k, v in t.timing.items()}}})
    other = {"tusk_trace": "build", "out": str(result.out), "executor": result.report.executor if result.report
             else "none", "seconds": result.seconds}
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}


# ====================================================================== engine timelines


def _model():
    """The timing model module, or None when this checkout has none."""
    try:
        from tusk.sim import timing
    except ImportError:
        return None
    return timing if hasattr(timing, "simulate") else None


def model_digest() -> str:
    """Changes when the timing model's source does (notes of an older model are not reused)."""
    timing = _model()
    h = hashlib.sha256(f"tusk-timeline-{TIMELINE_FORMAT}".encode())
    if timing is not None:
        try:
            h.update(Path(timing.__file__).read_bytes())
        except OSError:
            h.update(b"?")
    return h.hexdigest()


def kernel_functions(module) -> list:
    """The functions worth a timeline: those the entry calls (NKI kernels), else the entry itself."""
    from tusk.ir.enums import Op

    names = {fn.name for fn in module.functions}
    entry = next((fn for fn in module.functions if fn.name == "main"), module.functions[0] if module.functions
                 else None)
    if entry is None:
        return []
    called = []
    for i in (entry.insts["opcode"] == Op.NKIKernel).nonzero()[0].tolist():
        callee = entry.inst(i).attrs.get("func")
        if isinstance(callee, str) and callee in names and callee not in called:
            called.append(callee)
    return [module.function(n) for n in called] or [entry]


def engine_timeline(fn, module=None, timeline=None) -> dict[str, Any]:
    """The timing model's timeline of ``fn``: ``{"ok": True, lanes, makespan, detail, overview, ...}``,
    or ``{"ok": False, "why": ...}`` when it cannot be timed.  ``timeline``: ``simulate(fn)``'s result when
    the caller has it already (a kernel's, from its module's run), so the model does not run twice."""
    timing = _model()
    n = len(fn.insts)
    if timing is None:
        return {"ok": False, "function": fn.name, "why": "this Tusk has no timing model (tusk.sim.timing)"}
    limit = _time_limit()
    if n > limit:
        return {"ok": False, "function": fn.name, "why": f"{n:,} instructions: above the {limit:,} "
                                                         f"this report times (TUSK_TIMELINE_LIMIT)"}
    from tusk.ir.errors import TuskError

    try:
        tl = timing.simulate(fn) if timeline is None else timeline
        segs = _segments(fn, tl, timing)
    except TuskError as e:
        return {"ok": False, "function": fn.name, "why": str(e)}
    except Exception as e:  # noqa: BLE001 - the model is being rewritten: a crash costs the picture, not the build
        return {"ok": False, "function": fn.name, "why": f"the timing model failed: {type(e).__name__}: {e}"}
    lanes, lane, start, end, what = segs
    ghz = float(getattr(timing, "GHZ", DEFAULT_GHZ))
    busy = {name: float(v) for name, v in (getattr(tl, "busy", {}) or {}).items()}
    out = {"ok": True, "function": fn.name, "instructions": n, "makespan": float(tl.makespan), "ghz": ghz,
           "lower_bound": float(getattr(tl, "lower_bound", 0.0) or 0.0), "busy": busy,
           "bounds": {k: float(v) for k, v in (getattr(tl, "bounds", {}) or {}).items()}, "lanes": lanes}
    out["detail"] = _aggregate(lanes, lane, start, end, what, DETAIL_LIMIT)
    if len(lane) <= OVERVIEW_LIMIT:
        out["overview"] = out["detail"]
    else:  # too many to draw one by one: how busy each lane is, slice by slice
        out["overview"] = None
        out["utilization"] = utilization(len(lanes), lane, start, end, float(tl.makespan))
    return out


def utilization(n_lanes: int, lane, start, end, makespan: float, bins: int = UTILIZATION_BINS) -> dict[str, Any]:
    """Per lane, the busy fraction of each of ``bins`` equal time slices (a DMA queue: transfers in flight,
    so it can pass 1).  Exact: the busy time up to t is evaluated at every slice edge from sorted starts
    and ends."""
    import numpy as np

    span = makespan if makespan > 0 else float(end.max()) if len(end) else 1.0
    dt = span / bins
    edges = np.linspace(0.0, span, bins + 1)
    rows = []
    for k in range(n_lanes):
        sel = lane == k
        s = np.sort(start[sel])
        e = np.sort(end[sel])
        cs = np.concatenate([[0.0], np.cumsum(s)])
        ce = np.concatenate([[0.0], np.cumsum(e)])
        ns = np.searchsorted(s, edges, side="left")
        ne = np.searchsorted(e, edges, side="left")
        busy_to = ns * edges - cs[ns] - (ne * edges - ce[ne])  # busy time before each edge
        rows.append([round(float(x), 4) for x in (np.diff(busy_to) / dt).tolist()])
    return {"t0": 0.0, "dt": dt, "bins": bins, "lanes": rows}


def _segments(fn, tl, timing):
    """(lane names, lane per segment, start, end, label) from a Timeline.

    The rewritten model (it has ``plan``) starts a DMA on the engine that
    triggers it and moves the data on a hardware queue: the trigger is drawn
    on the engine, the transfer (waiting in its queue, then in flight) on
    the queue it names, else on the triggering engine's DMA queues.
    """
    import numpy as np

    from tusk.ir.enums import OPCODE_NAMES

    start = np.asarray(tl.start, dtype=np.float64)
    end = np.asarray(tl.end, dtype=np.float64)
    lane = np.asarray(tl.lane, dtype=np.int64)
    names = list(tl.lanes)
    opcodes = fn.insts["opcode"].astype(np.int64)
    label = np.asarray([OPCODE_NAMES[o] if 0 <= o < len(OPCODE_NAMES) else str(o) for o in range(len(OPCODE_NAMES))]
                       + ["?"], dtype=object)
    what = label[np.clip(opcodes, 0, len(OPCODE_NAMES))]
    idx = np.arange(len(start))
    if hasattr(timing, "plan") and len(start):
        p = getattr(tl, "plan", None) or timing.plan(fn)  # the model keeps the plan it ran on
        is_dma = np.asarray(p.is_dma, dtype=bool)
        queue = np.asarray(p.queue, dtype=np.int64)
        trig_end = np.minimum(start + np.asarray(p.cost, dtype=np.float64), end)
        plain = ~is_dma & (lane >= 0)
        d = np.flatnonzero(is_dma & (lane >= 0))
        qlane = queue[d].copy()
        for k in np.unique(lane[d][qlane < 0]).tolist():  # no named queue: the engine's queues
            qname = f"{names[k]} DMA queues"
            if qname not in names:
                names.append(qname)
            qlane[(qlane < 0) & (lane[d] == k)] = names.index(qname)
        seg_lane = np.concatenate([lane[plain], lane[d], qlane])
        seg_start = np.concatenate([start[plain], start[d], trig_end[d]])
        seg_end = np.concatenate([end[plain], trig_end[d], end[d]])
        seg_what = np.concatenate([what[plain], what[d] + " (trigger)", what[d]])
        seg_idx = np.concatenate([idx[plain], idx[d], idx[d]])
    else:
        keep = lane >= 0
        seg_lane, seg_start, seg_end, seg_what, seg_idx = lane[keep], start[keep], end[keep], what[keep], idx[keep]
    used_a, seg_lane = np.unique(seg_lane, return_inverse=True)  # lanes renumbered in order, the unused dropped
    used = used_a.tolist()
    seg_lane = seg_lane.reshape(-1).astype(np.int64)
    inst_names = None
    if len(seg_idx) <= DETAIL_LIMIT:
        all_names = fn.inst_names() if hasattr(fn, "inst_names") else [fn.inst_name(i) for i in range(len(fn.insts))]
        inst_names = np.asarray(all_names, dtype=object)[seg_idx] if len(seg_idx) else np.zeros(0, dtype=object)
    labels = seg_what if inst_names is None else np.asarray(
        [f"{a} {b}" for a, b in zip(inst_names.tolist(), seg_what.tolist())], dtype=object)
    return [names[k] for k in used], seg_lane, seg_start, seg_end, labels


def _aggregate(lanes: list[str], lane, start, end, labels, limit: int) -> dict[str, Any]:
    """Segments as columns ``lane, start, end, n, label``; past ``limit``, neighbours merged.

    Time is cut into slices (``limit / (2 * lanes)`` of them); on each lane a
    merged segment holds the instructions that start in one slice without a
    gap longer than a slice between them, so there are at most about
    ``limit`` segments and a busy stretch keeps its shape at that resolution.
    """
    import numpy as np

    order = np.lexsort((start, lane))
    lane, start, end, labels = lane[order], start[order], end[order], labels[order]
    total = len(lane)
    if total <= limit or total == 0:
        return {"lane": lane.tolist(), "start": _r(start), "end": _r(end), "n": [1] * total,
                "label": [str(x) for x in labels.tolist()], "merged": False}
    lo = float(start.min())
    span = float(end.max() - lo) or 1.0
    width = span / max(1, limit // (2 * max(1, len(lanes))))
    piece = np.floor((start - lo) / width).astype(np.int64)
    shift = lane * (2.0 * span + 2.0 * width)  # lanes apart: a running maximum never reaches into the next lane
    reach = np.maximum.accumulate(end - lo + shift)
    new = np.ones(total, dtype=bool)
    new[1:] = (lane[1:] != lane[:-1]) | (piece[1:] != piece[:-1]) | (start[1:] - lo + shift[1:] - reach[:-1] > width)
    first = np.flatnonzero(new)
    g_end = np.maximum.reduceat(end, first)
    g_start = start[first]
    count = np.diff(np.append(first, total))
    return {"lane": lane[first].tolist(), "start": _r(g_start), "end": _r(g_end), "n": count.tolist(),
            "label": [str(labels[f]) if c == 1 else f"{c} instructions" for f, c in zip(first.tolist(),
                                                                                      count.tolist())],
            "merged": True}


def _r(a) -> list[float]:
    import numpy as np

    return np.round(np.asarray(a, dtype=np.float64), 1).tolist()


@dataclass
class Phase:
    """One engine timeline of a unit: the module ``hash`` at ``title`` (before / after rotation)."""

    unit: str
    title: str
    hash: str
    timelines: list[dict[str, Any]] = field(default_factory=list)  # one per kernel function
    note: str = ""


def unit_phases(ur, store, rotation_passes: frozenset[str]) -> list[Phase]:
    """The modules to time for one unit: before the first rotation pass (its input) and the final one."""
    steps = [s for s in ur.steps if s.output]
    if not steps or ur.final is None:
        return []
    first_rot = next((i for i, s in enumerate(steps) if s.name in rotation_passes), None)
    if first_rot is None:
        return [Phase(ur.unit.name, "final (this pipeline does not rotate)", ur.final)]
    before = steps[first_rot - 1].output if first_rot > 0 else steps[0].input
    return [Phase(ur.unit.name, "before rotation", before), Phase(ur.unit.name, "after rotation", ur.final)]


def time_phase(phase: Phase, store, producer: str | None) -> None:
    """Fill ``phase.timelines`` (from the store's notes, else by running the model)."""
    from tusk.cache.keys import digest

    key = digest({"module": phase.hash, "model": model_digest()})
    note = None
    try:
        note = store.get_note(NOTE_KIND, key)
    except Exception:  # noqa: BLE001
        note = None
    if isinstance(note, dict) and note.get("format") == TIMELINE_FORMAT:
        phase.timelines = list(note.get("timelines") or [])
        return
    if _model() is None:
        phase.note = "this Tusk has no timing model (tusk.sim.timing): no engine timeline"
        return
    try:
        module = store.load(phase.hash)
    except Exception as e:  # noqa: BLE001 - gc'd or damaged: no picture, say why
        phase.note = f"module {phase.hash[:12]} is not in the cache any more ({type(e).__name__})"
        return
    if producer != "build_fdeps":  # the model follows dependence edges: rebuild them as the backend would
        try:
            from tusk.stages import make_pass

            module = make_pass("build_fdeps").run(module)[0]
        except Exception as e:  # noqa: BLE001
            phase.note = f"dependences could not be rebuilt for timing: {e}"
            return
    phase.timelines = [engine_timeline(fn, module) for fn in kernel_functions(module)]
    try:
        store.put_note(NOTE_KIND, key, {"format": TIMELINE_FORMAT, "timelines": phase.timelines})
    except Exception:  # noqa: BLE001
        pass


def _ts_dur(detail: dict, us: float) -> tuple[list[float], list[float]]:
    """Start and duration of each segment in microseconds, rounded to 4 places (one numpy pass)."""
    import numpy as np

    start = np.asarray(detail["start"], dtype=np.float64)
    end = np.asarray(detail["end"], dtype=np.float64)
    return np.round(start * us, 4).tolist(), np.round((end - start) * us, 4).tolist()


def _counter_ts(u: dict, us: float) -> list[float]:
    return [round((u["t0"] + b * u["dt"]) * us, 4) for b in range(u["bins"])]


PID_MARK = '"pid":0,'  # the process of a rendered timeline until its kernel's file numbers it
# a segment: cycles, instruction count, the lane's category + "dur" key, duration, name, the lane's thread + "ts"
# key, time (timeline_events)
_X_EVENT = '{"args":{"cycles":[%s,%s],"instructions":%s%s%s,"name":%s%s%s}'



def timeline_events(tl: dict[str, Any]) -> str:
    """The segment ("X") and utilisation ("C") events of one timed function as JSON text, exactly as
    ``json.dumps(..., sort_keys=True, separators=(",", ":"))`` writes :func:`timeline_trace`'s events, with
    process id 0 (:data:`PID_MARK`; :func:`timeline_json` numbers them).  Rendered by the timing step, on a
    worker: the client only joins texts."""
    from json.encoder import encode_basestring_ascii as js  # type: ignore[attr-defined]

    us = 1.0 / (tl["ghz"] * 1000.0)
    d = tl["detail"]
    ts, dur = _ts_dur(d, us)
    lane = d["lane"]
    # C-level passes: every field comes as a column of text (repr is a Python float's JSON spelling); what
    # depends only on the lane (its category and thread) is one text per lane, looked up per segment
    cat = [f'}},"cat":{js(name)},"dur":' for name in tl["lanes"]]
    tid = [f',"ph":"X","pid":0,"tid":{k + 1},"ts":' for k in range(len(tl["lanes"]))]
    parts = list(map(_X_EVENT.__mod__, zip(map(repr, d["start"]), map(repr, d["end"]), map(str, d["n"]),
                                            map(cat.__getitem__, lane), map(repr, dur), map(js, d["label"]),
                                            map(tid.__getitem__, lane), map(repr, ts))))
    u = tl.get("utilization")
    if u:
        when = _counter_ts(u, us)
        for ln, row in enumerate(u["lanes"]):
            name = js(f"{tl['lanes'][ln]} busy")
            parts.extend(f'{{"args":{{"busy":{x!r}}},"name":{name},"ph":"C","pid":0,"ts":{t!r}}}'
                         for x, t in zip(row, when))
    return ",".join(parts)


def stored_timeline(tl: dict[str, Any]) -> dict[str, Any]:
    """What the store keeps of a timeline: the report's part (overview or utilisation, figures) and the
    trace events already rendered instead of the per-segment columns, as Zstandard (level 1) + base64
    (``events_zstd``): JSON-encoding, checksumming and decoding millions of escaped quotes took 0.5 s a note;
    this 0.05 s to write and 0.02 s to read back (11 MB of events -> 1.1 MB; zlib took 0.14 / 0.08 s)."""
    import base64

    from numcodecs import Zstd

    if not tl.get("ok") or "detail" not in tl:
        return tl
    out = {k: v for k, v in tl.items() if k != "detail"}
    out["events_zstd"] = base64.b64encode(Zstd(1).encode(timeline_events(tl).encode("utf-8"))).decode("ascii")
    return out


def _event_bytes(tl: dict[str, Any]) -> bytes:
    """The rendered events of a timeline as UTF-8 bytes: as stored (:func:`stored_timeline`, straight from
    the compressed text), else rendered now."""
    import base64

    if "events_zstd" in tl:
        from numcodecs import Zstd

        return bytes(Zstd().decode(base64.b64decode(tl["events_zstd"])))
    return timeline_events(tl).encode("utf-8")


def _meta_events(pid: int, name: str, lanes: list[str]) -> list[dict]:
    events: list[dict] = [{"ph": "M", "pid": pid, "name": "process_name", "args": {"name": name}},
                          {"ph": "M", "pid": pid, "name": "process_sort_index", "args": {"sort_index": pid}}]
    for t, lane in enumerate(lanes):
        events.append({"ph": "M", "pid": pid, "tid": t + 1, "name": "thread_name", "args": {"name": lane}})
        events.append({"ph": "M", "pid": pid, "tid": t + 1, "name": "thread_sort_index",
                       "args": {"sort_index": t + 1}})
    return events


def _processes(phases: list[Phase]):
    """(process id, timeline, its metadata events) of every timed function, numbered 1, 2, ... in order."""
    pid = 0
    for ph in phases:
        for tl in ph.timelines:
            if tl.get("ok"):
                pid += 1
                yield pid, tl, _meta_events(pid, f"{ph.unit} {tl['function']}: {ph.title}", tl["lanes"])


def _other(kernel: str, phases: list[Phase]) -> dict[str, Any]:
    return {"tusk_trace": "engine-timeline", "kernel": kernel, "time_unit": "microseconds at the model's clock",
            "phases": [{"unit": p.unit, "title": p.title, "module": p.hash, "note": p.note,
                        "functions": [{k: tl.get(k) for k in ("function", "ok", "why", "makespan",
                                                              "instructions", "lower_bound", "busy")}
                                      for tl in p.timelines]} for p in phases]}


def timeline_json(kernel: str, phases: list[Phase], extra: dict[str, Any] | None = None) -> str:
    """``OUT/<kernel>/timeline.json``: the text of ``json.dumps(timeline_trace(...), sort_keys=True,
    separators=(",", ":"))`` (``extra`` added to its ``otherData``), made by joining the events each timing
    step rendered (:func:`stored_timeline`) instead of building and encoding a dict per segment."""
    return b"".join(timeline_chunks(kernel, phases, extra)).decode("utf-8")


def timeline_chunks(kernel: str, phases: list[Phase], extra: dict[str, Any] | None = None) -> Iterator[bytes]:
    """The bytes of :func:`timeline_json` in pieces, for writing them as they come: the events stay the bytes
    the store's notes decompress to (a kernel's 30 MB are not decoded, joined and encoded again)."""
    import json

    def dumps(x: Any) -> bytes:
        return json.dumps(x, sort_keys=True, separators=(",", ":")).encode("utf-8")

    other = {**(extra or {}), **_other(kernel, phases)}
    yield b'{"displayTimeUnit":"ns","otherData":' + dumps(other) + b',"traceEvents":['
    first = True
    mark = PID_MARK.encode("ascii")
    for pid, tl, meta in _processes(phases):
        texts = [dumps(e) for e in meta]
        events = _event_bytes(tl)
        if events:
            texts.append(events.replace(mark, b'"pid":%d,' % pid))
        for text in texts:
            if not first:
                yield b","
            yield text
            first = False
    yield b"]}"


TIMELINE_FILE = "timeline.json"  # OUT/<kernel>/timeline.json


def timeline_signature(phases: list[Phase]) -> str:
    """What a kernel's timeline.json is made of (its modules and the model); its head names it, so a build
    that finds the same signature there leaves the file alone."""
    from tusk.cache.keys import digest

    return digest({"phases": [[p.unit, p.title, p.hash] for p in phases], "model": model_digest()})


def write_kernel_timeline(path: Path, kernel: str, phases: list[Phase]) -> None:
    """The one writer of a kernel's timeline.json (a build task into the kernel's staging directory, or the
    report when no task did), atomically."""
    from tusk.workflows.outputs import write_atomic

    write_atomic(path, timeline_chunks(kernel, phases, {"_signature": timeline_signature(phases)}))


def timeline_trace(kernel: str, phases: list[Phase]) -> dict[str, Any]:
    """A kernel's engine timelines (every unit and phase) in the Chrome trace-event format (the reference
    form of :func:`timeline_json`; needs the timelines' ``detail``)."""
    events: list[dict] = []
    for pid, tl, meta in _processes(phases):
        us = 1.0 / (tl["ghz"] * 1000.0)  # cycles -> microseconds
        events.extend(meta)
        d = tl["detail"]
        ts, dur = _ts_dur(d, us)
        for ln, s, e, n, label, t, du in zip(d["lane"], d["start"], d["end"], d["n"], d["label"], ts, dur):
            events.append({"ph": "X", "pid": pid, "tid": ln + 1, "name": label,
                           "cat": tl["lanes"][ln], "ts": t, "dur": du,
                           "args": {"cycles": [s, e], "instructions": n}})
        u = tl.get("utilization")
        if u:  # merged segments hide how busy a lane is: a counter track per lane says it
            when = _counter_ts(u, us)
            for ln, row in enumerate(u["lanes"]):
                for x, t in zip(row, when):
                    events.append({"ph": "C", "pid": pid, "name": f"{tl['lanes'][ln]} busy",
                                   "ts": t, "args": {"busy": x}})
    return {"traceEvents": events, "displayTimeUnit": "ns", "otherData": _other(kernel, phases)}
