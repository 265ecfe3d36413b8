"""aws-neuron/aws-neuron-sdk NKI 2.x docs examples (nki/examples, nki/deep-dives; ``import nki``).

Each reference is numpy written for this bench from what the example's documentation says it computes."""

from __future__ import annotations

import numpy as np

from .entry import Entry
from .refs import mamba, mx_matmul, mx_packed, mx_product, mx_quantized_rows, pool2d

X = "aws-neuron+aws-neuron-sdk/nki/examples"
MX = "aws-neuron+aws-neuron-sdk/nki/deep-dives/src/mxfp-matmul"
G = "docs2"
BY_DESIGN = "expected refusal: a docs example of an error, refused at its line"


def e(name, path, fn, inputs, ref, **kw) -> Entry:
    return Entry(name, G, path, fn, tuple(inputs), ref, **kw)


def _transpose2d(x, a):
    rows, cols = (int(v) for v in a["shape2D"].split(","))
    p = x[0].shape[0]
    return [x[0].reshape(p, rows, cols).transpose(0, 2, 1).reshape(p, rows * cols)]


def _mx_offline(x, a):
    k = a["mx_dtype"]
    return [mx_product(mx_packed(x[0], x[1], k), mx_packed(x[2], x[3], k))]


def _mx_on_device(x, a):
    st = mx_packed(x[0], x[1], a["stationary_mx_dtype"])
    return [mx_product(st, mx_quantized_rows(x[2], a["moving_mx_dtype"]))]


def _mx(x, a):
    return [mx_matmul(x[0], x[1], a["mx_dtype"])]


def _matmul(x, a):
    return [x[0].astype(np.float64).T @ x[1].astype(np.float64)]


