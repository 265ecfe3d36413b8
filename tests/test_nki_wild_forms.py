"""Small forms public kernels outside the AWS samples use: ``isinstance(x, nt.tensor)`` argument checks,
``nisa.iota`` of a program id, ``bool`` mask inputs, and nisa.dma_transpose's documented default permutation of
a 4-D tile."""

from __future__ import annotations

import numpy as np
import pytest

from tests.test_frontend_entry import write
from tusk.frontend import TraceError, trace_file
from tusk.frontend.check import run_klr
from tusk.frontend.specs import parse_tensor_spec

HEADER = """\
import numpy as np
import pytest
import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import neuronxcc.nki.typing as nt
"""

RNG = np.random.default_rng(31)


def test_kernels_check_their_arguments_with_isinstance_of_nt_tensor(tmp_path):
    path = write(tmp_path, """
        @nki.jit
        def scaled(x: nt.tensor, factor: float = 2.0):
            if not isinstance(x, nt.tensor) or isinstance(factor, nt.tensor) or not isinstance(factor, nt.scalar):
                raise TypeError("x must be a tensor and factor a number")
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            t = nl.load(x)
            assert isinstance(t, nt.tensor)
            nl.store(out, value=nl.multiply(t, factor))
            return out
    """, header=HEADER)
    x = RNG.standard_normal((128, 64)).astype(np.float32)
    got = run_klr(trace_file(path, "scaled", ["f32[128,64]"], args={"factor": 3.0}), {"x": x})["out"]
    assert np.array_equal(got, x * np.float32(3.0))


def test_iota_of_a_program_id_is_a_one_element_tile_of_it(tmp_path):
    path = write(tmp_path, """
        @nki.jit
        def ids(x):
            out = nl.ndarray((2, 1), dtype=nl.int32, buffer=nl.shared_hbm)
            pid = nisa.iota(nl.program_id(axis=0), dtype=nl.int32).reshape((1, 1))
            nl.store(out[nl.program_id(axis=0):nl.program_id(axis=0) + 1, :], value=pid)
            return out
    """, header=HEADER)
    got = run_klr(trace_file(path, "ids", ["f32[2,4]"], grid=(2,)), {"x": np.zeros((2, 4), np.float32)})["out"]
    assert got.tolist() == [[0], [1]]


def test_a_bool_input_is_a_byte_tensor():
    assert parse_tensor_spec("bool[128,16]") == parse_tensor_spec("u8[128,16]")


def test_dma_transpose_of_a_4d_tile_keeps_its_middle_axes_in_order(tmp_path):
    path = write(tmp_path, """
        @nki.jit
        def swapped(x):
            out = nl.ndarray((64, 2, 4, 128), dtype=x.dtype, buffer=nl.shared_hbm)
            s = nl.ndarray((128, 2, 4, 64), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=s, src=x)
            t = nisa.dma_transpose(s)
            nisa.dma_copy(dst=out, src=t)
            return out
    """, header=HEADER)
    x = RNG.standard_normal((128, 2, 4, 64)).astype(np.float32)
    got = run_klr(trace_file(path, "swapped", ["f32[128,2,4,64]"]), {"x": x})["out"]
    assert np.array_equal(got, x.transpose(3, 1, 2, 0))


def test_cos_and_tan_are_sines(tmp_path):
    path = write(tmp_path, """
        @nki.jit
        def trig(x):
            c = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            a = nl.load(x)
            nl.store(c, value=nl.cos(a))
            nl.store(t, value=nl.tan(a))
            return c, t
    """, header=HEADER)
    x = RNG.uniform(-1.4, 1.4, (128, 32)).astype(np.float32)
    got = run_klr(trace_file(path, "trig", ["f32[128,32]"]), {"x": x})
    assert np.allclose(got["c"], np.cos(x), rtol=1e-5, atol=1e-6)
    assert np.allclose(got["t"], np.tan(x), rtol=1e-4, atol=1e-5)


