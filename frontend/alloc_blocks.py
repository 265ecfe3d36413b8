"""Logical blocks that need no memory of their own: one physical block for a loop's iterations.

In NKI the leading (block) axes of an on-chip tensor count its logical tiles,
"not the number of physical tiles being allocated" (nki.compiler.sbuf.alloc):
``qk = nl.ndarray((n_q, nl.par_dim(128), 512), buffer=nl.psum)`` with
``qk[i]`` used only in iteration ``i`` of a loop needs one PSUM tile, not
``n_q`` of them.  When the tiles do not fit, :func:`share_blocks` finds such
tensors and gives the block axis one physical block, so iteration ``i`` uses
the block iteration ``i - 1`` used.  That is the same program when

* every access of the tensor is inside the loop and names block ``v + c`` of
  that axis (``v`` the loop's index, ``c`` the same constant everywhere),
  with no other index reaching the axis: each iteration has a block no other
  iteration touches;
* in each iteration the first instruction that touches the tensor only writes
  it (so nothing reads what the previous iteration left), and every element a
  later instruction of the iteration reads was written by an earlier one
  (checked over the iteration's inner loops, element by element).

A block axis that every access names by a constant (a loop the trace
unrolled) is split instead: each block becomes a tensor of its own, live from
its first access to its last, which the placer may put where another block
was: distinct tensors, so nothing needs checking.

A fill of the whole tensor before that loop (``acc = nl.zeros((n, nl.par_dim(128), 512), buffer=nl.psum)``,
then ``acc[i] += ...`` in iteration ``i``) is first moved into it, as a fill of the iteration's block at
the start of its body: each block is filled before its iteration uses it, as it was, and no access outside
the loop sees the difference (there is none).

Anything else keeps its blocks (and the placer reports the memory full).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np

from tusk.frontend.affine import Affine
from tusk.frontend.tensors import Tensor, View
from tusk.frontend.tracer import LoopBegin, LoopEnd, Op, Tracer

MAX_ELEMENTS = 1 << 22   # a block's accesses are enumerated element by element: bounded work


def share_blocks(tr: Tracer) -> bool:
    """Give one physical block to each block axis that a loop's iterations use one block at a time (see the
    module docstring); True when some tensor changed."""
    uses, loops = _uses(tr)
    changed = False
    for t in list(uses):
        # looked up afresh: a fill moved into a loop shifts the positions of every later tensor's accesses (a
        # stale position deleted the wrong operation: a load, or a loop's start)
        found = uses.get(t)
        if t.on_chip and t.par_axis > 0 and t is not tr.identity and found is not None:
            if _fill_into_loop(tr, t, found, loops):
                uses, loops = _uses(tr)  # positions moved
                found = uses[t]
            axis = next((a for a in range(t.par_axis) if t.shape[a] > 1 and all(_constant_block(v, t, a)
                                                                                for _, _, v, _ in found)), None)
            if axis is not None:
                _split(tr, t, axis)
                changed = True
                continue
            choice = _shareable(t, found, loops)
            if choice is not None:
                _rewrite(tr, t, *choice)
                changed = True
            elif _peel(tr, t, found):
                changed = True
    return changed


def _peel(tr: Tracer, t: Tensor, found: list) -> bool:
    """Split off the blocks that accesses name by a constant when every other access walks the block axis with
    one loop's index and never reaches them: a loop whose last iteration the trace peeled (a mask that depends
    on the index, ``i * 128 + i_p < n``) names its last block by a constant.  Each such block becomes a tensor
    of its own; the loop's accesses, left alone, may then share one block (the next round).  True when split."""
    strides = _physical_strides(t.shape, t.layout)
    for axis in range(t.par_axis):
        if t.shape[axis] < 2:
            continue
        fixed: set[int] = set()
        walked: set[int] = set()
        for _, _, v, _ in found:
            if _constant_block(v, t, axis):
                fixed.add(_digit(v.offset.const, t, axis))
                continue
            blocks = _walked_blocks(v, t, axis, strides[axis])
            if blocks is None:
                break
            walked |= blocks
        else:
            if fixed and walked and not fixed & walked:
                shape = tuple(1 if k == axis else d for k, d in enumerate(t.shape))
                parts = {b: replace_tensor(tr, t, shape, f"{t.name}.b{b}") for b in sorted(fixed)}
                _remap_views(tr, t, axis, None, lambda v: parts[_digit(v.offset.const, t, axis)],
                             only=lambda v: _constant_block(v, t, axis))
                return True
    return False


