"""`tusk compile` on awkward input: what it refuses, what it never touches, what it keeps (in-process)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.passes_for_tests import flip_a_byte, pipeline_toml, write_kernels
from tusk.cache import Store
from tusk.frontend.klr_writer import KernelWriter
from tusk.ir import bir_json
from tusk.ir.builder import Builder
from tusk.ir.enums import DTYPE_NAMES
from tusk.workflows import graph
from tusk.workflows.cli import app

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "kernels"
runner = CliRunner()


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TUSK_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("MAXHU", raising=False)
    return tmp_path / "cache"


@pytest.fixture
def translate_only(tmp_path) -> str:
    """A pipeline of translate alone: what these tests are about, at a fraction of the time."""
    p = tmp_path / "translate.toml"
    p.write_text('[[step]]\npass = "translate_nki_ast_to_bir"\n')
    return str(p)


def tusk(*args: str) -> tuple[int, dict | None, str]:
    """Run `tusk compile ... --json` (in-process, no cluster): exit code, report (None on a usage error), text."""
    res = runner.invoke(app, ["compile", *args, "--workers", "0", "--json"])
    assert res.exception is None or isinstance(res.exception, SystemExit), res.output
    try:
        report = json.loads(res.stdout)
    except ValueError:
        report = None
    return res.exit_code, report, " ".join(res.output.split())


def errors(rep: dict) -> dict[str, str]:
    return {f["kernel"]: f["error"] for f in rep["failed"]}


def copy_examples(d: Path, *names: str) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    for n in names:
        shutil.copy(EXAMPLES / n, d / n)
    if "lnc2_matmul.klr" in names:
        shutil.copytree(EXAMPLES / "shared_constants", d / "shared_constants")
    return d


BUILD_REPORT = {"report.html", "build-trace.json", "timeline.json", "tusk.log"}  # rewritten by every build


def tree(d: Path) -> dict[str, bytes]:
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*"))
            if p.is_file() and p.name not in BUILD_REPORT}


# --------------------------------------------------------------------------- 1: never replace an input


def test_an_output_directory_that_is_the_input_directory_is_refused(tmp_path, monkeypatch, translate_only):
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(EXAMPLES / "tensor_add.klr", src / "src.klr")
    shutil.copy(EXAMPLES / "rmsnorm.klr", src)
    (src / "notes.txt").write_text("notes")
    (src / "sub").mkdir()
    (src / "sub" / "d").write_text("x")
    before = tree(src)
    monkeypatch.chdir(tmp_path)
    code, rep, _ = tusk("--pipeline", translate_only, "src", "-o", ".")
    assert code == 1 and "overlap the input directory" in errors(rep)["src"]
    assert tree(src) == before  # untouched
    assert (tmp_path / "rmsnorm" / "rmsnorm.bir.json").is_file()  # the other kernel still finishes
    code, rep, text = tusk("--pipeline", translate_only, "src", "-o", "src")
    assert code == 2 and "is the input directory" in text
    assert tree(src) == before
    # an output directory inside the input directory is fine: the input is not searched recursively
    code, rep, _ = tusk("--pipeline", translate_only, "src", "-o", "src/out")
    assert code == 0 and (src / "out" / "rmsnorm" / "rmsnorm.bir.json").is_file()
    assert {k: v for k, v in tree(src).items() if not k.startswith("out")} == before


def test_a_directory_tusk_did_not_write_is_never_replaced(tmp_path, translate_only):
    k = copy_examples(tmp_path / "k", "tensor_add.klr", "rmsnorm.klr")
    (tmp_path / "out" / "rmsnorm").mkdir(parents=True)
    (tmp_path / "out" / "rmsnorm" / "mine.txt").write_text("keep me")
    code, rep, _ = tusk("--pipeline", translate_only, str(k), "-o", str(tmp_path / "out"))
    assert code == 1 and "is not a Tusk output" in errors(rep)["rmsnorm"]
    assert tree(tmp_path / "out" / "rmsnorm") == {"mine.txt": b"keep me"}
    assert (tmp_path / "out" / "tensor_add" / "tensor_add.bir.json").is_file()


# --------------------------------------------------------------------------- 2, 7, 9: the right files


def test_the_same_kernel_bytes_in_two_directories_use_their_own_files(tmp_path, translate_only):
    a = copy_examples(tmp_path / "A", "lnc2_matmul.klr")
    b = copy_examples(tmp_path / "B", "lnc2_matmul.klr")
    assert tusk("--pipeline", translate_only, str(a), "-o", str(tmp_path / "outA"))[0] == 0
    assert tusk("--pipeline", translate_only, str(b), "-o", str(tmp_path / "outB"))[0] == 0
    npy = next((b / "shared_constants").iterdir())
    np.save(npy, np.load(npy) + 1)
    code, rep, _ = tusk("--pipeline", translate_only, str(b), "-o", str(tmp_path / "outB"))
    assert code == 0 and f"shared_constants/{npy.name}" in rep["kernels"][0]["files"]
    assert rep["kernels"][0]["units"][0]["steps"][0]["status"] == "executed"  # B's constant changed
    staged = tmp_path / "outB" / "lnc2_matmul" / "shared_constants" / npy.name
    assert staged.read_bytes() == npy.read_bytes()


def test_deleted_staged_artifacts_are_restored(tmp_path, translate_only):
    k = copy_examples(tmp_path / "k", "tensor_add.klr", "lnc2_matmul.klr")
    out = tmp_path / "out"
    assert tusk("--pipeline", translate_only, str(k), "-o", str(out))[0] == 0
    (out / "tensor_add" / "tensor_add.klr").unlink()
    for p in (out / "lnc2_matmul" / "shared_constants").iterdir():
        p.unlink()
    code, rep, _ = tusk("--pipeline", translate_only, str(k), "-o", str(out))
    assert code == 0 and rep["executed"] == 0
    assert (out / "tensor_add" / "tensor_add.klr").read_bytes() == (k / "tensor_add.klr").read_bytes()
    assert tree(out / "lnc2_matmul" / "shared_constants") == tree(k / "shared_constants")


def test_a_host_module_is_built_into_out_with_its_placeholders_files(tmp_path, monkeypatch, translate_only):
    from tusk.stages.host import host_module_for

    kern = copy_examples(tmp_path / "kern", "lnc2_matmul.klr")
    host = host_module_for(str(kern / "lnc2_matmul.klr"), 0, str(tmp_path / "elsewhere"))
    fn = host.functions[0]
    row = int(np.nonzero(fn.insts["opcode"] == 56)[0][0])
    fn.insts.set("attrs", row, fn.intern_record(fn.record(fn.insts.get("attrs", row))
                                                .with_(klir_binary="../kern/lnc2_matmul.klr")))
    (tmp_path / "h").mkdir()
    bir_json.save(host, tmp_path / "h" / "host.json")
    monkeypatch.chdir(tmp_path / "h")  # "../kern" from here is not tmp_path/kern: the module's directory counts
    (tmp_path / "h" / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "h" / "sub")
    out = tmp_path / "out"
    code, rep, _ = tusk("--pipeline", translate_only, str(tmp_path / "h"), "-o", str(out))
    assert code == 0, rep["failed"]
    assert not (tmp_path / "elsewhere").exists()  # the module's own artifact directory is not written
    npy = next((kern / "shared_constants").iterdir())
    assert str(npy) in rep["kernels"][0]["files"]  # the placeholder kernel's const file is keyed
    np.save(npy, np.load(npy) * 2)
    code, rep, _ = tusk("--pipeline", translate_only, str(tmp_path / "h"), "-o", str(out))
    assert rep["kernels"][0]["units"][0]["steps"][0]["status"] == "executed"
    assert (out / "host" / "shared_constants" / npy.name).read_bytes() == npy.read_bytes()


def test_a_placeholder_naming_a_missing_file_fails_even_with_a_copy_in_out(tmp_path, translate_only):
    b = Builder("main")
    x = b.dram("a", (128, 4), kind="ExternalInput")
    b.klir_kernel("gone.klr", "klr", [x.ap()], [])
    (tmp_path / "h").mkdir()
    bir_json.save(b.module(), tmp_path / "h" / "host.json")
    (tmp_path / "out" / "host").mkdir(parents=True)
    (tmp_path / "out" / "host" / "stats.json").write_text('{"tusk_stats": 2}')
    shutil.copy(EXAMPLES / "tensor_add.klr", tmp_path / "out" / "host" / "gone.klr")  # a stale copy
    code, rep, _ = tusk("--pipeline", translate_only, str(tmp_path / "h"), "-o", str(tmp_path / "out"))
    assert code == 1 and "names kernel file gone.klr, which does not exist" in errors(rep)["host"]


# --------------------------------------------------------------------------- 4: MAXHU is keyed


def test_maxhu_changes_the_key_of_heuristic_unroll(tmp_path, monkeypatch):
    k = copy_examples(tmp_path / "k", "tiled_exp.json")
    args = (str(k), "-o", str(tmp_path / "out"), "--set", "unroll.loops=marked")
    code, rep, _ = tusk(*args)
    unrolled = rep["kernels"][0]["units"][0]["summary"]["insts_after_unroll"]
    monkeypatch.setenv("MAXHU", "0")
    code, rep, _ = tusk(*args)
    assert code == 0 and rep["executed"] > 0 and "heuristic_unroll{enabled=true maxhu=0}" in rep["pipeline"]
    assert rep["kernels"][0]["units"][0]["summary"]["insts_after_unroll"] < unrolled
    monkeypatch.setenv("MAXHU", "zero")
    code, _, text = tusk(*args)
    assert code == 2 and "MAXHU='zero' is not valid" in text


# --------------------------------------------------------------------------- 6, 16, 17: which kernels


def test_kernel_names_are_unique_stable_and_nothing_is_dropped(tmp_path, translate_only):
    k = tmp_path / "k"
    k.mkdir()
    shutil.copy(EXAMPLES / "tensor_add.klr", k / "a.klr")
    shutil.copy(EXAMPLES / "tiled_exp.json", k / "a.json")
    shutil.copy(EXAMPLES / "rmsnorm.klr", k / "a_klr.klr")
    shutil.copy(EXAMPLES / "tensor_add.klr", k / "tensor_add.klr")
    code, rep, _ = tusk("--pipeline", translate_only, str(k), "-o", str(tmp_path / "out"))
    names = sorted(x["kernel"] for x in rep["kernels"])
    assert code == 0 and names == ["a.json", "a.klr", "a_klr", "tensor_add"]
    (k / "tensor_add.md").write_text("notes")
    code, rep, _ = tusk("--pipeline", translate_only, str(k), "-o", str(tmp_path / "out"))
    assert sorted(x["kernel"] for x in rep["kernels"]) == names and rep["executed"] == 0


def test_an_unreadable_kernel_file_is_a_failed_kernel(tmp_path, translate_only):
    k = copy_examples(tmp_path / "k", "tensor_add.klr")
    os.symlink("/proc/self/mem", k / "x.klr")
    os.symlink(tmp_path / "nowhere.json", k / "y.json")
    code, rep, _ = tusk("--pipeline", translate_only, str(k), "-o", str(tmp_path / "out"))
    assert code == 1 and set(errors(rep)) == {"x", "y"}
    assert "x.klr: cannot be read" in errors(rep)["x"] and "y.json: cannot be read" in errors(rep)["y"]


def test_core_ids(tmp_path, translate_only):
    k = copy_examples(tmp_path / "k", "tensor_add.klr", "lnc2_matmul.klr")
    code, _, text = tusk("--pipeline", translate_only, str(k), "-o", str(tmp_path / "out"), "--core-id", "-1")
    assert code == 2 and "--core-id" in text and not (tmp_path / "out").exists()
    code, rep, _ = tusk("--pipeline", translate_only, str(k), "-o", str(tmp_path / "out"), "--core-id", "1")
    assert code == 0 and [x["kernel"] for x in rep["kernels"]] == ["lnc2_matmul"]
    assert any(s["path"].endswith("tensor_add.klr") and "--core-id 1" in s["reason"] for s in rep["skipped"])
    assert not (tmp_path / "out" / "tensor_add").exists()


# --------------------------------------------------------------------------- 10, 11, 12, 14: builds


def test_a_build_that_fails_for_the_cache_keeps_the_previous_output(tmp_path, cache, monkeypatch):
    k = copy_examples(tmp_path / "k", "tensor_add.klr")
    out = tmp_path / "out"
    assert tusk(str(k), "-o", str(out))[0] == 0
    before = tree(out)
    store = Store(cache)
    for h in list(store.object_hashes()):
        flip_a_byte(store.object_path(h))
    monkeypatch.setattr(graph, "MAX_REPAIRS", -100)  # any repair gives up: a failure that is not the kernel's
    code, rep, _ = tusk(str(k), "-o", str(out), "--set", "unroll.loops=marked")
    assert code == 2 and "repairs" in errors(rep)["tensor_add"]  # the environment failed it: exit 2
    assert tree(out) == before


def test_without_staging_the_output_names_only_files_that_exist(tmp_path):
    d, elsewhere = tmp_path / "k", tmp_path / "data"
    d.mkdir()
    elsewhere.mkdir()
    np.save(elsewhere / "w.npy", np.ones((128, 4), np.float32))
    b = Builder("main")
    x = b.dram("x", (128, 4), kind="ExternalInput")
    w = b.dram("w", (128, 4), kind="Const", const_path=str(elsewhere / "w.npy"))
    y = b.dram("y", (128, 4), kind="ExternalOutput")
    t = b.sbuf("t", (128, 4), addr=0)
    b.dma(t.ap(), x.ap())
    b.dma(t.ap(), w.ap())
    b.dma(y.ap(), t.ap())
    bir_json.save(b.module(), d / "kc.json")
    out = tmp_path / "out" / "kc"
    named = f"translate_nki_ast_to_bir.const_dir={elsewhere}"  # absolute const paths elsewhere are refused
    code, rep, _ = tusk(str(d), "-o", str(tmp_path / "out"), "--set", "translate_nki_ast_to_bir.stage_files=false",
                        "--set", named)
    assert code == 0, rep["failed"]
    final = bir_json.load(out / "kc.bir.json")
    consts = [f.strings[c] for f in final.functions for c in f.memlocs["const_path"].tolist() if c >= 0]
    assert consts == [str(elsewhere / "w.npy")]  # as written: nothing was copied, so nothing is renamed
    code, rep, _ = tusk(str(d), "-o", str(tmp_path / "out"), "--set", named)  # staged: a collision-free name
    final = bir_json.load(out / "kc.bir.json")
    consts = [f.strings[c] for f in final.functions for c in f.memlocs["const_path"].tolist() if c >= 0]
    assert code == 0 and consts[0].startswith("abs/") and (out / consts[0]).read_bytes() == \
        (elsewhere / "w.npy").read_bytes()


def test_a_const_file_the_output_names_but_nobody_has_is_an_error(tmp_path):
    d = tmp_path / "k"
    d.mkdir()
    b = Builder("main")
    w = b.dram("w", (128, 4), kind="Const", const_path="weights/w.bin")
    y = b.dram("y", (128, 4), kind="ExternalOutput")
    t = b.sbuf("t", (128, 4), addr=0)
    b.dma(t.ap(), w.ap())
    b.dma(y.ap(), t.ap())
    bir_json.save(b.module(), d / "kc.json")
    pipe = tmp_path / "p.toml"
    pipe.write_text(pipeline_toml(("test_expand", {})))
    code, rep, _ = tusk(str(d), "-o", str(tmp_path / "out"), "--pipeline", str(pipe))
    assert code == 1 and "names const file weights/w.bin, which was not found" in errors(rep)["kc"]
    assert not (tmp_path / "out" / "kc").exists()


def test_a_float8_e4m3_klr_kernel_compiles(tmp_path, monkeypatch, translate_only):
    from tusk.frontend import klr_writer as klr_authoring

    monkeypatch.setitem(klr_authoring.DTYPE_BYTES, "float8_e4m3", 1)  # the writer's table lacks it
    kw = KernelWriter("f8")
    x, y = kw.input("x", (128, 64), "float8_e4m3"), kw.output("y", (128, 64), "float8_e4m3")
    t = kw.sbuf("t", (128, 64), "float8_e4m3", addr=0)
    kw.dma(t, x)
    kw.dma(y, t)
    (tmp_path / "k").mkdir()
    (tmp_path / "k" / "f8.klr").write_bytes(kw.to_bytes())
    code, rep, _ = tusk("--pipeline", translate_only, str(tmp_path / "k"), "-o", str(tmp_path / "out"))
    assert code == 0, rep["failed"]
    final = bir_json.load(tmp_path / "out" / "f8" / "f8.bir.json")
    dtypes = {DTYPE_NAMES[f.sets.get("dtype", f.memlocs.get("set", m))] for f in final.functions
              for m in range(len(f.memlocs))}
    assert dtypes == {"float8e4"}


def test_an_unreachable_scheduler_stops_the_build_before_anything_is_written(tmp_path, monkeypatch, translate_only):
    k = copy_examples(tmp_path / "k", "tensor_add.klr")
    out = tmp_path / "out"
    assert tusk("--pipeline", translate_only, str(k), "-o", str(out))[0] == 0
    before = tree(out)
    code, _, text = tusk("--pipeline", translate_only, str(k), "-o", str(out), "--scheduler", "bogus://x")
    assert code == 2 and "cannot connect to the Dask scheduler at 'bogus://x'" in text
    calls = []

    def refused(address, *a, **kw):
        calls.append(address)
        raise graph.ExecutorUnavailable(f"cannot connect to the Dask scheduler at {address!r}: refused")

    monkeypatch.setattr("tusk.workflows.compile.scheduler_executor", refused)
    write_kernels(k, 6)  # many units: still one attempt
    code, _, text = tusk("--pipeline", translate_only, str(k), "-o", str(out), "--scheduler", "tcp://127.0.0.1:1")
    assert code == 2 and calls == ["tcp://127.0.0.1:1"] and "refused" in text
    assert tree(out) == before and not [p for p in out.iterdir() if p.name.startswith(".")]


def test_local_workers_keep_their_lock_files_in_the_store(tmp_path, monkeypatch):
    """A real local cluster: its scheduler's and worker's lock files are under the directory it is given,
    none under the system temporary directory, and the worker's go when the cluster closes."""
    import tempfile

    systmp, scratch = tmp_path / "systmp", tmp_path / "scratch"
    systmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(systmp))  # the workers' system temporary directory
    monkeypatch.setattr(tempfile, "tempdir", None)  # and this process's, found again from TMPDIR
    ex = graph.local_cluster_executor(1, local_directory=str(scratch))
    try:
        space = scratch / "dask-scratch-space"
        locks = sorted(p.name for p in space.glob("*.lock")) if space.is_dir() else []
        worker_locks = list(space.glob("worker-*.dirlock"))
        assert locks == ["global.lock", "purge.lock"] and len(worker_locks) == 1
        assert len(ex.worker_pids) == 1
        assert not list(systmp.rglob("*.lock")) and not list(systmp.rglob("*.dirlock"))
    finally:
        ex.close()
    assert not list(space.glob("worker-*")), "the worker's space outlived its cluster"


