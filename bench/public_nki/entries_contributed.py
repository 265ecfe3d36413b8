"""aws-neuron/nki-samples contributed kernels (contributed/)."""

from __future__ import annotations

import numpy as np

from .entries_reference import softmax_rows
from .entries_tutorials import matmul_t
from .entry import Entry

C = "aws-neuron+nki-samples/contributed"


def upsample2x_matrix(n: int) -> np.ndarray:
    """[2n, n] linear interpolation weights of a 2x upsampling with align_corners=False (source coordinate
    (i + 0.5) / 2 - 0.5, clamped to the edges), as torch.nn.functional.interpolate computes it."""
    m = np.zeros((2 * n, n))
    for i in range(2 * n):
        src = max((i + 0.5) / 2 - 0.5, 0.0)
        lo = min(int(np.floor(src)), n - 1)
        hi = min(lo + 1, n - 1)
        w = src - lo
        m[i, lo] += 1 - w
        m[i, hi] += w
    return m


def bilinear2x(x, a):
    src = np.asarray(x[0], np.float64)
    mh, mw = upsample2x_matrix(src.shape[2]), upsample2x_matrix(src.shape[3])
    return [np.einsum("ih,nchw,jw->ncij", mh, src, mw)]


def trilinear2x(x, a):
    src = np.asarray(x[0], np.float64)
    md, mh, mw = (upsample2x_matrix(src.shape[i]) for i in (2, 3, 4))
    return [np.einsum("id,jh,kw,ncdhw->ncijk", md, mh, mw, src)]


def maxpool_stride1(x, a):
    k = int(a["pool_size"])
    src = x[0]
    h, w = src.shape[0] - k + 1, src.shape[1] - k + 1
    win = np.stack([src[i:i + h, j:j + w] for i in range(k) for j in range(k)])
    return [win.max(axis=0)]


def pipelined_attention(x, a):
    """q, k [b, d, s], v [b, s, d]: softmax(q.T k / sqrt(d)) v, [b, s_q, d]."""
    q, k, v = (np.asarray(t, np.float64) for t in x)
    return [softmax_rows(np.einsum("bdq,bdk->bqk", q, k) / np.sqrt(q.shape[1])) @ v]


ENTRIES = [
    Entry("contrib_interpolate_bilinear_2x", "contributed", f"{C}/interpolate_bilinear_fwd.py",
          "interpolate_bilinear_2x_fwd", ("f32[2,64,16,16]",), bilinear2x),
    Entry("contrib_interpolate_trilinear_2x", "contributed", f"{C}/interpolate_trilinear_fwd.py",
          "interpolate_trilinear_2x_fwd", ("f32[2,64,8,8,8]",), trilinear2x),
    Entry("contrib_matmul", "contributed", f"{C}/matmul.py", "matmul", ("f32[256,256]", "f32[256,512]"), matmul_t,
          args=("TILES_IN_BLOCK_K=2", "TILES_IN_BLOCK_M=2", "TILES_IN_BLOCK_N=1")),
    Entry("contrib_maxpooling_stride1", "contributed", f"{C}/maxpooling.py", "max_pooling_2d_stride_1",
          ("f32[130,40]",), maxpool_stride1, args=("pool_size=3",)),
    Entry("contrib_pipelined_flash_fwd", "contributed", f"{C}/pipelined_attention.py", "flash_fwd",
          ("bf16[1,128,8192]", "bf16[1,128,8192]", "bf16[1,8192,128]"), pipelined_attention,
          args=("use_causal_mask=False",), grid="1", rtol=2e-2, atol=2e-2,
          note="one 8192-row section is the smallest query length the kernel tiles, and it loads k by the query "
               "section (seqlen_k >= seqlen_q); the file's top level runs the kernel itself on 16K-long inputs "
               "numpy casts to nl.bfloat16 (a script, not a module: the trace stops its top level there)"),
]
