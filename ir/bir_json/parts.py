"""A document in parts rendered apart (on several workers) and joined byte for byte."""

from __future__ import annotations

import io
import itertools
from typing import BinaryIO

from tusk.ir.bir_json.writer import END, Sink, write_module
from tusk.ir.module import Module

# ---------------------------------------------------------------------- parts and join
#
# A part is the bytes the writer emits while its position (the module-wide row of the next instruction
# it writes: functions' rows counted one after another) lies in the part's range of rows.  The position
# only grows while the writer streams, so the parts, joined in order, are the whole document; a part is
# rendered from the module alone (each worker skips the instructions of the other parts), and the writer
# spells every chunk of instructions the same way whichever part renders it (chunks do not straddle parts:
# a chunk belongs to the part of its first row).


def part_bounds(module: Module, n: int) -> list[tuple[int, int]]:
    """The module-wide row ranges of ``n`` parts of about equal instruction counts (the last one open)."""
    if n < 1:
        raise ValueError(f"a module is written in at least one part, not {n}")
    total = module.n_insts()
    cuts = [k * total // n for k in range(n)] + [END]
    cuts[0] = -1
    return list(itertools.pairwise(cuts))



def write_part(module: Module, k: int, n: int, fh: BinaryIO) -> None:
    """Stream part ``k`` of ``n`` of ``module``'s BIR-JSON into the binary file handle ``fh``."""
    if not 0 <= k < n:
        raise ValueError(f"part {k} of {n} does not exist")
    lo, hi = part_bounds(module, n)[k]
    write_module(module, Sink(fh, lo, hi))


def render_part(module: Module, k: int, n: int) -> bytes:
    """Part ``k`` of ``n`` of ``module``'s BIR-JSON: ``join([render_part(m, k, n) for k in range(n)])``
    is ``dumps(m)`` encoded, byte for byte; each part can be rendered in another process."""
    buf = io.BytesIO()
    write_part(module, k, n, buf)
    return buf.getvalue()


def render_parts(module: Module, n: int) -> list[bytes]:
    """All ``n`` parts of ``module``'s BIR-JSON, in order (:func:`render_part` of each, in this process)."""
    return [render_part(module, k, n) for k in range(n)]


def join(parts: list[bytes]) -> bytes:
    """The BIR-JSON document of its parts (in the order :func:`render_part` numbers them)."""
    return b"".join(parts)

