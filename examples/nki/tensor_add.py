"""Element-wise addition of two [M, N] tensors, tile by tile (the NKI "tensor addition" getting-started kernel).

The partition axis of every tile is 128 rows (nl.tile_size.pmax) and its free
axis 512 columns; both loops are affine_range loops, so iterations are
independent and may be overlapped.
"""

import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def nki_tensor_add(a_input, b_input):
    """c_output = a_input + b_input; both inputs are [M, N] with M a multiple of 128 and N of 512."""
    c_output = nl.ndarray(a_input.shape, dtype=a_input.dtype, buffer=nl.shared_hbm)

    # index tiles: ix walks the partitions, iy the free axis
    ix = nl.arange(128)[:, None]
    iy = nl.arange(512)[None, :]

    for m in nl.affine_range(a_input.shape[0] // 128):
        for n in nl.affine_range(a_input.shape[1] // 512):
            # HBM -> SBUF
            a_tile = nl.load(a_input[m * 128 + ix, n * 512 + iy])
            b_tile = nl.load(b_input[m * 128 + ix, n * 512 + iy])

            c_tile = nl.add(a_tile, b_tile)

            # SBUF -> HBM
            nl.store(c_output[m * 128 + ix, n * 512 + iy], value=c_tile)

    return c_output
