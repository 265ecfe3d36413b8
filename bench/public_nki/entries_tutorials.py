"""aws-neuron/nki-samples tutorials (src/nki_samples/tutorials), as of the clone's main.

The numpy references are written for this bench from what each tutorial says its kernel computes."""

from __future__ import annotations

import numpy as np

from .entry import Entry
from .refs import mx_matmul, mx_packed, mx_product, mx_quantized_rows

T = "aws-neuron+nki-samples/src/nki_samples/tutorials"
ATT = f"{T}/attention_fwd_performance/attention_kernels.py"
MM = f"{T}/matrix_multiplication/matrix_multiplication_nki_kernels.py"
MAMBA = f"{T}/fused_mamba/mamba_nki_kernels.py"
MX = f"{T}/mxfp-matmul/mx_kernels.py"


def add(x, a):
    return [x[0] + x[1]]


def attention_t(x, a):
    """q, k, v are [d_head, seq]: softmax(q.T @ k) @ v.T, [seq, d_head]."""
    q, k, v = x
    s = q.T.astype(np.float64) @ k
    p = np.exp(s - s.max(axis=1, keepdims=True))
    return [(p / p.sum(axis=1, keepdims=True)) @ v.T]


def matmul_t(x, a):
    """lhsT [K, M], rhs [K, N]: lhsT.T @ rhs."""
    return [x[0].T.astype(np.float64) @ x[1]]


def mamba(x, a):
    """Selective scan: h_t = exp(delta_t A) h_{t-1} + delta_t u_t B_t; y_t = sum over states of h_t C_t.
    delta, u [b, c, t]; A [c, n]; B, C [b, n, t]."""
    delta, u, A, B, C = (np.asarray(v, np.float64) for v in x[:5])
    b, c, t = delta.shape
    out = np.zeros((b, c, t))
    for n in range(A.shape[1]):
        da = np.exp(delta * A[None, :, n, None])
        dbu = delta * u * B[:, None, n, :]
        h = np.zeros((b, c))
        for i in range(t):
            h = da[:, :, i] * h + dbu[:, :, i]
            out[:, :, i] += h * C[:, n, i][:, None]
    return [out]


