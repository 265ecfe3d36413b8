"""What `tusk compile` prints: the pipeline, a progress bar, a summary table, failures."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from tusk.workflows.compile import CompileResult
from tusk.workflows.outputs import summarize


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
        console.print(f"  [green]run[/green]   {spec}")
    for label, why in unavailable:
        console.print(f"  [dim]skip  {label}: {why}[/dim]")


def progress_bar(console: Console) -> Progress:
    return Progress(TextColumn("[bold]compiling[/bold]"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("{task.description}"), TimeElapsedColumn(), console=console, transient=True)


def summary_table(result: CompileResult) -> Table:
    table = Table(title=f"tusk compile -> {result.out}", title_justify="left")
    for col, just in (("kernel", "left"), ("insts before unroll", "right"), ("after unroll", "right"),
                      ("rotations", "right"), ("makespan before", "right"), ("after rotation", "right"),
                      ("cache hits", "right"), ("pass seconds", "right"), ("status", "left")):
        table.add_column(col, justify=just, no_wrap=col == "kernel")
    for kr in result.kernels:
        if not kr.units:
            table.add_row(kr.kernel.name, "-", "-", "-", "-", "-", "-", "-", "[red]failed[/red]")
            continue
        for u in kr.units:
            s = summarize(u)
            status = "[green]ok[/green]" if u.ok and kr.ok else "[red]failed[/red]"
            if u.ok and kr.ok and not kr.written:
                status = "[green]ok[/green] (up to date)"
            table.add_row(u.unit.name, _fmt(s["insts_before_unroll"]), _fmt(s["insts_after_unroll"]),
                          _fmt(s["rotations"]), _fmt(s["makespan_before"]), _fmt(s["makespan_after"]),
                          f"{s['cache_hits']}/{s['steps']}", f"{s['pass_seconds']:.2f}", status)
    return table


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


def print_result(console: Console, result: CompileResult, verbose: bool = False) -> None:
    for w in result.warnings:
        console.print(f"[yellow]warning:[/yellow] {w}", soft_wrap=True)
    for s in result.skipped:
        console.print(f"skipped {s.path.name}: {s.reason}")
    if not result.kernels:
        console.print("no kernel files (.klr or BIR-JSON) found; nothing to compile")
        return
    console.print(summary_table(result))
    if verbose and result.report:
        for u in result.report.units:
            for st in u.steps:
                if st.status == "executed":
                    console.print(f"  ran {u.unit.name}: {st.label} ({st.reason}) {st.seconds:.3f}s"
                                  + (f", {st.parts_executed}/{st.parts_total} parts" if st.parts_total else "")
                                  + _overhead(st.timing))
    rep = result.report
    if rep is not None:
        where = rep.executor if rep.cluster_started or rep.n_executed else "no cluster started (all cached)"
        console.print(f"{rep.n_executed} pass execution(s), {rep.n_cached} cached; {where}; "
                      f"{result.seconds:.2f}s; cache {result.store}")
        if verbose and rep.n_executed:
            t = overhead_totals(rep)
            console.print(f"time in executed steps: passes {t['run']:.2f}s; around them: fetch {t['fetch']:.2f}s, "
                          f"hash {t['hash']:.2f}s, store {t['store']:.2f}s, hand-over {t['handover']:.2f}s")
    for kr in result.failed:
        console.print(f"[red]error:[/red] {kr.kernel.name}: {kr.error}", soft_wrap=True)
