"""Makespans and timelines are the build's own cached steps: measured once per module, read by the report."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tusk.cache import Store
from tusk.workflows import timings
from tusk.workflows.compile import BuildEvents, CompileRequest, compile_directory
from tusk.workflows.observe import Reporter, Tee

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "kernels"


@pytest.fixture
def kdir(tmp_path):
    d = tmp_path / "k"
    d.mkdir()
    for name in ("tiled_exp.json", "rmsnorm.klr"):
        shutil.copy(EXAMPLES / name, d / name)
    return d


class Tasks(BuildEvents):
    def __init__(self):
        self.what: list[str] = []

    def task(self, event, key, unit, what, result):
        if event == "submitted":
            self.what.append(what)


def build(kdir, out, cache, timing=None, report=False, **settings):
    tasks = Tasks()
    reporter = Reporter(report=report)
    req = CompileRequest(kdir, out, workers=0, cache_dir=str(cache), timing=timing, settings=settings)
    result = compile_directory(req, events=Tee(tasks, reporter))
    assert not result.failed, [k.error for k in result.failed]
    return result, [w for w in tasks.what if w.startswith("timing")]


def figures(result):
    return {u.unit.name: (u.makespan("makespan_before"), u.makespan("makespan_after"))
            for kr in result.kernels for u in kr.units}


def test_makespans_are_measured_once_and_then_read_from_the_store(kdir, tmp_path):
    cache = tmp_path / "cache"
    first, ran = build(kdir, tmp_path / "o", cache)
    assert sorted(ran) == sorted(["timing (before rotation)", "timing (after rotation)"] * 2)
    spans = figures(first)
    assert all(isinstance(a, float) and isinstance(b, float) and b <= a for a, b in spans.values()), spans
    # the passes no longer report makespans: the summary's figures come from the timing steps
    for kr in first.kernels:
        for u in kr.units:
            assert not any("makespan_before" in s.stats for s in u.steps if s.name.startswith("address_rotation"))
    again, ran = build(kdir, tmp_path / "o", cache)
    assert ran == [] and figures(again) == spans
    store = Store(cache)
    u = first.kernels[0].units[0]
    note = store.get_note(timings.MAKESPAN_NOTE, timings.note_key(u.timings[0].hash))
    assert note["makespan"] == u.timings[0].makespan and len(json.dumps(note)) < 300  # small JSON
    # they mean what the passes used to report: the timing model with the dependences rebuilt
    assert u.timings[0].makespan == timings.makespan_of(store.load(u.timings[0].hash))


def test_nothing_is_timed_when_nothing_needs_it(kdir, tmp_path):
    result, ran = build(kdir, tmp_path / "o", tmp_path / "cache", timing=timings.NONE)
    assert ran == [] and all(v == (None, None) for v in figures(result).values())
    data = json.loads((tmp_path / "o" / "tiled_exp" / "stats.json").read_text())
    assert data["units"][0]["summary"]["makespan_before"] is None and data["units"][0]["timings"] == []


def test_modules_above_the_limit_are_not_timed_and_say_why(kdir, tmp_path):
    result, ran = build(kdir, tmp_path / "o", tmp_path / "cache", timeline_limit=10)
    u = next(u for kr in result.kernels for u in kr.units if u.unit.name == "tiled_exp")
    assert "tiled_exp" not in " ".join(ran)
    assert {t.status for t in u.timings} == {"skipped"} and "above the 10" in u.timings[0].why


def test_the_report_reads_timelines_from_the_store_and_never_recomputes(kdir, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    build(kdir, tmp_path / "o", cache, report=True)
    tl = json.loads((tmp_path / "o" / "tiled_exp" / "timeline.json").read_text())

    def refuse(*a, **k):
        raise AssertionError("measured again")

    monkeypatch.setattr(timings, "measure", refuse)
    from tusk.stages.build_fdeps import BuildFDeps

    monkeypatch.setattr(BuildFDeps, "run", refuse)  # the report rebuilds no dependences either
    _, ran = build(kdir, tmp_path / "o2", cache, report=True)
    assert ran == []
    assert json.loads((tmp_path / "o2" / "tiled_exp" / "timeline.json").read_text())["traceEvents"] == \
        tl["traceEvents"]
    assert "makespan" in (tmp_path / "o2" / "report.html").read_text()


def test_a_summary_only_build_keeps_no_timelines_and_a_report_build_adds_them(kdir, tmp_path):
    cache = tmp_path / "cache"
    first, ran = build(kdir, tmp_path / "o", cache)
    store = Store(cache)
    u = first.kernels[0].units[0]
    assert store.get_note(timings.TIMELINE_NOTE, timings.note_key(u.timings[0].hash)) is None
    second, ran = build(kdir, tmp_path / "o", cache, report=True)
    assert len(ran) == 4 and figures(second) == figures(first)
    assert store.get_note(timings.TIMELINE_NOTE, timings.note_key(u.timings[0].hash)) is not None


class Notes:
    """A store's note shelf in memory (all measure needs)."""

    def __init__(self):
        self.notes: dict = {}

    def put_note(self, kind, key, value):
        self.notes[kind] = value

    def get_note(self, kind, key):
        return self.notes.get(kind)


