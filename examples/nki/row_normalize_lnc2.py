"""Row normalisation split across the two NeuronCores of an LNC-2 launch, in the NKI 2.x API.

    y = x / sum(x, axis=1),    m = max(x, axis=1)

Each core (program ``nl.program_id(0)`` of a launch grid of 2) owns one half of the columns.  The row
sums need both halves: each core reduces its half and swaps the partial sums with the other core
(``nisa.sendrecv``).  The row maxima go through shared HBM instead: each core writes its partial maxima
to its column of a scratch tensor, the cores meet (``nisa.core_barrier``), and each reads the other's.
Shows: a launch grid of two programs, `nisa.sendrecv`, `nisa.core_barrier` on shared HBM,
`nisa.tensor_reduce` with `keepdims`, `nisa.tensor_tensor` between [P, 1] columns, `nisa.reciprocal`.
"""

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def nki_row_normalize_lnc2(x):
    """x [128, cols] float32, cols even, launched on a grid of 2; returns (y [128, cols], m [128, 1])."""
    rows, cols = x.shape
    half = cols // 2
    core = nl.program_id(0)
    other = 1 - core
    y = nl.ndarray((rows, cols), dtype=nl.float32, buffer=nl.shared_hbm)
    m = nl.ndarray((rows, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    maxima = nl.ndarray((rows, 2), dtype=nl.float32, buffer=nl.shared_hbm)  # one column per core

    part = nl.ndarray((rows, half), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=part, src=x[:, core * half:(core + 1) * half])
    top = nl.ndarray((rows, 1), dtype=nl.float32, buffer=nl.sbuf)  # this half's row maxima, kept for later
    nisa.tensor_reduce(dst=top, op=nl.maximum, data=part, axis=1, keepdims=True)

    # row sums: this core's half, plus the other core's half received by sendrecv
    mine = nl.ndarray((rows, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_reduce(dst=mine, op=nl.add, data=part, axis=1, keepdims=True)
    theirs = nl.ndarray((rows, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.sendrecv(src=mine, dst=theirs, send_to_rank=other, recv_from_rank=other, pipe_id=0)
    total = nl.ndarray((rows, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=total, data1=mine, data2=theirs, op=nl.add)
    inv = nl.ndarray((rows, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.reciprocal(dst=inv, data=total)
    nisa.tensor_scalar(dst=part, data=part, op0=nl.multiply, operand0=inv)
    nisa.dma_copy(dst=y[:, core * half:(core + 1) * half], src=part)

    # row maxima: each core's partial maxima through shared HBM, after both have written theirs
    nisa.dma_copy(dst=maxima[:, core:core + 1], src=top)
    nisa.core_barrier(maxima, (0, 1))
    other_top = nl.ndarray((rows, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=other_top, src=maxima[:, other:other + 1])
    nisa.tensor_tensor(dst=top, data1=top, data2=other_top, op=nl.maximum)
    if core == 0:
        nisa.dma_copy(dst=m, src=top)
    return y, m

