"""The backward pass of softmax attention for one head (NKI 1.x API).

Forward: P = softmax(scale * Q K^T) row by row, O = P V.  Given dO = dL/dO this
recomputes P (as FlashAttention's backward does, instead of storing it) and returns

    dV = P^T dO
    dP = dO V^T
    dS = P * (dP - rowsum(P * dP))          (the softmax Jacobian; rowsum(P dP) = rowsum(dO O))
    dQ = scale * dS K
    dK = scale * dS^T Q

Queries go 128 per tile, in a sequential loop (dK and dV accumulate over it); each
query tile keeps its whole key row [128, seqlen] (seqlen <= 512, one PSUM bank).  Q^T,
K^T, V^T and dO^T come straight from HBM with nl.load_transpose2d, so the head dimension
is the contraction axis of Q K^T and dO V^T.  dV and dK contract over the queries, which
already sit on the partitions of P and dS; dQ contracts over the keys, so each key block
of dS is transposed on the Tensor Engine first.  Everything stays float32.

Shows: nl.load_transpose2d, nisa.nc_matmul(stationary=, moving=) with K = d_head and with
K = 128 queries, nisa.nc_transpose, nisa.tensor_reduce(negate=True), nisa.activation(exp,
bias=, scale=), a PSUM `+=` over an inner loop, SBUF accumulators `+=` PSUM tiles across a
nl.sequential_range, loop-index slices, three outputs returned as a tuple.
"""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
from neuronxcc.nki.language import par_dim


@nki.jit
def attention_bwd(q_ref, k_ref, v_ref, do_ref, softmax_scale=0.125):
    """(dQ, dK, dV) of O = softmax(q k^T * softmax_scale) v; all [seqlen, d_head], seqlen a multiple of 128."""
    seqlen, d_head = q_ref.shape
    assert d_head <= 128 and seqlen % 128 == 0 and seqlen <= 512, (seqlen, d_head)
    for ref in (k_ref, v_ref, do_ref):
        assert tuple(ref.shape) == (seqlen, d_head), ref.shape
    dq_ref = nl.ndarray((seqlen, d_head), dtype=q_ref.dtype, buffer=nl.shared_hbm)
    dk_ref = nl.ndarray((seqlen, d_head), dtype=q_ref.dtype, buffer=nl.shared_hbm)
    dv_ref = nl.ndarray((seqlen, d_head), dtype=q_ref.dtype, buffer=nl.shared_hbm)

    tile = 128
    n_tiles = seqlen // tile

    # whole-sequence operands: K^T, V^T [d_head, seqlen]; K with the keys on partitions
    k_t = nl.load_transpose2d(k_ref)
    v_t = nl.load_transpose2d(v_ref)
    k_rows = nl.ndarray((par_dim(tile), n_tiles, d_head), dtype=nl.float32, buffer=nl.sbuf)
    for kt in nl.affine_range(n_tiles):
        k_rows[:, kt, :] = nl.load(k_ref[kt * tile:(kt + 1) * tile, :])

    # dK and dV sum over every query tile
    dk_acc = nl.zeros((par_dim(tile), n_tiles, d_head), dtype=nl.float32, buffer=nl.sbuf)
    dv_acc = nl.zeros((par_dim(tile), n_tiles, d_head), dtype=nl.float32, buffer=nl.sbuf)

    for qt in nl.sequential_range(n_tiles):
        rows = slice(qt * tile, (qt + 1) * tile)
        q_t = nl.load_transpose2d(q_ref[rows, :])        # [d_head, 128]
        do_t = nl.load_transpose2d(do_ref[rows, :])      # [d_head, 128]
        q_rows = nl.load(q_ref[rows, :])                 # [128, d_head]
        do_rows = nl.load(do_ref[rows, :])

        # recompute P: exp(scale * s - scale * max(s)) / row sum
        s_psum = nisa.nc_matmul(stationary=q_t, moving=k_t)          # [128, seqlen]
        neg_max = nisa.tensor_reduce(op=nl.max, data=s_psum, axis=1, negate=True, keepdims=True)
        bias = nl.multiply(neg_max, softmax_scale)
        p_exp = nisa.activation(op=nl.exp, data=s_psum, bias=bias, scale=softmax_scale)
        row_sum = nisa.tensor_reduce(op=nl.add, data=p_exp, axis=1, keepdims=True)
        p = nl.multiply(p_exp, nl.reciprocal(row_sum))

        # dS = P * (dP - rowsum(P * dP)), scaled once here for both dQ and dK
        dp_psum = nisa.nc_matmul(stationary=do_t, moving=v_t)        # [128, seqlen]
        p_dp_sum = nl.sum(nl.multiply(p, dp_psum), axis=1, keepdims=True)
        ds = nl.multiply(nl.multiply(p, nl.subtract(dp_psum, p_dp_sum)), softmax_scale)

        dq_psum = nl.zeros((par_dim(tile), d_head), dtype=nl.float32, buffer=nl.psum)
        for kt in nl.affine_range(n_tiles):
            keys = slice(kt * tile, (kt + 1) * tile)
            # contract over this tile's queries (the partitions of P and dS): [128 keys, d_head]
            dv_acc[:, kt, :] += nisa.nc_matmul(stationary=p[:, keys], moving=do_rows)
            dk_acc[:, kt, :] += nisa.nc_matmul(stationary=ds[:, keys], moving=q_rows)
            # contract over keys: dS^T of this key block on the partitions
            ds_t = nl.copy(nisa.nc_transpose(ds[:, keys]))
            dq_psum += nisa.nc_matmul(stationary=ds_t, moving=k_rows[:, kt, :])

        nl.store(dq_ref[rows, :], value=nl.copy(dq_psum))

    for kt in nl.affine_range(n_tiles):
        nl.store(dk_ref[kt * tile:(kt + 1) * tile, :], value=dk_acc[:, kt, :])
        nl.store(dv_ref[kt * tile:(kt + 1) * tile, :], value=dv_acc[:, kt, :])

    return dq_ref, dk_ref, dv_ref
