"""Masks that are static predicates, as public kernels write them per iteration of a Python loop
(``mask=j + 1 < n_tiles``, ``mask=k_i * 512 <= q_i * 128``): one that holds is no mask, one that does not
makes the call write nothing -- and the statement that assigns or adds its result writes nothing either, as
in NKI.  Whole-tile instructions (nl.matmul, nisa.nc_transpose, nisa.nc_matmul) take a mask that keeps every
element or none and refuse anything between."""

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

RNG = np.random.default_rng(11)


def test_a_carry_copied_under_a_false_mask_in_the_last_tile_keeps_its_value(tmp_path):
    # a row-wise running sum over column tiles; each tile hands its last column on to the next one, except
    # the last tile, whose copy is masked off: `carry` must keep the previous tile's value there
    path = write(tmp_path, """
        @nki.jit
        def running_sums(x):
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            carry_out = nl.ndarray((128, 1), dtype=x.dtype, buffer=nl.shared_hbm)
            n_tiles = x.shape[1] // 64
            carry = nl.zeros((128, 1), dtype=nl.float32)
            ones = nl.ones((128, 64), dtype=nl.float32)
            for j in range(n_tiles):
                t = nl.load(x[:, j * 64:(j + 1) * 64])
                sums = nisa.tensor_tensor_scan(data0=ones, data1=t, initial=carry, op0=np.multiply, op1=np.add)
                nl.store(out[:, j * 64:(j + 1) * 64], value=sums)
                carry[:, :] = nl.copy(sums[:, 63:64], mask=j + 1 < n_tiles)
            nl.store(carry_out, value=carry)
            return out, carry_out
    """, header=HEADER)
    x = RNG.standard_normal((128, 256)).astype(np.float32)
    got = run_klr(trace_file(path, "running_sums", ["f32[128,256]"]), {"x": x})
    assert np.allclose(got["out"], np.cumsum(x, axis=1), rtol=1e-4, atol=1e-4)
    # the carry after tile 2 of 4 (the copy of tile 3 was masked off)
    assert np.allclose(got["carry_out"][:, 0], np.cumsum(x, axis=1)[:, 191], rtol=1e-4, atol=1e-4)


def test_a_block_causal_matmul_adds_only_the_blocks_its_static_mask_keeps(tmp_path):
    path = write(tmp_path, """
        @nki.jit
        def causal_blocks(q, k):
            out = nl.ndarray((128, 512 * 2), dtype=nl.float32, buffer=nl.shared_hbm)
            qt = nl.load(q)
            for q_i in range(2):
                acc = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum)
                for k_i in range(2):
                    kt = nl.load(k[:, k_i * 512:(k_i + 1) * 512])
                    acc[:, :] += nl.matmul(qt, kt, transpose_x=True, mask=k_i <= q_i)
                res = nl.copy(acc)
                nl.store(out[:, q_i * 512:(q_i + 1) * 512], value=res)
            return out
    """, header=HEADER)
    q = RNG.standard_normal((64, 128)).astype(np.float32)
    k = RNG.standard_normal((64, 1024)).astype(np.float32)
    got = run_klr(trace_file(path, "causal_blocks", ["f32[64,128]", "f32[64,1024]"]), {"q": q, "k": k})["out"]
    blocks = [q.T.astype(np.float64) @ k[:, b * 512:(b + 1) * 512] for b in range(2)]
    want = np.concatenate([blocks[0], blocks[0] + blocks[1]], axis=1)
    assert np.allclose(got, want, rtol=1e-4, atol=1e-3)


def test_a_load_under_a_mask_joined_with_a_false_predicate_leaves_the_buffer(tmp_path):
    path = write(tmp_path, """
        @nki.jit
        def keep_first(x):
            out = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.shared_hbm)
            buf = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.sbuf)
            ip, jf = nl.mgrid[0:128, 0:64]
            for t in range(3):
                buf[ip, jf] = nl.load(x[t * 128 + ip, jf], mask=(ip < 128) & (t == 0))
            nl.store(out, value=buf)
            return out
    """, header=HEADER)
    x = RNG.standard_normal((384, 64)).astype(np.float32)
    got = run_klr(trace_file(path, "keep_first", ["f32[384,64]"]), {"x": x})["out"]
    assert np.array_equal(got, x[:128])


