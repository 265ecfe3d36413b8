"""A second ``-o`` from the same cache: the earlier build's files are copied (tusk.workflows.reuse), without
importing the build, and the result is what the real build writes."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "kernels"
HEAVY = ("numpy", "dask", "distributed", "zarr", "tusk.stages", "tusk.workflows.graph", "tusk.cache.store")
REAL_BUILD = "import sys; sys.argv[0] = 'tusk'; from tusk.workflows.cli import main; main()"  # no shortcut


@pytest.fixture
def project(tmp_path):
    k = tmp_path / "k"
    k.mkdir()
    for name in ("tiled_exp.json", "rmsnorm.klr", "lnc2_matmul.klr"):
        shutil.copy(EXAMPLES / name, k / name)
    shutil.copytree(EXAMPLES / "shared_constants", k / "shared_constants")
    return k, tmp_path / "cache"


def tusk(project, out: Path, *extra, real: bool = False):
    """``python -m tusk compile`` (or the typer application alone: ``real``): (exit code, stdout, imported)."""
    k, cache = project
    run = ["-c", REAL_BUILD] if real else ["-m", "tusk"]
    proc = subprocess.run([sys.executable, "-X", "importtime", *run, "compile", str(k), "-o", str(out),
                           "--cache-dir", str(cache), "--progress", "off", *extra], capture_output=True, text=True,
                          check=False, cwd=str(k.parent))
    imported = {line.split("|")[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.returncode, proc.stdout, imported


def _heavy(imported: set[str]) -> list[str]:
    return sorted(m for m in imported if m.startswith(HEAVY))


def _timeless(x, out: Path):
    """A build's JSON with this command's wall times and its output directory left out."""
    if isinstance(x, dict):
        return {k: None if k == "seconds" and ({"unit", "pass_seconds", "exit_code"} & x.keys()) else
                _timeless(v, out) for k, v in x.items()}
    if isinstance(x, list):
        return [_timeless(v, out) for v in x]
    return x.replace(str(out), "OUT") if isinstance(x, str) else x


def _page(path: Path, out: Path) -> str:
    text = path.read_text(encoding="utf-8").replace(str(out), "OUT")
    text = re.sub(r"<span>wall time</span><b>[^<]*</b>", "", text)
    return re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", "WHEN", text)


def same_outputs(b: Path, c: Path) -> None:
    files = sorted(str(p.relative_to(b)) for p in b.rglob("*") if p.is_file())
    assert files == sorted(str(p.relative_to(c)) for p in c.rglob("*") if p.is_file())
    for rel in files:
        x, y = b / rel, c / rel
        if rel.endswith("stats.json"):
            assert _timeless(json.loads(x.read_text()), b) == _timeless(json.loads(y.read_text()), c), rel
        elif rel == "report.html":
            assert _page(x, b) == _page(y, c)
        elif rel.startswith(".tusk"):
            continue
        else:  # BIR-JSON outputs name their directory; everything else is the same bytes
            assert x.read_bytes().replace(str(b).encode(), b"OUT") == y.read_bytes().replace(str(c).encode(),
                                                                                             b"OUT"), rel


def test_a_second_out_is_copied_without_importing_the_build_and_equals_the_real_build(project, tmp_path):
    a, b, c = tmp_path / "A", tmp_path / "B", tmp_path / "C"
    tusk(project, a)
    _, text, imported = tusk(project, b, "--json")
    assert not _heavy(imported), _heavy(imported)
    _, real_text, imported = tusk(project, c, "--json", real=True)
    assert "numpy" in imported
    fast, real = json.loads(text), json.loads(real_text)
    assert fast["executed"] == 0 and fast["cached"] == real["cached"] > 0
    assert _timeless(fast, b) == _timeless(real, c)
    same_outputs(b, c)
    assert "artifact_path" in (b / "rmsnorm" / "rmsnorm.bir.json").read_text()[:200]
    assert f'"artifact_path":"{b / "rmsnorm"}"' in (b / "rmsnorm" / "rmsnorm.bir.json").read_text()[:400]
    # the printed summary too, and the copy's own no-op index works
    d, e = tmp_path / "D", tmp_path / "E"
    _, printed, imported = tusk(project, d)
    assert not _heavy(imported)
    _, real_printed, _ = tusk(project, e, real=True)
    spelled = lambda s, out: re.sub(r"\d+\.\d\ds; cache", "Ts; cache", s.replace(str(out), "OUT"))  # noqa: E731
    assert spelled(printed, d) == spelled(real_printed, e)
    _, again, imported = tusk(project, d)
    assert not _heavy(imported) and "rich" not in imported and "up to date" in again


def test_a_changed_kernel_a_used_out_or_a_lost_record_builds_for_real(project, tmp_path):
    k, cache = project
    tusk(project, tmp_path / "A")
    # an OUT that holds something: the real build looks at it
    used = tmp_path / "used"
    used.mkdir()
    (used / "notes.txt").write_text("mine")
    _, text, imported = tusk(project, used, "--json")
    assert "numpy" in imported and json.loads(text)["executed"] == 0 and (used / "notes.txt").is_file()
    # a record gone (gc, clear): the step runs again
    # a step's record (a part's record alone is not missed: its step's record still hits)
    actions = [a for a in sorted((cache / "actions").rglob("*.json"))
               if json.loads(a.read_text()).get("kind") == "action"]
    actions[0].unlink()
    _, text, imported = tusk(project, tmp_path / "B", "--json")
    assert "numpy" in imported and json.loads(text)["executed"] >= 1
    # a changed kernel: its passes run, and its output is the new kernel's
    shutil.copy(EXAMPLES / "tiled_add.json", k / "tiled_exp.json")
    _, text, imported = tusk(project, tmp_path / "C", "--json")
    report = json.loads(text)
    assert "numpy" in imported and report["executed"] > 0
    _, ref, _ = tusk(project, tmp_path / "D", "--json", "--no-cache")
    final = lambda r: {u["unit"]: u["final"] for kk in r["kernels"] for u in kk["units"]}  # noqa: E731
    assert final(report) == final(json.loads(ref))


def test_the_no_op_summary_off_a_terminal_is_the_text_rich_draws(capsys):
    from tusk.workflows import noop

    summary = {"before": ["skipped README.md: not a kernel file"], "title": "tusk compile -> /o",
               "columns": [["kernel", "left"], ["insts", "right"], ["status", "left"]],
               "rows": [["a_kernel[0]", "1,234", "up to date"], ["b", "5", "up to date"]], "caption": "cycles",
               "closing": "0 pass execution(s), 24 cached; {seconds}s; cache /c", "after": ["report: /o/report.html"]}
    noop.print_summary({"summary": summary}, 0.5)
    drawn = capsys.readouterr().out
    noop.print_summary({"summary": {**summary, "plain": noop.plain_text(summary)}}, 0.5)
    assert capsys.readouterr().out == drawn and "0.50s; cache /c\nreport: /o/report.html\n" in drawn
    noop.print_summary({"summary": {**summary, "plain": "PLAIN\n"}}, 0.5)
    assert capsys.readouterr().out.startswith("PLAIN\n0 pass execution(s)")  # the stored text is what is printed
