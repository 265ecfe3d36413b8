"""The `tusk` command line (typer): compile, trace, show, diff, passes, cache.

Every error goes to stderr as ``error: ...``; exit codes: 0 success, 1 a
kernel (or the file shown) is at fault, 2 the command or the machine is.
What can be checked before a build starts is checked before it starts
(options, tusk.toml, the pipeline and every ``--set``, ``--stage`` names,
that the directory holds kernel files): a refused command creates nothing.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from enum import Enum
from pathlib import Path
from typing import Callable, Iterable, List, Mapping, Optional, TypeVar

import typer

from tusk.ir.errors import EXIT_CODES, InternalError, TuskError, UsageError, fault_of
from tusk.workflows.project import EXAMPLES

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
app = typer.Typer(add_completion=True, no_args_is_help=True, rich_markup_mode=None, context_settings=CONTEXT,
                  help="Tusk: compile NKI kernels (KLR or BIR-JSON) into unrolled BIR with rebuilt dependences.\n\n"
                       "Run 'tusk COMMAND -h' for a command's options and examples.")
cache_app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None, context_settings=CONTEXT,
                        help="Inspect and maintain the module cache (TUSK_CACHE_DIR).",
                        epilog="\b\nExamples:\n  tusk cache info\n  tusk cache verify --repair\n"
                               "  tusk cache gc --max-size 2G\n  tusk cache clear --cache-dir /tmp/tusk-cache")
app.add_typer(cache_app, name="cache")


# ====================================================================== helpers


def _err(text: str) -> None:
    typer.echo(f"error: {text}", err=True)


_Command = TypeVar("_Command", bound=Callable)


def exits_by_fault(codes: Mapping[str, int] = EXIT_CODES) -> Callable[[_Command], _Command]:
    """The command's TuskError goes to stderr as ``error: ...`` and sets the exit code by whose fault it is
    (:func:`tusk.ir.errors.fault_of`; ``codes``: README's 1 a kernel or the file shown, 2 the command or the
    machine): the one place a command turns an error into its exit."""
    def decorate(command: _Command) -> _Command:
        @functools.wraps(command)
        def run(*args, **kwargs):
            try:
                return command(*args, **kwargs)
            except TuskError as e:
                _err(str(e))
                raise typer.Exit(codes[fault_of(e)]) from None
        return run  # type: ignore[return-value]
    return decorate


def _version(value: bool) -> None:
    if value:
        from tusk import __version__

        typer.echo(f"tusk {__version__}")
        raise typer.Exit()


def _setting_help(name: str, text: str = "") -> str:
    from tusk.workflows import config

    s = config.BY_NAME[name]
    default = s.default()
    shown = "none" if default is None else str(default).lower() if isinstance(default, bool) else str(default)
    shown = _SHOWN_DEFAULTS.get(name, shown)
    return f"{text or s.help} [env {s.env}; tusk.toml: {name}; default: {shown}]"


# settings whose default is a choice made at run time, said in words ("none" would read as "off")
_SHOWN_DEFAULTS = {
    "cache_dir": "the user cache directory",
    "workers": "by the build's size: small builds in this process, else one worker per CPU",
    "scheduler": "none, a local cluster when workers run",
}


@app.callback()
def _root(version: bool = typer.Option(False, "--version", "-V", is_eager=True, callback=_version,
                                       help="Print Tusk's version and exit.")) -> None:
    """Tusk: compile NKI kernels (KLR or BIR-JSON) into unrolled BIR with rebuilt dependences."""


class _Out:
    """Writes lines to stdout in batches; a closed pipe (``| head``) ends the command quietly."""

    def __init__(self) -> None:
        self.buf: list[str] = []

    def write_all(self, lines: Iterable[str]) -> None:
        try:
            for line in lines:
                self.buf.append(line)
                if len(self.buf) >= 512:
                    self.flush()
            self.flush()
        except BrokenPipeError:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            raise typer.Exit(0)

    def flush(self) -> None:
        if self.buf:
            sys.stdout.write("\n".join(self.buf) + "\n")
            sys.stdout.flush()
            self.buf.clear()

    def __enter__(self) -> "_Out":
        return self

    def __exit__(self, kind, error, tb) -> None:
        if isinstance(error, TuskError):
            self.flush()  # what was listed before the error stays above it


# ====================================================================== compile


COMPILE_EPILOG = """\b
Examples:
  tusk compile                              # the shipped example kernels into ./tusk-out
  tusk compile kernels/ -o build/           # every .klr / BIR-JSON file of kernels/
  tusk compile kernels/ --set unroll.loops=marked --workers 4
  tusk compile kernels/ --arch gen3 --maxhu 8 --verify
  tusk compile kernels/ --stage unroll      # also write the module after unroll
  tusk compile kernels/ --json > build.json # the build report as JSON (schema 2)
  tusk compile kernels/ --scheduler tcp://host:8786

