"""The lossless JSON rendering of KLIR values (the fixtures' ``.expected.json``).

Conventions (fixtures README):

* a structure is ``{"_type": T, <fields in wire order>}``, Prop fields omitted;
* an inductive value is ``{"_type": T, "_ctor": c, <that constructor's fields>}``
  with the C++ constructor name;
* an enum value is its C++ enumerator name, e.g. ``"float32"``;
* ``Option`` none is ``null`` and some is the bare value; a ``List`` is an array;
* a Float is its exact binary32 value as a JSON number (rounded back through
  binary32 when read); a NaN or an infinity, which standard JSON cannot spell,
  is the string ``"float32:0x7fc00001"`` of its binary32 bits, so NaN payloads
  and signs survive (a Tusk extension: the fixtures hold finite floats only);
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
from tusk.ir.klr import nesting, wire
from tusk.ir.klr import types as T
from tusk.ir.klr.nesting import Nested
from tusk.ir.klr.schema import SCHEMA, Enum, Inductive, ListOf, OptionOf, Prim, Ref, Struct, TypeExpr

_TOP_KEYS = ("header", "metadata", "contents")
_TOP_TYPES = ("KLRFile", "KLRMetaData", "Contents")


def to_json(obj: Any) -> Any:
    """Render a KLIR value (or a whole :class:`KLRFileContents`) as JSON data.

    Any nesting depth is rendered (see :mod:`ir.klr.nesting`); note that
    :func:`json.dumps` itself recurses and refuses data nested some hundreds
    of levels deep.
    """
    return nesting.run(_to_json(obj))


_PLAIN = (type(None), bool, int, float, str)
FLOAT_BITS_TAG = "float32:"  # a non-finite Float as its bits: "float32:0x7fc00001"


def _plain(x: Any) -> Any:
    """A plain value as JSON data: NaN and infinities as their tagged binary32 bits (standard JSON)."""
    if type(x) is float and not math.isfinite(x):
        buf = bytearray()
        wire.write_float(buf, x, "Float")
        return f"{FLOAT_BITS_TAG}0x{bytes(buf[1:5]).hex()}"
    return x


def _float_from_bits(text: str, path: Any) -> float:
    digits = text[len(FLOAT_BITS_TAG):]
    if not digits.startswith("0x") or len(digits) != 10:
        raise _bad(path, 'Float bits "float32:0x" + 8 hex digits', text)
    try:
        raw = bytes.fromhex(digits[2:])
    except ValueError:
        raise _bad(path, 'Float bits "float32:0x" + 8 hex digits', text) from None
    return wire.read_float(b"\xfa" + raw + wire.PAD, 0, "Float")[0]


def _to_json(obj: Any) -> Nested:
    """``to_json`` as a generator that yields the generators of nested values."""
    if isinstance(obj, T.KLRFileContents):
        top = {}
        for key in _TOP_KEYS:
            top[key] = yield _to_json(getattr(obj, key))
        return top
    if isinstance(obj, enum.Enum):
        return obj.name
    if isinstance(obj, tuple):
        items = []
        for x in obj:
            items.append(_plain(x) if type(x) in _PLAIN else (yield _to_json(x)))
        return items
    if dataclasses.is_dataclass(obj) and hasattr(obj, "klr_type"):
        out: dict[str, Any] = {"_type": obj.klr_type}
        if hasattr(obj, "klr_ctor"):
            out["_ctor"] = obj.klr_ctor
        for f in dataclasses.fields(obj):
            x = getattr(obj, f.name)
            out[f.name] = _plain(x) if type(x) in _PLAIN else (yield _to_json(x))
        return out
    if type(obj) in _PLAIN:
        return _plain(obj)
    raise TypeError(f"not a KLIR value: {type(obj).__name__}")


def from_json(value: Any) -> Any:
    """Rebuild KLIR values from their JSON rendering (inverse of :func:`to_json`).

    A top-level object with ``header``/``metadata``/``contents`` gives a
    :class:`KLRFileContents`; any object with ``"_type"`` gives that type.
    Malformed input raises FormatError naming the JSON path.  Any nesting
    depth is accepted.
    """
    if isinstance(value, dict) and "_type" not in value and set(value) == set(_TOP_KEYS):
        parts = [nesting.run(_decode(Ref(t), value[k], (None, k))) for k, t in zip(_TOP_KEYS, _TOP_TYPES)]
        return T.KLRFileContents(*parts)
    if isinstance(value, dict) and value.get("_type") in SCHEMA:
        return nesting.run(_decode(Ref(value["_type"]), value, (None, "$")))
    raise FormatError("expecting a KLR JSON object with '_type' or header/metadata/contents", where="$")


#: A JSON path as a chain ``(parent, step)``, rendered only for an error
#: message: building the text at every level would cost time quadratic in
#: the depth.
JsonPath = tuple


def _render(path: JsonPath) -> str:
    """The path's text; a very deep one keeps its 12 first and 12 last steps."""
    steps = []
    while path is not None:
        path, step = path
        steps.append(step)
    steps.reverse()
    if len(steps) > 24:
        steps[12:-12] = [f"...({len(steps) - 24} steps)..."]
    return "".join(steps)