def test_whole_tile_instructions_take_a_mask_keeping_every_element_and_refuse_a_narrowing_one(tmp_path):
    path = write(tmp_path, """
        @nki.jit
        def transposed(x, rows):
            out = nl.ndarray((64, 128), dtype=x.dtype, buffer=nl.shared_hbm)
            i = nl.arange(128)[:, None]
            j = nl.arange(64)[None, :]
            keep = (i < rows) & (j < 64)
            t = nl.load(x[i, j], mask=keep)
            tt = nisa.nc_transpose(t[i, j], mask=keep)
            res = nl.copy(tt)
            nl.store(out, value=res)
            return out
    """, header=HEADER)
    x = RNG.standard_normal((128, 64)).astype(np.float32)
    got = run_klr(trace_file(path, "transposed", ["f32[128,64]"], args={"rows": 128}), {"x": x})["out"]
    assert np.array_equal(got, x.T)
    with pytest.raises(TraceError, match=r"nisa\.nc_transpose mask=<a mask keeping the first 100 of axis 0, "
                                         r"the first 64 of axis 1> \(the PE array takes whole tiles"):
        trace_file(path, "transposed", ["f32[128,64]"], args={"rows": 100})


def test_adding_a_masked_result_adds_only_what_the_mask_kept(tmp_path):
    path = write(tmp_path, """
        @nki.jit
        def half(x):
            out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
            ip, jf = nl.mgrid[0:128, 0:64]
            t = nl.load(x)
            acc = nl.full((128, 64), 1.0, dtype=nl.float32)
            acc[ip, jf] += nl.exp(t, mask=(ip < 64))
            nl.store(out, value=acc)
            return out
    """, header=HEADER)
    x = RNG.standard_normal((128, 64)).astype(np.float32)
    got = run_klr(trace_file(path, "half", ["f32[128,64]"]), {"x": x})["out"]
    want = np.ones((128, 64), np.float32)
    want[:64] += np.exp(x[:64])
    assert np.allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("transpose_x", [True, False])
def test_a_matmul_mask_on_its_result_axes_narrows_the_pe_operands(tmp_path, transpose_x):
    # acc[:m, :n] += x[:, :m].T @ y[:, :n]: the rest of the accumulator keeps what it held
    lhs = "at" if transpose_x else "nl.transpose(at)"
    path = write(tmp_path, f"""
        @nki.jit
        def k(a, b):
            out = nl.ndarray((96, 512), dtype=nl.float32, buffer=nl.shared_hbm)
            ip = nl.arange(96)[:, None]
            jf = nl.arange(512)[None, :]
            acc = nl.zeros((96, 512), nl.float32, buffer=nl.psum)
            at = nl.load(a)
            bt = nl.load(b)
            acc += nl.matmul(at, bt[ip, jf], transpose_x=True, mask=(jf < 420))
            acc += nl.matmul({lhs}, bt[ip, jf], transpose_x={transpose_x}, mask=(ip < 64) & (jf < 300))
            nl.store(out, value=nl.copy(acc))
            return out
    """, header=HEADER)
    a = RNG.standard_normal((96, 96)).astype(np.float32)
    b = RNG.standard_normal((96, 512)).astype(np.float32)
    got = run_klr(trace_file(path, "k", ["f32[96,96]", "f32[96,512]"]), {"a": a, "b": b})["out"]
    want = np.zeros((96, 512), np.float32)
    want[:, :420] += a.T @ b[:, :420]
    want[:64, :300] += a.T[:64] @ b[:, :300]
    assert np.allclose(got, want, rtol=1e-4, atol=1e-4)


def test_an_nc_matmul_mask_on_its_result_axes_narrows_the_pe_operands(tmp_path):
    path = write(tmp_path, """
        @nki.jit
        def k(a, b):
            out = nl.ndarray((96, 512), dtype=nl.float32, buffer=nl.shared_hbm)
            i_m = nl.arange(96)[:, None]
            i_n = nl.arange(512)[None, :]
            acc = nl.zeros((96, 512), nl.float32, buffer=nl.psum)
            at = nl.load(a)
            bt = nl.load(b)
            acc += nisa.nc_matmul(at, bt, mask=(i_m < 80) & (i_n < 200))
            acc += nisa.nc_matmul(at, bt)
            nl.store(out, value=nl.copy(acc))
            return out
    """, header=HEADER)
    a = RNG.standard_normal((96, 96)).astype(np.float32)
    b = RNG.standard_normal((96, 512)).astype(np.float32)
    got = run_klr(trace_file(path, "k", ["f32[96,96]", "f32[96,512]"]), {"a": a, "b": b})["out"]
    want = a.T @ b
    want[:80, :200] += a.T[:80] @ b[:, :200]
    assert np.allclose(got, want, rtol=1e-4, atol=1e-4)
