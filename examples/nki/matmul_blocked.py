"""C = A @ B with both free dimensions blocked (NKI matmul tutorial, "blocking free dimensions").

TILES_IN_BLOCK_M lhsT tile columns and TILES_IN_BLOCK_N rhs tile columns are
held in SBUF together, so each loaded tile feeds several matmuls.
"""

import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def nki_matmul_block_free_dimension_(lhsT, rhs):
    """result = lhsT.T @ rhs; M a multiple of 256, N of 1024, K of 128."""
    K, M = lhsT.shape
    K_, N = rhs.shape
    assert K == K_, "lhsT and rhs must have the same contraction dimension"
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)

    TILE_M = nl.tile_size.gemm_stationary_fmax  # 128
    TILE_K = nl.tile_size.pmax  # 128
    TILE_N = nl.tile_size.gemm_moving_fmax  # 512

    i_lhsT = nl.mgrid[0:TILE_K, 0:TILE_M]
    i_rhs = nl.mgrid[0:TILE_K, 0:TILE_N]
    i_res = nl.mgrid[0:TILE_M, 0:TILE_N]

    # how many tiles of each free dimension one block holds
    TILES_IN_BLOCK_M = 2
    TILES_IN_BLOCK_N = 2
    BLOCK_M = TILE_M * TILES_IN_BLOCK_M  # 256
    BLOCK_N = TILE_N * TILES_IN_BLOCK_N  # 1024
    assert M % BLOCK_M == 0 and N % BLOCK_N == 0

    for m in nl.affine_range(M // BLOCK_M):
        lhsT_tiles = nl.ndarray((TILES_IN_BLOCK_M, K // TILE_K, nl.par_dim(TILE_K), TILE_M),
                                dtype=lhsT.dtype, buffer=nl.sbuf)
        for bm in nl.affine_range(TILES_IN_BLOCK_M):
            for k in nl.affine_range(K // TILE_K):
                lhsT_tiles[bm, k, i_lhsT.p, i_lhsT.x] = nl.load(
                    lhsT[k * TILE_K + i_lhsT.p, (m * TILES_IN_BLOCK_M + bm) * TILE_M + i_lhsT.x])

        for n in nl.affine_range(N // BLOCK_N):
            rhs_tiles = nl.ndarray((TILES_IN_BLOCK_N, K // TILE_K, nl.par_dim(TILE_K), TILE_N),
                                   dtype=rhs.dtype, buffer=nl.sbuf)
            for bn in nl.affine_range(TILES_IN_BLOCK_N):
                for k in nl.affine_range(K // TILE_K):
                    rhs_tiles[bn, k, i_rhs.p, i_rhs.x] = nl.load(
                        rhs[k * TILE_K + i_rhs.p, (n * TILES_IN_BLOCK_N + bn) * TILE_N + i_rhs.x])

            for bm in nl.affine_range(TILES_IN_BLOCK_M):
                for bn in nl.affine_range(TILES_IN_BLOCK_N):
                    res_psum = nl.zeros((TILE_M, TILE_N), nl.float32, buffer=nl.psum)
                    for k in nl.affine_range(K // TILE_K):
                        res_psum += nl.matmul(lhsT_tiles[bm, k, i_lhsT.p, i_lhsT.x],
                                              rhs_tiles[bn, k, i_rhs.p, i_rhs.x], transpose_x=True)

                    res_sb = nl.copy(res_psum, dtype=result.dtype)
                    nl.store(result[(m * TILES_IN_BLOCK_M + bm) * TILE_M + i_res.p,
                                    (n * TILES_IN_BLOCK_N + bn) * TILE_N + i_res.x], value=res_sb)

    return result
