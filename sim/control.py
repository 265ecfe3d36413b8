"""Control flow: program order, loops, predicates, branches and kernel calls.

* A function without loops or branches runs rows ``0..n-1`` (rows are stored
  in program preorder), the fast path for unrolled kernels.
* Loops run their body blocks once per value of the axis: ``Loop`` with its
  static ``LoopAxis``; ``DynamicForLoop`` with bounds read (registers or
  expressions) when the loop starts; ``DoWhile`` repeats while register
  ``cond`` is non-zero.
* A function with ``CompareAndBranch`` / ``UnconditionalBranch`` runs its
  top-level blocks from the first one: a taken branch jumps to the named
  block, otherwise execution falls through to the next top-level block.
  Branches inside loop bodies are not supported.
* ``NKIKernel`` calls another function of the module; its unallocated DRAM
  memory locations are bound to the caller's by ``func_args``/``func_outs``
  (kernel name -> caller name; by equal names when both are empty).
* ``Return``/``Exit``/``Halt`` end the current function.

Every executed instruction counts against the machine's step limit.
"""

from __future__ import annotations

import numpy as np

from tusk.ir.columns import thaw
from tusk.ir.enums import LOOP_OPCODES, OPAQUE_OPCODES, OPCODE_NAMES, Mem, Op
from tusk.ir.errors import InputError, PassError, TuskError
from tusk.ir.expr import expr_from_json
from tusk.sim.machine import Frame, InterpError
from tusk.sim.ops import HANDLERS

BRANCHES = frozenset({Op.CompareAndBranch, Op.UnconditionalBranch})
RETURNS = frozenset({81, 82, 17})  # Return, Exit, Halt
MAX_CALL_DEPTH = 64


class _Return(Exception):
    pass


def _table() -> list:
    """Opcode -> handler, as a list (faster than a dict in the hot loop); control ops are markers."""
    table: list = [None] * len(OPCODE_NAMES)
    for op, h in HANDLERS.items():
        table[op] = h
    for op in LOOP_OPCODES:
        table[op] = _run_loop
    for op in BRANCHES:
        table[op] = _BRANCH
    for op in RETURNS:
        table[op] = _RETURN
    table[Op.NKIKernel] = _call
    return table


def _BRANCH(fr: Frame, i: int):  # marker: handled by _run_rows
    raise AssertionError


def _RETURN(fr: Frame, i: int):
    raise _Return()


TABLE: list = []


def run_function(fr: Frame) -> None:
    """Execute ``fr.fn`` from its first instruction."""
    global TABLE
    if not TABLE:
        TABLE = _table()
    fn = fr.fn
    opc = fn.insts["opcode"]
    loops = np.isin(opc, list(LOOP_OPCODES)).any()
    branches = np.isin(opc, list(BRANCHES)).any()
    try:
        if not loops and not branches:
            _run_rows(fr, range(len(fr.opcode)))
        elif not branches:
            rows = _block_rows(fr)
            for b in fn.top_blocks():
                _run_rows(fr, rows[b])
        else:
            _run_branching(fr)
    except _Return:
        pass


def _block_rows(fr: Frame) -> dict[int, list[int]]:
    rows = getattr(fr, "_rows", None)
    if rows is None:
        rows = {b: r.tolist() for b, r in fr.fn.block_rows().items()}
        fr._rows = rows  # type: ignore[attr-defined]
    return rows


def _locate(fr: Frame, i: int, e: Exception) -> InterpError:
    if isinstance(e, InterpError):
        return e
    if isinstance(e, MemoryError):  # an access pattern (or tile) the machine cannot hold: the program's size
        msg = f"it needs more memory than this machine has ({e})"
    else:
        msg = e.message if isinstance(e, TuskError) else f"{type(e).__name__}: {e}"
    return InterpError(f"function {fr.fn.name}: instruction {fr.name(i)} ({fr.opname(i)}): {msg}")


def _run_rows(fr: Frame, rows) -> str | None:
    """Run ``rows`` in order; returns the block name a taken branch jumps to (or None)."""
    table = TABLE
    opc, pred = fr.opcode, fr.pred
    fr.m.count(len(rows), fr.fn)
    i = -1
    try:
        for i in rows:
            h = table[opc[i]]
            if h is None:
                opaque = " (an opcode of KLR's producer, kept opaque)" if opc[i] in OPAQUE_OPCODES else ""
                raise PassError(f"opcode {OPCODE_NAMES[opc[i]]}{opaque} is not supported by the interpreter")
            p = pred[i]
            if p >= 0 and not fr.preds_hold(p):
                continue
            fr.cur = i
            if h is _BRANCH:
                target = _branch(fr, i)
                if target is not None:
                    return target
                continue
            h(fr, i)
    except (_Return, InterpError):
        raise
    except (TuskError, ValueError, IndexError, TypeError, KeyError, ZeroDivisionError, OverflowError,
            MemoryError) as e:
        raise _locate(fr, i, e) from None
    return None


# --------------------------------------------------------------------------- loops


def _bound(fr: Frame, v) -> int:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    if isinstance(v, str):
        return int(fr.m.regs[v])
    return int(expr_from_json(thaw(v)).eval(fr.env))


def _body(fr: Frame, i: int) -> list[list[int]]:
    rows = _block_rows(fr)
    return [rows[b] for b in fr.fn.body_blocks(i)]


