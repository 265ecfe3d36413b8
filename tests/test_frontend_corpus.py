"""The NKI kernels of examples/nki: traced by tusk.frontend, read back as KLR, translated, verified, run by
the interpreter on random inputs, and compared with their numpy references."""

from __future__ import annotations

import math
import tomllib
from pathlib import Path

import numpy as np
import pytest

from tusk.examples.nki import DIRECTORY as EXAMPLES
from tusk.examples.nki import reference
from tusk.ir import klr
from tusk.ir.verify import verify
from tusk.sim.interp import run
from tusk.stages.host import host_module_for
from tusk.stages.translate_nki_ast_to_bir import TranslateNKIASTToBIR

UNITS: dict[str, dict] = tomllib.loads((EXAMPLES / "tusk.toml").read_text(encoding="utf-8"))["kernels"]
NAMES = sorted(UNITS)
REQUIRED = {"tensor_add", "tensor_exp", "transpose2d", "matmul_basic", "matmul_tiled", "matmul_hoisted",
            "matmul_blocked", "matmul_optimized", "rmsnorm", "layernorm", "avgpool", "softmax", "attention",
            "mamba", "tensor_add_spmd"}


def _trace(name: str) -> bytes:
    """The KLR bytes of unit ``name``, traced as the build traces it."""
    from tusk.frontend import trace_file

    unit = UNITS[name]
    return trace_file(EXAMPLES / unit["file"], unit.get("function"), unit["inputs"], unit.get("grid", ()))


def _inputs(name: str, seed: int) -> list[np.ndarray]:
    """Seeded uniform inputs in the unit's ranges; bfloat16 inputs hold bfloat16-exact values."""
    from tusk.frontend import parse_tensor_spec

    specs = [parse_tensor_spec(s) for s in UNITS[name]["inputs"]]
    rng = np.random.default_rng(seed)
    out = []
    for spec, (lo, hi) in zip(specs, reference.input_ranges(name, len(specs)), strict=True):
        x = rng.uniform(lo, hi, size=spec.shape).astype(np.float32)
        out.append(reference.round_bf16(x) if spec.dtype == "bfloat16" else x)
    return out


def _run_cores(path: Path, inputs: dict[str, np.ndarray], outputs: list[str], ncores: int,
               art: Path) -> dict[str, np.ndarray]:
    """Every core's outputs, merged: an element belongs to the core that wrote it (outputs start as NaN).
    Strict: a kernel that reads a byte nothing wrote fails."""
    got: dict[str, np.ndarray] = {}
    for core in range(ncores):
        module = host_module_for(str(path), core, str(art / str(core)))
        out, stats = TranslateNKIASTToBIR().run(module)
        verify(out)
        assert stats["expanded"] == 1
        if ncores == 1:
            return run(out, inputs, strict=True)
        shapes = {t.name: (int(t.shape.parDim), *map(int, t.shape.freeDims))
                  for t in klr.read_klr(path.read_bytes()).contents.kernel.outputs}
        sentinel = {n: np.full(shapes[n], np.nan, dtype=np.float32) for n in outputs}
        res = run(out, {**inputs, **sentinel}, strict=True)
        for n in outputs:
            written = ~np.isnan(res[n])
            got.setdefault(n, np.full_like(res[n], np.nan))[written] = res[n][written]
    return got


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("nki_corpus")


def test_corpus_has_the_required_kernels_each_with_a_reference_and_a_tolerance():
    assert REQUIRED <= set(UNITS)
    assert set(UNITS) == set(reference.REFERENCES) == set(reference.TOLERANCE)
    for name, unit in UNITS.items():
        assert (EXAMPLES / unit["file"]).is_file(), name
        assert f"def {unit['function']}(" in (EXAMPLES / unit["file"]).read_text(encoding="utf-8"), name
    assert UNITS["tensor_add_spmd"].get("grid") and "nl.program_id" in (EXAMPLES / "tensor_add_spmd.py").read_text()


