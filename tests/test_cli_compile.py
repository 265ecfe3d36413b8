"""`tusk compile`, `tusk cache` and `tusk show` from the command line (in-process, no cluster)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.passes_for_tests import flip_a_byte, pipeline_toml, write_kernels
from tests.programs import tiled_exp_module
from tusk.cache import Store
from tusk.ir import bir_json
from tusk.workflows.cli import app

ROOT = Path(__file__).resolve().parent.parent
KLR = Path(__file__).parent / "data" / "klr"
PASSES = [("test_expand", {}), ("test_scale", {"factor": 2.0}), ("test_identity", {}), ("test_count", {})]

runner = CliRunner()


@pytest.fixture
def env(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("TUSK_CACHE_DIR", str(cache))
    kernels = tmp_path / "kernels"
    write_kernels(kernels, 3)
    pipe = tmp_path / "pipeline.toml"
    pipe.write_text(pipeline_toml(*PASSES))
    return {"cache": cache, "kernels": kernels, "out": tmp_path / "out", "pipeline": pipe, "tmp": tmp_path}


def compile_json(env, *extra: str, workers: str = "0") -> tuple[int, dict]:
    args = ["compile", str(env["kernels"]), "-o", str(env["out"]), "--workers", workers,
            "--pipeline", str(env["pipeline"]), "--json", *extra]
    res = runner.invoke(app, args)
    assert res.exception is None or isinstance(res.exception, SystemExit), res.output
    return res.exit_code, json.loads(res.stdout)


def executed(report: dict) -> dict[str, int]:
    return {k["kernel"]: sum(u["executed"] for u in k.get("units", [])) for k in report["kernels"]}


def test_cold_build_writes_final_bir_json_stats_and_staged_files(env):
    code, rep = compile_json(env)
    assert code == 0
    assert rep["executed"] == 12 and rep["cached"] == 0 and rep["failed"] == []
    out = env["out"]
    for k in range(3):
        d = out / f"k{k}"
        final = bir_json.load(d / f"k{k}.bir.json")
        assert final.n_insts() == tiled_exp_module(tiles=2 + k).n_insts()
        assert final.attributes["test_scale"] == 2.0
        stats = json.loads((d / "stats.json").read_text())
        assert [s["label"] for s in stats["units"][0]["steps"]] == [n for n, _ in PASSES]
        assert (d / f"k{k}.json").read_bytes() == (env["kernels"] / f"k{k}.json").read_bytes()
    assert not [p for p in out.iterdir() if p.name.startswith(".")]


def test_noop_rebuild_runs_no_pass_and_starts_no_cluster(env):
    compile_json(env)
    before = {p: p.stat().st_mtime_ns for p in env["out"].glob("*/*.bir.json")}
    code, rep = compile_json(env, workers="2")
    assert code == 0 and rep["executed"] == 0 and rep["cached"] == 12
    assert rep["cluster_started"] is False
    assert {p: p.stat().st_mtime_ns for p in env["out"].glob("*/*.bir.json")} == before


def test_changed_kernel_file_rebuilds_only_that_kernel(env):
    compile_json(env)
    bir_json.save(tiled_exp_module(tiles=9), env["kernels"] / "k1.json")
    code, rep = compile_json(env)
    assert code == 0 and executed(rep) == {"k0": 0, "k1": 4, "k2": 0}
    steps = rep["kernels"][1]["units"][0]["steps"]
    assert "kernel file changed" in steps[0]["reason"]
    assert bir_json.load(env["out"] / "k1" / "k1.bir.json").n_insts() == tiled_exp_module(tiles=9).n_insts()


def test_set_reruns_the_changed_pass_and_what_follows(env):
    compile_json(env)
    code, rep = compile_json(env, "--set", "test_scale.factor=4")
    assert code == 0 and executed(rep) == {"k0": 3, "k1": 3, "k2": 3}
    assert bir_json.load(env["out"] / "k0" / "k0.bir.json").attributes["test_scale"] == 4.0
    code, rep = compile_json(env, "--set", "test_scale.factor=4", "--set", "test_identity.salt=3")
    assert executed(rep) == {"k0": 1, "k1": 1, "k2": 1}  # identity re-ran, its unchanged output cut off the rest


def test_failing_kernel_is_reported_and_the_others_complete(env):
    compile_json(env)
    env["pipeline"].write_text(pipeline_toml(*PASSES, ("test_fail_kernel", {"when": "k1", "litter": True})))
    args = ["compile", str(env["kernels"]), "-o", str(env["out"]), "--workers", "0", "--pipeline",
            str(env["pipeline"])]
    res = runner.invoke(app, args)
    assert res.exit_code == 1
    flat = " ".join(res.output.split())
    assert "k1.json" in flat and "refusing" in flat
    assert (env["out"] / "k0" / "k0.bir.json").exists() and (env["out"] / "k2" / "k2.bir.json").exists()
    assert not (env["out"] / "k1").exists()  # nothing half-written, no stale result either
    assert not [p for p in env["out"].iterdir() if p.name.startswith(".")]


def test_unreadable_kernel_fails_with_its_file_name(env):
    (env["kernels"] / "bad.klr").write_bytes(b"\xd9\xd9\xf7garbage")
    (env["kernels"] / "readme.txt").write_text("not a kernel")
    code, rep = compile_json(env)
    assert code == 1
    assert [f["kernel"] for f in rep["failed"]] == ["bad"] and "bad.klr" in rep["failed"][0]["error"]
    assert [Path(s["path"]).name for s in rep["skipped"]] == ["readme.txt"]
    assert executed(rep) == {"bad": 0, "k0": 4, "k1": 4, "k2": 4}
    assert not (env["out"] / "bad").exists()


def test_lnc_kernel_compiles_once_per_core_or_for_core_id(env, tmp_path):
    d = tmp_path / "lnc"
    d.mkdir()
    shutil.copy(KLR / "06_lnc2_shared.klr", d)
    env["kernels"] = d
    env["pipeline"].write_text(pipeline_toml(("test_count", {})))
    code, rep = compile_json(env)
    assert code == 0
    out = env["out"] / "06_lnc2_shared"
    cores = [bir_json.load(out / f"06_lnc2_shared.core{c}.bir.json").neuron_core_id for c in (0, 1)]
    assert cores == [0, 1]
    placeholder = bir_json.load(out / "06_lnc2_shared.core1.bir.json").functions[0].inst(0)
    assert placeholder.opname == "NKIKLIRKernel" and placeholder.attrs["kernel_format"] == "klr"
    code, rep = compile_json(env, "--core-id", "1")
    assert [u["unit"] for u in rep["kernels"][0]["units"]] == ["06_lnc2_shared[1]"]


def test_empty_directory_says_so_and_fails_without_creating_anything(tmp_path, monkeypatch):
    monkeypatch.setenv("TUSK_CACHE_DIR", str(tmp_path / "c"))
    (tmp_path / "empty").mkdir()
    res = runner.invoke(app, ["compile", str(tmp_path / "empty"), "-o", str(tmp_path / "o"), "--workers", "0"])
    assert res.exit_code == 1 and "no kernel files" in res.stderr and not res.stdout
    assert not (tmp_path / "o").exists() and not (tmp_path / "c").exists()


def test_default_directory_is_the_shipped_examples(tmp_path, monkeypatch):
    monkeypatch.setenv("TUSK_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.chdir(tmp_path)
    res = runner.invoke(app, ["compile", "--workers", "0"])
    assert (tmp_path / "tusk-out").is_dir()
    assert res.exit_code in (0, 1) and "error: " not in res.output.split("\n")[0]


def test_bad_set_is_a_usage_error(env):
    res = runner.invoke(app, ["compile", str(env["kernels"]), "-o", str(env["out"]), "--workers", "0",
                              "--pipeline", str(env["pipeline"]), "--set", "nosuch.x=1"])
    assert res.exit_code == 2 and "no pass 'nosuch'" in res.output


def test_no_cache_rebuilds_everything_and_leaves_no_store(env):
    compile_json(env)
    code, rep = compile_json(env, "--no-cache")
    assert code == 0 and rep["executed"] == 12
    assert not [p for p in env["out"].iterdir() if p.name.startswith(".")]


def test_cache_commands(env):
    compile_json(env)
    res = runner.invoke(app, ["cache", "info", "--json"])
    info = json.loads(res.stdout)
    assert res.exit_code == 0 and info["objects"] > 0 and info["actions"] == 12
    assert runner.invoke(app, ["cache", "verify"]).exit_code == 0
    store = Store(env["cache"])
    victim = next(iter(store.object_hashes()))
    flip_a_byte(store.object_path(victim))
    res = runner.invoke(app, ["cache", "verify"])
    assert res.exit_code == 1 and victim in res.output
    assert runner.invoke(app, ["cache", "verify", "--remove"]).exit_code == 0
    assert runner.invoke(app, ["cache", "verify"]).exit_code == 0
    res = runner.invoke(app, ["cache", "gc", "--max-size", "0"])
    assert res.exit_code == 0 and "removed" in res.output
    assert runner.invoke(app, ["cache", "clear"]).exit_code == 0
    assert json.loads(runner.invoke(app, ["cache", "info", "--json"]).stdout)["objects"] == 0
    code, rep = compile_json(env)  # everything rebuilt after clear
    assert rep["executed"] == 12


def test_show_still_lists_bir_json_and_klr(env):
    res = runner.invoke(app, ["show", str(env["kernels"] / "k0.json")])
    assert res.exit_code == 0 and "main" in res.output
    res = runner.invoke(app, ["show", str(KLR / "01_dma_copy.klr")])
    assert res.exit_code == 0 and "dma_copy_kernel" in res.output


@pytest.mark.parametrize("name,message", [("neg_wrong_version.klr", "Wrong KLR version"),
                                          ("neg_hlo_contents.klr", "Wrong KLIR content type"),
                                          ("neg_cpp_writer_prop_bytes.klr", "expecting Bool at byte 0x5b")])
def test_show_refuses_a_bad_klr_file_with_its_message(name, message):
    res = runner.invoke(app, ["show", str(KLR / name)])
    assert res.exit_code == 1 and message in res.output and name in res.output


def test_two_concurrent_compiles_on_one_cache_both_succeed(env):
    write_kernels(env["kernels"], 6)
    dirs = [env["tmp"] / "out-a", env["tmp"] / "out-b"]  # one OUT is one build's at a time (tests/test_out_lock.py)
    cmds = [[sys.executable, "-m", "tusk.workflows.cli", "compile", str(env["kernels"]), "-o", str(out),
             "--workers", "0", "--pipeline", str(env["pipeline"]), "--json"] for out in dirs]
    penv = dict(os.environ, PYTHONPATH=str(ROOT), TUSK_CACHE_DIR=str(env["cache"]))
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=penv, cwd=str(ROOT))
             for cmd in cmds]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (stdout, stderr) in zip(procs, outs):
        assert p.returncode == 0, stderr.decode()[-2000:]
    reports = [json.loads(o) for o, _ in outs]
    finals = [{k["kernel"]: k["units"][0]["final"] for k in r["kernels"]} for r in reports]
    assert finals[0] == finals[1] and len(finals[0]) == 6
    assert Store(env["cache"]).verify()["damaged_objects"] == []
    for out in dirs:
        for k in range(6):
            assert bir_json.load(out / f"k{k}" / f"k{k}.bir.json").attributes["test_count"] > 0


def test_stages_option_writes_every_pass_output(env):
    code, rep = compile_json(env, "--stages")
    assert code == 0
    files = sorted(p.name for p in (env["out"] / "k0" / "stages" / "k0").iterdir())
    assert files == ["01-test_expand.bir.json", "02-test_scale.bir.json", "03-test_identity.bir.json",
                     "04-test_count.bir.json"]
    code, rep = compile_json(env)  # the stages are not wanted any more: rewritten without them
    assert not (env["out"] / "k0" / "stages").exists()


def test_memory_url_cache_builds_in_process(env):
    code, rep = compile_json(env, "--cache-dir", f"memory://tusk-cli-{os.getpid()}", workers="2")
    assert code == 0 and rep["executed"] == 12 and rep["cluster_started"] is False
    code, rep = compile_json(env, "--cache-dir", f"memory://tusk-cli-{os.getpid()}", workers="2")
    assert rep["executed"] == 0
    Store(f"memory://tusk-cli-{os.getpid()}").clear()


def test_const_files_are_staged_next_to_the_output(env, tmp_path):
    from tusk.ir.builder import Builder

    d = tmp_path / "withconst"
    d.mkdir()
    b = Builder("main")
    x = b.dram("x", (128, 4), kind="ExternalInput")
    w = b.dram("w", (128, 4), kind="Const", const_path="weights/w.bin")
    y = b.dram("y", (128, 4), kind="ExternalOutput")
    t = b.sbuf("t", (128, 4), addr=0)
    b.dma(t.ap(), x.ap())
    b.dma(t.ap(), w.ap())
    b.dma(y.ap(), t.ap())
    bir_json.save(b.module(), d / "kc.json")
    (d / "weights").mkdir()
    (d / "weights" / "w.bin").write_bytes(b"\x01\x02")
    env["kernels"] = d
    code, rep = compile_json(env)
    assert code == 0
    assert (env["out"] / "kc" / "weights" / "w.bin").read_bytes() == b"\x01\x02"
    assert "weights/w.bin" in rep["kernels"][0]["files"]  # its digest is in the first key
    (d / "weights" / "w.bin").write_bytes(b"\x03")
    code, rep = compile_json(env)
    assert rep["kernels"][0]["units"][0]["steps"][0]["status"] == "executed"
    assert (env["out"] / "kc" / "weights" / "w.bin").read_bytes() == b"\x03"


def test_failed_kernel_leaves_nothing_a_pass_staged_in_out(env):
    env["pipeline"].write_text(pipeline_toml(("test_fail_kernel", {"when": "k2", "litter": True}), ("test_count", {})))
    code, rep = compile_json(env)
    assert code == 1 and [f["kernel"] for f in rep["failed"]] == ["k2"]
    assert not (env["out"] / "k2").exists() and (env["out"] / "k0" / "k0.bir.json").exists()
    failed = next(k for k in rep["kernels"] if k["kernel"] == "k2")
    assert [s["status"] for s in failed["units"][0]["steps"]] == ["failed"]


def test_cache_verify_repair_drops_a_damaged_object_and_what_names_it(env):
    """A damaged object no rebuild needs would be reported for ever: --repair drops it, its records and the
    notes naming it, so the next verify is clean and a rebuild works."""
    compile_json(env)
    store = Store(env["cache"])
    named = {h: (kind, key) for kind, key in store.note_keys() for h in store.object_hashes()
             if h in json.dumps(store.get_note(kind, key, touch=False))}
    assert named, "no note names an object: the test needs one"
    victim, (kind, key) = next(iter(named.items()))
    flip_a_byte(store.object_path(victim))
    res = runner.invoke(app, ["cache", "verify"])
    assert res.exit_code == 1 and victim in res.output
    res = runner.invoke(app, ["cache", "verify", "--repair"])
    assert res.exit_code == 0 and f"note {kind}/{key}" in res.output and "(removed)" in res.output, res.output
    assert not store.has(victim) and store.get_note(kind, key) is None
    res = runner.invoke(app, ["cache", "verify"])
    assert res.exit_code == 0 and "0 damaged, 0 bad record(s)" in res.output, res.output
    code, rep = compile_json(env)
    assert code == 0
    assert runner.invoke(app, ["cache", "verify"]).exit_code == 0
