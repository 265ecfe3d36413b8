"""C = A @ B in [128, 128] x [128, 512] tiles, partial sums accumulated in PSUM (NKI matmul tutorial, "tiling").

Every (m, n) output tile allocates a zeroed PSUM tile and adds one matmul per
128-row step of the contraction axis to it; the operand tiles are loaded
inside the innermost loop, so each is loaded once per use.
"""

import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def nki_matmul_tiled_(lhsT, rhs):
    """result = lhsT.T @ rhs; lhsT [K, M] and rhs [K, N] with K, M multiples of 128 and N of 512."""
    K, M = lhsT.shape
    K_, N = rhs.shape
    assert K == K_, "lhsT and rhs must have the same contraction dimension"
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)

    TILE_M = nl.tile_size.gemm_stationary_fmax  # 128
    TILE_K = nl.tile_size.pmax  # 128
    TILE_N = nl.tile_size.gemm_moving_fmax  # 512

    for m in nl.affine_range(M // TILE_M):
        for n in nl.affine_range(N // TILE_N):
            # one PSUM tile collects the K // TILE_K partial products of this output tile
            res_psum = nl.zeros((TILE_M, TILE_N), nl.float32, buffer=nl.psum)

            for k in nl.affine_range(K // TILE_K):
                lhsT_tile = nl.ndarray((TILE_K, TILE_M), dtype=lhsT.dtype, buffer=nl.sbuf)
                rhs_tile = nl.ndarray((TILE_K, TILE_N), dtype=rhs.dtype, buffer=nl.sbuf)
                lhsT_tile[...] = nl.load(lhsT[k * TILE_K:(k + 1) * TILE_K, m * TILE_M:(m + 1) * TILE_M])
                rhs_tile[...] = nl.load(rhs[k * TILE_K:(k + 1) * TILE_K, n * TILE_N:(n + 1) * TILE_N])

                res_psum += nl.matmul(lhsT_tile[...], rhs_tile[...], transpose_x=True)

            res_sb = nl.copy(res_psum, dtype=result.dtype)
            nl.store(result[m * TILE_M:(m + 1) * TILE_M, n * TILE_N:(n + 1) * TILE_N], value=res_sb)

    return result
