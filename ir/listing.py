"""The one BIR listing: what ``tusk show`` prints, what ``tusk diff`` compares, what the goldens pin.

The listing is produced line by line (:func:`iter_listing`), so the first
function of a large module appears while the rest is still being formatted
and a ``Filter(limit=...)`` stops early::

    module arch=gen3 neuron_core_id=0
    function tiled_exp  kind=nki  attrs=[unrollable, marked_to_unroll]  (12 instructions)
      x_set: ExternalInput float32[512, 512]
        x  DRAM  unallocated
      Block1:
        loop_i  Loop@Unassigned  i in [0, 4) step 1
          i_body:
            load  DMACopy@DMA  t[+0 (512,128)(1,512)] <- x_set[+65536*i (512,128)(1,512)]

Operands: ``memloc[+offset (step,count)...]``; attribute values are written
as numbers, ``true``/``false``/``none``, expressions or ``[...]``/``{...}``
(never a Python repr).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

import numpy as np

from tusk.ir.bir_json import FLAG_KEYS
from tusk.ir.enums import (
    DTYPE_NAMES,
    EDGE_NAMES,
    ENGINE_NAMES,
    MEM_NAMES,
    OPCODE_NAMES,
    TENSOR_KIND_NAMES,
    FnKind,
    Kind,
    Mem,
    Role,
)
from tusk.ir.errors import UsageError
from tusk.ir.expr import AffinePredicate, QuasiAffine, expr_from_json
from tusk.ir.module import Function, Module
from tusk.ir.wire import WIRE

_REL = {"ge": ">=", "gt": ">", "eq": "==", "ne": "!=", "le": "<=", "lt": "<"}


def value_text(v: Any, limit: int = 72) -> str:
    """An attribute value in the listing's notation (no Python reprs)."""
    text = _value(v)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _value(v: Any) -> str:
    if v is None:
        return "none"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float, str)):
        return str(v)
    if isinstance(v, dict):
        if "kind" in v and isinstance(v.get("kind"), str) and v["kind"].endswith(("Kind", "Expr")):
            try:
                return repr(expr_from_json(v))
            except Exception:  # noqa: BLE001 - not an expression after all: show it as a table
                pass
        return "{" + ", ".join(f"{k}: {_value(x)}" for k, x in v.items() if k != WIRE) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, AffinePredicate):
        return predicate_text(v)
    if isinstance(v, QuasiAffine):
        return repr(v)
    to_json = getattr(v, "to_json", None)
    if callable(to_json):
        try:
            return _value(to_json())
        except Exception:  # noqa: BLE001
            pass
    return str(v)


def predicate_text(p: Any) -> str:
    rel = getattr(p, "rel", None)
    if rel in _REL:
        return f"{p.expr!r} {_REL[rel]} 0"
    return str(p)


@dataclass
class Filter:
    """Which parts of a module a listing shows."""

    function: str | None = None      # a name or a glob (fnmatch)
    engines: frozenset[int] | None = None
    limit: int | None = None         # instructions listed in all
    tensors: bool = True

    def wants_function(self, name: str) -> bool:
        return self.function is None or name == self.function or fnmatch.fnmatchcase(name, self.function)


def engine_codes(names: Iterable[str]) -> frozenset[int]:
    """Engine numbers for names (case-insensitive: pe, act/activation, dve, pool, sp, dma)."""
    aliases = {"act": "activation", "gpsimd": "pool", "vector": "dve", "tensor": "pe", "sync": "sp"}
    by_name = {n.lower(): i for i, n in enumerate(ENGINE_NAMES)}
    out = set()
    for name in names:
        key = aliases.get(name.strip().lower(), name.strip().lower())
        if key not in by_name:
            raise UsageError(f"unknown engine {name!r} (engines: {', '.join(ENGINE_NAMES)})")
        out.add(by_name[key])
    return frozenset(out)


def iter_listing(module, flt: Filter | None = None) -> Iterator[str]:
    """The module's listing, line by line (see the module docstring)."""
    flt = flt or Filter()
    attrs = " ".join(f"{k}={value_text(v)}" for k, v in sorted(dict(module.attributes).items()) if k != WIRE)
    yield f"module arch={module.arch}" + (f" {attrs}" if attrs else "")
    budget = [flt.limit if flt.limit is not None else -1]
    matched = False
    for fn in module.functions:
        if not flt.wants_function(fn.name):
            continue
        matched = True
        yield from _function_lines(fn, flt, budget)
        if budget[0] == 0:
            break
    if not matched and flt.function is not None:
        names = ", ".join(fn.name for fn in module.functions)
        raise UsageError(f"no function {flt.function!r} (functions: {names})")