def test_the_1x_tile_methods_astype_expand_dims_and_assert_shape(tmp_path):
    path = write(tmp_path, """
        @nki.jit
        def methods(x):
            half = nl.ndarray((128, 1, 32), dtype=nl.bfloat16, buffer=nl.shared_hbm)
            t = nl.load(x).assert_shape((128, 32))
            acc = nl.zeros((128, 32), dtype=nl.float32)
            acc[...] = nl.multiply(t, 0.5)
            nl.store(half, value=acc.astype(nl.bfloat16).expand_dims(1))
            return half
    """, header=HEADER)
    x = RNG.standard_normal((128, 32)).astype(np.float32)
    got = run_klr(trace_file(path, "methods", ["f32[128,32]"]), {"x": x})["half"]
    want = (x * np.float32(0.5)).reshape(128, 1, 32)
    assert got.shape == (128, 1, 32) and np.allclose(got.astype(np.float32), want, rtol=1e-2, atol=1e-2)
    assert not np.array_equal(got.astype(np.float32), want)  # rounded to bfloat16 on the way


def test_assert_shape_of_another_shape_stops_the_trace(tmp_path):
    path = write(tmp_path, """
        @nki.jit
        def wrong(x):
            out = nl.ndarray((128, 32), dtype=x.dtype, buffer=nl.shared_hbm)
            t = nl.load(x).assert_shape((128, 64))
            nl.store(out, value=t)
            return out
    """, header=HEADER)
    with pytest.raises(TraceError, match=r"assert_shape: the tile is \[128, 32\], not \[128, 64\]"):
        trace_file(path, "wrong", ["f32[128,32]"])


@pytest.mark.parametrize("call", ["nisa.tensor_reduce(nl.max, v, axis=[2, 4])", "nl.max(v, axis=[2, 4])",
                                  "nisa.tensor_reduce(nl.add, v, axis=[2, 4])"])
def test_a_reduction_over_interleaved_axes_of_a_reshaped_tile(tmp_path, call):
    # a 2x2 pool as one call: the [P, h, 2, w, 2] view has five dims, one more than an access pattern
    path = write(tmp_path, f"""
        @nki.jit
        def pool(x):
            out = nl.ndarray((128, 3, 4), dtype=x.dtype, buffer=nl.shared_hbm)
            t = nl.load(x)
            v = t.reshape((128, 3, 2, 4, 2))
            nl.store(out, value={call})
            return out
    """, header=HEADER)
    x = RNG.standard_normal((128, 6, 8)).astype(np.float32)
    got = run_klr(trace_file(path, "pool", ["f32[128,6,8]"]), {"x": x})["out"]
    blocks = x.reshape(128, 3, 2, 4, 2)
    want = blocks.max(axis=(2, 4)) if "max" in call else blocks.sum(axis=(2, 4))
    assert np.allclose(got, want, rtol=1e-6, atol=1e-6) and (np.array_equal(got, want) or "add" in call)


def test_a_reduction_over_contiguous_trailing_axes_is_one_instruction(tmp_path):
    path = write(tmp_path, """
        @nki.jit
        def last2(x):
            out = nl.ndarray((128, 2, 2), dtype=x.dtype, buffer=nl.shared_hbm)
            t = nl.load(x)
            nl.store(out, value=nisa.tensor_reduce(nl.max, t, axis=[3, 4]))
            return out
    """, header=HEADER)
    x = RNG.standard_normal((128, 2, 2, 4, 2)).astype(np.float32)
    data = trace_file(path, "last2", ["f32[128,2,2,4,2]"])
    assert np.array_equal(run_klr(data, {"x": x})["out"], x.max(axis=(3, 4)))
    from tusk.ir import klr
    from tusk.ir.klr.listing import listing
    assert listing(klr.read_klr(data).contents.kernel).count(" tensorReduce ") == 1


def test_a_loop_from_one_may_address_its_index_minus_one(tmp_path):
    # the loop's register starts at 1, the access adds -1: folded into the register, as an offset is a Nat
    path = write(tmp_path, """
        @nki.jit
        def shift(x):
            out = nl.ndarray((128, 6), dtype=x.dtype, buffer=nl.shared_hbm)
            src = nl.load(x)
            dst = nl.ndarray((128, 6), dtype=x.dtype, buffer=nl.sbuf)
            for y in nl.affine_range(1, 7):
                dst[:, y - 1] = nl.multiply(src[:, y], 2.0)
            nl.store(out, value=dst)
            return out
    """, header=HEADER)
    x = RNG.standard_normal((128, 8)).astype(np.float32)
    assert np.array_equal(run_klr(trace_file(path, "shift", ["f32[128,8]"]), {"x": x})["out"], x[:, 1:7] * 2)


