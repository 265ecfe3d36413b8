"""Engine timelines and build traces: aggregation, utilisation, the Chrome trace-event format."""

from __future__ import annotations

import json
import sys
import time

import numpy as np
import pytest

from tests.programs import tiled_exp_module
from tusk.stages import make_pass
from tusk.workflows import task_log, trace


def segments(n: int, lanes: int = 3, seed: int = 0):
    rng = np.random.default_rng(seed)
    lane = rng.integers(0, lanes, n)
    start = np.sort(rng.random(n)) * 1e5
    end = start + rng.random(n) * 5
    return lane, start, end, np.array([f"i{k}" for k in range(n)], dtype=object)


def test_aggregate_is_exact_under_the_limit_and_bounded_past_it():
    lane, start, end, labels = segments(500)
    exact = trace._aggregate(["a", "b", "c"], lane, start, end, labels, 1000)
    assert not exact["merged"] and len(exact["lane"]) == 500 and set(exact["n"]) == {1}
    lane, start, end, labels = segments(50_000)
    merged = trace._aggregate(["a", "b", "c"], lane, start, end, labels, 2_000)
    assert merged["merged"] and len(merged["lane"]) <= 2_000 and sum(merged["n"]) == 50_000
    # every merged segment covers the instructions it counts, on their lane
    order = np.lexsort((start, lane))
    i = 0
    for ln, s, e, n in zip(merged["lane"], merged["start"], merged["end"], merged["n"]):
        rows = order[i:i + n]
        assert set(lane[rows].tolist()) == {ln}
        assert s <= start[rows].min() + 0.1 and e >= end[rows].max() - 0.1
        i += n


def test_utilization_adds_up_to_the_busy_time():
    lane, start, end, _ = segments(20_000, lanes=2)
    u = trace.utilization(2, lane, start, end, float(end.max()), bins=50)
    for k in range(2):
        busy = float((end - start)[lane == k].sum())
        assert sum(u["lanes"][k]) * u["dt"] == pytest.approx(busy, rel=1e-3)


def test_engine_timeline_of_a_kernel_and_its_trace():
    if trace._model() is None:
        pytest.skip("no timing model")
    m = tiled_exp_module(tiles=4)
    for p in ("unroll", "build_fdeps"):
        m = make_pass(p).run(m)[0]
    fn = trace.kernel_functions(m)[0]
    tl = trace.engine_timeline(fn, m)
    assert tl["ok"] and tl["makespan"] > 0 and tl["lanes"] and tl["overview"] is not None
    assert len(tl["detail"]["lane"]) >= len(fn.insts) and max(tl["detail"]["end"]) <= tl["makespan"] + 0.1
    phase = trace.Phase("k", "final", "0" * 64, [tl])
    data = json.loads(json.dumps(trace.timeline_trace("k", [phase])))
    xs = [e for e in data["traceEvents"] if e["ph"] == "X"]
    names = {e["args"]["name"] for e in data["traceEvents"] if e.get("name") == "thread_name"}
    assert xs and all(e["dur"] >= 0 and e["ts"] >= 0 for e in xs) and names == set(tl["lanes"])


def test_a_function_that_cannot_be_timed_says_why():
    if trace._model() is None:
        pytest.skip("no timing model")
    fn = tiled_exp_module(tiles=2).functions[0]  # loops kept
    tl = trace.engine_timeline(fn)
    assert not tl["ok"] and "loop" in tl["why"].lower()


