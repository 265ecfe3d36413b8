"""One [64, 128] x [128, 512] matrix multiplication (the first step of the NKI matmul tutorial), in bfloat16.

The Tensor Engine contracts over the partition axis, so the left operand
arrives transposed (``lhsT`` is [K, M]); the product lands in PSUM as
float32 and is copied to SBUF, cast to the output dtype, before the store.
"""

import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def nki_matmul_basic_(lhsT, rhs):
    """result = lhsT.T @ rhs for lhsT [128, 64] and rhs [128, 512]; result [64, 512] in lhsT's dtype."""
    result = nl.ndarray((64, 512), dtype=lhsT.dtype, buffer=nl.shared_hbm)

    # the contraction axis (K = 128) is the partition axis of both operands
    i_lhsT_p, i_lhsT_f = nl.mgrid[0:128, 0:64]
    i_rhs_p, i_rhs_f = nl.mgrid[0:128, 0:512]
    i_out_p, i_out_f = nl.mgrid[0:64, 0:512]

    lhs_tile = nl.load(lhsT[i_lhsT_p, i_lhsT_f])
    rhs_tile = nl.load(rhs[i_rhs_p, i_rhs_f])

    # transpose_x=True: lhs_tile already is x.T, no extra transpose is needed; the result is float32 in PSUM
    result_psum = nl.matmul(lhs_tile, rhs_tile, transpose_x=True)

    # PSUM -> SBUF, cast to the output dtype
    result_sbuf = nl.copy(result_psum, dtype=result.dtype)
    nl.store(result[i_out_p, i_out_f], value=result_sbuf)
    return result
