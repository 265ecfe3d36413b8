"""Element-wise addition as an SPMD kernel (the NKI "SPMD tensor addition" tutorial).

The kernel body handles one [128, 512] tile; the launch grid supplies one
program per tile and nl.program_id(axis) says which.  Launch it as
``nki_tensor_add_kernel_[M // 128, N // 512](a, b)`` (nki_tensor_add below).
"""

import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def nki_tensor_add_kernel_(a_input, b_input):
    """c_output = a_input + b_input for the tile (program_id(0), program_id(1)) of a 2D launch grid."""
    c_output = nl.ndarray(a_input.shape, dtype=a_input.dtype, buffer=nl.shared_hbm)
    assert a_input.shape[0] == 128 * nl.num_programs(0) and a_input.shape[1] == 512 * nl.num_programs(1)

    # this program's tile
    offset_i_x = nl.program_id(0) * 128
    offset_i_y = nl.program_id(1) * 512

    ix = offset_i_x + nl.arange(128)[:, None]
    iy = offset_i_y + nl.arange(512)[None, :]

    a_tile = nl.load(a_input[ix, iy])
    b_tile = nl.load(b_input[ix, iy])
    c_tile = a_tile + b_tile
    nl.store(c_output[ix, iy], value=c_tile)

    return c_output


def nki_tensor_add(a_input, b_input):
    """The launcher: one program per [128, 512] tile of the inputs."""
    grid_x = a_input.shape[0] // 128
    grid_y = a_input.shape[1] // 512
    return nki_tensor_add_kernel_[grid_x, grid_y](a_input, b_input)