def test_references_agree_with_plain_numpy_on_small_cases():
    """The references themselves, on cases small enough to check by hand."""
    x = np.arange(12, dtype=np.float32).reshape(1, 12)
    np.testing.assert_array_equal(reference.transpose2d(x, (3, 4)), [[0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11]])
    pool = reference.avgpool(np.arange(16, dtype=np.float32).reshape(1, 4, 4))
    np.testing.assert_array_equal(pool, [[[2.5, 4.5], [10.5, 12.5]]])
    np.testing.assert_allclose(reference.softmax(np.log(np.array([[1.0, 3.0]], np.float32))), [[0.25, 0.75]])
    assert reference.round_bf16(np.float32(1 + 2 ** -9)) == 1.0 and reference.round_bf16(np.float32(1 + 3 * 2 ** -9)) \
        == np.float32(1 + 2 ** -7)
    # one channel, one state, A = 0 (no decay): h is the running sum of delta u B, y = C h
    d, u = np.full((1, 1, 3), 0.5, np.float32), np.array([[[1.0, 2.0, 3.0]]], np.float32)
    y = reference.mamba(d, u, np.zeros((1, 1), np.float32), np.ones((1, 1, 3), np.float32),
                        np.full((1, 1, 3), 2.0, np.float32))
    np.testing.assert_allclose(y, [[[1.0, 3.0, 6.0]]])
    # e4m3: 1.0625 ties to 1.0, 1.1875 to 1.25 (even codes), 2^-10 to 0, 247 to 240, 248 overflows
    fp8 = reference.round_fp8_e4m3(np.array([1.0625, 1.1875, -3.3, 2.0 ** -10, 3 * 2.0 ** -10, 247.0, 248.0]))
    np.testing.assert_array_equal(fp8, [1.0, 1.25, -3.25, 0.0, 2 * 2.0 ** -9, 240.0, np.inf])


@pytest.mark.parametrize("name", NAMES)
def test_kernel_traces_translates_and_matches_numpy(name, workdir):
    data = _trace(name)
    kernel = klr.read_klr(data).contents.kernel  # the bytes are a KLR file Tusk reads
    path = workdir / f"{name}.klr"
    path.write_bytes(data)

    arrays = _inputs(name, seed=sum(map(ord, name)))
    in_names = [t.name for t in kernel.inputs]
    out_names = [t.name for t in kernel.outputs]
    assert len(in_names) == len(arrays), f"{name}: the kernel has inputs {in_names}"
    got = _run_cores(path, dict(zip(in_names, arrays, strict=True)), out_names, max(1, len(kernel.bodies)),
                     art=workdir / "out" / name)

    want = reference.REFERENCES[name](*arrays)
    want = list(want) if isinstance(want, tuple) else [want]
    assert len(out_names) == len(want), f"{name}: the kernel has outputs {out_names}"
    rtol, atol = reference.TOLERANCE[name]
    for out_name, expected in zip(out_names, want, strict=True):
        value = got[out_name]
        assert value.shape == expected.shape, f"{name}.{out_name}: shape {value.shape}, expected {expected.shape}"
        assert not np.isnan(value).any(), f"{name}.{out_name}: some elements were never written"
        np.testing.assert_allclose(value, expected, rtol=rtol, atol=atol, err_msg=f"{name}.{out_name}")


def test_compile_directory_builds_every_unit(tmp_path):
    """`tusk compile examples/nki`: every [kernels.X] unit is traced and built; the other files are skipped."""
    import tusk

    result = tusk.compile_directory(EXAMPLES, out=tmp_path / "out", workers=0, report=False,
                                    cache_dir=str(tmp_path / "cache"))
    assert {k.kernel.name for k in result.kernels} == set(UNITS)
    assert {"reference.py", "__init__.py", "README.md", "tusk.toml"} <= {s.path.name for s in result.skipped}
    assert not result.failed, {k.kernel.name: k.error for k in result.failed}
    assert result.exit_code == 0
    from tusk.ir import bir_json

    for name in NAMES:  # the traced KLR, the one trace_file gives, is kept next to the BIR it became
        traced = _trace(name)
        assert {f"{name}.klr", f"{name}.bir.json"} <= {p.name for p in (tmp_path / "out" / name).iterdir()}, name
        assert (tmp_path / "out" / name / f"{name}.klr").read_bytes() == traced, name
        # and what the whole pipeline wrote (raised, unrolled, rotated, scheduled) still computes the reference
        final = bir_json.load(tmp_path / "out" / name / f"{name}.bir.json")
        verify(final)
        kernel = klr.read_klr(traced).contents.kernel
        arrays = _inputs(name, seed=sum(map(ord, name)))
        got = run(final, dict(zip([t.name for t in kernel.inputs], arrays, strict=True)), strict=True)
        want = reference.REFERENCES[name](*arrays)
        want = list(want) if isinstance(want, tuple) else [want]
        rtol, atol = reference.TOLERANCE[name]
        for out_name, expected in zip([t.name for t in kernel.outputs], want, strict=True):
            np.testing.assert_allclose(got[out_name], expected, rtol=rtol, atol=atol, err_msg=f"{name}.{out_name}")


