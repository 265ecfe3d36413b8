"""``OUT/report.html``: the build report, one self-contained page (plotly.js inlined; opens offline).

What it shows:

* a header: when, where, which executor, kernels built / failed, passes run / cached;
* **Kernels**: per unit, status, kernel instructions before and after
  unrolling, cache hits, seconds, the error of a failed one;
* **Pass time**: per unit a bar split by pass -- seconds of the passes
  that ran in this build, and (hatched) the recorded seconds of the ones
  that were cached;
* **Cache**: per unit and pass, hit or run and *why it ran* (the action
  key part that changed: input, options, pass source, kernel file,
  settings), or where it failed;
* **Instructions through the pipeline**: each unit's kernel instruction
  count after every pass (log scale);
* **Engine timelines**: per unit, the timing model's timeline of the kernel
  before rotation and after it (one lane per engine and DMA queue;
  neighbouring instructions merged into counted segments past
  ``trace.OVERVIEW_LIMIT``), with makespan and lower bound; the details of
  every instruction are in ``OUT/<kernel>/timeline.json``;
* **Build timeline**: which worker ran which task when (the same data as
  ``OUT/build-trace.json``).

Figures are plotly figure dictionaries drawn by plotly.js, which the page
carries inline (``plotly.offline.get_plotlyjs()``): no network is needed.
Kernels past the first few are drawn when their section is opened.
"""

from __future__ import annotations

import html
import json
import math
import time
from typing import Any

from tusk import __version__
from tusk.workflows.report import kernel_counts, unit_figures
from tusk.workflows.task_log import TaskLog
from tusk.workflows.trace import Phase

OPEN_KERNELS = 6            # engine-timeline sections open (and drawn) when the page loads
PALETTE = ("#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#eeca3b", "#b279a2", "#ff9da6",
           "#9d755d", "#bab0ac", "#1f77b4", "#8c564b", "#17becf", "#bcbd22")


def _color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _secs(s: float) -> str:
    return f"{s * 1000:.0f} ms" if s < 1 else f"{s:.2f} s"


class _Figures:
    def __init__(self) -> None:
        self.figs: dict[str, dict] = {}

    def add(self, data: list[dict], layout: dict, height: int = 320) -> str:
        fid = f"fig{len(self.figs)}"
        base = {"height": height, "margin": {"l": 10, "r": 10, "t": 36, "b": 40}, "hovermode": "closest",
                "font": {"size": 12}, "legend": {"font": {"size": 11}}, "template": None}
        self.figs[fid] = {"data": data, "layout": {**base, **layout}}
        return f'<div class="plot" id="{fid}" style="height:{height}px"></div>'


# ====================================================================== sections


def _header(result, n_units: int) -> str:
    rep = result.report
    ok = sum(1 for k in result.kernels if k.ok)
    failed = len(result.kernels) - ok
    executed = rep.n_executed if rep else 0
    cached = rep.n_cached if rep else 0
    where = (rep.executor if rep and (rep.cluster_started or rep.n_executed) else "no cluster (all cached)")
    facts = [("kernels", f"{ok} built" + (f", {failed} failed" if failed else "")), ("units", n_units),
             ("passes", f"{executed} run, {cached} cached"), ("executor", where),
             ("wall time", _secs(result.seconds)), ("cache", result.store)]
    items = "".join(f"<div><span>{_e(k)}</span><b>{_e(v)}</b></div>" for k, v in facts)
    when = time.strftime("%Y-%m-%d %H:%M:%S")
    return (f'<header><h1>tusk compile <small>&rarr; {_e(result.out)}</small></h1>'
            f'<p class="sub">Tusk {_e(__version__)}, {when}</p><div class="facts">{items}</div></header>')


