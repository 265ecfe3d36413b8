"""The lossless JSON rendering of KLIR values (the fixtures' ``.expected.json``).

Conventions (fixtures README):

* a structure is ``{"_type": T, <fields in wire order>}``, Prop fields omitted;
* an inductive value is ``{"_type": T, "_ctor": c, <that constructor's fields>}``
  with the C++ constructor name;
* an enum value is its C++ enumerator name, e.g. ``"float32"``;
* ``Option`` none is ``null`` and some is the bare value; a ``List`` is an array;
* a Float is its exact binary32 value as a JSON number (rounded back through
  binary32 when read);
* the top level is ``{"header": ..., "metadata": ..., "contents": ...}``.

``to_json`` returns plain Python data for :func:`json.dumps`; ``from_json``
takes what :func:`json.loads` returns.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from typing import Any

from tusk.ir.errors import FormatError
from tusk.ir.klr import types as T
from tusk.ir.klr import wire
from tusk.ir.klr.schema import SCHEMA, Enum, Inductive, ListOf, OptionOf, Prim, Ref, Struct, TypeExpr

_TOP_KEYS = ("header", "metadata", "contents")
_TOP_TYPES = ("KLRFile", "KLRMetaData", "Contents")


def to_json(obj: Any) -> Any:
    """Render a KLIR value (or a whole :class:`KLRFileContents`) as JSON data."""
    if isinstance(obj, T.KLRFileContents):
        return {key: to_json(getattr(obj, key)) for key in _TOP_KEYS}
    if isinstance(obj, enum.Enum):
        return obj.name
    if isinstance(obj, tuple):
        return [to_json(x) for x in obj]
    if dataclasses.is_dataclass(obj) and hasattr(obj, "klr_type"):
        out: dict[str, Any] = {"_type": obj.klr_type}
        if hasattr(obj, "klr_ctor"):
            out["_ctor"] = obj.klr_ctor
        for f in dataclasses.fields(obj):
            out[f.name] = to_json(getattr(obj, f.name))
        return out
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise TypeError(f"not a KLIR value: {type(obj).__name__}")


def from_json(value: Any) -> Any:
    """Rebuild KLIR values from their JSON rendering (inverse of :func:`to_json`).

    A top-level object with ``header``/``metadata``/``contents`` gives a
    :class:`KLRFileContents`; any object with ``"_type"`` gives that type.
    Malformed input raises FormatError naming the JSON path.
    """
    if isinstance(value, dict) and "_type" not in value and set(value) == set(_TOP_KEYS):
        parts = [_decode(Ref(t), value[k], k) for k, t in zip(_TOP_KEYS, _TOP_TYPES)]
        return T.KLRFileContents(*parts)
    if isinstance(value, dict) and value.get("_type") in SCHEMA:
        return _decode(Ref(value["_type"]), value, "$")
    raise FormatError("expecting a KLR JSON object with '_type' or header/metadata/contents", where="$")


def _bad(path: str, expected: str, got: Any) -> FormatError:
    text = repr(got)
    if len(text) > 60:
        text = text[:57] + "..."
    return FormatError(f"expecting {expected}, got {text}", where=path)


def _decode(t: TypeExpr, v: Any, path: str) -> Any:
    if isinstance(t, Prim):
        return _primitive(t.name, v, path)
    if isinstance(t, ListOf):
        if not isinstance(v, list):
            raise _bad(path, f"an array ({t})", v)
        return tuple(_decode(t.item, x, f"{path}[{i}]") for i, x in enumerate(v))
    if isinstance(t, OptionOf):
        return None if v is None else _decode(t.item, v, path)
    d = SCHEMA[t.name]
    if isinstance(d, Enum):
        if not isinstance(v, str) or v not in d.values:
            raise _bad(path, f"a {d.name} name ({', '.join(d.values)})", v)
        return T.class_for(d.name)[v]
    if not isinstance(v, dict) or v.get("_type") != d.name:
        raise _bad(path, f"an object with _type {d.name!r}", v)
    if isinstance(d, Struct):
        fields, cls, known = d.data_fields, T.class_for(d.name), {"_type"}
    else:
        assert isinstance(d, Inductive)
        names = [c.name for c in d.ctors]
        if v.get("_ctor") not in names:
            raise _bad(f"{path}._ctor", f"a {d.name} constructor ({', '.join(names)})", v.get("_ctor"))
        c = d.ctor_named(v["_ctor"])
        fields, cls, known = c.data_fields, T.class_for(d.name, c.name), {"_type", "_ctor"}
    extra = set(v) - known - {f.name for f in fields}
    if extra:
        raise FormatError(f"unexpected keys {sorted(extra)} in {d.name}", where=path)
    args = []
    for f in fields:
        if f.name not in v:
            raise FormatError(f"missing field {f.name!r} of {d.name}", where=path)
        args.append(_decode(f.type, v[f.name], f"{path}.{f.name}"))
    return cls(*args)


def _primitive(name: str, v: Any, path: str) -> Any:
    if name in ("Nat", "Int"):
        if type(v) is not int or (name == "Nat" and v < 0):
            raise _bad(path, name, v)
        return v
    if name == "Bool":
        if type(v) is not bool:
            raise _bad(path, "Bool (true/false)", v)
        return v
    if name == "String":
        if type(v) is not str:
            raise _bad(path, "String", v)
        return v
    if name == "Float":
        if type(v) not in (int, float):
            raise _bad(path, "Float (a number)", v)
        x = float(v)
        if math.isnan(x) or math.isinf(x):
            return x
        try:
            return wire.round_to_float32(x)
        except OverflowError:
            raise _bad(path, "Float within the binary32 range", v) from None
    raise AssertionError(name)
