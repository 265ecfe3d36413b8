"""``nl.all_reduce(x, op, program_axes)`` (NKI 1.x): ``x`` combined by ``op`` over the programs of the launch
that differ only along ``program_axes``; each of them gets the result.

The programs meet (:mod:`~tusk.frontend.phases`, as at ``nisa.core_barrier``): there each program's tile is
copied by DMA into a fresh tile of every program of its group, and after the meeting each program combines
its copies in group order (grid order), so every program computes the same numbers.  Float tiles are
combined in float32 and cast to the result's dtype once.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

from tusk.frontend import phases
from tusk.frontend.errors import unsupported
from tusk.frontend.nki import isa_ops as ops
from tusk.frontend.nki import language as nl
from tusk.frontend.tensors import View, as_dtype
from tusk.frontend.tracer import current

CALL = "nl.all_reduce"


def all_reduce(x: Any, op: Any, program_axes: Any, *, dtype: Any = None, mask: Any = None,
               parallel_reduce: Any = True, asynchronous: Any = False, **kw: Any) -> View:
    """``op`` over the programs differing along ``program_axes``: a meeting of the programs (each one's tile
    copied to all of its group), then each combines the copies in grid order.  ``parallel_reduce`` chooses how
    the device spends memory on it: the same numbers."""
    nl._no_keywords(CALL, kw)
    if asynchronous:
        raise ops.refuse(CALL, "asynchronous", asynchronous, "Tusk has no nki.sync_thread to wait for it")
    ops.alu(op, f"{CALL} op")
    src = nl._tile(x, CALL)
    out = current().tile(src.shape, nl._out_dtype(dtype, src))
    if not nl._whole_tiles(CALL, mask, [src], "Tusk reduces whole tiles across programs"):
        return current().unwritten(out)
    group = _group(_axes(program_axes))
    if len(group) == 1:  # no other program: the tile itself
        ops.tensor_copy(CALL, out, src)
        return out
    parts = [ops.fresh(src.shape, src.dtype) for _ in group]
    phases.all_gather(CALL, src, parts, group)
    _combine(parts, op, out)
    return out


def _axes(program_axes: Any) -> tuple[int, ...]:
    """The grid axes named by an int or a sequence of ints."""
    grid = current().grid
    axes = program_axes if isinstance(program_axes, Iterable) else (program_axes,)
    try:
        named = tuple(int(a.__index__()) for a in axes)
    except (AttributeError, TypeError):
        raise ops.refuse(CALL, "program_axes", program_axes, "grid axes: an int or a tuple of ints") from None
    for a in named:
        if not 0 <= a < max(len(grid), 1):
            raise unsupported(f"{CALL} program_axes={program_axes!r} in a launch grid of {len(grid)} axes "
                              f"{list(grid)}")
    return named


def _group(axes: tuple[int, ...]) -> tuple[int, ...]:
    """The programs that reduce with this one (those equal to it off ``axes``), as indices into the launch's
    programs in grid order (:class:`~tusk.frontend.phases.Phases`)."""
    tr = current()
    if not tr.grid:
        return (0,)
    mine = tr.program_ids
    every = itertools.product(*[range(g) for g in tr.grid])
    return tuple(k for k, ids in enumerate(every)
                 if all(ids[a] == mine[a] for a in range(len(tr.grid)) if a not in axes))


def _combine(parts: list[View], op: Any, out: View) -> None:
    """``out = parts[0] op parts[1] op ...``, left to right (float tiles in float32, cast once)."""
    wide = as_dtype("float32") if "float" in out.dtype or "float" in parts[0].dtype else out.dtype
    total = ops.fresh(parts[0].shape, wide)
    acc = parts[0]
    for part in parts[1:]:
        ops.tensor_tensor(CALL, total, acc, part, op)
        acc = total
    ops.tensor_copy(CALL, out, total)
