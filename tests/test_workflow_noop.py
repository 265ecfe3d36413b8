"""The no-op index: an unchanged rebuild is answered from OUT/.tusk/index.json without importing the build."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "kernels"
HEAVY = ("numpy", "dask", "distributed", "zarr", "tusk.stages", "tusk.workflows.graph")


@pytest.fixture
def project(tmp_path):
    k = tmp_path / "k"
    k.mkdir()
    for name in ("tiled_exp.json", "rmsnorm.klr"):
        shutil.copy(EXAMPLES / name, k / name)
    return k, tmp_path / "o", tmp_path / "cache"


def tusk(project, *extra):
    """``python -m tusk compile`` (the entry point a user runs): (exit code, stdout, modules imported)."""
    k, out, cache = project
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "tusk", "compile", str(k), "-o", str(out),
                           "--cache-dir", str(cache), "--progress", "off", *extra], capture_output=True, text=True,
                          check=False, cwd=str(k.parent))
    imported = {line.split("|")[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    return proc.returncode, proc.stdout, imported


def tree(out: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(out)): (p.stat().st_size, p.stat().st_mtime_ns) for p in out.rglob("*") if p.is_file()}


def test_an_unchanged_rebuild_is_answered_from_the_index_and_writes_nothing(project):
    rc, _, imported = tusk(project)
    assert rc == 0 and "numpy" in imported
    out = project[1]
    index = json.loads((out / ".tusk" / "index.json").read_text())
    assert index["summary"]["rows"]
    before = tree(out)
    rc, noop, imported = tusk(project)
    assert rc == 0 and not [m for m in imported if m.startswith(HEAVY)], sorted(imported)
    assert "0 pass execution(s), 24 cached; no cluster started (all cached)" in " ".join(noop.split())
    assert "up to date" in noop and "tiled_exp" in noop and f"report: {out / 'report.html'}" in noop
    assert tree(out) == before  # report.html included


def test_a_changed_input_output_or_option_builds_for_real(project):
    k, out, _ = project
    assert tusk(project)[0] == 0
    # an option the index did not see
    rc, text, imported = tusk(project, "--set", "build_fdeps.ordered=false")
    assert rc == 0 and "numpy" in imported
    assert tusk(project, "--set", "build_fdeps.ordered=false")[2].isdisjoint({"numpy"})  # indexed again
    # an output removed: the build puts it back
    (out / "rmsnorm" / "rmsnorm.bir.json").unlink()
    rc, text, imported = tusk(project, "--set", "build_fdeps.ordered=false")
    assert rc == 0 and "numpy" in imported and (out / "rmsnorm" / "rmsnorm.bir.json").is_file()
    # a kernel file touched (same bytes, new mtime): the real build decides, and finds nothing to run
    st = (k / "tiled_exp.json").stat()
    os.utime(k / "tiled_exp.json", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    rc, text, imported = tusk(project, "--set", "build_fdeps.ordered=false")
    assert rc == 0 and "numpy" in imported and "0 pass execution(s)" in text
    # a new file in the kernel directory
    shutil.copy(EXAMPLES / "tensor_add.klr", k / "tensor_add.klr")
    rc, text, imported = tusk(project, "--set", "build_fdeps.ordered=false")
    assert rc == 0 and "tensor_add" in text and (out / "tensor_add" / "tensor_add.bir.json").is_file()


def test_json_and_failing_builds_are_never_answered_from_the_index(project):
    k, out, _ = project
    assert tusk(project)[0] == 0
    rc, text, imported = tusk(project, "--json")
    assert rc == 0 and json.loads(text)["executed"] == 0 and "numpy" in imported
    (k / "broken.json").write_text("{not json")
    rc, text, _ = tusk(project)
    assert rc == 1 and not (out / ".tusk" / "index.json").exists()
    rc, text, imported = tusk(project)
    assert rc == 1 and "numpy" in imported  # still failing, still built
