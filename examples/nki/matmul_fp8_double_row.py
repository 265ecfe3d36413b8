"""An fp8 matmul in the Tensor Engine's double-row mode (NKI 2.x): result = (lhsT.T @ rhs) * row_scale.

`nisa.nc_matmul(perf_mode=nisa.matmul_perf_mode.double_row)` packs two fp8 rows per PE: the stationary
and moving tiles are [128, 2, F], and one instruction contracts over both 128-row halves, 256 rows of K.
Here each half is its own partition tile of K, `k * 256 + half * 128 + p`, DMA'd into `tile[:, half, :]`;
the pair sums accumulate in one PSUM tile over the k loop (the inferred `accumulate`). The float32 sums
are then dequantized by a per-row scale (one per output row, a [128, 1] column) on the way out of PSUM.
Shows: fp8 (`float8_e4m3`) HBM inputs and SBUF tiles, three-axis tiles written one middle index at a time,
`nisa.matmul_perf_mode.double_row`, `nisa.tensor_scalar` with a column operand reading PSUM.
"""

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def nki_matmul_fp8_double_row(lhsT, rhs, row_scale):
    """lhsT [K, M], rhs [K, N] float8_e4m3 (K a multiple of 256, M of 128, N of 512); row_scale [M, 1] float32.
    Returns [M, N] float32."""
    K, M = lhsT.shape
    _, N = rhs.shape
    tile_k = nl.tile_size.pmax                  # 128 partitions per half
    tile_m = nl.tile_size.gemm_stationary_fmax  # 128
    tile_n = nl.tile_size.gemm_moving_fmax      # 512
    pair = 2 * tile_k                           # K rows one double-row matmul contracts
    assert K % pair == 0, "double-row mode contracts K in pairs of partition tiles"
    result = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)

    for m in nl.affine_range(M // tile_m):
        rows = slice(m * tile_m, (m + 1) * tile_m)
        scale = nl.ndarray((tile_m, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=scale, src=row_scale[rows, :])
        for n in nl.affine_range(N // tile_n):
            cols = slice(n * tile_n, (n + 1) * tile_n)
            acc = nl.ndarray((tile_m, tile_n), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // pair):
                st = nl.ndarray((tile_k, 2, tile_m), dtype=lhsT.dtype, buffer=nl.sbuf)
                mv = nl.ndarray((tile_k, 2, tile_n), dtype=rhs.dtype, buffer=nl.sbuf)
                for half in range(2):  # a Python loop: traced twice, one DMA pair per half
                    k0 = k * pair + half * tile_k
                    nisa.dma_copy(dst=st[:, half, :], src=lhsT[k0:k0 + tile_k, rows])
                    nisa.dma_copy(dst=mv[:, half, :], src=rhs[k0:k0 + tile_k, cols])
                nisa.nc_matmul(dst=acc, stationary=st, moving=mv, perf_mode=nisa.matmul_perf_mode.double_row)

            out = nl.ndarray((tile_m, tile_n), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_scalar(dst=out, data=acc, op0=nl.multiply, operand0=scale)
            nisa.dma_copy(dst=result[rows, cols], src=out)

    return result
