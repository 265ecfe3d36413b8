"""Fused self attention softmax(Q K^T * scale) V for one head with a small head size
(the NKI "Fused Self Attention" tutorial for Stable Diffusion, without the causal mask).

Q and K are transposed on the Tensor Engine so the head dimension is the
contraction (partition) axis of Q K^T; each 128-query tile keeps its whole
score row [128, seqlen] in SBUF, takes the row maximum tile by tile, computes
exp(s - max) on the Activation engine with the negated maximum as bias,
transposes the probabilities back onto the key axis and multiplies them with
V, normalising by the row sums at the end.  Everything stays float32.
"""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
from neuronxcc.nki.language import par_dim


@nki.jit
def fused_self_attn_for_SD_small_head_size(q_ref, k_ref, v_ref):
    """out = softmax(q k^T * 0.125) v; q, k, v [seqlen, d_head], seqlen a multiple of 128, d_head <= 128."""
    kernel_dtype = q_ref.dtype
    seqlen, d_head = q_ref.shape
    assert d_head <= 128, "Cannot use this kernel for d_head > 128"
    assert tuple(k_ref.shape) == (seqlen, d_head) and tuple(v_ref.shape) == (seqlen, d_head)
    out_ref = nl.ndarray((seqlen, d_head), dtype=q_ref.dtype, buffer=nl.shared_hbm)

    # 1 / sqrt(d_head) for d_head = 64, folded into Q
    softmax_scale = 0.125

    q_seq_n_tiles, q_seq_tile_size = seqlen // 128, 128
    k_seq_n_tiles, k_seq_tile_size = seqlen // 128, 128
    d_head_tile_size = d_head

    ###################################
    # Step 1. V tiles with the key axis on partitions (the moving operand of the second matmul)
    ###################################
    v_local = nl.ndarray((par_dim(k_seq_tile_size), k_seq_n_tiles, d_head), dtype=kernel_dtype, buffer=nl.sbuf)
    ip_v = nl.arange(k_seq_tile_size)[:, None]
    if_v = nl.arange(d_head_tile_size)[None, :]
    for i_k_seq_tile in nl.affine_range(k_seq_n_tiles):
        v_local[ip_v, i_k_seq_tile, if_v] = nl.load(v_ref[i_k_seq_tile * k_seq_tile_size + ip_v, if_v])

    # Q^T (scaled) and K^T tiles: [d_head, 128], transposed on the Tensor Engine
    ip_qk_in = nl.arange(128)[:, None]
    if_qk_in = nl.arange(d_head_tile_size)[None, :]
    ip_q = nl.arange(d_head_tile_size)[:, None]
    if_q = nl.arange(q_seq_tile_size)[None, :]
    q_local = nl.ndarray((q_seq_n_tiles, par_dim(d_head_tile_size), q_seq_tile_size), dtype=kernel_dtype,
                         buffer=nl.sbuf)
    for i_q_seq_tile in nl.affine_range(q_seq_n_tiles):
        q_tile = nl.load(q_ref[i_q_seq_tile * q_seq_tile_size + ip_qk_in, if_qk_in])
        q_local[i_q_seq_tile, ip_q, if_q] = nl.multiply(nisa.nc_transpose(q_tile), softmax_scale)

    ip_k = nl.arange(d_head_tile_size)[:, None]
    if_k = nl.arange(k_seq_tile_size)[None, :]
    k_local = nl.ndarray((k_seq_n_tiles, par_dim(d_head_tile_size), k_seq_tile_size), dtype=kernel_dtype,
                         buffer=nl.sbuf)
    for i_k_seq_tile in nl.affine_range(k_seq_n_tiles):
        k_tile = nl.load(k_ref[i_k_seq_tile * k_seq_tile_size + ip_qk_in, if_qk_in])
        k_local[i_k_seq_tile, ip_k, if_k] = nl.copy(nisa.nc_transpose(k_tile))

    for i_q_seq_tile in nl.affine_range(q_seq_n_tiles):
        # the whole score row of this query tile, and its per-key-tile maxima
        qk_res_buf = nl.ndarray((par_dim(q_seq_tile_size), seqlen), dtype=kernel_dtype, buffer=nl.sbuf)
        max_res = nl.ndarray((par_dim(q_seq_tile_size), k_seq_n_tiles), dtype=kernel_dtype, buffer=nl.sbuf)
        ip_max = nl.arange(q_seq_tile_size)[:, None]
        if_max = nl.arange(k_seq_n_tiles)[None, :]
        ip_qk = nl.arange(q_seq_tile_size)[:, None]
        if_qk = nl.arange(k_seq_tile_size)[None, :]

        for i_k_seq_tile in nl.affine_range(k_seq_n_tiles):
            ##############################################################
            # Step 2. matmul(stationary=Q^T, moving=K^T, contract=d_head) -> scores [q, k] in PSUM
            ##############################################################
            qk_psum = nl.zeros((par_dim(q_seq_tile_size), k_seq_tile_size), dtype=nl.float32, buffer=nl.psum)
            qk_psum[ip_qk, if_qk] += nisa.nc_matmul(stationary=q_local[i_q_seq_tile, ip_q, if_q],
                                                    moving=k_local[i_k_seq_tile, ip_k, if_k])

            # PSUM -> SBUF
            qk_res_buf[ip_qk, i_k_seq_tile * k_seq_tile_size + if_qk] = nl.copy(qk_psum[ip_qk, if_qk],
                                                                                dtype=kernel_dtype)

            ###################################
            # Step 3. the row maximum of this key tile
            ###################################
            max_res[ip_max, i_k_seq_tile] = nisa.tensor_reduce(
                op=nl.max, data=qk_res_buf[ip_qk, i_k_seq_tile * k_seq_tile_size + if_qk], axis=1,
                keepdims=True)

        # -max over the whole row: the bias of the exponential
        neg_max_res_final = nisa.tensor_reduce(op=nl.max, data=max_res[ip_max, if_max], axis=1, negate=True,
                                               keepdims=True)

        ###################################
        # Step 4. softmax numerator and row sums
        ###################################
        ip_softmax = nl.arange(q_seq_tile_size)[:, None]
        if_softmax = nl.arange(seqlen)[None, :]
        exp_res = nisa.activation(op=nl.exp, data=qk_res_buf[ip_softmax, if_softmax], bias=neg_max_res_final,
                                  scale=1.0)
        sum_res = nisa.tensor_reduce(op=nl.add, data=exp_res, axis=1, keepdims=True)
        sum_reciprocal = nl.reciprocal(sum_res)

        softmax_res = nl.ndarray((par_dim(q_seq_tile_size), seqlen), dtype=kernel_dtype, buffer=nl.sbuf)
        softmax_res[ip_softmax, if_softmax] = nl.copy(exp_res, dtype=kernel_dtype)

        ###################################
        # Step 5. transpose the probabilities: key axis on partitions
        ###################################
        trans_softmax_res = nl.ndarray((par_dim(k_seq_tile_size), k_seq_n_tiles, q_seq_tile_size),
                                       dtype=kernel_dtype, buffer=nl.sbuf)
        ip_scores_t = nl.arange(k_seq_tile_size)[:, None]
        if_scores_t = nl.arange(q_seq_tile_size)[None, :]
        ip_scores = nl.arange(q_seq_tile_size)[:, None]
        if_scores = nl.arange(k_seq_tile_size)[None, :]
        for i_k_seq_tile in nl.affine_range(k_seq_n_tiles):
            trans_softmax_res[ip_scores_t, i_k_seq_tile, if_scores_t] = nisa.nc_transpose(
                softmax_res[ip_scores, i_k_seq_tile * k_seq_tile_size + if_scores])

        ######################################################################
        # Step 6. matmul(stationary=P^T, moving=V, contract=seqlen_k) -> [q, d_head] in PSUM
        ######################################################################
        ip_out = nl.arange(q_seq_tile_size)[:, None]
        if_out = nl.arange(d_head_tile_size)[None, :]
        attn_res_psum = nl.zeros((par_dim(q_seq_tile_size), d_head_tile_size), dtype=nl.float32, buffer=nl.psum)
        for i_k_seq_tile in nl.affine_range(k_seq_n_tiles):
            attn_res_psum[ip_out, if_out] += nisa.nc_matmul(
                stationary=trans_softmax_res[ip_scores_t, i_k_seq_tile, if_scores_t],
                moving=v_local[ip_v, i_k_seq_tile, if_v])

        # normalise by the row sums ([128, 1] column broadcast) on the way out of PSUM
        attn_res_div = nl.multiply(attn_res_psum[ip_out, if_out], sum_reciprocal, dtype=kernel_dtype)
        nl.store(out_ref[i_q_seq_tile * q_seq_tile_size + ip_out, if_out], value=attn_res_div)

    return out_ref
