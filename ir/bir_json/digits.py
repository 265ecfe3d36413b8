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




def write_numbers(out: np.ndarray, end: np.ndarray, width: np.ndarray, v: np.ndarray,
                  words: np.ndarray | None = None) -> None:
    """Spell integers ``v`` right-aligned in the fields ending at ``end``, whose bytes are blanks already
    (``width`` characters each, as many as the value needs or more).  ``words``, if given: the eight
    bytes of ``out`` that end at each field's end, as a little-endian word (what the writer's skeleton
    lines hold there), so that the fast path below only stores (an unaligned load costs as much again).

    A number of 0 to 99,999,999 whose field is at least eight bytes from its neighbours' (``end`` in
    increasing order, as a chunk's fields are) is one unaligned 64-bit word: its eight digits spelled at
    once (:func:`_eight_digits`), merged into the eight bytes that end at its field's end (the bytes
    before its first digit kept), read and written back in one pass.  The others (negative, larger,
    close together) go digit by digit (:func:`_digit_by_digit`)."""
    keep = np.flatnonzero(width > 0)
    if not len(keep):
        return
    x = v[keep]
    e = end[keep]
    if words is not None:
        words = words[keep]
    if len(e) > 1 and int(e[0]) >= 7 and len(out) >= 8:
        gap = np.diff(e)
        apart = np.ones(len(e), dtype=bool)       # at least eight bytes from the field before and after
        close = gap < 8
        apart[1:] &= ~close
        apart[:-1] &= ~close
        fast = apart & (x >= 0) & (x < 100_000_000)
        if bool((gap > 0).all()) and fast.any():
            f = np.flatnonzero(fast)
            q = x[f].astype(np.uint32)
            lanes = np.ndarray((len(out) - 7,), dtype="<u8", buffer=out, strides=(1,))
            at = e[f] - 7
            mask = _LEADING[digit_count(q)]
            was = lanes[at] if words is None else words[f]
            lanes[at] = (was & ~mask) | (_eight_digits(q) & mask)
            rest = np.flatnonzero(~fast)
            if not len(rest):
                return
            x, e = x[rest], e[rest]
    _digit_by_digit(out, e, x)


# per digit count d (1 to 8): the top d bytes of a little-endian 64-bit word (the last d of its eight)
_LEADING = np.array([0] + [((1 << 64) - 1) << 8 * (8 - d) & (1 << 64) - 1 for d in range(1, 9)], dtype=np.uint64)
_LO7, _LO4 = np.uint64(0x0000007F0000007F), np.uint64(0x000F000F000F000F)
_ZEROS = np.uint64(0x3030303030303030)


def _eight_digits(q: np.ndarray) -> np.ndarray:
    """The eight ASCII digits (leading zeros included) of each of ``q`` (below 10**8) as a little-endian
    word, the most significant digit first in memory: halves, pairs and digits split as lanes of one
    word (a division by a constant is a multiply and a shift per lane)."""
    v = q.astype(np.uint64)
    hi = v // np.uint64(10000)
    x = hi | ((v - hi * np.uint64(10000)) << np.uint64(32))   # two lanes of 32 bits, each below 10,000
    h = ((x * np.uint64(5243)) >> np.uint64(19)) & _LO7        # x // 100 per lane
    y = h | ((x - h * np.uint64(100)) << np.uint64(16))        # four lanes of 16 bits, each below 100
    t = ((y * np.uint64(103)) >> np.uint64(10)) & _LO4         # y // 10 per lane
    return (t | ((y - t * np.uint64(10)) << np.uint64(8))) + _ZEROS


def _digit_by_digit(out: np.ndarray, e: np.ndarray, x: np.ndarray) -> None:
    """Digits stored from the units up, one position a step, each step for the numbers that still have
    digits left (32-bit arithmetic where the numbers allow); the blanks before a number are left."""
    if not len(x):
        return
    a = np.abs(x)
    q = a.astype(np.uint32 if int(a.max()) < (1 << 32) else np.uint64)
    pos = e
    while True:
        nq = q // 10
        out[pos] = (q - nq * 10) + 48
        more = np.flatnonzero(nq)
        if not len(more):
            break
        if len(more) < len(nq):
            nq, pos = nq[more], pos[more]
        q, pos = nq, pos - 1
    neg = np.flatnonzero(x < 0)
    if len(neg):
        out[e[neg] - digit_count(a[neg])] = 45


# per run length n (0 to 8): the low nibbles of the last n of eight bytes (a digit's byte holds its value there)
_NIBBLES = np.array([(0x0F0F0F0F0F0F0F0F << 8 * (8 - n)) & (1 << 64) - 1 for n in range(9)], dtype=np.uint64)
_M8, _M16, _M32 = np.uint64(0x00FF00FF00FF00FF), np.uint64(0x0000FFFF0000FFFF), np.uint64(0xFFFFFFFF)
_B8, _B16, _B32 = np.uint64(8), np.uint64(16), np.uint64(32)


def run_values(buf: np.ndarray, end: np.ndarray, length: np.ndarray) -> np.ndarray:
    """The values of decimal digit runs of ``buf`` (uint8) ending (exclusive) at ``end``, ``length``
    digits each (1 to 18).

    Eight digits are one unaligned 64-bit load and three multiply-shift steps (the digits' bytes as
    lanes, pairs, then quads folded together), so a run costs a few operations whatever its length,
    not one pass per digit position."""
    if not len(end):
        return np.zeros(0, dtype=np.int64)
    blocks = (int(length.max()) + 7) // 8
    if int(end.min()) < 8 * blocks:
        buf = np.concatenate([np.full(8 * blocks, 48, dtype=np.uint8), buf])  # zeros before the first byte
        end = end + 8 * blocks
    lanes = np.ndarray((len(buf) - 7,), dtype="<u8", buffer=buf, strides=(1,))  # 8 bytes at every offset
    out = _eight(lanes[end - 8], np.minimum(length, 8))
    for b in range(1, blocks):
        hi = np.flatnonzero(length > 8 * b)
        out[hi] += _eight(lanes[end[hi] - 8 * (b + 1)], np.minimum(length[hi] - 8 * b, 8)) * 10 ** (8 * b)
    return out


def _eight(w: np.ndarray, n: np.ndarray) -> np.ndarray:
    """The number spelled by the last ``n`` (1 to 8) of the eight characters of each ``w`` (little-endian:
    the last character is the top byte)."""
    x = w & _NIBBLES[n]                                       # each digit's value in its byte, others zero
    x *= np.uint64(10 * 256 + 1)                              # pairs: 10 a + b in every second byte
    x >>= _B8
    x &= _M8
    x *= np.uint64(100 * 65536 + 1)                           # quads
    x >>= _B16
    x &= _M16
    x *= np.uint64(10000 * (1 << 32) + 1)
    x >>= _B32
    return x.astype(np.int64)
