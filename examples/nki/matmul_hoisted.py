"""C = A @ B with the operand loads hoisted out of the inner loops (NKI matmul tutorial, "hoisting loads").

A column of lhsT tiles is loaded once per m and a column of rhs tiles once
per (m, n), into multi-tile SBUF buffers (a block axis in front of
``nl.par_dim``), then the contraction loop only multiplies.
"""

import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def nki_matmul_hoist_load_(lhsT, rhs):
    """result = lhsT.T @ rhs; lhsT [K, M] and rhs [K, N] with K, M multiples of 128 and N of 512."""
    K, M = lhsT.shape
    K_, N = rhs.shape
    assert K == K_, "lhsT and rhs must have the same contraction dimension"
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)

    TILE_M = nl.tile_size.gemm_stationary_fmax  # 128
    TILE_K = nl.tile_size.pmax  # 128
    TILE_N = nl.tile_size.gemm_moving_fmax  # 512

    # index grids of one tile of each operand and of the result (.p: partition, .x: first free axis)
    i_lhsT = nl.mgrid[0:TILE_K, 0:TILE_M]
    i_rhs = nl.mgrid[0:TILE_K, 0:TILE_N]
    i_res = nl.mgrid[0:TILE_M, 0:TILE_N]

    for m in nl.affine_range(M // TILE_M):
        # all K // TILE_K tiles of lhsT's column block m
        lhsT_tiles = nl.ndarray((K // TILE_K, nl.par_dim(TILE_K), TILE_M), dtype=lhsT.dtype, buffer=nl.sbuf)
        for k in nl.affine_range(K // TILE_K):
            lhsT_tiles[k, i_lhsT.p, i_lhsT.x] = nl.load(lhsT[k * TILE_K + i_lhsT.p, m * TILE_M + i_lhsT.x])

        for n in nl.affine_range(N // TILE_N):
            rhs_tiles = nl.ndarray((K // TILE_K, nl.par_dim(TILE_K), TILE_N), dtype=rhs.dtype, buffer=nl.sbuf)
            for k in nl.affine_range(K // TILE_K):
                rhs_tiles[k, i_rhs.p, i_rhs.x] = nl.load(rhs[k * TILE_K + i_rhs.p, n * TILE_N + i_rhs.x])

            res_psum = nl.zeros((TILE_M, TILE_N), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // TILE_K):
                res_psum[...] += nl.matmul(lhsT_tiles[k, i_lhsT.p, i_lhsT.x], rhs_tiles[k, i_rhs.p, i_rhs.x],
                                           transpose_x=True)

            res_sb = nl.copy(res_psum, dtype=result.dtype)
            nl.store(result[m * TILE_M + i_res.p, n * TILE_N + i_res.x], value=res_sb)

    return result
