"""Errors by who is at fault: whatever one kernel's pass or reader throws, the other kernels are written;
every raise names its fault class, and the command line's exit code is that class's."""

from __future__ import annotations

import ast
import shutil
import tempfile
from pathlib import Path

import pytest
import typer
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tests.passes_for_tests import make_exception, pipeline_toml, write_kernels
from tusk.cache.objects import ObjectDamaged
from tusk.cache.store import StoreRefused
from tusk.ir.errors import (
    EnvError,
    FormatError,
    InputError,
    InternalError,
    PassError,
    TuskError,
    UsageError,
    VerifyError,
)
from tusk.stages import host
from tusk.stages.base import OptionError
from tusk.workflows.cli import DIFF_EXIT_CODES, exits_by_fault
from tusk.workflows.compile import CompileRequest, compile_directory
from tusk.workflows.project import NoKernels

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("ir", "stages", "workflows", "cache", "sim", "frontend", "tusk")

EXCEPTIONS = ["ValueError", "KeyError", "OverflowError", "RecursionError", "ZeroDivisionError", "AssertionError",
              "TypeError", "IndexError", "MemoryError", "RuntimeError", "NotImplementedError", "OSError",
              "FileNotFoundError", "InputError", "FormatError", "PassError", "VerifyError", "EnvError",
              "InternalError", "UsageError"]
# test_raise reads the kernel's files (as translate does), so a VerifyError it raises is the kernel's
EXPECTED_FAULT = {"OSError": "environment", "FileNotFoundError": "environment", "EnvError": "environment",
                  "InputError": "input", "FormatError": "input", "PassError": "input",
                  "UsageError": "input", "VerifyError": "input"}


# reading a kernel: a file that cannot be read is the kernel's fault; the store failing is the environment's
READER_FAULT = {"OSError": "input", "FileNotFoundError": "input", "EnvError": "environment",
                "InputError": "input", "FormatError": "input", "PassError": "input", "VerifyError": "input",
                "UsageError": "input"}


def _build(root: Path, pipeline: str | None = None):
    kernels = root / "k"
    write_kernels(kernels, 3)
    req = CompileRequest(directory=kernels, out=root / "out", workers=0, cache_dir=str(root / "cache"))
    if pipeline:
        (root / "p.toml").write_text(pipeline)
        req.pipeline = root / "p.toml"
    return compile_directory(req)


def _check_others_written(res, root: Path, bad: str = "k1") -> None:
    assert {k.kernel.name for k in res.failed} == {bad}, [(k.kernel.name, k.fault, k.error) for k in res.failed]
    for name in ("k0", "k2"):
        assert (root / "out" / name / f"{name}.bir.json").is_file(), name
    assert not (root / "out" / bad).exists() or res.failed[0].keep


@settings(max_examples=len(EXCEPTIONS), deadline=None)
@given(st.sampled_from(EXCEPTIONS))
def test_whatever_a_pass_raises_the_other_kernels_are_written(exception):
    root = Path(tempfile.mkdtemp())
    try:
        res = _build(root, pipeline_toml(("test_expand", {}), ("test_raise", {"exception": exception, "when": "k1"}),
                                         ("test_count", {})))
        _check_others_written(res, root)
        (bad,) = res.failed
        fault = EXPECTED_FAULT.get(exception, "internal")
        assert bad.fault == fault
        assert res.exit_code == (2 if fault == "environment" else 1)
        assert "k1" in bad.error and ("test_raise" in bad.error or "simulated" in bad.error)
        if fault == "internal":
            log = (root / "out" / "tusk.log").read_text()
            assert "Traceback" in log and "test_raise" in log and "tusk.log" in bad.error
            assert "Traceback" not in bad.error  # one line on the terminal
    finally:
        shutil.rmtree(root, ignore_errors=True)


