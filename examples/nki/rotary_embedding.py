"""Rotary position embedding (RoPE, the rotate-halves form) in the NKI 2.x API.

With h = head_dim / 2, x1 = x[:, :h] and x2 = x[:, h:]:
    out[:, :h] = x1 * cos - x2 * sin
    out[:, h:] = x2 * cos + x1 * sin
cos and sin are [seq, h] tables given as inputs (one row per position).
Shows: `nisa.dma_copy` of 128-position row tiles, `nisa.tensor_tensor` reading and writing the two
free-axis halves of a tile.
"""

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def nki_rotary_embedding(x, cos, sin):
    """x [seq, head_dim], cos/sin [seq, head_dim // 2]; seq a multiple of 128."""
    seq, head_dim = x.shape
    half = head_dim // 2
    assert cos.shape == (seq, half) and sin.shape == (seq, half), "cos/sin must be [seq, head_dim // 2]"
    rows = nl.tile_size.pmax
    out = nl.ndarray((seq, head_dim), dtype=x.dtype, buffer=nl.shared_hbm)

    for s in nl.affine_range(seq // rows):
        x_t = nl.ndarray((rows, head_dim), dtype=nl.float32, buffer=nl.sbuf)
        c_t = nl.ndarray((rows, half), dtype=nl.float32, buffer=nl.sbuf)
        s_t = nl.ndarray((rows, half), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=x_t, src=x[s * rows:(s + 1) * rows, :])
        nisa.dma_copy(dst=c_t, src=cos[s * rows:(s + 1) * rows, :])
        nisa.dma_copy(dst=s_t, src=sin[s * rows:(s + 1) * rows, :])
        x1 = x_t[:, 0:half]
        x2 = x_t[:, half:head_dim]

        # the four products, then one subtraction and one addition into the two halves of the result
        x1c = nl.ndarray((rows, half), dtype=nl.float32, buffer=nl.sbuf)
        x2s = nl.ndarray((rows, half), dtype=nl.float32, buffer=nl.sbuf)
        x2c = nl.ndarray((rows, half), dtype=nl.float32, buffer=nl.sbuf)
        x1s = nl.ndarray((rows, half), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=x1c, data1=x1, data2=c_t, op=nl.multiply)
        nisa.tensor_tensor(dst=x2s, data1=x2, data2=s_t, op=nl.multiply)
        nisa.tensor_tensor(dst=x2c, data1=x2, data2=c_t, op=nl.multiply)
        nisa.tensor_tensor(dst=x1s, data1=x1, data2=s_t, op=nl.multiply)

        o_t = nl.ndarray((rows, head_dim), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=o_t[:, 0:half], data1=x1c, data2=x2s, op=nl.subtract)
        nisa.tensor_tensor(dst=o_t[:, half:head_dim], data1=x2c, data2=x1s, op=nl.add)
        nisa.dma_copy(dst=out[s * rows:(s + 1) * rows, :], src=o_t)

    return out
