"""A readable listing of an LncKernel, for ``tusk show FILE.klr``.

Unlike :mod:`ir.klr.pretty` (a faithful copy of KLR's one-line C++ dump),
this is meant for people: one line per tensor and per statement, tensor
operands in a compact notation, other fields as ``name=value``.

Tensor operand notation:

* ``t`` — ``Access.simple`` (the whole tensor);
* ``t@OFF[[step,num],...]`` — ``Access.birPattern``: element offset and
  ``[step, num]`` per dimension, partition dimension first (an APPair with a
  non-zero bookkeeping offset shows it as a third entry);
  followed by ``+s:REG`` or ``+s:(access)`` for a scalar offset,
  ``+v:(access)/dimD`` for a vector (indirect) offset, and ``as DTYPE`` for
  a dtype override;
* ``t[0:128:1, 2]`` — ``Access.basic`` (slices ``l:u:step`` and coordinates);
* ``t<par N [[step,num],...] +P/+F fixed[...]>`` — ``Access.pattern``;
* ``sbuf:t(p+P f+F [[step,num],...])``, ``psum:...``, ``hbm:t@ADDR[[...]]`` —
  physical views; ``reg#N`` — a register.

Immediates print as their number, ``reg#N`` or ``ptr``.
"""

from __future__ import annotations

import enum
from typing import Any

from tusk.ir.klr import nesting
from tusk.ir.klr import types as T
from tusk.ir.klr.kernel import tensor_operands
from tusk.ir.klr.nesting import Nested
from tusk.ir.klr.schema import SCHEMA, Inductive


def listing(obj: Any) -> str:
    """Multi-line listing of an ``LncKernel`` (or a :class:`KLRFileContents` holding one)."""
    lines: list[str] = []
    kernel = obj
    if isinstance(obj, T.KLRFileContents):
        h = obj.header
        lines.append(f"KLR {h.major}.{h.minor}.{h.patch}  format {obj.metadata.format}  contents {obj.contents.klr_ctor}")
        if not isinstance(obj.contents, T.Contents_lnc):
            return "\n".join(lines) + "\n"
        kernel = obj.contents.kernel
    nstmts = sum(len(b.body) for body in kernel.bodies for b in body)
    lines.append(f"kernel {_text(kernel.name)}  ({len(kernel.bodies)} core(s), {nstmts} statement(s))")
    _tensors(lines, "inputs", kernel.inputs)
    _tensors(lines, "outputs", kernel.outputs)
    lines.append("shared constants:" + ("" if kernel.sharedConstants else " none"))
    for c in kernel.sharedConstants:
        lines.append(f"  {_text(c.name)} <- {_text(c.fileName)}")
    _tensors(lines, "shared buffers", kernel.sharedBuffers)
    lines.append("edges:" + ("" if kernel.edges else " none"))
    for e in kernel.edges:
        lines.append(f"  {_text(e.fromEdge)} -> {', '.join(map(_text, e.toEdges))}")
    for core, blocks in enumerate(kernel.bodies):
        lines.append(f"core {core}:")
        for block in blocks:
            flag = "  (no reorder)" if block.noReorder else ""
            lines.append(f"  block {_text(block.label)}{flag}")
            for stmt in block.body:
                lines.append("    " + statement(stmt))
    return "\n".join(lines) + "\n"


def _text(s: str) -> str:
    """A name as typed, or quoted and escaped when it is empty or holds blanks or
    unprintable characters, so that every item stays one whitespace-free word."""
    if s and s.isprintable() and not any(c.isspace() for c in s):
        return s
    return '"' + "".join(_escape(c) for c in s) + '"'


def _escape(c: str) -> str:
    if c == '"':
        return '\\"'
    if c == " ":
        return "\\x20"
    if c.isprintable() and not c.isspace():
        return c
    return c.encode("unicode_escape").decode("ascii")  # e.g. newline -> backslash n


# -- tensors ----------------------------------------------------------------


