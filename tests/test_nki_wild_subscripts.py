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


def test_a_block_of_a_blocked_tile_reshapes_and_keeps_its_partition_axis(tmp_path):
    # buf[b] of a (n, par_dim(128), h, w) tile reshaped to split its free axes for a 2x2 max: the reshaped
    # view's partition dim is still the tile's partition axis (it was refused as a view whose first axis is
    # not the partition axis)
    path = write(tmp_path, """
        import neuronxcc.nki.isa as nisa

        @nki.jit
        def k(x):
            out = nl.ndarray((2, 128, 4, 8), dtype=x.dtype, buffer=nl.shared_hbm)
            buf = nl.ndarray((2, nl.par_dim(128), 8, 16), dtype=x.dtype, buffer=nl.sbuf)
            for b in nl.affine_range(2):
                buf[b, :, :, :] = nl.load(x[b])
            for b in nl.affine_range(2):
                r = buf[b, :, :, :].reshape((nl.par_dim(128), 4, 2, 8, 2))
                m = nisa.tensor_tensor(r[:, :, 0, :, 0], r[:, :, 1, :, 1], op=nl.maximum)
                top = nl.maximum(r[:, :, 0, :, 1], r[:, :, 1, :, 0])
                nl.store(out[b], value=nl.maximum(m, top))
            return out
    """, header=HEADER)
    x = np.random.default_rng(5).standard_normal((2, 128, 8, 16)).astype(np.float32)
    got = run_klr(trace_file(path, "k", ["f32[2,128,8,16]"]), {"x": x})["out"]
    assert np.array_equal(got, x.reshape(2, 128, 4, 2, 8, 2).max(axis=(3, 5)))
