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
    """Spell integers ``v`` right-aligned in the fields ending at ``end``, whose bytes are blanks already
    (``width`` characters each, as many as the value needs or more).

    Digits are stored from the units up, one position a step, each step for the numbers that still
    have digits left (32-bit arithmetic where the numbers allow): the work is the digits written, not
    the fields' widths, and the blanks before a number are left as they are."""
    keep = np.flatnonzero(width > 0)
    if not len(keep):
        return
    x = v[keep]
    e = end[keep]
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
