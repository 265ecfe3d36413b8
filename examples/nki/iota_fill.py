"""Constant tiles and generated indices: nl.full, nisa.memset, nisa.iota, unrolled loops (no single tutorial:
the nki.isa / nki.language API pages).

out[r, j] = 2 * x[r, j] + (r * W + j) / 1024 + 1.5
"""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def nki_iota_fill(x_tensor):
    """x_tensor [M, W], M a multiple of 128 and W <= 512."""
    out_tensor = nl.ndarray(x_tensor.shape, dtype=x_tensor.dtype, buffer=nl.shared_hbm)
    rows, width = x_tensor.shape
    ip = nl.arange(128)[:, None]
    jf = nl.arange(width)[None, :]

    two = nl.full((128, width), 2.0, dtype=nl.float32, buffer=nl.sbuf)
    half = nisa.memset(shape=(128, width), value=0.5, dtype=nl.float32)

    # a Python loop: unrolled while tracing, one copy of the body per row tile
    for i in range(rows // 128):
        # the flat element index of every element of this tile, as int32, then float32
        ramp_i = nisa.iota(i * 128 * width + ip * width + jf, dtype=nl.int32)
        ramp = nl.copy(ramp_i, dtype=nl.float32)

        acc = nl.multiply(nl.load(x_tensor[i * 128 + ip, jf]), two)
        acc = nl.add(acc, nl.multiply(ramp, 1.0 / 1024))
        for _ in nl.static_range(3):
            acc = nl.add(acc, half)
        nl.store(out_tensor[i * 128 + ip, jf], value=acc)

    return out_tensor