def test_build_trace_puts_each_task_on_its_worker():
    class U:  # the part of a UnitReport the log reads
        class unit:
            name = "k"

    log = task_log.TaskLog()
    log.task("submitted", "unroll-k-1", U, "unroll", {})
    log.task("finished", "unroll-k-1", U, "unroll",
             {"status": "executed", "timing": {"started": log.t0 + 0.5, "run": 0.2}, "ended": log.t0 + 0.8,
              "worker_address": "tcp://127.0.0.1:1"})
    log.task("submitted", "write_bir_json-k-2", U, "write_bir_json", {})
    log.task("finished", "write_bir_json-k-2", U, "write_bir_json", {"status": "written"})

    class R:
        out, seconds, report = "OUT", 1.0, None

    data = task_log.build_trace(log, R)
    xs = {e["name"]: e for e in data["traceEvents"] if e["ph"] == "X"}
    assert set(xs) == {"k: unroll", "k: write_bir_json"}
    assert xs["k: unroll"]["tid"] == xs["k: write_bir_json"]["tid"]  # writing runs where the unit's last step ran
    assert xs["k: unroll"]["dur"] == pytest.approx(0.3e6, rel=1e-3) and xs["k: unroll"]["args"]["run_s"] == 0.2


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread usage is Linux's")
def test_a_task_reports_what_it_cost_and_the_trace_shows_it():
    from tusk.workflows.task_usage import measured

    @measured
    def touch(n):
        a = np.ones(n, dtype=np.uint8)  # fresh pages: each first touch is a fault
        a[::4096] = 2
        t0 = time.process_time()
        while time.process_time() - t0 < 0.05:
            pass
        return {"status": "executed", "timing": {"started": time.time()}, "ended": time.time()}

    answer = touch(64 << 20)
    usage = answer["usage"]
    assert usage["cpu_user_s"] + usage["cpu_sys_s"] >= 0.04
    assert usage["page_faults"] >= 32  # 64 MiB: 16k faults in 4 KiB pages, 32 in huge pages
    assert measured(lambda: "not a dict")() == "not a dict"

    class U:
        class unit:
            name = "k"

    log = task_log.TaskLog()
    log.task("submitted", "s", U, "schedule", {})
    log.task("finished", "s", U, "schedule", answer)

    class R:
        out, seconds, report = "OUT", 1.0, None

    args = next(e for e in task_log.build_trace(log, R)["traceEvents"] if e["ph"] == "X")["args"]
    assert args["page_faults"] == usage["page_faults"] and args["cpu_sys_s"] == usage["cpu_sys_s"]
    from tusk.workflows import report_html

    figs = report_html._Figures()
    report_html._build_timeline(log, figs)
    [bar] = next(iter(figs.figs.values()))["data"]
    assert f"{usage['page_faults']:,} page faults" in bar["hovertext"][0], bar["hovertext"]


@pytest.mark.parametrize("limits", [(200_000, 2_500), (40, 10)])  # exact; merged segments + utilisation counters
def test_timeline_json_is_the_trace_encoded_and_rendered_events_join_into_it(limits, monkeypatch):
    if trace._model() is None:
        pytest.skip("no timing model")
    monkeypatch.setattr(trace, "DETAIL_LIMIT", limits[0])
    monkeypatch.setattr(trace, "OVERVIEW_LIMIT", limits[1])
    m = tiled_exp_module(tiles=4)
    for p in ("unroll", "build_fdeps"):
        m = make_pass(p).run(m)[0]
    fn = trace.kernel_functions(m)[0]
    tl = trace.engine_timeline(fn, m)
    assert tl["detail"]["merged"] == (limits[0] < len(fn.insts)) and ("utilization" in tl) == (limits[1] < 100)
    bad = {"ok": False, "function": "f", "why": "loops"}
    phases = [trace.Phase("k", "before", "0" * 64, [tl, bad]), trace.Phase("k", "after", "1" * 64, [tl])]
    reference = trace.timeline_trace("k", phases)
    reference["otherData"] = {"_signature": "s", **reference["otherData"]}
    want = json.dumps(reference, sort_keys=True, separators=(",", ":"))
    assert trace.timeline_json("k", phases, {"_signature": "s"}) == want
    # what a timing step stores: the events rendered, no per-segment columns; joined, the same bytes
    stored = json.loads(json.dumps(trace.stored_timeline(tl)))
    assert "detail" not in stored and stored["events_zstd"]
    assert trace.timeline_json("k", [trace.Phase("k", "before", "0" * 64, [stored, bad]),
                                     trace.Phase("k", "after", "1" * 64, [stored])], {"_signature": "s"}) == want
    pids = {e["pid"] for e in json.loads(want)["traceEvents"]}
    assert pids == {1, 2}


def test_a_timeline_written_in_pieces_is_whole_or_absent(tmp_path):
    """write_kernel_timeline streams the events (write_atomic of pieces): a failure half-way (a full disk)
    leaves neither a half file nor its temporary, and a finished file replaces the old one whole."""
    import pytest

    from tusk.workflows.outputs import write_atomic

    path = tmp_path / "timeline.json"
    write_atomic(path, [b'{"a":', b"1}"])
    assert path.read_bytes() == b'{"a":1}'

    def pieces():
        yield b'{"b":'
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        write_atomic(path, pieces())
    assert path.read_bytes() == b'{"a":1}' and [p.name for p in tmp_path.iterdir()] == ["timeline.json"]


