"""Nearest-neighbour upsampling of a [C, H, W] tensor by integer factors (NKI 2.x API).

out[c, y, x] = in[c, y // scale_h, x // scale_w], as torch.nn.Upsample(mode="nearest")
computes it for integer scale factors.  Channels map to partitions.  The input plane is
loaded once; each of the scale_h * scale_w phases of the output is one strided
nisa.tensor_copy into the output tile (a step slice on both free axes), then one
nisa.dma_copy writes the whole upsampled plane.

Shows: nisa.dma_copy HBM<->SBUF, nisa.tensor_copy(dst=, src=) into step-sliced views,
scalar parameters of the kernel (scale_h, scale_w).
"""

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def resize_nearest(in_tensor, scale_h=2, scale_w=2):
    """[C, H, W] -> [C, H * scale_h, W * scale_w]; C <= 128."""
    c, h, w = in_tensor.shape
    oh, ow = h * scale_h, w * scale_w
    out_tensor = nl.ndarray((c, oh, ow), dtype=in_tensor.dtype, buffer=nl.shared_hbm)

    in_tile = nl.ndarray((c, h, w), dtype=in_tensor.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=in_tile, src=in_tensor)

    out_tile = nl.ndarray((c, oh, ow), dtype=in_tensor.dtype, buffer=nl.sbuf)
    # output row dy + scale_h * y (column dx + scale_w * x) repeats input row y (column x)
    for dy in nl.static_range(scale_h):
        for dx in nl.static_range(scale_w):
            nisa.tensor_copy(dst=out_tile[:, dy::scale_h, dx::scale_w], src=in_tile)

    nisa.dma_copy(dst=out_tensor, src=out_tile)
    return out_tensor
