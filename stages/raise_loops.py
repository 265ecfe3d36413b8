"""RaiseLoops: counted register loops (KLR's block CFG) -> BIR static loops.

KLR has no loop statement: a dynamic loop is a CFG of blocks over named
registers (klr-format.md §3.10), and TranslateNKIASTToBIR lowers it to
``RegisterMove`` / ``RegisterAlu`` / ``CompareAndBranch`` /
``UnconditionalBranch`` rows, with accesses whose offset is a register
(physical operands carrying a DynamicAPInfo of ``IntRuntimeValue`` terms).
This pass rewrites the loops whose trip count is known at compile time into
``Loop`` rows with a ``LoopAxis`` and one body block -- what a BIR-JSON
``InstLoop`` nest loads into -- so that the unroll passes, rotation,
scheduling and the timing model see them.

What is recognised (structurally, by the CFG, never by names):

* the top-level blocks in order; a *head* block holding only
  ``CompareAndBranch rel(counter, bound)`` whose true edge is the next block
  (the body's first) and whose false edge names a later block (the exit);
  the block just before the exit ends with the *latch*: the same compare to
  body / exit, or a jump back to the head.  The body in between is parsed
  the same way (nested loops).  Jumps to the next block are fall-throughs.
  Every branch of the function must be one of these, else the function is
  left as it is (runtime ``if``, other shapes).
* register values by abstract interpretation: a register's value is an
  affine expression in the raised loops' axes (``RegisterMove`` of an
  integer, ``RegisterAlu`` add / subtract / mult by a constant) or unknown.
  A loop is *counted* when counter and bound are constants on entry, one
  body pass moves the counter by a constant step and leaves the bound
  alone; its trip count follows from the relation.  Each loop gets a
  normalised axis ``range(0, trip)`` named after its head block.

What is raised, and what is dropped:

* a register is *dropped* (its moves and adds removed) when every read of it
  is an access offset whose value is known there as an affine expression of
  the raised axes, the source of a dropped register's update, or the compare
  of a raised loop.  Such accesses become ``symbolic_ap`` operands with the
  offset ``static offset + sum(coef * value)`` (a physical offset when the
  value is a constant).
* a counted loop is raised when everything it writes is dropped and its
  body holds no loop that stays: its compares and jumps go, its body
  becomes one block under a ``Loop`` row, and the exit's code follows the
  loop.

What is kept, with the reason: loops whose bound is read from memory
(``TensorLoad``), or whose counter is not a constant step (not counted);
loops that write a register read elsewhere (a ``TensorSave``, a branch, an
access whose value is not affine in the axes): removing their register
updates would change what is read; loops around a kept loop (its branches
cannot sit in a static loop body).  Correctness first: a register is only
dropped, and a loop only raised, when every read is accounted for.
Registers are 64-bit in the interpreter; values that would leave the int32
range are treated as unknown.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tusk.ir.columns import Record, Table
from tusk.ir.enums import DTYPE_SIZES, LOOP_OPCODES, Engine, Kind, Mem, Op, Role
from tusk.ir.expr import AffineIdx, IntRuntimeValue, QuasiAffine, const, idx, runtime
from tusk.ir.module import Function, Module, _ranges, remap_edges
from tusk.ir.values import ImmValue, SymAddr
from tusk.stages.base import Pass, Stats

BRANCHES = frozenset({Op.CompareAndBranch, Op.UnconditionalBranch})
CALLS = frozenset({Op.NKIKernel, Op.NKIKLIRKernel, Op.Call})  # a callee may touch registers: left alone
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
_COMPARE = re.compile(r"(LT|LE|GT|GE|NE)(REG|IMM)")

Value = QuasiAffine | None  # None: unknown (top)


@dataclass(frozen=True)
class RaiseLoops(Pass):
    """Rewrite counted register loops (KLR dynamic loops) into static BIR loops (see module docstring)."""

    name = "raise_loops"
    version = "1"

    def run(self, module: Module) -> tuple[Module, Stats]:
        out = module.copy()
        stats = {"loops": 0, "raised": 0, "kept": 0, "registers_dropped": 0, "instructions_removed": 0,
                 "unstructured_functions": 0}
        for k, fn in enumerate(out.functions):
            new, st = raise_function(fn)
            out.functions[k] = new
            for key, v in st.items():
                stats[key] += v
        self.log.info("Raised %d of %d register loops.", stats["raised"], stats["loops"])
        return out, stats


# ----------------------------------------------------------------------------- the CFG tree


@dataclass(eq=False)
class _Loop:
    id: int
    head: int            # index into the top-level block list
    exit: int            # index of the exit block (the latch is in exit - 1)
    cmp_row: int         # the head's CompareAndBranch
    latch_row: int       # the latch's CompareAndBranch or UnconditionalBranch
    rel: str             # LT LE GT GE NE
    counter: int         # register row compared
    bound: tuple         # ("reg", row) | ("imm", value)
    body: list = field(default_factory=list)   # items: int (a block index) or _Loop
    written: frozenset = frozenset()           # registers written anywhere in head..latch
    axis: str = ""
    trip: int = 0
    extra: int | None = -1   # the blocks' shared extras record (None: they differ, the loop stays)


class _Unstructured(Exception):
    pass


class _Fn:
    """Per-instruction facts of one function, as Python lists (the analysis walks rows one by one)."""

    def __init__(self, fn: Function):
        self.fn = fn
        ins, ops = fn.insts, fn.operands
        self.opcode = ins["opcode"].tolist()
        self.pred = ins["pred"].tolist()
        self.attrs = ins["attrs"].tolist()
        starts, counts = ins["ops"].tolist(), ins["nops"].tolist()
        kind, role, aux, dyn = ops["kind"].tolist(), ops["role"].tolist(), ops["aux"].tolist(), ops["dyn"].tolist()
        self.kind, self.aux = kind, aux
        reg_by_name = {fn.strings[n]: r for r, n in enumerate(fn.regs["name"].tolist())}
        self.reg_names = {r: n for n, r in reg_by_name.items()}
        n = len(self.opcode)
        self.ins: list[list[int]] = [[] for _ in range(n)]      # operand rows, role IN
        self.out_regs: list[list[int]] = [[] for _ in range(n)]
        self.dyn_ops: list[list[int]] = [[] for _ in range(n)]    # operands whose offset reads registers
        self.op_regs: dict[int, list[int]] = {}                   # rewritable operand -> registers it reads
        self.observed: set[int] = set()   # registers read in a way the pass does not rewrite
        self.foreign_write: set[int] = set()  # registers written by something other than a move / ALU op
        self.writes: dict[int, list[int]] = {}
        self.reads: dict[int, list[tuple[str, int]]] = {}  # reg -> [("op", operand) | ("row", row)]
        for i in range(n):
            s, c = starts[i], counts[i]
            for j in range(s, s + c):
                k = kind[j]
                if k == Kind.REGISTER or (k == Kind.REGISTER_AP and aux[j] >= 0):
                    r = aux[j]
                    if k == Kind.REGISTER_AP:
                        self.observed.add(r)
                    if role[j] == Role.OUT:
                        self.out_regs[i].append(r)
                        self.writes.setdefault(r, []).append(i)
                    else:
                        self.reads.setdefault(r, []).append(("row", i))
                if role[j] == Role.IN:
                    self.ins[i].append(j)
                if dyn[j] >= 0:
                    self._dynamic(j, fn.values[dyn[j]], k, reg_by_name, i)
                if k in (Kind.SYMBOLIC, Kind.SYMBOLIC_IMM) and aux[j] >= 0:
                    v = fn.values[aux[j]]
                    exprs = [v.offset, v.block] if isinstance(v, SymAddr) else [v]
                    self._observe(exprs, reg_by_name)
            if self.pred[i] >= 0:
                self._observe([p.expr for p in fn.values[self.pred[i]] or ()], reg_by_name)
            op = self.opcode[i]
            for r in self.out_regs[i]:
                if op not in (Op.RegisterMove, Op.RegisterAlu) or self.pred[i] >= 0 or len(self.out_regs[i]) != 1:
                    self.foreign_write.add(r)

    def _observe(self, exprs: list, reg_by_name: dict[str, int]) -> None:
        for e in exprs:
            if isinstance(e, QuasiAffine):
                for a in e.walk():
                    if isinstance(a, IntRuntimeValue) and a.reg in reg_by_name:
                        self.observed.add(reg_by_name[a.reg])

    def _dynamic(self, j: int, d: Any, kind: int, reg_by_name: dict[str, int], row: int) -> None:
        regs: list[int] = []
        ok = kind == Kind.PHYSICAL
        for e, _coef in d.aff_expr:
            for a in e.walk():
                if isinstance(a, IntRuntimeValue) and a.reg in reg_by_name:
                    regs.append(reg_by_name[a.reg])
                else:
                    ok = False
            if any(not isinstance(a, IntRuntimeValue) for a, _ in e.terms):
                ok = False
        if not regs:
            return
        if not ok:
            self.observed.update(regs)
            return
        regs = sorted(set(regs))
        self.op_regs[j] = regs
        self.dyn_ops[row].append(j)
        for r in regs:
            self.reads.setdefault(r, []).append(("op", j))

    # ------------------------------------------------------------ operand values
    def offset_expr(self, j: int, values: dict[int, QuasiAffine]) -> QuasiAffine:
        """The element offset of dynamic operand ``j`` with its registers' values: static offset + sum(coef * value)."""
        fn = self.fn
        env = {self.reg_names[r]: v for r, v in values.items()}
        total = const(int(fn.operands.get("offset", j)))
        for e, coef in fn.values[fn.operands.get("dyn", j)].aff_expr:
            v = const(e.c)
            for atom, c in e.terms:
                v = v + env[atom.reg] * c
            total = total + v * int(coef)
        return total

    def in_bounds(self, j: int, offset: QuasiAffine, ranges: dict) -> bool:
        """Does operand ``j`` at ``offset`` stay inside its memory location over the axes' ranges (the verifier's test)?"""
        fn = self.fn
        ops, ml = fn.operands, fn.memlocs
        m = ops.get("memloc", j)
        p = ops.get("pattern", j)
        if m < 0 or p < 0:
            return False
        size = DTYPE_SIZES[ops.get("dtype", j)]
        per_part = ml.get("pbytes", m) // size
        cap = per_part * ml.get("nparts", m) if ml.get("mtype", m) in (Mem.SB, Mem.PSUM) else per_part
        lo_p = sum(step * (num - 1) for step, num in fn.patterns[p] if num > 0 and step < 0)
        hi_p = sum(step * (num - 1) for step, num in fn.patterns[p] if num > 0 and step > 0)
        lo, hi = offset.bounds(ranges)
        return bool(np.isfinite(lo) and np.isfinite(hi) and lo + lo_p >= 0 and hi + hi_p < cap)

    def imm(self, j: int) -> Value:
        k = self.kind[j]
        if k == Kind.IMM:
            v = self.fn.values[self.aux[j]]
            v = v.value if isinstance(v, ImmValue) else v
            if isinstance(v, int) and not isinstance(v, bool):
                return const(v)
        return None


