"""The selective-scan (SSM) step of a Mamba layer (after the NKI "Fused Mamba" tutorial, its v2 loop order).

For each batch, channel tile (channels on partitions, time on the free
axis) and state n:

    h[t] = exp(delta[t] * A[n]) * h[t-1] + delta[t] * u[t] * B[n, t]
    y[t] += C[n, t] * h[t]

The tutorial's scan is one hardware instruction (nisa.tensor_tensor_scan);
here it is the recurrence itself, a sequential_range loop over time whose
body reads column t and writes column t + 1.  The activation's scale is a
number in KLR, so exp(delta * A) multiplies by the A column first.
"""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def mamba_v2(delta, u, A, B, C):
    """delta, u [batch, channels, seq_len]; A [channels, state_size]; B, C [batch, state_size, seq_len]."""
    batch_size, channels, seq_len = delta.shape
    output = nl.ndarray((batch_size, channels, seq_len), dtype=delta.dtype, buffer=nl.shared_hbm)
    _, state_size = A.shape
    assert channels % 128 == 0

    channel_psize = nl.tile_size.pmax
    n_channel_tile = channels // channel_psize

    for i_batch in nl.affine_range(batch_size):
        for i_channel_tile in nl.affine_range(n_channel_tile):
            channel_start = i_channel_tile * channel_psize

            # the sum over states, accumulated in SBUF
            scanC_accum = nl.zeros((nl.par_dim(channel_psize), seq_len), dtype=delta.dtype, buffer=nl.sbuf)

            # delta and u are loaded once and reused by every state
            delta_i = nl.load(delta[i_batch, channel_start:channel_start + channel_psize, 0:seq_len])
            u_i = nl.load(u[i_batch, channel_start:channel_start + channel_psize, 0:seq_len])
            deltaU = nisa.tensor_tensor(delta_i, u_i, op=nl.multiply)

            for i_state in nl.affine_range(state_size):
                A_i = nl.load(A[channel_start:channel_start + channel_psize, i_state:i_state + 1])

                # Steps 1 and 2: exp(delta * A), A a per-partition scalar
                deltaA_pre = nisa.tensor_scalar(data=delta_i, op0=nl.multiply, operand0=A_i)
                deltaA = nisa.activation(op=nl.exp, data=deltaA_pre)

                # Step 3: delta * u * B, the B row broadcast to all channels
                B_i = nl.load(B[i_batch, i_state:i_state + 1, 0:seq_len])
                B_i_bcast = B_i.broadcast_to((channel_psize, seq_len))
                deltaBu = nisa.tensor_tensor(deltaU, B_i_bcast, op=nl.multiply)

                # Step 4: the scan along time, h[0] = deltaBu[0]
                scan_res = nl.ndarray((nl.par_dim(channel_psize), seq_len), dtype=nl.float32, buffer=nl.sbuf)
                scan_res[0:channel_psize, 0:1] = nl.copy(deltaBu[0:channel_psize, 0:1])
                for t in nl.sequential_range(seq_len - 1):
                    decayed = nisa.tensor_tensor(deltaA[0:channel_psize, t + 1:t + 2],
                                                 scan_res[0:channel_psize, t:t + 1], op=nl.multiply)
                    scan_res[0:channel_psize, t + 1:t + 2] = nisa.tensor_tensor(
                        decayed, deltaBu[0:channel_psize, t + 1:t + 2], op=nl.add)

                # Step 5: C * h
                C_i = nl.load(C[i_batch, i_state:i_state + 1, 0:seq_len])
                C_i_bcast = C_i.broadcast_to((channel_psize, seq_len))
                scanC = nisa.tensor_tensor(scan_res, C_i_bcast, op=nl.multiply)

                # Step 6: sum over states
                scanC_accum[0:channel_psize, 0:seq_len] += scanC

            nl.store(output[i_batch, channel_start:channel_start + channel_psize, 0:seq_len],
                     value=scanC_accum[0:channel_psize, 0:seq_len])

    return output