def _kernels(result, figures: list[tuple[Any, Any, dict]]) -> str:
    spans = any(f.get(k) is not None for _, _, f in figures for k in ("makespan_before", "makespan_after"))
    rows = []
    for kr in result.kernels:
        if kr.units:
            continue
        blank = "<td></td>" * (6 if spans else 4)
        rows.append(f'<tr class="failed"><td>{_e(kr.kernel.name)}</td><td class="st">failed</td>'
                    f'{blank}<td class="err">{_e(kr.error or "")}</td></tr>')  # failed before it had units
    for kr, u, f in figures:
        err = u.error or (kr.error if not kr.ok else "")
        cols = (f'<td class="n">{_num(f["makespan_before"])}</td><td class="n">{_num(f["makespan_after"])}</td>'
                if spans else "")
        rows.append(f'<tr class="{_e(f["status"]).replace(" ", "-")}"><td>{_e(u.unit.name)}</td>'
                    f'<td class="st">{_e(f["status"])}</td>'
                    f'<td class="n">{_num(f["insts_before_unroll"])}</td>'
                    f'<td class="n">{_num(f["insts_after_unroll"])}</td>{cols}'
                    f'<td class="n">{f["cache_hits"]}/{f["steps"]}</td>'
                    f'<td class="n">{f["pass_seconds"]:.3f}</td><td class="err">{_e(err or "")}</td></tr>')
    head = '<th>makespan (cycles)</th><th>rotated (cycles)</th>' if spans else ""
    return ('<section><h2>Kernels</h2><table class="grid"><thead><tr><th>unit</th><th>status</th>'
            f'<th>instructions</th><th>unrolled</th>{head}<th>cached</th><th>pass seconds</th><th>error</th></tr>'
            '</thead><tbody>' + "".join(rows) + "</tbody></table>"
            + ('<p class="note">makespan: the timing model\'s cycles before rotation; rotated: after (the '
               'summary\'s figures)</p>' if spans else "") + "</section>")


# the utilisation columns of "What limits each kernel", after neuron-profile's summary (MFU/MBU)
LIMIT_LANES = ("PE", "Activation", "Pool", "DVE", "SP", "DMA engines", "DRAM")


def _limits(figures: list[tuple[Any, Any, dict]]) -> str:
    """Per unit: the rotated makespan, the lower bound, what sets it and how busy each engine and shared DMA
    resource is (busy cycles / makespan cycles; tusk.sim.explain's record, the summary's bound and limit)."""
    timed = [(u, f) for _, u, f in figures if f.get("lower_bound") is not None]
    if not timed:
        return ""
    rows = []
    for u, f in timed:
        util = f.get("utilisation") or {}
        queues = [v for k, v in util.items() if ".q" in k]
        shares = [util.get(lane) for lane in LIMIT_LANES] + [max(queues, default=None)]
        span = f["makespan_after"]
        eff = f'{f["efficiency"]:.0%}' if isinstance(f.get("efficiency"), float) else "-"
        rows.append(f'<tr><td>{_e(u.unit.name)}</td><td class="n">{_num(span)}</td>'
                    f'<td class="n">{_num(f["lower_bound"])}</td><td class="n">{eff}</td>'
                    f'<td>{_e(f.get("limit") or "-")}</td>'
                    + "".join(f'<td class="n">{_pct(v)}</td>' for v in shares) + "</tr>")
    lanes = "".join(f"<th>{_e(lane)}</th>" for lane in (*LIMIT_LANES, "busiest DMA queue"))
    return ('<section><h2>What limits each kernel</h2><table class="grid"><thead><tr><th>unit</th>'
            '<th>rotated (cycles)</th><th>lower bound (cycles)</th><th>bound / makespan</th><th>limited by</th>'
            f'{lanes}</tr></thead><tbody>' + "".join(rows) + '</tbody></table><p class="note">lower bound: no '
            'legal order of the final program takes fewer cycles (engine work, DMA queues and their in-flight '
            'slots, DMA engines, DRAM, the dependence chain: the largest sets it); the shares are busy cycles '
            'over the rotated makespan</p></section>')


