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