def test_a_tile_assigns_to_a_view_that_differs_only_by_unit_free_axes(tmp_path):
    path = write(tmp_path, """
        @nki.jit
        def cached(bias):
            out = nl.ndarray((2, 128, 1), dtype=bias.dtype, buffer=nl.shared_hbm)
            cache = nl.ndarray((2, nl.par_dim(128), 1, 1), dtype=bias.dtype, buffer=nl.sbuf)
            for t in nl.affine_range(2):
                cache[t, :, :, :] = nl.load(bias[t * 128:(t + 1) * 128])
            for t in nl.affine_range(2):
                nl.store(out[t], value=nl.add(cache[t, :, :, 0], 1.0))
            return out
    """, header=HEADER)
    bias = RNG.standard_normal(256).astype(np.float32)
    got = run_klr(trace_file(path, "cached", ["f32[256]"]), {"bias": bias})["out"]
    assert np.array_equal(got, (bias + np.float32(1.0)).reshape(2, 128, 1))


def test_a_tile_of_another_shape_is_still_refused(tmp_path):
    path = write(tmp_path, """
        @nki.jit
        def wrong(x):
            out = nl.ndarray((128, 4), dtype=x.dtype, buffer=nl.shared_hbm)
            c = nl.ndarray((nl.par_dim(128), 2, 2), dtype=x.dtype, buffer=nl.sbuf)
            c[...] = nl.load(x)
            nl.store(out, value=c)
            return out
    """, header=HEADER)
    with pytest.raises(TraceError, match=r"assigning a \[128, 4\] tile to a \[128, 2, 2\] view"):
        trace_file(path, "wrong", ["f32[128,4]"])


def test_an_affine_select_predicate_may_add_loop_indices(tmp_path):
    # a causal mask per tile: q_base + i_p >= k_base + i_f, the bases from the loop indices (the loops unroll)
    path = write(tmp_path, """
        @nki.jit
        def causal(x):
            out = nl.ndarray((256, 512), dtype=nl.float32, buffer=nl.shared_hbm)
            for q in nl.affine_range(2):
                for kt in nl.sequential_range(2):
                    t = nl.load(x[nl.ds(q * 128, 128), nl.ds(kt * 256, 256)])
                    ip, jf = nl.mgrid[0:128, 0:256]
                    r = nisa.affine_select(pred=(q * 128 + ip >= kt * 256 + jf), on_true_tile=t,
                                           on_false_value=-1e4, dtype=np.float32)
                    nl.store(out[nl.ds(q * 128, 128), nl.ds(kt * 256, 256)], value=r)
            return out
    """, header=HEADER)
    x = RNG.standard_normal((256, 512)).astype(np.float32)
    got = run_klr(trace_file(path, "causal", ["f32[256,512]"]), {"x": x})["out"]
    rows, cols = np.indices((256, 512))
    assert np.array_equal(got, np.where(rows >= cols, x, np.float32(-1e4)))


def test_comparison_operators_on_a_tile_make_a_mask_tile(tmp_path):
    path = write(tmp_path, """
        @nki.jit
        def relu_ish(x):
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            t = nl.load(x)
            keep = nl.multiply(t > 0.25, t <= 1.0)
            nl.store(out, value=nl.where(keep, t, nl.zeros(x.shape, dtype=x.dtype)))
            return out
    """, header=HEADER)
    x = RNG.standard_normal((128, 32)).astype(np.float32)
    got = run_klr(trace_file(path, "relu_ish", ["f32[128,32]"]), {"x": x})["out"]
    assert np.array_equal(got, np.where((x > 0.25) & (x <= 1.0), x, np.float32(0)))


def test_a_loop_index_as_an_elementwise_operand_unrolls_its_loop(tmp_path):
    path = write(tmp_path, """
        @nki.jit
        def shifted(x):
            out = nl.ndarray((128, 4, 8), dtype=x.dtype, buffer=nl.shared_hbm)
            t = nl.load(x)
            for i in nl.affine_range(4):
                nl.store(out[:, i, :], value=nl.multiply(t + i * 8, 2.0))
            return out
    """, header=HEADER)
    x = RNG.standard_normal((128, 8)).astype(np.float32)
    got = run_klr(trace_file(path, "shifted", ["f32[128,8]"]), {"x": x})["out"]
    assert np.array_equal(got, np.stack([(x + np.float32(8 * i)) * 2 for i in range(4)], axis=1))


