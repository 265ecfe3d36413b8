"""``nki.lnc`` (NKI 0.8.0): the exchange and the barrier between the paired NeuronCores of a Logical
NeuronCore, which NKI 0.8.0 moved here from ``nki.isa`` (whose entry points stay, deprecated).

``core_barrier`` is ``nisa.core_barrier``.  ``sendrecv`` has no ``pipe_id``: NKI pairs the Nth sendrecv of one
rank with the Nth of its peer, so each program's calls are numbered in program order and that number is the
pipe they meet on (:mod:`~tusk.frontend.phases`).  ``sendrecv_compute`` writes ``reduce_op(src, peer)`` into
``dst``: the exchange into a fresh tile, then a DVE ``tensorTensor``.  ``priority=`` chooses a DMA queue
(the same numbers).
"""

from __future__ import annotations

from typing import Any

from tusk.frontend import phases
from tusk.frontend.errors import unsupported
from tusk.frontend.nki import isa_ops as ops
from tusk.frontend.nki import isa_v2
from tusk.frontend.nki.isa_ops import tile
from tusk.frontend.nki.isa_signature import dma_engine, documented, engine, missing_name
from tusk.frontend.tracer import current

# the per-program count of nki.lnc.sendrecv calls (swapped with the program: frontend/phases.py OWN)
COUNTER = "_tusk_lnc_sendrecvs"


@documented("nki.lnc.core_barrier")
def core_barrier(data, cores, engine=engine.gpsimd, name=None):
    """``nisa.core_barrier``: the programs of the launch meet after writing ``data``."""
    isa_v2.core_barrier(data, cores, engine=engine)


def _pipe() -> int:
    """This program's next positional pairing (a pipe id no ``nisa.sendrecv`` pipe_id takes: negative)."""
    tr = current()
    n = getattr(tr, COUNTER, None) or 0
    setattr(tr, COUNTER, n + 1)
    return -(n + 1)


@documented("nki.lnc.sendrecv")
def sendrecv(src, dst, send_to_rank, recv_from_rank, dma_engine=dma_engine.dma, name=None, priority=None):
    """``src`` to program ``send_to_rank``'s ``dst``, program ``recv_from_rank``'s ``src`` into ``dst``; the
    Nth call of each program meets the Nth of the others."""
    call = "nki.lnc.sendrecv"
    phases.sendrecv(call, tile(dst, f"{call} dst"), tile(src, f"{call} src"), send_to_rank, recv_from_rank,
                    _pipe())


@documented("nki.lnc.sendrecv_compute")
def sendrecv_compute(src, dst, send_to_rank, recv_from_rank, reduce_op, name=None, priority=None):
    """``dst = reduce_op(src, peer's src)`` (nl.add, nl.maximum or nl.minimum), the peer's tile received as
    ``sendrecv`` receives it."""
    call = "nki.lnc.sendrecv_compute"
    op = ops.alu(reduce_op, f"{call} reduce_op")
    if op not in ("add", "max", "min"):
        raise unsupported(f"{call} reduce_op={ops.op_label(reduce_op)} (nl.add, nl.maximum or nl.minimum)")
    s, d = tile(src, f"{call} src"), tile(dst, f"{call} dst")
    peer = ops.fresh(s.shape, s.dtype)
    phases.sendrecv(call, peer, s, send_to_rank, recv_from_rank, _pipe())
    ops.tensor_tensor(call, d, s, peer, reduce_op)


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    return missing_name("nki.lnc", "nki.lnc", name)