def test_a_timing_step_runs_the_model_once_per_kernel_and_gives_what_separate_runs_give(monkeypatch):
    """The entry's run holds its kernel's timeline: the timeline, explain record and makespan are those of
    separate runs, and a kernel called twice is simulated once."""
    from tests.test_explain import _dve_bound
    from tusk.ir.builder import Builder
    from tusk.ir.module import Module
    from tusk.sim import timing
    from tusk.sim.explain import explain_makespan
    from tusk.stages.build_fdeps import BuildFDeps
    from tusk.workflows.trace import engine_timeline, stored_timeline

    kernel = _dve_bound()
    kernel.name = "k"
    b = Builder("main")
    for _ in range(2):
        b.emit("NKIKernel", "Unassigned", attrs={"func": "k", "func_args": {}, "func_outs": {}})
    module = Module([b.function(), kernel])
    timed = BuildFDeps().run(module)[0]
    want_line = stored_timeline(engine_timeline(timed.function("k"), timed))
    want_explain = explain_makespan(timed)
    runs: list[str] = []
    real = timing.simulate

    def counted(x, *a, **k):
        runs.append(timing.entry(x).name)
        return real(x, *a, **k)

    monkeypatch.setattr(timing, "simulate", counted)
    store = Notes()
    note = timings.measure(store, "h", module, True)
    assert sorted(runs) == ["k", "main"]
    events = want_line.pop("events_zstd")  # the rendered events are a note of their own
    assert store.notes[timings.TIMELINE_NOTE]["timelines"] == [want_line]
    assert store.notes[timings.EVENTS_NOTE]["events"] == [events]
    assert store.notes[timings.EXPLAIN_NOTE] == want_explain == note["explain"]
    assert note["makespan"] == want_explain["makespan"]["cycles"] == 2 * want_line["makespan"]


def test_figures_a_full_disk_cost_are_measured_again_by_the_next_build(kdir, tmp_path, monkeypatch):
    """A timing step that fails (ENOSPC) costs its figures, not the kernel; the next build into the same
    OUT and cache must not keep the failure as "up to date" (bench/faults.py's full-disk rounds found it)."""
    cache, out = tmp_path / "cache", tmp_path / "o"
    real = timings.measure

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(timings, "measure", full_disk)
    first, _ = build(kdir, out, cache, report=True)
    assert all(v == (None, None) for v in figures(first).values())
    assert "No space left" in (out / "tiled_exp" / "timeline.json").read_text()
    assert "No space left" in (out / "tiled_exp" / "stats.json").read_text()
    monkeypatch.setattr(timings, "measure", real)
    again, ran = build(kdir, out, cache, report=True)
    assert len(ran) == 4
    assert all(isinstance(a, float) and isinstance(b, float) for a, b in figures(again).values())
    for kernel in ("tiled_exp", "rmsnorm"):
        assert "No space left" not in (out / kernel / "stats.json").read_text()
        assert "No space left" not in (out / kernel / "timeline.json").read_text()


def test_each_kernels_timeline_is_written_by_a_build_task_with_the_bytes_the_report_writes(kdir, tmp_path,
                                                                                           monkeypatch):
    """timeline.json is written by one write_timeline task per kernel as soon as the kernel is timed (on a
    worker when a cluster runs), into its staging directory; the report only checks it.  Without the task
    the report writes the same bytes."""
    from tusk.workflows import observe, trace

    tasks, written = Tasks(), []
    real = trace.write_kernel_timeline
    spy = lambda path, *a: (written.append(Path(path)), real(path, *a))  # noqa: E731
    monkeypatch.setattr(trace, "write_kernel_timeline", spy)
    monkeypatch.setattr(observe, "write_kernel_timeline", spy)
    req = CompileRequest(kdir, tmp_path / "o", workers=0, cache_dir=str(tmp_path / "cache"))
    result = compile_directory(req, events=Tee(tasks, Reporter(report=True)))
    assert not result.failed
    assert sorted(w for w in tasks.what if w == "write_timeline") == ["write_timeline"] * 2
    # into the kernels' staging directories (OUT/.tusk-staging-...), never into OUT/<kernel>
    assert len(written) == 2 and all(p.parent.parent == tmp_path / "o" for p in written)
    assert {p.parent.name for p in written}.isdisjoint({"tiled_exp", "rmsnorm"})
    by_task = {k: (tmp_path / "o" / k / "timeline.json").read_bytes() for k in ("tiled_exp", "rmsnorm")}

    # the same build with no kernel task: the report writes them, byte for byte the same
    monkeypatch.setattr("tusk.workflows.outputs.OutputWriter.timeline_task", lambda self, reports: None)
    written.clear()
    req = CompileRequest(kdir, tmp_path / "o2", workers=0, cache_dir=str(tmp_path / "cache"))
    compile_directory(req, events=Reporter(report=True))
    assert {p.parent.name for p in written} == {"tiled_exp", "rmsnorm"}
    assert {k: (tmp_path / "o2" / k / "timeline.json").read_bytes() for k in by_task} == by_task
    assert observe.TIMELINE == trace.TIMELINE_FILE


class Submissions(BuildEvents):
    def __init__(self):
        self.order: list[tuple[str, str]] = []

    def task(self, event, key, unit, what, result):
        if event == "submitted":
            self.order.append((unit.unit.name, what))


def test_a_timing_step_is_submitted_after_the_chain_step_that_reads_the_same_module(kdir, tmp_path):
    # sent first, a makespan took the worker the chain's next step was pinned to, and the kernel waited for it
    subs = Submissions()
    req = CompileRequest(kdir, tmp_path / "o", workers=0, cache_dir=str(tmp_path / "cache"), settings={})
    assert not compile_directory(req, events=subs).failed
    units = {u for u, _ in subs.order}
    assert len(units) == 2
    for unit in units:
        seq = [what for u, what in subs.order if u == unit]
        first_rotation = next(k for k, w in enumerate(seq) if w.startswith("address_rotation_psum"))
        assert seq.index("timing (before rotation)") > first_rotation, seq