@pytest.mark.parametrize("pred, keep", [("i_p == i_f", np.equal), ("i_p != i_f", np.not_equal)])
def test_an_affine_select_predicate_may_compare_indices_for_equality(tmp_path, pred, keep):
    path = write(tmp_path, f"""
        @nki.jit
        def diag(w):
            out = nl.ndarray((128, 128), dtype=w.dtype, buffer=nl.shared_hbm)
            t = nl.load(w)
            i_p = nl.arange(128)[:, None]
            i_f = nl.arange(128)[None, :]
            nl.store(out, nisa.affine_select({pred}, t.broadcast_to((128, 128)), 0))
            return out
    """, header=HEADER)
    w = RNG.standard_normal((128, 1)).astype(np.float32)
    got = run_klr(trace_file(path, "diag", ["f32[128,1]"]), {"w": w})["out"]
    rows, cols = np.indices((128, 128))
    assert np.array_equal(got, np.where(keep(rows, cols), np.broadcast_to(w, (128, 128)), np.float32(0)))


def test_an_index_comparison_as_a_python_truth_value_is_refused(tmp_path):
    path = write(tmp_path, """
        @nki.jit
        def k(x):
            i_p = nl.arange(128)[:, None]
            i_f = nl.arange(128)[None, :]
            if i_p == i_f:
                return x
            return x
    """, header=HEADER)
    with pytest.raises(TraceError, match="a comparison of nl.arange indices as a Python truth value"):
        trace_file(path, "k", ["f32[128,128]"])


@pytest.mark.parametrize("body, want", [
    # a named tile assigned to a view is still read afterwards: it keeps its own values
    ("z = nl.add(a, 1.0)\n"
     "            m[...] = z\n"
     "            nl.store(out, value=nl.add(m, z))", lambda x: (x + 1) * 2),
    # nl.where's y operand, made by the statement just before, keeps its values after nl.where read it
    ("c = nl.greater(a, 0.0, dtype=nl.uint8)\n"
     "            z = nl.full((128, 64), 3.0, dtype=nl.float32)\n"
     "            w = nl.where(c, a, z)\n"
     "            nl.store(out, value=nl.add(w, z))", lambda x: np.where(x > 0, x, 3.0) + 3),
    # m[...] = nl.where(...): where the condition is 0, m holds y (nl.where's copyPredicated reads what it writes)
    ("c = nl.greater(a, 0.0, dtype=nl.uint8)\n"
     "            z = nl.full((128, 64), 3.0, dtype=nl.float32)\n"
     "            m[...] = nl.where(c, a, z)\n"
     "            nl.store(out, value=m)", lambda x: np.where(x > 0, x, 3.0)),
], ids=["named_tile", "where_operand", "where_into_view"])
def test_a_tile_assigned_to_a_view_keeps_its_values_and_the_view_gets_all_of_them(tmp_path, body, want):
    path = write(tmp_path, f"""
        @nki.jit
        def assigned(x):
            out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
            a = nl.load(x)
            m = nl.ndarray((nl.par_dim(128), 64), dtype=nl.float32, buffer=nl.sbuf)
            {body}
            return out
    """, header=HEADER)
    x = RNG.standard_normal((128, 64)).astype(np.float32)
    got = run_klr(trace_file(path, "assigned", ["f32[128,64]"]), {"x": x})["out"]
    assert np.array_equal(got, want(x).astype(np.float32))


@pytest.mark.parametrize("row", ["1:2", "nl.ds(1, 1)", "1"])
def test_a_gather_along_axis_1_may_follow_a_one_row_slice(tmp_path, row):
    path = write(tmp_path, f"""
        @nki.jit
        def picked(table, idx):
            out = nl.ndarray((128, 1), dtype=table.dtype, buffer=nl.shared_hbm)
            i_p = nl.arange(128)[:, None]
            ix = nl.load(idx)
            v = nl.ndarray((nl.par_dim(128), 1), dtype=table.dtype, buffer=nl.sbuf)
            v[...] = nl.load(table[{row}, ix[i_p, 0]])
            nl.store(out, value=v)
            return out
    """, header=HEADER)
    table = RNG.standard_normal((3, 40)).astype(np.float32)
    idx = ((np.arange(128) * 7) % 40).astype(np.int32).reshape(128, 1)
    got = run_klr(trace_file(path, "picked", ["f32[3,40]", "i32[128,1]"]), {"table": table, "idx": idx})["out"]
    assert np.array_equal(got, table[1, idx[:, 0]].reshape(128, 1))