def _bad(path: JsonPath, expected: str, got: Any) -> FormatError:
    text = repr(got)
    if len(text) > 60:
        text = text[:57] + "..."
    return FormatError(f"expecting {expected}, got {text}", where=_render(path))


def _decode(t: TypeExpr, v: Any, path: JsonPath) -> Nested:
    """``from_json`` of `v` as a `t`; a generator that yields the generators of nested values."""
    if isinstance(t, Prim):
        return _primitive(t.name, v, path)
    if isinstance(t, ListOf):
        if not isinstance(v, list):
            raise _bad(path, f"an array ({t})", v)
        items = []
        for i, x in enumerate(v):
            items.append((yield _decode(t.item, x, (path, f"[{i}]"))))
        return tuple(items)
    if isinstance(t, OptionOf):
        return None if v is None else (yield _decode(t.item, v, path))
    d = SCHEMA[t.name]
    if isinstance(d, Enum):
        if not isinstance(v, str) or v not in d.values:
            raise _bad(path, f"a {d.name} name ({', '.join(d.values)})", v)
        return T.class_for(d.name)[v]  # type: ignore[index]  # an enum.Enum class: looked up by name
    if not isinstance(v, dict) or v.get("_type") != d.name:
        raise _bad(path, f"an object with _type {d.name!r}", v)
    if isinstance(d, Struct):
        fields, cls, known = d.data_fields, T.class_for(d.name), {"_type"}
    else:
        assert isinstance(d, Inductive)
        names = [c.name for c in d.ctors]
        if v.get("_ctor") not in names:
            raise _bad((path, "._ctor"), f"a {d.name} constructor ({', '.join(names)})", v.get("_ctor"))
        c = d.ctor_named(v["_ctor"])
        fields, cls, known = c.data_fields, T.class_for(d.name, c.name), {"_type", "_ctor"}
    extra = set(v) - known - {f.name for f in fields}
    if extra:
        raise FormatError(f"unexpected keys {sorted(extra)} in {d.name}", where=_render(path))
    args = []
    for f in fields:
        if f.name not in v:
            raise FormatError(f"missing field {f.name!r} of {d.name}", where=_render(path))
        step = (path, f".{f.name}")
        if isinstance(f.type, Prim):
            args.append(_primitive(f.type.name, v[f.name], step))
        else:
            args.append((yield _decode(f.type, v[f.name], step)))
    return cls(*args)


def _primitive(name: str, v: Any, path: JsonPath) -> Any:
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
        if type(v) is str and v.startswith(FLOAT_BITS_TAG):
            return _float_from_bits(v, path)
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
