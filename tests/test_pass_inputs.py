"""Passes never change their input: a build keeps modules in memory and hands the same objects to the next
step, and a pass that changes nothing may return the input's own functions (the build then skips hashing
and storing its output).  Every pass of the default pipeline, whole and split, on corpus kernels."""

from __future__ import annotations

import hashlib
import shutil

import pytest

from tusk import stages
from tusk.examples.generate import KERNELS
from tusk.ir.module import SCHEMAS, Module
from tusk.stages.clear_inst_deps import clear_inst_deps
from tusk.stages.host import host_module_for
from tusk.workflows.pipeline import DEFAULT_ORDER

NAMES = ("tiled_matmul.json", "rmsnorm.klr", "tiled_softmax.json", "banded_exp.json")


def fingerprint(module: Module) -> str:
    """Every byte of every column and every pool item, in place (not the canonical content hash)."""
    h = hashlib.sha256(repr((module.arch, module.version, module.attributes, module.artifact_dir)).encode())
    for fn in module.functions:
        h.update(repr((fn.name, fn.kind, sorted(fn.attrs), fn.extras)).encode())
        for table in SCHEMAS:
            t = getattr(fn, table)
            for name in t.names:
                h.update(name.encode())
                h.update(t.column(name).tobytes())
        for pool in (fn.strings, fn.patterns, fn.values):
            h.update(repr(list(pool.items)).encode())
    return h.hexdigest()


@pytest.mark.parametrize("name", NAMES)
def test_no_pass_changes_its_input(name, tmp_path):
    corpus = tmp_path / "k"
    shutil.copytree(KERNELS, corpus)
    cur = host_module_for(str(corpus / name), 0, str(tmp_path / "out"))
    for step in DEFAULT_ORDER:
        p = stages.make_pass(step)
        before = fingerprint(cur)
        out, _ = p.run(cur)
        assert fingerprint(cur) == before, f"{name}: {step} changed its input"
        parts = p.split(cur) if hasattr(p, "split") else None
        if parts:
            ran = [p.run(q) for q in parts]
            p.merge(cur, [o for o, _ in ran], [s for _, s in ran])
            assert fingerprint(cur) == before, f"{name}: {step} split/merge changed its input"
        cur = out


def test_a_pass_that_changes_nothing_shares_the_input_functions():
    from tusk.examples import bir_kernels
    from tusk.stages.address_rotation_dram import AddressRotationDRAM

    module = bir_kernels.tiled_exp(tiles=4)[0]
    out = clear_inst_deps(module)
    assert all(a is b for a, b in zip(out.functions, module.functions) if not len(a.deps) and not len(a.carried))
    out, _ = AddressRotationDRAM(disable_dram_rotation=True).run(module)
    assert all(a is b for a, b in zip(out.functions, module.functions))
