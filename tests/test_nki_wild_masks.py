"""Masks on the 1.x ISA calls that public flash-attention and scan kernels pass: a mask that holds for every
element is no mask, a prefix mask narrows a scan, anything else is refused naming what the mask keeps."""

from __future__ import annotations

import numpy as np
import pytest

from tests.test_frontend_entry import write
from tusk.frontend import TraceError, trace_file
from tusk.frontend.check import run_klr

HEADER = """\
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
"""

X = np.random.default_rng(5).standard_normal((100, 48)).astype(np.float32)


def test_a_masked_scan_runs_on_the_kept_prefix_and_its_initials(tmp_path):
    path = write(tmp_path, """
        @nki.jit
        def prefix_sums(x):
            rows, cols = x.shape
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            ip, jf = nl.mgrid[0:128, 0:64]
            keep = (ip < rows) & (jf < cols)
            data = nl.load(x[ip, jf], mask=keep)
            start = nl.full((128, 1), 0.5, dtype=nl.float32)
            ones = nl.ones((128, 64), dtype=nl.float32)
            sums = nisa.tensor_tensor_scan(data0=ones, data1=data, initial=start, op0=np.multiply, op1=np.add,
                                           mask=keep)
            nl.store(out[ip, jf], value=sums, mask=keep)
            return out
    """, header=HEADER)
    got = run_klr(trace_file(path, "prefix_sums", ["f32[100,48]"]), {"x": X})["out"]
    assert np.allclose(got, 0.5 + np.cumsum(X, axis=1), rtol=1e-5, atol=1e-5)


def test_mask_true_is_no_mask_and_a_narrowing_mask_is_named(tmp_path):
    path = write(tmp_path, """
        @nki.jit
        def lower(x, causal):
            out = nl.ndarray((128, 128), dtype=x.dtype, buffer=nl.shared_hbm)
            t = nl.load(x)
            iy, ix = nl.mgrid[0:128, 0:128]
            keep = True if not causal else (iy < 64)
            nl.store(out, value=nisa.affine_select(pred=(ix <= iy), on_true_tile=t, on_false_value=-1.0,
                                                   mask=keep))
            return out
    """, header=HEADER)
    x = np.random.default_rng(6).standard_normal((128, 128)).astype(np.float32)
    got = run_klr(trace_file(path, "lower", ["f32[128,128]"], args={"causal": False}), {"x": x})["out"]
    assert np.array_equal(got, np.where(np.tri(128, dtype=bool), x, np.float32(-1.0)))
    with pytest.raises(TraceError, match=r"k\.py:12: not supported: nisa\.affine_select mask=<a mask keeping "
                                         r"the first 64 of axis 0> \(Tusk takes mask= here only when it holds"):
        trace_file(path, "lower", ["f32[128,128]"], args={"causal": True})


def test_a_negated_row_bound_compared_with_ge_is_the_row_prefix(tmp_path):
    # NKIBench-style tail masks: `-128 * i - ip + (rows - 1) >= 0` keeps the rows below `rows`
    path = write(tmp_path, """
        @nki.jit
        def doubled(x):
            rows, cols = x.shape
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            for i in nl.affine_range((rows + 127) // 128):
                ip, jf = nl.arange(128)[:, None], nl.arange(cols)[None, :]
                keep = (-128 * i - ip + (rows - 1) >= 0)
                t = nl.load(x[128 * i + ip, jf], mask=keep)
                nl.store(out[128 * i + ip, jf], value=nl.multiply(t, 2.0), mask=keep)
            return out
    """, header=HEADER)
    x = np.random.default_rng(8).standard_normal((200, 32)).astype(np.float32)
    got = run_klr(trace_file(path, "doubled", ["f32[200,32]"]), {"x": x})["out"]
    assert np.array_equal(got, 2 * x)


def test_a_union_with_a_mask_that_keeps_nothing_is_the_other_mask(tmp_path):
    # triton-viz's NKI softmax example: `(i_p < B) | (i_f < 0)`, the second side false everywhere
    path = write(tmp_path, """
        @nki.jit
        def exp_rows(x):
            rows, cols = x.shape
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            i_p, i_f = nl.arange(128)[:, None], nl.arange(cols)[None, :]
            keep = (i_p < rows) | (i_f < 0)
            nl.store(out[i_p, i_f], value=nl.exp(nl.load(x[i_p, i_f], mask=keep), mask=keep), mask=keep)
            return out
    """, header=HEADER)
    x = np.random.default_rng(10).standard_normal((100, 32)).astype(np.float32)
    got = run_klr(trace_file(path, "exp_rows", ["f32[100,32]"]), {"x": x})["out"]
    assert np.allclose(got, np.exp(x), rtol=1e-5)
    path.write_text(path.read_text().replace("(i_f < 0)", "(i_f < 8)"))
    with pytest.raises(TraceError, match=r"k\.py:11: not supported: the union <a mask keeping the first 100 of "
                                         r"axis 0> \| <a mask keeping the first 8 of axis 1>"):
        trace_file(path, "exp_rows", ["f32[100,32]"])


def test_a_mask_on_the_free_axis_of_a_3d_access_made_of_three_aranges_cuts_the_last_dim(tmp_path):
    # i_b and i_m both run along the index grid's axis 0, so the view has three dims for a 2-D grid: the
    # mask on grid axis 1 cuts the third (the columns past the tensor's end), not the second
    path = write(tmp_path, """
        @nki.jit
        def tail(x):
            n = x.shape[2]
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            for b in nl.affine_range(x.shape[0]):
                i_b = nl.arange(1)[:, None] + b
                i_m = nl.arange(1)[:, None]
                i_n = 512 + nl.arange(512)[None, :]
                t = nl.load(x[i_b, i_m, i_n], mask=(i_n < n))
                nl.store(out[i_b, i_m, i_n], value=t, mask=(i_n < n))
            return out
    """, header=HEADER)
    x = np.random.default_rng(7).standard_normal((2, 1, 800)).astype(np.float32)
    got = run_klr(trace_file(path, "tail", ["f32[2,1,800]"]), {"x": x}, check_written=False)["out"]
    assert np.array_equal(got[:, :, 512:], x[:, :, 512:])


def test_a_predicate_of_a_one_index_vector_broadcasts_and_does_not_cut_its_axis(tmp_path):
    # a row vector matmul's output store: i_m (one index) and i_n both run along the grid's axis 1, so
    # `i_m < m` is one truth value for the whole row; it used to keep only the first column of every tile
    path = write(tmp_path, """
        @nki.jit
        def row(x):
            i_m = nl.arange(1)[None, :]  # the one row
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            for j in nl.affine_range(2):
                i_n = j * 512 + nl.arange(512)[None, :]
                keep = (i_m < x.shape[0]) & (i_n < x.shape[1])
                t = nl.load(x[i_m, i_n], mask=keep)
                nl.store(out[i_m, i_n], value=nl.exp(t), mask=keep)
            return out
    """, header=HEADER)
    x = np.random.default_rng(8).standard_normal((1, 1000)).astype(np.float32)
    got = run_klr(trace_file(path, "row", ["f32[1,1000]"]), {"x": x})["out"]
    assert np.allclose(got, np.exp(x), rtol=1e-6)