def _run_body(fr: Frame, i: int, body: list[list[int]]) -> None:
    for rows in body:
        if _run_rows(fr, rows) is not None:
            raise PassError("branches inside loop bodies are not supported by the interpreter")


def _run_loop(fr: Frame, i: int) -> None:
    op = fr.opcode[i]
    attrs = fr.attrs(i)
    body = _body(fr, i)
    if op == Op.DoWhile:
        cond = attrs.get("cond")
        if not isinstance(cond, str):
            raise InputError(f"DoWhile needs a register name in 'cond', got {cond!r}")
        while True:
            _run_body(fr, i, body)
            fr.m.count(1, fr.fn)
            if not fr.m.regs[cond]:
                break
        return
    ax = attrs.get("LoopAxis") if op == Op.Loop else attrs.get("DynamicForLoopAxis", attrs.get("LoopAxis"))
    if ax is None:
        raise InputError("loop instruction has no loop axis")
    name = ax["name"]
    lb, ub, stride = _bound(fr, ax["lb"]), _bound(fr, ax["ub"]), _bound(fr, ax.get("stride", 1))
    if stride == 0:
        raise InputError("loop stride is 0")
    axes = fr.axes
    had = name in axes
    old = axes[name] if had else 0
    try:
        for v in range(lb, ub, stride):
            axes[name] = v
            _run_body(fr, i, body)
    finally:
        if had:
            axes[name] = old
        else:
            axes.pop(name, None)


# --------------------------------------------------------------------------- branches

_RELS = {"EQ": lambda a, b: a == b, "NE": lambda a, b: a != b, "LT": lambda a, b: a < b,
         "LE": lambda a, b: a <= b, "GT": lambda a, b: a > b, "GE": lambda a, b: a >= b}


def _branch(fr: Frame, i: int) -> str | None:
    """The block a branch jumps to, or None to fall through."""
    attrs = fr.attrs(i)
    if fr.opcode[i] == Op.UnconditionalBranch:
        return _target(attrs.get("target"))
    op = str(attrs.get("comp_op", "")).upper().replace("_", "")
    if op.startswith("IS"):
        op = op[2:]
    ins, _, _ = fr.split(i)
    if op in ("ALWAYS", "TRUE", "UNCONDITIONAL"):
        taken = True
    else:
        rel, kind = op[:2], op[2:]
        if rel not in _RELS or kind not in ("REG", "IMM"):
            raise PassError(f"comparison {attrs.get('comp_op')!r} is not supported by the interpreter")
        vals = [fr.scalar(j) for j in ins]
        if kind == "IMM" and "imm" in attrs:
            vals = vals[:1] + [attrs["imm"]]
        if len(vals) < 2:
            raise InputError(f"{attrs.get('comp_op')} needs two operands, has {len(vals)}")
        taken = _RELS[rel](vals[0], vals[1])
    return _target(attrs.get("on_true")) if taken else _target(attrs.get("on_false"))


def _target(name) -> str | None:
    return name if isinstance(name, str) and name else None


def _run_branching(fr: Frame) -> None:
    fn = fr.fn
    top = fn.top_blocks()
    rows = _block_rows(fr)
    names = {fn.strings[fn.blocks.get("name", b)]: k for k, b in enumerate(top)}
    k = 0
    while k < len(top):
        target = _run_rows(fr, rows[top[k]])
        if target is None:
            k += 1
            continue
        if target not in names:
            raise InputError(f"function {fn.name}: branch to {target!r}, which is not a top-level block")
        k = names[target]


# --------------------------------------------------------------------------- calls


def _call(fr: Frame, i: int) -> None:
    attrs = fr.attrs(i)
    fname = attrs.get("func")
    if not isinstance(fname, str):
        raise InputError("NKIKernel has no 'func' naming the called function")
    callee = fr.m.module.function(fname)
    caller = fr.fn
    maps = dict(attrs.get("func_args") or {})
    maps.update(attrs.get("func_outs") or {})
    bindings = {}
    ml = callee.memlocs
    for r, (mtype, addr, nid) in enumerate(zip(ml["mtype"].tolist(), ml["addr"].tolist(), ml["name"].tolist())):
        if mtype != Mem.DRAM or addr >= 0:
            continue
        kname = callee.strings[nid]
        target = maps.get(kname) if maps else kname
        if target is None:
            continue
        m = _caller_memloc(caller, target)
        if m < 0:
            if maps:
                raise InputError(f"call of {fname}: {kname} is bound to {target!r}, which names no memory location "
                                f"of {caller.name}")
            continue
        bindings[r] = fr.loc(m)
    if fr.m.depth >= MAX_CALL_DEPTH:
        raise InputError(f"call depth above {MAX_CALL_DEPTH} (recursive kernels?)")
    fr.m.depth += 1
    try:
        from tusk.sim.interp import load_consts  # interp imports this module

        frame = Frame(fr.m, callee, bindings)
        load_consts(frame, set(bindings))
        run_function(frame)
    finally:
        fr.m.depth -= 1


def _caller_memloc(fn, name: str) -> int:
    sid = fn.strings.find(name)
    if sid < 0:
        return -1
    hits = np.nonzero(fn.memlocs["name"] == sid)[0]
    if len(hits):
        return int(hits[0])
    sets = np.nonzero(fn.sets["name"] == sid)[0]
    if len(sets):
        locs = np.nonzero(fn.memlocs["set"] == int(sets[0]))[0]
        if len(locs):
            return int(locs[0])
    return -1
