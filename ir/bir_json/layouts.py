"""Templates of instruction lines and the chunk's lines assembled from them.

A :class:`Template` is an instruction's line with slots (clone iteration, dependency iterations,
offsets, integers of attribute records); a :class:`Layout` is a template as one chunk spells it
(slots whose value is the same in every member spelled in); :func:`assemble` builds a chunk's lines.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from tusk.ir.bir_json.digits import write_numbers
from tusk.ir.module import concat_ranges

SEP = b",\n"  # after every instruction line of a chunk
# a layout class's line with blanks for its numbers; their columns, widths, slots, and the eight bytes of
# the line ending at each field (a little-endian word, -1 if the field ends in the line's first eight)
Skeleton = tuple[bytes, list[int], list[int], list[int], list[int]]


class Template:
    __slots__ = ("const_len", "parts", "slots", "tid")

    def __init__(self, parts: list[bytes], slots: list[tuple[str, int]]):
        self.parts = parts
        self.slots = slots
        self.const_len = sum(len(p) for p in parts)
        self.tid = -1  # its row in the writer's tables of slots, once it has one


class Layout:
    """A template as one chunk spells it: constant slots spelled in, the others ("pad": right-aligned in a
    field of fixed width; "var": as many characters as the row's value has, per layout class)."""

    __slots__ = ("cols", "const_len", "modes", "raw")

    def __init__(self, t: Template, consts: dict[int, int], modes: list[tuple[str, int]], cols: list[int]):
        parts: list[bytes] = []
        run = [t.parts[0]]   # the pieces of the current constant run
        for j, part in enumerate(t.parts[1:]):
            if j in consts:
                run.append(b"%d" % consts[j])
            else:
                parts.append(b"".join(run))
                run = []
            run.append(part)
        parts.append(b"".join(run))
        self.raw = parts
        self.modes = modes
        self.cols = cols  # the template slot of each mode (the column of the chunk's slot values)
        self.const_len = sum(len(p) for p in parts) + sum(w for m, w in modes if m == "pad")




def assemble(n: int, sl: Any, generic_rows: np.ndarray, texts: list[bytes],
             skeletons: dict[tuple, Skeleton]) -> list[bytearray]:
    """The chunk's lines, each followed by ",\n", in one byte array (``sl``: the chunk's slots, see
    ``column_writer._Slots``).

    Each layout class has one skeleton line (its constant bytes, blanks where its numbers go); the chunk
    is its rows' skeletons (and the one-by-one rendered lines) joined in order, then every number of
    every row is written into it at once, digit position by digit position.  The work per class is a
    little Python; the work per row and per number is numpy over the whole chunk, so many small classes
    (rotated buffers, per-clone records) cost no more than a few large ones."""
    cls = sl.classes()
    _, first, cinv = np.unique(cls, return_index=True, return_inverse=True)
    cinv = cinv.reshape(-1)
    pos = np.full(n, -1, dtype=np.int64)      # each row's place in the slots' (group) order
    pos[sl.order] = np.arange(len(sl.order))
    at = pos[first]
    if len(at) and at[0] < 0:  # class -1 (the rows rendered one by one) sorts first: no numbers
        at = at[1:]
        hits: list[Skeleton] = [(b"", [], [], [], [])]
    else:
        hits = []
    widths = sl.var_w[at]
    S = widths.shape[1]
    wbytes = widths.tobytes()
    for j, g in enumerate(sl.gr_inv[at].tolist()):
        lay = sl.layouts[g]
        key = (id(lay), wbytes[j * S:(j + 1) * S].rstrip(b"\0"))   # (a skeleton reads its slots' widths alone)
        hit = skeletons.get(key)
        if hit is None:
            hit = skeletons[key] = _skeleton(lay, widths[j])
        hits.append(hit)
    skels, f_col, f_width, f_slot, f_word = (list(x) for x in zip(*hits)) if hits else ([], [], [], [], [])
    lines = list(map(skels.__getitem__, cinv.tolist()))
    for r, text in zip(generic_rows.tolist(), texts):
        lines[r] = text + SEP
    buf = bytearray().join(lines)
    counts = np.array([len(c) for c in f_col], dtype=np.int64)
    if counts.any():
        starts = np.zeros(len(counts), dtype=np.int64)
        np.cumsum(counts[:-1], out=starts[1:])
        per_row = counts[cinv]
        idx = concat_ranges(starts[cinv], per_row)
        owner = np.repeat(np.arange(n), per_row)
        row_start = np.zeros(n, dtype=np.int64)
        np.cumsum(sl.lengths[:-1] + 2, out=row_start[1:])
        fw = np.asarray(list(itertools.chain.from_iterable(f_width)), dtype=np.int64)[idx]
        col = np.asarray(list(itertools.chain.from_iterable(f_col)), dtype=np.int64)[idx]
        end = row_start[owner] + col + fw - 1  # last character of the field
        slot = np.asarray(list(itertools.chain.from_iterable(f_slot)), dtype=np.int64)[idx]
        v = sl.values.take(sl.base.take(pos[owner]) + slot)
        words = list(itertools.chain.from_iterable(f_word))
        fword = None if -1 in words else np.asarray(words, dtype=np.uint64)[idx]
        write_numbers(np.frombuffer(buf, dtype=np.uint8), end, fw, v, fword)
    return [buf]


def _skeleton(t: Layout, w: np.ndarray) -> Skeleton:
    """The :data:`Skeleton` of layout ``t`` with variable widths ``w``."""
    cols: list[int] = []
    widths: list[int] = []
    slots: list[int] = []
    head: list[bytes] = []
    col = 0
    wl = w.tolist()
    for j, part in enumerate(t.raw):
        head.append(part)
        col += len(part)
        if j < len(t.modes):
            mode, fixed = t.modes[j]
            n = fixed if mode == "pad" else wl[t.cols[j]] >> 1
            cols.append(col)
            widths.append(n)
            slots.append(t.cols[j])
            head.append(b" " * n)
            col += n
    head.append(SEP)
    line = b"".join(head)
    words = [int.from_bytes(line[c + n - 8:c + n], "little") if c + n >= 8 else -1 for c, n in zip(cols, widths)]
    return line, cols, widths, slots, words