def avgpool(x, a):
    p = int(a["pool_size"])
    c, h, w = x[0].shape
    return [x[0].reshape(c, h // p, p, w // p, p).mean(axis=(2, 4))]


def transpose2d(x, a):
    f1, f2 = (int(v) for v in a["shape2D"].split(","))
    p = x[0].shape[0]
    return [x[0].reshape(p, f1, f2).transpose(0, 2, 1).reshape(p, f1 * f2)]


def mx_offline_t(x, a):
    """Both tiles offline-quantized: packed words and contiguous scales."""
    k = a["mx_dtype"]
    return [mx_product(mx_packed(x[0], x[1], k), mx_packed(x[2], x[3], k))]


def mx_on_device_t(x, a):
    """The stationary tile offline-quantized, the moving one quantized on device."""
    st = mx_packed(x[0], x[1], a["stationary_mx_dtype"])
    return [mx_product(st, mx_quantized_rows(x[2], a["moving_mx_dtype"]))]


def mx_matmul_t(x, a):
    """The product of the MX-quantized (fp8, shared E8M0 scale per 32 values) tiles, in bf16."""
    return [mx_matmul(x[0], x[1], a["mx_dtype"])]


# fp8 codes below 0x7B are finite in both kinds (only the low byte of each word varies); scales near 2^0
MX_RANGES = ((0, 0x7A), (120, 130), (0, 0x7A), (120, 130))
QKV128 = ("f32[128,128]",) * 3
QKV512 = ("f32[128,512]",) * 3
ATT_TOL = {"rtol": 2e-2, "atol": 2e-2}   # the tutorial's test: atol 1e-2 on bf16 matmuls


def _att(version: str, inputs, bf16: bool = False) -> Entry:
    tol = ATT_TOL if bf16 else {"rtol": 1e-3, "atol": 1e-3}
    return Entry(f"tut_attn_fwd_{version}", "tutorials", ATT, f"attn_fwd_{version}", inputs, attention_t, **tol)


ENTRIES = [
    Entry("tut_tensor_add_kernel", "tutorials", f"{T}/tensor_addition/tensor_addition_nki_kernels.py",
          "nki_tensor_add_kernel_", ("f32[128,512]", "f32[128,512]"), add, grid="1,1"),
    Entry("tut_tensor_add_launcher", "tutorials", f"{T}/tensor_addition/tensor_addition_nki_kernels.py",
          "nki_tensor_add", ("f32[256,1024]", "f32[256,1024]"), add),
    Entry("tut_spmd_tensor_add_kernel", "tutorials", f"{T}/tensor_addition/spmd_tensor_addition_nki_kernels.py",
          "nki_tensor_add_kernel_", ("f32[256,1024]", "f32[256,1024]"), add, grid="2,2"),
    Entry("tut_spmd_tensor_add_launcher", "tutorials", f"{T}/tensor_addition/spmd_tensor_addition_nki_kernels.py",
          "nki_tensor_add", ("f32[256,1024]", "f32[256,1024]"), add),
    Entry("tut_spmd_nc2_tensor_add", "tutorials",
          f"{T}/tensor_addition/spmd_multiple_nc_tensor_addition_nki_kernels.py",
          "nki_tensor_add_nc2", ("f32[512,1024]", "f32[512,1024]"), add),
    Entry("tut_transpose2d", "tutorials", f"{T}/transpose2d/transpose2d_nki_kernels.py",
          "tensor_transpose2D_kernel_", ("f32[128,12]",), transpose2d, args=("shape2D=3,4",)),
    Entry("tut_avgpool2d", "tutorials", f"{T}/average_pool2d/average_pool2d_nki_kernels.py",
          "tensor_avgpool_kernel", ("f32[2,6,6]",), avgpool, args=("pool_size=2",)),
    Entry("tut_matmul_basic", "tutorials", MM, "nki_matmul_basic_", ("f32[128,64]", "f32[128,512]"), matmul_t),
    Entry("tut_matmul_tiled", "tutorials", MM, "nki_matmul_tiled_", ("f32[256,128]", "f32[256,1024]"), matmul_t),
    Entry("tut_matmul_hoist_load", "tutorials", MM, "nki_matmul_hoist_load_",
          ("f32[256,256]", "f32[256,512]"), matmul_t),
    Entry("tut_matmul_block_free", "tutorials", MM, "nki_matmul_block_free_dimension_",
          ("f32[128,256]", "f32[128,1024]"), matmul_t),
    Entry("tut_matmul_fully_optimized", "tutorials", MM, "nki_matmul_fully_optimized_",
          ("f32[256,256]", "f32[256,512]"), matmul_t,
          args=("TILES_IN_BLOCK_M=2", "TILES_IN_BLOCK_N=1", "TILES_IN_BLOCK_K=2")),
    *(Entry(f"tut_mamba_{v}", "tutorials", MAMBA, f"mamba_{v}",
            ("f32[1,128,512]", "f32[1,128,512]", "f32[128,4]", "f32[1,4,512]", "f32[1,4,512]"), mamba,
            ranges=((0.0, 0.1), (-1, 1), (-1.0, 0.0), (-1, 1), (-1, 1)), rtol=1e-3, atol=1e-3)
      for v in ("v1", "v2", "v3")),
    _att("v1", QKV128),
    _att("v2", QKV128),
    *(_att(v, QKV512) for v in ("v3", "v4", "v5", "v6")),
    *(_att(v, QKV512, bf16=True) for v in ("v7", "v8", "v8a", "v9", "v10", "v11")),
    Entry("tut_mx_offline_quantized", "tutorials", MX, "kernel_offline_quantized_mx_matmul",
          ("u32[128,128]", "u8[16,128]", "u32[128,512]", "u8[16,512]"), mx_offline_t,
          args=("mx_dtype=float8_e4m3fn_x4",), ints=(0, 1, 2, 3), ranges=MX_RANGES, rtol=1e-2, atol=1e-2),
    Entry("tut_mx_on_device_quantize", "tutorials", MX, "kernel_on_device_quantize_matmul_mx",
          ("u32[128,128]", "u8[16,128]", "bf16[128,2048]"), mx_on_device_t,
          args=("stationary_mx_dtype=float8_e4m3fn_x4", "moving_mx_dtype=float8_e4m3fn_x4"),
          ints=(0, 1), ranges=MX_RANGES[:2], rtol=1e-2, atol=1e-2),
    Entry("tut_mx_copy_strided_quantize", "tutorials", MX, "kernel_copy_strided_quantize_matmul_mx",
          ("bf16[512,128]", "bf16[512,512]"), mx_matmul_t, args=("mx_dtype=float8_e4m3fn_x4",),
          rtol=1e-2, atol=1e-2),
]
