"""Parts given by reference (``stages.base.Slice``): the build hands a part's task its base's hash and a spec,
and the task cuts the part itself.  A build whose splits hand out slices gives the bytes of the serial run,
records its parts by slice, reuses them, and splits again when a slice's base has gone from the store.
"""

from __future__ import annotations

import shutil

import pytest

from tests.test_split_large import large_matmul_like
from tusk import stages
from tusk.cache import Store
from tusk.ir import bir_json
from tusk.ir.enums import FnAttr
from tusk.ir.serial import content_hash
from tusk.ir.verify import verify
from tusk.sim.interp import random_inputs, run, same_outputs
from tusk.stages import address_rotation
from tusk.stages.base import Slice, materialized
from tusk.stages.build_fdeps import BuildFDeps
from tusk.stages.schedule import Schedule
from tusk.workflows.graph import BuildUnit, build
from tusk.workflows.pipeline import Entry, _labelled, resolve

CHAIN = ("address_rotation_psum", "address_rotation_sb", "build_fdeps", "schedule",
         "address_rotation_psum_post_schedule", "address_rotation_sb")
OPTIONS = {"schedule": {"max_segment": 50}}  # segments to cut the function at


@pytest.fixture
def eager(monkeypatch):
    """Split thresholds of a 1M-instruction kernel, scaled to a small one (they never change output)."""
    for cls in (BuildFDeps, Schedule):
        monkeypatch.setattr(cls, "split_min", 2)
        monkeypatch.setattr(cls, "split_part_size", 40)
        monkeypatch.setattr(cls, "split_max_parts", 4)
    monkeypatch.setattr(address_rotation, "MAX_SEGMENT", 50)


def _input():
    m = large_matmul_like(6, 4, 8)
    for fn in m.functions:
        fn.attrs.add(FnAttr.ROTATE_PSUM_AND_SB)
    return stages.make_pass("unroll").run(m)[0]


def _serial(m):
    for name in CHAIN:
        m = stages.make_pass(name, **OPTIONS.get(name, {})).run(m)[0]
    return m


def _build(store, m):
    steps = resolve(_labelled([Entry(name, dict(OPTIONS.get(name, {}))) for name in CHAIN])).steps
    rep = build([BuildUnit("k", m)], steps, store)
    assert rep.unit("k").ok, rep.unit("k").error
    return rep


def test_the_splits_hand_out_slices_of_their_input_or_of_a_module_part(eager):
    m = _input()
    refs = BuildFDeps().split_refs(m)
    assert refs and all(isinstance(x, Slice) and x.base is None for x in refs)
    assert [p.n_insts() for p in materialized(BuildFDeps(), m, refs)] == [x.size for x in refs]
    scheduled = Schedule(max_segment=50).run(BuildFDeps().run(m)[0])[0]
    post = stages.make_pass("address_rotation_psum_post_schedule").run(scheduled)[0]
    sb = stages.make_pass("address_rotation_sb")
    refs = sb.split_refs(post)
    assert refs is not None and not isinstance(refs[-1], Slice)  # the carrier: the rotated module
    assert all(isinstance(x, Slice) and x.base == len(refs) - 1 for x in refs[:-1])


def test_a_build_of_slices_gives_the_serial_bytes_and_reuses_its_parts(eager, tmp_path):
    m = _input()
    store = Store(tmp_path / "store")
    rep = _build(store, m)
    by_label = {s.label: s for s in rep.unit("k").steps}
    for label in ("build_fdeps", "schedule", "address_rotation_sb#2"):
        assert by_label[label].parts_total >= 2, label
    final = store.load(rep.unit("k").final)
    serial = _serial(m)
    assert content_hash(final) == content_hash(serial)
    assert bir_json.dumps(final) == bir_json.dumps(serial)
    inputs = random_inputs(m, seed=7)
    assert same_outputs(run(m, inputs), run(final, inputs))  # and computes what the unrolled input computes
    verify(final)
    again = _build(store, m)
    assert again.n_executed == 0
    # a slice's record names its base as its input: the cache's collector sees no broken record
    from tusk.cache.gc import entries

    objects = {h: 1 for h in store.object_hashes()}
    found = entries(store, objects)
    assert found and not [e.files for e in found if e.broken]
    # the schedule step's record gone: it splits again, finds every part by its slice, and merges
    key = by_label["schedule"].key
    (tmp_path / "store" / "actions" / key[:2] / f"{key}.json").unlink()
    third = _build(Store(tmp_path / "store"), m)
    step = {s.label: s for s in third.unit("k").steps}["schedule"]
    assert step.status == "executed" and step.parts_total >= 2 and step.parts_executed == 0
    assert third.executions() == [("k", "schedule")]
    assert third.unit("k").final == rep.unit("k").final


