"""getLargestFactorWithThreshold: the storage/engine split factor (not a loop factor).

The backend splits a dimension into at most ``MaxFactor`` (16) pieces for DMA
descriptor fan-out (SWDGE handles up to 1020 descriptors, HWDGE 65520).  The
trial loop runs divisors 16, 15, ..., 1 and returns the first that divides the
dimension: the largest split factor ``f <= MaxFactor`` with ``dim % f == 0``;
its paired cofactor ``dim // f`` is the size of each piece.
"""

from __future__ import annotations

from tusk.ir.errors import PassError

MAX_FACTOR = 16


def get_largest_factor_with_threshold(dim: int, max_factor: int = MAX_FACTOR) -> int:
    if not max_factor > 0:
        raise PassError("MaxFactor > 0")
    if dim <= 0:
        raise PassError(f"getLargestFactorWithThreshold: dimension must be positive, got {dim}")
    for f in range(min(max_factor, dim), 0, -1):
        if dim % f == 0:
            return f
    return 1  # unreachable: 1 divides everything


getLargestFactorWithThreshold = get_largest_factor_with_threshold
