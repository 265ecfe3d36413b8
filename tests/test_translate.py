"""TranslateNKIASTToBIR: placeholders -> NKI functions + call sites, both paths, LNC cores, files, errors."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from tusk.frontend.klr_writer import KernelWriter
from tusk.ir import bir_json
from tusk.ir.builder import Builder
from tusk.ir.enums import FnKind, Op, TensorKind
from tusk.ir.errors import FormatError, PassError, TuskError
from tusk.ir.verify import verify
from tusk.sim.interp import run
from tusk.stages import make_pass
from tusk.stages.host import host_module_for
from tusk.stages.translate_nki_ast_to_bir import MSG_CORE_UNSET, TranslateNKIASTToBIR

KLR = Path(__file__).parent / "data" / "klr"
PASS = TranslateNKIASTToBIR()


def translate(module, **options):
    return TranslateNKIASTToBIR(**options).run(module)


def write(path: Path, k: KernelWriter) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(k.to_bytes())
    return path


def scale_kernel(name: str = "scale", factor: float = 3.0) -> KernelWriter:
    """y = x * factor, 128x16."""
    k = KernelWriter(name)
    x, y = k.input("x", (128, 16)), k.output("y", (128, 16))
    t = k.sbuf("t", (128, 16), addr=0)
    k.dma(t, x)
    k.tensor_scalar(t, t, "mult", factor)
    k.dma(y, t)
    return k


def lnc2_kernel(const_file: str | None = None) -> KernelWriter:
    """Two bodies: core c copies rows [64c, 64c+64) of x (+ a shared constant) to y."""
    k = KernelWriter("lnc2", cores=2)
    x, y = k.input("x", (128, 16)), k.output("y", (128, 16))
    t = k.sbuf("t", (64, 16), addr=0)
    w = k.shared_constant("w", (64, 16), "float32", const_file) if const_file else None
    c16 = k.sbuf("c16", (64, 16), addr=256)
    for c in range(2):
        with k.core(c):
            k.dma(t, x[64 * c:64 * (c + 1), :])
            if w is not None:
                k.dma(c16, w)
                k.tensor_tensor(t, t, c16, "add")
            k.dma(y[64 * c:64 * (c + 1), :], t)
    return k


def placeholder_rows(module, fn_index: int = 0) -> list[int]:
    fn = module.functions[fn_index]
    return np.nonzero(fn.insts["opcode"] == Op.NKIKLIRKernel)[0].tolist()


def call_sites(module, fn_index: int = 0) -> list:
    fn = module.functions[fn_index]
    return [fn.inst(int(i)) for i in np.nonzero(fn.insts["opcode"] == Op.NKIKernel)[0]]


# --------------------------------------------------------------------------- path A (KLR)


def test_klr_kernel_becomes_an_nki_function_and_a_call_site(tmp_path):
    path = write(tmp_path / "k" / "scale.klr", scale_kernel())
    art = tmp_path / "out"
    module = host_module_for(str(path), 0, str(art))
    before = bir_json.dumps(module)
    out, stats = translate(module)
    assert bir_json.dumps(module) == before  # the input is not mutated
    assert stats["expanded"] == 1 and stats["klir_operators"] == 3 and stats["kernel_instructions"] == 3
    verify(out)
    assert [f.name for f in out.functions] == ["main", "scale"] and out.functions[1].kind == FnKind.NKI
    assert placeholder_rows(out) == []
    (call,) = call_sites(out)
    assert call.attrs["func"] == "scale" and call.attrs["kernel_source_val"] == "Beta2"
    assert call.attrs["func_args"] == {"x": "x"} and call.attrs["func_outs"] == {"y": "y"}
    assert call.attrs["sb_buf_shape"] == (128, 64) and call.attrs["psum_buf_shape"] == (0, 0)
    assert call.attrs["address_rotation_scope_val"] == 0
    assert [o.memloc_name for o in call.ins] == ["x"] and [o.memloc_name for o in call.outs] == ["y"]
    assert (art / "scale.klr").read_bytes() == path.read_bytes()  # staged
    xa = np.random.default_rng(0).standard_normal((128, 16)).astype(np.float32)
    assert np.array_equal(run(out, {"x": xa})["y"], xa * np.float32(3.0))
    assert bir_json.loads(bir_json.dumps(out)) == out


def test_registered_under_the_backend_name(tmp_path):
    p = make_pass("translate_nki_ast_to_bir")
    assert isinstance(p, TranslateNKIASTToBIR)
    path = write(tmp_path / "scale.klr", scale_kernel())
    out, stats = p.run(host_module_for(str(path), 0, str(tmp_path / "o")))
    assert stats["expanded"] == 1


def test_module_without_placeholders_is_returned_unchanged(tiled_module):
    out, stats = translate(tiled_module)
    assert out == tiled_module and stats["placeholders"] == 0


@pytest.mark.parametrize("maps", ["explicit", "empty", "renamed"])
def test_arguments_are_mapped_by_name(tmp_path, maps):
    path = write(tmp_path / "scale.klr", scale_kernel())
    b = Builder("main")
    src = b.dram("host_in" if maps == "renamed" else "x", (128, 16), kind="ExternalInput")
    dst = b.dram("host_out" if maps == "renamed" else "y", (128, 16), kind="ExternalOutput")
    fa = {"explicit": {"x": "x"}, "empty": {}, "renamed": {"x": "host_in"}}[maps]
    fo = {"explicit": {"y": "y"}, "empty": {}, "renamed": {}}[maps]  # renamed output: matched by position
    b.klir_kernel(str(path), "klr", [src.ap()], [dst.ap()], func_args=fa, func_outs=fo)
    module = b.module()
    module.artifact_dir = str(tmp_path / "o")
    out, _ = translate(module)
    (call,) = call_sites(out)
    names = ("host_in", "host_out") if maps == "renamed" else ("x", "y")
    assert call.attrs["func_args"] == {"x": names[0]} and call.attrs["func_outs"] == {"y": names[1]}
    xa = np.ones((128, 16), np.float32)
    assert np.array_equal(run(out, {names[0]: xa})[names[1]], xa * 3)


def test_an_argument_that_matches_nothing_is_an_error(tmp_path):
    path = write(tmp_path / "scale.klr", scale_kernel())
    b = Builder("main")
    a = b.dram("a", (128, 16), kind="ExternalInput")
    c = b.dram("c", (128, 16), kind="ExternalInput")
    y = b.dram("y", (128, 16), kind="ExternalOutput")
    b.klir_kernel(str(path), "klr", [a.ap(), c.ap()], [y.ap()])
    with pytest.raises(PassError, match="input x matches no argument"):
        translate(b.module())


def test_dependencies_of_the_placeholder_move_to_the_call_site(tmp_path):
    path = write(tmp_path / "scale.klr", scale_kernel())
    b = Builder("main")
    x = b.dram("x", (128, 16), kind="ExternalInput")
    x2 = b.dram("x2", (128, 16), kind="Internal")
    y = b.dram("y", (128, 16), kind="ExternalOutput")
    y2 = b.dram("y2", (128, 16), kind="ExternalOutput")
    first = b.dma(x2.ap(), x.ap(), name="stage_in")
    ph = b.klir_kernel(str(path), "klr", [x2.ap()], [y.ap()], func_args={"x": "x2"}, name="kernel")
    last = b.dma(y2.ap(), y.ap(), name="copy_out")
    b.dep(first, ph)
    b.dep(ph, last)
    out, _ = translate(b.module())
    fn = out.functions[0]
    assert fn.inst_names() == ["stage_in", "scale", "copy_out"]
    assert sorted(zip(fn.deps["src"].tolist(), fn.deps["dst"].tolist())) == [(0, 1), (1, 2)]
    verify(out)
    xa = np.full((128, 16), 2.0, np.float32)
    assert np.array_equal(run(out, {"x": xa})["y2"], xa * 3)


# --------------------------------------------------------------------------- path B (BIR-JSON)


def bir_json_kernel(path: Path, cores: int = 1, const: str | None = None, const2: str | None = None) -> Path:
    """One function per core: y = x + core (+ Const tensors w, w2 from ``const``, ``const2`` when given)."""
    fns = []
    for c in range(cores):
        b = Builder(f"kern_c{c}")
        x = b.dram("x", (128, 8), kind="ExternalInput")
        y = b.dram("y", (128, 8), kind="ExternalOutput")
        t = b.sbuf("t", (128, 8), addr=0)
        b.dma(t.ap(), x.ap())
        b.tensor_scalar(t.ap(), t.ap(), "add", float(c))
        for name, file, addr in (("w", const, 64), ("w2", const2, 128)):
            if file:
                w = b.dram(name, (128, 8), kind="Const", const_path=file)
                s = b.sbuf(f"s_{name}", (128, 8), addr=addr)
                b.dma(s.ap(), w.ap())
                b.tensor_tensor(t.ap(), t.ap(), s.ap(), "add")
        b.dma(y.ap(), t.ap())
        fns.append(b.function())
    from tusk.ir.module import Module

    path.parent.mkdir(parents=True, exist_ok=True)
    bir_json.save(Module(fns), path)
    return path


def test_bir_json_kernel_is_loaded_for_this_core(tmp_path):
    path = bir_json_kernel(tmp_path / "k" / "kern.json", cores=2)
    for core in (0, 1):
        module = host_module_for(str(path), core, str(tmp_path / "out"))
        out, stats = translate(module)
        verify(out)
        kfn = out.functions[1]
        assert kfn.name == f"kern_c{core}" and kfn.kind == FnKind.NKI
        (call,) = call_sites(out)
        assert call.attrs["kernel_source_val"] == "Beta3" and call.attrs["func"] == kfn.name
        xa = np.zeros((128, 8), np.float32)
        assert np.array_equal(run(out, {"x": xa})["y"], xa + core)
    assert (tmp_path / "out" / "kern.json").exists()


def test_bir_json_core_past_the_functions_is_skipped(tmp_path, caplog):
    path = bir_json_kernel(tmp_path / "kern.json", cores=2)
    module = host_module_for(str(path), 2, str(tmp_path / "out"))
    with caplog.at_level(logging.INFO, logger="tusk.translate_nki_ast_to_bir"):
        out, stats = translate(module)
    assert stats == {**stats, "expanded": 0, "skipped": 1}
    assert out == module and placeholder_rows(out) == [0]
    assert "The kernel is compiled for LNC count lower than the current core_id 2 skip lowering" in caplog.text


def test_bir_json_needs_a_core_id_when_there_are_several(tmp_path):
    path = bir_json_kernel(tmp_path / "kern.json", cores=2)
    with pytest.raises(PassError, match=MSG_CORE_UNSET):
        translate(host_module_for(str(path), None, str(tmp_path / "out")))
    one = bir_json_kernel(tmp_path / "one.json", cores=1)
    out, stats = translate(host_module_for(str(one), None, str(tmp_path / "out")))
    assert stats["expanded"] == 1


def test_bir_json_const_files_are_copied_and_rewritten(tmp_path):
    src_dir = tmp_path / "k"
    (src_dir / "weights").mkdir(parents=True)
    w = np.full((128, 8), 0.5, np.float32)
    np.save(src_dir / "weights" / "w.npy", w)
    path = bir_json_kernel(src_dir / "kern.json", const="weights/w.npy")
    art = tmp_path / "out"
    out, _ = translate(host_module_for(str(path), 0, str(art)))
    kfn = out.functions[1]
    m = kfn.memloc(kfn.memloc_by_name("w"))
    assert m.tensor_kind == TensorKind.Const and m.const_path == "weights/w.npy"
    assert np.array_equal(np.load(art / "weights" / "w.npy"), w)


def test_malformed_bir_json_kernel(tmp_path):
    p = tmp_path / "bad.json"
    p.write_text('{"functions": [')
    b = Builder("main")
    b.klir_kernel(str(p), "bir", [], [])
    with pytest.raises(FormatError, match="malformed JSON"):
        translate(b.module())


# --------------------------------------------------------------------------- LNC=2 and placeholders


def test_lnc2_klr_module_per_core(tmp_path, caplog):
    path = write(tmp_path / "lnc2.klr", lnc2_kernel())
    xa = np.random.default_rng(1).standard_normal((128, 16)).astype(np.float32)
    bodies = []
    for core in (0, 1):
        out, stats = translate(host_module_for(str(path), core, str(tmp_path / "out")))
        verify(out)
        kfn = out.functions[1]
        assert kfn.name == f"lnc2.core{core}"
        bodies.append([kfn.inst(i).ins[0].offset for i in range(len(kfn.insts))])
        got = run(out, {"x": xa})["y"]
        rows = slice(64 * core, 64 * (core + 1))
        assert np.array_equal(got[rows], xa[rows])
    assert bodies == [[0, 0], [1024, 0]]  # the two bodies differ (their DMA source rows)
    module = host_module_for(str(path), 2, str(tmp_path / "out"))
    with caplog.at_level(logging.INFO, logger="tusk.translate_nki_ast_to_bir"):
        out, stats = translate(module)
    assert stats["skipped"] == 1 and placeholder_rows(out) == [0] and out == module
    assert "lower than the current core_id 2 skip lowering" in caplog.text
    with pytest.raises(PassError, match=MSG_CORE_UNSET):
        translate(host_module_for(str(path), None, str(tmp_path / "out")))


def test_only_expanded_placeholders_are_removed(tmp_path):
    klr = write(tmp_path / "lnc2.klr", lnc2_kernel())
    js = bir_json_kernel(tmp_path / "one.json", cores=1)
    b = Builder("main")
    x = b.dram("x", (128, 16), kind="ExternalInput")
    y = b.dram("y", (128, 16), kind="ExternalOutput")
    x8 = b.dram("x8", (128, 8), kind="ExternalInput")
    y8 = b.dram("y8", (128, 8), kind="ExternalOutput")
    b.klir_kernel(str(js), "bir", [x8.ap()], [y8.ap()], func_args={"x": "x8"}, func_outs={"y": "y8"}, name="p_json")
    b.klir_kernel(str(klr), "klr", [x.ap()], [y.ap()], name="p_klr")
    module = b.module(neuron_core_id=1)
    out, stats = translate(module)
    assert (stats["placeholders"], stats["expanded"], stats["skipped"]) == (2, 1, 1)
    fn = out.functions[0]
    assert fn.inst_names() == ["p_json", "lnc2.core1"]
    assert [fn.inst(i).opname for i in range(2)] == ["NKIKLIRKernel", "NKIKernel"]


def test_two_placeholders_of_one_kernel_get_distinct_functions(tmp_path):
    path = write(tmp_path / "scale.klr", scale_kernel())
    b = Builder("main")
    x = b.dram("x", (128, 16), kind="ExternalInput")
    y = b.dram("y", (128, 16), kind="Internal")
    z = b.dram("z", (128, 16), kind="ExternalOutput")
    b.klir_kernel(str(path), "klr", [x.ap()], [y.ap()], func_args={"x": "x"}, func_outs={"y": "y"})
    b.klir_kernel(str(path), "klr", [y.ap()], [z.ap()], func_args={"x": "y"}, func_outs={"y": "z"})
    out, _ = translate(b.module())
    assert [f.name for f in out.functions] == ["main", "scale", "scale_1"]
    verify(out)
    xa = np.ones((128, 16), np.float32)
    assert np.array_equal(run(out, {"x": xa})["z"], xa * 9)


# --------------------------------------------------------------------------- kernel files and errors


def test_kernel_file_is_found_in_the_artifact_directory(tmp_path):
    art = tmp_path / "out"
    write(art / "scale.klr", scale_kernel())
    module = host_module_for(str(art / "scale.klr"), 0, str(art))
    module = _retarget(module, "/nonexistent/place/scale.klr")
    out, stats = translate(module)
    assert stats["expanded"] == 1


def _retarget(module, path: str):
    """The module with its placeholder's klir_binary replaced."""
    m = module.copy()
    fn = m.functions[0]
    row = placeholder_rows(m)[0]
    attrs = fn.record(fn.insts.get("attrs", row)).with_(klir_binary=path)
    fn.insts.set("attrs", row, fn.intern_record(attrs))
    return m


