"""aws-neuron/aws-neuron-sdk NKI 1.x docs examples (nki/test/test_nki_*.py, ``import neuronxcc.nki``).

Each reference is numpy written for this bench from what the ISA documentation says the instruction does."""

from __future__ import annotations

import numpy as np

from .entry import Entry
from .refs import FP32_MIN, bf16, match_replace8, scan, scattered_rows, sequence_bounds

T = "aws-neuron+aws-neuron-sdk/nki/test"
G = "docs1"
KEPT = "dropout is random: the reference takes which elements dropped from the output and checks the rest"


def _dropped(x, a, got):
    """Every element dropout kept is the input's (NKI's dropout zeroes, it does not rescale)."""
    return [np.where(got[0] == 0, 0.0, x[0])]


PROPERTIES = ("its data is nl.rand (not an output): the reference checks what the docs' own test checks of "
              "the output (the output itself when those properties hold)")


def _holds(ok: bool, out: np.ndarray) -> list[np.ndarray]:
    return [out if ok else np.full_like(out, 12345.0)]  # finite and unlike any valid output: a mismatch


def _max8_props(x, a, got):
    v = got[0]
    return _holds(bool(((v >= 0) & (v <= 1)).all() and (np.diff(v, axis=1) <= 0).all()), v)


def _index8_props(x, a, got):
    v = got[0]
    return _holds(bool(((v >= 0) & (v < 128)).all() and (np.diff(v, axis=1) != 0).all()
                       and all(len(set(r)) == 8 for r in v.tolist())), v)


def _replace8_props(x, a, got):
    v = got[0]
    minus_inf = np.isinf(v) & (v < 0)
    rest = v[~minus_inf]
    return _holds(bool((minus_inf.sum(1) == 8).all() and ((rest >= 0) & (rest <= 1)).all()), v)


def _gathered(x, a, got):
    """nl.gather_flattened of the kernel's own (random) data and indices, both outputs."""
    data, idx = got[0], got[1]
    return [data, idx, np.take_along_axis(data, idx.astype(np.int64), axis=-1)]


def e(name, file, fn, inputs, ref, **kw) -> Entry:
    return Entry(name, G, f"{T}/{file}", fn, tuple(inputs), ref, **kw)


def _iota(x, a):
    i = np.arange(128.0)[:, None]
    j = np.arange(512.0)[None, :]
    return [j, i, -j, 5 + 2 * i, i + j]


def _local_gather(x, a):
    src, index = x
    n_elem, n_valid = int(a["num_elem_per_idx"]), int(a["num_valid_indices"])
    flat = src.reshape(128, -1)
    out = np.empty((128, n_valid, n_elem), np.float32)
    for core in range(8):
        rows = slice(16 * core, 16 * core + 16)
        offs = index[rows].flatten(order="F")[:n_valid].astype(np.int64)
        for k, o in enumerate(offs):
            out[rows, k, :] = flat[rows, o:o + n_elem]
    return [out.reshape(128, 4, 16, 4)]


def _oob_skip_load(x, a):
    src = x[0]
    out = np.full((64, 512), -1.0, np.float32)
    for i in range(64):
        if 3 * i < src.shape[0]:
            out[i] = src[3 * i]
    return [out]


def _oob_skip_store(x, a):
    src = x[0]
    out = np.full((128, 512), -1.0, np.float32)
    for i in range(64):
        if 3 * i < 128:
            out[3 * i] = src[i]
    return [out]


def _rmw(x, a):
    out = np.ones((128, 512), np.float32)
    out[2 * np.arange(64)] += x[0]
    return [out]


def _store_even(x, a, base=-1.0):
    out = np.full((128, 512), base, np.float32)
    out[2 * np.arange(64)] = x[0]
    return [out]


def _match_mask(x, a):
    """The kernel's mask is ``(ix < n // 2 and iy < m // 2)``: Python's ``and`` of two mask expressions is
    its second operand, so every partition's first 256 columns are in it (the docs' golden checks only
    [:64, :256]); the columns past 256 are the stored tile's unwritten part: not compared."""
    imm = float(a["imm"])
    data = x[0]
    out = np.full(data.shape, np.nan, np.float32)
    sub, idx = match_replace8(data[:, :256], imm)
    out[:, :256] = sub
    return [out, idx]


