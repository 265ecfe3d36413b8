"""A serial compile driver: load, verify and write each kernel of a directory.

This is the stop-gap until the Dask build graph (workflows/graph.py) exists;
it already follows the contract of `tusk compile`: one failing kernel is
reported and the others still complete.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from ir.errors import TuskError

KERNEL_SUFFIXES = (".klr", ".json")


def compile_directory(directory: Path, out: Path) -> int:
    console = Console()
    if not directory.is_dir():
        console.print(f"[red]error:[/red] {directory} is not a directory")
        return 1
    out.mkdir(parents=True, exist_ok=True)
    failures = 0
    for path in sorted(directory.iterdir()):
        if path.suffix not in KERNEL_SUFFIXES:
            console.print(f"skipped {path.name} (not a kernel file)")
            continue
        try:
            summary = _compile_one(path, out)
            console.print(f"[green]ok[/green] {path.name}: {summary}")
        except TuskError as e:
            failures += 1
            console.print(f"[red]failed[/red] {path.name}: {e}")
    return failures


def _compile_one(path: Path, out: Path) -> str:
    from ir import bir_json
    from ir.verify import verify

    if path.suffix == ".klr":
        from ir import klr

        kernel = klr.load_lnc_kernel(path)
        return f"KLR kernel {kernel.name}: translation to BIR is not implemented yet"
    module = bir_json.load(path)
    verify(module)
    bir_json.save(module, out / f"{path.stem}.bir.json")
    return f"{module.n_insts()} instructions verified and written"
