"""LayerNorm over the rows of a [rows, N] tensor (the NKI "LayerNorm" tutorial, the nki.isa version).

mean and variance come from nl.mean (var = mean(x^2) - mean(x)^2); the shift
and scale is one nisa.tensor_scalar instruction with two per-partition
operands ((x - mean) * rstd); gamma and beta are loaded once into one
partition and broadcast to the 128 partitions of a tile.
"""

import math

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import numpy as np


@nki.jit
def nki_layernorm_kernel_v2(input_tensor, gamma_vector, beta_vector, epsilon=1e-5):
    """output = (x - mean) / sqrt(var + epsilon) * gamma + beta over axis 1; x [rows, N], gamma and beta [N]."""
    output_tensor = nl.ndarray(input_tensor.shape, dtype=input_tensor.dtype, buffer=nl.shared_hbm)
    assert input_tensor.shape[1] == gamma_vector.shape[0] == beta_vector.shape[0]

    i_p_io = nl.arange(nl.tile_size.pmax)[:, None]
    i_f_io = nl.arange(input_tensor.shape[1])[None, :]
    i_p_param = nl.arange(1)[:, None]
    num_rows = input_tensor.shape[0]

    # gamma and beta: loaded once, reused by every row tile
    gamma_sb = nl.load(gamma_vector.reshape((1, gamma_vector.shape[0]))[i_p_param, i_f_io])
    beta_sb = nl.load(beta_vector.reshape((1, beta_vector.shape[0]))[i_p_param, i_f_io])
    gamma_sb_bcast = gamma_sb.broadcast_to((nl.tile_size.pmax, gamma_vector.shape[0]))
    beta_sb_bcast = beta_sb.broadcast_to((nl.tile_size.pmax, beta_vector.shape[0]))

    for i in nl.affine_range(math.ceil(input_tensor.shape[0] / nl.tile_size.pmax)):
        input_sb = nl.load(input_tensor[i * nl.tile_size.pmax + i_p_io, i_f_io],
                           mask=(i * nl.tile_size.pmax + i_p_io < num_rows))

        mean = nl.mean(input_sb, axis=1, keepdims=True)
        var = nl.mean(nl.square(input_sb), axis=1, keepdims=True) - mean * mean
        scale_var = nl.rsqrt(var + epsilon)

        # (x - mean) * scale_var: both operands are [128, 1] columns, one instruction
        shift_scale_tensor = nisa.tensor_scalar(data=input_sb, op0=np.subtract, operand0=mean,
                                                op1=np.multiply, operand1=scale_var)

        output_sb = shift_scale_tensor * gamma_sb_bcast + beta_sb_bcast
        nl.store(output_tensor[i * nl.tile_size.pmax + i_p_io, i_f_io], value=output_sb,
                 mask=(i * nl.tile_size.pmax + i_p_io < num_rows))

    return output_tensor