AWKWARD_LABELS = ['say "hi"', "back\\slash", "tab\tand\nnewline", "unicode: ÿ é 漢字 \U0001f600", "nul\x00byte", "",
                  "</script>", "\u2028 line separator"]


def timeline(start, end, labels, lanes=("Act", 'the "PE" lane', "Pool DMA queues ü"), ghz=1.4, n=None, lane=None):
    k = len(start)
    return {"ok": True, "function": "f", "instructions": k, "makespan": max(end, default=0.0), "ghz": ghz,
            "lower_bound": 0.0, "busy": {}, "bounds": {}, "lanes": list(lanes),
            "detail": {"lane": lane if lane is not None else [i % len(lanes) for i in range(k)],
                       "start": start, "end": end, "n": n if n is not None else [1 + i % 3 for i in range(k)],
                       "label": labels, "merged": False}}


def reference(tl) -> str:
    """What a kernel's timeline.json must be: json.dumps of timeline_trace."""
    phases = [trace.Phase("k", "final", "0" * 64, [tl])]
    return json.dumps(trace.timeline_trace("k", phases), sort_keys=True, separators=(",", ":"))


def rendered(tl) -> str:
    return trace.timeline_json("k", [trace.Phase("k", "final", "0" * 64, [tl])])


@pytest.mark.parametrize("chunk", [3, 8192])
def test_the_column_rendering_is_json_dumps_of_the_trace(chunk, monkeypatch):
    """Rounded cycles and times (what engine_timeline writes) take the column form: awkward labels, digits
    of every width (chunks with different layouts), zeros, fractions with and without trailing zeros, the
    largest number it takes."""
    monkeypatch.setattr(trace, "_X_CHUNK", chunk)
    rng = np.random.default_rng(1)
    start = [0.0, 0.1, 1.0, 10.5, 99.9, 1234.0, 99999999999.9, 5e10, 7.0, 0.0] + \
        np.round(np.sort(rng.random(40)) * 10.0 ** rng.integers(0, 9, 40), 1).tolist()
    end = [s + d for s, d in zip(start, [0.0, 0.1, 0.2, 3.0, 0.3, 1e6, 0.0, 1.5, 2.0, 1e9] * 5)]
    end = np.round(np.asarray(end), 1).tolist()
    labels = [AWKWARD_LABELS[i % len(AWKWARD_LABELS)] + f" {i}" * (i % 4) for i in range(len(start))]
    for ghz in (1.4, 1.0, 3.0):
        tl = timeline(start, end, labels, ghz=ghz, n=[1, 10, 123456789012, 0, 7] * 10)
        assert trace._x_event_bytes(tl, 1.0 / (ghz * 1000.0)) is not None  # the column form took it
        assert rendered(tl) == reference(tl)
        assert trace.timeline_events(tl) == trace._x_event_text(tl, 1.0 / (ghz * 1000.0))


@pytest.mark.parametrize("odd", [1e-05, 1e16, -0.0, 3, -2.5, 0.05, 123.45, 2.0 ** -30])
def test_numbers_the_column_form_does_not_take_are_written_one_by_one(odd):
    """A number that is not a double nearest to k / 10 in range (an int, a tiny, huge or negative one, more
    decimals) leaves the timeline to the per-event form: still json.dumps of the trace."""
    start = [0.0, 1.5, odd, 4.0]
    end = [1.0, 2.5, 6.0, 4.0]
    tl = timeline(start, end, AWKWARD_LABELS[:4])
    assert trace._x_event_bytes(tl, 1.0 / 1400.0) is None
    assert rendered(tl) == reference(tl)


def test_a_long_label_and_no_segments():
    long = "x\"\\é" * 300  # escaped longer than _X_LABEL_WIDTH: its chunk is written per event
    start = [float(i) for i in range(20)]
    tl = timeline(start, [s + 0.5 for s in start], [long if i == 7 else f"i{i}" for i in range(20)])
    assert rendered(tl) == reference(tl)
    empty = timeline([], [], [])
    assert trace.timeline_events(empty) == "" and rendered(empty) == reference(empty)
    bad = timeline([0.0, 1.0], [1.0, 2.0], ["a", "b"], lane=[0, 5])
    with pytest.raises(IndexError):
        trace.timeline_events(bad)