def test_1x_numpy_dtypes_are_callable_scalar_types(tmp_path):
    path = write(tmp_path, """
        @nki.jit
        def scaled(x, n):
            out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
            left = nl.ndarray((128, 1), dtype=nl.int32, buffer=nl.shared_hbm)
            t = nl.load(x)
            b = nisa.tensor_scalar(data=t, op0=nl.subtract, operand0=nl.float32(1.0), op1=nl.multiply,
                                   operand1=nl.float32(1e3), dtype=nl.float32)
            nl.store(out, value=nl.divide(nl.float32(1.0), nl.add(b, 1e4)))
            k = nl.load(n)
            nl.store(left, value=nl.mod(k, nl.int32(8)))
            return out, left
    """, header=HEADER)
    x = RNG.standard_normal((128, 64)).astype(np.float32)
    n = RNG.integers(0, 100, (128, 1)).astype(np.int32)
    got = run_klr(trace_file(path, "scaled", ["f32[128,64]", "i32[128,1]"]), {"x": x, "n": n})
    b = (x - np.float32(1.0)) * np.float32(1e3)
    np.testing.assert_allclose(got["out"], np.float32(1.0) / (b + np.float32(1e4)), rtol=1e-6)
    assert np.array_equal(got["left"], n % 8)


def test_calling_nl_bfloat16_is_refused_as_in_nki(tmp_path):
    path = write(tmp_path, """
        @nki.jit
        def cast(x):
            out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
            nl.store(out, value=nl.add(nl.load(x), nl.bfloat16(1.0)))
            return out
    """, header=HEADER)
    with pytest.raises(TraceError, match=r"calling nl.bfloat16 .*numpy dtype object"):
        trace_file(path, "cast", ["f32[128,64]"])


def test_an_arange_as_an_elementwise_operand_is_refused_pointing_at_iota(tmp_path):
    path = write(tmp_path, """
        @nki.jit
        def below(n):
            out = nl.ndarray((128, 1), dtype=nl.int32, buffer=nl.shared_hbm)
            lens = nl.broadcast_to(nl.load(n), shape=(128, 1))
            nl.store(out, value=nl.less(nl.arange(128)[:, None], lens))
            return out
    """, header=HEADER)
    with pytest.raises(TraceError, match=r"nl.less of an nl.arange index expression .*nisa.iota"):
        trace_file(path, "below", ["i32[1,1]"])


HEADER_2X = """\
import numpy as np
import nki
import nki.isa as nisa
import nki.language as nl
"""


def test_part_of_an_hbm_tensor_viewed_as_a_wider_dtype_reads_and_writes_its_bytes(tmp_path):
    # the last two bfloat16 columns of each row hold one int32 (a packed token id)
    path = write(tmp_path, """
        @nki.jit
        def packed(x):
            out = nl.ndarray((128, 6), dtype=x.dtype, buffer=nl.shared_hbm)
            ids = nl.ndarray((128, 1), dtype=nl.int32, buffer=nl.sbuf)
            nisa.dma_copy(ids, x[0:128, 4:6].view(nl.int32))
            one = nl.ndarray((128, 1), dtype=nl.int32, buffer=nl.sbuf)
            nisa.tensor_scalar(dst=one, data=ids, op0=nl.add, operand0=1)
            body = nl.ndarray((128, 4), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(body, x[0:128, 0:4])
            nisa.dma_copy(out[0:128, 0:4], body)
            nisa.dma_copy(out[0:128, 4:6].view(nl.int32), one)
            return out
    """, header=HEADER_2X)
    ids = RNG.integers(0, 1 << 20, 128).astype(np.int32)
    halves = ids.view(np.uint16).reshape(128, 2).astype(np.uint32) << 16
    x = np.concatenate([RNG.standard_normal((128, 4)).astype(np.float32), halves.view(np.float32)], axis=1)
    x[:, :4] = (x[:, :4].view(np.uint32) & 0xFFFF0000).view(np.float32)  # bfloat16 values
    got = run_klr(trace_file(path, "packed", ["bf16[128,6]"]), {"x": x})["out"]
    back = (got[:, 4:6].view(np.uint32) >> 16).astype(np.uint16).reshape(-1).view(np.int32)
    assert np.array_equal(back, ids + 1)
    assert np.array_equal(got[:, :4], x[:, :4])
