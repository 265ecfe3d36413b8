"""A re-implementation of KLR's C++ pretty printer, ``klr::to_string``.

KLR's generated ``klir_pretty_print.cpp`` renders a value as
``Type(field=value, ...)``.  The rules, reproduced here from the schema:

* structures print every declared field, Props included (as ``parWF=``);
* an inductive value prints as its C++ wrapper class,
  ``<Type><Constructor>Wrapper(fields)``, where the constructor part is the
  capitalised *Lean* constructor name (``ImmediateFloatWrapper`` for
  ``Immediate.float32``, ``TensorRefRegisterWrapper`` for ``TensorRef.reg``);
* enums print their enumerator name;
* lists print their items joined by ``", "`` with no brackets, so nested
  lists flatten (an empty inner list still contributes its separator);
* ``Option`` none prints ``None``, some prints the bare value;
* Bool prints ``0``/``1``; Float prints like printf ``%f``; Nat and Int print
  the C++ ``uint32_t``/``int32_t`` the reader would have stored (the C++
  reader truncates wider values silently); strings print raw.

For a whole file, :func:`pretty` gives the four lines of the fixtures'
``.expected.txt``: KLRFile, KLRMetaData, ``Contents C++ tag N`` (N = the C++
enum value, CBOR constructor + 1), and the Contents.
"""

from __future__ import annotations

import math
from typing import Any

from tusk.ir.klr import types as T
from tusk.ir.klr.schema import SCHEMA, Ctor, Enum, Field, Inductive, ListOf, OptionOf, Prim, Struct, TypeExpr


def pretty(obj: Any) -> str:
    """KLR's ``to_string`` of a value; for a whole file, the 4-line form (with final newline)."""
    if isinstance(obj, T.KLRFileContents):
        lines = [
            _value(obj.header),
            _value(obj.metadata),
            f"Contents C++ tag {obj.contents.klr_index + 1}",
            _value(obj.contents),
        ]
        return "\n".join(lines) + "\n"
    return _value(obj)


def wrapper_name(inductive: Inductive, ctor: Ctor) -> str:
    """The C++ class KLR generates for one constructor, e.g. ``AccessBirPatternWrapper``."""
    name = ctor.lean_name or ctor.name
    return f"{inductive.name}{name[0].upper()}{name[1:]}Wrapper"


def _value(v: Any) -> str:
    """A schema value whose type is known from its class."""
    d = SCHEMA[type(v).klr_type]
    if isinstance(d, Enum):
        return v.name
    if isinstance(d, Struct):
        return _record(d.name, d.fields, v)
    c = d.ctors[type(v).klr_index]
    return _record(wrapper_name(d, c), c.fields, v)


def _record(label: str, fields: tuple[Field, ...], v: Any) -> str:
    parts = []
    for f in fields:
        text = "" if f.is_prop else _typed(f.type, getattr(v, f.name))
        parts.append(f"{f.name}={text}")
    return f"{label}({', '.join(parts)})"


def _typed(t: TypeExpr, v: Any) -> str:
    if isinstance(t, Prim):
        return _primitive(t.name, v)
    if isinstance(t, ListOf):
        return ", ".join(_typed(t.item, x) for x in v)
    if isinstance(t, OptionOf):
        return "None" if v is None else _typed(t.item, v)
    return _value(v)


def _primitive(name: str, v: Any) -> str:
    if name == "Nat":
        return str(v & 0xFFFFFFFF)
    if name == "Int":
        return str(((v + 0x80000000) & 0xFFFFFFFF) - 0x80000000)
    if name == "Bool":
        return "1" if v else "0"
    if name == "Float":
        if math.isnan(v):  # glibc prints the sign of a NaN, Python does not
            return "-nan" if math.copysign(1.0, v) < 0 else "nan"
        return "%f" % v
    return v  # String


__all__ = ["pretty", "wrapper_name"]