@settings(max_examples=len(EXCEPTIONS), deadline=None)
@given(st.sampled_from(EXCEPTIONS))
def test_whatever_the_reader_raises_the_other_kernels_are_written(exception):
    root = Path(tempfile.mkdtemp())
    real = host.read_interface

    def flaky(path, kind=None):
        if Path(path).stem == "k1":
            raise make_exception(exception, f"simulated {exception} while reading")
        return real(path, kind)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(host, "read_interface", flaky)
        try:
            res = _build(root, pipeline_toml(("test_expand", {}), ("test_count", {})))
            _check_others_written(res, root)
            (bad,) = res.failed
            assert "k1" in bad.error
            assert bad.fault == READER_FAULT.get(exception, "internal")
            if bad.fault == "internal":
                assert "Traceback" in (root / "out" / "tusk.log").read_text()
        finally:
            shutil.rmtree(root, ignore_errors=True)


# ---------------------------------------------------------------------- every raise names its fault class


def _base_class_uses() -> list[str]:
    """Where product code builds a bare TuskError (a call) or derives a class straight from it outside
    ir/errors.py (whose fault fault_of could only guess)."""
    found = []
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), rel)):
                if isinstance(node, ast.Call) and _names_base(node.func):
                    found.append(f"{rel}:{node.lineno}: TuskError(...)")
                elif isinstance(node, ast.ClassDef) and rel != "ir/errors.py" and any(map(_names_base, node.bases)):
                    found.append(f"{rel}:{node.lineno}: class {node.name}(TuskError)")
    return found


def _names_base(node: ast.expr) -> bool:
    return (isinstance(node, ast.Name) and node.id == "TuskError") or \
        (isinstance(node, ast.Attribute) and node.attr == "TuskError")


def test_no_product_code_raises_the_base_class():
    assert (ROOT / "ir" / "errors.py").is_file()  # the scan reads the source tree, not an installed copy
    assert _base_class_uses() == []


def test_the_base_class_cannot_be_raised_and_still_catches_every_fault():
    with pytest.raises(TypeError, match="TuskError is the base class"):
        TuskError("whose fault?")
    with pytest.raises(TypeError):
        raise TuskError("whose fault?", file="k.json")
    for cls in (InputError, FormatError, PassError, VerifyError, UsageError, EnvError, InternalError):
        try:
            raise cls("boom", file="k.json", where="functions[0]")
        except TuskError as e:
            assert type(e) is cls and str(e) == "k.json at functions[0]: boom"
            assert type(e.located(file="other.json")) is cls


# README: 1 a kernel (or the file shown) is at fault, 2 the command or the machine is
EXIT_BY_CLASS = [(InputError, 1), (FormatError, 1), (PassError, 1), (VerifyError, 1), (InternalError, 1),
                 (NoKernels, 1), (UsageError, 2), (OptionError, 2), (StoreRefused, 2), (EnvError, 2),
                 (ObjectDamaged, 2)]


def _invoke(cls: type[TuskError], decorator):
    app = typer.Typer()

    @app.command()
    @decorator
    def fails(name: str = typer.Option("k", "--name")) -> None:
        raise cls(f"{name} is refused", file="k.json")

    return CliRunner().invoke(app, ["--name", "k1"])


@pytest.mark.parametrize("cls, code", EXIT_BY_CLASS, ids=[c.__name__ for c, _ in EXIT_BY_CLASS])
def test_each_fault_class_exits_with_its_documented_code(cls, code):
    res = _invoke(cls, exits_by_fault())
    assert (res.exit_code, res.stderr, res.stdout) == (code, "error: k.json: k1 is refused\n", "")


@pytest.mark.parametrize("cls", [c for c, _ in EXIT_BY_CLASS], ids=[c.__name__ for c, _ in EXIT_BY_CLASS])
def test_diff_exits_2_on_any_error_as_diff1(cls):
    """tusk diff's 1 means "the listings differ", so every error is trouble (2)."""
    assert _invoke(cls, exits_by_fault(DIFF_EXIT_CODES)).exit_code == 2