# --------------------------------------------------------------------------- 18: clear errors


def test_bad_requests_are_clear_errors_that_write_nothing(tmp_path, monkeypatch):
    k = copy_examples(tmp_path / "k", "tensor_add.klr")
    pipe = tmp_path / "p.toml"
    pipe.write_text('[[step]]\npass = "json:JSONDecoder"\n')
    code, _, text = tusk(str(k), "-o", str(tmp_path / "o1"), "--pipeline", str(pipe))
    assert code == 2 and "'json:JSONDecoder' is not a pass" in text
    (tmp_path / "afile").write_text("")
    code, _, text = tusk(str(k), "-o", str(tmp_path / "afile"))
    assert code == 2 and "is an existing file" in text
    code, _, text = tusk(str(tmp_path / "nope"), "-o", str(tmp_path / "o2"))
    assert code == 2 and "no such directory" in text
    for var, value in (("TUSK_WORKERS", "abc"), ("TUSK_INSTRUCTION_LIMIT", "12x")):
        with monkeypatch.context() as m:
            m.setenv(var, value)
            code, _, text = tusk(str(k), "-o", str(tmp_path / "o3"))
            assert code == 2 and f"{var}='{value}' is not valid" in text
            res = runner.invoke(app, ["cache", "info"])
            assert res.exit_code == 2 and var in res.output
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith("o")]
    res = runner.invoke(app, ["show", str(k)])  # a directory that is no kernel output: the command's fault
    assert res.exit_code == 2 and "not a file" in res.stderr and not res.stdout


