"""Import directories the user names: `tusk trace --path DIR`, `paths = [...]` in tusk.toml.

A kernel that imports a helper from outside its own directory (`from apis import *`, apis.py one directory
up, as KLR's example kernels do) is refused until the user names that directory; then the helper imports,
and it is part of the trace: editing it re-traces.
"""

from __future__ import annotations

import hashlib
import sys

import numpy as np
import pytest

from tests.test_frontend_cli import compile_json, invoke, kernel, toml_kernel, trace_args
from tusk.frontend import trace_file
from tusk.frontend.check import run_klr
from tusk.frontend.errors import TraceError
from tusk.frontend.trace import trace_kernel_file

KERNEL = '''\
from apis import *


def doubled(a, out):
    nl.store(out, value=twice(nl.load(a)))
'''
APIS = ("import neuronxcc.nki.language as nl\n\n\ndef twice(t):\n    return nl.add(t, t)\n")
A = np.arange(128 * 64, dtype=np.float32).reshape(128, 64) / 100
SPECS = ["f32[128,64]", "f32[128,64]"]


@pytest.fixture
def tree(tmp_path):
    (tmp_path / "apis.py").write_text(APIS)
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "doubled.py").write_text(KERNEL)
    return tmp_path


def test_a_helper_outside_the_kernel_directory_is_refused_unless_named(tree):
    with pytest.raises(TraceError, match=r"doubled\.py:1.*apis is not installed"):
        trace_file(tree / "examples" / "doubled.py", "doubled", SPECS)
    path_before = list(sys.path)
    traced = trace_kernel_file(tree / "examples" / "doubled.py", "doubled", SPECS, paths=[tree])
    assert np.allclose(run_klr(traced.klr, {"a": A})["out"], 2 * A)
    assert (tree / "apis.py").resolve() in traced.sources
    assert sys.path == path_before and "apis" not in sys.modules


def test_trace_path_option_and_a_missing_directory(tree, monkeypatch, tmp_path):
    monkeypatch.setenv("TUSK_CACHE_DIR", str(tmp_path / "cache"))
    out = tree / "d.klr"
    res = invoke(*trace_args(tree / "examples" / "doubled.py::doubled", "--path", tree, "-o", out, inputs=SPECS))
    assert res.exit_code == 0, res.output
    assert np.allclose(run_klr(out.read_bytes(), {"a": A})["out"], 2 * A)
    res = invoke(*trace_args(tree / "examples" / "doubled.py::doubled", "--path", tree / "nosuch", inputs=SPECS))
    assert res.exit_code == 2 and "--path" in res.stderr and "not a directory" in res.stderr


def test_toml_paths_import_and_an_edited_helper_there_retraces(tree, monkeypatch, tmp_path):
    monkeypatch.setenv("TUSK_CACHE_DIR", str(tmp_path / "cache"))
    k, out = tree / "examples", tmp_path / "out"
    (k / "tusk.toml").write_text(toml_kernel(name="doubled", file="doubled.py", inputs=SPECS, function="doubled",
                                             paths=[".."]))
    code, rep = compile_json(k, out)
    assert code == 0 and rep["traced"] == 1, rep
    assert kernel(rep, "doubled")["trace"]["sources"] == {"../apis.py": hashlib.sha256(APIS.encode()).hexdigest()}
    assert np.allclose(run_klr((out / "doubled" / "doubled.klr").read_bytes(), {"a": A})["out"], 2 * A)
    (tree / "apis.py").write_text(APIS.replace("nl.add(t, t)", "nl.multiply(t, 3.0)"))
    code, rep = compile_json(k, out)
    assert code == 0 and rep["traced"] == 1 and kernel(rep, "doubled")["trace"]["status"] == "executed"
    assert np.allclose(run_klr((out / "doubled" / "doubled.klr").read_bytes(), {"a": A})["out"], 3 * A)


@pytest.mark.parametrize("path, why", [("../nosuch", "not a directory"), ("a\0b", "NUL character")])
def test_toml_paths_must_be_directories(tree, monkeypatch, tmp_path, path, why):
    monkeypatch.setenv("TUSK_CACHE_DIR", str(tmp_path / "cache"))
    k = tree / "examples"
    (k / "tusk.toml").write_text(toml_kernel(name="doubled", file="doubled.py", inputs=SPECS, paths=[path]))
    res = invoke("compile", k, "-o", tmp_path / "out", "--workers", "0")
    assert res.exit_code == 2 and "paths" in res.stderr and why in res.stderr, res.stderr


# ====================================================================== --nki-api: what `import nki` means

V1_UNDER_NKI = '''\
import nki
import nki.isa as nisa
import nki.language as nl


def exp_twice(a, out):
    t = nisa.activation(op=nl.exp, data=nl.load(a))
    nl.store(out, value=nisa.tensor_tensor(t, t, op=nl.add))
'''


def test_nki_api_1_reads_import_nki_as_the_1x_calls(tmp_path, monkeypatch):
    monkeypatch.setenv("TUSK_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "k.py"
    path.write_text(V1_UNDER_NKI)
    with pytest.raises(TraceError, match=r"k\.py:7: nisa\.activation\(dst, op, data"):
        trace_file(path, "exp_twice", SPECS)
    got = run_klr(trace_file(path, "exp_twice", SPECS, api=1), {"a": A})["out"]
    assert np.allclose(got, 2 * np.exp(A), rtol=1e-5)
    out = tmp_path / "e.klr"
    res = invoke(*trace_args(f"{path}::exp_twice", "--nki-api", "1", "-o", out, inputs=SPECS))
    assert res.exit_code == 0, res.output
    res = invoke(*trace_args(f"{path}::exp_twice", "--nki-api", "3", inputs=SPECS))
    assert res.exit_code == 2 and "--nki-api 3" in res.stderr


def test_toml_nki_api_is_part_of_the_trace_key(tmp_path, monkeypatch):
    monkeypatch.setenv("TUSK_CACHE_DIR", str(tmp_path / "cache"))
    k, out = tmp_path / "k", tmp_path / "out"
    k.mkdir()
    (k / "k.py").write_text(V1_UNDER_NKI)
    (k / "tusk.toml").write_text(toml_kernel(name="e", file="k.py", inputs=SPECS, function="exp_twice", nki_api=1))
    code, rep = compile_json(k, out)
    assert code == 0 and rep["traced"] == 1, rep
    assert np.allclose(run_klr((out / "e" / "e.klr").read_bytes(), {"a": A})["out"], 2 * np.exp(A), rtol=1e-5)
    (k / "tusk.toml").write_text(toml_kernel(name="e", file="k.py", inputs=SPECS, function="exp_twice", nki_api=2))
    code, rep = compile_json(k, out)
    assert code != 0 and kernel(rep, "e")["trace"]["status"] == "failed"  # another key: traced again, as 2.x
    assert "nisa.activation(dst, op, data" in kernel(rep, "e")["error"]
    (k / "tusk.toml").write_text(toml_kernel(name="e", file="k.py", inputs=SPECS, nki_api=True))
    res = invoke("compile", k, "-o", out, "--workers", "0")
    assert res.exit_code == 2 and "nki_api must be 1 or 2" in res.stderr