def _pct(v: Any) -> str:
    return f"{v:.0%}" if isinstance(v, (int, float)) else "-"


def _num(v: Any) -> str:
    return f"{v:,}" if isinstance(v, int) else "-"


def _units(result) -> list:
    return [u for kr in result.kernels for u in kr.units]


def _labels(result) -> list[str]:
    labels: list[str] = []
    for u in _units(result):
        for s in u.steps:
            if s.label not in labels:
                labels.append(s.label)
    return labels


def _pass_time(result, figs: _Figures) -> str:
    units = _units(result)
    if not units:
        return ""
    names = [u.unit.name for u in units]
    data = []
    for i, label in enumerate(_labels(result)):
        for status, pattern, opacity in (("executed", "", 1.0), ("cached", "/", 0.45)):
            xs, hover = [], []
            for u in units:
                s = next((s for s in u.steps if s.label == label and s.status == status), None)
                xs.append(round(s.seconds, 6) if s else 0)
                hover.append(f"{u.unit.name}: {label} {'ran' if status == 'executed' else 'cached'}"
                             + (f", {s.seconds:.3f} s" if s else "")
                             + (f" ({s.reason})" if s and s.reason else ""))
            if not any(xs):
                continue
            data.append({"type": "bar", "orientation": "h", "name": f"{label}" + (" (cached)" if status == "cached"
                                                                                  else ""),
                         "legendgroup": label, "y": names, "x": xs, "hovertext": hover, "hoverinfo": "text",
                         "marker": {"color": _color(i), "opacity": opacity,
                                    "pattern": {"shape": pattern}}})
    if not data:
        return '<section><h2>Pass time</h2><p class="note">No pass time recorded.</p></section>'
    height = max(220, 60 + 24 * len(names))
    div = figs.add(data, {"barmode": "stack", "xaxis": {"title": {"text": "seconds"}},
                          "yaxis": {"autorange": "reversed", "automargin": True},
                          "title": {"text": "seconds per pass (solid: ran in this build; hatched: cached, "
                                            "time recorded when it ran)"}}, height)
    return f'<section><h2>Pass time</h2>{div}</section>'


def _why(u) -> str:
    """Why a unit's steps ran: the first one that ran and its reason, plus any other reason that is not
    just the consequence of an earlier step's new output ("input changed")."""
    ran = [s for s in u.steps if s.status == "executed"]
    failed = next((s for s in u.steps if s.status == "failed"), None)
    if not ran:
        return f"{failed.label} failed" if failed else "everything cached"
    parts = [f"{ran[0].label}: {ran[0].reason}"]
    for s in ran[1:]:
        if s.reason not in ("input changed", ran[0].reason, "not built before"):
            parts.append(f"{s.label}: {s.reason}")
    return "; ".join(parts)


def _cache(result) -> str:
    labels = _labels(result)
    units = _units(result)
    if not units:
        return ""
    head = "".join(f'<th class="v"><span>{_e(label)}</span></th>' for label in labels)
    rows = []
    for u in units:
        cells = []
        for label in labels:
            s = next((s for s in u.steps if s.label == label), None)
            if s is None:
                cells.append('<td class="none" title="not reached">&middot;</td>')
            elif s.status == "cached":
                cells.append(f'<td class="hit" title="{_e(label)}: cached ({_e(s.seconds and f"{s.seconds:.3f} s when it ran" or "")})">&#10003;</td>')
            elif s.status == "executed":
                parts = f", {s.parts_executed}/{s.parts_total} parts" if s.parts_total else ""
                cells.append(f'<td class="miss" title="{_e(label)} ran: {_e(s.reason)}{_e(parts)}, '
                             f'{s.seconds:.3f} s">&#9679;</td>')
            else:
                cells.append(f'<td class="fail" title="{_e(label)} failed: {_e(s.reason[:300])}">&#10007;</td>')
        rows.append(f"<tr><td>{_e(u.unit.name)}</td>{''.join(cells)}<td class=\"why\">{_e(_why(u))}</td></tr>")
    return ('<section><h2>Cache</h2><p class="note">Each step is looked up by its action key (pass, version, '
            'source, options, input, settings, kernel files): <span class="hit">&#10003; cached</span>, '
            '<span class="miss">&#9679; ran</span> (hover for the reason), <span class="fail">&#10007; failed'
            '</span>. A step whose input changed because an earlier step ran is not a separate cause.</p>'
            f'<div class="scroll"><table class="grid cache"><thead><tr><th>unit</th>{head}<th>why it ran</th>'
            '</tr></thead><tbody>' + "".join(rows) + "</tbody></table></div></section>")