def test_missing_kernel_file(tmp_path):
    path = write(tmp_path / "scale.klr", scale_kernel())
    module = _retarget(host_module_for(str(path), 0, str(tmp_path / "out")), str(tmp_path / "gone.klr"))
    msg = (f"NKI Kernel file {tmp_path / 'gone.klr'} does not exist, either in full path or in compiler "
           f"artifacts directory")
    with pytest.raises(PassError) as e:
        translate(module)
    assert e.value.message == msg


@pytest.mark.parametrize("written", ["missing/..", "..", "gone/../../.."])
def test_a_basename_never_escapes_the_artifact_directory(tmp_path, written):
    path = write(tmp_path / "scale.klr", scale_kernel())
    module = _retarget(host_module_for(str(path), 0, str(tmp_path / "out" / "a")), written)
    with pytest.raises(PassError, match="refusing|does not exist"):
        translate(module)


def test_symlink_out_of_the_artifact_directory_is_refused(tmp_path):
    outside = write(tmp_path / "elsewhere" / "scale.klr", scale_kernel())
    art = tmp_path / "out"
    art.mkdir()
    os.symlink(outside, art / "scale.klr")
    module = _retarget(host_module_for(str(outside), 0, str(art)), "/no/such/dir/scale.klr")
    with pytest.raises(PassError, match="resolves outside the artifact directory"):
        translate(module)
    # staging onto a symlink that leads out is refused too (it would overwrite a file outside)
    module = host_module_for(str(outside), 0, str(art))
    with pytest.raises(PassError, match="resolves outside the artifact directory"):
        translate(module)