def _walked_blocks(v: View, t: Tensor, axis: int, stride: int) -> set[int] | None:
    """The blocks of ``axis`` that ``v`` reaches when one loop index walks them (block ``i + c``) and nothing
    else does; None for any other access."""
    walking = [u for u, c in v.offset.terms if c == stride]
    if len(walking) != 1 or not _names_block(v, t, axis, walking[0], _digit(v.offset.const, t, axis), stride):
        return None
    u, c0 = walking[0], _digit(v.offset.const, t, axis)
    blocks = {c0 + u.start + u.step * k for k in range(u.trip)}
    return blocks if min(blocks) >= 0 and max(blocks) < t.shape[axis] else None


def _fill_into_loop(tr: Tracer, t: Tensor, found: list, loops: dict) -> bool:
    """Move a memset of all of ``t``, its first access, into the innermost of the loops that hold every other
    access and walk a block axis of ``t`` the same way in each (a term of the same loop index at the block
    axis's stride): the fill then covers that iteration's block of every such axis; True when moved.

    Into every such loop, not the outermost alone: moved into a compiler-printed kernel's outer loop of
    five, its fill still covered the blocks of the other four, too many elements to check for sharing
    (AccelOpt's bmm: PSUM was full)."""
    pos, op, v, _ = found[0]
    if op.kind != "memset" or len(found) < 2 or v.elements != math.prod(t.shape) or v.offset.terms \
            or not v.offset.is_static or v.offset.const != 0 or v.vector is not None:
        return False
    strides = _physical_strides(t.shape, t.layout)
    others = found[1:]
    chosen: list[tuple[Any, int, int]] = []  # (loop index, stride, block axis)
    inner = -1  # the innermost chosen loop's start
    for var, coeff in others[0][2].offset.terms:
        begin, end = loops.get(id(var), (-1, -1))
        axis = next((a for a in range(t.par_axis) if strides[a] == coeff and t.shape[a] > 1), None)
        if axis is None or any(a == axis for _, _, a in chosen) or not pos < begin or \
                any(not begin < p < end for p, _, _, _ in others) or \
                not all(any(u is var and c == coeff for u, c in w.offset.terms) for _, _, w, _ in others):
            continue
        chosen.append((var, coeff, axis))
        inner = max(inner, begin)
    if not chosen or any(isinstance(e, Op) and any(w.tensor is t for w in _views(e))
                         for e in tr.prog[pos + 1:inner]):
        return False
    axes = {a for _, _, a in chosen}
    keep = [k for k, a in enumerate(v.axes) if a not in axes]
    block = replace(v, offset=Affine(0, tuple((var, coeff) for var, coeff, _ in chosen)),
                    dims=tuple(v.dims[k] for k in keep), axes=tuple(v.axes[k] for k in keep), checks=())
    fill = Op("memset", {**op.params, "dst": block}, op.line, (), (block,))
    tr.prog.insert(inner + 1, fill)
    del tr.prog[pos]  # before the loops: the fill lands right after the innermost one's start
    return True


def _constant_block(v: View, t: Tensor, axis: int) -> bool:
    """Does ``v`` name one block of ``axis`` by a constant (no loop index and no walked dim reaches it)?"""
    return v.offset.const >= 0 and all(c >= 0 and not _digit(c, t, axis) for _, c in v.offset.terms) and \
        all(s >= 0 and (n == 1 or not _digit(s, t, axis)) for s, n in v.dims)


def _split(tr: Tracer, t: Tensor, axis: int) -> None:
    """Each block of ``axis`` as a tensor of its own (shape 1 on ``axis``), accesses re-expressed in it."""
    n = t.shape[axis]
    shape = tuple(1 if k == axis else d for k, d in enumerate(t.shape))
    parts = [replace_tensor(tr, t, shape, f"{t.name}.b{i}") for i in range(n)]
    _remap_views(tr, t, axis, None, lambda v: parts[_digit(v.offset.const, t, axis)])
    t.shape = shape  # unreferenced now: never placed nor emitted