def _instructions(result, figs: _Figures) -> str:
    units = [u for u in _units(result) if u.steps]
    if not units:
        return ""
    data = []
    for i, u in enumerate(units):
        pts = [(label, n) for label, n in kernel_counts(u) if isinstance(n, int)]
        if not pts:
            continue
        data.append({"type": "scatter", "mode": "lines+markers", "name": u.unit.name,
                     "x": [p[0] for p in pts], "y": [max(p[1], 1) for p in pts],
                     "hovertext": [f"{u.unit.name} after {p[0]}: {p[1]:,} instructions" for p in pts],
                     "hoverinfo": "text", "line": {"color": _color(i)}})
    if not data:
        return ""
    values = [y for d in data for y in d["y"]]
    decades = math.log10(max(values) / max(1, min(values))) if values else 0.0
    div = figs.add(data, {"yaxis": {"type": "log", "dtick": "D2" if decades < 3 else 1, "automargin": True,
                                    "title": {"text": "kernel instructions"}},
                          "xaxis": {"type": "category", "automargin": True},
                          "title": {"text": "kernel instructions after each pass (input: as the file has them)"}},
                   360)
    return f'<section><h2>Instructions through the pipeline</h2>{div}</section>'


def _utilization_fig(tl: dict, title: str, figs: _Figures, xmax: float | None) -> str:
    """A timeline too large to draw instruction by instruction: how busy each lane is, slice by slice."""
    us = 1.0  # cycles, the timing model's unit (the summary's too)
    u = tl["utilization"]
    lanes = tl["lanes"]
    x = [round((u["t0"] + (b + 0.5) * u["dt"]) * us, 4) for b in range(u["bins"])]
    data = [{"type": "heatmap", "z": u["lanes"], "x": x, "y": lanes, "zmin": 0, "zmax": 1,
             "colorscale": [[0, "#f7fbff"], [0.25, "#c6dbef"], [0.5, "#6baed6"], [0.75, "#2171b5"], [1, "#08306b"]],
             "colorbar": {"title": {"text": "busy"}, "thickness": 12},
             "hovertemplate": "%{y}<br>cycle %{x:,.0f}: %{z:.0%} busy<extra></extra>"}]
    ms = tl["makespan"] * us
    lb = tl.get("lower_bound", 0.0) * us
    text = (f"{title}: makespan {_cycles(ms)} (bound {_cycles(lb)}), {tl['instructions']:,} instructions: "
            f"busy fraction per lane")
    layout = {"title": {"text": text, "font": {"size": 13}},
              "xaxis": {"title": {"text": AXIS}, "range": [0, (xmax or ms) * 1.02]},
              "yaxis": {"autorange": "reversed", "type": "category", "automargin": True}}
    return figs.add(data, layout, max(200, 70 + 26 * len(lanes)))


