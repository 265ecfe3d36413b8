"""The policy spelling of one function's instructions and operands, one at a time.

The writer's generic path (instructions the columnar writer does not template, and the templates'
first members), and the reader's check of how a document spelled dependencies.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tusk.ir import wire
from tusk.ir.bir_json.policy import derived_keys, jsonable
from tusk.ir.enums import DTYPE_NAMES, EDGE_NAMES, ENGINE_NAMES, OPCODE_NAMES, OPERAND_KIND_NAMES, Kind
from tusk.ir.module import CARRIED_LOOP, Function, clone_name
from tusk.ir.values import SymAddr


class InstRender:
    """The policy spelling of one function's instructions and operands (the writer's generic path)."""

    def __init__(self, fn: Function):
        self.fn = fn
        self.strings = fn.strings.items
        ins = fn.insts
        self.name_col, self.iter_col = ins["name"], ins["iter"]
        self.opcode, self.engine, self.attrs = ins["opcode"], ins["engine"], ins["attrs"]
        self.ops_start, self.nops, self.pred = ins["ops"], ins["nops"], ins["pred"]
        deps = fn.deps
        dst = deps["dst"]
        if len(dst) > 1 and not (dst[1:] >= dst[:-1]).all():
            order = np.argsort(dst, kind="stable")
            self.dep_src, self.dep_kind, dst = deps["src"][order], deps["kind"][order], dst[order]
        else:
            self.dep_src, self.dep_kind = deps["src"], deps["kind"]
        self.dep_dst = dst
        carried = fn.carried
        corder = np.argsort(carried["dst"], kind="stable")
        self.carried_cols = {c: carried.column(c)[corder] for c in carried.names}
        self.op = fn.operands.arrays()
        self.ml_name, self.ml_set = fn.memlocs["name"], fn.memlocs["set"]
        self.set_names = fn.sets["name"]
        self._set_first = _first_memloc_of_sets(fn)
        self._records: dict[int, tuple[dict, Any]] = {}
        self._operands: dict[tuple, dict] = {}

    def name(self, i: int) -> str | None:
        n = int(self.name_col[i])
        if n < 0:
            return None
        it = int(self.iter_col[i])
        return self.strings[n] if it < 0 else clone_name(self.strings[n], it)

    def record(self, rid: int) -> tuple[dict, Any]:
        """(plain JSON of a record without its patch, the patch)"""
        hit = self._records.get(rid)
        if hit is None:
            d, patch = wire.split(self.fn.record(rid))
            hit = self._records[rid] = (jsonable(d), patch)
        return hit

    def deps(self, i: int) -> list:
        key = self.dep_dst.dtype.type(i)  # a key of the column's own type: no copy of the column
        lo = int(np.searchsorted(self.dep_dst, key, "left"))
        hi = int(np.searchsorted(self.dep_dst, key, "right"))
        return [[self.name(int(s)), EDGE_NAMES[int(k)]] for s, k in zip(self.dep_src[lo:hi], self.dep_kind[lo:hi])]

    def carried(self, i: int) -> dict:
        c = self.carried_cols
        key = c["dst"].dtype.type(i)
        lo = int(np.searchsorted(c["dst"], key, "left"))
        hi = int(np.searchsorted(c["dst"], key, "right"))
        out: dict[str, list] = {}
        for k in range(lo, hi):
            src, kind, flavour = int(c["src"][k]), int(c["kind"][k]), int(c["flavour"][k])
            payload = self.fn.value(int(c["payload"][k]))
            if flavour == CARRIED_LOOP:
                entry = [self.name(src), EDGE_NAMES[kind], list(payload or ())]
                out.setdefault("loop_carried_dependencies", []).append(entry)
            else:
                exprs, preds = payload
                entry = [self.name(src), EDGE_NAMES[kind], [e.to_json() for e in exprs], [p.to_json() for p in preds]]
                out.setdefault("unroll_dependencies", []).append(entry)
        return out

    def inst(self, i: int, *, name: str | None = None, deps: list | None = None,
             offsets: dict[int, Any] | None = None, attrs: dict | None = None) -> dict:
        """The policy dict of instruction ``i``; ``name``/``deps``/``offsets``/``attrs`` (the record's keys)
        override (template slots)."""
        fn = self.fn
        opcode = int(self.opcode[i])
        real, patch = self.record(int(self.attrs[i]))
        d = dict(real if attrs is None else attrs)
        d.update(derived_keys(opcode, real))
        nm = name if name is not None else self.name(i)
        if nm is not None:
            d["name"] = nm
        d["opcode"] = OPCODE_NAMES[opcode]
        d["engine"] = ENGINE_NAMES[int(self.engine[i])]
        lists: tuple[list, list, list] = ([], [], [])
        start = int(self.ops_start[i])
        role = self.op["role"]
        for j in range(start, start + int(self.nops[i])):
            off = None if offsets is None else offsets.get(j - start)
            lists[int(role[j])].append(self.operand(j, off))
        d["ins"], d["outs"] = lists[0], lists[2]
        if lists[1]:
            d["indirection_ins"] = lists[1]
        dl = deps if deps is not None else self.deps(i)
        if dl:
            d["dependencies"] = dl
        if len(self.carried_cols["dst"]):
            d.update(self.carried(i))
        pred = int(self.pred[i])
        if pred >= 0:
            d["predicates"] = [p.to_json() for p in fn.values[pred]]
        return wire.apply(d, patch)

    def operand(self, j: int, offset_override: Any = None) -> dict:
        op = self.op
        key = (int(op["kind"][j]), int(op["dtype"][j]), int(op["memloc"][j]), int(op["offset"][j]),
               int(op["pattern"][j]), int(op["aux"][j]), int(op["dyn"][j]), int(op["extra"][j]))
        if offset_override is None:
            hit = self._operands.get(key)
            if hit is not None:
                return hit
        fn = self.fn
        kind, dtype, memloc, offset, pattern, aux, dyn, extra = key
        base, patch = self.record(extra)
        d: dict[str, Any] = dict(base)
        d["kind"] = OPERAND_KIND_NAMES[kind]
        d["dtype"] = DTYPE_NAMES[dtype]
        if kind in (Kind.PHYSICAL, Kind.SYMBOLIC, Kind.REGISTER_AP, Kind.SYMBOLIC_DIMS):
            d["ap"] = [list(p) for p in fn.patterns[pattern]]
            d["memref"] = self.strings[int(self.ml_name[memloc])]
            d["memsetref"] = self.strings[int(self.set_names[int(self.ml_set[memloc])])]
        if kind == Kind.PHYSICAL:
            d["offset"] = offset if offset_override is None else offset_override
            if dyn >= 0:
                d["dynamic_ap_info"] = fn.values[dyn].to_json()
        elif kind == Kind.SYMBOLIC:
            sym: SymAddr = fn.values[aux]
            d["addrs"] = [sym.offset.to_json()]
            if sym.block is not None:
                d["block_index"] = sym.block.to_json()
        elif kind == Kind.SYMBOLIC_DIMS:
            d["addrs"] = [e.to_json() for e in fn.values[aux]]
        elif kind in (Kind.REGISTER_AP, Kind.REGISTER):
            if aux >= 0:
                d["regref"] = fn.strings[fn.regs.get("name", aux)]
        elif kind == Kind.IMM:
            d["value"] = jsonable(fn.values[aux].value)
        elif kind == Kind.IMM_ARRAY:
            d["value_array"] = jsonable(list(fn.values[aux].value))
        elif kind == Kind.SYMBOLIC_IMM:
            d["expr"] = fn.values[aux].to_json()
        wire.apply(d, patch)
        if offset_override is None and len(self._operands) < 65536:
            self._operands[key] = d
        return d


def _first_memloc_of_sets(fn: Function) -> np.ndarray:
    sets = fn.memlocs["set"]
    out = np.full(len(fn.sets) + 1, -1, dtype=np.int64)
    if len(sets):
        idx = np.arange(len(sets))[::-1]
        out[sets[::-1]] = idx
    return out

