"""The `tusk` command line (typer)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from ir.errors import TuskError

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Tusk: compile NKI kernels (KLR or BIR-JSON) into unrolled, rotated BIR.")

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "kernels"


@app.command()
def show(file: Path = typer.Argument(..., help="A .klr file or a BIR-JSON file")) -> None:
    """Print a readable listing of a KLR or BIR-JSON file."""
    from workflows.show import listing

    try:
        typer.echo(listing(file), nl=False)
    except TuskError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1)


@app.command()
def compile(
    directory: Optional[Path] = typer.Argument(None, help="Directory of kernels (default: the shipped examples)"),
    out: Path = typer.Option(Path("tusk-out"), "-o", "--out", help="Output directory"),
) -> None:
    """Compile every kernel of DIRECTORY."""
    from workflows.simple_compile import compile_directory

    directory = directory or EXAMPLES
    failures = compile_directory(directory, out)
    raise typer.Exit(1 if failures else 0)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
