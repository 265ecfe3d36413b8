"""aws-neuron/nki-library kernels (src/nkilib_src/nkilib; a package: traced as its package's module).

Each reference is numpy written for this bench from the kernel's documented math (its docstring)."""

from __future__ import annotations

import numpy as np

from .entry import Entry

L = "aws-neuron+nki-library/src/nkilib_src/nkilib"
G = "library"
BF16_MM = "the kernel documents float32 softmax and bfloat16 for its other operations: bf16 tolerance"


def e(name, file, fn, inputs, ref, **kw) -> Entry:
    return Entry(name, G, f"{L}/{file}", fn, tuple(inputs), ref, **kw)


def _rope(x, a):
    x_in, cos, sin = x
    half = x_in.shape[0] // 2
    c, s = cos[:, :, None, :], sin[:, :, None, :]
    if a.get("contiguous_layout", "true") == "false":
        ev, od = x_in[0::2], x_in[1::2]
        out = np.empty_like(x_in)
        out[0::2], out[1::2] = ev * c - od * s, ev * s + od * c
        return [out]
    x1, x2 = x_in[:half], x_in[half:]
    return [np.concatenate([x1 * c - x2 * s, x1 * s + x2 * c])]


def _rotate_half(t):
    h = t.shape[-1] // 2
    return np.concatenate([-t[..., h:], t[..., :h]], axis=-1)


def _rope_hf(x, a):
    q, k, _, _, cos, sin = x
    return [q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin]


def _cascaded_max(x, a):
    v = x[0]
    return [v.max(-1, keepdims=True), v.argmax(-1)[..., None].astype(np.float32)]


def _nonzero(x, a):
    t = x[0]
    T, C = t.shape
    idx = np.full((C, T), -1.0, np.float32)
    counts = np.zeros(C, np.float32)
    for c in range(C):
        nz = np.flatnonzero(t[:, c])
        idx[c, : nz.size] = nz
        counts[c] = nz.size
    return [idx, counts]


def _nonzero_count(x, a):
    row = x[0][0]
    nz = np.flatnonzero(row)
    out = np.full(row.size + 1, -1.0, np.float32)
    out[: nz.size] = nz
    out[-1] = nz.size
    return [out[None]]