def _timeline_fig(tl: dict, title: str, figs: _Figures, xmax: float | None) -> str:
    us = 1.0  # cycles, the timing model's unit (the summary's too)
    lanes = tl["lanes"]
    ov = tl.get("overview")
    if ov is None:
        return _utilization_fig(tl, title, figs, xmax)
    data = []
    for k, lane in enumerate(lanes):
        idx = [j for j, ln in enumerate(ov["lane"]) if ln == k]
        if not idx:
            continue
        data.append({"type": "bar", "orientation": "h", "name": lane, "y": [lane] * len(idx),
                     "base": [round(ov["start"][j] * us, 4) for j in idx],
                     "x": [round(max(ov["end"][j] - ov["start"][j], 0.0) * us, 4) for j in idx],
                     "hovertext": [f"{lane}: {ov['label'][j]}<br>cycles {ov['start'][j] * us:,.0f}–"
                                   f"{ov['end'][j] * us:,.0f}" for j in idx],
                     "hoverinfo": "text", "marker": {"color": _color(k), "line": {"width": 0}},
                     "showlegend": False})
    ms = tl["makespan"] * us
    lb = tl.get("lower_bound", 0.0) * us
    merged = " (neighbouring instructions merged)" if ov.get("merged") else ""
    text = (f"{title}: makespan {_cycles(ms)}, lower bound {_cycles(lb)}, "
            f"{tl['instructions']:,} instructions{merged}")
    layout = {"barmode": "overlay", "bargap": 0.25, "title": {"text": text, "font": {"size": 13}},
              "xaxis": {"title": {"text": AXIS}, "range": [0, (xmax or ms) * 1.02]},
              "yaxis": {"autorange": "reversed", "type": "category", "categoryorder": "array",
                        "categoryarray": lanes, "automargin": True}}
    return figs.add(data, layout, max(200, 70 + 26 * len(lanes)))


def _timelines(result, phases: dict[str, list[Phase]], figs: _Figures, model_note: str) -> str:
    timed = {u.unit.name: list(u.timings) for u in _units(result)}
    if not phases:
        return ('<section><h2>Engine timelines</h2><p class="note">' + _e(model_note or "No timelines.")
                + "</p></section>")
    out = ['<section><h2>Engine timelines</h2><p class="note">The timing model\'s schedule of each kernel: one '
           'lane per engine and DMA queue. A DMA starts with its trigger on an engine; its transfer (waiting in '
           'its queue, then moving data) is drawn on the queue. Every instruction is in '
           '<code>&lt;kernel&gt;/timeline.json</code> (open it in Perfetto or chrome://tracing).</p>']
    n = 0
    for unit, unit_phases in phases.items():
        n += 1
        body = []
        ok = [tl for ph in unit_phases for tl in ph.timelines if tl.get("ok")]
        xmax = max((tl["makespan"] for tl in ok), default=None)
        for ph in unit_phases:
            if ph.note:
                body.append(f'<p class="note">{_e(ph.title)}: {_e(ph.note)}</p>')
            for tl in ph.timelines:
                if tl.get("ok"):
                    title = f"{ph.title}" + (f" ({tl['function']})" if tl["function"] != unit else "")
                    body.append(_timeline_fig(tl, title, figs, xmax))
                else:
                    body.append(f'<p class="note">{_e(ph.title)}, {_e(tl.get("function"))}: not timed: '
                                f'{_e(tl.get("why"))}</p>')
        summary = _headline(timed.get(unit, []), unit_phases)
        out.append(f'<details class="kernel"{" open" if n <= OPEN_KERNELS else ""}><summary><b>{_e(unit)}</b> '
                   f'<span>{_e(summary)}</span></summary>{"".join(body)}</details>')
    out.append("</section>")
    return "".join(out)


AXIS = "time (timing-model cycles)"


def _cycles(v: float) -> str:
    return f"{v:,.0f} cycles"


