"""Place the traced SBUF and PSUM tiles: live ranges over the flat program, then first fit.

A tile is live from its first to its last reference.  A tile created outside
a dynamic loop and referenced inside it is live for the whole loop (every
iteration uses it); a tile created inside the body is a fresh tile per
iteration, so it may share bytes with tiles of other iterations.  PSUM tiles
take whole 2 KiB banks, as matmul accumulation groups need.  Tiles that
nothing references (an op retargeted by an assignment) are not placed.
"""

from __future__ import annotations

from dataclasses import dataclass

from tusk.frontend.errors import TraceError
from tusk.frontend.tensors import Tensor
from tusk.frontend.tracer import LoopBegin, LoopEnd, Op, Tracer
from tusk.ir.arch import PSUM_BANK_BYTES, get_arch

ALIGN = 64  # bytes: DMA-friendly tile starts
MAX_SHARING_ROUNDS = 64  # placements tried while alloc_blocks finds block axes to share (one a round: a
# compiler-printed kernel's PSUM tile has five) or alloc_spill moves a tensor to HBM (one a round)


@dataclass
class Live:
    tensor: Tensor
    start: int
    end: int
    site: int


def live_ranges(tr: Tracer) -> list[Live]:
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    by_id: dict[int, Tensor] = {}
    # the dynamic loops open at a tile's first and last reference, outermost first: only those can stretch
    # its range (looking at every loop for every tile grew with the product of the two)
    at_first: dict[int, tuple[int, ...]] = {}
    at_last: dict[int, tuple[int, ...]] = {}
    spans: list[list[int]] = []  # [begin, end] positions, in the order the loops begin
    open_: tuple[int, ...] = ()
    for pos, entry in enumerate(tr.prog):
        if isinstance(entry, LoopBegin):
            open_ = (*open_, len(spans))
            spans.append([pos, pos])
        elif isinstance(entry, LoopEnd):
            spans[open_[-1]][1] = pos
            open_ = open_[:-1]
        elif isinstance(entry, Op):
            for v in (*entry.reads, *entry.writes, *(x.vector for x in (*entry.reads, *entry.writes) if x.vector is not None)):
                t = v.tensor.alias_of or v.tensor  # a reinterpretation is its tile's bytes
                if t.on_chip:
                    key = id(t)
                    by_id[key] = t
                    if key not in first:
                        first[key], at_first[key] = pos, open_
                    last[key], at_last[key] = pos, open_
    out = []
    for key, t in by_id.items():
        s, e = first[key], last[key]
        outside = at_first[key]
        if t is tr.identity:
            s, outside = -1, ()
        # a loop made after the tile (site: the position of the next entry when it was made) that holds a
        # reference holds the tile for all its iterations; the outermost such loop covers the inner ones
        for chain in (outside, at_last[key]):
            b, le = next((spans[k] for k in chain if t.site <= spans[k][0]), (s, e))
            s, e = min(s, b), max(e, le)
        out.append(Live(t, s, e, t.site))
    if tr.identity is not None and id(tr.identity) in by_id:
        out.append(Live(tr.identity_iota, -1, -1, -1))  # the identity is built from it before anything else
    out.sort(key=lambda x: (x.start, x.site))
    return out


class MemoryFull(TraceError):
    """The tiles do not fit in ``memory`` ("sbuf" or "psum")."""

    def __init__(self, memory: str, message: str):
        super().__init__(message)
        self.memory = memory


# what may write a PSUM tensor that moves to SBUF: no instruction that only PSUM takes (a matmul's result)
SBUF_WRITERS = frozenset({"memset", "tensor_tensor", "tensor_scalar", "copy", "activation"})


def sums_to_sbuf(tr: Tracer, arch: str | None) -> bool:
    """Move to SBUF the PSUM tensors that no matmul writes: the sums ``acc[...] += nisa.nc_matmul(...)`` adds
    each matmul's fresh PSUM bank into (docs/frontend.md, PSUM accumulation), zero-filled and read as before.
    In NKI the matmuls accumulate in the sum's own bank; here each also needs a bank of its own, so sums
    that fill PSUM leave none.  Only when PSUM holds the kernel's own tiles (those banks left out): a
    kernel whose tiles overflow PSUM in NKI too stays refused.  The DVE adds and the reads take SBUF alike,
    and the values are the same (float32 either way).  True when some tensor moved."""
    if not tr.sum_parts:
        return False
    try:
        _place(tr, arch, only="psum", skip=tr.sum_parts)
    except MemoryFull:
        return False
    finally:
        for t in tr.tensors:
            t.addr = None
    kinds: dict[int, set[str]] = {}
    for e in tr.prog:
        if isinstance(e, Op):
            for w in e.writes:
                kinds.setdefault(id(w.tensor.alias_of or w.tensor), set()).add(e.kind)
    aliased = {id(t.alias_of) for t in tr.tensors if t.alias_of is not None}
    moved = False
    for t in tr.tensors:
        if t.memory == "psum" and t.alias_of is None and id(t) not in aliased and \
                kinds.get(id(t), {"matmul"}) <= SBUF_WRITERS:
            t.memory = "sbuf"
            moved = True
    return moved