_TRACE_ALL = """
import hashlib, json, sys
sys.path.insert(0, sys.argv[1])
from tests.test_frontend_corpus import NAMES, _trace
print(json.dumps({n: hashlib.sha256(_trace(n)).hexdigest() for n in NAMES}))
"""


def _traced_in_a_process(hash_seed: str) -> dict[str, str]:
    """Every unit's KLR digest, traced in a fresh interpreter with ``PYTHONHASHSEED=hash_seed``."""
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    root = str(Path(__file__).resolve().parent.parent)
    proc = subprocess.run([sys.executable, "-c", _TRACE_ALL, root], env=env, capture_output=True, text=True,
                          timeout=600, cwd=root)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_tracing_is_deterministic():
    """The same unit traced in two processes with different string hashing gives the same bytes (the build's
    cache keys on them, and workers trace in processes of their own); and the same as here."""
    import hashlib

    first, second = _traced_in_a_process("1"), _traced_in_a_process("4242")
    assert sorted(first) == NAMES
    assert [n for n in NAMES if first[n] != second[n]] == []
    assert first[NAMES[0]] == hashlib.sha256(_trace(NAMES[0])).hexdigest()


def test_units_stay_small_enough_for_the_interpreter():
    """Every input of every unit is at most 64 tiles of 128 x 512 float32."""
    from tusk.frontend import parse_tensor_spec

    for name, unit in UNITS.items():
        for spec in map(parse_tensor_spec, unit["inputs"]):
            assert math.prod(spec.shape) <= 64 * 128 * 512, (name, spec)


def test_pooling_resize_and_attention_backward_references_on_hand_checked_cases():
    """The references of resize_nearest, select_and_scatter, adaptive_avgpool and attention_bwd, checked by
    hand and (attention_bwd) against central finite differences of sum(O * dO)."""
    np.testing.assert_array_equal(reference.resize_nearest(np.array([[[1.0, 2.0]]], np.float32), 2, 3),
                                  [[[1, 1, 1, 2, 2, 2], [1, 1, 1, 2, 2, 2]]])
    # one 2x2 window whose maximum 5 appears twice: the gradient goes to the first (row-major) only
    x = np.array([[[1.0, 5.0], [5.0, 0.0]]], np.float32)
    np.testing.assert_array_equal(reference.select_and_scatter(x, np.array([[[7.0]]], np.float32)),
                                  [[[0.0, 7.0], [0.0, 0.0]]])
    # 5 rows into 3: PyTorch's windows are rows [0, 2), [1, 4), [3, 5); one column stays one column
    col = np.arange(5, dtype=np.float32).reshape(1, 5, 1)
    np.testing.assert_allclose(reference.adaptive_avgpool(col, (3, 1)), [[[0.5], [2.0], [3.5]]])
    img = np.arange(12, dtype=np.float32).reshape(1, 3, 4)
    np.testing.assert_array_equal(reference.adaptive_avgpool(img, (3, 4)), img)
    np.testing.assert_allclose(reference.adaptive_avgpool(img, (1, 1)), [[[5.5]]])

    rng = np.random.default_rng(3)
    q, k, v, d_out = (rng.uniform(-2, 2, (6, 3)) for _ in range(4))

    def loss(q, k, v):
        s = 0.5 * q @ k.T
        p = np.exp(s - s.max(axis=1, keepdims=True))
        return float(((p / p.sum(axis=1, keepdims=True)) @ v * d_out).sum())

    grads = reference.attention_bwd(q, k, v, d_out, scale=0.5)
    for which, grad in enumerate(grads):
        numeric = np.zeros_like(grad, dtype=np.float64)
        for idx in np.ndindex(grad.shape):
            args = [q.copy(), k.copy(), v.copy()]
            args[which][idx] += 1e-6
            up = loss(*args)
            args[which][idx] -= 2e-6
            numeric[idx] = (up - loss(*args)) / 2e-6
        np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-6)
