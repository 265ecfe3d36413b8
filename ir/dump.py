"""A readable text listing of a module, for people and for golden diffs.

    function main  attrs=[unrollable]
      t_set: Internal float32 [128, 512]
        t  SB parts 0..127  bytes [0, 2048)
      Block1:
        loop_i  Loop i in [0, 16) step 1
          i_body:
            dma_copy0  DMACopy@DMA  t[+0 (512,128)(1,512)] <- x[+65536*i (512,128)(1,512)]
"""

from __future__ import annotations

from tusk.ir.bir_json import FLAG_KEYS
from tusk.ir.enums import (
    DTYPE_NAMES,
    EDGE_NAMES,
    ENGINE_NAMES,
    MEM_NAMES,
    OPCODE_NAMES,
    TENSOR_KIND_NAMES,
    Kind,
    Mem,
    Role,
)
from tusk.ir.module import Function, Module
from tusk.ir.wire import WIRE

SKIP_ATTRS = {"LoopAxis", "DynamicForLoopAxis", WIRE}  # WIRE: how the file spelled it, not what it means


def dump(module: Module) -> str:
    head = [f"module arch={module.arch} attributes={dict(module.attributes)}"]
    return "\n".join(head + [dump_function(fn) for fn in module.functions]) + "\n"


def dump_function(fn: Function) -> str:
    lines = [f"function {fn.name}  kind={fn.kind}  attrs=[{', '.join(FLAG_KEYS.get(a, str(a)) for a in sorted(fn.attrs))}]"]
    for r in range(len(fn.regs)):
        lines.append(f"  reg {fn.strings[fn.regs.get('name', r)]}")
    mset = fn.memlocs["set"]
    for s in range(len(fn.sets)):
        row = fn.sets.row(s)
        block = f" blocks={row['n_blocks']}" if row["is_block"] else ""
        lines.append(f"  {fn.strings[row['name']]}: {TENSOR_KIND_NAMES[row['kind']]} {DTYPE_NAMES[row['dtype']]} "
                     f"{list(fn.value(row['shape']) or ())}{block}")
        for m in (mset == s).nonzero()[0].tolist():
            lines.append("    " + _memloc(fn, m))
    incoming: dict[int, list[str]] = {}
    for src, dst, kind in zip(fn.deps["src"].tolist(), fn.deps["dst"].tolist(), fn.deps["kind"].tolist()):
        incoming.setdefault(dst, []).append(f"{fn.inst_name(src)}:{EDGE_NAMES[kind]}")
    rows = fn.block_rows()
    children: dict[int, list[int]] = {}
    for b, p in enumerate(fn.blocks["parent"].tolist()):
        if p >= 0:
            children.setdefault(p, []).append(b)

    def block(b: int, indent: str) -> None:
        lines.append(f"{indent}{fn.strings[fn.blocks.get('name', b)]}:")
        for i in rows[b].tolist():
            lines.append(indent + "  " + _inst(fn, i, incoming.get(i)))
            for c in children.get(i, ()):
                block(c, indent + "    ")

    for b in fn.top_blocks():
        block(b, "  ")
    return "\n".join(lines)


def _memloc(fn: Function, m: int) -> str:
    row = fn.memlocs.row(m)
    name = fn.strings[row["name"]]
    where = "unallocated" if row["addr"] < 0 else f"bytes [{row['addr']}, {row['addr'] + row['pbytes']})"
    extra = ""
    if row["mtype"] in (Mem.SB, Mem.PSUM):
        extra = f" parts {row['base']}..{row['base'] + row['nparts'] - 1}"
        if row["bank"] >= 0:
            extra += f" bank {row['bank']}"
    if row["tensor_id"] >= 0:
        extra += f" block {row['tensor_id']}"
    if row["const_path"] >= 0:
        extra += f" file {fn.strings[row['const_path']]}"
    return f"{name}  {MEM_NAMES[row['mtype']]}{extra}  {where}"


def _inst(fn: Function, i: int, deps: list[str] | None) -> str:
    v = fn.inst(i)
    attrs = v.attrs
    text = f"{v.name}  {OPCODE_NAMES[v.opcode]}@{ENGINE_NAMES[v.engine]}"
    if "LoopAxis" in attrs or "DynamicForLoopAxis" in attrs:
        ax = attrs.get("LoopAxis") or attrs.get("DynamicForLoopAxis")
        text += f" {ax['name']} in [{ax['lb']}, {_bound(ax['ub'])}) step {ax.get('stride', 1)}"
    outs = [_operand(fn, j) for j in v.operand_rows() if fn.operands.get("role", j) == Role.OUT]
    ins = [_operand(fn, j) for j in v.operand_rows() if fn.operands.get("role", j) != Role.OUT]
    if outs or ins:
        text += "  " + ", ".join(outs) + " <- " + ", ".join(ins)
    shown = {k: val for k, val in attrs.items() if k not in SKIP_ATTRS}
    if shown:
        text += "  {" + ", ".join(f"{k}={_short(val)}" for k, val in sorted(shown.items())) + "}"
    if v.predicates:
        text += "  if " + " and ".join(repr(p) for p in v.predicates)
    if deps:
        text += "  after " + " ".join(deps)
    return text


def _bound(b) -> str:
    if isinstance(b, dict):
        from tusk.ir.expr import expr_from_json

        return repr(expr_from_json(b))
    return str(b)


def _short(val) -> str:
    text = repr(val) if not isinstance(val, str) else val
    return text if len(text) <= 40 else text[:37] + "..."


def _operand(fn: Function, j: int) -> str:
    o = fn.operand(j)
    kind = o.kind
    if kind == Kind.PHYSICAL:
        dyn = " dyn" if o.dyn is not None else ""
        return f"{o.memloc_name}[+{o.offset} {_pattern(o.pattern)}]{dyn}"
    if kind == Kind.SYMBOLIC:
        sa = o.sym
        blk = f" block {sa.block!r}" if sa.block is not None else ""
        return f"{o.memloc.set_name}[+{sa.offset!r} {_pattern(o.pattern)}{blk}]"
    if kind == Kind.REGISTER_AP:
        return f"{o.memloc_name}[%{o.reg_name} {_pattern(o.pattern)}]"
    if kind == Kind.REGISTER:
        return f"%{o.reg_name}"
    if kind == Kind.SYMBOLIC_DIMS:
        exprs = fn.value(fn.operands.get("aux", j))
        return f"{o.memloc.set_name}[addrs {list(exprs)!r} {_pattern(o.pattern)}]"
    if kind in (Kind.IMM, Kind.IMM_ARRAY, Kind.SYMBOLIC_IMM):
        return f"{o.value!r}:{DTYPE_NAMES[o.dtype]}"
    return "?"


def _pattern(p) -> str:
    return "".join(f"({s},{n})" for s, n in p)
