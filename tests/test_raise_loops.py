"""raise_loops: KLR's counted register loops become static BIR loops, and nothing a kernel computes changes.

Every traced NKI kernel of examples/nki/tusk.toml and every KLR kernel of
examples/kernels/ is translated, raised and run in the interpreter before
and after (bit-identical outputs, memories seeded alike), verified, then
unrolled: the traced loops are flattened and the timing model gives a
makespan.  Hand-built kernels (tests/klr_loops.py) cover the shapes that are
raised and the ones that must stay: a bound read from memory, a loop
register read by something other than an access, a loop inside a loop that
stays, a runtime ``if``, a zero-trip loop, out-of-bounds offsets.  Planted
bugs show the equality check catches a wrong trip count.
"""

from __future__ import annotations

import math
import tomllib
from pathlib import Path

import numpy as np
import pytest

from tests import klr_loops
from tusk import stages
from tusk.examples import klr_kernels
from tusk.examples.generate import KERNELS
from tusk.ir.enums import LOOP_OPCODES, FnKind, Op
from tusk.ir.errors import VerifyError
from tusk.ir.module import Module
from tusk.ir.verify import verify
from tusk.sim.interp import random_inputs, run, same_outputs
from tusk.sim.timing import makespan, simulate
from tusk.stages import raise_loops as rl
from tusk.stages.build_fdeps import BuildFDeps
from tusk.stages.host import host_module_for
from tusk.stages.translate_nki_ast_to_bir import TranslateNKIASTToBIR

ROOT = Path(__file__).resolve().parent.parent
NKI = ROOT / "examples" / "nki"
TRACED = tomllib.loads((NKI / "tusk.toml").read_text())["kernels"]
KLR_FILES = sorted(p.name for p in KERNELS.iterdir() if p.suffix == ".klr")
BRANCHES = (Op.CompareAndBranch, Op.UnconditionalBranch)


def _raise(module: Module) -> tuple[Module, dict]:
    out, stats = stages.make_pass("raise_loops").run(module)
    verify(out)
    return out, stats


def _count(module: Module, opcodes) -> int:
    return sum(int(np.isin(fn.insts["opcode"], list(opcodes)).sum()) for fn in module.functions)


def _unroll(module: Module) -> Module:
    for step in ("heuristic_unroll", "unroll"):
        module, _ = stages.make_pass(step).run(module)
        verify(module)
    return module


def _same(a: Module, b: Module, inputs) -> bool:
    return same_outputs(run(a, inputs, seed=9), run(b, inputs, seed=9))


@pytest.fixture(scope="module")
def traced(tmp_path_factory) -> dict[str, Module]:
    """Every kernel of examples/nki/tusk.toml, traced and translated."""
    from tusk.frontend import trace_file

    d = tmp_path_factory.mktemp("traced")
    out = {}
    for name, k in TRACED.items():
        path = d / f"{name}.klr"
        path.write_bytes(trace_file(NKI / k["file"], k.get("function"), k["inputs"], tuple(k.get("grid", ()))))
        out[name] = TranslateNKIASTToBIR().run(host_module_for(str(path), 0, str(d / name)))[0]
    return out


# ----------------------------------------------------------------------------- the corpus


@pytest.mark.parametrize("name", sorted(TRACED))
def test_traced_kernel_keeps_its_outputs_and_every_loop_is_raised_then_unrolled(name, traced):
    before = traced[name]
    verify(before)
    after, stats = _raise(before)
    inputs = random_inputs(before, seed=3)
    assert _same(before, after, inputs), f"{name}: raise_loops changed the outputs"
    # every affine_range loop the front end writes is counted: all are raised, no branch is left
    assert stats["raised"] == stats["loops"] == _count(before, {Op.CompareAndBranch}) // 2
    assert _count(after, BRANCHES) == 0 and stats["unstructured_functions"] == 0
    assert _count(after, {Op.Loop}) == stats["loops"]
    # the unroll passes now flatten them, and the timing model times the result
    flat = _unroll(after)
    assert _count(flat, LOOP_OPCODES | set(BRANCHES)) == 0
    assert _same(before, flat, inputs), f"{name}: the unrolled kernel computes something else"
    tl = simulate(BuildFDeps().run(flat)[0])
    assert 0 < tl.lower_bound <= tl.makespan < math.inf
    kernel = [t for t in tl.calls.values()] or [tl]  # the kernel's own timeline: every instruction timed in order
    assert sum(len(k.end) for k in kernel) == sum(len(f.insts) for f in flat.functions if f.kind == FnKind.NKI)
    assert all((k.start <= k.end).all() and k.end.max() <= k.makespan for k in kernel)
    if stats["loops"]:
        kept = _unroll(before)  # without raise_loops the register loops stay and cannot be timed
        assert kept.n_insts() == before.n_insts() and makespan(BuildFDeps().run(kept)[0]) is None


