"""OUT/report.html in a real browser: headless Chromium draws every plot, offline, with nothing in the console.

Skipped when no Chromium is installed (`.ci/run` installs Debian's `chromium`).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

import tusk

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "kernels"
BROWSER = next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome", "chrome")
                if shutil.which(b)), None)

pytestmark = pytest.mark.skipif(BROWSER is None, reason="no Chromium installed (apt-get install chromium)")


def render(page: Path, profile: Path) -> tuple[str, str]:
    """(the DOM after scripts ran, the browser's log) -- offline: every request goes to a closed port."""
    args = [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            f"--user-data-dir={profile}", "--proxy-server=http://127.0.0.1:9", "--no-first-run",
            "--enable-logging=stderr", "--v=0", "--virtual-time-budget=15000", "--window-size=1300,2000",
            "--dump-dom", page.as_uri()]
    res = subprocess.run(args, capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stdout, res.stderr


def test_report_draws_every_plot_offline_without_console_messages(tmp_path, monkeypatch):
    monkeypatch.setenv("TUSK_CACHE_DIR", str(tmp_path / "cache"))
    k = tmp_path / "k"
    k.mkdir()
    for name in ("tiled_exp.json", "tiled_matmul.json", "rmsnorm.klr", "dynamic_loop.klr"):
        shutil.copy(EXAMPLES / name, k / name)
    (k / "broken.json").write_text("{ not json")  # a failure is reported on the page too
    result = tusk.compile_directory(k, tmp_path / "out", workers=0)
    assert result.exit_code == 1
    page = tmp_path / "out" / "report.html"
    html = page.read_text()
    assert "<script src" not in html.lower() and "<link" not in html.lower()
    expected = len(re.findall(r'<div class="plot" id="fig\d+"', html))
    closed = len(re.findall(r'<details class="kernel">', html))  # drawn when opened; all open here
    assert expected >= 5 and closed == 0

    dom, log = render(page, tmp_path / "profile")
    console = [line for line in log.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert not console, "\n".join(console)
    drawn = re.search(r'<body[^>]*data-plots="(\d+)"', dom)
    assert drawn and int(drawn.group(1)) == expected, dom[:2000]
    assert dom.count('class="main-svg"') >= expected           # plotly drew an SVG for each figure
    assert dom.count("js-plotly-plot") >= expected
    assert 'class="trace bars"' in dom                          # bars (pass time, engine timelines)
    assert "scatterlayer" in dom                                # lines (instructions through the pipeline)
    assert "broken" in dom and "Failures" in dom                # the failed kernel is on the page
    for name in ("tiled_exp", "tiled_matmul", "rmsnorm"):
        assert f"<b>{name}</b>" in dom                          # an engine-timeline section per kernel
