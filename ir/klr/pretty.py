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

from tusk.ir.klr import nesting
from tusk.ir.klr import types as T
from tusk.ir.klr.nesting import Nested
from tusk.ir.klr.schema import SCHEMA, Ctor, Enum, Inductive, ListOf, OptionOf, Prim, Struct, TypeExpr


def pretty(obj: Any) -> str:
    """KLR's ``to_string`` of a value; for a whole file, the 4-line form (with final newline)."""
    if isinstance(obj, T.KLRFileContents):
        lines = [
            _text(obj.header),
            _text(obj.metadata),
            f"Contents C++ tag {obj.contents.klr_index + 1}",
            _text(obj.contents),
        ]
        return "\n".join(lines) + "\n"
    return _text(obj)


def wrapper_name(inductive: Inductive, ctor: Ctor) -> str:
    """The C++ class KLR generates for one constructor, e.g. ``AccessBirPatternWrapper``."""
    name = ctor.lean_name or ctor.name
    return f"{inductive.name}{name[0].upper()}{name[1:]}Wrapper"


def _text(v: Any) -> str:
    out: list[str] = []
    nesting.run(_value(v, out))
    return "".join(out)


# The walk appends pieces to `out` and yields the generators of nested values
# (see ir.klr.nesting): any depth, linear time, no recursion.


def _value(v: Any, out: list[str]) -> Nested:
    """A schema value whose type is known from its class."""
    d = SCHEMA[type(v).klr_type]
    if isinstance(d, Enum):
        out.append(v.name)
        return
    if isinstance(d, Struct):
        label, fields = d.name, d.fields
    else:
        c = d.ctors[type(v).klr_index]
        label, fields = wrapper_name(d, c), c.fields
    out.append(f"{label}(")
    for i, f in enumerate(fields):
        out.append(f"{', ' if i else ''}{f.name}=")
        if isinstance(f.type, Prim):
            if not f.is_prop:
                out.append(_primitive(f.type.name, getattr(v, f.name)))
        else:
            yield _typed(f.type, getattr(v, f.name), out)
    out.append(")")


def _typed(t: TypeExpr, v: Any, out: list[str]) -> Nested:
    if isinstance(t, Prim):
        out.append(_primitive(t.name, v))
    elif isinstance(t, ListOf):
        for i, x in enumerate(v):
            if i:
                out.append(", ")
            yield _typed(t.item, x, out)
    elif isinstance(t, OptionOf):
        if v is None:
            out.append("None")
        else:
            yield _typed(t.item, v, out)
    else:
        yield _value(v, out)


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
