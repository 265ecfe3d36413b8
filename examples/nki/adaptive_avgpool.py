"""Adaptive average pooling [C, H, W] -> [C, OH, OW] (NKI 2.x API).

As torch.nn.AdaptiveAvgPool2d defines it: output row i averages input rows
floor(i * H / OH) up to ceil((i + 1) * H / OH) (exclusive), and the same for columns,
so windows may differ in size and overlap when OH does not divide H.  The windows are
computed in Python from the sizes, so every slice is static.

The mean over a window is separable: one nisa.tensor_reduce per output column sums
its column window over the trailing axis ([C, H, w] -> [C, H, 1]) and a tensor_scalar
divides by its width; then one tensor_reduce per output row sums its row window over
the middle axis ([C, h, OW] -> [C, 1, OW]) and divides by its height.  That is OH + OW
reductions instead of OH * OW.

Shows: nisa.dma_copy, nisa.tensor_reduce(dst=, op=nl.add, axis=, keepdims=True) over a
trailing and over a non-trailing free axis, nisa.tensor_scalar(dst=, ...) on slices,
window bounds from Python arithmetic, a tuple kernel argument (output_size).
"""

import math

import nki
import nki.isa as nisa
import nki.language as nl


def adaptive_windows(size_in, size_out):
    """[(start, end), ...] of each output index: PyTorch's floor(i*n/m) .. ceil((i+1)*n/m)."""
    return [(i * size_in // size_out, math.ceil((i + 1) * size_in / size_out)) for i in range(size_out)]


@nki.jit
def adaptive_avgpool(in_tensor, output_size=(5, 7)):
    """[C, H, W] -> [C, OH, OW], output_size = (OH, OW); C <= 128."""
    c, h, w = in_tensor.shape
    oh, ow = output_size
    out_tensor = nl.ndarray((c, oh, ow), dtype=in_tensor.dtype, buffer=nl.shared_hbm)

    x_tile = nl.ndarray((c, h, w), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=x_tile, src=in_tensor)

    # pass 1: the mean of each column window, for every input row
    col_mean = nl.ndarray((c, h, ow), dtype=nl.float32, buffer=nl.sbuf)
    for j, (w0, w1) in enumerate(adaptive_windows(w, ow)):
        dst = col_mean[:, :, j:j + 1]
        nisa.tensor_reduce(dst=dst, op=nl.add, data=x_tile[:, :, w0:w1], axis=2, keepdims=True)
        nisa.tensor_scalar(dst=dst, data=dst, op0=nl.multiply, operand0=1.0 / (w1 - w0))

    # pass 2: the mean of each row window of those
    out_tile = nl.ndarray((c, oh, ow), dtype=nl.float32, buffer=nl.sbuf)
    for i, (h0, h1) in enumerate(adaptive_windows(h, oh)):
        dst = out_tile[:, i:i + 1, :]
        nisa.tensor_reduce(dst=dst, op=nl.add, data=col_mean[:, h0:h1, :], axis=1, keepdims=True)
        nisa.tensor_scalar(dst=dst, data=dst, op0=nl.multiply, operand0=1.0 / (h1 - h0))

    nisa.dma_copy(dst=out_tensor, src=out_tile)
    return out_tensor