def _schedule_input_lost_after_split(monkeypatch, store, forget: bool) -> list[str]:
    """Right after the schedule's first split, its input object goes from the store (and, with ``forget``,
    from this process's memory); returns the list the lost hash is put in."""
    from tusk.workflows import tasks

    gone: list[str] = []
    real = tasks.split_step

    def split_then_lose_input(ctx, step, input_hash, key, parts):
        res = real(ctx, step, input_hash, key, parts)
        if step["name"] == "schedule" and res.get("status") == "split" and not gone:
            gone.append(input_hash)
            if forget:
                tasks.forget_all()
            shutil.rmtree(store.fs.path(f"objects/{input_hash[:2]}/{input_hash}"))
        return res

    monkeypatch.setattr(tasks, "split_step", split_then_lose_input)
    return gone


def test_a_slice_whose_base_is_gone_is_split_again(eager, tmp_path, monkeypatch):
    """The base of the schedule's slices (build_fdeps' output) vanishes after the split: the part reports its
    input missing, the step splits again (and the split repairs its input), and the build ends as it should."""
    m = _input()
    store = Store(tmp_path / "store")
    gone = _schedule_input_lost_after_split(monkeypatch, store, forget=True)
    rep = _build(store, m)
    assert gone and rep.unit("k").ok
    assert content_hash(store.load(rep.unit("k").final)) == content_hash(_serial(m))


def test_a_base_gone_while_the_splitting_worker_still_holds_it_is_stored_again(eager, tmp_path, monkeypatch):
    """The split's worker reads the step's input from memory, so splitting again does not notice the object
    is gone from the store; the split stores it again, or the parts would fail until the build gave up."""
    from tusk.workflows import tasks

    m = _input()
    store = Store(tmp_path / "store")
    gone = _schedule_input_lost_after_split(monkeypatch, store, forget=False)
    real_part = tasks.run_part

    def run_part_elsewhere(ctx, step, part, key, parts):
        """A part on another worker: the base is not in its memory."""
        held = tasks._MEMORY.pop(part["base"], None) if isinstance(part, dict) else None
        try:
            return real_part(ctx, step, part, key, parts)
        finally:
            if held is not None:
                tasks._MEMORY[part["base"]] = held

    monkeypatch.setattr(tasks, "run_part", run_part_elsewhere)
    rep = _build(store, m)
    assert gone and rep.unit("k").ok, rep.unit("k").error
    assert store.has(gone[0])
    assert content_hash(store.load(rep.unit("k").final)) == content_hash(_serial(m))


def test_a_cluster_build_of_slices_gives_the_serial_bytes(eager, tmp_path):
    """Two forked worker processes (they inherit the lowered thresholds): parts cut from bases that one worker
    holds and the other fetches give the serial run's module."""
    from tusk.workflows.graph import local_cluster_executor

    m = _input()
    store = Store(tmp_path / "store")
    steps = resolve(_labelled([Entry(name, dict(OPTIONS.get(name, {}))) for name in CHAIN])).steps
    seen: list[str] = []
    rep = build([BuildUnit("k", m)], steps, store,
                executor=lambda: local_cluster_executor(2, local_directory=str(tmp_path / "w")),
                on_event=lambda e: seen.append(e.what) if type(e).__name__ == "TaskSubmitted" else None)
    assert rep.cluster_started and rep.unit("k").ok, rep.unit("k").error
    # two workers: schedule split ahead of build_fdeps' merge, once
    assert seen.index("schedule (split ahead)") < seen.index("build_fdeps (merge)") and "schedule (split)" not in seen
    final = store.load(rep.unit("k").final)
    serial = _serial(m)
    assert content_hash(final) == content_hash(serial) and bir_json.dumps(final) == bir_json.dumps(serial)
    records = [store.get_action(k) for k in store.action_keys()]
    sliced = [r for r in records if r and (r.get("parts") or {}).get("slice")]
    assert len(sliced) >= 6 and all(store.has(r["input"]) for r in sliced)


# ----------------------------------------------------------------------------- schedule split ahead of build_fdeps


def _build_ahead(store, m, chain=CHAIN):
    """A build that splits schedule ahead of build_fdeps (a cluster of 2+ workers does so by itself); the
    ``what`` of every task it submitted, in order."""
    seen: list[str] = []
    steps = resolve(_labelled([Entry(name, dict(OPTIONS.get(name, {}))) for name in chain])).steps
    rep = build([BuildUnit("k", m)], steps, store, split_ahead=True,
                on_event=lambda e: seen.append(e.what) if type(e).__name__ == "TaskSubmitted" else None)
    assert rep.unit("k").ok, rep.unit("k").error
    return rep, seen


def test_schedule_splits_while_build_fdeps_runs_and_gives_the_serial_bytes(eager, tmp_path):
    m = _input()
    store = Store(tmp_path / "store")
    rep, seen = _build_ahead(store, m)
    # schedule's split went out before build_fdeps' merge (and, in this process, ran before it), and schedule
    # split no second time
    assert seen.index("schedule (split ahead)") < seen.index("build_fdeps (merge)")
    assert "schedule part 1/4" in seen
    assert "schedule (split)" not in seen and seen.count("schedule (merge)") == 1
    step = {s.label: s for s in rep.unit("k").steps}["schedule"]
    assert step.status == "executed" and step.parts_total == 4 and step.parts_executed == 4
    final = store.load(rep.unit("k").final)
    serial = _serial(m)
    assert content_hash(final) == content_hash(serial) and bir_json.dumps(final) == bir_json.dumps(serial)
    assert _build(store, m).n_executed == 0


