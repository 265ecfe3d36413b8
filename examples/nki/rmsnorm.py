"""RMSNorm over the rows of a [rows, N] tensor (the NKI "RMSNorm" tutorial).

out = a / sqrt(mean(a * a, over the row)) * g.  Rows go to partitions, 128
at a time; the row count need not be a multiple of 128: the last tile's
load, scale and store are masked to the rows that exist.  The weight vector
is loaded once into one partition and broadcast to all 128.
"""

import math

import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def nki_rmsnorm_kernel(a_tensor, g_tensor):
    """out_tensor = a_tensor / RMS(a_tensor) * g_tensor, RMS over axis 1; a_tensor [rows, N], g_tensor [N]."""
    out_tensor = nl.ndarray(a_tensor.shape, dtype=a_tensor.dtype, buffer=nl.shared_hbm)
    assert a_tensor.shape[1] == g_tensor.shape[0]

    ix = nl.arange(128)[:, None]
    iw = nl.arange(1)[:, None]
    iy = nl.arange(a_tensor.shape[1])[None, :]
    num_rows = a_tensor.shape[0]

    # the weight, loaded once as a [1, N] tile and reused by every row tile
    g_tile = nl.load(g_tensor.reshape((1, g_tensor.shape[0]))[iw, iy])

    for i in nl.affine_range(math.ceil(a_tensor.shape[0] / 128)):
        a_tile = nl.load(a_tensor[i * 128 + ix, iy], mask=(i * 128 + ix < num_rows))

        in_square = nl.square(a_tile)
        square_sum = nl.sum(in_square, axis=[1], keepdims=True)
        mean = square_sum / a_tensor.shape[1]

        # 1 / sqrt(mean) as one instruction
        rms_reciprocal = nl.rsqrt(mean)

        # [128, 1] column broadcast along the free axis
        out_tile = nl.multiply(a_tile, rms_reciprocal)

        g_bcast = g_tile.broadcast_to((128, g_tensor.shape[0]))
        out_tile[...] = nl.multiply(out_tile, g_bcast, mask=(i * 128 + ix < num_rows))

        nl.store(out_tensor[i * 128 + ix, iy], value=out_tile, mask=(i * 128 + ix < num_rows))

    return out_tensor
