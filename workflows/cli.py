"""The `tusk` command line (typer): compile, show, cache."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import List, Optional

import typer

from tusk.ir.errors import TuskError

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Tusk: compile NKI kernels (KLR or BIR-JSON) into unrolled BIR with rebuilt dependences.")
cache_app = typer.Typer(add_completion=False, no_args_is_help=True,
                        help="Inspect and maintain the module cache (TUSK_CACHE_DIR).")
app.add_typer(cache_app, name="cache")

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "kernels"


@app.command()
def show(file: Path = typer.Argument(..., help="A .klr file or a BIR-JSON file")) -> None:
    """Print a readable listing of a KLR or BIR-JSON file."""
    from tusk.workflows.show import listing

    try:
        typer.echo(listing(file), nl=False)
    except TuskError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1)


@app.command()
def compile(
    directory: Optional[Path] = typer.Argument(None, help="Directory of kernels (default: the shipped examples)"),
    out: Path = typer.Option(Path("tusk-out"), "-o", "--out", help="Output directory"),
    workers: Optional[int] = typer.Option(None, "--workers", help="Local worker processes (0: no cluster, run "
                                          "in this process; default: TUSK_WORKERS, else chosen by the size of "
                                          "the build: in this process when small, one worker per CPU when not)"),
    scheduler: Optional[str] = typer.Option(None, "--scheduler", help="Address of an existing Dask scheduler, "
                                            "e.g. tcp://127.0.0.1:8786"),
    dashboard: bool = typer.Option(False, "--dashboard", help="Print the dashboard link of the local cluster"),
    cache_dir: Optional[str] = typer.Option(None, "--cache-dir", help="Cache root: a directory or fsspec URL "
                                            "(default: TUSK_CACHE_DIR or the user cache directory)"),
    no_cache: bool = typer.Option(False, "--no-cache", help="Use a throw-away cache: rebuild everything"),
    core_id: Optional[int] = typer.Option(None, "--core-id", help="Compile LNC kernels for this logical core only "
                                          "(kernels with fewer cores are skipped)"),
    as_json: bool = typer.Option(False, "--json", help="Print the build report as JSON on stdout"),
    sets: List[str] = typer.Option([], "--set", help="pass.option=value (repeatable); pass.enabled=false drops it"),
    pipeline: Optional[Path] = typer.Option(None, "--pipeline", help="TOML pipeline file ([[step]] pass=...)"),
    stages: bool = typer.Option(False, "--stages", help="Also write every pass's output to OUT/<kernel>/stages/"),
    verify: Optional[bool] = typer.Option(None, "--verify/--no-verify", help="Run the IR verifier after every "
                                          "pass / not at all (default: on the kernel as translated and on the "
                                          "final output; TUSK_VERIFY=none|ends|all)"),
    verbose: bool = typer.Option(False, "-v", "--verbose", help="Show the pipeline and why each pass ran"),
) -> None:
    """Compile every kernel of DIRECTORY (.klr or BIR-JSON) through the pass pipeline."""
    from rich.console import Console

    from tusk.workflows.compile import BuildEvents, CompileRequest, compile_directory
    from tusk.workflows.report import print_pipeline, print_result, progress_bar

    stream = sys.stderr if as_json else sys.stdout
    console = Console(stderr=as_json, width=None if stream.isatty() else 132)
    directory = directory or EXAMPLES
    req = CompileRequest(directory=directory, out=out, workers=workers, scheduler=scheduler, dashboard=dashboard,
                         cache_dir=cache_dir, no_cache=no_cache, core_id=core_id, sets=list(sets),
                         pipeline=pipeline, stages=stages,
                         verify=None if verify is None else ("all" if verify else "none"))
    bar = progress_bar(console)

    class Events(BuildEvents):
        task = None
        steps = 0

        def pipeline(self, resolved) -> None:
            if verbose:
                print_pipeline(console, [s.spec for s in resolved.steps], resolved.unavailable)

        def start(self, n_units: int, n_steps: int) -> None:
            self.task, self.steps = bar.add_task("", total=max(1, n_units * n_steps)), n_steps
            bar.start()

        def step(self, event: str, unit, label: str) -> None:
            if self.task is None:
                return
            if event in ("cached", "executed"):
                bar.advance(self.task, 1)
                bar.update(self.task, description=f"{unit.unit.name}: {label}")
            elif event == "failed":  # the unit's remaining steps will not run
                resolved = sum(1 for s in unit.steps if s.status != "failed")
                bar.advance(self.task, max(0, self.steps - resolved))
                bar.update(self.task, description=f"[red]{unit.unit.name} failed[/red]")

        def executor(self, ex) -> None:
            why = f" ({ex.reason})" if verbose and getattr(ex, "reason", "") else ""
            if getattr(ex, "is_cluster", False):
                console.print(f"started {ex.description}{why}")
            else:
                console.print(f"running passes in this process, no cluster{why}")
            if dashboard:
                link = getattr(ex, "dashboard_link", None)
                try:
                    import bokeh  # noqa: F401
                    note = ""
                except ImportError:
                    note = " (the dashboard needs bokeh: pip install -e '.[dashboard]')"
                console.print(f"dashboard: {link}{note}" if link else f"dashboard: not available{note}")

    from tusk.workflows import interrupts

    try:
        with interrupts.handled():
            result = compile_directory(req, events=Events())
    except TuskError as e:
        bar.stop()
        console.print(f"[red]error:[/red] {e}", soft_wrap=True)
        raise typer.Exit(2)
    except KeyboardInterrupt:
        bar.stop()
        console.print("[red]interrupted[/red]: nothing half-written was left in the output directory; "
                      "the next build continues from the cache", soft_wrap=True)
        raise typer.Exit(130)
    finally:
        bar.stop()
    if as_json:
        sys.stdout.write(json.dumps(result.to_json(), indent=1, sort_keys=True, default=str) + "\n")
    else:
        print_result(console, result, verbose)
    raise typer.Exit(result.exit_code)


# ---------------------------------------------------------------------- cache


def _store(cache_dir: Optional[str]):
    from tusk.cache.store import Store
    from tusk.workflows import config

    try:
        return Store(config.load({"cache_dir": cache_dir}).cache_dir)
    except TuskError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2)


CacheDir = typer.Option(None, "--cache-dir", help="Cache root (default: TUSK_CACHE_DIR or the user cache directory)")


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


@cache_app.command("info")
def cache_info(cache_dir: Optional[str] = CacheDir,
               as_json: bool = typer.Option(False, "--json", help="Print as JSON")) -> None:
    """Objects, action records and bytes in the cache."""
    info = _store(cache_dir).info()
    if as_json:
        typer.echo(json.dumps(info, indent=1, sort_keys=True))
        return
    typer.echo(f"cache:   {info['root']}\nobjects: {info['objects']} ({_size(info['object_bytes'])})\n"
               f"actions: {info['actions']} ({_size(info['action_bytes'])})\ntotal:   {_size(info['bytes'])}")


@cache_app.command("verify")
def cache_verify(cache_dir: Optional[str] = CacheDir,
                 remove: bool = typer.Option(False, "--remove", help="Remove damaged objects and bad records")) -> None:
    """Read and re-hash every object; report (and with --remove delete) damaged ones."""
    try:
        res = _store(cache_dir).verify(remove=remove)
    except TuskError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1)
    for h, why in res["damaged_objects"]:
        typer.echo(f"damaged object {h}: {why}" + (" (removed)" if remove else ""))
    for k, why in res["bad_records"]:
        typer.echo(f"bad action record {k}: {why}" + (" (removed)" if remove else ""))
    typer.echo(f"{res['objects_ok']} object(s) intact, {len(res['damaged_objects'])} damaged, "
               f"{len(res['bad_records'])} bad record(s)")
    raise typer.Exit(1 if (res["damaged_objects"] or res["bad_records"]) and not remove else 0)


@cache_app.command("gc")
def cache_gc(max_size: str = typer.Option(..., "--max-size", help="Keep at most this much, e.g. 2G, 500M"),
             cache_dir: Optional[str] = CacheDir) -> None:
    """Drop least recently used results until the cache fits in --max-size."""
    from tusk.cache.store import parse_size

    try:
        limit = parse_size(max_size)
    except TuskError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2)
    try:
        res = _store(cache_dir).gc(limit)
    except TuskError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1)
    typer.echo(f"removed {res['removed_objects']} object(s) and {res['removed_actions']} action record(s); "
               f"{_size(res['bytes_before'])} -> {_size(res['bytes_after'])}")


@cache_app.command("clear")
def cache_clear(cache_dir: Optional[str] = CacheDir) -> None:
    """Remove everything from the cache."""
    store = _store(cache_dir)
    try:
        store.clear()
    except TuskError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1)
    typer.echo(f"cleared {store.url}")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
