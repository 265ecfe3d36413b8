"""aws-neuron/nki-samples reference kernels (src/nki_samples/reference). Upstream removed them in c4b806e
("Remove reference kernels from NKI Samples"); the bench reads them at its parent, 8370e11, which the harness
takes from the user's clone (``OWNER+NAME@REV`` paths; see harness.locate)."""

from __future__ import annotations

import numpy as np

from .entry import Entry
from .refs import bf16, fp8_e4m3, fp8_e4m3_value

R = "aws-neuron+nki-samples@8370e11/src/nki_samples/reference"


def softmax_rows(s):
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return p / p.sum(axis=-1, keepdims=True)


def masked_add(x, a):
    """a + b where the flat offset (j, i, p, f) is below n_elements; NaN (never written) beyond."""
    out = x[0] + x[1]
    flat = out.reshape(-1).copy()
    flat[int(a["n_elements"]):] = np.nan
    return [flat.reshape(out.shape)]


def flash_fwd(x, a):
    """q, k [b, h, d, s]; v [b, h, s, d]; causal softmax(q.T k / sqrt(d)) v; lse[b, h, p, t] is row t*128+p's
    log-sum-exp of the scaled, masked scores."""
    q, k, v = (np.asarray(t, np.float64) for t in x[:3])
    d, s = q.shape[2], q.shape[3]
    sc = np.einsum("bhdq,bhdk->bhqk", q, k) / np.sqrt(d)
    sc = np.where(np.tril(np.ones((s, k.shape[3]), bool)), sc, -np.inf)
    m = sc.max(axis=-1, keepdims=True)
    lse = (m + np.log(np.exp(sc - m).sum(axis=-1, keepdims=True)))[..., 0]
    o = np.einsum("bhqk,bhkd->bhqd", np.exp(sc - lse[..., None]), v)
    b, h = q.shape[:2]
    return [o, lse.reshape(b, h, s // 128, 128).transpose(0, 1, 3, 2)]


def flash_bwd(x, a):
    """dq, dk, dv of non-causal attention with P = exp(q.T k / sqrt(d) - lse) recomputed from the given lse,
    D = rowsum(dy * o); all tensors [b, h, d, s] but lse [b, h, 128, s // 128]."""
    q, k, v, o, dy = (np.asarray(t, np.float64) for t in x[:5])
    lse = np.asarray(x[5], np.float64)
    b, h, d, s = q.shape
    scale = 1.0 / np.sqrt(d)
    rows = lse.transpose(0, 1, 3, 2).reshape(b, h, s)
    p = np.exp(np.einsum("bhdq,bhdk->bhqk", q, k) * scale - rows[..., None])
    big_d = (dy * o).sum(axis=2)                                   # [b, h, q]
    dp = np.einsum("bhdq,bhdk->bhqk", dy, v)
    ds = p * (dp - big_d[..., None])
    dq = scale * np.einsum("bhdk,bhqk->bhdq", k, ds)
    dk = scale * np.einsum("bhdq,bhqk->bhdk", q, ds)
    dv = np.einsum("bhdq,bhqk->bhdk", dy, p)
    return [dq, dk, dv]


def sd_attention(x, a):
    """q [b, d, s], k, v [b, s, d]: softmax(0.125 q.T k.T) v, [b, s, d]."""
    q, k, v = (np.asarray(t, np.float64) for t in x)
    return [softmax_rows(np.einsum("bdq,bkd->bqk", q * 0.125, k)) @ v]


def allocated_sd_attention(x, a):
    """q, k [b, d, s], v [b, s, d]: (softmax(0.125 q.T k) v).T, [b, d, s]."""
    q, k, v = (np.asarray(t, np.float64) for t in x)
    return [(softmax_rows(np.einsum("bdq,bdk->bqk", q * 0.125, k)) @ v).transpose(0, 2, 1)]


def rmsnorm_qkv(x, a):
    h, w = (np.asarray(t, np.float64) for t in x)
    norm = h / np.sqrt(np.mean(h * h, axis=-1, keepdims=True) + 1e-6)
    return [norm @ w]


def double_row_matmul(x, a):
    """lhs [M, K] quantized per row as the kernel does (scale = bf16(max |row| / 240); codes: nl.divide's bf16
    tile lhs / scale, then copied into the fp8 tile: rounded twice), times rhs (rhs_quantized [K/2, 2N] holds row-tile pairs side by side), dequantized by the lhs scale and then
    element by element by rhs_scale [M, N] (the kernel multiplies by the whole tile, which the docstring calls
    a broadcast [1, N]; the bench's scale differs per row, so the reference follows the kernel)."""
    lhs, rq, scale = (np.asarray(t, np.float64) for t in x)
    k2, n2 = rq.shape
    n = n2 // 2
    rhs = np.zeros((2 * k2, n))
    for kt in range(k2 // 128):
        for nt in range(n // 512):
            blk = rq[kt * 128:(kt + 1) * 128, nt * 1024:(nt + 1) * 1024]
            rhs[2 * kt * 128:(2 * kt + 1) * 128, nt * 512:(nt + 1) * 512] = blk[:, :512]
            rhs[(2 * kt + 1) * 128:(2 * kt + 2) * 128, nt * 512:(nt + 1) * 512] = blk[:, 512:]
    lhs_scale = bf16(bf16(np.abs(lhs).max(axis=1, keepdims=True)) / 240.0).astype(np.float64)
    codes = fp8_e4m3(bf16(lhs / lhs_scale))
    # the partial sums and the dequantized tiles are bf16 tiles (lhs.dtype)
    return [bf16(bf16(bf16(codes @ rhs) * lhs_scale) * scale)]


def rmsnorm_quant(x, a):
    """RMS-normalized rows (bf16 tiles: x * 1/rms * gamma rounded to bf16) quantized to float8_e4m3 by
    240 / max |row| (the product a bf16 tile first, then copied into the fp8 one); each row's float32
    dequantization scale (max |row| / 240, at least 1e-6) follows as four fp8 codes, its little-endian bytes."""
    h, g = (np.asarray(t, np.float32) for t in x)
    rows = h.reshape(-1, h.shape[-1])
    eps = np.float32(bf16(np.float32(1e-6)))  # the kernel's eps bias column is a bf16 memset
    # activation_reduce sums the squares it computes (float32, in the engine's reduce registers), not their
    # bf16 copies in its result tile
    squares = (rows * rows).astype(np.float32).astype(np.float64)
    mean_sq = squares.sum(axis=1, keepdims=True).astype(np.float32) * np.float32(1 / 512)
    inv_rms = (np.float32(1) / np.sqrt(mean_sq + eps)).astype(np.float32)
    y = bf16((rows * inv_rms).astype(np.float32) * g[None, :])
    amax = np.abs(y).max(axis=1, keepdims=True)
    scale = np.maximum((amax * np.float32(1 / 240)).astype(np.float32), np.float32(1e-6)).astype(np.float32)
    quant = fp8_e4m3(bf16((y * (np.float32(1) / scale)).astype(np.float32)))
    scale_bytes = fp8_e4m3_value(np.ascontiguousarray(scale).view(np.uint8))
    return [np.concatenate([quant, scale_bytes], axis=1).reshape(*h.shape[:-1], -1)]


def select_and_scatter(x, a):
    """3x3 windows, stride 2, padding 1 over each (n, c) plane: source[i, j] is added at the window's maximum."""
    op, src = x
    n, c, h, w = op.shape
    pad = np.full((n, c, h + 2, w + 2), -np.inf)
    pad[:, :, 1:h + 1, 1:w + 1] = op
    out = np.zeros((n, c, h + 2, w + 2))
    for i in range(src.shape[2]):
        for j in range(src.shape[3]):
            win = pad[:, :, 2 * i:2 * i + 3, 2 * j:2 * j + 3].reshape(n, c, 9)
            at = win.argmax(axis=-1)
            for ni in range(n):
                for ci in range(c):
                    di, dj = divmod(int(at[ni, ci]), 3)
                    out[ni, ci, 2 * i + di, 2 * j + dj] += src[ni, ci, i, j]
    return [out[:, :, 1:h + 1, 1:w + 1]]


def resize_nearest(x, a):
    data = x[0]
    _, ih, iw, _ = data.shape
    _, oh, ow, _ = (int(v) for v in a["out_shape"].split(","))
    hi = np.floor(np.arange(oh, dtype=np.float32) * np.float32(ih / oh)).astype(int)
    wi = np.floor(np.arange(ow, dtype=np.float32) * np.float32(iw / ow)).astype(int)
    return [data[:, hi][:, :, wi]]


def adaptive_avg_pool(x, a):
    inp = x[0]
    n, c, h, w = inp.shape
    oh, ow = (int(v) for v in a["output_size"].split(","))
    out = np.zeros((n, c, oh, ow))
    for i in range(oh):
        h0, h1 = i * h // oh, -(-(i + 1) * h // oh)
        for j in range(ow):
            w0, w1 = j * w // ow, -(-(j + 1) * w // ow)
            out[:, :, i, j] = inp[:, :, h0:h1, w0:w1].mean(axis=(2, 3))
    return [out]


BF16_TOL = {"rtol": 2e-2, "atol": 2e-2}

ENTRIES = [
    Entry("ref_add_kernel_nx8x128x512", "reference", f"{R}/tutorial.py", "add_kernel_nx8x128x512",
          ("f32[1,8,128,512]", "f32[1,8,128,512]"), masked_add, args=("n_elements=524000",), grid="1",
          partial=False),
    Entry("ref_flash_fwd", "reference", f"{R}/attention.py", "flash_fwd",
          ("bf16[1,1,64,2048]", "bf16[1,1,64,2048]", "bf16[1,1,2048,64]"), flash_fwd, args=("seed=None",),
          grid="1,1", **BF16_TOL),
    Entry("ref_flash_attn_bwd", "reference", f"{R}/attention.py", "flash_attn_bwd",
          ("f32[1,1,64,512]",) * 5 + ("f32[1,1,128,4]",), flash_bwd, args=("seed_ref=None",), grid="1,1",
          rtol=1e-3, atol=1e-3),
    Entry("ref_fused_self_attn_sd", "reference", f"{R}/attention.py", "fused_self_attn_for_SD_small_head_size",
          ("f32[1,128,1024]", "f32[1,1024,128]", "f32[1,1024,128]"), sd_attention, grid="1", **BF16_TOL),
    Entry("ref_allocated_self_attn_sd", "reference", f"{R}/allocated_attention.py",
          "allocated_fused_self_attn_for_SD_small_head_size",
          ("f32[1,128,1024]", "f32[1,128,1024]", "f32[1,1024,128]"), allocated_sd_attention, grid="1", **BF16_TOL),
    Entry("ref_allocated_rmsnorm_qkv", "reference", f"{R}/allocated_fused_linear.py", "allocated_fused_rms_norm_qkv",
          ("bf16[1,256,512]", "bf16[512,512]"), rmsnorm_qkv, ranges=((0, 1), (0, 1)), **BF16_TOL),
    Entry("ref_double_row_matmul", "reference", f"{R}/double_row_matmul.py", "quantized_double_row_matmul",
          ("bf16[128,256]", "fp8_e4m3[128,1024]", "bf16[128,512]"), double_row_matmul,
          args=("TILES_IN_BLOCK_M=1", "TILES_IN_BLOCK_N=1", "TILES_IN_BLOCK_K=2"),
          ranges=((-1, 1), (-8, 8), (0.01, 0.1)), ints=(1,), rtol=2e-2, atol=1e-2,
          note="lhs is quantized to float8_e4m3 on the device, as the reference does; bf16 intermediates"),
    Entry("ref_select_and_scatter", "reference", f"{R}/vision.py", "select_and_scatter_kernel",
          ("f32[2,64,8,8]", "f32[2,64,4,4]"), select_and_scatter),
    Entry("ref_resize_nearest", "reference", f"{R}/vision.py", "resize_nearest_fixed_dma_kernel",
          ("f32[1,6,5,8]",), resize_nearest, args=("out_shape=1,11,9,8",), grid="1"),
    Entry("ref_adaptive_avg_pool2d", "reference", f"{R}/vision.py", "adaptive_avg_pool2d_kernel",
          ("f32[2,8,10,10]",), adaptive_avg_pool, args=("output_size=4,3",)),
    Entry("ref_rmsnorm_quant", "reference", f"{R}/rmsnorm_quant/rmsnorm_quant.py", "rmsnorm_quant_kernel",
          ("bf16[1,128,512]", "bf16[512]"), rmsnorm_quant,
          args=("kargs=RmsNormQuantKernelArgs(lower_bound=0.0)",), rtol=0.13, atol=1e-3,
          note="its third parameter is a dataclass of the kernel's module; fp8 output with packed fp32 scales "
               "(a float32 [P, 1] tile viewed as float8 [P, 4]); tolerance: one e4m3 step, as a row sum of squares in "
               "another order can move a tie (the scale bytes must then differ too, and do not, at this seed)"),
]
