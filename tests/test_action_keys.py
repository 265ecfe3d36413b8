"""Action keys cover everything a step's output depends on: all the code, the settings, the options."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tusk.cache.keys import code_digest, package_digest
from tusk.stages import pass_class
from tusk.workflows.cli import app

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "kernels"
runner = CliRunner()


def executed_steps(report: dict) -> list[str]:
    return sorted({s["label"] for k in report["kernels"] for u in k.get("units", []) for s in u["steps"]
                   if s["status"] == "executed"})


@pytest.fixture
def kernels(tmp_path):
    d = tmp_path / "k"
    d.mkdir()
    shutil.copy(EXAMPLES / "tiled_exp.json", d / "tiled_exp.json")
    return d


# ---------------------------------------------------------------- code


def _scratch_copy(dest: Path) -> Path:
    """The installed layout (tusk/ir, tusk/stages, ...: the links followed) of this checkout, as a
    directory for PYTHONPATH."""
    shutil.copytree(ROOT / "tusk", dest / "tusk", ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def _compile_with(pythonpath: Path, kernels: Path, out: Path, cache: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(pythonpath)}
    env.pop("MAXHU", None)
    proc = subprocess.run([sys.executable, "-c", "import tusk, sys; assert tusk.__file__.startswith(sys.argv[1]); "
                           "from tusk.workflows.cli import main; sys.argv[:2] = ['tusk']; main()",
                           str(pythonpath), "compile", str(kernels), "-o", str(out), "--workers", "0",
                           "--cache-dir", str(cache), "--json"], env=env, cwd=pythonpath, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def test_editing_a_helper_module_of_a_pass_makes_its_step_miss(tmp_path, kernels):
    scratch = _scratch_copy(tmp_path / "scratch")
    cache = tmp_path / "cache"
    first = _compile_with(scratch, kernels, tmp_path / "out", cache)
    assert "unroll" in executed_steps(first)
    assert executed_steps(_compile_with(scratch, kernels, tmp_path / "out", cache)) == []  # unchanged: hits
    helper = scratch / "tusk" / "stages" / "unroll_expand.py"  # not the file that defines Unroll
    helper.write_text(helper.read_text() + "\n# an edit that changes no behaviour, but the key must not know that\n")
    assert "unroll" in executed_steps(_compile_with(scratch, kernels, tmp_path / "out", cache))


def test_the_code_digest_covers_ir_stages_and_sim_and_a_plugin_pass_file():
    unroll = pass_class("unroll")
    assert code_digest(unroll) == code_digest(pass_class("build_fdeps")) == package_digest()
    from tests.passes_for_tests import Scale

    assert code_digest(Scale) not in (package_digest(), "unknown")


# ---------------------------------------------------------------- settings


def _compile(kernels: Path, out: Path, *extra: str) -> dict:
    res = runner.invoke(app, ["compile", str(kernels), "-o", str(out), "--workers", "0", "--json", *extra])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


@pytest.mark.parametrize("variable, value", [("TUSK_ARCH", "gen2"), ("TUSK_INSTRUCTION_LIMIT", "1000000")])
def test_changing_an_output_setting_misses_and_unchanged_settings_hit(tmp_path, kernels, monkeypatch, variable,
                                                                      value):
    monkeypatch.setenv("TUSK_CACHE_DIR", str(tmp_path / "cache"))
    for v in ("TUSK_ARCH", "TUSK_INSTRUCTION_LIMIT", "MAXHU"):
        monkeypatch.delenv(v, raising=False)
    cold = _compile(kernels, tmp_path / "out")
    assert executed_steps(cold) and executed_steps(_compile(kernels, tmp_path / "out")) == []
    monkeypatch.setenv(variable, value)
    changed = _compile(kernels, tmp_path / "out")
    assert executed_steps(changed) == executed_steps(cold)
    assert executed_steps(_compile(kernels, tmp_path / "out")) == []
    setting = {"TUSK_ARCH": "arch", "TUSK_INSTRUCTION_LIMIT": "instruction_limit"}[variable]
    parts = changed["kernels"][0]["units"][0]["steps"][-1]["key_parts"]
    assert str(parts["env"][setting]) == value


# ---------------------------------------------------------------- locations are not content


@pytest.mark.parametrize("store_url", [False, True], ids=["path", "fsspec-url"])
def test_another_output_directory_or_checkout_hits_every_record(tmp_path, monkeypatch, store_url):
    """The same kernels into a second -o, or from a copy of the kernel directory elsewhere, run no pass."""
    a = tmp_path / "checkout-a" / "kernels"
    a.mkdir(parents=True)
    for name in ("tiled_exp.json", "tensor_add.klr", "lnc2_matmul.klr"):
        shutil.copy(EXAMPLES / name, a / name)
    shutil.copytree(EXAMPLES / "shared_constants", a / "shared_constants")
    b = tmp_path / "checkout-b" / "kernels"
    shutil.copytree(a, b)
    cache = f"file://{tmp_path / 'store'}" if store_url else str(tmp_path / "store")
    for v in ("TUSK_ARCH", "TUSK_INSTRUCTION_LIMIT", "MAXHU", "TUSK_CACHE_DIR"):
        monkeypatch.delenv(v, raising=False)
    monkeypatch.chdir(tmp_path / "checkout-a")
    cold = _compile(a, tmp_path / "out-1", "--cache-dir", cache)
    assert cold["failed"] == [] and executed_steps(cold)
    again = _compile(a, tmp_path / "out-2", "--cache-dir", cache)  # another -o
    monkeypatch.chdir(tmp_path / "checkout-b")
    other = _compile(b, tmp_path / "out-3", "--cache-dir", cache)  # another checkout, another working directory
    for rep in (again, other):
        assert rep["failed"] == [] and rep["executed"] == 0 and executed_steps(rep) == []
        assert not rep["cluster_started"]
    for out in ("out-2", "out-3"):  # every output complete, its own artifact directory, its staged files
        for kernel in ("tiled_exp", "tensor_add"):
            final = (tmp_path / out / kernel / f"{kernel}.bir.json").read_text()
            assert f'"artifact_path":"{tmp_path / out / kernel}"' in final
        assert any((tmp_path / out / "lnc2_matmul" / "shared_constants").iterdir())
        assert (tmp_path / out / "tensor_add" / "tensor_add.klr").is_file()
