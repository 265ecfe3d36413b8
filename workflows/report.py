"""What `tusk compile` prints when it is done: the summary table, the closing line, failures; the --json form.

Instruction counts are those of the kernel: the host function a build wraps
around it (one call per kernel; translate reports it) is not counted, so
the figures match the corpus README.  Columns that no unit fills (rotations
and makespans before the pipeline has those passes) are left out.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tusk.sim.bound import queue_term, queues_term
from tusk.workflows.compile import CompileResult
from tusk.workflows.outputs import summarize

QUEUES_OF, ONE_QUEUE = queues_term(""), queue_term("")  # how the bound names its DMA-queue terms
JSON_SCHEMA = 2  # version of `tusk compile --json` (1: the unversioned form before it)
TRANSLATE = "translate_nki_ast_to_bir"


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.1f}" if abs(v) >= 100 else f"{v:.2f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def print_pipeline(console: Console, steps: list[str], unavailable: list[tuple[str, str]]) -> None:
    console.print(f"[bold]pipeline[/bold] ({len(steps)} pass(es) run)")
    for spec in steps:
        console.print(f"  [green]run[/green]   {escape(spec)}")
    for label, why in unavailable:
        console.print(f"  [dim]skip  {escape(label)}: {escape(why)}[/dim]")


# ====================================================================== figures per unit


def host_instructions(u) -> int:
    """Instructions of the host function around the kernel (not the kernel's own), from translate's stats."""
    for s in u.steps:
        if s.name == TRANSLATE and isinstance(s.insts_out, int):
            k = s.stats.get("kernel_instructions")
            if isinstance(k, int) and 0 <= k <= s.insts_out:
                return s.insts_out - k
    return 0


def kernel_counts(u) -> list[tuple[str, int | None]]:
    """(step label or "input", kernel instructions after it) through the pipeline."""
    host = host_instructions(u)
    out: list[tuple[str, int | None]] = []
    for s in u.steps:
        if s.status == "failed":
            break
        if s.name == TRANSLATE:
            out.append(("input", s.stats.get("klir_operators") if isinstance(s.stats.get("klir_operators"), int)
                        else None))
        elif not out and isinstance(s.insts_in, int):
            out.append(("input", s.insts_in - host))
        out.append((s.label, s.insts_out - host if isinstance(s.insts_out, int) else None))
    return out


def unit_status(kr, u) -> str:
    """ok | up-to-date | failed | skipped-by-failure (another core of the kernel failed)."""
    if not u.ok:
        return "failed"
    if not kr.ok:
        return "not written"  # another core of the kernel failed: nothing of it is written
    return "ok" if kr.written else "up to date"


def unit_figures(kr, u) -> dict[str, Any]:
    s = summarize(u)
    host = host_instructions(u)
    for k in ("insts_before_unroll", "insts_after_unroll"):
        if isinstance(s[k], int):
            s[k] -= host
    s["status"] = unit_status(kr, u)
    s["limit"] = limit_label(s.get("binding"), s.get("utilisation"))
    s["limit_short"] = limit_label(s.get("binding"), s.get("utilisation"), short=True)
    return s


SHORT = {"DMA engines": "DMA", "dependence chain": "chain", "kernel calls": "calls", "Activation": "Act"}


def limit_label(binding: dict | None, utilisation: dict | None, short: bool = False) -> str | None:
    """What sets a kernel's lower bound, and how busy it is over the rotated makespan: ``PE 91%``,
    ``SP queues 88%``, ``DMA engines 95%``, ``dependence chain`` (tusk.sim.explain's binding record); the
    share is busy cycles / makespan cycles, the MFU/MBU figure of neuron-profile's summary.  ``short``: the
    summary table's narrow form (``DMA 95%``, ``SP q 88%``, ``chain``)."""
    if not binding:
        return None
    util = utilisation or {}
    term, resource = str(binding.get("term", "")), str(binding.get("resource", ""))
    share: float | None
    if term.startswith(QUEUES_OF):
        engine = term[len(QUEUES_OF):]
        label = f"{engine} q" if short else f"{engine} queues"
        share = max((v for k, v in util.items() if k.startswith(f"{engine}.q")), default=None)
    elif term.startswith(ONE_QUEUE):
        label = term[len(ONE_QUEUE):] if short else f"{term[len(ONE_QUEUE):]} queue"
        share = util.get(term[len(ONE_QUEUE):])
    else:
        label, share = resource or term, util.get(resource)
        label = SHORT.get(label, label) if short else label
    return f"{label} {share:.0%}" if isinstance(share, (int, float)) else label


# ====================================================================== the table


COLUMNS = (  # (header, figure, justify); "optional" columns are shown only when some unit has a value
    ("kernel", None, "left"),
    ("insts", "insts_before_unroll", "right"),
    ("unrolled", "insts_after_unroll", "right"),
    ("rotations", "rotations", "right"),
    ("makespan", "makespan_before", "right"),
    ("rotated", "makespan_after", "right"),
    ("limit", "limit_short", "left"),
    ("cached", None, "right"),
    ("seconds", None, "right"),
    ("status", None, "left"),
)
OPTIONAL = {"rotations", "makespan_before", "makespan_after", "limit_short", "insts_before_unroll",
            "insts_after_unroll"}


def _rows(result: CompileResult, noop: bool = False) -> tuple[list[tuple], list[list[str]], list[str]]:
    """(shown columns, the cells of each row, each row's status); ``noop``: as a rebuild that finds every
    unit up to date prints them (every step cached, no pass seconds)."""
    rows: list[tuple[str, dict, str]] = []
    for kr in result.kernels:
        if not kr.units:
            rows.append((kr.kernel.name, {}, "failed"))
            continue
        for u in kr.units:
            f = unit_figures(kr, u)
            if noop:
                f = {**f, "cache_hits": f["steps"], "pass_seconds": 0.0, "status": "up to date"}
            rows.append((u.unit.name, f, f["status"]))
    shown = [c for c in COLUMNS if c[1] not in OPTIONAL or any(f.get(c[1]) is not None for _, f, _ in rows)]
    cells_of = []
    for name, f, status in rows:
        cells = []
        for header, key, _ in shown:
            if header == "kernel":
                cells.append(name)
            elif header == "cached":
                cells.append(f"{f['cache_hits']}/{f['steps']}" if f else "-")
            elif header == "seconds":
                cells.append(f"{f['pass_seconds']:.2f}" if f else "-")
            elif header == "status":
                cells.append(status)
            else:
                cells.append(_fmt(f.get(key)) if f and key is not None else "-")
        cells_of.append(cells)
    return shown, cells_of, [status for _, _, status in rows]


CAPTION = ("makespan: timing-model cycles before rotation; rotated: after; limit: what bounds the rotated "
           "makespan, and its busy share (report.html: the bound); -: not timed (a loop kept, or beyond "
           "timeline_limit: report.html says why)")


def summary_table(result: CompileResult) -> Table:
    shown, rows, statuses = _rows(result)
    table = Table(title=f"tusk compile -> {result.out}", title_justify="left")
    for header, _, just in shown:
        table.add_column(header, justify=just, no_wrap=True)
    style = {"ok": "green", "up to date": "green", "failed": "red", "not written": "yellow"}
    for cells, status in zip(rows, statuses):
        table.add_row(*[escape(c) for c in cells[:-1]], f"[{style.get(status, 'white')}]{escape(status)}[/]")
    if any(h == "makespan" for h, _, _ in shown):
        table.caption = CAPTION
    return table


def noop_summary(result: CompileResult, extra: list[str]) -> dict[str, Any] | None:
    """What a rebuild that changes nothing prints, for the no-op index (``tusk.workflows.noop``); None
    when this build's summary cannot be replayed (failures, warnings)."""
    if result.failed or result.warnings or result.report is None:
        return None
    shown, rows, _ = _rows(result, noop=True)
    traced = sum(1 for k in result.kernels if k.kernel.trace)
    steps = sum(len(u.steps) for kr in result.kernels for u in kr.units)
    traces = f"0 trace(s) of Python kernels, {traced} cached; " if traced else ""
    return {"before": [f"skipped {s.path.name}: {s.reason}" for s in result.skipped],
            "title": f"tusk compile -> {result.out}", "columns": [[h, j] for h, _, j in shown], "rows": rows,
            "caption": CAPTION if any(h == "makespan" for h, _, _ in shown) else "",
            "closing": f"{traces}0 pass execution(s), {steps} cached; no cluster started (all cached); "
                       "{seconds}s; cache " + result.store, "after": list(extra)}


def _overhead(timing: dict) -> str:
    """`` [fetch 0.31s, hash 0.14s, ...]``: where an executed step's time went besides the pass."""
    parts = [f"{k} {timing[k]:.3f}s" for k in ("fetch", "hash", "store", "verify", "handover", "queued")
             if isinstance(timing.get(k), float)]
    if timing.get("from_memory"):
        parts.append("input from memory")
    return escape(f"  [{', '.join(parts)}]") if parts else ""


def overhead_totals(report) -> dict[str, float]:
    """Seconds of every executed step of a build, by kind: run (the passes), fetch, hash, store, hand-over."""
    totals = dict.fromkeys(("run", "fetch", "hash", "store", "verify", "handover"), 0.0)
    for u in report.units:
        for st in u.steps:
            if st.status == "executed":
                for k in totals:
                    v = st.timing.get(k)
                    totals[k] += v if isinstance(v, float) else 0.0
    return totals


def print_result(console: Console, result: CompileResult, verbose: bool = False, err: Console | None = None,
                 extra: list[str] | None = None) -> None:
    """The summary on ``console``; warnings and errors on ``err`` (stderr)."""
    err = err or console
    for w in result.warnings:
        err.print(f"[yellow]warning:[/yellow] {escape(w)}", soft_wrap=True)
    from tusk.workflows.project import FILE

    for s in result.skipped:
        if s.path.name != FILE:  # the directory's settings, read before the build: no news
            console.print(f"skipped {escape(s.path.name)}: {escape(s.reason)}", soft_wrap=True)
    if not result.kernels:
        kernels = sum(s.kernel for s in result.skipped)
        why = (f"every kernel was skipped ({kernels}; see above)" if kernels
               else "no kernel files (.klr or BIR-JSON) found")
        err.print(f"[red]error:[/red] {why}; nothing to compile", soft_wrap=True)
        return
    console.print(summary_table(result))
    if verbose and result.report:
        for u in result.report.units:
            for st in u.steps:
                if st.status == "executed":
                    console.print(f"  ran {escape(u.unit.name)}: {escape(st.label)} ({escape(st.reason)}) "
                                  f"{st.seconds:.3f}s"
                                  + (f", {st.parts_executed}/{st.parts_total} parts" if st.parts_total else "")
                                  + _overhead(st.timing), soft_wrap=True)
    rep = result.report
    if rep is not None:
        where = rep.executor if rep.cluster_started or rep.n_executed else \
            "no cluster started (all cached)" if rep.n_cached and not result.failed else "no cluster started"
        traced = result.traces("executed", "failed"), result.traces("cached")
        traces = f"{traced[0]} trace(s) of Python kernels, {traced[1]} cached; " if any(traced) else ""
        console.print(f"{traces}{rep.n_executed} pass execution(s), {rep.n_cached} cached; {escape(where)}; "
                      f"{result.seconds:.2f}s; cache {escape(result.store)}", soft_wrap=True)
        if verbose and rep.n_executed:
            t = overhead_totals(rep)
            console.print(f"time in executed steps: passes {t['run']:.2f}s; around them: fetch {t['fetch']:.2f}s, "
                          f"hash {t['hash']:.2f}s, store {t['store']:.2f}s, hand-over {t['handover']:.2f}s")
    for line in extra or []:
        console.print(line, soft_wrap=True, markup=False, highlight=False)
    for kr in result.failed:
        err.print(f"[red]error:[/red] {escape(kr.kernel.name)}: {escape(str(kr.error))}", soft_wrap=True)


# ====================================================================== --json


def result_json(result: CompileResult, files: dict[str, str] | None = None) -> dict[str, Any]:
    """``tusk compile --json``: the build report with a schema version and each kernel's status."""
    data = result.to_json()
    data["schema"] = JSON_SCHEMA
    data["exit_code"] = result.exit_code
    by_name = {kr.kernel.name: kr for kr in result.kernels}
    for k in data.get("kernels", []):
        kr = by_name.get(k.get("kernel"))
        if kr is None:
            continue
        k["status"] = "failed" if not kr.ok else ("written" if kr.written else "up to date")
        if not kr.ok:
            k["fault"] = kr.fault
            k.setdefault("error", kr.error)
        for ku in k.get("units", []):
            u = next((u for u in kr.units if u.unit.name == ku.get("unit")), None)
            if u is not None:
                f = unit_figures(kr, u)
                ku["status"] = f["status"]
                ku["kernel_instructions"] = {"before_unroll": f["insts_before_unroll"],
                                             "after_unroll": f["insts_after_unroll"]}
                if isinstance(ku.get("summary"), dict):
                    ku["summary"]["limit"] = f["limit"]  # the summary table's words for the binding record
    if files:
        data["files"] = files
    return data
