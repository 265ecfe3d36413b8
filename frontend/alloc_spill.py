"""SBUF tensors kept in HBM when the tiles do not fit: a spill, as NKI's compiler makes one.

Compiler-printed kernels (AccelOpt's NKIBench) declare an SBUF tensor per value of the whole computation:
``nl.ndarray((4, 8, 16, 4, 2, nl.par_dim(128), 512), buffer=nl.sbuf)`` written by one loop nest and read by
the next, 8 MiB per partition.  No block of it can be shared (alloc_blocks: every block is live between the
two nests), and the compiler that printed them spills such tensors to HBM.  :func:`spill` does so for the
largest SBUF tensor that instructions only read and write through plain access patterns, and that the kernel
did not place itself (a direct allocation: the compiler spills only what it places): it becomes a
private HBM tensor of the same physical layout (partition axis first, so every access keeps its offsets and
strides), and each instruction that touched it works on an SBUF staging tile of its own, as large as its
access: a DMA loads what it reads just before it, a DMA stores what it writes just after it.  The values are
the same; only the placement changes.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tusk.frontend.tensors import Tensor, View
from tusk.frontend.tracer import Op, Tracer

MIN_SPILL_BYTES = 4096  # per partition: smaller tensors are not worth a DMA per access (nor a round)


def spill(tr: Tracer) -> bool:
    """Move the largest SBUF tensor that can be kept in HBM there (see the module docstring); True when one
    moved."""
    views: dict[int, list[View]] = {}
    unfit: set[int] = set()
    for e in tr.prog:
        if isinstance(e, Op):
            for v in (*e.params.values(), *e.reads, *e.writes):
                if isinstance(v, View):
                    _note(v, views, unfit)
    kept = unfit | tr.spill_staging | tr.directly_allocated
    candidates = [t for t in tr.tensors if t.memory == "sbuf" and id(t) in views and id(t) not in kept
                  and t.alias_of is None and t is not tr.identity and t is not tr.identity_iota
                  and t.partition_bytes >= MIN_SPILL_BYTES]
    if not candidates:
        return False
    _move(tr, max(candidates, key=lambda t: t.partition_bytes))
    return True


def _note(v: View, views: dict[int, list[View]], unfit: set[int]) -> None:
    """Record an access; a tensor reached through anything but a plain access pattern (a gather's rows, a
    runtime offset, a reinterpretation, a broadcast stride) stays where it is."""
    t = v.tensor
    views.setdefault(id(t), []).append(v)
    if v.vector is not None or getattr(v, "scalar", None) is not None or t.alias_of is not None or \
            any(s <= 0 and n > 1 for s, n in v.dims):
        unfit.update({id(t), id(t.alias_of)})
    if v.vector is not None:
        unfit.add(id(v.vector.tensor))


def _move(tr: Tracer, t: Tensor) -> None:
    phys = tuple(t.shape[k] for k in t.layout)
    hbm = Tensor(tr.unique(f"{t.name}.spill"), phys, t.dtype, "hbm", role="internal", site=t.site)
    tr.tensors.append(hbm)
    prog: list[Any] = []
    moved: dict[int, int] = {}  # old program position -> new
    for pos, e in enumerate(tr.prog):
        moved[pos] = len(prog)
        if not isinstance(e, Op) or not any(isinstance(v, View) and v.tensor is t
                                            for v in (*e.params.values(), *e.reads, *e.writes)):
            prog.append(e)
            continue
        before: list[Op] = []
        after: list[Op] = []
        swap: dict[int, View] = {}
        for v in (*e.params.values(), *e.reads, *e.writes):
            if not isinstance(v, View) or v.tensor is not t or id(v) in swap:
                continue
            stage = Tensor(tr.unique("spill"), tuple(n for _, n in v.dims), t.dtype, "sbuf",
                           site=len(prog))
            tr.tensors.append(stage)
            tr.spill_staging.add(id(stage))
            sv = stage.view()
            hv = replace(v, tensor=hbm, checks=())
            if any(r is v for r in e.reads):
                before.append(Op("dma", {"dst": sv, "src": hv}, e.line, (hv,), (sv,)))
            if any(w is v for w in e.writes):
                after.append(Op("dma", {"dst": hv, "src": sv}, e.line, (sv,), (hv,)))
            swap[id(v)] = sv
        e.params = {k: swap.get(id(x), x) if isinstance(x, View) else x for k, x in e.params.items()}
        e.reads = tuple(swap.get(id(x), x) for x in e.reads)
        e.writes = tuple(swap.get(id(x), x) for x in e.writes)
        prog += [*before, e, *after]
    moved[len(tr.prog)] = len(prog)
    for x in tr.tensors:
        if x.site >= 0 and id(x) not in tr.spill_staging:
            x.site = moved.get(x.site, len(prog))
    tr.prog[:] = prog
