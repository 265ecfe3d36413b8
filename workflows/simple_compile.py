"""Superseded by :mod:`workflows.compile` (the cached, parallel build); kept as an import shim."""

from __future__ import annotations

from pathlib import Path

from workflows.compile import CompileRequest, compile_directory as _compile


def compile_directory(directory: Path, out: Path) -> int:
    """Compile ``directory`` into ``out`` with the default settings; returns the number of failed kernels."""
    return len(_compile(CompileRequest(directory=Path(directory), out=Path(out))).failed)