def _tensors(lines: list[str], title: str, tensors: tuple) -> None:
    lines.append(f"{title}:" + ("" if tensors else " none"))
    names = [_text(t.name) for t in tensors]
    width = max(map(len, names), default=0)
    for name, t in zip(names, tensors):
        lines.append(f"  {name:<{width}}  {describe_tensor(t)}")


def describe_tensor(t: Any) -> str:
    """``dtype[shape]  memory  PxFB  placement  flags`` for a TensorName."""
    a = t.address
    dims = ", ".join(str(x) for x in (t.shape.parDim, *t.shape.freeDims))
    if a.parOffset is None and a.freeOffset is None:
        where = "unplaced"
    else:
        where = f"at partition {_opt(a.parOffset)}, byte {_opt(a.freeOffset)}"
    text = f"{t.dtype.name}[{dims}]  {a.memory.name}  {a.parSize}x{a.freeSize}B  {where}"
    if a.name != t.name:
        text += f"  region {_text(a.name)}"
    if a.isShared:
        text += "  shared"
    if t.addressRotation:
        text += "  rotating"
    return text


def _opt(x: Any) -> str:
    return "?" if x is None else str(x)


# -- statements -------------------------------------------------------------


def _is_output(field_name: str) -> bool:
    return field_name.startswith("dst") or field_name == "reduceRes"


def statement(stmt: Any) -> str:
    """One line: ``name  operator  outputs <- inputs  field=value ...  [file:line:col]``."""
    op = stmt.op
    payload = op.op
    tensor_fields = {name for name, _ in tensor_operands(payload)}
    outs, ins, rest = [], [], []
    for f in SCHEMA[payload.klr_type].data_fields:
        value = getattr(payload, f.name)
        if f.name in tensor_fields:
            items = value if isinstance(value, tuple) else (value,)
            if value is None:
                continue
            rendered = ", ".join(tensor_ref(r) for r in items) if items else "()"
            if _is_output(f.name):
                outs.append(rendered if f.name.startswith("dst") else f"{f.name}={rendered}")
            else:
                ins.append(rendered if f.name in ("src", "srcs") else f"{f.name}={rendered}")
        elif isinstance(value, str) and _is_output(f.name):
            outs.append(_text(value))  # a register written by tensorLoad/registerMove/...
        elif isinstance(value, str) and f.name == "src":
            ins.append(_text(value))  # a register read by tensorStore/registerAluOp
        elif value is not None:
            rest.append(f"{f.name}={brief(value)}")
    parts = [_text(stmt.name) if stmt.name is not None else "-", op.klr_ctor]
    if outs or ins:
        parts.append(" ".join(x for x in (", ".join(outs), "<-", ", ".join(ins)) if x))
    parts.extend(rest)
    parts.append(f"[{position(stmt.pos)}]")
    return "  ".join(parts)


def position(pos: Any) -> str:
    text = f"{'?' if pos.filename is None else _text(pos.filename)}:{pos.line}:{pos.column}"
    if pos.lineEnd is not None or pos.columnEnd is not None:
        text += f"-{_opt(pos.lineEnd)}:{_opt(pos.columnEnd)}"
    return text


# -- operands ---------------------------------------------------------------


def pattern(pairs: tuple) -> str:
    """``[[step,num],...]``; a non-zero APPair.offset is shown as a third entry."""
    return "[" + ",".join(
        f"[{p.step},{p.num}]" if p.offset == 0 else f"[{p.step},{p.num},{p.offset}]" for p in pairs
    ) + "]"


def tensor_ref(ref: Any) -> str:
    """Compact text of a TensorRef (see the module docstring)."""
    if isinstance(ref, T.TensorRef_abstract):
        return access(ref.access)
    if isinstance(ref, (T.TensorRef_sbuf, T.TensorRef_psum)):
        v = ref.view
        return f"{ref.klr_ctor}:{_text(v.name)}(p+{v.parOffset}x{v.parNum} f+{v.freeOffset} {pattern(v.pattern)})"
    if isinstance(ref, T.TensorRef_hbm):
        v = ref.view
        return f"hbm:{_text(v.name)}@{v.address}{pattern(v.dims)}"
    return f"reg#{ref.reg}"


