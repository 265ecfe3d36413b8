"""RMSNorm fused with the linear layer that follows it, in the NKI 2.x API.

    out = (x / sqrt(mean(x^2, axis=1) + eps) * gamma) @ w

The matmul contracts over the hidden axis, so the kernel transposes each 128-row tile of x on the PE
(hidden axis onto partitions) and scales it by gamma there, where gamma is a per-partition column;
the per-row 1/rms factor commutes with the matmul and scales the PSUM result's rows on the way out.
Shows: `nisa.activation(op=nl.square, reduce_op=nl.add, reduce_res=...)` (a row sum of squares),
`nisa.tensor_scalar` with two ops and with a [P, 1] column operand, `nisa.activation(op=nl.rsqrt)`,
`nisa.nc_transpose` into PSUM, `nisa.nc_matmul`, an HBM `reshape` of a 1-D tensor into a column.
"""

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def nki_rmsnorm_linear(x, gamma, w, eps=1e-6):
    """x [rows, hidden], gamma [hidden], w [hidden, out_dim]: rows a multiple of 128, hidden <= 128,
    out_dim <= 512; returns [rows, out_dim] float32."""
    rows, hidden = x.shape
    hidden_w, out_dim = w.shape
    assert hidden == hidden_w and gamma.shape == (hidden,), "x, gamma and w disagree on the hidden size"
    tile_rows = nl.tile_size.pmax
    out = nl.ndarray((rows, out_dim), dtype=nl.float32, buffer=nl.shared_hbm)

    # loaded once: w with the hidden axis on partitions, gamma as one value per partition
    w_t = nl.ndarray((hidden, out_dim), dtype=nl.float32, buffer=nl.sbuf)
    g_col = nl.ndarray((hidden, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=w_t, src=w)
    nisa.dma_copy(dst=g_col, src=gamma.reshape((hidden, 1)))

    for r in nl.affine_range(rows // tile_rows):
        x_t = nl.ndarray((tile_rows, hidden), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=x_t, src=x[r * tile_rows:(r + 1) * tile_rows, :])

        # 1 / rms per row: sum of squares, then mean + eps, then rsqrt
        squares = nl.ndarray((tile_rows, hidden), dtype=nl.float32, buffer=nl.sbuf)
        sum_sq = nl.ndarray((tile_rows, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=squares, op=nl.square, data=x_t, reduce_op=nl.add, reduce_res=sum_sq,
                        reduce_cmd=nisa.reduce_cmd.reset_reduce)
        mean_sq = nl.ndarray((tile_rows, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=mean_sq, data=sum_sq, op0=nl.multiply, operand0=1.0 / hidden,
                           op1=nl.add, operand1=eps)
        inv_rms = nl.ndarray((tile_rows, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=inv_rms, op=nl.rsqrt, data=mean_sq)

        # x^T on the PE, scaled by gamma (a column now) on the way from PSUM to SBUF
        x_tp = nl.ndarray((hidden, tile_rows), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_transpose(dst=x_tp, data=x_t)
        xg_t = nl.ndarray((hidden, tile_rows), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=xg_t, data=x_tp, op0=nl.multiply, operand0=g_col)

        # (x * gamma) @ w, then each row times its 1 / rms
        acc = nl.ndarray((tile_rows, out_dim), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=acc, stationary=xg_t, moving=w_t)
        res = nl.ndarray((tile_rows, out_dim), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=res, data=acc, op0=nl.multiply, operand0=inv_rms)
        nisa.dma_copy(dst=out[r * tile_rows:(r + 1) * tile_rows, :], src=res)

    return out
