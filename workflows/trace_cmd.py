"""`tusk trace FILE.py[::FUNCTION]`: an NKI kernel written in Python, traced into a KLR file.

The command's logic (the CLI in ``cli.py`` only maps errors to exit codes):
what is checked before the kernel runs (the target, the input specs, the
grid, the output path) is a UsageError; what the kernel's tracing reports is
the front end's (a TraceError names the kernel's ``file:line``).  The KLR
file is written aside and renamed into place: a failed trace leaves nothing.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tusk.ir.errors import TuskError, UsageError


@dataclass(frozen=True)
class TraceResult:
    path: Path           # the KLR file written
    kernel: str          # the LncKernel's name
    size: int            # bytes
    statements: int = -1  # KLR statements of all its bodies (-1: not counted)


def parse_target(target: str) -> tuple[Path, str | None]:
    """``FILE.py::FUNCTION`` -> (file, function); ``FILE.py`` -> (file, None): the front end picks the file's
    only @nki.jit function."""
    text = str(target)
    function: str | None = None
    if "::" in text:
        text, function = text.rsplit("::", 1)
        if not all(part.isidentifier() for part in function.split(".")):  # Class.method: a kernel in a class
            raise UsageError(f"{target}: expected FILE.py::FUNCTION, and {function!r} is not a function name")
    if not text:
        raise UsageError(f"{target}: expected FILE.py or FILE.py::FUNCTION")
    path = Path(text)
    if not path.exists():
        head, sep, tail = text.rpartition(":")
        if sep and function is None and tail.isidentifier() and Path(head).is_file():
            raise UsageError(f"no such file (to name the function {tail!r} of {head}, write {head}::{tail})",
                             file=text)
        raise UsageError("no such file", file=text)
    if path.is_dir():
        raise UsageError("a directory, not a file: tusk trace takes a kernel's .py file", file=text)
    if not path.is_file():
        raise UsageError("not a regular file", file=text)
    if path.suffix != ".py":
        with open(path, "rb") as fh:
            if b"\0" in fh.read(4096):  # a .klr or another binary file: the front end reads Python source
                raise UsageError("a binary file, not a kernel's Python source (tusk trace writes a .klr from a .py "
                                 "file; 'tusk show FILE' lists a .klr)", file=text)
    return path, function


def parse_grid(text: str | None) -> tuple[int, ...]:
    """``"2,2"`` -> (2, 2); None or "" -> ()."""
    if text is None or not text.strip():
        return ()
    dims = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit() or int(part) < 1:
            raise UsageError(f"--grid {text}: expected positive integers separated by commas, e.g. 2 or 2,2")
        dims.append(int(part))
    return tuple(dims)


def output_path(out: Path | None, kernel: str) -> Path:
    """Where the KLR goes: ``-o`` (a directory: ``<kernel>.klr`` in it), else ``<kernel>.klr`` here."""
    if out is None:
        return Path(f"{kernel}.klr")
    if out.is_dir():
        return out / f"{kernel}.klr"
    return out


def _check_output(out: Path | None, source: Path) -> None:
    """What makes ``-o`` unusable, found before the kernel runs."""
    if out is None or out.is_dir():
        return
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        raise UsageError(f"-o {out}: the directory {parent} does not exist")
    if out.exists() and not out.is_file():
        raise UsageError(f"-o {out}: not a regular file")
    if out.exists() and os.path.samefile(out, source):
        raise UsageError(f"-o {out} is the kernel's own source file")


def import_paths(paths: Sequence[str | os.PathLike]) -> tuple[Path, ...]:
    """``--path DIR`` (repeatable): directories the kernel may import from besides its own; each must exist."""
    out = []
    for p in paths:
        d = Path(p)
        if not d.is_dir():
            raise UsageError(f"--path {p}: not a directory")
        out.append(d.resolve())
    return tuple(out)


def trace(target: str, inputs: Sequence[str], grid: str | None = None, name: str | None = None,
          out: Path | None = None, arch: str | None = None, args: Sequence[str] = (),
          paths: Sequence[str | os.PathLike] = (), api: int | None = None) -> TraceResult:
    """Trace ``target`` with ``inputs`` (specs such as ``f32[128,512]``) and ``args`` (``NAME=VALUE``, the
    kernel's other parameters) and write the KLR file; on-chip tensors are placed for ``arch`` (None: the
    ``arch`` setting, TUSK_ARCH or gen3, as a build does)."""
    from tusk.frontend.args import parse_args
    from tusk.frontend.specs import parse_tensor_spec
    from tusk.workflows.kernels import name_problem
    from tusk.workflows.outputs import write_atomic
    from tusk.workflows.traced import kernel_name, run_frontend

    path, function = parse_target(target)
    specs = [parse_tensor_spec(text) for text in inputs]
    values = parse_args(args)
    dims = parse_grid(grid)
    dirs = import_paths(paths)
    if api is not None and api not in (1, 2):
        raise UsageError(f"--nki-api {api}: expected 1 or 2 (the NKI API generation `import nki` means)")
    if name is not None and not name.isidentifier():
        raise UsageError(f"--name {name!r}: expected an identifier (letters, digits, _)")
    _check_output(out, path)
    from tusk.ir.arch import get_arch
    from tusk.workflows import config

    arch = config.load({"arch": arch}).arch
    try:
        get_arch(arch)
    except TuskError as e:  # an unknown name is the command's fault, found before the kernel runs
        raise UsageError(f"--arch: {e}") from None
    data = run_frontend(path, function, specs, dims, name=name, arch=arch, args=values, paths=dirs, api=api).klr
    kernel = name or kernel_name(data) or function or path.stem
    dest = output_path(out, kernel)
    problem = name_problem(dest.name)
    if problem:
        raise UsageError(f"cannot name the output after the kernel: {problem}; give -o FILE")
    if dest.exists() and os.path.samefile(dest, path):
        raise UsageError(f"the output {dest} is the kernel's own source file; give -o FILE")
    try:
        write_atomic(dest, data)
    except OSError as e:
        raise UsageError(f"cannot write {dest}: {e.strerror or e}") from None
    return TraceResult(dest, kernel, len(data), _statements(data))


def _statements(data: bytes) -> int:
    """How many statements the kernel's bodies hold (-1 when the file cannot be read back, or is too big to be
    empty: reading a large kernel back only to count would cost seconds)."""
    from tusk.ir import klr

    if len(data) > 1 << 16:
        return -1
    try:
        kernel = klr.read_klr(data).contents.kernel
        return sum(len(block.body) for body in kernel.bodies for block in body)
    except Exception:  # noqa: BLE001 - a count for a warning only
        return -1