def _function_lines(fn, flt: Filter, budget: list[int]) -> Iterator[str]:
    kind = {FnKind.NORMAL: "normal", FnKind.NKI: "nki"}.get(fn.kind, str(fn.kind))
    flags = ", ".join(FLAG_KEYS.get(a, str(a)) for a in sorted(fn.attrs))
    yield f"function {fn.name}  kind={kind}  attrs=[{flags}]  ({len(fn.insts):,} instructions)"
    if flt.tensors:
        for r in range(len(fn.regs)):
            yield f"  reg {fn.strings[fn.regs.get('name', r)]}"
        mset = fn.memlocs["set"]
        by_set: dict[int, list[int]] = {}
        for m, s in enumerate(mset.tolist()):
            by_set.setdefault(s, []).append(m)
        for s in range(len(fn.sets)):
            row = fn.sets.row(s)
            n_blocks = f" blocks={row['n_blocks']}" if row["is_block"] else ""
            shape = ", ".join(str(x) for x in (fn.value(row["shape"]) or ()))
            yield (f"  {fn.strings[row['name']]}: {TENSOR_KIND_NAMES[row['kind']]} "
                   f"{DTYPE_NAMES[row['dtype']]}[{shape}]{n_blocks}")
            for m in by_set.get(s, ()):
                yield "    " + memloc_text(fn, m)
    # dependences: incoming edges per instruction, sorted by destination once
    dst = fn.deps["dst"]
    order = np.argsort(dst, kind="stable")
    dst_sorted = dst[order]
    src_sorted = fn.deps["src"][order]
    kind_sorted = fn.deps["kind"][order]
    rows = fn.block_rows()
    children: dict[int, list[int]] = {}
    for b, p in enumerate(fn.blocks["parent"].tolist()):
        if p >= 0:
            children.setdefault(p, []).append(b)
    engines = flt.engines
    eng = fn.insts["engine"]

    def incoming(i: int) -> str:
        a, b = np.searchsorted(dst_sorted, [i, i + 1])
        if a == b:
            return ""
        return "  after " + " ".join(f"{fn.inst_name(int(s))}:{EDGE_NAMES[int(k)]}"
                                      for s, k in zip(src_sorted[a:b].tolist(), kind_sorted[a:b].tolist()))

    def block(b: int, indent: str) -> Iterator[str]:
        yield f"{indent}{fn.strings[fn.blocks.get('name', b)]}:"
        for i in rows[b].tolist():
            kids = children.get(i, ())
            if kids or engines is None or int(eng[i]) in engines:
                if budget[0] == 0:
                    return
                yield indent + "  " + inst_text(fn, i) + incoming(i)
                if not kids:
                    budget[0] -= 1
            for c in kids:
                yield from block(c, indent + "    ")
                if budget[0] == 0:
                    return

    for b in fn.top_blocks():
        yield from block(b, "  ")
        if budget[0] == 0:
            yield f"  ... (--limit reached; the function has {len(fn.insts):,} instructions)"
            return


SKIP_ATTRS = {"LoopAxis", "DynamicForLoopAxis", WIRE}  # WIRE: the reader's record of the input's spelling


def inst_text(fn, i: int) -> str:
    v = fn.inst(i)
    attrs = v.attrs
    text = f"{v.name}  {OPCODE_NAMES[v.opcode]}@{ENGINE_NAMES[v.engine]}"
    ax = attrs.get("LoopAxis") or attrs.get("DynamicForLoopAxis")
    if isinstance(ax, dict):
        text += f"  {ax.get('name')} in [{_value(ax.get('lb'))}, {_value(ax.get('ub'))}) step {_value(ax.get('stride', 1))}"
    rows = list(v.operand_rows())
    role = fn.operands["role"]
    outs = [operand_text(fn, j) for j in rows if role[j] == Role.OUT]
    ins = [operand_text(fn, j) for j in rows if role[j] != Role.OUT]
    if outs or ins:
        text += "  " + ", ".join(outs) + " <- " + ", ".join(ins)
    shown = {k: val for k, val in attrs.items() if k not in SKIP_ATTRS}
    if shown:
        text += "  {" + ", ".join(f"{k}={value_text(val, 48)}" for k, val in sorted(shown.items())) + "}"
    if v.predicates:
        text += "  if " + " and ".join(predicate_text(p) for p in v.predicates)
    return text


def memloc_text(fn: Function, m: int) -> str:
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


def operand_text(fn: Function, j: int) -> str:
    o = fn.operand(j)
    kind = o.kind
    if kind == Kind.PHYSICAL:
        dyn = " dyn" if o.dyn is not None else ""
        return f"{o.memloc_name}[+{o.offset} {pattern_text(o.pattern)}]{dyn}"
    if kind == Kind.SYMBOLIC:
        sa, ml = o.sym, o.memloc
        assert sa is not None and ml is not None  # a symbolic operand has both
        blk = f" block {sa.block!r}" if sa.block is not None else ""
        return f"{ml.set_name}[+{sa.offset!r} {pattern_text(o.pattern)}{blk}]"
    if kind == Kind.REGISTER_AP:
        return f"{o.memloc_name}[%{o.reg_name} {pattern_text(o.pattern)}]"
    if kind == Kind.REGISTER:
        return f"%{o.reg_name}"
    if kind == Kind.SYMBOLIC_DIMS:
        exprs, ml = fn.value(fn.operands.get("aux", j)), o.memloc
        assert ml is not None  # an access pattern has its memory location
        return f"{ml.set_name}[addrs {list(exprs)!r} {pattern_text(o.pattern)}]"
    if kind in (Kind.IMM, Kind.IMM_ARRAY, Kind.SYMBOLIC_IMM):
        return f"{value_text(o.value, 40)}:{DTYPE_NAMES[o.dtype]}"
    return "?"


def pattern_text(p) -> str:
    return "".join(f"({s},{n})" for s, n in p)


def listing_text(module: Module, flt: Filter | None = None) -> str:
    """The whole listing as one string (goldens, small modules)."""
    return "\n".join(iter_listing(module, flt)) + "\n"
