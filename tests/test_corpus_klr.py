"""The shipped KLR kernels: front-end shaped, reproducible, translated, verified, and computing what they claim."""

from __future__ import annotations

import numpy as np
import pytest

from tusk.examples import klr_kernels
from tusk.examples.generate import KERNELS
from tusk.ir import klr
from tusk.ir.enums import Mem
from tusk.ir.verify import verify
from tusk.sim.interp import run
from tusk.stages.host import host_module_for
from tusk.stages.klr_dynamic import is_access_dynamic
from tusk.stages.translate_nki_ast_to_bir import TranslateNKIASTToBIR

CORPUS = klr_kernels.corpus_bytes()
NAMES = sorted(CORPUS)





@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory):
    """The corpus as generate.py lays it out: <name>.klr plus extra_files() (shared constants)."""
    d = tmp_path_factory.mktemp("klr_corpus")
    for name, (data, _, _) in CORPUS.items():
        (d / f"{name}.klr").write_bytes(data)
    for rel, data in klr_kernels.extra_files().items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_bytes(data)
    return d


def _cores(name: str) -> int:
    return len(klr.read_klr(CORPUS[name][0]).contents.kernel.bodies)


def test_required_kernels_are_present():
    assert {"tensor_add", "rmsnorm", "attention", "moe_gather", "dynamic_loop", "lnc2_matmul"} <= set(CORPUS)
    for name, (data, doc, count) in CORPUS.items():
        assert data.startswith(bytes.fromhex("d9d9f783 00000c".replace(" ", ""))) and doc and count > 0


def test_generated_files_match_the_generator():
    for name, (data, _, _) in CORPUS.items():
        path = KERNELS / f"{name}.klr"
        assert path.exists() and path.read_bytes() == data, f"run python -m tusk.examples.generate ({path})"


def test_corpus_is_deterministic():
    assert klr_kernels.corpus_bytes() == CORPUS and klr_kernels.extra_files() == klr_kernels.extra_files()


@pytest.mark.parametrize("name", NAMES)
def test_kernels_look_like_front_end_output(name):
    kernel = klr.read_klr(CORPUS[name][0]).contents.kernel
    assert all(t.address.parOffset is None and t.address.freeOffset is None
               for t in (*kernel.inputs, *kernel.outputs))
    count = 0
    for body in kernel.bodies:
        for block in body:
            for stmt in block.body:
                count += 1
                assert stmt.name and stmt.pos.filename
                for _, ref in klr.tensor_operands(stmt.op.op):
                    assert isinstance(ref, klr.types.TensorRef_abstract)
                    assert isinstance(ref.access, klr.types.Access_birPattern)
                    t = ref.access.access.tensor
                    if t.address.memory.name in ("sbuf", "psum"):
                        assert t.address.parOffset is not None and t.address.freeOffset is not None
    assert count == CORPUS[name][2]


def test_corpus_exercises_both_dynamic_offsets():
    def dynamic_refs(name):
        kernel = klr.read_klr(CORPUS[name][0]).contents.kernel
        return [ref.access.access for b in kernel.bodies[0] for s in b.body
                for _, ref in klr.tensor_operands(s.op.op) if is_access_dynamic(ref)]

    gathers = dynamic_refs("moe_gather")
    assert len(gathers) == 1 and gathers[0].vectorOffset is not None and gathers[0].indirectDim == 0
    scalars = dynamic_refs("dynamic_loop")
    assert len(scalars) == 2 and all(isinstance(b.scalarOffset, klr.types.ScalarOffset_reg) for b in scalars)


@pytest.mark.parametrize("name", NAMES)
def test_kernel_translates_verifies_and_matches_its_reference(name, corpus_dir):
    inputs = klr_kernels.inputs_for(name, seed=5)
    want = klr_kernels.REFERENCES[name](inputs)
    cores = _cores(name)
    got: dict[str, np.ndarray] = {}
    for core in range(cores):
        art = corpus_dir / "out" / f"{name}.{core}"
        module = host_module_for(str(corpus_dir / f"{name}.klr"), core, str(art))
        out, stats = TranslateNKIASTToBIR().run(module)
        verify(out)
        assert stats["expanded"] == 1 and stats["klir_operators"] == CORPUS[name][2] // cores
        res = run(out, inputs, strict=True)
        for key, value in res.items():
            if cores == 1:
                got[key] = value
            else:  # core c owns rows [c n, (c+1) n) of every output
                n = value.shape[0] // cores
                got.setdefault(key, np.zeros_like(value))[core * n:(core + 1) * n] = value[core * n:(core + 1) * n]
    assert set(got) == set(want)
    for key, value in want.items():
        scale = float(np.abs(value).max()) or 1.0
        np.testing.assert_allclose(got[key], value, rtol=2e-5, atol=2e-6 * scale)


def test_lnc_kernel_runs_from_the_host_module(corpus_dir):
    inputs = klr_kernels.inputs_for("lnc2_matmul", seed=6)
    want = klr_kernels.REFERENCES["lnc2_matmul"](inputs)["y"]
    for core in range(2):
        module = host_module_for(str(corpus_dir / "lnc2_matmul.klr"), core, str(corpus_dir / "out2" / str(core)))
        out, _ = TranslateNKIASTToBIR().run(module)
        y = run(out, inputs)["y"]
        rows = slice(128 * core, 128 * (core + 1))
        np.testing.assert_allclose(y[rows], want[rows], rtol=2e-5, atol=1e-5)


def test_lnc_kernel_bodies_differ_and_core_2_is_skipped(corpus_dir):
    path = str(corpus_dir / "lnc2_matmul.klr")
    fns = []
    for core in range(3):
        out, stats = TranslateNKIASTToBIR().run(host_module_for(path, core, str(corpus_dir / "out3")))
        fns.append(out.functions[1] if stats["expanded"] else None)
    assert fns[2] is None
    offsets = [[op.offset for i in range(len(f.insts)) for op in f.inst(i).ins if op.memloc_name == "x"]
               for f in fns[:2]]
    assert offsets == [[0], [128 * 128]]
    kinds = {f.memloc(m).name: f.memloc(m).tensor_kind for f in fns[:2] for m in range(len(f.memlocs))
             if f.memloc(m).mtype == Mem.DRAM}
    assert kinds == {"x": 0, "y": 3, "scratch": 7, "w_const": 6}
