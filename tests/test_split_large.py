"""Splitting one large function: unroll's parts by top-level loop and iteration range give the serial result.

Split thresholds are class attributes of the pass (they never change output); the tests lower them so
small kernels split the way examples/large_kernels/large_matmul.json does.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.nests import tusk_nest
from tests.programs import every_family_module, tiled_exp_module
from tusk.examples import bir_kernels
from tusk.ir import bir_json
from tusk.ir.builder import Builder
from tusk.ir.serial import content_hash, module_from_parts, module_to_parts
from tusk.ir.verify import verify
from tusk.sim.interp import random_inputs, run, same_outputs
from tusk.stages.unroll import Unroll

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ROOT / "examples" / "kernels"
LARGE = ROOT / "examples" / "large_kernels" / "large_matmul.json"


@pytest.fixture
def low_threshold(monkeypatch):
    monkeypatch.setattr(Unroll, "split_min", 2)
    monkeypatch.setattr(Unroll, "split_part_size", 7)
    monkeypatch.setattr(Unroll, "split_max_parts", 6)


def _through_store(m):
    """What a part becomes once written to and read from the store (canonical pools)."""
    return module_from_parts(*module_to_parts(m))


def split_run_merge(p, m):
    parts = p.split(m)
    if parts is None:
        return None, p.run(m)[0]
    outs = [_through_store(p.run(_through_store(x))[0]) for x in parts]
    return parts, p.merge(m, outs, [{} for _ in outs])[0]


def assert_exact(p, m):
    serial, _ = p.run(m)
    parts, merged = split_run_merge(p, m)
    assert content_hash(merged) == content_hash(serial)
    assert bir_json.dumps(merged) == bir_json.dumps(serial)
    return parts, serial, merged


def large_matmul_like(mt=4, nt=3, kt=5):
    """large_matmul.json's program (mi > ni > (ki > load, load, matmul), evict, store) with small trip counts
    and tensors sized to them (the interpreter then runs megabytes, not large_matmul's gigabytes)."""
    small = bir_kernels.large_matmul(mt=mt, kt=kt, nt=nt)[0]
    assert small.n_insts() == bir_json.load(LARGE).n_insts()
    return small


def test_large_kernel_splits_by_iteration_range_and_merges_exactly(low_threshold):
    m = large_matmul_like()
    parts, serial, _ = assert_exact(Unroll(), m)
    assert parts is not None and len(parts) >= 2
    verify(serial)
    for part in parts:
        verify(part)  # what the build stores as a part's input


def test_a_cut_function_beside_others(low_threshold):
    m = large_matmul_like(3, 2, 4)
    second = tiled_exp_module().functions[0]
    second.name = "other"
    m.functions.append(second)
    parts, _, _ = assert_exact(Unroll(), m)
    assert len(parts) > 2


def test_nest_splits_exactly_at_every_part_size(monkeypatch):
    m = tusk_nest(5, 3, 4)
    monkeypatch.setattr(Unroll, "split_min", 2)
    for size, most in ((1, 3), (13, 16), (40, 4), (59, 16), (1000, 16)):
        monkeypatch.setattr(Unroll, "split_part_size", size)
        monkeypatch.setattr(Unroll, "split_max_parts", most)
        parts, _, _ = assert_exact(Unroll(), m)
        assert parts is not None and 2 <= len(parts) <= max(most, 2)


def test_small_kernels_stay_one_task():
    assert Unroll().split(large_matmul_like()) is None
    m = bir_json.load(LARGE)
    parts = Unroll().split(m)  # 1.24M instructions: above the default threshold
    assert parts is not None and len(parts) >= 2


def test_top_level_units_and_a_cut_loop(low_threshold):
    b = Builder("units")
    x = b.dram("x", (128, 64), kind="ExternalInput")
    y = b.dram("y", (128, 64 * 6), kind="ExternalOutput")
    t = b.sbuf("t", (128, 64), addr=0)
    b.dma(t.ap(), x.tile(0, 128, 0, 64), name="first")
    with b.loop("i", 0, 6) as i:
        b.dma(y.tile(0, 128, i * 64, 64), t.ap(), name="out")
    b.dma(t.ap(), x.tile(0, 128, 0, 64), name="last")
    m = b.module()
    assert_exact(Unroll(), m)


@pytest.mark.parametrize("build", [every_family_module, tiled_exp_module], ids=["families", "tiled_exp"])
def test_builder_programs(low_threshold, build):
    assert_exact(Unroll(), build())


BIR_KERNELS = sorted(p.name for p in KERNELS.glob("*.json"))


@pytest.mark.parametrize("name", BIR_KERNELS)
def test_corpus_kernel_split_equals_serial(low_threshold, name):
    m = bir_json.load(KERNELS / name)
    _parts, serial, merged = assert_exact(Unroll(), m)
    inputs = random_inputs(m, seed=5)
    assert same_outputs(run(serial, inputs), run(merged, inputs))


def test_interpreter_agrees_on_a_split_large_kernel(low_threshold):
    m = large_matmul_like(3, 2, 3)
    parts, merged = split_run_merge(Unroll(), m)
    assert parts is not None
    inputs = random_inputs(m, seed=1)
    assert same_outputs(run(m, inputs), run(merged, inputs))


def test_build_with_two_workers_equals_in_process(tmp_path):
    """The build fans the parts out over 2 workers and writes the bytes of an in-process build, and of
    a build whose unroll does not split."""
    import tusk
    from tests.passes_for_tests import pipeline_toml

    src = tmp_path / "src"
    src.mkdir()
    (src / "mm.json").write_text(bir_json.dumps(large_matmul_like(5, 4, 6)))
    outs = {}
    for label, unroll, workers in (("split2", "test_unroll_eager_split", 2), ("split0", "test_unroll_eager_split", 0),
                                   ("whole", "unroll", 0)):
        pipe = tmp_path / f"{label}.toml"
        pipe.write_text(pipeline_toml(("translate_nki_ast_to_bir", {}), (unroll, {}), ("build_fdeps", {})))
        out = tmp_path / f"out-{label}"
        res = tusk.compile_directory(src, out, pipeline=pipe, workers=workers, cache_dir=tmp_path / f"cache-{label}",
                                     report=False)
        assert res.exit_code == 0
        outs[label] = {p.relative_to(out).as_posix(): p.read_bytes().replace(str(out).encode(), b"OUT")
                       for p in sorted(out.rglob("*.bir.json"))}
        if label != "whole":
            steps = [s for k in res.to_json()["kernels"] for u in k.get("units", []) for s in u["steps"]]
            assert any((s.get("stats") or {}).get("parts", 0) >= 2 for s in steps), steps
    assert outs["split2"] and outs["split2"] == outs["split0"] == outs["whole"]


# ----------------------------------------------------------------------------- dependence edges


def _edge_nest(stride: int = 1):
    from tusk.ir.enums import Edge

    b = Builder("edges")
    x = b.dram("x", (128, 64 * 8), kind="ExternalInput")
    y = b.dram("y", (128, 64 * 8), kind="ExternalOutput")
    t = b.sbuf("t", (128, 64), addr=0)
    u = b.sbuf("u", (128, 64), addr=256)
    first = b.dma(t.ap(), x.tile(0, 128, 0, 64), name="first")
    lb, ub = (0, 8) if stride > 0 else (7, -1)
    with b.loop("i", lb, ub, stride) as i, b.loop("j", 0, 3):
        ld = b.dma(t.ap(), x.tile(0, 128, i * 64, 64), name="ld")
        op = b.tensor_scalar(u.ap(), t.ap(), "mult", 2.0, name="dbl")
        st = b.dma(y.tile(0, 128, i * 64, 64), u.ap(), name="st")
    b.fn.add_dep(ld, op, Edge.Flow)
    b.fn.add_dep(op, st, Edge.Flow)
    return b, (first, ld, op, st)


@pytest.mark.parametrize("stride", [1, -1])
def test_edges_inside_a_cut_loop_stay_in_their_part(low_threshold, stride):
    b, _ = _edge_nest(stride)
    parts, serial, _ = assert_exact(Unroll(), b.module())
    assert parts is not None and len(parts) >= 2 and len(serial.functions[0].deps) == 2 * 8 * 3


def test_edges_that_would_cross_parts_keep_the_function_whole(low_threshold):
    from tusk.ir.enums import Edge
    from tusk.ir.module import CARRIED_LOOP

    b, (first, ld, op, st) = _edge_nest()
    b.fn.add_dep(first, ld, Edge.Flow)  # into every iteration of the loop
    assert Unroll().split(b.module()) is None
    assert_exact(Unroll(), b.module())
    b, (first, ld, _op, st) = _edge_nest()
    b.fn.carried.append((st, ld, Edge.Flow, CARRIED_LOOP, b.fn.intern((1,))))  # iteration k-1 -> k
    assert Unroll().split(b.module()) is None
    assert_exact(Unroll(), b.module())


def test_what_is_not_cut(low_threshold):
    from tusk.stages.unroll import clone_counts
    from tusk.stages.unroll_split import plan_split

    b = Builder("flat")
    t = b.sbuf("t", (128, 4), addr=0)
    for _ in range(5):
        b.memset(t.ap(), 0)
    fn = b.module().functions[0]
    assert plan_split(fn, "all", clone_counts(fn), 2, 1, 8) is None  # no loop: nothing to expand
    m = tusk_nest(3, 2, 2)
    fn = m.functions[0]
    assert plan_split(fn, "all", clone_counts(fn), 10**6, 1, 8) is None  # below the threshold
    assert plan_split(fn, "all", clone_counts(fn), 2, 10**6, 8) is not None  # at least two parts above it
