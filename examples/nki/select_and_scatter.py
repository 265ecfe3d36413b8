"""Max-pool backward: the gradient of each window goes to its argmax (NKI 1.x API).

The select-and-scatter of XLA / PyTorch's max_pool2d backward for pool x pool windows
with stride pool on [C, H, W]: dx[c, y, x] = grad[c, y // pool, x // pool] where
(y, x) is the first position, in row-major order inside its window, that holds the
window's maximum, and 0 elsewhere.

The window maxima come from one nl.max over the two trailing axes of a 5D nl.mgrid
view (as in avgpool).  Each of the pool * pool window positions is then one step-sliced
[C, H / pool, W / pool] view of the input: nl.equal against the maxima marks where it
is a maximum, a running "not yet taken" tile keeps only the first maximum of each
window (ties go to the first, as PyTorch's argmax does), and nl.where selects the
gradient there and zero elsewhere, written into the same strided view of the output.

Shows: 5D nl.mgrid views, nl.max(axis=[3, 4]), nl.equal (a float 1.0 / 0.0 tile), nl.where on it,
nl.zeros / nl.ones tiles, assignment into step-sliced tile views, nl.static_range.
"""

import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def max_pool_backward(in_tensor, grad_tensor, pool_size=2):
    """dx of max_pool2d(in_tensor, pool_size) given grad_tensor = dL/dout; C <= 128."""
    sz_c, sz_h, sz_w = in_tensor.shape
    sz_oh, sz_ow = sz_h // pool_size, sz_w // pool_size
    assert grad_tensor.shape == (sz_c, sz_oh, sz_ow), grad_tensor.shape
    dx_tensor = nl.ndarray((sz_c, sz_h, sz_w), dtype=in_tensor.dtype, buffer=nl.shared_hbm)

    x_tile = nl.load(in_tensor)
    g_tile = nl.load(grad_tensor)

    # window maxima: the [C, OH, OW, pool, pool] view of the plane, reduced over the window
    i0, i1, i2, i3, i4 = nl.mgrid[0:sz_c, 0:sz_oh, 0:sz_ow, 0:pool_size, 0:pool_size]
    win_max = nl.max(x_tile[i0, pool_size * i1 + i3, pool_size * i2 + i4], axis=[3, 4])

    zero = nl.zeros((sz_c, sz_oh, sz_ow), dtype=nl.float32, buffer=nl.sbuf)
    free = nl.ones((sz_c, sz_oh, sz_ow), dtype=nl.float32, buffer=nl.sbuf)  # 1 until a window's max is taken
    dx_tile = nl.ndarray((sz_c, sz_h, sz_w), dtype=in_tensor.dtype, buffer=nl.sbuf)
    for dy in nl.static_range(pool_size):
        for dx in nl.static_range(pool_size):
            at_max = nl.equal(x_tile[:, dy::pool_size, dx::pool_size], win_max)
            take = nl.multiply(at_max, free)
            free = nl.subtract(free, take)
            dx_tile[:, dy::pool_size, dx::pool_size] = nl.where(take, g_tile, zero)

    nl.store(dx_tensor, value=dx_tile)
    return dx_tensor
