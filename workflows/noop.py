"""The no-op index: ``OUT/.tusk/index.json`` says when a ``tusk compile`` would change nothing.

A rebuild of unchanged kernels into an unchanged OUT runs no pass and
writes nothing, but getting there costs the imports of the build (Dask,
Zarr, numpy, the passes) and a walk through every action record.  The
index lets the command decide from a few ``stat`` calls instead, before
importing any of that (this module imports only the standard library and
``tusk.workflows.out_lock``, which does too).

What the index holds, written after a build that succeeded:

* ``fingerprint``: SHA-256 of the command line (its arguments, the working
  directory), every setting's environment variable (``TUSK_*``, ``MAXHU``),
  and Tusk itself (the path, size and mtime of every source file of the
  installed package);
* ``inputs``: path -> [size, mtime_ns] of the kernel directory's entries,
  its ``tusk.toml``/``pyproject.toml``, the pipeline file, and every file a
  kernel reads (const files, placeholders' kernels, a traced kernel's .py);
* ``outputs``: path -> [size, mtime_ns] of every file the build left in OUT;
* ``summary``: what the command prints for a rebuild that finds everything
  up to date.

:func:`check` answers "nothing changed" only if the fingerprint is the same
and every input and output still has its recorded size and mtime; anything
else (an edited, added, removed or touched file; another option; another
Tusk) runs the real build, which decides from the cache as always.  The
index is a shortcut, never the source of truth: deleting it costs one
ordinary no-op build.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from tusk.workflows.out_lock import LOCK_FILE

INDEX_FORMAT = 1
INDEX = Path(".tusk") / "index.json"
ARGV: list[str] | None = None  # the command line, when the command came through tusk.workflows.entry
# options of `tusk compile` that take a value (everything else is a flag)
VALUED = {"-o", "--out", "--workers", "--scheduler", "--cache-dir", "--core-id", "--arch", "--instruction-limit",
          "--maxhu", "--set", "--pipeline", "--stage", "--progress"}
# a command with any of these builds for real: it asks for something the index cannot give (a JSON report, a
# throw-away cache, a cluster or dashboard of its own, help)
NOT_FROM_INDEX = {"--json", "--no-cache", "--scheduler", "--dashboard", "-h", "--help", "-v", "--verbose"}


def parse(argv: list[str], allow: set[str] | frozenset[str] = frozenset()
          ) -> tuple[Path, Path, dict[str, list[str]]] | None:
    """(DIR, OUT, options) of a ``tusk compile`` command line, or None when the index cannot answer it
    (``allow``: options of NOT_FROM_INDEX the caller can answer)."""
    if not argv or argv[0] != "compile":
        return None
    opts: dict[str, list[str]] = {}
    positional: list[str] = []
    args = argv[1:]
    i = 0
    while i < len(args):
        a = args[i]
        name, eq, value = a.partition("=") if a.startswith("--") else (a, "", "")
        if name in NOT_FROM_INDEX and name not in allow:
            return None
        if name in VALUED:
            if not eq:
                i += 1
                if i >= len(args):
                    return None
                value = args[i]
            opts.setdefault(name, []).append(value)
        elif a.startswith("-"):
            opts.setdefault(a, []).append("")
        else:
            positional.append(a)
        i += 1
    if len(positional) > 1:
        return None
    if positional:
        directory = Path(positional[0])
    else:  # the shipped examples (tusk.workflows.project.EXAMPLES), found without importing anything
        import importlib.util

        spec = importlib.util.find_spec("tusk.examples")
        if spec is None or not spec.submodule_search_locations:
            return None
        directory = Path(next(iter(spec.submodule_search_locations))).resolve() / "kernels"
    out_text = (opts.get("-o") or opts.get("--out") or ["tusk-out"])[-1]
    if not out_text.strip():
        return None  # refused by the command itself
    return directory, Path(out_text), opts


_CODE_STATE: list = []


def _code_state() -> list:
    """The (path, size, mtime) of every source file of the installed package, and Python's version.  (Not
    ``tusk.__version__``: reading a distribution's metadata costs more than this whole check.)  Walked once
    per process: the no-op check and the reuse check (``tusk.workflows.reuse``) both ask."""
    if not _CODE_STATE:
        _CODE_STATE.append(_walk_code())
    return _CODE_STATE[0]


def _walk_code() -> list:
    import importlib.util

    import tusk

    state: list = [sys.version]
    roots = list(tusk.__path__)
    for sub in ("ir", "stages", "sim", "cache", "workflows", "frontend", "examples"):
        spec = importlib.util.find_spec(f"tusk.{sub}")
        if spec is not None and spec.submodule_search_locations:
            roots.extend(spec.submodule_search_locations)
    for root in sorted(set(roots)):
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and not d.startswith("."))
            for f in sorted(filenames):
                if f.endswith(".py"):
                    p = os.path.join(dirpath, f)
                    st = os.stat(p)
                    state.append([p, st.st_size, st.st_mtime_ns])
    return state


def fingerprint(argv: list[str]) -> str:
    env = sorted((k, v) for k, v in os.environ.items() if k.startswith("TUSK_") or k == "MAXHU")
    data = {"index": INDEX_FORMAT, "argv": argv, "cwd": os.getcwd(), "env": env, "code": _code_state()}
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def stat(path: str) -> list[int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns]


def _listing(directory: Path) -> dict[str, Any]:
    """The kernel directory's own entries (a new, removed or touched file changes it)."""
    out: dict[str, Any] = {str(directory): stat(str(directory))}
    try:
        with os.scandir(directory) as it:
            for e in it:
                out[os.path.join(str(directory), e.name)] = stat(e.path)
    except OSError:
        pass
    return out


