"""The whole default pipeline on every shipped kernel: verified after each step, and the interpreter
computes the same outputs after each rotation pass, the scheduler and the last step as after translation."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tusk import stages
from tusk.examples import klr_kernels
from tusk.examples.generate import KERNELS
from tusk.ir.verify import verify
from tusk.sim.interp import random_inputs, run, same_outputs
from tusk.stages.host import host_module_for
from tusk.workflows.pipeline import DEFAULT_ORDER

FILES = sorted(p.name for p in KERNELS.iterdir() if p.suffix in (".json", ".klr"))
CHECKED = {"address_rotation_psum", "address_rotation_sb", "address_rotation_dram", "schedule",
           "address_rotation_psum_post_schedule"}
# kernels with 64+ tiles: interpreted before and after the whole pipeline only (each run takes a while)
LARGE = {"tiled_add.json", "tiled_matmul_large.json", "tiled_softmax_large.json", "tiled_rmsnorm.json",
         "add_tiles.klr", "matmul_tiles.klr", "rmsnorm_tiles.klr"}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("corpus")
    shutil.copytree(KERNELS, d, dirs_exist_ok=True)
    return d


def _inputs(name: str, module, seed: int):
    stem = Path(name).stem
    if name.endswith(".klr") and stem in klr_kernels.KERNELS:
        return klr_kernels.inputs_for(stem, seed=seed)
    return random_inputs(module, seed)


@pytest.mark.parametrize("name", FILES)
def test_default_pipeline_keeps_every_kernel_meaning(name, corpus):
    cores = 2 if name == "lnc2_matmul.klr" else 1
    for core in range(cores):
        module = host_module_for(str(corpus / name), core, str(corpus / "out" / f"{name}.{core}"))
        cur, _ = stages.make_pass(DEFAULT_ORDER[0]).run(module)
        verify(cur)
        inputs = _inputs(name, cur, seed=11)
        want = run(cur, inputs)
        for step in DEFAULT_ORDER[1:]:
            cur, stats = stages.make_pass(step).run(cur)
            verify(cur)
            if step in CHECKED and name not in LARGE:
                assert same_outputs(want, run(cur, inputs)), f"{name}: {step} changed the outputs"
        assert same_outputs(want, run(cur, inputs)), f"{name}: the pipeline changed the outputs"
