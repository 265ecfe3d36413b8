"""2D average pooling of a [C, H, W] tensor (the NKI "AveragePool2D" tutorial).

Channels map to partitions; H and W stay in the free axes.  One 5D index
grid views the [H, W] plane as [H / pool, W / pool, pool, pool], the two
pool-window axes last (as the current tutorial places them), so nl.sum
reduces the two innermost axes at once.
"""

import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def tensor_avgpool_kernel(in_tensor, pool_size=2):
    """out_tensor[c, h, w] = mean of in_tensor[c, pool*h : pool*(h+1), pool*w : pool*(w+1)]; C <= 128."""
    sz_cin, sz_hin, sz_win = in_tensor.shape
    sz_hout = sz_hin // pool_size
    sz_wout = sz_win // pool_size
    out_tensor = nl.ndarray((sz_cin, sz_hout, sz_wout), dtype=in_tensor.dtype, buffer=nl.shared_hbm)

    sz_p = sz_cin
    sz_pool = pool_size

    # the output position (i1, i2) and, last, the position inside the pool window (i3, i4)
    i0, i1, i2, i3, i4 = nl.mgrid[0:sz_p, 0:sz_hout, 0:sz_wout, 0:sz_pool, 0:sz_pool]

    in_tile = nl.load(in_tensor)

    # the 5D view [C, H/pool, W/pool, pool, pool] of the 3D tile; reduce the window axes 3 and 4
    out_tile = nl.sum(in_tile[i0, sz_pool * i1 + i3, sz_pool * i2 + i4], axis=[3, 4]) / (pool_size * pool_size)

    nl.store(out_tensor, value=out_tile)
    return out_tensor
