"""The engines' accumulator registers across instructions (``reduce_cmd.reduce``), as the front end
expresses them.

NKI's ``tensor_scalar_cumulative``, ``range_select``, ``select_reduce`` and (2.x) ``tensor_scalar_reduce``
keep a per-partition register on the Vector engine (``"dve"``), ``activation`` another on the Scalar engine
(``"act"``):
``reset_reduce`` starts it afresh, ``load_reduce`` loads it, ``reduce`` continues from whatever the
previous accumulating instruction of that engine left there.  KLR instructions start fresh, so a
``reduce`` is traced as a fresh instruction plus the register's earlier value, made a [P, 1] tile *right
after* the instruction that left it (the value is read before anything can overwrite its source).  That
is exact in straight-line code; a ``reduce`` whose register was left in another loop body (or iteration)
is refused at its line.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tusk.frontend.errors import unsupported
from tusk.frontend.tensors import View, as_dtype
from tusk.frontend.tracer import LoopBegin, LoopEnd, current


@dataclass
class Register:
    """What the accumulator holds after ``op``: ``make(op)`` computes it (ops appended at the current end of
    the program), called once, at ``op``'s position.  It reads ``op``'s destination as recorded *then*:
    ``t[...] = nisa.f(...)`` retargets the op to write ``t`` after the call returned."""

    op: Any
    make: Callable[[Any], View]
    value: View | None = None


# kept on the trace itself: they end with the trace
_ATTR = {"dve": "_tusk_dve_register", "act": "_tusk_act_register"}
_STARTERS = {"dve": "tensor_scalar_cumulative / range_select / select_reduce / tensor_scalar_reduce / "
                     "scalar_tensor_tensor",
             "act": "activation"}


def _get(tr: Any, engine: str) -> Register | None:
    return getattr(tr, _ATTR[engine], None)


def _set(tr: Any, reg: Register | None, engine: str) -> None:
    setattr(tr, _ATTR[engine], reg)


def left_by(op: Any, make: Callable[[Any], View] | None, engine: str = "dve") -> None:
    """The instruction ``op`` (just recorded) leaves ``engine``'s register as ``make`` computes it; None: it
    leaves nothing a later ``reduce`` may continue."""
    _set(current(), None if op is None or make is None else Register(op, make), engine)


def forget(engine: str = "dve") -> None:
    """An accumulating instruction ``engine``'s register is not tracked through ran: a later ``reduce`` is
    refused."""
    _set(current(), None, engine)


def last_op() -> Any:
    """The entry the last tracer call recorded (None when a mask kept nothing and nothing was recorded); the
    DMAs that copy a staged destination back to an SBUF access moved at run time are not it."""
    tr = current()
    for entry in reversed(tr.prog):
        if id(entry) not in tr.write_back_ops:
            return entry
    return None


def register(call: str, engine: str = "dve", cmd: str = "reduce") -> View:
    """``engine``'s register value before this ``reduce`` (a [P, 1] float32 tile)."""
    tr = current()
    reg = _get(tr, engine)
    if reg is None:
        raise unsupported(f"{call} reduce_cmd=nisa.reduce_cmd.{cmd} reads an accumulation that no earlier "
                          f"{_STARTERS[engine]} of this kernel started (reset_reduce"
                          f"{' or load_reduce' if engine == 'dve' else ''} first)")
    pos = next((i for i, e in enumerate(tr.prog) if e is reg.op), None)
    if pos is None or any(isinstance(e, (LoopBegin, LoopEnd)) for e in tr.prog[pos:]):
        # a value already made is a tile written once: a loop body traced once would read it every iteration
        raise unsupported(f"{call} reduce_cmd=nisa.reduce_cmd.{cmd} reads an accumulation left in "
                          "another loop body or iteration (only straight-line continuation is expressed)")
    if reg.value is not None:
        return reg.value
    with tr.inserting_after(pos):
        reg.value = reg.make(reg.op)
    return reg.value


def written(op: Any, fallback: View) -> View:
    """The view ``op`` writes now (its ``dst`` after any retargeting)."""
    return op.params.get("dst", fallback) if hasattr(op, "params") else fallback


def column(rows: int) -> View:
    return current().tile((rows, 1), as_dtype("float32"))


def last_column(v: View, call: str) -> View:
    """``v[:, -1]`` as a [P, 1] access (a cumulative result's final value per partition)."""
    if v.ndim != 2:
        raise unsupported(f"{call} reduce_cmd=nisa.reduce_cmd.reduce after a cumulative instruction into a "
                          f"{v.ndim}-axis tile (a [P, F] one)")
    n = v.shape[1]
    return v[:, n - 1:n]


def copy_of(v: View) -> View:
    out = column(v.shape[0])
    current().op("copy", (v,), (out,), dst=out, src=v)
    return out


def reduction_of(v: View, op: str) -> View:
    """``op`` over the free axes of a 2-D ``v`` into a fresh column."""
    from tusk.frontend.nki import language as nl

    out = column(v.shape[0])
    current().op("tensor_reduce", (v,), (out,), dst=out, src=v, op=op, axis=nl._REDUCE_AXES[0], negate=False)
    return out


def zeros(rows: int) -> View:
    from tusk.frontend.nki import language as nl

    out = column(rows)
    nl._memset(out, 0.0)
    return out


def idle(call: str, res: View | None, run: Callable[[], None], engine: str = "dve") -> None:
    """An instruction with ``reduce_cmd.idle``: ``run`` traces it, leaving ``engine``'s registers as they are,
    and ``res`` (when given) reads them out after it."""
    held = register(call, engine, "idle") if res is not None else None
    run()
    if held is not None:
        read_out(held, res)


def read_out(value: View, res: View | None, negate: bool = False) -> None:
    """The register ``value`` written to ``res`` (in its dtype), negated with ``negate`` (the register keeps
    its sign)."""
    if res is None:
        return
    if negate:
        current().op("tensor_scalar", (value,), (res,), dst=res, src=value, op0="mult", imm0=-1.0, reverse0=False)
    else:
        current().op("copy", (value,), (res,), dst=res, src=value)


def holding(value: View, engine: str = "dve") -> None:
    """The last recorded instruction leaves ``value`` (a [P, 1] float32 tile already made) in ``engine``'s
    register."""
    _set(current(), Register(last_op(), lambda _op: value, value), engine)


def reducing(call: str, dst: View, cmd: Any, op: str, reduce_res: View | None,
             emit: Callable[[Any, View | None], None], engine: str = "dve", negate: bool = False) -> None:
    """An instruction that reduces its output ``dst`` with ``op`` into ``engine``'s register (and
    ``reduce_res``, negated with ``negate``): ``emit(cmd, res)`` records it with a fresh-start command.
    ``reduce`` continues the register: a fresh reduction combined with the earlier value."""
    from tusk.frontend.nki.isa_signature import reduce_cmd

    if cmd == reduce_cmd.reduce:
        prev = register(call, engine)
        part = column(dst.shape[0])
        emit(reduce_cmd.reset_reduce, part)
        total = column(dst.shape[0])
        current().op("tensor_tensor", (prev, part), (total,), dst=total, a=prev, b=part, op=op)
        read_out(total, reduce_res, negate)
        holding(total, engine)
        return
    emit(cmd, reduce_res)
    if cmd == reduce_cmd.reset_reduce:
        left_by(last_op(), (lambda _op: copy_of(reduce_res)) if reduce_res is not None else
                (lambda o: reduction_of(written(o, dst), op)), engine)
    elif cmd != reduce_cmd.idle:
        forget(engine)