@pytest.mark.parametrize("name", KLR_FILES)
def test_klr_corpus_kernel_keeps_its_outputs(name, tmp_path):
    stem = Path(name).stem
    for core in range(2 if stem == "lnc2_matmul" else 1):
        before = TranslateNKIASTToBIR().run(host_module_for(str(KERNELS / name), core, str(tmp_path / str(core))))[0]
        after, stats = _raise(before)
        inputs = klr_kernels.inputs_for(stem, seed=5)
        assert _same(before, after, inputs)
        assert _count(after, {Op.Loop}) == stats["raised"]
        if stem == "dynamic_loop":  # `for i < ntiles`, ntiles read from a tensor: not a counted loop
            assert stats["loops"] == 1 and stats["kept"] == 1 and stats["raised"] == 0
            assert _count(after, BRANCHES) == _count(before, BRANCHES)
            assert after == before


# ----------------------------------------------------------------------------- hand-built shapes

CASES = {
    # name: (builder, raised, kept)
    "emitter_form": (lambda: klr_loops.tiles(), 1, 0),
    "mult_form": (lambda: klr_loops.tiles(form="mult"), 1, 0),
    "jump_latch": (lambda: klr_loops.tiles(latch="jump"), 1, 0),
    "step_2": (lambda: klr_loops.tiles(step=2), 1, 0),
    # steps that do not divide the range: a `<` / `>` loop runs ceil(range / step) times (0, 2, 4; 4, 2, 0)
    "step_2_uneven": (lambda: klr_loops.tiles(n_tiles=5, step=2), 1, 0),
    "reversed_step_2_uneven": (lambda: klr_loops.tiles(n_tiles=5, start=4, step=-2, stop=-1, rel="gt_reg"), 1, 0),
    "reversed_gt": (lambda: klr_loops.tiles(start=3, step=-1, stop=-1, rel="gt_reg"), 1, 0),
    "le": (lambda: klr_loops.tiles(stop=2, rel="le_reg"), 1, 0),
    "ne": (lambda: klr_loops.tiles(rel="ne_reg"), 1, 0),
    "nested": (lambda: klr_loops.grid(), 2, 0),
    "bound_from_memory": (lambda: klr_loops.tiles(bound="memory"), 0, 1),
    "counter_read_after": (lambda: klr_loops.tiles(save_counter=True), 0, 1),
    "form_read_by_a_store": (lambda: klr_loops.tiles(save_form=True), 0, 1),
    "zero_trip": (lambda: klr_loops.tiles(start=5, stop=4), 0, 1),
    "triangular": (lambda: klr_loops.grid(m=3, n=3, triangular=True), 0, 2),
}


def _inputs(module: Module) -> dict:
    inputs = random_inputs(module, seed=1)
    if "ntiles" in inputs:
        inputs["ntiles"][:] = 3
    if "flag" in inputs:
        inputs["flag"][:] = 1
    return inputs


@pytest.mark.parametrize("case", sorted(CASES))
def test_hand_built_loops_are_raised_or_kept(case, tmp_path):
    build, raised, kept = CASES[case]
    before = klr_loops.translated(build(), tmp_path)
    after, stats = _raise(before)
    assert (stats["raised"], stats["kept"]) == (raised, kept)
    assert _same(before, after, _inputs(before))
    assert _count(after, {Op.Loop}) == raised
    if not raised:  # a kept loop keeps every register update and compare
        assert _count(after, {Op.RegisterAlu, Op.RegisterMove, Op.CompareAndBranch}) == \
            _count(before, {Op.RegisterAlu, Op.RegisterMove, Op.CompareAndBranch})
    else:
        assert _count(after, BRANCHES + (Op.RegisterAlu, Op.RegisterMove)) == 0
        flat = _unroll(after)
        assert _same(before, flat, _inputs(before)) and makespan(BuildFDeps().run(flat)[0]) is not None


