"""Kernel files -> host modules: classification, placeholders, interfaces, file digests."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.programs import tiled_exp_module
from tusk.cache import Store
from tusk.ir import bir_json
from tusk.ir.builder import Builder
from tusk.ir.enums import DTYPE_NAMES, TENSOR_KIND_NAMES
from tusk.stages import host as stages_host
from tusk.workflows.kernels import discover, file_digests, given_host_module, host_module

KLR = Path(__file__).parent / "data" / "klr"


def _placeholder(module):
    fn = module.functions[0]
    rows = np.nonzero(fn.insts["opcode"] == 56)[0]
    assert len(rows) == 1
    return fn, fn.inst(int(rows[0]))


def _tensors(fn, ops):
    out = []
    for o in ops:
        m = o.memloc
        s = m.set
        out.append((m.name, DTYPE_NAMES[fn.sets.get("dtype", s)], list(fn.value(fn.sets.get("shape", s))),
                    TENSOR_KIND_NAMES[fn.sets.get("kind", s)]))
    return out


@pytest.fixture
def kernel_dir(tmp_path):
    d = tmp_path / "kernels"
    d.mkdir()
    shutil.copy(KLR / "01_dma_copy.klr", d)
    shutil.copy(KLR / "06_lnc2_shared.klr", d)
    shutil.copy(KLR / "neg_wrong_version.klr", d)
    bir_json.save(tiled_exp_module(tiles=2), d / "tiled.json")
    (d / "notes.txt").write_text("hello")
    (d / "other.json").write_text('{"hello": 1}')
    (d / "broken.json").write_text('{"functions": [')
    (d / "sub").mkdir()
    return d


def test_files_are_classified_and_nothing_is_silently_ignored(kernel_dir):
    kernels, skipped = discover(kernel_dir)
    by_name = {k.name: k for k in kernels}
    assert set(by_name) == {"01_dma_copy", "06_lnc2_shared", "neg_wrong_version", "tiled", "broken"}
    assert by_name["01_dma_copy"].fmt == "klr" and by_name["tiled"].fmt == "bir"
    assert by_name["06_lnc2_shared"].ncores == 2
    assert "Wrong KLR version" in by_name["neg_wrong_version"].error
    assert "neg_wrong_version.klr" in by_name["neg_wrong_version"].error
    assert "broken.json" in by_name["broken"].error and "malformed JSON" in by_name["broken"].error
    assert {p.path.name for p in skipped} == {"notes.txt", "other.json", "sub"}


def test_klr_kernel_becomes_a_host_module_with_one_placeholder(kernel_dir, tmp_path):
    kernels, _ = discover(kernel_dir)
    k = next(k for k in kernels if k.name == "01_dma_copy")
    m = host_module(k, 0)
    fn, inst = _placeholder(m)
    assert inst.opname == "NKIKLIRKernel"
    # locations are not content: the file is named within its directory, the artifact directory is bound later
    assert inst.attrs["klir_binary"] == k.path.name and inst.attrs["kernel_format"] == "klr"
    assert _tensors(fn, inst.ins) == [("in0", "float32", [128, 512], "ExternalInput")]
    assert _tensors(fn, inst.outs) == [("out0", "float32", [128, 512], "ExternalOutput")]
    assert m.neuron_core_id == 0 and m.artifact_dir == ""
    back = bir_json.loads(bir_json.dumps(m))
    assert back == m


def test_lnc_kernel_has_one_host_module_per_core(kernel_dir, tmp_path):
    kernels, _ = discover(kernel_dir)
    k = next(k for k in kernels if k.name == "06_lnc2_shared")
    mods = [host_module(k, c) for c in range(k.ncores)]
    assert [m.neuron_core_id for m in mods] == [0, 1]
    fn, inst = _placeholder(mods[1])
    assert _tensors(fn, inst.ins) == [("x", "bfloat16", [256, 128], "ExternalInput")]


def test_bir_json_kernel_inputs_come_from_its_first_function(kernel_dir, tmp_path):
    kernels, _ = discover(kernel_dir)
    k = next(k for k in kernels if k.name == "tiled")
    fn, inst = _placeholder(host_module(k, 0))
    assert inst.attrs["kernel_format"] == "bir"
    assert _tensors(fn, inst.ins) == [("x", "float32", [256, 64], "ExternalInput")]
    assert _tensors(fn, inst.outs) == [("y", "float32", [256, 64], "ExternalOutput")]


def test_bir_json_host_module_is_taken_as_it_is(tmp_path):
    d = tmp_path / "k"
    d.mkdir()
    b = Builder("main")
    x = b.dram("a", (128, 4), kind="ExternalInput")
    y = b.dram("b", (128, 4), kind="ExternalOutput")
    b.klir_kernel("inner.json", "bir", [x.ap()], [y.ap()])
    host = b.module()
    bir_json.save(host, d / "host.json")
    (d / "inner.json").write_text("{}")
    store = Store(tmp_path / "s")
    kernels, skipped = discover(d, store)
    k = next(k for k in kernels if k.name == "host")
    assert k.fmt == "host" and k.placeholders == {"inner.json": str(d / "inner.json")}
    assert "inner.json" in file_digests(k)
    given = given_host_module(k)
    _, inst = _placeholder(given)
    assert inst.attrs["klir_binary"] == "inner.json" and given.artifact_dir == ""
    assert given.n_insts() == host.n_insts()


def test_kernel_interface_is_memoised_by_file_digest(kernel_dir, tmp_path, monkeypatch):
    store = Store(tmp_path / "s")
    first = {k.name: k for k in discover(kernel_dir, store)[0]}
    parsed = []
    real = stages_host.read_interface
    monkeypatch.setattr(stages_host, "read_interface",
                        lambda path, kind=None: parsed.append(Path(path).stem) or real(path, kind))
    again = {k.name: k for k in discover(kernel_dir, store)[0]}
    assert sorted(parsed) == ["broken", "neg_wrong_version"]  # failures are not memoised
    for name in ("01_dma_copy", "06_lnc2_shared", "tiled"):
        assert (again[name].ins, again[name].outs, again[name].ncores, again[name].fmt) == \
            (first[name].ins, first[name].outs, first[name].ncores, first[name].fmt)


def test_file_digests_change_when_the_kernel_changes(kernel_dir):
    kernels, _ = discover(kernel_dir)
    k = next(k for k in kernels if k.name == "tiled")
    before = file_digests(k)
    bir_json.save(tiled_exp_module(tiles=3), kernel_dir / "tiled.json")
    k2 = next(k for k in discover(kernel_dir)[0] if k.name == "tiled")
    assert file_digests(k2) != before and list(before) == ["tiled.json"]  # named within its directory
