"""KLIR values as Python classes, generated from :data:`ir.klr.schema.SCHEMA`.

Nothing here is written by hand per type; every class below is made by
:func:`dataclasses.make_dataclass` from the one schema table.

Naming scheme
-------------

* **Structure** ``T`` -> frozen dataclass ``T`` with the fields in wire order;
  Prop fields (no bytes, no information) are left out.
  ``TensorName(name, dtype, shape, address, freeElements, addressRotation)``.
* **Inductive** ``T`` with constructor ``c`` -> frozen dataclass ``T_c``, also
  reachable as ``T.c``: ``Access.birPattern(access=...)`` is
  ``Access_birPattern(access=...)``; its ``repr`` reads
  ``Access.birPattern(access=BirAccessPattern(...))``.  ``T`` itself is a
  namespace that cannot be instantiated, but ``isinstance(x, T)`` is true
  for every constructor class, and ``T.ctors`` lists them in wire order.
  Constructor names are the C++ ones (``Immediate.float32``, ``TensorRef.reg``).
* **Enum** ``T`` -> :class:`enum.Enum` subclass ``T`` whose member names are
  the C++ enumerators and whose values are the 0-based wire indices:
  ``Dtype.float32.value == 5``.  Names that are Python keywords are reached by
  subscription: ``MatmulPerfMode["None"]``.

Every generated class carries ``klr_type`` (schema type name), and
constructor classes also ``klr_ctor`` (constructor name) and ``klr_index``.

Value conventions: ``List[T]`` is a tuple (values stay hashable and
comparable), ``Option[T]`` is ``None`` or the bare value, ``Nat``/``Int`` are
``int``, ``Bool`` is ``bool``, ``Float`` is a ``float`` exactly representable
as a binary32, ``String`` is ``str``.  Equality is structural.
"""

from __future__ import annotations

import dataclasses
import enum as _enum
from typing import Any, Iterator, Optional

from tusk.ir.klr import schema as _schema
from tusk.ir.klr.schema import SCHEMA, Definition, Field, Inductive, ListOf, OptionOf, Prim, Struct

_PY_PRIMITIVE = {"Nat": "int", "Int": "int", "Bool": "bool", "Float": "float", "String": "str"}


def _annotation(t) -> str:
    """A readable type hint for a field (documentation only)."""
    if isinstance(t, Prim):
        return _PY_PRIMITIVE[t.name]
    if isinstance(t, ListOf):
        return f"tuple[{_annotation(t.item)}, ...]"
    if isinstance(t, OptionOf):
        return f"Optional[{_annotation(t.item)}]"
    return t.name


class SumType(type):
    """Metaclass of the inductive-type namespaces (``Access``, ``Operator``...).

    ``isinstance(value, Access)`` is true when ``value`` is an instance of one
    of Access's constructor classes; the namespace itself has no instances.
    """

    def __instancecheck__(cls, obj: Any) -> bool:
        return type(obj) in cls._ctor_set

    def __subclasscheck__(cls, sub: type) -> bool:
        return sub in cls._ctor_set or sub is cls

    def __call__(cls, *args, **kwargs):
        names = ", ".join(f"{cls.__name__}.{c.klr_ctor}" for c in cls.ctors)
        raise TypeError(f"{cls.__name__} is a sum type; construct one of {names}")

    def __iter__(cls) -> Iterator[type]:
        return iter(cls.ctors)


def _make_record(class_name: str, qualname: str, fields: tuple[Field, ...], namespace: dict) -> type:
    cls = dataclasses.make_dataclass(
        class_name,
        [(f.name, _annotation(f.type)) for f in fields if not f.is_prop],
        namespace={**namespace, "__module__": __name__},
        frozen=True,
        slots=True,  # smaller objects, faster attribute access
    )
    cls.__qualname__ = qualname
    return cls


def _make_enum(d: _schema.Enum) -> type:
    cls = _enum.Enum(d.name, [(v, i) for i, v in enumerate(d.values)], module=__name__, qualname=d.name)
    cls.klr_type = d.name
    return cls


def _build(schema: dict[str, Definition]) -> dict[str, Any]:
    """Generate every class; returns {public name: class}."""
    made: dict[str, Any] = {}
    for d in schema.values():
        if isinstance(d, Struct):
            made[d.name] = _make_record(d.name, d.name, d.fields, {"klr_type": d.name})
        elif isinstance(d, _schema.Enum):
            made[d.name] = _make_enum(d)
        else:
            ctor_classes = []
            for c in d.ctors:
                cls = _make_record(
                    f"{d.name}_{c.name}",
                    # The qualname makes repr() and pickle read T.c (see module doc).
                    f"{d.name}.{c.name}",
                    c.fields,
                    {"klr_type": d.name, "klr_ctor": c.name, "klr_index": c.index},
                )
                made[cls.__name__] = cls
                ctor_classes.append(cls)
            ns = {c.name: cls for c, cls in zip(d.ctors, ctor_classes)}
            ns.update(
                ctors=tuple(ctor_classes),
                _ctor_set=frozenset(ctor_classes),
                klr_type=d.name,
                __module__=__name__,
                __doc__=f"KLIR sum type {d.name}: one of "
                + ", ".join(f"{d.name}.{c.name}" for c in d.ctors),
            )
            made[d.name] = SumType(d.name, (), ns)
    return made


_GENERATED = _build(SCHEMA)
globals().update(_GENERATED)


@dataclasses.dataclass(frozen=True, slots=True)
class KLRFileContents:
    """The three items of a ``.klr`` file: version header, metadata, contents."""

    header: Any  # KLRFile
    metadata: Any  # KLRMetaData
    contents: Any  # one of the Contents constructors


def class_for(type_name: str, ctor: Optional[str] = None) -> type:
    """The generated class of a schema type (or of one of its constructors)."""
    return _GENERATED[type_name if ctor is None else f"{type_name}_{ctor}"]


def definition_of(value: Any) -> tuple[Definition, Optional[_schema.Ctor]]:
    """The schema definition (and constructor, for inductives) of a value."""
    d = SCHEMA[type(value).klr_type]
    if isinstance(d, Inductive):
        return d, d.ctors[type(value).klr_index]
    return d, None


__all__ = sorted(_GENERATED) + ["KLRFileContents", "SumType", "class_for", "definition_of"]