def replace_tensor(tr: Tracer, t: Tensor, shape: tuple[int, ...], name: str) -> Tensor:
    part = Tensor(tr.unique(name), shape, t.dtype, t.memory, par_axis=t.par_axis, role=t.role, site=t.site)
    tr.tensors.append(part)
    return part


def _uses(tr: Tracer):
    """Each on-chip tensor's accesses: (position, op, view, enclosing loops); None for a tensor also used as
    a gather's index rows (not rewritten).  And each loop's (begin, end) positions by its variable's id."""
    uses: dict[Tensor, list | None] = {}
    loops: dict[int, tuple[int, int]] = {}
    open_: list[tuple[Any, int]] = []
    for pos, e in enumerate(tr.prog):
        if isinstance(e, LoopBegin):
            open_.append((e.var, pos))
        elif isinstance(e, LoopEnd):
            var, begin = open_.pop()
            loops[id(var)] = (begin, pos)
        elif isinstance(e, Op):
            for v in _views(e):
                if v.vector is not None:
                    uses[v.vector.tensor] = None
                if v.tensor.alias_of is not None:  # reinterpreted bytes: left as they are
                    uses[v.tensor.alias_of] = uses[v.tensor] = None
                found = uses.setdefault(v.tensor, [])
                if found is not None:
                    found.append((pos, e, v, tuple(var for var, _ in open_)))
    return uses, loops


def _views(op: Op) -> list[View]:
    seen: dict[int, View] = {}
    for v in (*op.params.values(), *op.reads, *op.writes):
        if isinstance(v, View):
            seen.setdefault(id(v), v)
    return list(seen.values())


def _physical_strides(shape: tuple[int, ...], layout: tuple[int, ...]) -> dict[int, int]:
    phys = [shape[k] for k in layout]
    return {axis: math.prod(phys[i + 1:]) for i, axis in enumerate(layout)}