def test_random_nests_keep_their_outputs_raised_and_unrolled(tmp_path):
    """Random 1-3 deep nests (starts, steps, relations, zero trips, a counter read after its loop)."""
    raised = kept = 0
    for seed in range(80):
        before = klr_loops.translated(klr_loops.random_nest(seed), tmp_path / str(seed))
        after, stats = _raise(before)
        inputs = random_inputs(before, seed=seed)
        want = run(before, inputs)
        assert same_outputs(want, run(after, inputs)), f"seed {seed}: {stats}"
        assert same_outputs(want, run(_unroll(after), inputs)), f"seed {seed}: {stats}"
        raised, kept = raised + stats["raised"], kept + stats["kept"]
    assert raised > 60 and kept > 30  # both paths are exercised


def test_a_raised_loop_has_the_trip_count_and_offsets_of_the_register_loop(tmp_path):
    after, _ = _raise(klr_loops.translated(klr_loops.tiles(start=3, step=-1, stop=-1, rel="gt_reg"), tmp_path))
    fn = after.functions[1]
    (loop,) = np.flatnonzero(fn.insts["opcode"] == Op.Loop).tolist()
    ax = fn.loop_axis(loop)
    assert (ax.name, ax.lb, ax.ub, ax.stride) == ("loop.1", 0, 4, 1)
    # the tile of iteration k is 3 - k: rows (3 - k) * 128 of 64 elements
    sym = [o.sym.offset for i in range(fn.n_insts) for o in fn.inst(i).operands if o.sym is not None]
    assert sym and all(e.eval({"loop.1": k}) == (3 - k) * 128 * 64 for e in sym for k in range(4))


def test_a_runtime_if_leaves_the_function_as_it_is(tmp_path):
    before = klr_loops.translated(klr_loops.runtime_if(), tmp_path)
    after, stats = _raise(before)
    assert stats["unstructured_functions"] == 1 and stats["raised"] == 0
    assert after == before


def test_an_out_of_bounds_register_offset_stays_dynamic():
    """KLR fixture 03 moves row offsets of 8192 * i with a row coefficient: its DMA leaves the tensor."""
    path = ROOT / "tests" / "data" / "klr" / "03_dynamic_loop.klr"
    before = TranslateNKIASTToBIR().run(host_module_for(str(path), 0, ""))[0]
    after, stats = _raise(before)
    assert stats["raised"] == 0 and stats["kept"] == 1
    inputs = random_inputs(before, seed=2)
    with pytest.raises(Exception, match="outside memory location") as e1:
        run(before, inputs)
    with pytest.raises(Exception, match="outside memory location") as e2:
        run(after, inputs)
    assert str(e1.value) == str(e2.value)


def test_raising_twice_changes_nothing(traced, tmp_path):
    for module in (traced["matmul_tiled"], traced["attention"],
                   klr_loops.translated(klr_loops.tiles(bound="memory"), tmp_path)):
        once, _ = _raise(module)
        twice, stats = _raise(once)
        assert twice == once and stats["instructions_removed"] == 0


def test_the_default_pipeline_raises_after_translate():
    from tusk.workflows.pipeline import DEFAULT_ORDER

    assert DEFAULT_ORDER[:3] == ("translate_nki_ast_to_bir", "raise_loops", "heuristic_unroll")


# ----------------------------------------------------------------------------- planted bugs


def test_planted_wrong_trip_count_is_caught(monkeypatch, tmp_path):
    before = klr_loops.translated(klr_loops.grid(), tmp_path)
    inputs = _inputs(before)
    good, _ = _raise(before)
    assert _same(before, good, inputs)
    real = rl._trip
    monkeypatch.setattr(rl, "_trip", lambda *a: None if real(*a) is None else real(*a) - 1)
    bad, stats = stages.make_pass("raise_loops").run(before)
    assert stats["raised"] == 2
    assert not _same(before, bad, inputs)


def test_planted_missing_bounds_check_is_caught_by_the_verifier(monkeypatch):
    path = ROOT / "tests" / "data" / "klr" / "03_dynamic_loop.klr"
    before = TranslateNKIASTToBIR().run(host_module_for(str(path), 0, ""))[0]
    monkeypatch.setattr(rl._Fn, "in_bounds", lambda *a: True)
    bad, stats = stages.make_pass("raise_loops").run(before)
    assert stats["raised"] == 1
    with pytest.raises(VerifyError, match="outside memory location out0"):
        verify(bad)
