"""y = exp(x) over a [M, N] tensor: one load, one activation (ScalarE), one store per [128, 512] tile.

Tiles are addressed with Python slices whose bounds are affine in the loop
index, the form the NKI programming-model guide uses next to arange indices.
"""

import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def nki_tensor_exp(in_tensor):
    """out_tensor = exp(in_tensor); in_tensor is [M, 512] with M a multiple of 128."""
    out_tensor = nl.ndarray(in_tensor.shape, dtype=in_tensor.dtype, buffer=nl.shared_hbm)
    tile_p = nl.tile_size.pmax  # 128
    width = in_tensor.shape[1]

    for i in nl.affine_range(in_tensor.shape[0] // tile_p):
        x_tile = nl.load(in_tensor[i * tile_p:(i + 1) * tile_p, 0:width])
        y_tile = nl.exp(x_tile)
        nl.store(out_tensor[i * tile_p:(i + 1) * tile_p, 0:width], value=y_tile)

    return out_tensor