def test_shared_constant_path_traversal_is_refused(tmp_path):
    path = write(tmp_path / "k" / "lnc2.klr", lnc2_kernel(const_file="../secret.npy"))
    np.save(tmp_path / "secret.npy", np.zeros((64, 16), np.float32))
    with pytest.raises(PassError, match="refusing const file name '../secret.npy'"):
        translate(host_module_for(str(path), 0, str(tmp_path / "out")))


def test_a_shared_constant_name_with_a_nul_character_is_refused(tmp_path):
    """A KLR file may spell any string; a NUL in a file name is refused as the file's fault, not a crash
    (found by bench/fuzz_inputs.py --seed 22)."""
    path = write(tmp_path / "k" / "lnc2.klr", lnc2_kernel(const_file="shared_constants/a\x00b.npy"))
    with pytest.raises(PassError, match="cannot hold a NUL character"):
        translate(host_module_for(str(path), 0, str(tmp_path / "out")))


def test_missing_shared_constant_file(tmp_path):
    path = write(tmp_path / "lnc2.klr", lnc2_kernel(const_file="shared_constants/nope.npy"))
    with pytest.raises(PassError, match="const file shared_constants/nope.npy does not exist"):
        translate(host_module_for(str(path), 0, str(tmp_path / "out")))


@pytest.mark.parametrize("where", ["kernel_dir", "artifact_dir"])
def test_shared_constants_are_staged_and_initialise_the_kernel(tmp_path, monkeypatch, where):
    rel = "shared_constants/" + "ab" * 32 + ".npy"
    w = np.arange(64 * 16, dtype=np.float32).reshape(64, 16)
    kdir, art = tmp_path / "k", tmp_path / "out"
    base = kdir if where == "kernel_dir" else art  # artifact_dir: the kernel file itself is found there
    (base / "shared_constants").mkdir(parents=True)
    np.save(base / rel, w)
    path = write(base / "lnc2.klr", lnc2_kernel(const_file=rel))
    module = host_module_for(str(path), 1, str(art))
    if where == "artifact_dir":
        module = _retarget(module, str(kdir / "lnc2.klr"))  # not there: artifact dir + basename
    out, stats = translate(module)
    kfn = out.functions[1]
    m = kfn.memloc(kfn.memloc_by_name("w"))
    assert m.tensor_kind == TensorKind.Const and m.const_path == rel
    assert np.array_equal(np.load(art / rel), w)
    assert stats["artifacts"] == {"lnc2.klr": str(base / "lnc2.klr"), rel: str(base / rel)}
    # run the kernel function itself (its Const tensor initialised from the artifact-relative path)
    monkeypatch.chdir(art)
    xa = np.random.default_rng(2).standard_normal((128, 16)).astype(np.float32)
    got = run(out, {"x": xa}, function=kfn.name)["y"]
    assert np.array_equal(got[64:], xa[64:] + w)


