"""Splitting the straight-line passes of one big function: parts + merge equal the whole run.

build_fdeps splits by row ranges (cross-range edges from the exposed accesses of each part), schedule by
whole segments.  Split thresholds are class attributes (they never change output); the tests lower them
so small kernels split the way examples/large_kernels/large_matmul.json does, and compare content hash
and BIR-JSON bytes with the unsplit run.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from tests.test_deps import _build, programs
from tests.test_split_large import BIR_KERNELS, KERNELS, assert_exact, large_matmul_like
from tusk import stages
from tusk.ir import bir_json
from tusk.ir.builder import Builder
from tusk.ir.enums import FnAttr
from tusk.ir.module import Module
from tusk.ir.serial import content_hash
from tusk.ir.verify import verify
from tusk.sim.interp import random_inputs, run, same_outputs
from tusk.stages import address_rotation
from tusk.stages.build_fdeps import BuildFDeps
from tusk.stages.deps_split import plan_ranges, splits, written_spaces
from tusk.stages.rotation_split import CARRIER_KEY
from tusk.stages.schedule import Schedule, segments
from tusk.stages.unroll import Unroll


def is_carrier(m: Module) -> bool:
    return CARRIER_KEY in m.attributes


@pytest.fixture
def low_threshold(monkeypatch):
    monkeypatch.setattr(BuildFDeps, "split_min", 2)
    monkeypatch.setattr(BuildFDeps, "split_part_size", 5)
    monkeypatch.setattr(BuildFDeps, "split_max_parts", 8)


def _rotated(m: Module) -> Module:
    """A corpus kernel as build_fdeps meets it in the pipeline: unrolled, buffers rotated."""
    for fn in m.functions:
        fn.attrs.add(FnAttr.ROTATE_PSUM_AND_SB)
    out, _ = Unroll().run(m)
    for name in ("address_rotation_psum", "address_rotation_sb"):
        out, _ = stages.make_pass(name).run(out)
    return out


# ----------------------------------------------------------------------------- build_fdeps


def test_ranges_are_few_large_and_tile_the_rows():
    assert plan_ranges(199_999, 200_000, 300_000, 8) is None
    r = plan_ranges(1_236_992, 200_000, 300_000, 8)
    assert len(r) == 4 and r[0][0] == 0 and r[-1][1] == 1_236_992  # 5 by size: an even count for the workers
    assert len(plan_ranges(650_000, 200_000, 300_000, 8)) == 2 and len(plan_ranges(2_600_000, 1, 300_000, 8)) == 8
    assert all(b == c for (_, b), (c, _) in itertools.pairwise(r))
    assert plan_ranges(10, 2, 3, 8, starts=np.array([0, 6])) == [(0, 6), (6, 10)]


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(programs())
def test_any_program_split_anywhere_gives_the_whole_graph(monkeypatch, insts):
    """Random straight-line programs over buffers that overlap on purpose (see test_deps)."""
    monkeypatch.setattr(BuildFDeps, "split_min", 2)
    fn = _build(insts, io=True)
    for size in (1, 2, 3, 7):
        monkeypatch.setattr(BuildFDeps, "split_part_size", size)
        parts, _, _merged = assert_exact(BuildFDeps(), Module([fn]))
        assert parts is None or len(parts) >= 2


@pytest.mark.parametrize("name", BIR_KERNELS)
def test_corpus_kernel_split_equals_whole(low_threshold, name):
    m = _rotated(bir_json.load(KERNELS / name))
    parts, _, _ = assert_exact(BuildFDeps(), m)
    assert (parts is not None) == any(splits(f) and len(f.insts) >= 2 for f in m.functions)


def test_large_matmul_slice_splits_and_keeps_existing_edges(low_threshold, monkeypatch):
    monkeypatch.setattr(BuildFDeps, "split_part_size", 400)
    m = _rotated(large_matmul_like(3, 2, 4))
    parts, serial, _ = assert_exact(BuildFDeps(), m)
    assert parts is not None and 2 <= len(parts) <= 8
    assert len(serial.functions[-1].deps) > 0
    assert_exact(BuildFDeps(keep_existing=True, ordered=False), serial)


def test_read_only_inputs_are_never_exposed(low_threshold, monkeypatch):
    m = _rotated(large_matmul_like(6, 4, 8))
    fn = max(m.functions, key=lambda f: len(f.insts))
    monkeypatch.setattr(BuildFDeps, "split_part_size", fn.n_insts // 2 + 1)
    names = [fn.strings[s] for s in fn.memlocs["name"].tolist()]
    written = {names[s - 3] for s in written_spaces(fn) if s - 3 < len(names)}
    assert "c" in written and not {"at", "b"} & written
    parts = BuildFDeps().split(m)
    outs = [BuildFDeps().run(p)[0] for p in parts]
    exposed = sum(len(o.attributes["build_fdeps_part"]["exposed"]) for o in outs)
    # the loads of the inputs (a third of the kernel) are not exposed: the rings' ends and the stores of c are
    assert len(parts) == 2 and exposed < fn.n_insts / 4


def test_small_kernels_stay_one_task():
    assert BuildFDeps().split(_rotated(large_matmul_like(2, 2, 2))) is None


def test_a_cross_part_conflict_through_an_untouched_middle(low_threshold, monkeypatch):
    """A value written in the first part and read in the last one, with parts between that never touch it."""
    monkeypatch.setattr(BuildFDeps, "split_part_size", 4)  # 4 parts of 15 rows (by 5: 3, made an even 2)
    b = Builder("far")
    x = b.dram("x", (128, 64), kind="ExternalInput")
    y = b.dram("y", (128, 64), kind="ExternalOutput")
    t = b.sbuf("t", (128, 64), addr=0)
    u = b.sbuf("u", (128, 64), addr=256)
    b.dma(t.ap(), x.ap())
    for _ in range(12):
        b.tensor_scalar(u.ap(), u.ap(), "add", 1.0)
    b.dma(y.ap(), t.ap())
    b.dma(t.ap(), x.ap())
    parts, serial, _ = assert_exact(BuildFDeps(), b.module())
    assert parts is not None and len(parts) >= 3
    d = serial.functions[0].deps
    assert (0, 13) in set(zip(d["src"].tolist(), d["dst"].tolist()))


def test_a_split_build_fdeps_part_input_is_a_valid_module(low_threshold):
    from tusk.ir.verify import verify

    m = _rotated(large_matmul_like(2, 2, 2))
    for part in BuildFDeps().split(m):
        verify(part)


# ----------------------------------------------------------------------------- schedule


@pytest.fixture
def low_schedule(monkeypatch):
    monkeypatch.setattr(Schedule, "split_min", 2)
    monkeypatch.setattr(Schedule, "split_part_size", 40)
    monkeypatch.setattr(Schedule, "split_max_parts", 8)


def _scheduled_input(m: Module) -> Module:
    return BuildFDeps().run(_rotated(m))[0]


@pytest.mark.parametrize("name", BIR_KERNELS)
def test_corpus_kernel_schedule_split_equals_whole(low_schedule, name):
    m = _scheduled_input(bir_json.load(KERNELS / name))
    p = Schedule(max_segment=16)
    parts, _serial, _ = assert_exact(p, m)
    segs = [segments(f, 16) for f in m.functions if splits(f)]
    assert (parts is not None) == any(len(s) >= 2 for s in segs)


@pytest.mark.parametrize("max_segment", [7, 50, 1 << 16])
def test_large_matmul_slice_schedules_in_parts(low_schedule, max_segment):
    m = _scheduled_input(large_matmul_like(6, 4, 8))
    parts, _serial, merged = assert_exact(Schedule(max_segment=max_segment), m)
    assert (parts is not None) == (max_segment < 624)
    fn = merged.functions[-1]
    d = fn.deps
    assert (d["src"] < d["dst"]).all()
    inputs = random_inputs(m, seed=3)
    assert same_outputs(run(m, inputs), run(merged, inputs))


def test_schedule_merge_slots_the_cross_edges_into_the_parts_sorted_edges(low_schedule, monkeypatch):
    """The merge's fast join (the parts' edges kept in order, the few between parts slotted in) is taken, and
    gives the edges, in the same row order, that sorting all of them gives."""
    from tusk.stages import schedule_split

    m = _scheduled_input(large_matmul_like(6, 4, 8))
    p = Schedule(max_segment=50)
    parts = p.split(m)
    assert parts is not None
    done = [p.run(part)[0] for part in parts]
    joined = []
    real = schedule_split._joined
    monkeypatch.setattr(schedule_split, "_joined", lambda *a: joined.append(real(*a)) or joined[-1])
    fast, _ = p.merge(m, done, [{} for _ in done])
    assert joined and all(j is not None for j in joined)
    monkeypatch.setattr(schedule_split, "_joined", lambda *a: None)
    slow, _ = p.merge(m, done, [{} for _ in done])
    for f, g in zip(fast.functions, slow.functions):
        for c in ("src", "dst", "kind"):
            assert np.array_equal(f.deps[c], g.deps[c])
    assert bir_json.dumps(fast) == bir_json.dumps(slow)


def test_stale_edges_are_still_respected_across_parts(low_schedule):
    """No edges given: every part builds its own, the merge the ones between parts."""
    m = _rotated(large_matmul_like(4, 3, 5))
    for fn in m.functions:
        fn.deps = fn.deps.take(np.zeros(0, np.int64))
    parts, _serial, merged = assert_exact(Schedule(max_segment=20), m)
    assert parts is not None
    inputs = random_inputs(m, seed=4)
    assert same_outputs(run(m, inputs), run(merged, inputs))


def test_unmarked_parts_stay_unmarked(low_schedule):
    m = _scheduled_input(large_matmul_like(4, 3, 5))
    _, serial, _ = assert_exact(Schedule(max_segment=20, mark_post_schedule=False), m)
    assert all(FnAttr.KERNEL_SCOPE not in f.attrs for f in serial.functions)


def test_a_long_segment_is_scheduled_in_pieces():
    m = _scheduled_input(large_matmul_like(4, 3, 5))
    fn = m.functions[-1]
    assert segments(fn) == [(0, len(fn.insts))]
    pieces = segments(fn, 50)
    assert pieces[0] == (0, 50) and pieces[-1][1] == len(fn.insts) and len(pieces) == -(-len(fn.insts) // 50)


# ----------------------------------------------------------------------------- schedule split ahead of build_fdeps


def _fdeps_input(m: Module) -> Module:
    """A kernel as build_fdeps meets it in the default pipeline: rotated, its edges cleared."""
    return stages.make_pass("clear_inst_deps").run(_rotated(m))[0]


def _assert_split_ahead_exact(p: Schedule, m: Module) -> list | None:
    """Schedule's parts cut from build_fdeps' input, run, and merged into build_fdeps' output give the bytes of
    scheduling that output whole; returns the parts."""
    from tests.test_split_large import _through_store
    from tusk.stages.base import materialized

    after = BuildFDeps().run(m)[0]
    refs, usual = p.split_ahead(m), p.split_refs(after)
    assert (refs is None) == (usual is None)
    if refs is None:
        return None
    assert [r.spec for r in refs] == [r.spec for r in usual]  # the same parts, cut from the other module
    outs = [_through_store(p.run(_through_store(x))[0]) for x in materialized(p, m, refs)]
    merged = p.merge(after, outs, [{} for _ in outs])[0]
    serial = p.run(after)[0]
    assert content_hash(merged) == content_hash(serial)
    assert bir_json.dumps(merged) == bir_json.dumps(serial)
    verify(merged)
    inputs = random_inputs(m, seed=9)
    assert same_outputs(run(m, inputs), run(merged, inputs))  # computes what build_fdeps' input computes
    return outs


@pytest.mark.parametrize("name", BIR_KERNELS)
def test_corpus_kernel_schedule_split_ahead_of_build_fdeps_equals_whole(low_schedule, name):
    _assert_split_ahead_exact(Schedule(max_segment=16), _fdeps_input(bir_json.load(KERNELS / name)))


@pytest.mark.parametrize("max_segment", [7, 50])
def test_large_matmul_schedule_split_ahead_of_build_fdeps_equals_whole(low_schedule, max_segment):
    outs = _assert_split_ahead_exact(Schedule(max_segment=max_segment), _fdeps_input(large_matmul_like(6, 4, 8)))
    assert outs is not None and len(outs) >= 2


def test_schedule_does_not_split_ahead_of_edges_it_would_not_see(low_schedule):
    """build_fdeps keeps edges it is given (keep_existing) and a part unions its rows' edges with its own: with
    edges in the input, the parts cut before build_fdeps could differ, so the split waits for it."""
    m = BuildFDeps().run(_fdeps_input(large_matmul_like(6, 4, 8)))[0]  # edges, as without clear_inst_deps
    assert any(len(fn.deps) for fn in m.functions)
    assert Schedule(max_segment=50).split_ahead(m) is None
    assert Schedule(max_segment=50).split_refs(BuildFDeps(keep_existing=True).run(m)[0]) is not None


# ----------------------------------------------------------------------------- address_rotation_sb after schedule


@pytest.fixture
def low_rotation(monkeypatch, low_schedule):
    """The rotation's rescheduling splits small kernels, in segments of 20 rows (the serial run alike)."""
    monkeypatch.setattr(address_rotation, "MAX_SEGMENT", 20)


