"""Subscripts public kernels write on tiles: ``[:, None]`` makes a reduced [P] column a [P, 1] tile."""

from __future__ import annotations

import numpy as np
import pytest

from tests.test_frontend_entry import write
from tusk.frontend import TraceError, trace_file
from tusk.frontend.check import run_klr

HEADER = """\
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
"""

X = np.random.default_rng(9).standard_normal((64, 96)).astype(np.float32)


def stored(tmp_path, value: str):
    """A kernel storing VALUE, an expression of the loaded tile t, to its output."""
    return write(tmp_path, f"""
        @nki.jit
        def k(x):
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            t = nl.load(x)
            nl.store(out, value={value})
            return out
    """, header=HEADER)


def test_a_reduced_column_gets_its_unit_axis_back(tmp_path):
    path = stored(tmp_path, "nl.subtract(t, nl.multiply(nl.sum(t, axis=1)[:, None], 1.0 / x.shape[1]))")
    got = run_klr(trace_file(path, "k", ["f32[64,96]"]), {"x": X})["out"]
    assert np.allclose(got, X - X.mean(axis=1, keepdims=True), rtol=1e-5, atol=1e-5)


def test_a_new_axis_without_a_colon_per_axis_is_refused(tmp_path):
    path = stored(tmp_path, "t[:, None]")
    with pytest.raises(TraceError, match=r"k\.py:8: not supported: 2 subscripts with None \(newaxis\) for a "
                                         r"2-axis tile"):
        trace_file(path, "k", ["f32[64,96]"])


def test_accumulating_a_narrower_product_into_psum_is_refused_at_its_line(tmp_path):
    # a course kernel narrows the moving tile with a subscript mask, then adds the narrower product to its
    # whole PSUM tile: there is no such add (it used to reach the backend as an instruction of mismatched
    # operands)
    path = write(tmp_path, """
        @nki.jit
        def k(w, x):
            out = nl.ndarray((128, 512), dtype=x.dtype, buffer=nl.shared_hbm)
            acc = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum)
            ip, jf = nl.mgrid[0:128, 0:512]
            xt = nl.load(x)
            acc += nl.matmul(nl.load(w), xt[ip, jf][jf < 36], transpose_x=True)
            nl.store(out, value=nl.copy(acc))
            return out
    """, header=HEADER)
    with pytest.raises(TraceError, match=r"k\.py:10: not supported: \+= of \[128, 512\] and \[128, 36\] tiles"):
        trace_file(path, "k", ["f32[128,128]", "f32[128,512]"])