def _range_select(x, a):
    on_true, b0, b1 = x
    pos = int(a["range_start"]) + np.arange(on_true.shape[1])[None, :]
    sel = np.where((pos >= b0) & (pos < b1), on_true, FP32_MIN)
    # KLR outputs in creation order: the reduce_result HBM tensor, then the returned SBUF tile's copy
    return [sel.max(axis=1, keepdims=True), sel]


def _range_select_chain(x, a):
    on_true, b0, b1 = x
    start, step = int(a["range_start"]), on_true.shape[0]
    best = None
    for i in range(3):
        pos = start + i * step + np.arange(on_true.shape[1])[None, :]
        sel = np.where((pos >= b0) & (pos < b1), on_true + i, FP32_MIN)
        m = sel.max(axis=1, keepdims=True)
        best = m if best is None else np.maximum(best, m)
    return [sel, best]


def _cumulative(op):
    return {"nl.add": np.add, "nl.multiply": np.multiply, "nl.max": np.maximum, "nl.min": np.minimum}[op]


def _tt_scan(x, a):
    return [scan(x[0], x[1], 0.0)]


def _nc_matmul(x, a):
    a_, b, d, e_, g, h = (v.astype(np.float64) for v in x)
    return [a_.T @ b, d.T @ e_, np.einsum("bkm,bkn->bmn", g, h)]


def _spmd(x, a):
    return [x[0]]