ENTRIES = [
    e("d2_getting_started_baremetal", f"{X}/getting_started_baremetal.py", "nki_tensor_add_kernel",
      ["f32[64,96]", "f32[64,96]"], lambda x, a: [x[0] + x[1]]),
    e("d2_getting_started_jax", f"{X}/getting_started_jax.py", "nki_tensor_add_kernel",
      ["f32[64,96]", "f32[64,96]"], lambda x, a: [x[0] + x[1]]),
    e("d2_getting_started_torch", f"{X}/getting_started_torch.py", "nki_tensor_add_kernel",
      ["f32[64,96]", "f32[64,96]"], lambda x, a: [x[0] + x[1]]),
    e("d2_index_case_1_split", f"{X}/index-case-1.py", "tensor_split_kernel_", ["f32[16,9]"],
      lambda x, a: [x[0][:, 0::2], x[0][:, 1::2]]),
    e("d2_index_case_3_maxpool", f"{X}/index-case-3.py", "tensor_maxpool_kernel_", ["f32[8,12,12]"],
      lambda x, a: [pool2d(x[0], int(a["sz_pool"]), np.max)], args=("sz_pool=2",)),
    e("d2_layout_loop", f"{X}/layout-loop.py", "tensor_exp_kernel_", ["f32[256,512]"], None, note=BY_DESIGN),
    e("d2_layout_pass", f"{X}/layout-pass.py", "tensor_exp_kernel_", ["f32[128,512]"],
      lambda x, a: [np.exp(x[0])]),
    e("d2_layout_violation", f"{X}/layout-violation.py", "tensor_exp_kernel_", ["f32[256,512]"], None,
      note=BY_DESIGN),
    e("d2_layout_dynamic_loop", f"{X}/layout-dynamic-loop.py", "tensor_exp_kernel_", ["f32[300,512]"], None,
      note=BY_DESIGN),
    e("d2_simulate_add", f"{X}/simulate/nki_simulate_example.py", "add_kernel", ["f32[128,512]", "f32[128,512]"],
      lambda x, a: [x[0] + x[1]]),
    e("d2_tensor_add", f"{X}/tensor_addition/tensor_addition_nki_kernels.py", "nki_tensor_add",
      ["f32[256,1024]", "f32[256,1024]"], lambda x, a: [x[0] + x[1]]),
    e("d2_transpose2d", f"{X}/transpose2d/transpose2d_nki_kernels.py", "tensor_transpose2D_kernel_", ["f32[16,12]"],
      _transpose2d, args=("shape2D=3,4",)),
    e("d2_avgpool2d", f"{X}/average_pool2d/average_pool2d_nki_kernels.py", "tensor_avgpool_kernel",
      ["f32[8,12,12]"], lambda x, a: [pool2d(x[0], int(a["pool_size"]), np.mean)], args=("pool_size=2",)),
    e("d2_matmul_basic", f"{X}/matrix_multiplication/matrix_multiplication_nki_kernels.py", "nki_matmul_basic_",
      ["f32[128,64]", "f32[128,512]"], _matmul, atol=1e-3),
    e("d2_matmul_tiled", f"{X}/matrix_multiplication/matrix_multiplication_nki_kernels.py", "nki_matmul_tiled_",
      ["f32[256,256]", "f32[256,1024]"], _matmul, atol=1e-3),
    e("d2_matmul_hoist_load", f"{X}/matrix_multiplication/matrix_multiplication_nki_kernels.py",
      "nki_matmul_hoist_load_", ["f32[256,256]", "f32[256,1024]"], _matmul, atol=1e-3),
    e("d2_matmul_block_free", f"{X}/matrix_multiplication/matrix_multiplication_nki_kernels.py",
      "nki_matmul_block_free_dimension_", ["f32[128,256]", "f32[128,1024]"], _matmul, atol=1e-3),
    e("d2_matmul_fully_optimized", f"{X}/matrix_multiplication/matrix_multiplication_nki_kernels.py",
      "nki_matmul_fully_optimized_", ["f32[512,256]", "f32[512,512]"], _matmul, atol=1e-3,
      args=("TILES_IN_BLOCK_M=2", "TILES_IN_BLOCK_N=1", "TILES_IN_BLOCK_K=2")),
    e("d2_mamba_v1", f"{X}/fused_mamba/mamba_nki_kernels.py", "mamba_v1",
      ["f32[1,128,256]", "f32[1,128,256]", "f32[128,4]", "f32[1,4,256]", "f32[1,4,256]"],
      lambda x, a: [mamba(*x)], ranges=((0, 0.5), (-1, 1), (-1, 0), (-1, 1), (-1, 1)), atol=1e-3, rtol=1e-3),
    e("d2_mamba_v2", f"{X}/fused_mamba/mamba_nki_kernels.py", "mamba_v2",
      ["f32[1,128,256]", "f32[1,128,256]", "f32[128,4]", "f32[1,4,256]", "f32[1,4,256]"],
      lambda x, a: [mamba(*x)], ranges=((0, 0.5), (-1, 1), (-1, 0), (-1, 1), (-1, 1)), atol=1e-3, rtol=1e-3),
    e("d2_mamba_v3", f"{X}/fused_mamba/mamba_nki_kernels.py", "mamba_v3",
      ["f32[1,128,1024]", "f32[1,128,1024]", "f32[128,2]", "f32[1,2,1024]", "f32[1,2,1024]"],
      lambda x, a: [mamba(*x)], ranges=((0, 0.5), (-1, 1), (-1, 0), (-1, 1), (-1, 1)), atol=1e-3, rtol=1e-3),
    e("d2_mx_offline_quantized", f"{MX}/mx_kernels.py", "kernel_offline_quantized_mx_matmul",
      ["u32[128,128]", "u8[16,128]", "u32[128,512]", "u8[16,512]"], _mx_offline, args=("mx_dtype=float8_e5m2_x4",),
      ranges=((0, 0x7A), (120, 130), (0, 0x7A), (120, 130)), ints=(0, 1, 2, 3), rtol=1e-2, atol=1e-2),
    e("d2_mx_on_device_quantize", f"{MX}/mx_kernels.py", "kernel_on_device_quantize_matmul_mx",
      ["u32[128,128]", "u8[16,128]", "bf16[128,2048]"], _mx_on_device,
      args=("stationary_mx_dtype=float8_e5m2_x4", "moving_mx_dtype=float8_e5m2_x4"),
      ranges=((0, 0x7A), (120, 130)), ints=(0, 1), rtol=1e-2, atol=1e-2),
    e("d2_mx_copy_strided", f"{MX}/mx_kernels.py", "kernel_copy_strided_quantize_matmul_mx",
      ["bf16[512,128]", "bf16[512,512]"], _mx, args=("mx_dtype=float8_e5m2_x4",), rtol=1e-2, atol=1e-2),
    e("d2_mx_copy_strided_packed_scale", f"{MX}/mx_kernels.py", "kernel_copy_strided_quantize_matmul_mx_packed_scale",
      ["bf16[512,128]", "bf16[512,512]"], _mx, args=("mx_dtype=float8_e5m2_x4",), rtol=1e-2, atol=1e-2),
]