def _headline(timed: list, phases: list[Phase]) -> str:
    """A unit's makespans as the summary shows them: the same figures (its timing steps'), the same unit."""
    by_title = {t.title: t for t in timed}
    texts, spans = [], []
    for ph in phases:
        t = by_title.get(ph.title)
        span = t.makespan if t is not None else None
        spans.append(span)
        why = (t.why if t is not None else "") or ph.note or "no figure"
        texts.append(f"{ph.title}: " + (_cycles(round(span)) if span is not None else f"not timed ({why})"))
    text = ", ".join(texts)
    if len(spans) == 2 and spans[0] is not None and spans[1]:
        a, b = spans
        text += f" ({a / b:.2f}x)" if abs(a - b) > 1e-9 else " (unchanged)"
    return text


def _build_timeline(log: TaskLog | None, figs: _Figures, kept_trace: str | None = None) -> str:
    tasks = log.ended_tasks() if log else []
    if not tasks:
        kept = f" build-trace.json: {_e(kept_trace)}." if kept_trace else ""
        return ('<section><h2>Build timeline</h2><p class="note">No task ran in this build (everything was '
                f'cached, or it ran in this process without tasks).{kept}</p></section>')
    t0 = min(t.submitted for t in tasks)
    workers = sorted({t.worker for t in tasks})
    passes: list[str] = []
    for t in tasks:
        p = t.what.split(" ", 1)[0]
        if p not in passes:
            passes.append(p)
    data = []
    for i, p in enumerate(passes):
        sel = [t for t in tasks if t.what.split(" ", 1)[0] == p]
        data.append({"type": "bar", "orientation": "h", "name": p, "y": [t.worker for t in sel],
                     "base": [round((t.started or t.ended) - t0, 4) for t in sel],
                     "x": [round(max(0.0, t.ended - (t.started or t.ended)), 4) for t in sel],
                     "hovertext": [f"{t.unit}: {t.what}<br>{t.status}, {max(0.0, t.ended - (t.started or t.ended)):.3f}"
                                   f" s, queued {max(0.0, (t.started or t.ended) - t.submitted):.3f} s{_usage(t.usage)}"
                                   for t in sel],
                     "hoverinfo": "text", "marker": {"color": _color(i)}})
    div = figs.add(data, {"barmode": "overlay", "xaxis": {"title": {"text": "seconds since the first task"}},
                          "yaxis": {"type": "category", "automargin": True},
                          "title": {"text": "tasks by worker (build-trace.json has the same in the trace format)"}},
                   max(260, 130 + 36 * len(workers)))
    return f"<section><h2>Build timeline</h2>{div}</section>"


def _usage(usage: dict) -> str:
    """A task's CPU and page faults, for its hover text ("" when the task did not say)."""
    if not usage:
        return ""
    return (f"<br>CPU {float(usage.get('cpu_user_s') or 0.0):.3f} s user, {float(usage.get('cpu_sys_s') or 0.0):.3f}"
            f" s system; {int(usage.get('page_faults') or 0):,} page faults")


def _failures(result) -> str:
    if not result.failed:
        return ""
    items = "".join(f"<li><b>{_e(k.kernel.name)}</b> ({_e(k.fault or 'failed')}): <code>{_e(k.error)}</code></li>"
                    for k in result.failed)
    return f'<section><h2>Failures</h2><ul class="failures">{items}</ul></section>'


def _files(files: dict[str, str]) -> str:
    if not files:
        return ""
    items = "".join(f'<li><a href="{_e(rel)}">{_e(rel)}</a> &mdash; {_e(what)}</li>' for rel, what in files.items())
    return f"<section><h2>Files</h2><ul>{items}</ul></section>"


# ====================================================================== the page


CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:#222;background:#fafafa}
header,section{max-width:1200px;margin:0 auto;padding:12px 24px}
header{border-bottom:1px solid #ddd;background:#fff;max-width:none}
h1{font-size:22px;margin:8px 0 0}h1 small{color:#666;font-weight:normal;font-size:15px}
h2{font-size:17px;border-bottom:1px solid #e3e3e3;padding-bottom:4px}
.sub{color:#777;margin:2px 0 8px}.facts{display:flex;flex-wrap:wrap;gap:8px 28px}
.facts div{display:flex;flex-direction:column}.facts span{color:#888;font-size:12px}
table.grid{border-collapse:collapse;font-size:13px;background:#fff}
.grid th,.grid td{border:1px solid #e1e1e1;padding:3px 8px;text-align:left;vertical-align:top}
.grid th{background:#f2f2f2}.grid td.n{text-align:right;font-variant-numeric:tabular-nums}
tr.failed td.st{color:#c62828;font-weight:bold}tr.ok td.st,tr.up-to-date td.st{color:#2e7d32}
td.err{color:#c62828;max-width:520px;word-break:break-word}
.cache td{text-align:center}.cache td:first-child,.cache td.why{text-align:left;white-space:nowrap}
.cache td.why{color:#555;white-space:normal;min-width:260px}
.hit{background:#e8f5e9;color:#2e7d32}.miss{background:#fff3e0;color:#e65100}
.fail{background:#ffebee;color:#c62828}.cache td.none{color:#bbb}
.cache th.v{vertical-align:bottom;padding:4px 2px}.cache th.v span{writing-mode:vertical-rl;transform:rotate(180deg);
white-space:nowrap;font-weight:normal}.scroll{overflow-x:auto}.note{color:#666}
.note span{padding:0 4px}
details.kernel{background:#fff;border:1px solid #e3e3e3;border-radius:4px;margin:8px 0;padding:4px 10px}
details.kernel summary{cursor:pointer;padding:4px 0}details.kernel summary span{color:#666;margin-left:8px}
.plot{width:100%}ul.failures code{white-space:pre-wrap}
"""

JS = """
(function(){
  var figs = JSON.parse(document.getElementById('tusk-figures').textContent);
  var cfg = {displaylogo: false, responsive: true};
  function draw(el){
    if (el.dataset.drawn) return;
    var f = figs[el.id]; if (!f) return;
    el.dataset.drawn = '1';
    Plotly.newPlot(el, f.data, f.layout, cfg);
  }
  function visible(el){ var d = el.closest('details'); return !d || d.open; }
  document.querySelectorAll('div.plot').forEach(function(el){ if (visible(el)) draw(el); });
  document.querySelectorAll('details').forEach(function(d){
    d.addEventListener('toggle', function(){ if (d.open) d.querySelectorAll('div.plot').forEach(draw); });
  });
  document.body.dataset.plots = String(document.querySelectorAll('div.plot[data-drawn]').length);
})();
"""


def _finite(x: Any) -> Any:
    """JSON has no NaN or infinity: such a number becomes null (plotly leaves a gap)."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


def plotly_js() -> str:
    """plotly.js, minified, from the plotly package (no network)."""
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()


def render(result, phases: dict[str, list[Phase]] | None = None, log: TaskLog | None = None,
           files: dict[str, str] | None = None, model_note: str = "") -> str:
    """The whole page as text."""
    figs = _Figures()
    units = _units(result)
    figures = [(kr, u, unit_figures(kr, u)) for kr in result.kernels for u in kr.units]
    body = [_header(result, len(units)), _failures(result), _kernels(result, figures), _limits(figures),
            _pass_time(result, figs),
            _cache(result), _instructions(result, figs), _timelines(result, phases or {}, figs, model_note),
            _build_timeline(log, figs, (files or {}).get("build-trace.json")), _files(files or {})]
    blob = json.dumps(_finite(figs.figs), separators=(",", ":"), allow_nan=False).replace("</", "<\\/")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>tusk compile: {_e(result.out)}</title>"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<style>{CSS}</style><script>{plotly_js()}</script></head><body>"
            + "".join(body)
            + f'<script type="application/json" id="tusk-figures">{blob}</script><script>{JS}</script>'
            "</body></html>\n")
