"""One installed top-level package, ``tusk``, whatever the folders around the user look like."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "kernels"
_IGNORE = shutil.ignore_patterns(".git", "build", "dist", "*.egg-info", "__pycache__", "tusk-out", ".pytest_cache")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("src") / "tusk"
    shutil.copytree(ROOT, src, ignore=_IGNORE)
    dist = tmp_path_factory.mktemp("dist")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(src)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (whl,) = dist.glob("tusk-*.whl")
    return whl


def test_the_wheel_installs_one_top_level_package(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/", 1)[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"tusk"}
    for sub in ("ir", "ir/klr", "stages", "sim", "workflows", "cache", "examples"):
        assert f"tusk/{sub}/__init__.py" in names, sub
    assert any(n.startswith("tusk/examples/kernels/") and n.endswith(".klr") for n in names)
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    points = zipfile.ZipFile(wheel).read(entry).decode()
    assert "tusk = tusk.workflows.entry:command" in points and "full_unroll = tusk.workflows.full_unroll_cli:command" in points


def _compile(cwd: Path, out: str, cache: Path) -> dict:
    proc = subprocess.run([sys.executable, "-m", "tusk", "compile", str(EXAMPLES), "-o", out, "--workers", "0",
                           "--cache-dir", str(cache), "--json"], cwd=cwd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def _outputs(out: Path) -> dict[str, bytes]:
    """Final BIR-JSON of every kernel, with the output directory's own path taken out."""
    return {str(p.relative_to(out)): p.read_bytes().replace(str(out).encode(), b"OUT")
            for p in sorted(out.rglob("*.bir.json"))}


def test_folders_named_like_tusk_subpackages_in_the_working_directory_change_nothing(tmp_path):
    plain = tmp_path / "plain"
    plain.mkdir()
    shadowed = tmp_path / "shadowed"
    for name in ("cache", "ir", "examples", "stages", "workflows", "sim"):
        d = shadowed / name
        d.mkdir(parents=True)
        (d / "__init__.py").write_text("raise ImportError('the user\\'s own folder was imported')\n")
    (shadowed / "examples" / "kernels").mkdir()
    a = _compile(plain, "out", tmp_path / "cache-a")
    b = _compile(shadowed, "out", tmp_path / "cache-b")
    assert a["failed"] == b["failed"] == []
    assert a["executed"] == b["executed"] > 0
    assert _outputs(plain / "out") == _outputs(shadowed / "out") != {}
    # the user's folders are untouched
    assert sorted(p.name for p in (shadowed / "cache").iterdir()) == ["__init__.py"]


def test_python_dash_m_tusk_runs_the_cli():
    proc = subprocess.run([sys.executable, "-m", "tusk", "--help"], capture_output=True, text=True)
    assert proc.returncode == 0 and "compile" in proc.stdout
