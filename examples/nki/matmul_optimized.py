"""C = A @ B blocked in all three dimensions (NKI matmul tutorial, "fully optimized").

The contraction blocks run in a sequential_range loop (each adds into the
SBUF result block, so their order matters); inside, nisa.nc_matmul
accumulates TILES_IN_BLOCK_K products in PSUM and the PSUM tile is added
into the SBUF result tile.  The result tiles of one row are packed into one
[128, BLOCK_N] tile so the store is one large DMA.  The block sizes are
meta-parameters (defaults sized for a [512, 512] x [512, 1024] product).
"""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def nki_matmul_fully_optimized_(lhsT, rhs, TILES_IN_BLOCK_M=2, TILES_IN_BLOCK_N=2, TILES_IN_BLOCK_K=2):
    """result = lhsT.T @ rhs; K, M and N multiples of BLOCK_K, BLOCK_M and BLOCK_N (TILE * TILES_IN_BLOCK_*)."""
    K, M = lhsT.shape
    K_, N = rhs.shape
    assert K == K_, "lhsT and rhs must have the same contraction dimension"
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)

    TILE_M = nl.tile_size.gemm_stationary_fmax  # 128
    TILE_K = nl.tile_size.pmax  # 128
    TILE_N = nl.tile_size.gemm_moving_fmax  # 512

    BLOCK_M = TILE_M * TILES_IN_BLOCK_M
    BLOCK_N = TILE_N * TILES_IN_BLOCK_N
    BLOCK_K = TILE_K * TILES_IN_BLOCK_K
    assert M % BLOCK_M == 0 and N % BLOCK_N == 0 and K % BLOCK_K == 0

    NUM_BLOCK_M = M // BLOCK_M
    NUM_BLOCK_N = N // BLOCK_N
    NUM_BLOCK_K = K // BLOCK_K

    for n in nl.affine_range(NUM_BLOCK_N):
        # the SBUF accumulator of every result tile in this column block
        result_tiles = nl.zeros((NUM_BLOCK_M, TILES_IN_BLOCK_M, TILES_IN_BLOCK_N, nl.par_dim(TILE_M), TILE_N),
                                dtype=lhsT.dtype, buffer=nl.sbuf)

        # sequential: every k block adds into result_tiles
        for k in nl.sequential_range(NUM_BLOCK_K):
            # rhs tiles of this (k, n) block, each loaded as one [TILE_K, BLOCK_N] DMA
            i_rhs = nl.mgrid[0:TILE_K, 0:BLOCK_N]
            rhs_tiles = nl.ndarray((TILES_IN_BLOCK_K, nl.par_dim(TILE_K), BLOCK_N), dtype=rhs.dtype, buffer=nl.sbuf)
            for bk_r in nl.affine_range(TILES_IN_BLOCK_K):
                rhs_tiles[bk_r, i_rhs.p, i_rhs.x] = nl.load(
                    rhs[(TILES_IN_BLOCK_K * k + bk_r) * TILE_K + i_rhs.p, BLOCK_N * n + i_rhs.x])

            for m in nl.affine_range(NUM_BLOCK_M):
                i_lhsT = nl.mgrid[0:TILE_K, 0:BLOCK_M]
                lhsT_tiles = nl.ndarray((TILES_IN_BLOCK_K, nl.par_dim(TILE_K), BLOCK_M), dtype=lhsT.dtype,
                                        buffer=nl.sbuf)
                for bk_l in nl.affine_range(TILES_IN_BLOCK_K):
                    lhsT_tiles[bk_l, i_lhsT.p, i_lhsT.x] = nl.load(
                        lhsT[(TILES_IN_BLOCK_K * k + bk_l) * TILE_K + i_lhsT.p, BLOCK_M * m + i_lhsT.x])

                i_lhsT_mm = nl.mgrid[0:TILE_K, 0:TILE_M]
                i_rhs_mm = nl.mgrid[0:TILE_K, 0:TILE_N]
                i_res_mm = nl.mgrid[0:TILE_M, 0:TILE_N]
                for bn in nl.affine_range(TILES_IN_BLOCK_N):
                    for bm in nl.affine_range(TILES_IN_BLOCK_M):
                        res_tile = nl.zeros((TILE_M, TILE_N), dtype=nl.float32, buffer=nl.psum)
                        for bk in nl.affine_range(TILES_IN_BLOCK_K):
                            # stationary [K, M] and moving [K, N] -> [M, N], added to the PSUM tile
                            res_tile[...] += nisa.nc_matmul(lhsT_tiles[bk, i_lhsT_mm.p, bm * TILE_M + i_lhsT_mm.x],
                                                            rhs_tiles[bk, i_rhs_mm.p, bn * TILE_N + i_rhs_mm.x])

                        # add this k block's contribution to the SBUF accumulator
                        result_tiles[m, bm, bn, i_res_mm.p, i_res_mm.x] += res_tile[i_res_mm.p, i_res_mm.x]

        # SBUF -> HBM: pack the TILES_IN_BLOCK_N tiles of one row into one tile, then one store per row
        for m in nl.affine_range(NUM_BLOCK_M):
            for bm in nl.affine_range(TILES_IN_BLOCK_M):
                i_res = nl.mgrid[0:TILE_M, 0:TILE_N]
                i_res_packed = nl.mgrid[0:TILE_M, 0:BLOCK_N]
                result_packed = nl.ndarray((TILE_M, BLOCK_N), dtype=result_tiles.dtype, buffer=nl.sbuf)
                for bn in nl.affine_range(TILES_IN_BLOCK_N):
                    result_packed[i_res.p, bn * TILE_N + i_res.x] = nl.copy(result_tiles[m, bm, bn, i_res.p, i_res.x])
                nl.store(result[(TILES_IN_BLOCK_M * m + bm) * TILE_M + i_res_packed.p, BLOCK_N * n + i_res_packed.x],
                         value=result_packed[i_res_packed.p, i_res_packed.x])

    return result
