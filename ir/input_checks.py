"""Size checks a BIR-JSON reader makes before a value reaches a numpy column (docs/bir-json.md, "Bad input").

Each field is range-checked on its own when read; these checks cover what single values cannot: the
products and sums later code computes from them (a tensor's bytes from ``tensor_shape``, a location's
extent from ``dims``, its end ``addr + bytes``, its last partition ``base + partitions``).  A value past
int64 would otherwise surface far from the file, as an ``OverflowError`` when a derived module is stored.
Every refusal is a FormatError naming the memory location and the field (the reader adds the file).
"""

from __future__ import annotations

import math

from tusk.ir.errors import FormatError

MAX_BYTES = 1 << 62   # any byte size or byte address: leaves int64 room for one more sum
I32_MAX = (1 << 31) - 1


def check_tensor_shape(set_name: str, shape: tuple[int, ...], dsize: int, where: str) -> None:
    """The tensor's bytes, product of ``tensor_shape`` times the element size, must fit."""
    if math.prod(shape) * dsize > MAX_BYTES:
        raise FormatError(f"memory location set {set_name!r}: tensor_shape {list(shape)} holds more than 2^62 bytes",
                          where=where + ".tensor_shape")


def check_memloc_extent(name: str, dims: tuple[int, ...], nparts: int, pbytes: int, addr: int, base: int,
                        where: str) -> None:
    """A memory location's size and end must fit their columns, and it must hold at least one element."""
    if nparts > I32_MAX or nparts * pbytes > MAX_BYTES:
        raise FormatError(f"memory location {name!r}: dims {list(dims)} hold more than 2^62 bytes",
                          where=where + ".dims")
    if nparts == 0 or pbytes == 0:
        # nothing can be read or written there: no real dump declares one, and the verifier's and rotation's
        # partition bands and byte ranges assume a location holds at least one byte
        raise FormatError(f"memory location {name!r}: dims {list(dims)} hold 0 elements", where=where + ".dims")
    if addr >= 0 and addr + pbytes > MAX_BYTES:
        raise FormatError(f"memory location {name!r}: addr {addr} + {pbytes} bytes (dims {list(dims)}) ends past "
                          "2^62", where=where + ".addr")
    if base + nparts > I32_MAX:
        raise FormatError(f"memory location {name!r}: base {base} + {nparts} partitions (dims {list(dims)}) ends "
                          "past 2^31 - 1", where=where + ".base")