# ----------------------------------------------------------------------------- parse


def _parse(f: _Fn, blocks: list[int], names: list[str], rows: dict[int, list[int]]) -> list:
    """The top-level blocks as a tree of blocks and loops; raises _Unstructured for any other control flow."""
    index = {n: k for k, n in enumerate(names)}
    accounted: set[int] = set()
    loops: list[_Loop] = []
    nb = len(blocks)

    def last(k: int) -> int:
        r = rows[blocks[k]]
        return r[-1] if r else -1

    def compare(i: int) -> tuple | None:
        """(rel, signature) of a CompareAndBranch reading a register and a register or immediate."""
        attrs = f.fn.record(f.attrs[i])
        m = _COMPARE.fullmatch(str(attrs.get("comp_op", "")).upper().replace("_", "").removeprefix("IS"))
        ins = f.ins[i]
        if not m or len(ins) < 1 or f.kind[ins[0]] != Kind.REGISTER:
            return None
        rel, kind = m.group(1), m.group(2)
        if kind == "IMM" and "imm" in attrs:
            b = attrs["imm"]
            bound = ("imm", b) if isinstance(b, int) and not isinstance(b, bool) else None
        elif len(ins) >= 2 and f.kind[ins[1]] == Kind.REGISTER:
            bound = ("reg", f.aux[ins[1]])
        elif len(ins) >= 2 and f.imm(ins[1]) is not None:
            bound = ("imm", f.imm(ins[1]).c)
        else:
            bound = None
        if bound is None:
            return None
        return rel, f.aux[ins[0]], bound, attrs.get("on_true"), attrs.get("on_false")

    def match(k: int, hi: int) -> _Loop | None:
        r = rows[blocks[k]]
        if len(r) != 1 or f.opcode[r[0]] != Op.CompareAndBranch or f.pred[r[0]] >= 0 or k + 1 >= hi:
            return None
        head = compare(r[0])
        if head is None:
            return None
        rel, counter, bound, on_true, on_false = head
        x = index.get(on_false) if isinstance(on_false, str) else None
        if on_true != names[k + 1] or x is None or not k + 1 < x < hi:
            return None
        lr = last(x - 1)
        if lr < 0 or f.pred[lr] >= 0:
            return None
        if f.opcode[lr] == Op.CompareAndBranch:
            if compare(lr) != head:
                return None
        elif f.opcode[lr] == Op.UnconditionalBranch:
            if f.fn.record(f.attrs[lr]).get("target") != names[k]:
                return None
        else:
            return None
        loop = _Loop(len(loops), k, x, r[0], lr, rel, counter, bound)
        loops.append(loop)
        accounted.update((r[0], lr))
        loop.body = region(k + 1, x)
        return loop

    def region(lo: int, hi: int) -> list:
        items: list = []
        k = lo
        while k < hi:
            loop = match(k, hi)
            if loop is not None:
                items.append(loop)
                k = loop.exit
                continue
            items.append(k)
            i = last(k)
            if i >= 0 and f.opcode[i] == Op.UnconditionalBranch and k + 1 < nb \
                    and f.fn.record(f.attrs[i]).get("target") == names[k + 1] and f.pred[i] < 0:
                accounted.add(i)  # a jump to the next block: a fall-through
            k += 1
        return items

    for b in blocks:  # branches end their block
        r = rows[b]
        if any(f.opcode[i] in BRANCHES for i in r[:-1]):
            raise _Unstructured()
    tree = region(0, nb)
    for b in blocks:
        for i in rows[b]:
            if f.opcode[i] in BRANCHES and i not in accounted:
                raise _Unstructured()
    for loop in loops:
        written: set[int] = set()
        for k in range(loop.head, loop.exit):
            for i in rows[blocks[k]]:
                written.update(f.out_regs[i])
        loop.written = frozenset(written)
        extras = {int(f.fn.blocks.get("extra", blocks[k])) for k in range(loop.head, loop.exit)}
        loop.extra = extras.pop() if len(extras) == 1 else None
    return tree