def test_a_const_file_only_in_the_artifact_directory_is_missing(tmp_path):
    """A stale copy in the artifact directory (an earlier output) must not stand in for a missing input."""
    rel = "shared_constants/w.npy"
    (tmp_path / "out" / "shared_constants").mkdir(parents=True)
    np.save(tmp_path / "out" / rel, np.zeros((64, 16), np.float32))
    path = write(tmp_path / "k" / "lnc2.klr", lnc2_kernel(const_file=rel))
    with pytest.raises(PassError, match="const file shared_constants/w.npy does not exist"):
        translate(host_module_for(str(path), 0, str(tmp_path / "out")))


def test_const_files_with_one_basename_get_distinct_artifact_names(tmp_path):
    """Absolute const paths /x/a/w.npy and /x/b/w.npy must not overwrite each other in the artifact dir."""
    wa, wb = np.full((128, 8), 1.0, np.float32), np.full((128, 8), 2.0, np.float32)
    for sub, w in (("a", wa), ("b", wb)):
        (tmp_path / "x" / sub).mkdir(parents=True)
        np.save(tmp_path / "x" / sub / "w.npy", w)
    path = bir_json_kernel(tmp_path / "k" / "kern.json", const=str(tmp_path / "x" / "a" / "w.npy"),
                           const2=str(tmp_path / "x" / "b" / "w.npy"))
    art = tmp_path / "out"
    out, stats = translate(host_module_for(str(path), 0, str(art)), const_dir=str(tmp_path / "x"))
    kfn = out.functions[1]
    paths = [kfn.memloc(kfn.memloc_by_name(n)).const_path for n in ("w", "w2")]
    assert len(set(paths)) == 2 and all(not os.path.isabs(p) and p.endswith("/w.npy") for p in paths)
    assert np.array_equal(np.load(art / paths[0]), wa) and np.array_equal(np.load(art / paths[1]), wb)
    assert stats["artifacts"][paths[1]] == str(tmp_path / "x" / "b" / "w.npy")