\b
Settings come from, highest first: the command line, DIR/tusk.toml (or
[tool.tusk] in DIR/pyproject.toml), the environment, the defaults
('tusk passes' lists them all). OUT gets one directory per kernel,
report.html (the build report: open it in a browser), build-trace.json
and <kernel>/timeline.json (open them in Perfetto or chrome://tracing).
"""


class ProgressMode(str, Enum):
    auto = "auto"
    live = "live"
    plain = "plain"
    off = "off"


@app.command(epilog=COMPILE_EPILOG)
@exits_by_fault()
def compile(
    directory: Optional[Path] = typer.Argument(None, metavar="DIR",
                                               help="Directory of kernels (default: the shipped examples)"),
    out: str = typer.Option("tusk-out", "-o", "--out", metavar="OUT", help="Output directory"),
    workers: Optional[int] = typer.Option(None, "--workers", min=0, metavar="N", help=_setting_help(
        "workers", "Local worker processes; 0: no cluster, run in this process")),
    scheduler: Optional[str] = typer.Option(None, "--scheduler", metavar="ADDR", help=_setting_help(
        "scheduler", "Address of an existing Dask scheduler, e.g. tcp://127.0.0.1:8786")),
    dashboard: bool = typer.Option(False, "--dashboard", help="Print the dashboard link of the cluster"),
    cache_dir: Optional[str] = typer.Option(None, "--cache-dir", metavar="DIR|URL",
                                            help=_setting_help("cache_dir", "Cache root: a directory or fsspec URL")),
    no_cache: bool = typer.Option(False, "--no-cache", help="Use a throw-away cache: rebuild everything"),
    core_id: Optional[int] = typer.Option(None, "--core-id", min=0, metavar="N",
                                          help="Compile LNC kernels for this logical core only "
                                               "(kernels with fewer cores are skipped)"),
    arch: Optional[str] = typer.Option(None, "--arch", metavar="NAME", help=_setting_help("arch")),
    instruction_limit: Optional[int] = typer.Option(None, "--instruction-limit", min=1, metavar="N",
                                                    help=_setting_help("instruction_limit")),
    maxhu: Optional[int] = typer.Option(None, "--maxhu", min=0, metavar="N", help=_setting_help(
        "maxhu", "Cap on the loops heuristic_unroll marks (heuristic_unroll.maxhu)")),
    sets: List[str] = typer.Option([], "--set", metavar="PASS.OPTION=VALUE",
                                   help="Set a pass option (repeatable); PASS.enabled=false drops the step; "
                                        "'tusk passes' lists the options"),
    pipeline: Optional[Path] = typer.Option(None, "--pipeline", metavar="FILE",
                                            help="TOML pipeline file of [[step]] tables (pass = \"name\", "
                                                 "options = {...})"),
    stages: bool = typer.Option(False, "--stages", help="Also write every step's output to OUT/<kernel>/stages/"),
    stage: List[str] = typer.Option([], "--stage", metavar="PASS",
                                    help="Also write this step's output to OUT/<kernel>/stages/ (repeatable; "
                                         "'tusk show OUT/<kernel> --stage PASS' reads any step from the cache)"),
    verify: Optional[bool] = typer.Option(None, "--verify/--no-verify", help=_setting_help(
        "verify", "Run the IR verifier after every pass / not at all (default: on the kernel as translated and "
                  "on the final output)")),
    flatten: bool = typer.Option(False, "--flatten", help="Write each core's kernel as functions[0] named sg0000 "
                                 "(the per-core form real-dump checkers read) instead of the host module calling "
                                 "it; see docs/bir-json.md"),
    report: bool = typer.Option(True, "--report/--no-report", show_default=False,
                                help="Write OUT/report.html, OUT/build-trace.json and OUT/<kernel>/timeline.json "
                                     "(default: on)"),
    makespans: bool = typer.Option(True, "--makespans/--no-makespans", show_default=False,
                                   help="Time each kernel before and after rotation for the summary's makespan "
                                        "columns (cached; default: on; the report's timelines need it)"),
    progress: ProgressMode = typer.Option("auto", "--progress", metavar="auto|live|plain|off",
                                          help="Live view on a terminal (auto), plain lines, or nothing"),
    as_json: bool = typer.Option(False, "--json", help="Print the build report as JSON on stdout (progress goes "
                                                       "to stderr)"),
    verbose: bool = typer.Option(False, "-v", "--verbose", help="Show the pipeline and why each pass ran"),
) -> None:
    """Compile every kernel of DIR (.klr, BIR-JSON, and the NKI .py kernels DIR's tusk.toml names as
    [kernels.NAME]) through the pass pipeline into OUT."""
    from tusk.workflows.observe import Reporter, Tee
    from tusk.workflows.progress import History, Terminal, make_display
    from tusk.workflows.project import prepare_request
    from tusk.workflows.report import print_result

    _STARTED["command"] = time.perf_counter()
    directory = directory or EXAMPLES
    if not out.strip():  # `-o "$OUT"` with OUT unset: not the current directory
        raise UsageError("-o/--out is empty: name the output directory (default: tusk-out)")
    out_dir = Path(out)
    req, cfg, pf = prepare_request(
        directory, out_dir, sets=list(sets), pipeline=pipeline, stages=stages, stage=list(stage),
        workers=workers, scheduler=scheduler, cache_dir=cache_dir,
        verify=None if verify is None else ("all" if verify else "none"), arch=arch,
        instruction_limit=instruction_limit, maxhu=maxhu, dashboard=dashboard, no_cache=no_cache,
        core_id=core_id, flatten=flatten)
    from tusk.workflows import noop, out_lock, timings

    existed = out_dir.exists()
    with out_lock.held(out_dir, out):  # another build writing OUT: refused here, before anything is written
        if not (report or makespans):
            req.timing = timings.NONE  # else the listeners say what they need (the report: timelines)
        err = Terminal(stderr=True, highlight=False)
        stream_is_tty = (sys.stderr if as_json else sys.stdout).isatty()
        console = Terminal(stderr=as_json, highlight=False, width=None if stream_is_tty else 120)
        history = History.of(cfg, str(Path(directory).resolve()))
        display = make_display(progress.value, console, history=history, verbose=verbose, dashboard=dashboard)
        if verbose and pf.path:
            display.say(f"settings from {pf.path}")

        def warn(text: str) -> None:
            err.print(f"[yellow]warning:[/yellow] {text}", soft_wrap=True, highlight=False)

        reporter = Reporter(None if no_cache else history, display.state, report=report, warn=warn)
        noop.forget(out_dir)  # whatever this build does, the index is written again only when it succeeds
        events = Tee(display, reporter)
        result = _run_build(req, out_dir, existed, events, display, err)
        result.seconds = command_seconds()  # the summary's time is the command's, post-build phases included
        if not result.kernels:
            print_result(console, result, verbose, err)
            _drop_if_empty(out_dir, existed)
            raise typer.Exit(1)
        for problem in events.errors:
            warn(f"progress display or report failed ({problem}); the build is not affected")
        _answer(result, req, reporter, events, console, err, as_json, verbose)
        raise typer.Exit(result.exit_code)


def _run_build(req, out: Path, existed: bool, events, display, err):
    """``compile_directory`` with Dask's logs in OUT/tusk.log and Ctrl-C handled: an interrupted build
    says so and leaves with 130, a refused one leaves no empty OUT behind."""
    from tusk.workflows import interrupts, out_lock
    from tusk.workflows.compile import compile_directory
    from tusk.workflows.outputs import remove_own_temp_dirs
    from tusk.workflows.progress import route_dask_logs

    def at_kill() -> None:  # a build its watchdog ends leaves no staging directory and no lock file
        remove_own_temp_dirs(out)
        out_lock.release_all()

    try:
        with route_dask_logs(out / "tusk.log"), interrupts.handled(at_kill=at_kill), \
                interrupts.children_write_to(str((out / "tusk.log").resolve())):
            return compile_directory(req, events=events)
    except TuskError:
        display.stop()
        _drop_if_empty(out, existed)
        raise
    except KeyboardInterrupt:
        interrupts.said()
        display.stop()
        err.print("[red]interrupted[/red]: nothing half-written was left in the output directory; "
                  "the next build continues from the cache", soft_wrap=True)
        if "process" in _STARTED:  # run as `tusk`: nothing may print after that line (Dask's exit hooks)
            out_lock.release_all()  # the next build need not find (and remove) the lock file
            interrupts.end_now(130)
        raise typer.Exit(130)
    finally:
        display.stop()


def _answer(result, req, reporter, events, console, err, as_json: bool, verbose: bool) -> None:
    """The build's summary (a table, or ``--json`` on stdout), then the no-op index of a clean build."""
    from tusk.workflows import noop
    from tusk.workflows.report import print_result, result_json

    try:
        if as_json:
            sys.stdout.write(json.dumps(result_json(result, reporter.files), indent=1, sort_keys=True, default=str)
                             + "\n")
            sys.stdout.flush()
            for kr in result.failed:
                _err(f"{kr.kernel.name}: {kr.error}")
        else:
            print_result(console, result, verbose, err, extra=reporter.lines(result.out))
        if noop.ARGV is not None and result.exit_code == 0 and not events.errors:
            _write_index(noop.ARGV, req, result, reporter)
    except BrokenPipeError:  # `tusk compile | head`: the build is done, the reader left
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


_STARTED: dict[str, float] = {}  # perf_counter of: "process", when `tusk` started; "command", when compile did


def command_seconds() -> float:
    """The command's wall time: since the `tusk` process started (run as a program), else since the
    compile command started (called in-process, as tests do)."""
    return time.perf_counter() - _STARTED.get("process", _STARTED.get("command", time.perf_counter()))


def _process_age() -> float | None:
    """Seconds since this process started, to the kernel's clock tick (Linux); None elsewhere."""
    try:
        with open("/proc/self/stat", encoding="ascii") as fh:
            start_ticks = int(fh.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime", encoding="ascii") as fh:
            uptime = float(fh.read().split()[0])
        return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


def _write_index(argv: list[str], req, result, reporter) -> None:
    """The no-op index of this command line (``tusk.workflows.noop``): what it read and printed; the reuse
    note of its outputs (``tusk.workflows.reuse``)."""
    from tusk.workflows import noop, reuse
    from tusk.workflows.report import noop_summary

    summary = noop_summary(result, reporter.lines(result.out))
    if summary is None:
        return
    read = []
    for kr in result.kernels:
        k = kr.kernel
        read += [str(k.path), *map(str, k.refs), *([str(k.origin)] if k.origin else [])]
    noop.write(argv, Path(req.directory), Path(req.out), read, summary)
    reuse.record(argv, req, result, reporter, read)


def _drop_if_empty(out: Path, existed: bool) -> None:
    """A refused or empty build leaves no output directory it created (removed once its lock is released)."""
    if not existed:
        from tusk.workflows import out_lock

        out_lock.drop_if_empty(out)


# ====================================================================== trace


TRACE_EPILOG = """\b
Examples:
  tusk trace kernels/add.py::nki_add --input f32[128,512] --input f32[128,512] -o add.klr
  tusk trace kernels/add.py --input f32[128,512] --input f32[128,512]   # the file's only @nki.jit function
  tusk trace kernels/mm.py::matmul --input bf16[128,512] --input bf16[512,256] --grid 2,2 --name mm
  tusk trace kernels/norm.py::rmsnorm --input f32[256,512] --arg eps=1e-6 --arg shape2D=32,16 --arg dtype=bf16
  tusk trace kernels/add.py::launcher --input f32[256,1024] --input f32[256,1024]   # calls kernel[2, 2](...)
  tusk trace examples/add.py --input f32[128,512] --path .   # its `from apis import *` reads ./apis.py
  tusk show add.klr                         # the traced kernel as BIR

\b
Tracing executes the kernel file's Python (as NKI itself does): trace only
files you trust. To build Python kernels with 'tusk compile DIR', name them
in DIR/tusk.toml ([kernels.NAME] file, function, inputs, args, grid; see README).
"""


@app.command(epilog=TRACE_EPILOG)
@exits_by_fault()
def trace(
    target: str = typer.Argument(..., metavar="FILE.py[::FUNCTION]",
                                 help="The kernel's Python file and its @nki.jit function (optional when the file "
                                      "has exactly one)"),
    inputs: List[str] = typer.Option([], "--input", "-i", metavar="DTYPE[D0,D1,...]",
                                     help="One kernel argument's dtype and shape, e.g. f32[128,512] or "
                                          "bf16[4,128,64] (repeat, in argument order)"),
    grid: Optional[str] = typer.Option(None, "--grid", metavar="N[,N...]", help="SPMD launch grid, e.g. 2 or 2,2"),
    args: List[str] = typer.Option([], "--arg", "-a", metavar="NAME=VALUE",
                                   help="A kernel parameter that is not a tensor, by name: a Python literal "
                                        "(32,16  1e-6  'text'), true/false, or a dtype (bf16): repeat"),
    name: Optional[str] = typer.Option(None, "--name", metavar="NAME",
                                       help="Name of the traced kernel (default: the function's name)"),
    out: Optional[Path] = typer.Option(None, "-o", "--out", metavar="FILE.klr",
                                       help="Where to write the KLR file (default: NAME.klr in the current "
                                            "directory, NAME being --name or the function's name)"),
    arch: Optional[str] = typer.Option(None, "--arch", metavar="NAME", help=_setting_help(
        "arch", "Target architecture: on-chip tensors are placed for its memories")),
    paths: List[str] = typer.Option([], "--path", metavar="DIR",
                                    help="A directory the kernel may import from besides its own, e.g. the "
                                         "one holding a helper it imports (repeat); its files imported by the "
                                         "trace are part of the trace"),
    nki_api: Optional[int] = typer.Option(None, "--nki-api", metavar="1|2",
                                          help="What `import nki` means: 2 (default, NKI 2.x) or 1 (NKI 1.x calls "
                                               "under the nki name, as leanprover/KLR's examples write them)"),
) -> None:
    """Trace an NKI kernel written in Python into a KLR file (KLR 0.0.12, what 'tusk compile' reads).

    Tracing runs the file's Python (its top level, then the kernel once), as NKI itself does.
    """
    from tusk.workflows.trace_cmd import trace as run_trace

    try:
        res = run_trace(target, inputs, grid, name, out, arch, args, paths, nki_api)
    except InternalError as e:
        raise InternalError(f"{e} [internal error of the NKI front end: please report it]") from None
    except TuskError:
        raise
    except Exception as e:  # noqa: BLE001 - never a traceback for the user
        raise InternalError(f"internal error while tracing {target}: {type(e).__name__}: {e} "
                            "[please report it]") from None
    typer.echo(f"wrote {res.path} (kernel {res.kernel}, {res.size:,} bytes of KLR)")
    if res.statements == 0:
        typer.echo(f"warning: kernel {res.kernel} has no instructions for these inputs (did its loops run zero "
                   f"times? inputs: {', '.join(inputs)})", err=True)


# ====================================================================== passes


PASSES_EPILOG = """\b
Examples:
  tusk passes                     # pipeline, pass options, settings
  tusk passes kernels/            # ... with the values kernels/tusk.toml gives
  tusk passes --json
"""


def _passes_data(directory: Optional[Path]) -> dict:
    from tusk import stages
    from tusk.stages.base import format_value
    from tusk.workflows import config as config_mod
    from tusk.workflows import project
    from tusk.workflows.pipeline import DEFAULT_ORDER

    if directory is not None and not Path(directory).is_dir():
        raise UsageError(f"{directory}: no such directory (tusk passes [DIR] shows the settings DIR's tusk.toml "
                         "sets; every pass is listed without one)")
    pf = project.load(directory) if directory is not None else project.ProjectFile()
    env_cfg = config_mod.load()
    cfg = config_mod.load(pf.settings)
    passes = []
    for name, loader in stages.get_all_passes().items():
        cls = loader()
        doc = (cls.__doc__ or "").strip().splitlines()
        passes.append({"name": name, "version": str(cls.version), "splittable": bool(cls.splittable),
                       "reads_files": bool(cls.reads_files), "doc": doc[0] if doc else "",
                       "options": [{"name": o.name, "type": o.type, "default": format_value(o.default),
                                    "help": o.help} for o in cls.options()]})
    settings = []
    for s in config_mod.SETTINGS:
        value = cfg.values.get(s.name)
        source = ("tusk.toml" if s.name in pf.settings else "environment" if os.environ.get(s.env)
                  else "default")
        default = s.default()
        settings.append({"name": s.name, "env": s.env, "cli": _CLI_OPTION.get(s.name),
                         "default": "the user cache directory" if s.name == "cache_dir" else default,
                         "value": value, "from": source, "affects_output": s.affects_output or bool(s.option),
                         "pass_option": s.option, "help": s.help,
                         "environment": env_cfg.values.get(s.name)})
    return {"pipeline": [{"step": n, "available": n in stages.REGISTRY} for n in DEFAULT_ORDER],
            "passes": passes, "settings": settings, "project_file": str(pf.path) if pf.path else None,
            "precedence": ["command line", "tusk.toml / [tool.tusk]", "environment", "default"]}


_CLI_OPTION = {"cache_dir": "--cache-dir", "workers": "--workers", "scheduler": "--scheduler", "verify": "--verify",
               "arch": "--arch", "instruction_limit": "--instruction-limit", "maxhu": "--maxhu"}


def _text(v) -> str:
    if v is None:
        return "none"
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


@app.command(epilog=PASSES_EPILOG)
@exits_by_fault()
def passes(directory: Optional[Path] = typer.Argument(None, metavar="DIR",
                                                      help="Show the settings as DIR's tusk.toml sets them"),
           as_json: bool = typer.Option(False, "--json", help="Print as JSON")) -> None:
    """List the pipeline, every pass with its options, and every setting with its environment variable."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    data = _passes_data(directory)
    if as_json:
        typer.echo(json.dumps(data, indent=1, default=str))
        return
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 110)
    console.print("[bold]Default pipeline[/bold] (tusk compile runs the available steps in this order)")
    for i, p in enumerate(data["pipeline"], 1):
        console.print(f"  {i:2d}  {p['step']}" + ("" if p["available"] else "  [dim](not available yet)[/dim]"))
    console.print()
    console.print("[bold]Passes[/bold] (set an option with --set PASS.OPTION=VALUE, or in tusk.toml under "
                  + escape("[passes.PASS]") + ")")
    for p in data["passes"]:
        flags = [f"v{p['version']}"] + (["splits into parts"] if p["splittable"] else []) + \
                (["reads the kernel files"] if p["reads_files"] else [])
        console.print(f"  [bold]{p['name']}[/bold]  [dim]({', '.join(flags)})[/dim]")
        if p["doc"]:
            console.print(f"      {escape(p['doc'])}", style="dim")
        if not p["options"]:
            console.print("      (no options)")
            continue
        t = Table(box=None, show_header=False, padding=(0, 2), pad_edge=False)
        t.add_column("option", no_wrap=True)
        t.add_column("type", no_wrap=True)
        t.add_column("default", no_wrap=True)
        t.add_column("help", overflow="fold")
        for o in p["options"]:
            t.add_row(f"      {o['name']}", escape(o["type"]), escape(f"= {o['default']}"), escape(o["help"]))
        console.print(t)
    console.print()
    where = f" for {directory}" + (f" ({data['project_file']})" if data["project_file"] else " (no tusk.toml)") \
        if directory is not None else ""
    console.print(f"[bold]Settings[/bold]{escape(where)}, highest first: command line, tusk.toml (or "
                  + escape("[tool.tusk]") + " in pyproject.toml), environment, default")
    for s in data["settings"]:
        output = "changes the output" if s["affects_output"] else "output unchanged"
        console.print(f"  [bold]{s['name']:<18}[/bold] {s['cli'] or '':<20} {s['env']:<24} "
                      f"= {escape(_text(s['value']))} [dim]({s['from']}; {output})[/dim]", soft_wrap=True)
        console.print(f"      {escape(s['help'])}", style="dim")


# ====================================================================== show / diff


SHOW_EPILOG = """\b
Examples:
  tusk show kernels/rmsnorm.klr                  # as BIR (translated as the build does)
  tusk show kernels/rmsnorm.klr --klr            # the KLR statements themselves
  tusk show big.bir.json --function main --engine pe --limit 50
  tusk show tusk-out/rmsnorm                     # the steps of its last build
  tusk show tusk-out/rmsnorm --stage unroll      # the module after unroll (from the cache)
  tusk show tusk-out/rmsnorm --stage unroll --diff   # what unroll changed
"""


def _filter(function: Optional[str], engine: List[str], limit: Optional[int], tensors: bool):
    from tusk.workflows.show import Filter, engine_codes

    return Filter(function=function, engines=engine_codes(engine) if engine else None, limit=limit, tensors=tensors)


@app.command(epilog=SHOW_EPILOG)
@exits_by_fault()
def show(
    target: Path = typer.Argument(..., metavar="FILE|OUT/KERNEL",
                                  help="A .klr or BIR-JSON file, or a kernel's output directory"),
    function: Optional[str] = typer.Option(None, "--function", "-f", metavar="NAME",
                                           help="Only this function (a glob pattern is fine)"),
    engine: List[str] = typer.Option([], "--engine", "-e", metavar="ENGINE",
                                     help="Only instructions of this engine: pe, act, dve, pool, sp, dma "
                                          "(repeatable; loops are kept for context)"),
    limit: Optional[int] = typer.Option(None, "--limit", "-n", min=0, metavar="N",
                                        help="Stop after N instructions"),
    tensors: bool = typer.Option(True, "--tensors/--no-tensors", show_default=False,
                                 help="List tensors and memory locations (default: on)"),
    klr_form: bool = typer.Option(False, "--klr", help="For a .klr file: list its KLR statements instead"),
    core: int = typer.Option(0, "--core", min=0, metavar="N", help="Logical core of an LNC kernel"),
    stage: Optional[str] = typer.Option(None, "--stage", "-s", metavar="PASS|N",
                                        help="For OUT/<kernel>: the module after this step (name, label or number)"),
    diff: bool = typer.Option(False, "--diff", help="With --stage: what that step changed"),
    unit: Optional[str] = typer.Option(None, "--unit", metavar="UNIT", help="For OUT/<kernel> of an LNC kernel: "
                                                                            "the unit (kernel[core]) or core"),
    cache_dir: Optional[str] = typer.Option(None, "--cache-dir", metavar="DIR|URL",
                                            help="Cache to read stages from (default: TUSK_CACHE_DIR or the user "
                                                 "cache directory)"),
) -> None:
    """List a kernel file (KLR or BIR-JSON) in one readable notation, or a step of a build."""
    from tusk.workflows import show as sh

    with _Out() as out:
        flt = _filter(function, engine, limit, tensors)
        if sh.is_kernel_output(target):
            all_stages = sh.stages(target, unit)
            if stage is None:
                if diff:
                    raise UsageError("--diff needs --stage (the step whose change to show)")
                out.write_all(sh.stage_table(all_stages))
                return
            st = sh.find_stage(all_stages, stage)
            store = _store(cache_dir or _kernel_cache_dir(target))
            after = sh.stage_module(target, st, store)
            if diff:
                before = sh.stage_module(target, st, store, "input")
                out.write_all(_colour(sh.diff_lines(before, after, f"before {st.label}", f"after {st.label}", flt)))
            else:
                out.write_all(sh.iter_listing(after, flt))
            return
        if stage is not None or diff:
            raise UsageError("--stage and --diff read a kernel's output directory (OUT/<kernel>), not a file")
        if klr_form:
            out.write_all(sh.klr_lines(target))
            return
        out.write_all(sh.file_listing(target, core, flt))


def _kernel_cache_dir(kernel_dir: Path) -> Optional[str]:
    """The cache the kernel's tusk.toml names (next to its source, as its stats.json records it), if any."""
    from tusk.workflows import project

    try:
        source = json.loads((Path(kernel_dir) / "stats.json").read_text(encoding="utf-8")).get("source")
        return project.load(Path(source).parent).settings.get("cache_dir") if source else None
    except (OSError, ValueError, TuskError):
        return None


def _colour(lines: Iterable[str]) -> Iterable[str]:
    if not sys.stdout.isatty():
        yield from lines
        return
    for line in lines:
        if line.startswith("+") and not line.startswith("+++"):
            yield f"\x1b[32m{line}\x1b[0m"
        elif line.startswith("-") and not line.startswith("---"):
            yield f"\x1b[31m{line}\x1b[0m"
        elif line.startswith(("@@", "#")):
            yield f"\x1b[36m{line}\x1b[0m"
        else:
            yield line


IDENTICAL = "(the listings are identical)"  # the line tusk.workflows.show.diff_lines ends with when they are

DIFF_EPILOG = """\b
Exit status, as diff(1): 0 the listings are the same, 1 they differ, 2 trouble (a file that cannot be read).

\b
Examples:
  tusk diff before.bir.json after.bir.json
  tusk diff tusk-out/k/stages/k/02-heuristic_unroll.bir.json tusk-out/k/stages/k/03-unroll.bir.json
  tusk diff tusk-out/rmsnorm@unroll tusk-out/rmsnorm@build_fdeps   # two steps of a build (from the cache)
"""


def _module_of(spec: str, cache_dir: Optional[str], core: int, unit: Optional[str]):
    from tusk.workflows import show as sh

    p = Path(spec)
    if not p.exists() and "@" in spec:
        base, which = spec.rsplit("@", 1)
        if sh.is_kernel_output(Path(base)):
            st = sh.find_stage(sh.stages(Path(base), unit), which)
            return sh.stage_module(Path(base), st, _store(cache_dir or _kernel_cache_dir(Path(base))))
    if sh.is_kernel_output(p):
        raise UsageError(f"{spec} is a kernel's output directory: name a step, {spec}@PASS")
    return sh.load(p, core)


#: like diff(1), exit 1 means the listings differ: every error is trouble (2)
DIFF_EXIT_CODES = dict.fromkeys(EXIT_CODES, 2)


@app.command("diff", epilog=DIFF_EPILOG)
@exits_by_fault(DIFF_EXIT_CODES)
def diff_cmd(
    a: str = typer.Argument(..., metavar="A", help="A kernel file, or OUT/<kernel>@STEP"),
    b: str = typer.Argument(..., metavar="B", help="A kernel file, or OUT/<kernel>@STEP"),
    function: Optional[str] = typer.Option(None, "--function", "-f", metavar="NAME", help="Only this function"),
    engine: List[str] = typer.Option([], "--engine", "-e", metavar="ENGINE", help="Only this engine's instructions"),
    context: int = typer.Option(3, "--context", "-U", min=0, metavar="N", help="Lines of context"),
    core: int = typer.Option(0, "--core", min=0, metavar="N", help="Logical core of an LNC kernel file"),
    unit: Optional[str] = typer.Option(None, "--unit", metavar="UNIT", help="Unit of an LNC kernel's output"),
    cache_dir: Optional[str] = typer.Option(None, "--cache-dir", metavar="DIR|URL", help="Cache to read steps from"),
) -> None:
    """Show what changed between two modules: counts per function, then a diff of their listings."""
    from tusk.workflows import show as sh

    with _Out() as out:
        flt = _filter(function, engine, None, True)
        ma = _module_of(a, cache_dir, core, unit)
        mb = _module_of(b, cache_dir, core, unit)
        same = [False]

        def noting(lines: Iterable[str]) -> Iterable[str]:
            for line in lines:
                same[0] = same[0] or line == IDENTICAL
                yield line

        out.write_all(_colour(noting(sh.diff_lines(ma, mb, a, b, flt, context=context))))
    raise typer.Exit(0 if same[0] else 1)  # as diff(1): 0 the same, 1 different, 2 trouble


# ---------------------------------------------------------------------- cache


def _store(cache_dir: Optional[str]):
    from tusk.cache.store import Store
    from tusk.workflows import config

    return Store(config.load({"cache_dir": cache_dir}).cache_dir)


CacheDir = typer.Option(None, "--cache-dir", metavar="DIR|URL",
                        help="Cache root (default: TUSK_CACHE_DIR or the user cache directory)")


def _size(n: int) -> str:
    x = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if x < 1024 or unit == "TiB":
            return f"{x:.0f} {unit}" if unit == "B" else f"{x:.1f} {unit}"
        x /= 1024
    return str(x)


@cache_app.command("info", epilog="\b\nExamples:\n  tusk cache info\n  tusk cache info --json")
@exits_by_fault()
def cache_info(cache_dir: Optional[str] = CacheDir,
               as_json: bool = typer.Option(False, "--json", help="Print as JSON")) -> None:
    """Objects, action records and bytes in the cache."""
    from tusk.workflows import config

    root = config.load({"cache_dir": cache_dir}).cache_dir
    if "://" not in str(root) and not Path(root).expanduser().is_dir():
        raise UsageError(f"{root}: no cache there (no such directory; a build makes it)")
    info = _store(cache_dir).info()
    if as_json:
        typer.echo(json.dumps(info, indent=1, sort_keys=True))
        return
    typer.echo(f"cache:   {info['root']}\nobjects: {info['objects']} ({_size(info['object_bytes'])})\n"
               f"actions: {info['actions']} ({_size(info['action_bytes'])})\n"
               f"notes:   {info['notes']} ({_size(info['note_bytes'])}: engine timelines, ETA history, memos)\n"
               f"total:   {_size(info['bytes'])} on disk ({_size(info['file_bytes'])} in files); "
               f"what 'tusk cache gc --max-size' limits")


@cache_app.command("verify", epilog="\b\nExamples:\n  tusk cache verify\n  tusk cache verify --repair")
@exits_by_fault()
def cache_verify(cache_dir: Optional[str] = CacheDir,
                 remove: bool = typer.Option(False, "--repair", "--remove",
                                             help="Drop damaged objects and the records and notes naming them")
                 ) -> None:
    """Read and re-hash every object; report (and with --repair drop) damaged ones and what names them."""
    res = _store(cache_dir).verify(remove=remove)
    for h, why in res["damaged_objects"]:
        typer.echo(f"damaged object {h}: {why}" + (" (removed)" if remove else ""))
    for k, why in res["bad_records"]:
        typer.echo(f"bad action record {k}: {why}" + (" (removed)" if remove else ""))
    damage = bool(res["damaged_objects"] or res["bad_records"])
    typer.echo(f"{res['objects_ok']} object(s) intact, {len(res['damaged_objects'])} damaged, "
               f"{len(res['bad_records'])} bad record(s)"
               + ("; tusk cache verify --repair drops them (the next build makes them again)"
                  if damage and not remove else ""))
    if res["outdated_objects"]:  # not damage: an upgrade leaves them; nothing here reads them
        typer.echo(f"{len(res['outdated_objects'])} object(s) and {res['outdated_records']} record(s) from another "
                   f"version of Tusk, not usable by this one: "
                   + ("removed" if remove else "--repair removes them"))
    raise typer.Exit(1 if (res["damaged_objects"] or res["bad_records"]) and not remove else 0)


@cache_app.command("gc", epilog="\b\nExamples:\n  tusk cache gc --max-size 2G\n  tusk cache gc --max-size 500M")
@exits_by_fault()
def cache_gc(max_size: str = typer.Option(..., "--max-size", metavar="SIZE",
                                          help="Keep at most this much, e.g. 2G, 500M"),
             cache_dir: Optional[str] = CacheDir) -> None:
    """Drop least recently used results (records, their objects, notes) until the whole cache takes at most
    --max-size on disk."""
    from tusk.cache.store import parse_size

    limit = parse_size(max_size)
    res = _store(cache_dir).gc(limit)
    typer.echo(f"removed {res['removed_objects']} object(s), {res['removed_actions']} action record(s) and "
               f"{res['removed_notes']} note(s); {_size(res['bytes_before'])} -> {_size(res['bytes_after'])} "
               f"on disk (limit {_size(limit)})")
    if res["bytes_after"] > limit:
        typer.echo("the cache is still above the limit: what is left is the store's own skeleton, objects "
                   "written in the last minute (a build may be running) or files gc does not own", err=True)


@cache_app.command("clear", epilog="\b\nExamples:\n  tusk cache clear\n  tusk cache clear --cache-dir /tmp/c")
@exits_by_fault()
def cache_clear(cache_dir: Optional[str] = CacheDir) -> None:
    """Remove everything from the cache."""
    store = _store(cache_dir)
    store.clear()
    typer.echo(f"cleared {store.url}")


def main() -> None:
    age = _process_age()
    if age is not None:
        _STARTED["process"] = time.perf_counter() - age
    app(prog_name="tusk")


if __name__ == "__main__":
    main()
