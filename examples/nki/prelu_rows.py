"""A parametric ReLU with a slope per row, and each row's sum of squares, over a grid of row tiles (the NKI
0.7+ API: nl.tiles, nisa.activate2 with op=nl.prelu and relu_param, nisa.tensor_scalar_reduce with
op0=nl.square).

y[r, j] = x[r, j] if x[r, j] >= 0 else slope[r] * x[r, j];  out = y;  sumsq[r] = sum_j y[r, j] ** 2
"""

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def prelu_rows(x, slope):
    """x [R, W], R a multiple of 128 and W <= 512; slope [R, 1]."""
    rows, width = x.shape
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    sumsq = nl.ndarray((rows, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    # one grid per tensor: tile i of each is rows [128 i, 128 i + 128)
    x_tiles, out_tiles = nl.tiles(x, tile_shape=(128, width)), nl.tiles(out, tile_shape=(128, width))
    slope_tiles, sum_tiles = nl.tiles(slope, tile_shape=(128, 1)), nl.tiles(sumsq, tile_shape=(128, 1))
    for i in range(x_tiles.shape[0]):
        t = nl.ndarray((128, width), dtype=nl.float32, buffer=nl.sbuf)
        s = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x_tiles[i, 0].data)
        nisa.dma_copy(dst=s, src=slope_tiles[i, 0].data)
        # v = x * 1 + 0, then v or slope * v: the slope column scales each row's negative elements
        y = nl.ndarray((128, width), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activate2(dst=y, op=nl.prelu, data=t, imm0=1.0, imm1=0.0, op0=nl.multiply, op1=nl.add,
                       relu_param=s)
        squares = nl.ndarray((128, width), dtype=nl.float32, buffer=nl.sbuf)
        total = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar_reduce(dst=squares, data=y, op0=nl.square, operand0=0.0, reduce_op=nl.add,
                                  reduce_res=total)
        nisa.dma_copy(dst=out_tiles[i, 0].data, src=y)
        nisa.dma_copy(dst=sum_tiles[i, 0].data, src=total)
    return out, sumsq