def test_without_staging_const_paths_are_left_as_written(tmp_path):
    (tmp_path / "k" / "weights").mkdir(parents=True)
    np.save(tmp_path / "k" / "weights" / "w.npy", np.ones((128, 8), np.float32))
    np.save(tmp_path / "elsewhere.npy", np.ones((128, 8), np.float32))
    path = bir_json_kernel(tmp_path / "k" / "kern.json", const="weights/w.npy", const2=str(tmp_path / "elsewhere.npy"))
    art = tmp_path / "out"
    out, stats = translate(host_module_for(str(path), 0, str(art)), stage_files=False, const_dir=str(tmp_path))
    kfn = out.functions[1]
    assert kfn.memloc(kfn.memloc_by_name("w")).const_path == "weights/w.npy"
    assert kfn.memloc(kfn.memloc_by_name("w2")).const_path == str(tmp_path / "elsewhere.npy")
    assert not art.exists()  # nothing copied, nothing rewritten to a name that is not there
    assert stats["artifacts"]["weights/w.npy"] == str(tmp_path / "k" / "weights" / "w.npy")


def test_wrong_klr_version(tmp_path):
    module = host_module_for(str(KLR / "01_dma_copy.klr"), 0, str(tmp_path))
    module = _retarget(module, str(KLR / "neg_wrong_version.klr"))
    with pytest.raises(FormatError, match="Wrong KLR version"):
        translate(module)


