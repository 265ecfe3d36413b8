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

from ir.columns import Record
from ir.enums import Dt, Engine, Kind, Op, Role
from ir.expr import AffinePredicate, QuasiAffine, mod, runtime
from ir.module import Function
from ir.values import ImmValue, SymAddr


def lower_dynamic_exprs(fn: Function) -> Function:
    loops = np.nonzero(fn.insts["opcode"] == Op.DynamicForLoop)[0].tolist()
    if not loops:
        return fn
    out = fn.copy()
    ends = _subtree_ends(out)
    before: dict[int, int] = {}  # original row -> new row to place just before it
    after: dict[int, int] = {}   # original row -> new row to place just after it
    for loop in loops:
        ax = out.loop_axis(loop)
        reg_name = f"iv_{ax.name}"
        reg = out.reg_by_name(reg_name)
        if reg < 0:
            reg = out.add_reg(reg_name)
        lb, stride = int(ax.lb), int(ax.stride)
        block = int(out.insts.get("block", loop))
        name = out.strings[out.insts.get("name", loop)]
        before[loop] = out.add_inst(Op.RegisterMove, Engine.SP, block, f"{name}.iv_init", [
            (Role.IN, Kind.IMM, Dt.int32, -1, 0, -1, out.intern(ImmValue(lb)), -1, -1),
            (Role.OUT, Kind.REGISTER, Dt.int32, -1, 0, -1, reg, -1, -1)])
        last_body = out.body_blocks(loop)[-1]
        end = ends[loop]
        after[end] = out.add_inst(Op.RegisterAlu, Engine.SP, last_body, f"{name}.iv_step", [
            (Role.IN, Kind.REGISTER, Dt.int32, -1, 0, -1, reg, -1, -1),
            (Role.IN, Kind.IMM, Dt.int32, -1, 0, -1, out.intern(ImmValue(stride)), -1, -1),
            (Role.OUT, Kind.REGISTER, Dt.int32, -1, 0, -1, reg, -1, -1)],
            attrs=Record.of(op="add", is_64bit=False))
        _rewrite_body(out, loop + 1, end + 1, ax.name, runtime(reg_name))
    n = len(fn.insts)
    order: list[int] = []
    for row in range(n):
        if row in before:
            order.append(before[row])
        order.append(row)
        if row in after:
            order.append(after[row])
    return out.take_insts(np.array(order, dtype=np.int64))


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
