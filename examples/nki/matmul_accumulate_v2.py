"""A blocked matmul in the NKI 2.x API: result = lhsT.T @ rhs, with the K sum accumulated in PSUM.

Every [128, 512] result tile owns one PSUM tile; the k loop's `nisa.nc_matmul(dst=acc, ...)` calls
overwrite it on the first iteration and add to it on the others (NKI's inferred `accumulate`).
Shows: `nl.ndarray` on `nl.sbuf` / `nl.psum` / `nl.shared_hbm`, `nisa.dma_copy` of HBM slices,
`nisa.nc_matmul(dst, stationary, moving)`, `nisa.tensor_copy` out of PSUM, `nl.tile_size`.

(This is the plain-mode kernel; matmul_fp8_double_row.py is the fp8 `perf_mode=double_row` one.)
"""

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def nki_matmul_accumulate_v2(lhsT, rhs):
    """lhsT [K, M], rhs [K, N]: K, M multiples of 128, N a multiple of 512; returns [M, N] float32."""
    K, M = lhsT.shape
    K_rhs, N = rhs.shape
    assert K == K_rhs, "lhsT and rhs must have the same contraction size"
    tile_k = nl.tile_size.pmax                    # 128: the contraction runs over partitions
    tile_m = nl.tile_size.gemm_stationary_fmax    # 128
    tile_n = nl.tile_size.gemm_moving_fmax        # 512: one PSUM bank of float32
    result = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)

    for m in nl.affine_range(M // tile_m):
        for n in nl.affine_range(N // tile_n):
            acc = nl.ndarray((tile_m, tile_n), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // tile_k):
                a = nl.ndarray((tile_k, tile_m), dtype=lhsT.dtype, buffer=nl.sbuf)
                b = nl.ndarray((tile_k, tile_n), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=a, src=lhsT[k * tile_k:(k + 1) * tile_k, m * tile_m:(m + 1) * tile_m])
                nisa.dma_copy(dst=b, src=rhs[k * tile_k:(k + 1) * tile_k, n * tile_n:(n + 1) * tile_n])
                nisa.nc_matmul(dst=acc, stationary=a, moving=b)

            # PSUM is not DMA-addressable: the engines copy the finished tile to SBUF first
            res = nl.ndarray((tile_m, tile_n), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res, src=acc)
            nisa.dma_copy(dst=result[m * tile_m:(m + 1) * tile_m, n * tile_n:(n + 1) * tile_n], src=res)

    return result