def test_set_on_a_pass_that_is_not_available_warns(tmp_path, monkeypatch):
    from tusk import stages
    monkeypatch.delitem(stages.REGISTRY, "address_rotation_psum")  # as in a checkout that does not have it yet
    k = copy_examples(tmp_path / "k", "tensor_add.klr")
    code, rep, _ = tusk(str(k), "-o", str(tmp_path / "out"), "--set", "address_rotation_psum.x=1")
    assert code == 0 and any("address_rotation_psum" in w and "not available" in w for w in rep["warnings"])


def _const_kernel(d: Path, name: str, const_path: str) -> None:
    b = Builder("main")
    w = b.dram("w", (128, 4), kind="Const", const_path=const_path)
    y = b.dram("y", (128, 4), kind="ExternalOutput")
    t = b.sbuf("t", (128, 4), addr=0)
    b.dma(t.ap(), w.ap())
    b.dma(y.ap(), t.ap())
    bir_json.save(b.module(), d / f"{name}.json")


def test_a_cache_hit_does_not_skip_the_const_file_confinement(tmp_path, translate_only):
    d, outside = tmp_path / "k", tmp_path / "outside"
    d.mkdir()
    outside.mkdir()
    np.save(d / "w.npy", np.ones((128, 4), np.float32))
    _const_kernel(d, "kc", "w.npy")
    code, rep, _ = tusk(str(d), "-o", str(tmp_path / "out"), "--pipeline", translate_only)
    assert code == 0, rep["failed"]
    shutil.move(d / "w.npy", outside / "w.npy")  # the same bytes, now reached through a link out
    (d / "w.npy").symlink_to(outside / "w.npy")
    for extra in ((), ("--no-cache",)):
        code, rep, _ = tusk(str(d), "-o", str(tmp_path / "out"), "--pipeline", translate_only, *extra)
        assert code == 1 and "resolves outside the kernel file's directory" in errors(rep)["kc"], rep


