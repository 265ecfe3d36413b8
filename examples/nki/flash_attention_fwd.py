"""Causal flash-attention forward for one head, in the NKI 2.x API.

    out = softmax(q k^T * scale + causal_mask) v        (row i attends to keys 0..i)

Queries go in tiles of 128 rows; for each, the key/value tiles at or before it are visited in order
with an online softmax: a running row max m and row sum l, and an accumulator rescaled by
exp(m_old - m_new) whenever the max grows, so the [seq, seq] score matrix never exists.  Tiles past the
diagonal are skipped; the diagonal tile is masked with `nisa.affine_select`.
Shows: `nisa.dma_transpose` from HBM, `nisa.nc_matmul` both ways (q k^T and p v), `nisa.nc_transpose`
of the probabilities, `nisa.affine_select` (causal mask), `nisa.tensor_reduce(op=nl.max)`,
`nisa.activation(op=nl.exp, bias=column, reduce_res=...)` (exp and row sum in one pass),
`nisa.scalar_tensor_tensor` (acc * alpha + pv), `nisa.reciprocal`, `nisa.memset`.
"""

import nki
import nki.isa as nisa
import nki.language as nl

NEG_BIG = -1.0e30  # a finite "minus infinity": exp(NEG_BIG - m) is 0 and NEG_BIG - NEG_BIG is not NaN


@nki.jit
def nki_flash_attention_fwd(q, k, v, scale=0.125):
    """q, k, v [seq, d]: seq a multiple of 128, d <= 128; scale = 1 / sqrt(d) for d = 64."""
    seq, d = q.shape
    assert k.shape == (seq, d) and v.shape == (seq, d), "q, k, v must have the same shape"
    tile = nl.tile_size.pmax
    n_tiles = seq // tile
    out = nl.ndarray((seq, d), dtype=nl.float32, buffer=nl.shared_hbm)

    for i in range(n_tiles):  # Python loops: the causal bound j <= i is known while tracing
        # q^T with the head axis on partitions, pre-scaled
        q_t = nl.ndarray((d, tile), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_transpose(dst=q_t, src=q[i * tile:(i + 1) * tile, :])
        nisa.tensor_scalar(dst=q_t, data=q_t, op0=nl.multiply, operand0=scale)

        m = nl.ndarray((tile, 1), dtype=nl.float32, buffer=nl.sbuf)      # running row max
        l_sum = nl.ndarray((tile, 1), dtype=nl.float32, buffer=nl.sbuf)  # running row sum
        acc = nl.ndarray((tile, d), dtype=nl.float32, buffer=nl.sbuf)    # running p @ v
        nisa.memset(dst=m, value=NEG_BIG)
        nisa.memset(dst=l_sum, value=0.0)
        nisa.memset(dst=acc, value=0.0)

        for j in range(i + 1):
            k_t = nl.ndarray((d, tile), dtype=nl.float32, buffer=nl.sbuf)
            v_t = nl.ndarray((tile, d), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_transpose(dst=k_t, src=k[j * tile:(j + 1) * tile, :])
            nisa.dma_copy(dst=v_t, src=v[j * tile:(j + 1) * tile, :])

            # scores [q rows, k rows] = (q * scale) k^T
            s_psum = nl.ndarray((tile, tile), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_matmul(dst=s_psum, stationary=q_t, moving=k_t)
            s = nl.ndarray((tile, tile), dtype=nl.float32, buffer=nl.sbuf)
            if j == i:
                # keep column c of row r where r - c >= 0 (both local to the diagonal tile)
                nisa.affine_select(dst=s, pattern=[[-1, tile]], channel_multiplier=1, on_true_tile=s_psum,
                                   on_false_value=NEG_BIG, cmp_op=nl.greater_equal)
            else:
                nisa.tensor_copy(dst=s, src=s_psum)

            # the new running max, and alpha = exp(m_old - m_new) to rescale what was summed so far
            m_tile = nl.ndarray((tile, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_reduce(dst=m_tile, op=nl.max, data=s, axis=1)
            m_new = nl.ndarray((tile, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_tensor(dst=m_new, data1=m, data2=m_tile, op=nl.maximum)
            neg_m = nl.ndarray((tile, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_scalar(dst=neg_m, data=m_new, op0=nl.multiply, operand0=-1.0)
            alpha = nl.ndarray((tile, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.activation(dst=alpha, op=nl.exp, data=m, bias=neg_m)

            # p = exp(s - m_new) and its row sum in one activation
            p = nl.ndarray((tile, tile), dtype=nl.float32, buffer=nl.sbuf)
            p_sum = nl.ndarray((tile, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.activation(dst=p, op=nl.exp, data=s, bias=neg_m, reduce_op=nl.add, reduce_res=p_sum,
                            reduce_cmd=nisa.reduce_cmd.reset_reduce)
            # l = l * alpha + rowsum(p)
            nisa.scalar_tensor_tensor(dst=l_sum, data=l_sum, op0=nl.multiply, operand0=alpha,
                                      op1=nl.add, operand1=p_sum)

            # p v: p^T (key rows on partitions) is the stationary operand
            p_tp = nl.ndarray((tile, tile), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_transpose(dst=p_tp, data=p)
            p_t = nl.ndarray((tile, tile), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=p_t, src=p_tp)
            pv = nl.ndarray((tile, d), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_matmul(dst=pv, stationary=p_t, moving=v_t)
            # acc = acc * alpha + p v
            nisa.scalar_tensor_tensor(dst=acc, data=acc, op0=nl.multiply, operand0=alpha,
                                      op1=nl.add, operand1=pv)
            nisa.tensor_copy(dst=m, src=m_new)

        # out = acc / l
        inv_l = nl.ndarray((tile, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.reciprocal(dst=inv_l, data=l_sum)
        o_t = nl.ndarray((tile, d), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=o_t, data=acc, op0=nl.multiply, operand0=inv_l)
        nisa.dma_copy(dst=out[i * tile:(i + 1) * tile, :], src=o_t)

    return out