def _post_schedule_input(m: Module) -> Module:
    """A kernel as the post-schedule SB pass meets it: scheduled (attribute 12), PSUM rotated again."""
    out = Schedule().run(_scheduled_input(m))[0]
    return stages.make_pass("address_rotation_psum_post_schedule").run(out)[0]


@pytest.mark.parametrize("compare_limit", [0, 20_000])
def test_post_schedule_rotation_reschedules_in_parts(low_rotation, compare_limit):
    """One band batch: the split rotates, the schedule parts reschedule, the carrier brings the rotated
    module to the merge; the result is run's (and computes what the input computes)."""
    m = _post_schedule_input(large_matmul_like(4, 3, 5))
    p = stages.make_pass("address_rotation_sb", compare_limit=compare_limit)
    parts, serial, merged = assert_exact(p, m)
    assert parts is not None and sum(is_carrier(x) for x in parts) == 1 and len(parts) > 2
    assert p.run(m)[1]["rescheduled"] == 1
    inputs = random_inputs(m, seed=5)
    assert same_outputs(run(m, inputs), run(merged, inputs))
    verify(merged)  # the verifier's rules hold after the parts' rescheduling too


def test_post_schedule_rotation_that_overlaps_live_memory_is_reverted_in_parts_as_whole(low_rotation, monkeypatch):
    """The carrier part asks whether the rotated function overlaps live memory locations (beside the schedule
    parts, not in the merge); a rotation that does is reverted by the merge exactly as by ``run``."""
    from tusk.ir import verify as verifier

    m = _post_schedule_input(large_matmul_like(4, 3, 5))
    inputs = set(map(id, m.functions))
    asked = []

    def overlaps(fn):  # every rotated function overlaps, the input's never
        asked.append(fn.name)
        return [] if id(fn) in inputs else ["overlap"]

    monkeypatch.setattr(verifier, "live_overlap_problems", overlaps)
    monkeypatch.setattr(address_rotation, "live_overlap_problems", overlaps)
    p = stages.make_pass("address_rotation_sb")
    parts, serial, merged = assert_exact(p, m)
    carrier = next(x for x in parts if is_carrier(x))
    assert p.run(carrier)[1] == {"overlapping": [k for k, n in carrier.attributes[CARRIER_KEY]["moved"] if n]}
    assert p.run(m)[1]["reverted"] == 1 and p.run(m)[1]["rotations"] == 0
    assert content_hash(merged) == content_hash(m)  # the function stays as it came
    assert asked


def test_post_schedule_rotation_of_a_small_kernel_stays_one_task(low_schedule):
    m = _post_schedule_input(large_matmul_like(2, 2, 2))
    assert stages.make_pass("address_rotation_sb").split(m) is None  # one segment: nothing to cut


def test_schedule_parts_beyond_the_compare_limit_run_one_priority(low_schedule):
    m = _scheduled_input(large_matmul_like(4, 3, 5))
    for limit, wanted in ((0, 1), (10**6, 2)):
        parts = Schedule(max_segment=20, compare_limit=limit).split(m)
        assert parts is not None
        out, _ = Schedule(max_segment=20, compare_limit=limit).run(parts[0])
        assert len(out.attributes["schedule_part"]["orders"]) == wanted
