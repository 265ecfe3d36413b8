"""Build any KLR operator from its schema fields (ir/klr/schema.py), for the ISA operators.

    k.operator("tensorScalarReduce", dst=t, src=x, operand0=2.0, op0="mult", reduceOp="add", reduceRes=col)

Each field is given under its KLR name and converted by its schema type:
TensorRef from a Tensor or AP, Operand from a number or a Tensor/AP,
Immediate from a number, enumerations by their KLR name, DataPattern from
``(offset, [[step, num], ...], channel_multiplier)``, IndexMissBehavior from a
number (``imm``) or None (``skip``), DmaBounds from "error" or "skip".  A field left out takes a default: None
for an Option (except ``dtype``: the destination's dtype, as KLR's tracer
writes it), False, 0, 0.0, the empty list, or the enumeration's neutral value
(``Idle``, ``none``, ``unassigned``).  An unknown field is a TypeError naming it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tusk.ir.klr import types as T
from tusk.ir.klr.schema import OPERATORS, SCHEMA, ListOf, OptionOf, Prim, Ref

PAYLOADS = dict(OPERATORS)

# the enumeration value a field takes when the writer's caller leaves it out
_ENUM_DEFAULTS = {"AccumCmd": "Idle", "TensorScalarReverseOps": "none", "Engine": "unassigned",
                  "TransposeOps": "None", "DropoutThresholdType": "DropRate", "DgeComputeOp": "none",
                  "MatmulPerfMode": "None"}
# fields whose NKI call has a default (nki.isa signatures): written when the caller leaves them out
_FIELD_DEFAULTS = {("ncLocalGather", "numElemPerIdx"): 1, ("ncRangeSelect", "rangeStart"): 0.0,
                   ("ncRangeSelect", "onFalseValue"): -3.4028235e38, ("exponential", "maxValue"): 0.0,
                   ("exponential", "reduceInit"): 0.0, ("activate2", "reluParam"): 0.0, ("activate2", "imm1"): 0.0}
_PRIM_DEFAULTS = {"Bool": False, "Nat": 0, "Int": 0, "Float": 0.0, "String": ""}


def build_operator(ctor: str, fields: dict[str, Any], convert: dict[str, Any]) -> Any:
    """``T.Operator.<ctor>`` with ``fields`` converted; ``convert`` holds the writer's ref/operand/imm."""
    payload = PAYLOADS.get(ctor)
    if payload is None:
        raise TypeError(f"KLR has no operator {ctor!r}")
    struct = SCHEMA[payload]
    known = {f.name for f in struct.data_fields}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise TypeError(f"KLR operator {ctor} has no field(s) {', '.join(unknown)} (fields: {', '.join(sorted(known))})")
    values = {}
    for f in struct.data_fields:
        if f.name in fields and fields[f.name] is not None:
            values[f.name] = _convert(f.type, fields[f.name], convert, f"{ctor}.{f.name}")
        elif (ctor, f.name) in _FIELD_DEFAULTS:
            values[f.name] = _convert(f.type, _FIELD_DEFAULTS[ctor, f.name], convert, f"{ctor}.{f.name}")
        elif f.name == "dtype" and "dst" in fields:
            values[f.name] = convert["dtype_of"](fields["dst"])
        else:
            values[f.name] = _default(f.type, f"{ctor}.{f.name}")
    return getattr(T.Operator, ctor)(op=getattr(T, payload)(**values))


def _default(t: Any, where: str) -> Any:
    if isinstance(t, OptionOf):
        return None
    if isinstance(t, ListOf):
        return ()
    if isinstance(t, Prim) and t.name in _PRIM_DEFAULTS:
        return _PRIM_DEFAULTS[t.name]
    if isinstance(t, Ref) and t.name in _ENUM_DEFAULTS:
        return getattr(T, t.name)[_ENUM_DEFAULTS[t.name]]
    if isinstance(t, Ref) and t.name == "IndexMissBehavior":
        return T.IndexMissBehavior.skip()
    if isinstance(t, Ref) and t.name == "DmaBounds":
        return T.DmaBounds.error()
    raise TypeError(f"{where} is required")


def _convert(t: Any, v: Any, convert: dict[str, Any], where: str) -> Any:
    if isinstance(t, OptionOf):
        return _convert(t.item, v, convert, where)
    if isinstance(t, ListOf):
        return tuple(_convert(t.item, x, convert, where) for x in v)
    if isinstance(t, Prim):
        return {"Bool": bool, "Nat": int, "Int": int, "Float": float, "String": str}[t.name](v)
    name = t.name
    if name == "TensorRef":
        return convert["ref"](v)
    if name == "Operand":
        return convert["operand"](v)
    if name == "Immediate":
        return convert["imm"](v)
    if name == "DataPattern":
        offset, pattern, cm = v
        numbers = [offset, cm, *(x for pair in pattern for x in pair)]
        bad = [x for x in numbers if isinstance(x, bool) or not isinstance(x, (int, np.integer))]
        if bad:
            raise TypeError(f"{where}: {bad[0]!r} is not a compile-time integer (a KLR DataPattern is static; "
                            "a pattern that depends on a loop index needs that loop unrolled: nl.static_range)")
        return T.DataPattern(offset=int(offset), pattern=tuple(T.APPair(step=int(s), num=int(n), offset=0)
                                                               for s, n in pattern), channelMultiplier=int(cm))
    if name == "IndexMissBehavior":
        return T.IndexMissBehavior.imm(value=convert["imm"](v))
    if name == "DmaBounds":
        if v not in ("error", "skip"):
            raise TypeError(f"{where}: {v!r} is not a DmaBounds (error, skip)")
        return getattr(T.DmaBounds, v)()
    cls = getattr(T, name, None)
    if cls is not None and hasattr(cls, "__members__"):
        if isinstance(v, cls):
            return v
        if v not in cls.__members__:
            raise TypeError(f"{where}: {v!r} is not a {name} ({', '.join(cls.__members__)})")
        return cls[v]
    raise TypeError(f"{where}: fields of type {name} are not supported by the writer")
