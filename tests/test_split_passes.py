"""Splitting the straight-line passes of one big function: parts + merge equal the whole run.

build_fdeps splits by row ranges (cross-range edges from the exposed accesses of each part), schedule by
whole segments.  Split thresholds are class attributes (they never change output); the tests lower them
so small kernels split the way examples/large_kernels/large_matmul.json does, and compare content hash
and BIR-JSON bytes with the unsplit run.
"""

from __future__ import annotations

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
from tusk.stages.deps import BuildFDeps
from tusk.stages.deps_split import plan_ranges, splits, written_spaces
from tusk.stages.unroll import Unroll


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
    assert len(r) == 5 and r[0][0] == 0 and r[-1][1] == 1_236_992
    assert all(b == c for (_, b), (c, _) in zip(r, r[1:]))
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
        parts, _, merged = assert_exact(BuildFDeps(), Module([fn]))
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


def test_a_cross_part_conflict_through_an_untouched_middle(low_threshold):
    """A value written in the first part and read in the last one, with parts between that never touch it."""
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
