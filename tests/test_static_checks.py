"""The code as tools see it: the import path ``tusk.*`` is a real path (tusk/<sub> link to the root
folders), the type checker passes on it (pyproject's [tool.mypy], with its list of modules not yet
checked) and so does ruff."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUBPACKAGES = ("ir", "stages", "sim", "cache", "workflows", "frontend", "examples")


def test_every_subpackage_is_a_link_under_tusk():
    for sub in SUBPACKAGES:
        link = ROOT / "tusk" / sub
        assert link.is_symlink() and link.resolve() == (ROOT / sub).resolve(), sub


def test_a_clone_imports_without_installing(tmp_path):
    code = ("import tusk.stages.base, tusk.frontend.nki.language, tusk.ir.klr;"
            "print(tusk.stages.base.__file__)")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert Path(proc.stdout.strip()) == ROOT / "tusk" / "stages" / "base.py"


def test_mypy_passes():
    proc = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(ROOT / ".mypy_cache")], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_ruff_passes():
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "."], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
