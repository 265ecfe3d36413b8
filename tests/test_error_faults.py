"""Errors by who is at fault: whatever one kernel's pass or reader throws, the other kernels are written."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.passes_for_tests import make_exception, pipeline_toml, write_kernels
from tusk.stages import host
from tusk.workflows.compile import CompileRequest, compile_directory

EXCEPTIONS = ["ValueError", "KeyError", "OverflowError", "RecursionError", "ZeroDivisionError", "AssertionError",
              "TypeError", "IndexError", "MemoryError", "RuntimeError", "NotImplementedError", "OSError",
              "FileNotFoundError", "TuskError", "InputError", "FormatError", "PassError", "VerifyError", "EnvError",
              "InternalError", "UsageError"]
# test_raise reads the kernel's files (as translate does), so a VerifyError it raises is the kernel's
EXPECTED_FAULT = {"OSError": "environment", "FileNotFoundError": "environment", "EnvError": "environment",
                  "TuskError": "input", "InputError": "input", "FormatError": "input", "PassError": "input",
                  "UsageError": "input", "VerifyError": "input"}


# reading a kernel: a file that cannot be read is the kernel's fault; the store failing is the environment's
READER_FAULT = {"OSError": "input", "FileNotFoundError": "input", "EnvError": "environment", "TuskError": "input",
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