@pytest.mark.parametrize("fixture", ["neg_hlo_contents", "neg_kernel_contents"])
def test_wrong_klir_content_type(tmp_path, fixture):
    module = _retarget(host_module_for(str(KLR / "01_dma_copy.klr"), 0, str(tmp_path)), str(KLR / f"{fixture}.klr"))
    with pytest.raises(FormatError, match="Wrong KLIR content type"):
        translate(module)


def test_unreadable_kernel_file_fails_to_locate_the_artifact(tmp_path):
    d = tmp_path / "dir.klr"
    d.mkdir()
    module = _retarget(host_module_for(str(KLR / "01_dma_copy.klr"), 0, ""), str(d))
    with pytest.raises(TuskError, match="fail to locate KLIR artifact"):
        translate(module)


def test_an_unallocated_kernel_is_refused(tmp_path):
    k = KernelWriter("unplaced")
    x, y = k.input("x", (128, 4)), k.output("y", (128, 4))
    t = k.tensor("t", (128, 4), memory="sbuf")
    k.dma(t, x)
    k.dma(y, t)
    path = write(tmp_path / "u.klr", k)
    with pytest.raises(PassError, match="NKI kernel unplaced is not allocated: SBUF/PSUM tensor.s. t have no"):
        translate(host_module_for(str(path), 0, str(tmp_path / "o")))