@pytest.mark.parametrize("special", ["fifo", "dev-zero"])
def test_a_const_file_that_never_ends_is_refused_before_a_byte_is_read(tmp_path, special):
    import subprocess
    import sys

    d = tmp_path / "k"
    d.mkdir()
    if special == "fifo":
        os.mkfifo(d / "w.npy")
        _const_kernel(d, "kc", "w.npy")
    else:
        _const_kernel(d, "kc", "/dev/zero")
    copy_examples(d, "tiled_add.json")
    proc = subprocess.run([sys.executable, "-m", "tusk", "compile", str(d), "-o", str(tmp_path / "out"), "--workers",
                           "0", "--json", "--no-report", "--cache-dir", str(tmp_path / "cache2")],
                          capture_output=True, text=True, timeout=120)
    rep = json.loads(proc.stdout)
    assert proc.returncode == 1, proc.stderr
    assert "refusing const file" in errors(rep)["kc"], rep["failed"]
    assert (tmp_path / "out" / "tiled_add" / "tiled_add.bir.json").is_file()  # the other kernel is built


@pytest.mark.parametrize("delay", [0.5, 1.5])
def test_ctrl_c_while_the_local_cluster_starts_ends_cleanly(tmp_path, delay):
    """Ctrl-C reaches every process of the terminal's group (the workers starting up too): after the
    "interrupted" line nothing is printed, the exit is 130, no process is left, nothing half-written."""
    import select
    import signal
    import subprocess
    import sys
    import time

    import psutil

    # the shipped corpus, cold: its build lasts many seconds after the cluster is up, so the signal lands
    # while the cluster starts (0.5 s) or while the first kernels build (1.5 s), never after the summary
    # (two tiny kernels are built in 1.3 s, and a Ctrl-C after the last line printed is a different case)
    shutil.copytree(EXAMPLES, tmp_path / "k")
    out = tmp_path / "out"
    env = {**os.environ, "TUSK_CACHE_DIR": str(tmp_path / "cache"),
           "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    proc = subprocess.Popen([sys.executable, "-m", "tusk", "compile", str(tmp_path / "k"), "-o", str(out),
                             "--workers", "2", "--progress", "plain", "--no-report"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, env=env, start_new_session=True)
    seen, deadline = b"", time.monotonic() + 120
    while b"starting a local cluster" not in seen and time.monotonic() < deadline:
        if select.select([proc.stdout], [], [], 0.2)[0]:
            seen += os.read(proc.stdout.fileno(), 65536)
    assert b"starting a local cluster" in seen, seen
    time.sleep(delay)
    group = [proc.pid] + [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
    os.killpg(proc.pid, signal.SIGINT)  # as the terminal does: to the whole group
    rest, _ = proc.communicate(timeout=60)
    text = (seen + rest).decode("utf-8", "replace")
    assert proc.returncode == 130, text
    assert "interrupted" in text, text
    after = text.split("interrupted", 1)[1].split("\n", 1)[1]
    assert after.strip() == "" and "Traceback" not in text, text
    time.sleep(0.5)
    assert not [p for p in group if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert not out.exists() or sorted(p.name for p in out.iterdir()) in ([], ["tusk.log"]), list(out.iterdir())


def test_a_placeholder_naming_its_kernel_as_the_custom_call_object_builds_alike(tmp_path):
    """``klir_binary`` as the compiler's custom-call configuration writes it (``{"binary": path,
    "input_names": ...}``) names the same kernel file as the plain path: both host modules build, through the
    whole default pipeline, to the same output; the object form was refused as naming no kernel file."""
    from tusk.stages.host import host_module_for, kernel_file

    kern = copy_examples(tmp_path / "kern", "tensor_add.klr")
    outputs = []
    for form in ("path", "object"):
        host = host_module_for(str(kern / "tensor_add.klr"), 0, "")
        fn = host.functions[0]
        row = int(np.nonzero(fn.insts["opcode"] == 56)[0][0])
        attrs = fn.record(fn.insts.get("attrs", row))
        name = "../kern/tensor_add.klr"
        written = name if form == "path" else {"binary": name, "input_names": ["a", "b"], "output_names": ["c"],
                                                "version_identifier": ""}
        fn.insts.set("attrs", row, fn.intern_record(attrs.with_(klir_binary=written)))
        assert kernel_file(fn.record(fn.insts.get("attrs", row))) == name
        (tmp_path / form).mkdir()
        bir_json.save(host, tmp_path / form / "host.json")
        code, rep, _ = tusk(str(tmp_path / form), "-o", str(tmp_path / f"out_{form}"))
        assert code == 0, rep["failed"]
        outputs.append(rep["kernels"][0]["units"][0]["final"])
    assert outputs[0] == outputs[1]