def place(tr: Tracer, arch: str | None = None) -> dict[str, int]:
    """Set ``addr`` on every referenced on-chip tensor; returns peak bytes per partition by memory.  When the
    tiles do not fit, block axes that a loop uses one block at a time get one physical block (alloc_blocks),
    or, PSUM full, the sums no matmul writes move to SBUF (:func:`sums_to_sbuf`), or, SBUF full, the largest
    SBUF tensor is kept in HBM (alloc_spill), and the tiles are placed again."""
    from tusk.frontend.alloc_blocks import share_blocks
    from tusk.frontend.alloc_spill import spill

    first: dict[str, MemoryFull] = {}  # the first error of each memory: what the kernel itself did not fit
    for _ in range(MAX_SHARING_ROUNDS):  # a tensor of two block axes, each walked by a loop, takes two rounds
        try:
            return _place(tr, arch)
        except MemoryFull as e:
            first.setdefault(e.memory, e)
            if not (share_blocks(tr) or (e.memory == "psum" and sums_to_sbuf(tr, arch))
                    or (e.memory == "sbuf" and spill(tr))):
                raise _reported(e, first) from None
        for t in tr.tensors:
            t.addr = None
    try:
        return _place(tr, arch)
    except MemoryFull as e:
        raise _reported(e, first) from None


def _reported(e: MemoryFull, first: dict[str, MemoryFull]) -> MemoryFull:
    """The kernel's own tiles that did not fit: PSUM's when its sums moved to SBUF and SBUF is full, else the
    first SBUF error (a staging tile of a spill is no tile of the kernel's)."""
    if e.memory == "sbuf" and "psum" in first:
        return first["psum"]
    return first.get(e.memory, e)


def _place(tr: Tracer, arch: str | None, only: str | None = None, skip: set[int] = frozenset()) -> dict[str, int]:
    """First fit of the live tiles (of memory ``only``, when given; tensors whose id() ``skip`` holds left out)."""
    a = get_arch(arch)
    capacity = {"sbuf": a.sb_bytes_per_partition - a.sb_reserved, "psum": a.psum_bytes_per_partition}
    active: dict[str, list[tuple[int, int, int]]] = {"sbuf": [], "psum": []}  # (addr, size, end)
    peak = {"sbuf": 0, "psum": 0}
    for live in live_ranges(tr):
        t = live.tensor
        mem = t.memory
        if (only is not None and mem != only) or id(t) in skip:
            continue
        size = t.partition_bytes
        if mem == "psum":
            size = -(-size // PSUM_BANK_BYTES) * PSUM_BANK_BYTES
        else:
            size = -(-size // ALIGN) * ALIGN
        active[mem] = [x for x in active[mem] if x[2] >= live.start]
        addr = 0
        for start, sz, _ in sorted(active[mem]):
            if addr + size <= start:
                break
            addr = max(addr, start + sz)
        if addr + size > capacity[mem]:
            used = sum(sz for _, sz, _ in active[mem])
            shared = (" (the programs of a launch that meet at nisa.core_barrier / nisa.sendrecv take turns in "
                      "Tusk's one stream, so the tiles each keeps across a meeting share one "
                      f"{mem.upper()}; on the device each core has its own)") if tr.phased else ""
            raise MemoryFull(mem, f"{tr.filename}:{_line(tr, live.site)}: {mem.upper()} is full: tile {t.name} "
                             f"{t.dtype}{list(t.shape)} needs {size} bytes per partition, {used} of "
                             f"{capacity[mem]} are held by {len(active[mem])} live tiles{shared}")
        t.addr = addr
        active[mem].append((addr, size, live.end))
        peak[mem] = max(peak[mem], addr + size)
    return peak


def _line(tr: Tracer, site: int) -> int:
    for entry in tr.prog[max(site, 0):]:
        if getattr(entry, "line", 0):
            return entry.line
    return 0
