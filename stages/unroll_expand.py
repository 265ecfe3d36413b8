"""The iteration space of a function, flattened: which original instruction
lands at which output position, with which loop-index values.

Unrolling clones every body instruction of a static loop once per
iteration.  Instead of cloning instruction by instruction, we describe the
whole output as parallel arrays (one entry per output instruction):

* ``rows`` — the original instruction row it is a clone of;
* ``axes[name]`` — the value of each unrolled loop axis there;
* ``iters`` — the clone's iteration number inside its loop nest (row-major
  over the enclosing unrolled loops: outermost most significant), which
  names the clone and is also its rank among the clones of its row;
* ``blk`` — for instructions inside loops that are *not* unrolled (dynamic
  loops, DoWhile), the local id of the cloned body block they sit in, else -1.

A loop of trip count T over a body expansion is ``np.tile`` of the body
T times plus ``np.repeat`` of the axis values, so the cost is proportional
to the output size with a small constant, and Python code runs once per
*original* instruction, never per clone.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tusk.ir.enums import LOOP_OPCODES, Op
from tusk.ir.errors import PassError
from tusk.ir.module import Function, LoopAxis

IDX = np.int64


@dataclass
class Expansion:
    rows: np.ndarray
    iters: np.ndarray
    blk: np.ndarray
    axes: dict[str, np.ndarray] = field(default_factory=dict)
    # cloned body blocks of loops kept as loops: (original block id, local position of its loop row)
    blocks: list[tuple[int, int]] = field(default_factory=list)
    # which block clone (index into ``blocks``) each cloned block copies; its iteration for naming
    block_iters: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.rows)

    @staticmethod
    def single(row: int) -> "Expansion":
        return Expansion(np.array([row], IDX), np.zeros(1, IDX), np.full(1, -1, IDX))

    @staticmethod
    def empty() -> "Expansion":
        return Expansion(np.zeros(0, IDX), np.zeros(0, IDX), np.zeros(0, IDX))


def concat(parts: list[Expansion]) -> Expansion:
    """Expansions one after the other (a block's instructions in order)."""
    parts = [p for p in parts if len(p)]
    if not parts:
        return Expansion.empty()
    if len(parts) == 1:
        return parts[0]
    names = sorted({a for p in parts for a in p.axes})
    out = Expansion(np.concatenate([p.rows for p in parts]), np.concatenate([p.iters for p in parts]),
                    np.zeros(0, IDX))
    for a in names:
        out.axes[a] = np.concatenate([p.axes.get(a, np.zeros(len(p), IDX)) for p in parts])
    blks, pos, nb = [], 0, 0
    for p in parts:
        blks.append(np.where(p.blk >= 0, p.blk + nb, -1))
        out.blocks.extend((b, parent + pos) for b, parent in p.blocks)
        out.block_iters.extend(p.block_iters)
        pos += len(p)
        nb += len(p.blocks)
    out.blk = np.concatenate(blks)
    return out


def tile(body: Expansion, axis: LoopAxis, spans: np.ndarray) -> Expansion:
    """``body`` once per iteration of ``axis``; ``spans`` = clones of each body entry per iteration."""
    trips = axis.trip_count
    n = len(body)
    values = np.arange(axis.lb, axis.lb + trips * axis.stride, axis.stride, dtype=IDX)[:trips]
    t = np.repeat(np.arange(trips, dtype=IDX), n)
    out = Expansion(np.tile(body.rows, trips), t * np.tile(spans, trips) + np.tile(body.iters, trips),
                    np.zeros(0, IDX))
    for a, v in body.axes.items():
        out.axes[a] = np.tile(v, trips)
    if axis.name in out.axes:
        raise PassError(f"loop axis {axis.name!r} is nested inside a loop of the same name")
    out.axes[axis.name] = np.repeat(values, n)
    nb = len(body.blocks)
    out.blk = np.where(np.tile(body.blk, trips) >= 0, np.tile(body.blk, trips) + np.repeat(np.arange(trips) * nb, n), -1)
    for k in range(trips if body.blocks else 0):  # cloned bodies of kept (dynamic) loops: rare and small
        out.blocks.extend((b, parent + k * n) for b, parent in body.blocks)
        out.block_iters.extend(k * int(spans[parent]) + it for (b, parent), it in zip(body.blocks, body.block_iters))
    return out


class Expander:
    """Expands a function's blocks; ``unrolled(row)`` says which loops are flattened."""

    def __init__(self, fn: Function, unroll_loop):
        self.fn = fn
        self.unroll_loop = unroll_loop
        self.rows_of = fn.block_rows()
        self.children: dict[int, list[int]] = {}
        for b, p in enumerate(fn.blocks["parent"].tolist()):
            if p >= 0:
                self.children.setdefault(p, []).append(b)
        self.opcodes = fn.insts["opcode"]
        # spans[row] = product of trip counts of the unrolled loops enclosing row
        self.spans = np.ones(len(fn.insts), IDX)
        self.chains: dict[int, tuple[int, ...]] = {}  # row -> enclosing unrolled loop rows, outermost first

    def expand_block(self, b: int, chain: tuple[int, ...] = ()) -> Expansion:
        parts: list[Expansion] = []
        for row in self.rows_of[b].tolist():
            self.chains[row] = chain
            op = int(self.opcodes[row])
            if op == Op.Loop and self.unroll_loop(row):
                axis = self.fn.loop_axis(row)
                body = concat([self.expand_block(c, chain + (row,)) for c in self.children.get(row, [])])
                if len(body):
                    self.spans[np.nonzero(np.bincount(body.rows))[0]] *= max(axis.trip_count, 1)
                parts.append(tile(body, axis, self._inner_spans(body, axis)))
            elif op in LOOP_OPCODES:
                parts.append(self._kept_loop(row, chain))
            else:
                parts.append(Expansion.single(row))
        return concat(parts)

    def _inner_spans(self, body: Expansion, axis: LoopAxis) -> np.ndarray:
        # spans were just multiplied by this loop's trips; the per-iteration stride is the rest
        return self.spans[body.rows] // max(axis.trip_count, 1)

    def _kept_loop(self, row: int, chain: tuple[int, ...]) -> Expansion:
        """A loop that stays a loop: its row, then its body blocks, each a new local block."""
        kids = self.children.get(row, [])
        bodies = [self.expand_block(c, chain) for c in kids]
        names = sorted({a for bd in bodies for a in bd.axes})
        k = len(kids)
        rows, iters, blks = [np.array([row], IDX)], [np.zeros(1, IDX)], [np.full(1, -1, IDX)]
        axes = {a: [np.zeros(1, IDX)] for a in names}
        blocks = [(c, 0) for c in kids]
        block_iters = [0] * k
        pos, nb = 1, k
        for i, bd in enumerate(bodies):
            rows.append(bd.rows)
            iters.append(bd.iters)
            blks.append(np.where(bd.blk >= 0, bd.blk + nb, i))
            for a in names:
                axes[a].append(bd.axes.get(a, np.zeros(len(bd), IDX)))
            blocks.extend((b, parent + pos) for b, parent in bd.blocks)
            block_iters.extend(bd.block_iters)
            pos += len(bd)
            nb += len(bd.blocks)
        return Expansion(np.concatenate(rows), np.concatenate(iters), np.concatenate(blks),
                         {a: np.concatenate(v) for a, v in axes.items()}, blocks, block_iters)
