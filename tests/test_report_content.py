"""What OUT/report.html says agrees with the summary the terminal printed: the same figures, one unit."""

from __future__ import annotations

import html as html_mod
import re
import shutil
from pathlib import Path

import tusk
from tusk.workflows.report import _rows

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "kernels"


def test_report_and_summary_give_the_same_makespans_in_cycles(tmp_path, monkeypatch):
    monkeypatch.setenv("TUSK_CACHE_DIR", str(tmp_path / "cache"))
    k = tmp_path / "k"
    k.mkdir()
    for name in ("tiled_exp.json", "rmsnorm.klr", "dynamic_loop.klr", "matmul_tiles.klr"):
        shutil.copy(EXAMPLES / name, k / name)
    from typer.testing import CliRunner

    from tusk.workflows.cli import app

    res = CliRunner().invoke(app, ["compile", str(k), "-o", str(tmp_path / "out"), "--workers", "0",
                                   "--progress", "off"])
    assert res.exit_code == 0, res.output
    result = tusk.compile_directory(k, tmp_path / "out2", workers=0)  # everything cached: same figures
    shown, rows, _ = _rows(result)
    headers = [h for h, _, _ in shown]
    assert "makespan" in headers and "rotated" in headers
    page = html_mod.unescape((tmp_path / "out" / "report.html").read_text())
    assert "µs" not in page  # one unit: the timing model's cycles, as the summary
    kernels = page[page.index("<h2>Kernels</h2>"):page.index("</table>", page.index("<h2>Kernels</h2>"))]
    timelines = page[page.index("<h2>Engine timelines</h2>"):]
    for cells in rows:
        unit, before, after = cells[0], cells[headers.index("makespan")], cells[headers.index("rotated")]
        row = re.search(rf"<tr[^>]*><td>{re.escape(unit)}</td>(.*?)</tr>", kernels)
        assert row, unit
        assert re.findall(r'<td class="n">([^<]*)</td>', row.group(1))[2:4] == [before, after], (unit, row.group(1))
        head = re.search(rf"<b>{re.escape(unit)}</b> <span>([^<]*)</span>", timelines)
        assert head, unit
        if before == "-":  # no figure in the summary: none in the report either
            assert "not timed" in head.group(1) and "cycles" not in head.group(1)
        else:
            assert f"before rotation: {before} cycles" in head.group(1)
            assert f"after rotation: {after} cycles" in head.group(1)
    assert any(c[headers.index("makespan")] == "-" for c in rows)  # dynamic_loop keeps its loop
    # what bounds each kernel: the summary's limit column, the report's table, the same resource and share
    limits = page[page.index("<h2>What limits each kernel</h2>"):page.index("</section>",
                                                                              page.index("What limits each"))]
    for cells in rows:
        unit, limit = cells[0], cells[headers.index("limit")]
        row = re.search(rf"<tr><td>{re.escape(unit)}</td>(.*?)</tr>", limits)
        if limit == "-":
            assert row is None, unit  # not timed: no bound to explain
            continue
        assert row, unit
        tds = re.findall(r"<td[^>]*>([^<]*)</td>", row.group(1))
        rotated, bound, words = tds[0], tds[1], tds[3]
        assert rotated == cells[headers.index("rotated")]
        assert int(bound.replace(",", "")) <= int(rotated.replace(",", "")), unit  # a lower bound
        share = limit.rsplit(" ", 1)[-1]
        assert words.endswith(share) if share.endswith("%") else words == "dependence chain", (unit, limit, words)


def test_limit_label_names_the_binding_resource_and_its_busy_share():
    from tusk.workflows.report import limit_label

    util = {"PE": 0.5, "SP.q0": 0.8, "SP.q1": 0.94, "DMA engines": 0.949}
    assert limit_label({"term": "engine PE", "resource": "PE"}, util) == "PE 50%"
    assert limit_label({"term": "DMA queues of SP", "resource": "DMA queues of SP"}, util) == "SP queues 94%"
    assert limit_label({"term": "DMA queues of SP", "resource": "x"}, util, short=True) == "SP q 94%"
    assert limit_label({"term": "DMA queue SP.q0", "resource": "DMA queue SP.q0"}, util) == "SP.q0 queue 80%"
    assert limit_label({"term": "DMA engines", "resource": "DMA engines"}, util, short=True) == "DMA 95%"
    assert limit_label({"term": "dependence chain", "resource": "dependence chain"}, util) == "dependence chain"
    assert limit_label(None, util) is None
