"""address_rotation_dram: internal DRAM buffers laid out in a capped window (seed 002, dram_rotation).

The driver (dispatch, what follows a rotation) is :mod:`~tusk.stages.address_rotation`'s.

Candidates are internal DRAM memory locations (tensor kind Internal 7 or
InternalInterface 9) accessed from more than one basic block (live across
blocks); each must be allocated.  They are laid at consecutive aligned
offsets from the DRAM high-water mark (rounded up to the runtime page), as
long as they fit the window of ``dram_rotation_size`` GiB.  The new region
is above every allocated DRAM byte of the module, so no other buffer can be
there; a candidate that overlaps another allocated DRAM memory location (an
alias, possibly in another function) stays put.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from tusk.ir.enums import FnAttr, Mem, TensorKind
from tusk.ir.errors import PassError
from tusk.ir.module import Function, Module
from tusk.stages.address_rotation import AddressRotation, Job
from tusk.stages.base import OptionError, option

PAGE_MB = 64          # runtime page size (assumption: the window starts on a page boundary)
ALIGNMENT = 64        # bytes between consecutive buffers (assumption; the backend's default is 8)
MAX_GIB = 8
TOO_BIG = "Setting rotation maximum memory size beyond 8G can cause runtime to complain"


def _ends(module: Module) -> list[tuple[Function, int, int, int]]:
    """(function, memloc, start, end) of every allocated DRAM memory location of the module."""
    out = []
    for fn in module.functions:
        ml = fn.memlocs
        for m in np.flatnonzero((ml["mtype"] == Mem.DRAM) & (ml["addr"] >= 0)).tolist():
            a = int(ml.get("addr", m))
            out.append((fn, m, a, a + int(ml.get("pbytes", m))))
    return out


def candidates(fn: Function) -> list[int]:
    """Internal DRAM memory locations of ``fn`` accessed from more than one block."""
    ml, sets = fn.memlocs, fn.sets
    kind = sets["kind"][ml["set"]] if len(ml) else np.zeros(0)
    internal = np.flatnonzero((ml["mtype"] == Mem.DRAM) & np.isin(kind, (TensorKind.Internal,
                                                                           TensorKind.InternalInterface)))
    if not len(internal):
        return []
    owner = np.repeat(np.arange(len(fn.insts), dtype=np.int64), fn.insts["nops"].astype(np.int64))
    m = fn.operands["memloc"][:len(owner)]
    out = []
    for c in internal.tolist():
        blocks = np.unique(fn.insts["block"][owner[m == c]])
        if len(blocks) < 2:
            continue  # isSingleBBAccessed
        if ml.get("addr", c) < 0:
            raise PassError(f"Internal DRAM node not allocated: {fn.strings[ml.get('name', c)]} in function {fn.name}")
        out.append(c)
    return out


def dram_rotation(module: Module, functions: list[int], size_gib: int, log: logging.Logger) -> int:
    """Lay out the candidates of the given functions of ``module`` (in place); returns how many moved."""
    if size_gib > MAX_GIB:
        raise PassError(TOO_BIG)
    ends = _ends(module)
    hwm = max((e for _, _, _, e in ends), default=0)
    log.info("Runtime page size at %d MB", PAGE_MB)
    log.info("DRAM hwm before rotation %d", hwm)
    page = PAGE_MB << 20
    base = -(-hwm // page) * page
    window = (size_gib << 30) if size_gib >= 0 else hwm
    cursor = base
    moved = 0
    for k in functions:
        fn = module.functions[k]
        for m in candidates(fn):
            a, e = int(fn.memlocs.get("addr", m)), int(fn.memlocs.get("addr", m) + fn.memlocs.get("pbytes", m))
            if any((f is not fn or k != m) and s < e and a < t for f, k, s, t in ends):
                continue  # an alias of another DRAM buffer: moving one side would change what the other sees
            size = -(-(e - a) // ALIGNMENT) * ALIGNMENT
            if cursor + size > base + window:
                log.info("DRAM rotation window of %d bytes is full; %s stays at %d", window,
                         fn.strings[fn.memlocs.get("name", m)], a)
                continue
            fn.memlocs.set("addr", m, cursor)
            cursor += size
            moved += 1
    return moved


@dataclass(frozen=True)
class AddressRotationDRAM(AddressRotation):
    """address_rotation_dram: internal DRAM buffers live across blocks laid out in a capped window."""

    name = "address_rotation_dram"
    space = "dram"

    dram_rotation_size: int = option(-1, "window in GiB for rotated DRAM buffers (at most 8; -1: the DRAM "
                                          "high-water mark before rotation)")
    disable_dram_rotation: bool = option(False, "leave DRAM buffers where they are")

    def __post_init__(self) -> None:
        super().__post_init__()
        if isinstance(self.dram_rotation_size, int) and self.dram_rotation_size > MAX_GIB:
            raise OptionError(f"option {self.name}.dram_rotation_size: {TOO_BIG}")

    def _jobs(self, module: Module) -> list[Job]:
        if self.disable_dram_rotation:
            return []
        return [Job(k, "dram") for k, fn in enumerate(module.functions) if FnAttr.ROTATE_DRAM in self.flags(module, fn)]

    def _rotate(self, out: Module, jobs: list[Job], known: dict | None = None) -> dict[int, int]:
        """All the jobs' functions in one layout: the window is the module's."""
        dram = [j.fn for j in jobs]
        before = {k: out.functions[k].memlocs["addr"].copy() for k in dram}
        dram_rotation(out, dram, self.dram_rotation_size, self.log)
        return {k: int((out.functions[k].memlocs["addr"] != before[k]).sum()) for k in dram}
