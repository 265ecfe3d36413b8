"""NKI 2.x forms public kernels outside the AWS samples use: a unary ALU operator of tensor_scalar with
``operand0=None``; and the refusals of two things that are not NKI, which must name what they are."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

from tusk.frontend import TraceError, trace_file
from tusk.frontend.check import run_klr

V2 = """\
import nki
import nki.isa as nisa
import nki.language as nl
"""
RNG = np.random.default_rng(53)


def _file(tmp_path, body: str):
    path = tmp_path / "k.py"
    path.write_text(V2 + textwrap.dedent(body))
    return path


@pytest.mark.parametrize("operand", ["None", "0.0"])
def test_a_unary_alu_operator_ignores_its_operand_none_included(tmp_path, operand):
    path = _file(tmp_path, f"""
        @nki.jit
        def k(x):
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x)
            r = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_scalar(dst=r, data=t, op0=nl.rsqrt, operand0={operand}, op1=nl.multiply, operand1=2.0)
            nisa.dma_copy(dst=out, src=r)
            return out
    """)
    x = (RNG.random((128, 16)) + 0.5).astype(np.float32)
    got = run_klr(trace_file(path, "k", ["f32[128,16]"]), {"x": x})["out"]
    assert np.allclose(got, 2 / np.sqrt(x), rtol=1e-6)


def test_a_binary_alu_operator_with_operand_none_is_refused(tmp_path):
    path = _file(tmp_path, """
        @nki.jit
        def k(x):
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x)
            nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=None)
            nisa.dma_copy(dst=out, src=t)
            return out
    """)
    with pytest.raises(TraceError, match="operand0"):
        trace_file(path, "k", ["f32[128,16]"])


@pytest.mark.parametrize("line, message", [
    ("t = nl.sbuf.view(dtype=x.dtype, shape=x.shape)", r"nl\.sbuf\.view \(nl\.sbuf names a memory"),
    ("t = nl.load(x[nl.affine_range(128), nl.affine_range(16)])",
     r"an nl\.affine_range\(\.\.\.\) object as a subscript \(it is a loop's range"),
])
def test_what_is_not_nki_is_named_in_its_refusal(tmp_path, line, message):
    path = _file(tmp_path, f"""
        @nki.jit
        def k(x):
            {line}
            return x
    """)
    with pytest.raises(TraceError, match=message):
        trace_file(path, "k", ["f32[128,16]"])


def test_a_dma_moves_row_k_element_by_element_between_free_shapes_that_differ(tmp_path):
    # a [K, H, V] access pattern over an HBM [H, K, V] tensor into a [K, H * V] tile: element k to element k
    path = _file(tmp_path, """
        @nki.jit
        def k(state):
            h, kk, v = state.shape
            out = nl.ndarray((kk, h * v), dtype=nl.float32, buffer=nl.shared_hbm)
            s = nl.ndarray((kk, h * v), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=s, src=state.ap(pattern=[[v, kk], [kk * v, h], [1, v]], offset=0))
            nisa.dma_copy(dst=out, src=s)
            return out
    """)
    state = RNG.standard_normal((3, 128, 16)).astype(np.float32)
    got = run_klr(trace_file(path, "k", ["f32[3,128,16]"]), {"state": state})["out"]
    assert np.array_equal(got, state.transpose(1, 0, 2).reshape(128, 48))


def test_a_dma_between_different_partition_counts_is_still_refused(tmp_path):
    path = _file(tmp_path, """
        @nki.jit
        def k(x):
            s = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=s, src=x)
            return x
    """)
    with pytest.raises(TraceError, match=r"nisa.dma_copy of a \[128, 16\] source into a \[64, 32\] destination"):
        trace_file(path, "k", ["f32[128,16]"])


@pytest.mark.parametrize("shape, value, dtype", [((3, 1000, 7), 2.5, "nl.float32"), ((300,), -4, "nl.int32"),
                                                 ((128, 64), 1.0, "nl.bfloat16")])
def test_a_filled_hbm_tensor_holds_the_value_in_every_element(tmp_path, shape, value, dtype):
    path = _file(tmp_path, f"""
        @nki.jit
        def k(x):
            out = nl.full({shape}, {value}, dtype={dtype}, buffer=nl.shared_hbm)
            return out
    """)
    got = run_klr(trace_file(path, "k", ["f32[1,1]"]), {"x": np.zeros((1, 1), np.float32)})["out"]
    assert got.shape == shape and np.all(got.astype(np.float32) == value)