def _digit(x: int, t: Tensor, axis: int) -> int:
    """The index on ``axis`` that element offset ``x`` holds (offsets are mixed-radix in the physical shape)."""
    s = _physical_strides(t.shape, t.layout)[axis]
    return (x // s) % t.shape[axis]


def _shareable(t: Tensor, found: list, loops: dict) -> tuple[int, Any, int] | None:
    strides = _physical_strides(t.shape, t.layout)
    first = found[0][2]
    for axis in range(t.par_axis):
        for var, coeff in first.offset.terms:
            if coeff != strides[axis] or id(var) not in loops:
                continue
            c0 = _digit(first.offset.const, t, axis)
            if all(_names_block(v, t, axis, var, c0, strides[axis]) and var in enclosing
                   for _, _, v, enclosing in found) and _written_first(t, found, loops[id(var)], var):
                return axis, var, c0
    return None


def _names_block(v: View, t: Tensor, axis: int, var: Any, c0: int, stride: int) -> bool:
    if v.offset.const < 0 or _digit(v.offset.const, t, axis) != c0:
        return False
    for u, c in v.offset.terms:
        if u is var:
            if c != stride:
                return False
        elif c < 0 or _digit(c, t, axis):
            return False
    return all(s >= 0 and (n == 1 or not _digit(s, t, axis)) for s, n in v.dims)


def _written_first(t: Tensor, found: list, span: tuple[int, int], var: Any) -> bool:
    """In one iteration (``var`` fixed), the accesses in program order: the first only writes, and every
    element read was written by an earlier access (elements as offsets with ``var``'s term left out).

    A term every access has (the same loop index at the same stride) is left out too: every access moves
    with that index alike, so the check holds for each of its values when it holds for one -- stricter than
    over all of them at once, and the enumeration stays bounded: a compiler-printed kernel (AccelOpt's bmm)
    indexes a PSUM tile of five block axes by five loops, 16M elements over the other four.

    When every access covers the same partitions, the elements are those of one partition: the partition
    axis multiplies every access's elements alike (AccelOpt's matmul loads 40 K-tiles of a block, 5M
    elements over the partitions)."""
    rows = _same_rows(t, [v for _, _, v, _ in found])
    written = np.zeros(math.prod(t.shape) // (t.shape[t.par_axis] if rows else 1), dtype=bool)
    shared = frozenset.intersection(*(frozenset((id(u), c) for u, c in v.offset.terms if u is not var)
                                      for _, _, v, _ in found))
    steps = [(pos, not any(r is v for r in op.reads), op, v) for pos, op, v, _ in found]
    for k, (pos, only_written, op, v) in enumerate(sorted(steps, key=lambda s: s[:2])):
        if not span[0] < pos < span[1]:
            return False
        reached = cells(_one_row(v, rows) if rows else v, var, written.size, shared)
        if reached is None:
            return False
        is_read, is_write = not only_written, any(w is v for w in op.writes)
        if is_read and (k == 0 or not written[reached].all()):
            return False
        if is_write:
            written[reached] = True
    return True


def _same_rows(t: Tensor, views: list[View]) -> int:
    """The partition stride of ``t`` when every view walks the same partitions with one dim of that stride and
    nothing else reaches the partition axis (its offsets below the stride); else 0."""
    stride = _physical_strides(t.shape, t.layout)[t.par_axis]
    seen = set()
    for v in views:
        walk = [n for s, n in v.dims if s == stride]
        lo, hi = v.offset.bounds()
        reach = v.offset.const % stride + hi - v.offset.const + sum((n - 1) * s for s, n in v.dims if s != stride)
        if len(walk) != 1 or lo < v.offset.const or any(s > stride or s < 0 for s, _ in v.dims) or reach >= stride:
            return 0
        seen.add((v.offset.const // stride, walk[0]))
    return stride if len(seen) == 1 else 0


def _one_row(v: View, stride: int) -> View:
    """``v`` in one partition: its partition dim and the partition part of its offset dropped."""
    return replace(v, offset=Affine(v.offset.const % stride, v.offset.terms),
                   dims=tuple((s, n) for s, n in v.dims if s != stride))


def cells(v: View, var: Any, size: int, drop: frozenset = frozenset()) -> np.ndarray | None:
    """Every element offset ``v`` reaches over the other loop indices, with ``var``'s term dropped (and the
    terms ``drop`` names: (id of the index, coefficient))."""
    idx = np.array([v.offset.const], dtype=np.int64)
    for u, c in v.offset.terms:
        if u is not var and (id(u), c) not in drop:
            idx = (idx[:, None] + c * (u.start + u.step * np.arange(u.trip))[None, :]).reshape(-1)
        if idx.size > MAX_ELEMENTS:
            return None
    for s, n in v.dims:
        idx = (idx[:, None] + s * np.arange(n)[None, :]).reshape(-1)
        if idx.size > MAX_ELEMENTS:
            return None
    return idx if idx.size and idx.min() >= 0 and idx.max() < size else None


def _rewrite(tr: Tracer, t: Tensor, axis: int, var: Any, c0: int) -> None:
    """``t`` with one block on ``axis``: every access re-expressed in the smaller physical shape."""
    _remap_views(tr, t, axis, var, lambda v: t)
    t.shape = tuple(1 if k == axis else n for k, n in enumerate(t.shape))


def _remap_views(tr: Tracer, t: Tensor, axis: int, var: Any, target, only=None) -> None:
    """Every access of ``t`` (those ``only`` accepts, when given) moved to ``target(view)`` (a tensor of ``t``'s
    shape with one block on ``axis``): offsets and strides re-expressed in its physical shape, ``axis``'s index
    and ``var``'s term dropped."""
    old = _physical_strides(t.shape, t.layout)
    order = sorted(old, key=lambda a: -old[a])
    new = _physical_strides(tuple(1 if k == axis else n for k, n in enumerate(t.shape)), t.layout)

    def remap(x: int) -> int:
        out = 0
        for a in order:
            d, x = divmod(x, old[a])
            out += (0 if a == axis else d) * new[a]
        return out

    def view(v: View) -> View:
        terms = tuple((u, remap(c)) for u, c in v.offset.terms if u is not var)
        return replace(v, tensor=target(v), offset=Affine(remap(v.offset.const), terms),
                       dims=tuple((remap(s), n) for s, n in v.dims))

    for e in tr.prog:
        if isinstance(e, Op):
            done: dict[int, View] = {}

            def swap(x: Any) -> Any:
                if isinstance(x, View) and x.tensor is t and (only is None or only(x)):
                    return done.setdefault(id(x), view(x))
                return x
            e.params = {k: swap(x) for k, x in e.params.items()}
            e.reads = tuple(swap(x) for x in e.reads)
            e.writes = tuple(swap(x) for x in e.writes)