def test_a_module_with_edges_of_its_own_splits_after_build_fdeps(eager, tmp_path):
    """build_fdeps run twice: the second one's input has edges, so schedule declines to split ahead of it and
    splits after it as usual."""
    chain = CHAIN[:3] + ("build_fdeps",) + CHAIN[3:]
    m = _input()
    rep, seen = _build_ahead(Store(tmp_path / "store"), m, chain)
    assert seen.count("schedule (split ahead)") == 1 and seen.count("schedule (split)") == 1  # declined, as usual
    assert seen.index("build_fdeps#2 (merge)") < seen.index("schedule (merge)")
    serial = m
    for name in chain:
        serial = stages.make_pass(name, **OPTIONS.get(name, {})).run(serial)[0]
    assert content_hash(Store(tmp_path / "store").load(rep.unit("k").final)) == content_hash(serial)


def test_a_failed_part_of_the_split_ahead_falls_back_to_the_usual_split(eager, tmp_path, monkeypatch):
    from tusk.workflows import tasks

    m = _input()
    store = Store(tmp_path / "store")
    ahead_inputs: list[str] = []
    real_ahead, real_part = tasks.split_ahead, tasks.run_part

    def split_ahead(ctx, step, input_hash):
        ahead_inputs.append(input_hash)
        return real_ahead(ctx, step, input_hash)

    def run_part(ctx, step, part, key, parts):
        if isinstance(part, dict) and part["base"] in ahead_inputs and step["name"] == "schedule":
            return {"status": "error", "error": "worker lost", "fault": "environment"}
        return real_part(ctx, step, part, key, parts)

    monkeypatch.setattr(tasks, "split_ahead", split_ahead)
    monkeypatch.setattr(tasks, "run_part", run_part)
    rep, seen = _build_ahead(store, m)
    assert ahead_inputs and seen.count("schedule (split ahead)") == 1 and seen.count("schedule (split)") == 1
    assert content_hash(store.load(rep.unit("k").final)) == content_hash(_serial(m))


def _drop_records(store, keep) -> None:
    """Remove every action record but those ``keep(record)`` says to keep."""
    for key in list(store.action_keys()):
        rec = store.get_action(key)
        if rec is not None and not keep(rec):
            store.drop_action(key)


def test_a_late_split_ahead_does_not_let_its_parts_forget_their_base(eager, tmp_path, monkeypatch):
    """build_fdeps' parts all cached: its merge goes out before schedule's split ahead, so the unit has moved on to
    schedule when that split answers; its parts must not be told that build_fdeps' input -- their base -- is
    dead (each would forget it and load it again from the store)."""
    from tusk.workflows import tasks

    m = _input()
    store = Store(tmp_path / "store")
    _build_ahead(store, m)
    # build_fdeps' parts stay cached; its merge, schedule and schedule's parts run again
    _drop_records(store, lambda r: r["pass"] == "build_fdeps" and (r.get("parts") or {}).get("part")
                  or r["pass"] not in ("build_fdeps", "schedule", "address_rotation_psum_post_schedule",
                                       "address_rotation_sb"))
    told: list[tuple[str, list]] = []
    real = tasks.run_part

    def run_part(ctx, step, part, key, parts):
        if step["name"] == "schedule" and isinstance(part, dict):
            told.append((part["base"], list(ctx.get("dead") or ())))
        return real(ctx, step, part, key, parts)

    monkeypatch.setattr(tasks, "run_part", run_part)
    rep, seen = _build_ahead(store, m)
    assert seen.index("build_fdeps (merge)") < seen.index("schedule (split ahead)")  # the merge went first
    assert told and all(base not in dead for base, dead in told)
    assert content_hash(store.load(rep.unit("k").final)) == content_hash(_serial(m))


def test_a_dropped_split_ahead_takes_back_its_parts_not_yet_run(eager, tmp_path):
    """build_fdeps runs again and gives the same output, so schedule's record hits: the ahead split is dropped,
    and its parts still queued never run."""
    m = _input()
    store = Store(tmp_path / "store")
    first, _ = _build_ahead(store, m)
    # build_fdeps (parts and merge) and schedule's ahead parts run again; schedule's own record stays
    _drop_records(store, lambda r: r["pass"] != "build_fdeps"
                  and not (r["pass"] == "schedule" and (r.get("parts") or {}).get("part")))
    finished: list[tuple[str, str]] = []
    steps = resolve(_labelled([Entry(name, dict(OPTIONS.get(name, {}))) for name in CHAIN])).steps
    rep = build([BuildUnit("k", m)], steps, store, split_ahead=True,
                on_event=lambda e: finished.append((e.what, e.result.get("status")))
                if type(e).__name__ == "TaskFinished" else None)
    assert rep.unit("k").ok and rep.unit("k").final == first.unit("k").final
    parts = [status for what, status in finished if what.startswith("schedule part")]
    assert parts and set(parts) == {"discarded"}
    assert {s.label: s.status for s in rep.unit("k").steps}["schedule"] == "cached"
