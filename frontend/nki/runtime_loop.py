"""``nl.dynamic_range(reg)`` / ``nl.dynamic_range(start, reg, step)``: a loop whose bound is a register read at
run time (``nisa.register_load``), as NKI 2.x kernels with dynamic shapes write it.

It stays a KLR loop (the counter from ``start``, by ``step``, while below the bound register, moved from the
kernel's).  The body is
traced once.  Its index is a register (``isa_ops.LoopIndexRegister``) that gets a copy of the loop's counter at
the top of each iteration, as NKI passes ``fori_loop``'s body its index: the body reads it as a runtime
offset (``data.ap(..., scalar_offset=i, indirect_dim=1)``) or with ``nisa.register_*``; Python arithmetic or a
comparison on it is refused at its line (its range is known only at run time).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from tusk.frontend.affine import LoopVar
from tusk.frontend.errors import unsupported
from tusk.frontend.tracer import current


def register_bound(kind: str, args: tuple) -> Any:
    """``(start, bound register, step)`` of a loop ``args`` bound by a register, or None (int bounds: an ordinary
    loop).  The start and the step are Python ints (the step positive): the counter runs from ``start`` while it
    is below the register."""
    from tusk.frontend.nki.isa_ops import VirtualRegister

    regs = [a for a in args if isinstance(a, VirtualRegister)]
    if not regs:
        return None
    start, stop, step = (0, args[0], 1) if len(args) == 1 else (*args, 1) if len(args) == 2 else args
    if (stop is not regs[0] or len(regs) > 1 or isinstance(start, bool) or not isinstance(start, int)
            or isinstance(step, bool) or not isinstance(step, int) or step <= 0):
        raise unsupported(f"nl.{kind}{tuple(args)!r} (a register bound is the stop, after an int start, with a "
                          f"positive int step: nl.{kind}(reg), nl.{kind}(start, reg) or nl.{kind}(start, reg, step))")
    return start, regs[0], step


def _runtime_var(kind: str, what: str, start: int = 0, step: int = 1) -> LoopVar:
    """The next loop of the trace, one whose iterations are known only at run time (``what``: it, in refusals)."""
    tr = current()
    ordinal = tr.loop_ordinal
    tr.loop_ordinal += 1
    if ordinal in tr.peel:
        raise unsupported(f"a mask inside {what} (its iterations are not known)")
    return LoopVar(kind, start, step, 1, len(tr.loops), ordinal)


def iterate(kind: str, bound: tuple[int, Any, int]) -> Iterator[Any]:
    start, reg, step = bound
    tr = current()
    var = _runtime_var(kind, f"an nl.{kind} loop bounded by a register", start, step)
    var.bound_reg = reg.name  # type: ignore[attr-defined]  # the emitter's bound: frontend/emit.py
    from tusk.frontend.nki.isa_ops import loop_index_register

    with tr.loop(var):
        yield loop_index_register(kind, var)


def while_loop(init: Any, body_fun: Any) -> None:
    """``nl.while_loop(init, body)``: ``r = init; while r != 0: r = body(r)``, a KLR loop of blocks testing a
    condition register before each iteration.  The body is traced once; it gets a copy of the condition (by
    value, as NKI passes it) and returns the register whose value is the next condition."""
    from tusk.frontend.nki.isa_ops import VirtualRegister, loop_index_register

    if not isinstance(init, VirtualRegister):
        raise unsupported(f"nl.while_loop init={init!r} (a register of nisa.register_alloc)")
    if not callable(body_fun):
        raise unsupported(f"nl.while_loop body {body_fun!r} (a function of the condition register)")
    tr = current()
    var = _runtime_var("while_loop", "an nl.while_loop")
    var.while_init = init.name  # type: ignore[attr-defined]  # the emitter's condition: frontend/emit.py
    with tr.loop(var):
        nxt = body_fun(loop_index_register("while_loop", var))
        if not isinstance(nxt, VirtualRegister):
            raise unsupported(f"an nl.while_loop body returning {nxt!r} (it returns the register of the next "
                              "condition)")
        tr.op("while_next", (), (), src=nxt.name, var=var)
