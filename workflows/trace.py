"""Timelines of a build: the engine timeline of each kernel (timing model) and the build's own.

* :func:`engine_timeline` runs the timing model (``tusk.sim.timing``) on a
  kernel function and returns its segments, one lane per engine and per
  DMA queue, with a detailed form (every instruction, up to
  ``DETAIL_LIMIT`` segments) and an overview for drawing (at most
  ``OVERVIEW_LIMIT``: neighbouring instructions on a lane are merged into
  one segment that counts them).  Results are kept in the store as notes
  by module hash and timing-model source, so a rebuild does not time the
  same module again.
* :func:`timeline_trace` writes the Chrome trace-event format
  (``{"traceEvents": [...]}``, ``ph: "X"`` complete events, microseconds),
  which Perfetto (ui.perfetto.dev) and chrome://tracing open:
  ``OUT/<kernel>/timeline.json`` (before and after rotation, one process
  each, one thread per lane).  The build's own timeline,
  ``OUT/build-trace.json``, is :mod:`tusk.workflows.task_log`'s.

The timing model is being rewritten; this module reads it through
:func:`_model` only and degrades to "no timeline" (with the reason) when
the model is missing or refuses the function (loops kept, say).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

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


def engine_timeline(fn, module=None, timeline=None, limit: int | None = None) -> dict[str, Any]:
    """The timing model's timeline of ``fn``: ``{"ok": True, lanes, makespan, detail, overview, ...}``,
    or ``{"ok": False, "why": ...}`` when it cannot be timed.  ``timeline``: ``simulate(fn)``'s result when
    the caller has it already (a kernel's, from its module's run), so the model does not run twice.
    ``limit``: the build's ``timeline_limit`` (default: the environment's)."""
    timing = _model()
    n = len(fn.insts)
    if timing is None:
        return {"ok": False, "function": fn.name, "why": "this Tusk has no timing model (tusk.sim.timing)"}
    limit = _time_limit() if limit is None else limit
    if n > limit:
        return {"ok": False, "function": fn.name, "why": f"{n:,} instructions: above the {limit:,} "
                                                         f"this report times (setting timeline_limit)"}
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

    ts, dur = _us(np.asarray(detail["start"], dtype=np.float64), np.asarray(detail["end"], dtype=np.float64), us)
    return ts.tolist(), dur.tolist()


def _us(start, end, us: float):
    """Start and duration arrays in microseconds, rounded to 4 places: the numbers every form writes."""
    import numpy as np

    return np.round(start * us, 4), np.round((end - start) * us, 4)


def _counter_ts(u: dict, us: float) -> list[float]:
    return [round((u["t0"] + b * u["dt"]) * us, 4) for b in range(u["bins"])]


PID_MARK = '"pid":0,'  # the process of a rendered timeline until its kernel's file numbers it
# a segment: cycles, instruction count, the lane's category + "dur" key, duration, name, the lane's thread + "ts"
# key, time (the per-event form of timeline_events, for timelines the column form does not take)
_X_EVENT = '{"args":{"cycles":[%s,%s],"instructions":%s%s%s,"name":%s%s%s}'
_X_CHUNK = 8192          # segments rendered at once by the column form (its byte matrices stay ~2 MB)
_X_LABEL_WIDTH = 512     # a chunk with a longer escaped label is rendered per event (its matrix would be large)
_X_BELOW = 1e11          # the column form's numbers: 0 <= x < this (at most 15 significant digits, fixed notation)


def timeline_events(tl: dict[str, Any]) -> str:
    """The segment ("X") and utilisation ("C") events of one timed function as JSON text, exactly as
    ``json.dumps(..., sort_keys=True, separators=(",", ":"))`` writes :func:`timeline_trace`'s events, with
    process id 0 (:data:`PID_MARK`; :func:`timeline_json` numbers them).  Rendered by the timing step, on a
    worker: the client only joins texts."""
    return timeline_event_bytes(tl).decode("ascii")


def timeline_event_bytes(tl: dict[str, Any]) -> bytes:
    """:func:`timeline_events` as bytes (ASCII: JSON strings are written escaped)."""
    from json.encoder import encode_basestring_ascii as js  # type: ignore[attr-defined]

    us = 1.0 / (tl["ghz"] * 1000.0)
    segments = _x_event_bytes(tl, us)
    if segments is None:
        segments = _x_event_text(tl, us).encode("ascii")
    parts = [segments] if segments else []
    u = tl.get("utilization")
    if u:
        when = _counter_ts(u, us)
        for ln, row in enumerate(u["lanes"]):
            name = js(f"{tl['lanes'][ln]} busy")
            parts.append(",".join([f'{{"args":{{"busy":{x!r}}},"name":{name},"ph":"C","pid":0,"ts":{t!r}}}'
                                   for x, t in zip(row, when)]).encode("ascii"))
    return b",".join(p for p in parts if p)


def _x_event_text(tl: dict[str, Any], us: float) -> str:
    """The segment events one by one (any timeline: the reference form of :func:`_x_event_bytes`)."""
    from json.encoder import encode_basestring_ascii as js  # type: ignore[attr-defined]

    d = tl["detail"]
    ts, dur = _ts_dur(d, us)
    lane = d["lane"]
    # what depends only on the lane (its category and thread) is one text per lane, looked up per segment
    cat = [f'}},"cat":{js(name)},"dur":' for name in tl["lanes"]]
    tid = [f',"ph":"X","pid":0,"tid":{k + 1},"ts":' for k in range(len(tl["lanes"]))]
    return ",".join(map(_X_EVENT.__mod__, zip(map(repr, d["start"]), map(repr, d["end"]), map(str, d["n"]),
                                              map(cat.__getitem__, lane), map(repr, dur), map(js, d["label"]),
                                              map(tid.__getitem__, lane), map(repr, ts))))


def _x_event_bytes(tl: dict[str, Any], us: float) -> bytes | None:
    """The segment events of :func:`_x_event_text`, byte for byte, written a column at a time, or None when
    the timeline's numbers are not all of the form this writes (the caller renders them one by one).

    Each event is a row of a byte matrix: constant pieces, the lane's texts, the label's escaped bytes and
    each number's digits in fields of fixed width, padded with NUL bytes, which one ``bytes.translate``
    drops (no NUL is in the text: JSON strings escape it).  The numbers: a cycle count of the detail
    (rounded to 0.1 by the timeline) and a time in microseconds (rounded to 4 places) is the double nearest
    to k / 10 ** p for an integer k, so when 0 <= x < 1e11 its ``repr`` -- the shortest text that reads back
    as x -- is k's digits with the point p places from the right and the fraction's trailing zeros dropped
    (one digit kept); anything else (an int among the floats, a negative or huge number, nan) leaves the
    whole timeline to the per-event form."""
    from json.encoder import encode_basestring_ascii as js  # type: ignore[attr-defined]

    import numpy as np

    d = tl["detail"]
    n_seg = len(d["lane"])
    if n_seg == 0:
        return b""
    if not (set(map(type, d["start"])) == set(map(type, d["end"])) == {float}
            and set(map(type, d["n"])) == set(map(type, d["lane"])) == {int}):
        return None
    start = np.fromiter(d["start"], dtype=np.float64, count=n_seg)
    end = np.fromiter(d["end"], dtype=np.float64, count=n_seg)
    ts, dur = _us(start, end, us)
    try:
        count = np.fromiter(d["n"], dtype=np.int64, count=n_seg)
    except OverflowError:
        return None
    lane = np.fromiter(d["lane"], dtype=np.int64, count=n_seg)
    cols = [_scaled(start, 10), _scaled(end, 10), _scaled(ts, 10_000), _scaled(dur, 10_000)]
    if count.min() < 0 or any(c is None for c in cols):
        return None
    k_start, k_end, k_ts, k_dur = cols
    n_lanes = len(tl["lanes"])
    if lane.min() < -n_lanes or lane.max() >= n_lanes:
        raise IndexError("list index out of range")  # as the per-event form's lookup of the lane's texts
    cat = _text_table([f'}},"cat":{js(name)},"dur":' for name in tl["lanes"]])
    tid = _text_table([f',"ph":"X","pid":0,"tid":{k + 1},"ts":' for k in range(n_lanes)])
    labels = list(map(js, d["label"]))
    label_len = np.fromiter(map(len, labels), dtype=np.int64, count=n_seg)
    out = []
    layout: list[int] = []
    text = np.zeros((0, 0), dtype=np.uint8)
    for a in range(0, n_seg, _X_CHUNK):
        b = min(n_seg, a + _X_CHUNK)
        width = int(label_len[a:b].max())
        if width > _X_LABEL_WIDTH:  # one long label would make every row of the chunk as wide
            out.append((_x_event_text(_rows(tl, a, b), us) + ",").encode("ascii"))
            continue
        # a row: constant texts and fields: ("d", integers) their digits, ("f", k, p) the fraction k / 10 ** p,
        # ("t", table) the lane's text, ("s", width) the labels
        row: list[Any] = [b'{"args":{"cycles":[', ("d", k_start[a:b] // 10), b".", ("f", k_start[a:b] % 10, 1),
                          b",", ("d", k_end[a:b] // 10), b".", ("f", k_end[a:b] % 10, 1), b'],"instructions":',
                          ("d", count[a:b]), ("t", cat), ("d", k_dur[a:b] // 10_000), b".",
                          ("f", k_dur[a:b] % 10_000, 4), b',"name":', ("s", width), ("t", tid),
                          ("d", k_ts[a:b] // 10_000), b".", ("f", k_ts[a:b] % 10_000, 4), b"},"]
        widths = [len(f) if isinstance(f, bytes) else _field_width(f) for f in row]
        fresh = widths != layout or len(text) < b - a
        if fresh:  # a new layout: its constant texts are written once, the next chunks of the same reuse them
            layout = widths
            text = np.zeros((min(n_seg - a, _X_CHUNK), sum(widths)), dtype=np.uint8)
        rows = text[:b - a]
        ln = lane[a:b]
        o = 0
        for f, w in zip(row, widths):
            if isinstance(f, bytes):
                if fresh:
                    rows[:, o:o + w] = np.frombuffer(f, dtype=np.uint8)
            elif f[0] == "d":
                _put_digits(rows[:, o:o + w], f[1])
            elif f[0] == "f":
                _put_fraction(rows[:, o:o + w], f[1])
            elif f[0] == "t":
                rows[:, o:o + w] = f[1].take(ln, axis=0)
            else:
                rows[:, o:o + w] = np.array(labels[a:b], dtype=f"S{w}").view(np.uint8).reshape(b - a, w)
            o += w
        out.append(rows.tobytes().translate(None, b"\0"))
    out[-1] = out[-1][:-1]  # the last event's comma
    return b"".join(out)


def _rows(tl: dict[str, Any], a: int, b: int) -> dict[str, Any]:
    d = tl["detail"]
    return {"lanes": tl["lanes"], "detail": {k: d[k][a:b] for k in ("lane", "start", "end", "n", "label")}}


def _field_width(f) -> int:
    if f[0] == "d":
        return len(str(int(f[1].max())))
    if f[0] == "f":
        return f[2]
    if f[0] == "t":
        return f[1].shape[1]
    return f[1]


def _put_digits(dst, v) -> None:
    """``dst`` (rows of ``width`` bytes) = the decimal digits of non-negative integers ``v`` (str of each),
    right-aligned, NUL before the first.  One digit at a time: numpy divides by a scalar quickly."""
    for j in range(dst.shape[1] - 1, -1, -1):
        digit = v % 10 + 48
        if j < dst.shape[1] - 1:
            digit *= v > 0
        dst[:, j] = digit
        v = v // 10


def _put_fraction(dst, v) -> None:
    """``dst`` (rows of ``p`` bytes) = the ``p`` digits of fractions ``v / 10 ** p`` without their trailing
    zeros (NUL; one digit at least)."""
    p = dst.shape[1]
    rest = v
    for j in range(p - 1, -1, -1):
        digit = rest % 10 + 48
        if j > 0:  # written when it or one after it is not 0
            digit *= v % 10 ** (p - j) != 0
        dst[:, j] = digit
        rest = rest // 10


def _scaled(x, scale: int):
    """``x * scale`` as integers when every x is the double nearest to such an integer / scale, with
    0 <= x < :data:`_X_BELOW` (not -0.0), else None."""
    import numpy as np

    ok = ~np.signbit(x) & (x < _X_BELOW)  # nan and inf fail the comparison
    k = np.rint(x * scale)
    if not (ok.all() and (k / scale == x).all()):
        return None
    return k.astype(np.int64)


def _text_table(texts: list[str]):
    """Texts as rows of a byte matrix, NUL after each (looked up by lane)."""
    import numpy as np

    width = max(map(len, texts), default=0)
    table = np.zeros((len(texts), width), dtype=np.uint8)
    for i, t in enumerate(texts):
        table[i, :len(t)] = np.frombuffer(t.encode("ascii"), dtype=np.uint8)
    return table


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
    events = timeline_event_bytes(tl)
    # numcodecs' Zstd cannot decode its own encoding of no bytes (a kernel of no instructions): kept as ""
    out["events_zstd"] = base64.b64encode(Zstd(1).encode(events)).decode("ascii") if events else ""
    return out


def _event_bytes(tl: dict[str, Any]) -> bytes:
    """The rendered events of a timeline as UTF-8 bytes: as stored (:func:`stored_timeline`, straight from
    the compressed text), else rendered now."""
    import base64

    if "events_zstd" in tl:
        from numcodecs import Zstd

        packed = base64.b64decode(tl["events_zstd"])
        try:
            return bytes(Zstd().decode(packed)) if packed else b""
        except RuntimeError:
            if packed == Zstd(1).encode(b""):  # stored so by earlier versions: no events
                return b""
            raise
    return timeline_event_bytes(tl)


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