def _loops(items: list) -> list[_Loop]:
    out = []
    for it in items:
        if isinstance(it, _Loop):
            out.append(it)
            out.extend(_loops(it.body))
    return out


# ----------------------------------------------------------------------------- abstract interpretation


def _trip(rel: str, c: int, b: int, step: int) -> int | None:
    """Iterations of ``for (x = c; x rel b; x += step)``; None when it would not end (or only by wrapping)."""
    if rel in ("LT", "LE"):
        if not (c < b if rel == "LT" else c <= b):
            return 0
        if step <= 0:
            return None
        return -(-(b - c) // step) if rel == "LT" else (b - c) // step + 1
    if rel in ("GT", "GE"):
        if not (c > b if rel == "GT" else c >= b):
            return 0
        if step >= 0:
            return None
        return -(-(c - b) // -step) if rel == "GT" else (c - b) // -step + 1
    if c == b:  # NE
        return 0
    if (b - c) % step or (b - c) // step <= 0:
        return None
    return (b - c) // step


class _Analysis:
    """One abstract run of a function for a given set of loops to raise."""

    def __init__(self, f: _Fn, blocks: list[int], rows: dict[int, list[int]], raise_: set[_Loop]):
        self.f, self.blocks, self.rows, self.raise_ = f, blocks, rows, raise_
        self.failed: set[_Loop] = set()
        self.values: dict[int, dict[int, Value]] = {}  # rewritable operand -> register -> value (final run)

    # ------------------------------------------------------------ transfer
    def _operand(self, j: int, state: dict[int, Value]) -> Value:
        if self.f.kind[j] == Kind.REGISTER:
            return state.get(self.f.aux[j])
        return self.f.imm(j)

    def _row(self, i: int, state: dict[int, Value], ranges: dict, final: bool) -> None:
        f = self.f
        op = f.opcode[i]
        if op in BRANCHES:
            return
        if final:
            for j in f.dyn_ops[i]:
                self.values[j] = {r: state.get(r) for r in f.op_regs[j]}
        outs = f.out_regs[i]
        if not outs:
            return
        value: Value = None
        if len(outs) == 1 and f.pred[i] < 0:
            ins = f.ins[i]
            if op == Op.RegisterMove and len(ins) == 1:
                value = self._operand(ins[0], state)
            elif op == Op.RegisterAlu and len(ins) == 2:
                a, b = self._operand(ins[0], state), self._operand(ins[1], state)
                alu = f.fn.record(f.attrs[i]).get("op", "add")
                if a is not None and b is not None:
                    if alu == "add":
                        value = a + b
                    elif alu == "subtract":
                        value = a - b
                    elif alu == "mult" and (a.is_const or b.is_const):
                        value = a * b.c if b.is_const else b * a.c
        if value is not None:
            lo, hi = value.bounds(ranges)
            if np.isfinite(lo) and np.isfinite(hi) and (lo < INT32_MIN or hi > INT32_MAX):
                value = None
        for r in outs:
            state[r] = value

    def run(self, items: list, state: dict[int, Value], ranges: dict, final: bool) -> dict[int, Value]:
        for it in items:
            if isinstance(it, _Loop):
                state = self.loop(it, state, ranges, final)
            else:
                for i in self.rows[self.blocks[it]]:
                    self._row(i, state, ranges, final)
        return state

    # ------------------------------------------------------------ loops
    def loop(self, lp: _Loop, state: dict[int, Value], ranges: dict, final: bool) -> dict[int, Value]:
        if lp in self.raise_ and lp not in self.failed:
            out = self._counted(lp, state, ranges, final)
            if out is not None:
                return out
            self.failed.add(lp)
        # kept: anything it writes is unknown inside and after it
        inner = dict(state)
        for r in lp.written:
            inner[r] = None
        self.run(lp.body, inner, ranges, final)
        after = dict(state)
        for r in lp.written:
            after[r] = None
        return after

    def _counted(self, lp: _Loop, state: dict[int, Value], ranges: dict, final: bool) -> dict[int, Value] | None:
        c0 = state.get(lp.counter)
        b0 = state.get(lp.bound[1]) if lp.bound[0] == "reg" else const(lp.bound[1])
        if c0 is None or b0 is None or not c0.is_const or not b0.is_const:
            return None
        # one body pass from symbolic entry values: which registers move by a constant step
        entry = dict(state)
        marks = {r: runtime(f"\0{lp.id}:{r}") for r in lp.written}
        entry.update(marks)
        latch = self.run(lp.body, entry, ranges, False)
        delta: dict[int, int | None] = {}
        for r, m in marks.items():
            v = latch.get(r)
            d = None if v is None else v - m
            delta[r] = d.c if d is not None and d.is_const else None
        step = delta.get(lp.counter)
        if not step:
            return None
        if lp.bound[0] == "reg" and delta.get(lp.bound[1], 0) != 0:
            return None
        trip = _trip(lp.rel, c0.c, b0.c, step)
        if trip is None or trip < 1:
            return None
        # the body with every register as a function of the axis
        k = idx(lp.axis)
        inner_ranges = {**ranges, lp.axis: (0, trip - 1)}
        entry = dict(state)
        for r in lp.written:
            v, d = state.get(r), delta[r]
            entry[r] = None if v is None or d is None else v + k * d
        latch = self.run(lp.body, entry, inner_ranges, final)
        after = dict(state)
        for r in lp.written:
            v = latch.get(r)
            after[r] = None if v is None else v.subst({lp.axis: trip - 1})
        lp.trip = trip
        return after


def _affine_in_axes(v: Value) -> bool:
    return v is not None and all(isinstance(a, AffineIdx) for a in v.atoms())


# ----------------------------------------------------------------------------- the pass on one function


def raise_function(fn: Function) -> tuple[Function, dict[str, int]]:
    """``fn`` with its counted register loops raised (``fn`` itself when nothing changes), and counts."""
    st = {"loops": 0, "raised": 0, "kept": 0, "registers_dropped": 0, "instructions_removed": 0,
          "unstructured_functions": 0}
    opc = fn.insts["opcode"]
    if not np.isin(opc, list(BRANCHES)).any() or np.isin(opc, list(LOOP_OPCODES | CALLS)).any() \
            or (fn.blocks["parent"] >= 0).any():
        return fn, st
    f = _Fn(fn)
    blocks = fn.top_blocks()
    rows = {b: r.tolist() for b, r in fn.block_rows().items()}
    names = [fn.strings[fn.blocks.get("name", b)] for b in blocks]
    try:
        tree = _parse(f, blocks, names, rows)
    except _Unstructured:
        st["unstructured_functions"] = 1
        return fn, st
    loops = _loops(tree)
    st["loops"] = len(loops)
    _name_axes(fn, loops, names)
    cmp_rows = {lp.cmp_row: lp for lp in loops} | {lp.latch_row: lp for lp in loops}
    raise_ = set(loops)
    dropped = {r for r in f.writes if r not in f.observed and r not in f.foreign_write}
    while True:
        an = _Analysis(f, blocks, rows, raise_)
        an.run(tree, {}, {}, True)
        changed = bool(an.failed)
        raise_ -= an.failed
        ranges = {lp.axis: (0, lp.trip - 1) for lp in loops if lp.trip > 0}
        for r in sorted(dropped):
            if not _reads_accounted(f, r, dropped, raise_, an.values, cmp_rows, ranges):
                dropped.discard(r)
                changed = True
        for lp in list(raise_):
            if not lp.written <= dropped or lp.extra is None or any(q not in raise_ for q in _loops(lp.body)):
                raise_.discard(lp)
                changed = True
        if not changed:
            break
    st["raised"] = len(raise_)
    st["kept"] = len(loops) - len(raise_)
    new, removed = _rewrite(f, tree, blocks, rows, names, raise_, dropped, an.values)
    if not removed and not raise_ and not dropped:
        return fn, st
    st["registers_dropped"] = len(fn.regs) - len(new.regs)
    st["instructions_removed"] = removed
    return new, st


def _name_axes(fn: Function, loops: list[_Loop], names: list[str]) -> None:
    taken = set(fn.inst_names())
    for lp in loops:
        base = names[lp.head]
        base = base[:-len(".head")] if base.endswith(".head") and len(base) > len(".head") else base
        axis, n = base, 1
        while axis in taken:
            n += 1
            axis = f"{base}#{n}"
        taken.add(axis)
        lp.axis = axis


def _reads_accounted(f: _Fn, r: int, dropped: set[int], raise_: set[_Loop], values: dict,
                     cmp_rows: dict[int, _Loop], ranges: dict) -> bool:
    for what, x in f.reads.get(r, ()):
        if what == "op":
            if not all(q in dropped for q in f.op_regs[x]):
                return False
            if x not in values or not all(_affine_in_axes(v) for v in values[x].values()):
                return False
            if not f.in_bounds(x, f.offset_expr(x, values[x]), ranges):
                return False  # the access leaves its tensor: keep it dynamic (the interpreter reports it)
        else:
            op = f.opcode[x]
            if op in (Op.RegisterMove, Op.RegisterAlu):
                if not all(q in dropped for q in f.out_regs[x]):
                    return False
            elif op == Op.CompareAndBranch:
                lp = cmp_rows.get(x)
                if lp is None or lp not in raise_:
                    return False
            else:
                return False
    return True


# ----------------------------------------------------------------------------- rebuild


@dataclass
class _Out:
    """An output block: its name and extras, and its entries (old rows, or loops with their body block)."""

    name: int              # string id
    extra: int
    entries: list = field(default_factory=list)  # int (old row) | ("loop", _Loop, _Out)


def _rewrite(f: _Fn, tree: list, blocks: list[int], rows: dict[int, list[int]], names: list[str],
             raise_: set[_Loop], dropped: set[int], values: dict) -> tuple[Function, int]:
    fn = f.fn
    drop: set[int] = set()
    for r in dropped:
        drop.update(f.writes.get(r, ()))
    heads = {names[lp.head] for lp in raise_}
    for lp in raise_:
        drop.update((lp.cmp_row, lp.latch_row))
    for b in blocks:
        for i in rows[b]:
            if f.opcode[i] == Op.UnconditionalBranch and fn.record(f.attrs[i]).get("target") in heads:
                drop.add(i)

    def targets_of(i: int) -> list:
        a = fn.record(f.attrs[i])
        return [a.get(k) for k in ("target", "on_true", "on_false")]

    kept_targets = {t for b in blocks for i in rows[b]
                    if f.opcode[i] in BRANCHES and i not in drop for t in targets_of(i)}
    kept_heads = {names[lp.head] for lp in _loops(tree) if lp not in raise_}
    bname = fn.blocks["name"].tolist()
    bextra = fn.blocks["extra"].tolist()
    top: list[_Out] = []

    def body(items: list, out: _Out) -> None:
        for it in items:
            if isinstance(it, _Loop):
                sub = _Out(bname[blocks[it.head + 1]], bextra[blocks[it.head + 1]])
                out.entries.append(("loop", it, sub))
                body(it.body, sub)
            else:
                for i in rows[blocks[it]]:
                    if i in drop:
                        continue
                    assert f.opcode[i] not in BRANCHES, "a branch left in a raised loop body"
                    out.entries.append(i)

    def kept(items: list) -> None:
        for it in items:
            if isinstance(it, _Loop) and it in raise_:
                if not top or names[it.head] in kept_targets or top[-1].extra != it.extra:
                    top.append(_Out(bname[blocks[it.head]], bextra[blocks[it.head]]))
                sub = _Out(bname[blocks[it.head + 1]], bextra[blocks[it.head + 1]])
                top[-1].entries.append(("loop", it, sub))
                body(it.body, sub)
            elif isinstance(it, _Loop):
                kept([it.head])
                kept(it.body)
            else:
                b = blocks[it]
                top.append(_Out(bname[b], bextra[b], [i for i in rows[b] if i not in drop]))

    kept(tree)
    # jumps to the next block fall through; blocks nothing jumps to join the block before them
    # (a kept loop keeps its shape: the jump into its head stays)
    for a, b in itertools.pairwise(top):
        last = a.entries[-1] if a.entries else None
        if isinstance(last, int) and f.opcode[last] == Op.UnconditionalBranch and \
                fn.record(f.attrs[last]).get("target") == fn.strings[b.name] and fn.strings[b.name] not in kept_heads:
            drop.add(a.entries.pop())
    targets = {t for o in top for e in o.entries if isinstance(e, int) and f.opcode[e] in BRANCHES
               for t in targets_of(e)}
    merged: list[_Out] = []
    for o in top:
        prev = merged[-1] if merged else None
        name = fn.strings[o.name]
        if prev is not None and name not in targets and name not in kept_heads and prev.extra == o.extra and not (
                prev.entries and isinstance(prev.entries[-1], int) and f.opcode[prev.entries[-1]] in BRANCHES):
            prev.entries.extend(o.entries)
        else:
            merged.append(o)
    return _build(f, merged, dropped, values), len(drop)


def _build(f: _Fn, top: list[_Out], dropped: set[int], values: dict) -> Function:
    fn = f.fn
    out = Function(fn.name, fn.kind, fn.attrs)
    out.extras = fn.extras
    out.strings, out.patterns, out.values = fn.strings.copy(), fn.patterns.copy(), fn.values.copy()
    out.memlocs, out.sets = fn.memlocs.copy(), fn.sets.copy()
    # registers still named by a row that stays
    old_ins = fn.insts
    order: list[tuple] = []   # (old row | -1, block, loop)
    blocks: list[tuple[int, int, int]] = []

    def emit(o: _Out, parent: int) -> None:
        b = len(blocks)
        blocks.append((o.name, parent, o.extra))
        for e in o.entries:
            if isinstance(e, int):
                order.append((e, b, None))
            else:
                _, lp, sub = e
                order.append((-1, b, lp))
                emit(sub, len(order) - 1)

    for o in top:
        emit(o, -1)
    old_rows = np.array([r for r, _, _ in order], dtype=np.int64)
    keep = old_rows >= 0
    n = len(order)
    ops = fn.operands
    nops = np.zeros(n, dtype=np.int64)
    nops[keep] = old_ins["nops"][old_rows[keep]]
    starts = np.zeros(n, dtype=np.int64)
    if n:
        np.cumsum(nops[:-1], out=starts[1:])
    src_ops = _ranges(old_ins["ops"][old_rows[keep]], nops[keep])
    operands = ops.take(src_ops)
    # rewritten offsets
    kind, aux, dyn, offset = operands["kind"], operands["aux"], operands["dyn"], operands["offset"]
    names = f.reg_names
    for k, j in enumerate(src_ops.tolist()):
        regs = f.op_regs.get(j)
        if not regs or not all(r in dropped for r in regs):
            continue
        total = f.offset_expr(j, values[j])
        dyn[k] = -1
        if total.is_const:
            offset[k] = total.c
        else:
            kind[k] = Kind.SYMBOLIC
            aux[k] = out.intern(SymAddr(total))
            offset[k] = 0
    # registers: those some remaining operand names
    reg_rows = set(aux[(kind == Kind.REGISTER) | ((kind == Kind.REGISTER_AP) & (aux >= 0))].tolist())
    reg_names = {names[r] for r in range(len(fn.regs))}
    for d in set(dyn[dyn >= 0].tolist()):
        for e, _ in out.values[d].aff_expr:
            for a in e.walk():
                if isinstance(a, IntRuntimeValue) and a.reg in reg_names:
                    reg_rows.add(fn.reg_by_name(a.reg))
    kept_regs = sorted(reg_rows)
    remap = np.full(len(fn.regs) + 1, -1, dtype=np.int64)
    remap[kept_regs] = np.arange(len(kept_regs))
    out.regs = fn.regs.take(kept_regs)
    is_reg = (kind == Kind.REGISTER) | ((kind == Kind.REGISTER_AP) & (aux >= 0))
    aux[is_reg] = remap[aux[is_reg]]
    out.operands = operands
    # instructions
    cols = {name: np.zeros(n, dtype=dt) for name, dt in old_ins.schema}
    for name in ("opcode", "engine", "name", "iter", "attrs", "pred"):
        cols[name][keep] = old_ins[name][old_rows[keep]]
    cols["block"][:] = [b for _, b, _ in order]
    cols["ops"][:] = starts
    cols["nops"][:] = nops
    for k, (r, _, lp) in enumerate(order):
        if r < 0:
            cols["opcode"][k] = Op.Loop
            cols["engine"][k] = Engine.Unassigned
            cols["name"][k] = out.s(lp.axis)
            cols["iter"][k] = -1
            cols["pred"][k] = -1
            cols["attrs"][k] = out.intern_record(Record.of(
                {"LoopAxis": {"name": lp.axis, "lb": 0, "ub": lp.trip, "stride": 1}}))
    out.insts = Table.from_arrays(old_ins.schema, cols)
    out.blocks = Table.from_arrays(fn.blocks.schema, {
        "name": np.array([b[0] for b in blocks], dtype=np.int64),
        "parent": np.array([b[1] for b in blocks], dtype=np.int64),
        "extra": np.array([b[2] for b in blocks], dtype=np.int64)})
    new_row = np.full(len(old_ins) + 1, -1, dtype=np.int64)
    new_row[old_rows[keep]] = np.nonzero(keep)[0]
    out.deps, out.carried = remap_edges(fn.deps, new_row), remap_edges(fn.carried, new_row)
    out.invalidate()
    return out