def _outputs(out: Path) -> dict[str, Any]:
    files: dict[str, Any] = {}
    top = os.fspath(out)
    for dirpath, dirnames, filenames in os.walk(out):
        dirnames[:] = [d for d in dirnames if d != ".tusk"]
        for f in filenames:
            if f == LOCK_FILE and dirpath == top:
                continue  # the build writing the index holds it (tusk.workflows.out_lock)
            p = os.path.join(dirpath, f)
            files[p] = stat(p)
    return files


def check(argv: list[str]) -> dict | None:
    """The recorded index if ``argv`` would change nothing (see the module docstring), else None."""
    parsed = parse(argv)
    if parsed is None:
        return None
    _, out, _ = parsed
    try:
        index = json.loads((out / INDEX).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if os.path.lexists(out / LOCK_FILE):
        return None  # a build is writing OUT (or was killed doing so): the real build says which, or runs
    if not isinstance(index, dict) or index.get("format") != INDEX_FORMAT or not index.get("summary") or \
            index.get("fingerprint") != fingerprint(argv):
        return None
    if not inputs_unchanged(index) or _outputs(out) != index.get("outputs"):
        return None
    return index


def inputs_unchanged(index: dict) -> bool:
    """Every input ``index`` recorded (see :func:`inputs`) still has its size and mtime, and the kernel
    directory has no new entry."""
    directory = Path(index.get("directory", ""))
    recorded = index.get("inputs") or {}
    listing = _listing(directory)
    return not (any(recorded.get(p) != s for p, s in listing.items()) or
                any(stat(p) != s for p, s in recorded.items() if p not in listing))


def inputs(opts: dict[str, list[str]], directory: Path, read_files: list[str]) -> dict[str, Any]:
    """path -> [size, mtime_ns] of everything a build of ``directory`` read (see the module docstring)."""
    found = _listing(directory)
    extra: list[Path | str] = [directory / "tusk.toml", directory / "pyproject.toml", *read_files]
    extra += [Path(p) for p in opts.get("--pipeline", [])]
    for path in extra:
        found[str(path)] = stat(str(path))
    return found


def write(argv: list[str], directory: Path, out: Path, read_files: list[str], summary: dict) -> None:
    """Record the index after a build that succeeded (``read_files``: every file a kernel reads)."""
    parsed = parse(argv)
    if parsed is None:
        return
    index = {"format": INDEX_FORMAT, "fingerprint": fingerprint(argv), "directory": str(directory),
             "inputs": inputs(parsed[2], directory, read_files),
             "summary": {**summary, "plain": plain_text(summary)}}
    path = out / INDEX
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        index["outputs"] = _outputs(out)
        tmp = path.with_name(f".index.json.tmp-{os.getpid()}")
        tmp.write_text(json.dumps(index, sort_keys=True), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        pass  # no shortcut next time; the build itself stands


def forget(out: Path) -> None:
    """A build that changed OUT invalidates the index (written again when it succeeds)."""
    try:
        (out / INDEX).unlink()
    except OSError:
        pass


PLAIN_WIDTH = 120  # what the summary is drawn at when stdout is not a terminal (as tusk.workflows.cli does)


def print_summary(index: dict, seconds: float) -> int:
    """Print what a rebuild that changed nothing prints (``seconds``: this command's so far); exit code 0.

    Not on a terminal the table is the text :func:`write` drew (rich, and drawing, cost more than the rest
    of a no-op); on one it is drawn for the terminal's width."""
    s = index.get("summary") or {}
    plain = s.get("plain")
    if isinstance(plain, str) and not sys.stdout.isatty() and not {"FORCE_COLOR", "TTY_COMPATIBLE"} & set(os.environ):
        closing = [s["closing"].replace("{seconds}", f"{seconds:.2f}")] if s.get("closing") else []
        sys.stdout.write(plain + "".join(line + "\n" for line in [*closing, *s.get("after", [])]))
        return 0
    from rich.console import Console

    tty = sys.stdout.isatty()
    console = Console(highlight=False, width=None if tty else PLAIN_WIDTH)
    _table(console, s)
    if s.get("closing"):
        console.print(s["closing"].replace("{seconds}", f"{seconds:.2f}"), soft_wrap=True, markup=False,
                      highlight=False)
    for line in s.get("after", []):
        console.print(line, soft_wrap=True, markup=False, highlight=False)
    return 0


def _table(console, s: dict) -> None:
    """The lines before the summary table, and the table."""
    from rich.markup import escape
    from rich.table import Table

    for line in s.get("before", []):
        console.print(escape(line), soft_wrap=True)
    table = Table(title=s.get("title", ""), title_justify="left")
    for header, just in s.get("columns", []):
        table.add_column(header, justify=just, no_wrap=True)
    for row in s.get("rows", []):
        table.add_row(*[escape(str(c)) for c in row[:-1]], f"[green]{escape(str(row[-1]))}[/]")
    if s.get("caption"):
        table.caption = s["caption"]
    console.print(table)


def plain_text(summary: dict) -> str:
    """The lines before the closing one as :func:`print_summary` draws them off a terminal."""
    import io

    from rich.console import Console

    buf = io.StringIO()
    _table(Console(file=buf, highlight=False, width=PLAIN_WIDTH, force_terminal=False, color_system=None), summary)
    return buf.getvalue()