ENTRIES = [
    e("d1_activation", "test_nki_isa_activation.py", "nki_activation",
      ["f32[128,1024]", "f32[128,512]", "f32[128,1]"],
      lambda x, a: [np.exp(x[0]), bf16(np.square(2.0 * x[1] + x[2]))], rtol=1e-2, atol=1e-2),
    e("d1_affine_select", "test_nki_isa_affine_select.py", "nki_affine_select", ["f32[128,128]"],
      lambda x, a: [np.where(np.arange(128)[None, :] < np.arange(128)[:, None], x[0], FP32_MIN)]),
    e("d1_bn_stats_1", "test_nki_isa_bn_stats.py", "nki_bn_stats_bn_aggr_1", ["f32[128,128]"],
      lambda x, a: [x[0].mean(1, keepdims=True), x[0].var(1, keepdims=True)]),
    e("d1_bn_stats_2", "test_nki_isa_bn_stats.py", "nki_bn_stats_bn_aggr_2", ["f32[128,1024]"],
      lambda x, a: [x[0].mean(1, keepdims=True), x[0].var(1, keepdims=True)]),
    e("d1_copy_predicated", "test_nki_isa_copypredicated.py", "nki_copy_predicated",
      ["u8[128,512]", "f32[128,512]", "f32[128,512]"],
      lambda x, a: [np.where(x[0] != 0, x[1], x[2])], ranges=((0, 2),), ints=(0,)),
    e("d1_dma_copy", "test_nki_isa_dma_copy.py", "nki_dma_copy", ["f32[256,1]"], lambda x, a: [x[0]]),
    e("d1_indirect_load_oob_err", "test_nki_isa_dma_copy.py", "nki_indirect_load_oob_err", ["f32[128,512]"],
      lambda x, a: [x[0][2 * np.arange(64)]]),
    e("d1_indirect_load_oob_err_negative", "test_nki_isa_dma_copy.py", "nki_indirect_load_oob_error_negative",
      ["f32[128,512]"], None, note="expected refusal: index 129 of 128 rows with oob_mode=error, refused at the call"),
    e("d1_indirect_load_oob_skip", "test_nki_isa_dma_copy.py", "nki_indirect_load_oob_skip", ["f32[128,512]"],
      _oob_skip_load),
    e("d1_indirect_store_rmw", "test_nki_isa_dma_copy.py", "nki_indirect_store_rmw", ["f32[64,512]"], _rmw),
    e("d1_indirect_store_oob_err", "test_nki_isa_dma_copy.py", "nki_indirect_store_oob_err", ["f32[64,512]"],
      _store_even),
    e("d1_indirect_store_oob_err_negative", "test_nki_isa_dma_copy.py", "nki_indirect_store_oob_err_negative",
      ["f32[64,512]"], None, note="expected refusal: index 129 of 128 rows with oob_mode=error, refused at the call"),
    e("d1_indirect_store_oob_skip", "test_nki_isa_dma_copy.py", "nki_indirect_store_oob_skip", ["f32[64,512]"],
      _oob_skip_store),
    e("d1_dma_copy_swdge", "test_nki_isa_dma_copy.py", "nki_dma_copy_swdge", ["f32[64,512]"], lambda x, a: [x[0]]),
    e("d1_dma_copy_hwdge", "test_nki_isa_dma_copy.py", "nki_dma_copy_hwdge", ["f32[128,512]"], lambda x, a: [x[0]]),
    e("d1_dma_transpose_hbm2sb", "test_nki_isa_dma_transpose.py", "nki_dma_transpose_2d_hbm2sb", ["f16[16,128]"],
      lambda x, a: [x[0].T]),
    e("d1_dma_transpose_sb2sb", "test_nki_isa_dma_transpose.py", "nki_dma_transpose_2d_sb2sb", ["f16[16,128]"],
      lambda x, a: [x[0].T]),
    e("d1_dma_transpose_hbm2sb_xbar", "test_nki_isa_dma_transpose.py", "nki_dma_transpose_2d_hbm2sb_dge_xbar",
      ["f16[16,128]"], lambda x, a: [x[0].T]),
    e("d1_dma_transpose_sb2sb_xbar", "test_nki_isa_dma_transpose.py", "nki_dma_transpose_2d_sb2sb_dge_xbar",
      ["f16[16,128]"], lambda x, a: [x[0].T]),
    e("d1_dma_gather_transpose_hbm2sb", "test_nki_isa_dma_transpose.py", "nki_dma_gather_transpose_3d_hbm2sb",
      ["u16[64,4,128]", "u32[32,1]"], lambda x, a: [np.transpose(x[0][x[1][:, 0].astype(int)], (2, 1, 0))],
      ranges=((0, 1000), (0, 64)), ints=(0, 1)),
    e("d1_dma_gather_transpose_sb2sb", "test_nki_isa_dma_transpose.py", "nki_dma_gather_transpose_3d_sb2sb",
      ["u16[32,4,128]", "u32[32,1]"], lambda x, a: [np.transpose(x[0][x[1][:, 0].astype(int)], (2, 1, 0))],
      ranges=((0, 1000), (0, 32)), ints=(0, 1)),
    e("d1_dropout", "test_nki_isa_dropout.py", "nki_dropout", ["f32[128,512]", "f32[128,1]"], _dropped,
      ranges=((-1, 1), (0, 1)), note=KEPT),
    e("d1_dropout_scalar", "test_nki_isa_dropout.py", "nki_dropout_scalar", ["f32[128,512]"], _dropped, note=KEPT),
    e("d1_iota", "test_nki_isa_iota.py", "nki_iota", [], _iota),
    e("d1_local_gather", "test_nki_isa_local_gather.py", "nki_local_gather", ["f32[128,512,4]", "u16[128,4]"],
      _local_gather, args=("num_elem_per_idx=4", "num_valid_indices=64", "output_shape=(128,4,16,4)"),
      ranges=((-1, 1), (0, 2044)), ints=(1,)),
    e("d1_max8", "test_nki_isa_max8.py", "nki_max8", [], _max8_props, note=PROPERTIES),
    e("d1_memset", "test_nki_isa_memset.py", "nki_memset", [], lambda x, a: [np.full((128, 128), 0.2, np.float32)]),
    e("d1_nc_find_index8", "test_nki_isa_nc_find_index8.py", "nki_max_index8", [], _index8_props, note=PROPERTIES),
    e("d1_nc_match_replace8", "test_nki_isa_nc_match_replace8.py", "nki_nc_match_replace8", [], _replace8_props,
      note=PROPERTIES),
    e("d1_nc_match_replace_indices8", "test_nki_isa_nc_match_replace8.py", "nki_nc_match_replace_indices8",
      ["f32[128,512]"], lambda x, a: list(match_replace8(x[0], float(a["imm"]))), args=("imm=-1e30",)),
    e("d1_nc_match_replace_indices8_mask", "test_nki_isa_nc_match_replace8.py",
      "nki_nc_match_replace_indices8_mask", ["f32[128,512]"], _match_mask, args=("imm=-1e30",), partial=True,
      options={"strict": False}, note="only the masked [:64, :256] part of the data output is defined: the "
      "kernel stores the rest of its tile, which nothing wrote (run from random memory, not strict)"),
    e("d1_nc_match_replace_indices8_3d", "test_nki_isa_nc_match_replace8.py", "nki_nc_match_replace_indices8_3d",
      ["f32[128,4,4]"], lambda x, a: list(match_replace8(x[0], 0.0))),
    e("d1_nc_match_replace_indices8_3d_inplace", "test_nki_isa_nc_match_replace8.py",
      "nki_nc_match_replace_indices8_3d_inplace", ["f32[128,4,4]"], lambda x, a: list(match_replace8(x[0], 0.0))),
    e("d1_nc_matmul", "test_nki_isa_nc_matmul.py", "nki_nc_matmul",
      ["f32[128,128]", "f32[128,512]", "f32[256,128]", "f32[256,512]", "f32[16,64,64]", "f32[16,64,512]"],
      _nc_matmul, atol=1e-3),
    e("d1_nc_matmul_double_row", "test_nki_isa_nc_matmul.py", "nki_nc_matmul_double_row_gen3",
      ["fp8_e5m2[128,2,1]", "fp8_e5m2[128,2,512]"], lambda x, a: [np.einsum("kli,klj->ij", x[0], x[1])],
      ranges=((-2, 3), (-2, 3)), ints=(0, 1)),
    e("d1_nc_stream_shuffle", "test_nki_isa_nc_stream_shuffle.py", "nki_nc_stream_shuffle", ["f32[32,128]"],
      lambda x, a: [x[0][(np.arange(32) - 1) % 32]]),
    e("d1_nc_stream_shuffle_bcast_partition", "test_nki_isa_nc_stream_shuffle.py",
      "nki_nc_stream_shuffle_broadcast_partition", ["f32[1,128]"], lambda x, a: [np.repeat(x[0], 32, axis=0)]),
    e("d1_nc_stream_shuffle_bcast_mask", "test_nki_isa_nc_stream_shuffle.py", "nki_nc_stream_shuffle_broadcast_mask",
      ["f32[128,128]"], lambda x, a: [x[0][(np.arange(128) // 32) * 32 + (np.arange(128) - 1) % 32]]),
    e("d1_nc_transpose", "test_nki_isa_nc_transpose.py", "nki_nc_transpose", ["f32[128,64]", "f32[32,2]"],
      lambda x, a: [x[0].T, x[1].T]),
    e("d1_par_reduce", "test_nki_isa_partition_reduce.py", "nki_par_reduce", ["f32[128,32,4]", "f32[1,32,4]"],
      lambda x, a: [x[0].sum(0, keepdims=True)], atol=1e-3),
    e("d1_par_reduce_nd_b", "test_nki_isa_partition_reduce.py", "nki_par_reduce_nd_b",
      ["f32[4,128,32,8]", "f32[4,1,32,8]"], lambda x, a: [x[0].sum(1, keepdims=True)], atol=1e-3),
    e("d1_range_select", "test_nki_isa_range_select.py", "nki_range_select_example",
      ["f32[128,512]", "f32[128,1]", "f32[128,1]"], _range_select,
      args=("compare_op0=np.greater_equal", "compare_op1=np.less", "range_start=32", "dtype=float32"),
      ranges=((-1, 1), (0, 100), (100, 400)), ints=(1, 2)),
    e("d1_range_select_chaining", "test_nki_isa_range_select.py", "nki_range_select_chaining",
      ["f32[128,512]", "f32[128,1]", "f32[128,1]"], _range_select_chain,
      args=("compare_op0=np.greater_equal", "compare_op1=np.less", "range_start=32"),
      ranges=((-1, 1), (0, 100), (200, 500)), ints=(1, 2)),
    e("d1_reciprocal", "test_nki_isa_reciprocal.py", "reciprocal_kernel", ["f32[128,512]"],
      lambda x, a: [1.0 / x[0]], ranges=((0.5, 2.0),)),
    e("d1_tensor_reduce", "test_nki_isa_reduce.py", "nki_reduce", ["f32[128,512]"],
      lambda x, a: [x[0].sum(1, keepdims=True)], atol=1e-3),
    e("d1_select_reduce_basic", "test_nki_isa_select_reduce.py", "nki_select_reduce_basic",
      ["u8[128,64]", "f32[128,64]"], lambda x, a: [np.where(x[0] != 0, x[1], FP32_MIN)], ranges=((0, 2),), ints=(0,)),
    e("d1_select_reduce_with_reduction", "test_nki_isa_select_reduce.py", "nki_select_reduce_with_reduction",
      ["u8[128,512]", "f32[128,512]", "f32[128,1]"],
      lambda x, a: [w := np.where(x[0] != 0, x[1], x[2]), w.max(1, keepdims=True)], ranges=((0, 2),), ints=(0,)),
    e("d1_select_reduce_reverse_pred", "test_nki_isa_select_reduce.py", "nki_select_reduce_reverse_pred",
      ["u8[128,64]", "f32[128,64]"], lambda x, a: [np.where(x[0] != 0, FP32_MIN, x[1])], ranges=((0, 2),), ints=(0,)),
    e("d1_sequence_bounds", "test_nki_isa_sequence_bounds.py", "nki_sequence_bounds", ["f32[1,32]"],
      lambda x, a: [sequence_bounds(x[0][0])[None]], ranges=((0, 5),), ints=(0,)),
    e("d1_tensor_copy", "test_nki_isa_tensor_copy.py", "nki_tensor_copy", ["f32[8,8]"], lambda x, a: [x[0]]),
    e("d1_tensor_scalar", "test_nki_isa_tensor_scalar.py", "nki_tensor_scalar",
      ["f32[128,512]", "f32[128,512]", "f32[64,1024]", "f32[64,1]"],
      lambda x, a: [x[0] - 1, 1 - x[1], x[2] * x[3] + 2.5]),
    e("d1_tensor_scalar_cumulative_scalar", "test_nki_isa_tensor_scalar_cumulative.py",
      "nki_tensor_scalar_cumulative_scalar", ["f32[128,64]"],
      lambda x, a: [np.add.accumulate(x[0] + 0.5, axis=-1)], args=("op0=nl.add", "op1=nl.add", "imm0=0.5"),
      atol=1e-3),
    e("d1_tensor_scalar_cumulative_vector", "test_nki_isa_tensor_scalar_cumulative.py",
      "nki_tensor_scalar_cumulative_vector", ["f32[128,64]", "f32[128,1]"],
      lambda x, a: [np.maximum.accumulate(x[0] + x[1], axis=-1)], args=("op0=nl.add", "op1=nl.max")),
    e("d1_tensor_scalar_cumulative_chain", "test_nki_isa_tensor_scalar_cumulative.py",
      "nki_tensor_scalar_cumulative_chain", ["f32[128,64]"],
      lambda x, a: [np.add.accumulate(x[0], axis=-1) + x[0].sum(-1, keepdims=True)],
      args=("op0=nl.add", "op1=nl.add", "imm0=0.0"), atol=1e-3),
    e("d1_tensor_scan", "test_nki_isa_tensor_scalar_cumulative.py", "nki_tensor_scan", ["f32[128,64]"],
      lambda x, a: [np.add.accumulate(x[0], axis=-1) + 2.0], args=("op=nl.add", "initial=2.0"), atol=1e-3),
    e("d1_tensor_tensor", "test_nki_isa_tensor_tensor.py", "nki_tensor_tensor", ["f32[128,512]", "f32[128,512]"],
      lambda x, a: [x[0] + x[1]]),
    e("d1_tensor_tensor_scan", "test_nki_isa_tensor_tensor_scan.py", "nki_tensor_tensor_scan",
      ["f32[128,1024]", "f32[128,1024]"], _tt_scan, ranges=((0, 1), (0, 1)), atol=1e-3),
    e("d1_mask", "test_nki_mask.py", "nki_mask", ["f32[128,512]"], lambda x, a: [np.square(x[0][:64, :256])]),
    e("d1_memory_semantics", "test_nki_memory_semantics.py", "simple_demo_kernel", ["f32[4,128,512]"],
      lambda x, a: [np.exp(x[0])]),
    e("d1_add_tensors", "test_nki_nl_add.py", "add_tensors", ["f32[128,512]", "f32[128,512]"],
      lambda x, a: [x[0] + x[1]]),
    e("d1_add_tensor_scalar", "test_nki_nl_add.py", "add_tensor_scalar", ["f32[128,512]"], lambda x, a: [x[0] + 2.2]),
    e("d1_add_broadcast_free_dim", "test_nki_nl_add.py", "add_broadcast_free_dim", ["f32[128,512]", "f32[128,1]"],
      lambda x, a: [x[0] + x[1]]),
    e("d1_add_broadcast_par_dim", "test_nki_nl_add.py", "add_broadcast_par_dim", ["f32[128,512]", "f32[1,512]"],
      lambda x, a: [x[0] + x[1]]),
    e("d1_add_broadcast_both_dims", "test_nki_nl_add.py", "add_broadcast_both_dims", ["f32[128,512]", "f32[1,1]"],
      lambda x, a: [x[0] + x[1]]),
    e("d1_add_broadcast_each_dims", "test_nki_nl_add.py", "add_broadcast_each_dims", ["f32[128,1]", "f32[1,512]"],
      lambda x, a: [x[0] + x[1]]),
    e("d1_nl_broadcast_to", "test_nki_nl_broadcast.py", "test_nl_broadcast", ["i32[1,64]"],
      lambda x, a: [np.repeat(x[0], 128, axis=0)], ranges=((-100, 100),), ints=(0,)),
    e("d1_nl_dslice", "test_nki_nl_dslice.py", "example_kernel", ["f32[128,1024]"], lambda x, a: [x[0]]),
    e("d1_gather_flattened", "test_nki_nl_gather_flattened.py", "nki_gather_flattened", [], _gathered,
      note="its data is nl.rand: the reference gathers from the data output"),
    e("d1_load_store", "test_nki_nl_load_store.py", "example_kernel", ["f32[128,512]"], lambda x, a: [x[0]]),
    e("d1_load_store_scalar", "test_nki_nl_load_store.py", "example_kernel", ["f32[128,512]"],
      lambda x, a: [np.full((128, 512), 100.0, np.float32)], args=("use_scalar=true",)),
    e("d1_load_store_b", "test_nki_nl_load_store.py", "example_load_store_b", ["f32[4,128,512]"],
      lambda x, a: [x[0]]),
    e("d1_indirect_load_1", "test_nki_nl_load_store_indirect.py", "example_indirect_load_1",
      ["f32[128,512]", "i32[64]"], lambda x, a: [x[0][x[1].astype(int)]], ranges=((-1, 1), (0, 128)), ints=(1,)),
    e("d1_indirect_load_2", "test_nki_nl_load_store_indirect.py", "example_indirect_load_2", ["f32[128,512]"],
      lambda x, a: [x[0][2 * np.arange(64)]]),
    e("d1_indirect_save_1", "test_nki_nl_load_store_indirect.py", "example_indirect_save_1",
      ["f32[64,512]", "i32[64]"], lambda x, a: [scattered_rows(128, x[1], x[0])],
      ranges=((-1, 1), (0, 128)), ints=(1,), partial=True, note="writes only the indexed rows, by design"),
    e("d1_indirect_save_2", "test_nki_nl_load_store_indirect.py", "example_indirect_save_2", ["f32[64,512]"],
      lambda x, a: [scattered_rows(128, 2 * np.arange(64), x[0])], partial=True,
      note="writes only the even rows, by design"),
    e("d1_load_transpose2d", "test_nki_nl_load_transpose2d.py", "example_kernel_0", ["f32[512,128]"],
      lambda x, a: [x[0].T]),
    e("d1_load_transpose2d_dma", "test_nki_nl_load_transpose2d.py", "example_kernel_1", ["f32[512,128]"],
      lambda x, a: [x[0].T]),
    e("d1_mgrid", "test_nki_nl_mgrid.py", "example_kernel", ["f32[128,512]"], lambda x, a: [x[0]]),
    e("d1_mgrid_1", "test_nki_nl_mgrid.py", "example_kernel_1", ["f32[128,512]"], lambda x, a: [x[0]]),
    e("d1_device_print", "test_nki_simulate_kernel.py", "print_kernel", ["f32[3,4]"], lambda x, a: [x[0]]),
    e("d1_spmd_grid", "test_nki_spmd_grid.py", "nki_spmd_kernel", ["f32[4,2,1,1]"], _spmd, grid="4,2"),
    e("d1_psum_modulo_alloc", "test_psum_modulo_alloc.py", "allocated_loop_transpose",
      ["f32[256,128]", "f32[128,256]"], lambda x, a: [x[0].T]),
    e("d1_sbuf_modulo_alloc", "test_sbuf_modulo_alloc.py", "allocated_loop_transpose",
      ["f32[256,128]", "f32[128,256]"], lambda x, a: [x[0].T]),
]