def _indexed_flatten(x, a, *_):
    """What the kernel computes at LNC 2: each core writes its rows (the first ceil(E/2) on core 0) into a
    private buffer, a later row over an earlier one, and the two buffers are combined by an all-reduce
    max (sendrecv): where rows of both cores overlap, the larger value wins, not the later row its
    pseudocode names."""
    inp, offsets = x
    f_len, out_len = int(a["f_len"]), int(a["output_len"])
    per_row = inp.reshape(inp.shape[0], -1, f_len)
    first = -(-inp.shape[0] // 2)  # two cores
    partials = []
    for rows in (range(0, first), range(first, inp.shape[0])):
        blocks = np.full((out_len // f_len, f_len), float(a.get("padding_val", -1)), np.float32)
        for r in rows:
            for p in range(per_row.shape[1]):
                b = int(offsets[r]) + p
                if b < blocks.shape[0]:
                    blocks[b] = per_row[r, p]
        partials.append(blocks)
    return [np.maximum(*partials).reshape(-1)]


def _dyn_add(x, a):
    out = np.full(x[0].shape, np.nan, np.float32)
    rows = int(x[2].reshape(-1)[0]) * 128
    out[:rows] = x[0][:rows] + x[1][:rows]
    return [out]


def _lse(logits):
    m = logits.max(-1, keepdims=True)
    return (m + np.log(np.exp(logits - m).sum(-1, keepdims=True)))[:, 0]


def _xent_fwd(x, a):
    logits, targets = x[0].astype(np.float64), x[1].astype(np.int64)
    lse = _lse(logits)
    return [lse - logits[np.arange(logits.shape[0]), targets], lse]


def _xent_bwd(x, a):
    logits, targets, lse = x[0].astype(np.float64), x[1].astype(np.int64), x[2].astype(np.float64)
    grad = np.exp(logits - lse[:, None])
    grad[np.arange(logits.shape[0]), targets] -= 1.0
    scale = 1.0 / logits.shape[0] if a.get("reduction", "mean") == "mean" else 1.0
    return [grad * scale]


def _depthwise(x, a):
    img, filt = x
    S = filt.shape[-1]
    Q = img.shape[-1] - S + 1
    out = np.zeros(img.shape[:-1] + (Q,), np.float64)
    for s in range(S):
        out += img[..., s:s + Q] * filt[None, :, 0, 0, s][..., None, None]
    return [out]


def _conv1d(x, a):
    xin, filt = x
    K = filt.shape[0]
    L_out = xin.shape[-1] - K + 1
    out = np.zeros((xin.shape[0], filt.shape[2], L_out), np.float64)
    for k in range(K):
        out += np.einsum("bcl,co->bol", xin[:, :, k:k + L_out], filt[k])
    return [out]


def _attention(x, a):
    q, k, v = (t.astype(np.float64) for t in x)
    s = np.einsum("bqd,bdk->bqk", q, k) * float(a.get("scale", 1.0))
    if a.get("causal_mask", "true") != "false":
        s = np.where(np.tril(np.ones(s.shape[1:], bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return [np.einsum("bqk,bkd->bqd", p, v)]


def _out_proj_tkg(x, a):
    att, w = x
    D, B, N, S = att.shape
    return [np.einsum("dbns,ndh->bsh", att, w.reshape(N, D, -1))]


def _attention_bwd(x, a):
    """The flash-attention backward with the given forward output and log-sum-exp (layout [d, seq])."""
    q, k, v, o, dy, lse = (t.astype(np.float64)[0, 0] for t in x)
    scale = 1.0 / np.sqrt(q.shape[0])
    p = np.exp(scale * q.T @ k - lse.reshape(-1)[:, None])   # [sq, sk]; seq_q == the lse tile: lse[q, 0]
    dv = dy @ p                                               # [d, sk]
    dp = dy.T @ v                                             # [sq, sk]
    ds = p * (dp - (dy * o).sum(0)[:, None])
    dq, dk = scale * k @ ds.T, scale * q @ ds
    return [t[None, None] for t in (dq, dk, dv)]


def _mlp(x, a):
    h, g, u, d = (t.astype(np.float64) for t in x)
    gate = h @ g
    return [(gate / (1 + np.exp(-gate)) * (h @ u)) @ d]


ENTRIES = [
    e("lib_cumsum", "core/cumsum/cumsum.py", "cumsum", ["f32[128,512]"],
      lambda x, a: [np.cumsum(x[0].astype(np.float64), -1)], atol=1e-3),
    e("lib_cumsum_3d", "core/cumsum/cumsum.py", "cumsum", ["f32[4,3,256]"],
      lambda x, a: [np.cumsum(x[0].astype(np.float64), -1)], atol=1e-3),
    e("lib_rope", "core/embeddings/rope.py", "RoPE", ["f32[64,1,2,128]", "f32[32,1,128]", "f32[32,1,128]"], _rope),
    e("lib_rope_interleaved", "core/embeddings/rope.py", "RoPE", ["f32[64,1,2,128]", "f32[32,1,128]", "f32[32,1,128]"],
      _rope, args=("contiguous_layout=false",)),
    e("lib_rope_hf", "core/embeddings/rope_hf.py", "rope_hf",
      ["f32[1,2,128,64]", "f32[1,1,128,64]", "f32[1,2,128,64]", "f32[1,1,128,64]", "f32[128,64]", "f32[128,64]"],
      _rope_hf),
    e("lib_cascaded_max", "core/max/cascaded_max.py", "cascaded_max", ["f32[1,4,1024]"], _cascaded_max),
    e("lib_find_nonzero_indices", "core/subkernels/find_nonzero_indices.py", "find_nonzero_indices",
      ["f32[128,8]"], _nonzero, ranges=((0, 2),), ints=(0,), grid="2", options={"strict": False},
      note="its transposing matmul reads partitions nothing wrote (only into rows GpSimd ignores): run from "
      "random memory, not strict"),
    e("lib_find_nonzero_indices_with_count", "experimental/benchmark/find_nonzero_indices_with_count.py",
      "find_nonzero_indices_with_count", ["f32[1,256]"], _nonzero_count, ranges=((0, 2),), ints=(0,)),
    e("lib_indexed_flatten", "core/subkernels/indexed_flatten.py", "indexed_flatten", ["f32[4,512]", "i32[4]"],
      _indexed_flatten, args=("f_len=16", "output_len=1024"), ranges=((-1, 1), (0, 33)), ints=(1,), grid="2",
      note="LNC 2: each core's rows into a private buffer, then an all-reduce max through nisa.sendrecv"),
    e("lib_dynamic_elementwise_add", "experimental/dynamic_shapes/dynamic_elementwise_add.py",
      "dynamic_elementwise_add", ["bf16[256,512]", "bf16[256,512]", "i32[1,1]"], _dyn_add,
      ranges=((-1, 1), (-1, 1), (1, 3)), ints=(2,), partial=True, rtol=1e-2, atol=1e-2,
      note="rows past num_m_tiles * 128 are left unwritten, by design"),
    e("lib_cross_entropy_forward", "experimental/loss/cross_entropy.py", "cross_entropy_forward",
      ["f32[64,2048]", "i32[64]"], _xent_fwd, args=("positions_per_batch=32", "chunk_size=2048", "dtype=float32"),
      ranges=((-4, 4), (0, 2048)), ints=(1,), atol=1e-3, rtol=1e-3),
    e("lib_cross_entropy_backward", "experimental/loss/cross_entropy.py", "cross_entropy_backward",
      ["f32[64,2048]", "i32[64]", "f32[64]"], _xent_bwd,
      args=("reduction=mean", "positions_per_batch=32", "chunk_size=2048", "dtype=float32", "inplace=false"),
      ranges=((-4, 4), (0, 2048), (8, 9)), ints=(1,), atol=1e-5, rtol=1e-3),
    e("lib_depthwise_conv1d", "experimental/conv/depthwise_conv1d.py", "depthwise_conv1d_implicit_gemm",
      ["f32[1,4,1,64]", "f32[4,1,1,3]"], _depthwise, args=("feature_group_count=4",), grid="2", atol=1e-3),
    e("lib_conv1d", "experimental/conv/conv1d.py", "conv1d", ["f32[1,64,128]", "f32[3,64,32]"], _conv1d,
      atol=1e-3),
    e("lib_attention_cte", "core/attention/attention_cte.py", "attention_cte",
      ["f32[1,128,64]", "f32[1,64,128]", "f32[1,128,64]"], _attention, atol=1e-2, rtol=1e-2, note=BF16_MM),
    e("lib_attention_cte_noncausal", "core/attention/attention_cte.py", "attention_cte",
      ["f32[1,128,64]", "f32[1,64,128]", "f32[1,128,64]"], _attention, args=("causal_mask=false",),
      atol=1e-2, rtol=1e-2, note=BF16_MM),
    e("lib_attention_bwd", "core/attention/attention_bwd.py", "attention_bwd",
      ["f32[1,1,64,128]", "f32[1,1,64,128]", "f32[1,1,64,128]", "f32[1,1,64,128]", "f32[1,1,64,128]",
       "f32[1,1,128,1]"], _attention_bwd, ranges=((-1, 1),) * 5 + ((2, 3),), atol=1e-3, rtol=1e-3),
    e("lib_output_projection_cte", "core/output_projection/output_projection_cte/output_projection_cte.py",
      "output_projection_cte", ["f32[1,2,64,128]", "f32[128,256]"],
      lambda x, a: [np.einsum("bnds,ndh->bsh", x[0], x[1].reshape(x[0].shape[1], x[0].shape[2], -1))], atol=1e-3),
    e("lib_output_projection_tkg", "core/output_projection/output_projection_tkg.py", "output_projection_tkg",
      ["f32[64,1,2,4]", "f32[128,256]"], _out_proj_tkg, atol=1e-3),
    e("lib_mlp", "core/mlp/mlp.py", "mlp", ["f32[1,128,256]", "f32[256,512]", "f32[256,512]", "f32[512,256]"],
      _mlp, atol=1e-3, rtol=1e-3, note="expected refusal: upstream mlp.py does not parse (a docstring closed early, line 203)"),
]