def test_an_unsupported_operator_stops_the_pass(tmp_path):
    module = host_module_for(str(KLR / "07_access_variants.klr"), 0, str(tmp_path))
    with pytest.raises(PassError, match="dstBoundsCheck DmaBounds.reg is not supported .*statement inst.1"):
        translate(module)


def test_a_dma_with_compute_op_add_accumulates_into_its_destination(tmp_path):
    k = KernelWriter("dma_accumulate")
    x, y = k.input("x", (128, 4)), k.output("y", (128, 4))
    t = k.sbuf("t", (128, 4), addr=0)
    k.dma(t, x)
    k.dma(t, x, accumulate=True)  # t = x + x
    k.dma(y, t)
    out, _ = translate(host_module_for(str(write(tmp_path / "acc.klr", k)), 0, str(tmp_path / "o")))
    kernel = out.functions[1]
    assert kernel.inst(1).attrs["mode"] == "CCE" and kernel.inst(1).attrs["cce_op"] == "add"
    xv = np.arange(512, dtype=np.float32).reshape(128, 4)
    assert np.array_equal(run(out, {"x": xv})["y"], 2 * xv)


# --------------------------------------------------------------------------- the golden fixtures


@pytest.mark.parametrize("fixture", ["01_dma_copy", "02_add_activation", "03_dynamic_loop", "04_scalar_offset_reg",
                                     "05_vector_offset_gather", "06_lnc2_shared"])
def test_golden_fixtures_translate_and_verify(tmp_path, fixture):
    src = KLR / f"{fixture}.klr"
    if fixture == "06_lnc2_shared":
        shutil.copy(src, tmp_path / src.name)
        src = tmp_path / src.name
        rel = "shared_constants/" + "3f5a0c1e9b7d2468ace013579bdf2468ace013579bdf2468ace013579bdf2468.npy"
        (tmp_path / "shared_constants").mkdir()
        np.save(tmp_path / rel, np.eye(128, dtype=np.int8))
    cores = 2 if fixture == "06_lnc2_shared" else 1
    for core in range(cores):
        out, stats = translate(host_module_for(str(src), core, str(tmp_path / "out")))
        verify(out)
        assert stats["expanded"] == 1
        assert bir_json.loads(bir_json.dumps(out)) == out
