"""Row softmax of a [rows, N] tensor (the NKI "softmax" sample): exp(x - max) / sum(exp(x - max)).

The row maximum is subtracted first for numerical stability; 128 rows at a
time, the last tile masked when rows is not a multiple of 128.
"""

import math

import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def nki_softmax_kernel(a_tensor):
    """out_tensor[r] = softmax(a_tensor[r]) along axis 1."""
    out_tensor = nl.ndarray(a_tensor.shape, dtype=a_tensor.dtype, buffer=nl.shared_hbm)

    ix = nl.arange(128)[:, None]
    iy = nl.arange(a_tensor.shape[1])[None, :]
    num_rows = a_tensor.shape[0]

    for i in nl.affine_range(math.ceil(a_tensor.shape[0] / 128)):
        a_tile = nl.load(a_tensor[i * 128 + ix, iy], mask=(i * 128 + ix < num_rows))

        max_vals = nl.max(a_tile, axis=[1], keepdims=True, mask=(i * 128 + ix < num_rows))
        shifted = nl.subtract(a_tile, max_vals, mask=(i * 128 + ix < num_rows))

        numerator = nl.exp(shifted)
        denominator = nl.sum(numerator, axis=[1], keepdims=True)
        sm = numerator / denominator

        nl.store(out_tensor[i * 128 + ix, iy], value=sm, mask=(i * 128 + ix < num_rows))

    return out_tensor
