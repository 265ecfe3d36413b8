"""Decimal digits of numpy integer arrays: counted, and spelled into a byte buffer in place."""

from __future__ import annotations

import numpy as np

POW10 = np.array([10 ** k for k in range(19)], dtype=np.int64)



def ndigits(v: np.ndarray) -> np.ndarray:
    """Characters of each integer's decimal spelling (with the minus sign)."""
    return digit_count(np.abs(v)) + (v < 0)


def digit_count(a: np.ndarray) -> np.ndarray:
    """Decimal digits of non-negative integers (of any shape)."""
    if not len(a):
        return np.zeros(0, dtype=np.int64)
    top = int(a.max())
    if top >= 1 << 32:
        return np.searchsorted(POW10[1:], a, side="right") + 1
    a32 = a.astype(np.uint32)   # one comparison per power of ten up to the largest value: cheaper than a log
    n = np.ones(a.shape, dtype=np.int64)
    for k in range(1, len(str(top))):
        n += a32 >= np.uint32(10 ** k)
    return n




def write_numbers(out: np.ndarray, end: np.ndarray, width: np.ndarray, v: np.ndarray) -> None:
    """Spell integers ``v`` right-aligned (blanks before them) in the fields ending at ``end``.

    Fields are taken by width, so that each width's fields are one (width, fields) array of characters
    filled digit position by digit position (32-bit arithmetic where the numbers allow) and stored with
    one assignment."""
    if not len(v):
        return
    for w in np.flatnonzero(np.bincount(width)).tolist():
        if w == 0:
            continue
        sel = np.flatnonzero(width == w)
        x = v[sel]
        a = np.abs(x)
        q = a.astype(np.uint32 if int(a.max()) < (1 << 32) else np.uint64)  # 32-bit division is much faster
        chars = np.empty((w, len(sel)), dtype=np.uint8)
        for d in range(w - 1, -1, -1):
            nq = q // 10
            q -= nq * 10
            q += 48
            chars[d] = q
            q = nq
        # positions before a number's first digit are blanks, and the one just before it its sign
        short = a < 10 ** (w - 1) if w <= 18 else np.zeros(len(a), dtype=bool)
        if short.any():
            for d in range(w - 1):
                blank = a < 10 ** (w - 1 - d) if w - 1 - d <= 18 else np.ones(len(a), dtype=bool)
                if not blank.any():
                    break
                chars[d, blank] = 32
        neg = np.flatnonzero(x < 0)
        if len(neg):
            chars[w - 1 - digit_count(a[neg]), neg] = 45
        out[(end[sel] - (w - 1))[None, :] + np.arange(w)[:, None]] = chars


