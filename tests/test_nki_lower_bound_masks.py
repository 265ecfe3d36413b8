"""Masks with a lower bound on a rising index (``mask=(i_f - 3 >= 0) & (i_f - 3 < n)``, the left padding
of a causal convolution): the instruction reads and writes the window of indices the predicate keeps, and
the rest of an assigned-into tile keeps what it held.  Kernels written for these tests, traced, run in the
KLR interpreter and compared with numpy."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

from tusk.frontend import TraceError, trace_file
from tusk.frontend.check import run_klr

V1 = """\
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
"""
RNG = np.random.default_rng(83)


def _trace(tmp_path, body: str, specs: list[str]) -> bytes:
    path = tmp_path / "k.py"
    path.write_text(V1 + textwrap.dedent(body))
    return trace_file(path, "k", specs)


SHIFTED = """
    @nki.jit
    def k(x):
        P, N = x.shape
        out = nl.ndarray((P, N + 3), dtype=x.dtype, buffer=nl.shared_hbm)
        i_p, i_f = nl.arange(P)[:, None], nl.arange(N + 3)[None, :]
        t = nl.zeros((P, N + 3), dtype=x.dtype)
        t[i_p, i_f] = nl.load(x[i_p, i_f - 3], mask=(i_f - 3 >= 0) & (i_f - 3 < N))
        nl.store(out, t)
        return out
"""


def test_a_load_from_a_lower_bound_up_fills_the_window_and_keeps_the_padding(tmp_path):
    x = RNG.standard_normal((64, 40)).astype(np.float32)
    got = run_klr(_trace(tmp_path, SHIFTED, ["f32[64,40]"]), {"x": x})["out"]
    want = np.zeros((64, 43), np.float32)
    want[:, 3:] = x
    np.testing.assert_array_equal(got, want)


TILED = """
    @nki.jit
    def k(x):
        P, N = x.shape
        out = nl.ndarray((P, N), dtype=x.dtype, buffer=nl.shared_hbm)
        i_p, i_f = nl.arange(P)[:, None], nl.arange(16)[None, :]
        for j in nl.affine_range(N // 16):
            t = nl.zeros((P, 16), dtype=x.dtype)
            t[i_p, i_f] = nl.load(x[i_p, 16 * j + i_f - 5], mask=(16 * j + i_f - 5 >= 0))
            nl.store(out[i_p, 16 * j + i_f], value=t)
        return out
"""


def test_a_loop_dependent_lower_bound_cuts_only_the_first_iteration(tmp_path):
    x = RNG.standard_normal((32, 64)).astype(np.float32)
    got = run_klr(_trace(tmp_path, TILED, ["f32[32,64]"]), {"x": x})["out"]
    want = np.zeros_like(x)
    want[:, 5:] = x[:, :-5]
    np.testing.assert_array_equal(got, want)


STORED = """
    @nki.jit
    def k(x):
        P, N = x.shape
        out = nl.ndarray((P, N), dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.zeros((P, N), dtype=x.dtype, buffer=nl.sbuf))
        t = nl.load(x)
        i_p, i_f = nl.arange(P)[:, None], nl.arange(N)[None, :]
        nl.store(out[i_p, i_f], value=nl.multiply(t, 2.0), mask=(i_p > 7) & (i_f >= 2) & (i_f < N - 1))
        return out
"""


def test_a_store_keeps_the_window_on_both_axes(tmp_path):
    x = RNG.standard_normal((32, 24)).astype(np.float32)
    got = run_klr(_trace(tmp_path, STORED, ["f32[32,24]"]), {"x": x})["out"]
    want = np.zeros_like(x)
    want[8:, 2:23] = 2 * x[8:, 2:23]
    np.testing.assert_array_equal(got, want)


def test_a_lower_bound_past_the_index_keeps_nothing_and_the_call_writes_nothing(tmp_path):
    body = STORED.replace("(i_p > 7) & (i_f >= 2) & (i_f < N - 1)", "(i_f >= N)")
    x = RNG.standard_normal((32, 24)).astype(np.float32)
    got = run_klr(_trace(tmp_path, body, ["f32[32,24]"]), {"x": x})["out"]
    np.testing.assert_array_equal(got, np.zeros_like(x))


def test_a_lower_bound_on_a_matmul_result_is_refused(tmp_path):
    body = """
        @nki.jit
        def k(a, b):
            out = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.shared_hbm)
            i_p, i_f = nl.arange(64)[:, None], nl.arange(64)[None, :]
            r = nl.matmul(nl.load(a), nl.load(b), transpose_x=True, mask=(i_f >= 8))
            nl.store(out, r)
            return out
    """
    with pytest.raises(TraceError, match=r"k\.py:\d+: not supported: <a mask keeping indices 8\.\.63 of axis 1> on "
                                         r"a matmul"):
        _trace(tmp_path, body, ["f32[64,64]", "f32[64,64]"])
