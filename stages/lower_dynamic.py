"""LowerDynamicExprs: dynamic loops keep running as loops, but their index
becomes a register.

A DynamicForLoop's trip count is only known at run time, so the unroller
does not clone it.  Instead its induction variable is materialised: a
RegisterMove sets register ``iv_<axis>`` to the lower bound before the loop
and a RegisterAlu adds the stride at the end of the body.  Every expression
in the body that used the loop index now reads that register (an
IntRuntimeValue), and a block index into a block tensor becomes a ring
index ``(index) mod n_blocks`` — this is the only place Tusk creates a
ModuloExpr, as in the backend.
"""

from __future__ import annotations

import numpy as np

from tusk.ir.columns import Record
from tusk.ir.enums import Dt, Engine, Kind, Op, Role
from tusk.ir.errors import PassError
from tusk.ir.expr import AffinePredicate, IntRuntimeValue, QuasiAffine, expr_from_json, mod, runtime
from tusk.ir.module import Function
from tusk.ir.values import ImmValue, SymAddr

INDUCTION_KEY = "induction_register"  # set on a DynamicForLoop once its index lives in a register


def lower_dynamic_exprs(fn: Function) -> Function:
    loops = [r for r in np.nonzero(fn.insts["opcode"] == Op.DynamicForLoop)[0].tolist()
             if INDUCTION_KEY not in fn.inst(r).attrs]  # lowering twice would step the register twice
    if not loops:
        return fn
    out = fn.copy()
    ends = _subtree_ends(out)
    before: dict[int, int] = {}         # original row -> new row to place just before it
    after: dict[int, list[int]] = {}    # original row -> new rows to place just after it
    for loop in loops:  # outer loops first: an inner loop's step goes before its outer loop's
        ax = out.loop_axis(loop)
        name = out.strings[out.insts.get("name", loop)]
        if isinstance(ax.stride, bool) or not isinstance(ax.stride, int):
            raise PassError(f"DynamicForLoop {name}: the stride must be a constant, not {ax.stride!r}")
        reg_name = f"iv_{ax.name}"
        reg = out.reg_by_name(reg_name)
        if reg < 0:
            reg = out.add_reg(reg_name)
        out.insts.set("attrs", loop, out.intern_record(out.inst(loop).attrs.with_(**{INDUCTION_KEY: reg_name})))
        block = int(out.insts.get("block", loop))
        args, attrs = _init(out, ax.lb, reg, block, f"{name}.iv_init")
        before[loop] = out.add_inst(*args, attrs=attrs)
        last_body = out.body_blocks(loop)[-1]
        end = ends[loop]
        after.setdefault(end, []).insert(0, out.add_inst(Op.RegisterAlu, Engine.SP, last_body, f"{name}.iv_step", [
            (Role.IN, Kind.REGISTER, Dt.int32, -1, 0, -1, reg, -1, -1),
            (Role.IN, Kind.IMM, Dt.int32, -1, 0, -1, out.intern(ImmValue(int(ax.stride))), -1, -1),
            (Role.OUT, Kind.REGISTER, Dt.int32, -1, 0, -1, reg, -1, -1)],
            attrs=Record.of(op="add", is_64bit=False)))
        _rewrite_body(out, loop + 1, end + 1, ax.name, runtime(reg_name))
    n = len(fn.insts)
    order: list[int] = []
    for row in range(n):
        if row in before:
            order.append(before[row])
        order.append(row)
        order.extend(after.get(row, ()))
    return out.take_insts(np.array(order, dtype=np.int64))


def _init(fn: Function, lb, reg: int, block: int, name: str) -> tuple[tuple, Record | None]:
    """add_inst arguments (and attributes) setting the induction register to the lower bound.

    A constant bound is a RegisterMove; a bound held in a register (its name,
    or an expression that is exactly one register) is a RegisterAlu ``+ 0``.
    """
    out_op = (Role.OUT, Kind.REGISTER, Dt.int32, -1, 0, -1, reg, -1, -1)
    if isinstance(lb, int) and not isinstance(lb, bool):
        return (Op.RegisterMove, Engine.SP, block, name,
                [(Role.IN, Kind.IMM, Dt.int32, -1, 0, -1, fn.intern(ImmValue(lb)), -1, -1), out_op]), None
    src_name = lb if isinstance(lb, str) else None
    if isinstance(lb, dict) or hasattr(lb, "items"):
        e = expr_from_json(dict(lb))
        atoms = e.atoms()
        if e.c == 0 and len(atoms) == 1 and isinstance(atoms[0], IntRuntimeValue) and e.terms[0][1] == 1:
            src_name = atoms[0].reg
    src = fn.reg_by_name(src_name) if src_name else -1
    if src < 0:
        raise PassError(f"{name}: a DynamicForLoop lower bound must be a constant or a register, not {lb!r}")
    return (Op.RegisterAlu, Engine.SP, block, name,
            [(Role.IN, Kind.REGISTER, Dt.int32, -1, 0, -1, src, -1, -1),
             (Role.IN, Kind.IMM, Dt.int32, -1, 0, -1, fn.intern(ImmValue(0)), -1, -1), out_op]), \
        Record.of(op="add", is_64bit=False)


def _subtree_ends(fn: Function) -> dict[int, int]:
    """Loop row -> last row of its subtree (rows are in preorder)."""
    parents = fn.blocks["parent"]
    blocks = fn.insts["block"]
    owner = {b: int(p) for b, p in enumerate(parents.tolist())}
    ends: dict[int, int] = {}
    for row in range(len(fn.insts)):
        b = int(blocks[row])
        while owner.get(b, -1) >= 0:  # every enclosing loop's subtree reaches this row
            loop = owner[b]
            ends[loop] = row
            b = int(blocks[loop])
    for loop in np.nonzero(np.isin(fn.insts["opcode"], (Op.Loop, Op.DynamicForLoop, Op.DoWhile)))[0].tolist():
        ends.setdefault(loop, loop)
    return ends


def _rewrite_body(fn: Function, lo: int, hi: int, axis: str, value: QuasiAffine) -> None:
    """Replace loop index ``axis`` by ``value`` in operands and predicates of rows [lo, hi)."""
    ops = fn.operands
    sub = {axis: value}
    for row in range(lo, hi):
        start, count = fn.insts.get("ops", row), fn.insts.get("nops", row)
        for j in range(start, start + count):
            kind = ops.get("kind", j)
            if kind == Kind.SYMBOLIC:
                sa: SymAddr = fn.values[ops.get("aux", j)]
                if axis not in sa.offset.free_axes() and (sa.block is None or axis not in sa.block.free_axes()):
                    continue
                block = sa.block
                if block is not None and axis in block.free_axes():
                    nb = int(fn.sets.get("n_blocks", fn.memlocs.get("set", ops.get("memloc", j))))
                    block = mod(block.subst(sub), nb)
                ops.set("aux", j, fn.intern(SymAddr(sa.offset.subst(sub), block)))
            elif kind == Kind.SYMBOLIC_IMM:
                e: QuasiAffine = fn.values[ops.get("aux", j)]
                if axis in e.free_axes():
                    ops.set("aux", j, fn.intern(e.subst(sub)))
        pid = fn.insts.get("pred", row)
        if pid >= 0:
            preds = fn.values[pid]
            if any(axis in p.free_axes() for p in preds):
                fn.insts.set("pred", row, fn.intern(tuple(AffinePredicate(p.expr.subst(sub), p.rel) for p in preds)))