def access(a: Any) -> str:
    """Compact text of an Access (see the module docstring), at any nesting depth."""
    out: list[str] = []
    nesting.run(_access(a, out))
    return "".join(out)


def _access(a: Any, out: list[str]) -> Nested:
    """Append the text of `a` to `out`; nested offsets are yielded (see
    :mod:`ir.klr.nesting`), so that deep values take linear time and no recursion."""
    if isinstance(a, T.Access_simple):
        out.append(_text(a.tensor.name))
    elif isinstance(a, T.Access_basic):
        idx = ", ".join(
            str(i.e) if isinstance(i, T.Index_coord) else f"{i.slice.l}:{i.slice.u}:{i.slice.step}"
            for i in a.access.indexes
        )
        out.append(f"{_text(a.access.tensor.name)}[{idx}]")
    elif isinstance(a, T.Access_pattern):
        p = a.access
        fixed = f" fixed{list(p.fixedAxis)}" if p.fixedAxis else ""
        out.append(f"{_text(p.tensor.name)}<par {p.parNum} {pattern(p.pattern)} +{p.parOffset}/+{p.freeOffset}{fixed}>")
    else:
        b = a.access
        out.append(f"{_text(b.tensor.name)}@{b.offset}{pattern(b.pattern)}")
        if isinstance(b.scalarOffset, T.ScalarOffset_reg):
            out.append(f"+s:{_text(b.scalarOffset.r)}")
        elif isinstance(b.scalarOffset, T.ScalarOffset_acc):
            out.append("+s:(")
            yield _access(b.scalarOffset.a, out)
            out.append(")")
        if b.vectorOffset is not None:
            out.append("+v:(")
            yield _access(b.vectorOffset, out)
            out.append(f")/dim{b.indirectDim}")
        elif b.indirectDim != 0:
            out.append(f"/dim{b.indirectDim}")
        if b.dtypeOverride is not None:
            out.append(f" as {b.dtypeOverride.name}")


def immediate(i: Any) -> str:
    if isinstance(i, T.Immediate_reg):
        return f"reg#{i.reg}"
    if isinstance(i, T.Immediate_int32):
        return str(i.i)
    if isinstance(i, T.Immediate_float32):
        return repr(i.f)
    return "ptr"


def brief(v: Any) -> str:
    """Short text of any field value that is not a tensor operand."""
    if v is None:
        return "none"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return _text(v)
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, enum.Enum):
        return v.name
    if isinstance(v, tuple):
        return "[" + ",".join(brief(x) for x in v) + "]"
    if isinstance(v, T.Immediate):
        return immediate(v)
    if isinstance(v, T.Operand):
        return immediate(v.i) if isinstance(v, T.Operand_imm) else tensor_ref(v.t)
    if isinstance(v, T.TensorRef):
        return tensor_ref(v)
    if isinstance(v, T.Access):
        return access(v)
    if isinstance(v, T.DataPattern):
        return f"{v.offset}{pattern(v.pattern)}*ch{v.channelMultiplier}"
    d = SCHEMA[v.klr_type]
    ctor = d.ctors[v.klr_index] if isinstance(d, Inductive) else None
    fields = [f.name for f in (ctor or d).data_fields]
    label = ctor.name if ctor else d.name
    if not fields:
        return label
    if ctor and len(fields) == 1:
        return f"{label}({brief(getattr(v, fields[0]))})"
    return f"{label}(" + ", ".join(f"{n}={brief(getattr(v, n))}" for n in fields) + ")"


__all__ = ["listing", "statement", "describe_tensor", "tensor_ref", "access", "brief"]