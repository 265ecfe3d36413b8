"""Writing KLR binary files in the canonical form (spec §2.10), compiled from the schema.

Mirror image of :mod:`ir.klr.reader`: one generated function per structure
and per inductive constructor appends the precomputed 4-byte head and then
the fields in wire order to a ``bytearray``.  Prop fields are written as
nothing.  Integers and lengths take their shortest form, floats are always
``fa`` + binary32, Options are ``d9 ff 00 80`` / ``d9 ff 01 81``, so equal
values always give identical bytes.

Values are checked as they are written (right class, ints in range, floats
exactly representable in binary32, tuples for lists); a value that does not
fit raises :class:`ir.errors.FormatError` naming the ``Type.field``.
"""

from __future__ import annotations

from typing import Any

from tusk.ir.errors import FormatError
from tusk.ir.klr import nesting, wire
from tusk.ir.klr import types as T
from tusk.ir.klr._codegen import Source
from tusk.ir.klr.schema import (
    FORMAT_VERSION,
    SCHEMA,
    Definition,
    Inductive,
    ListOf,
    OptionOf,
    Prim,
    Ref,
    Struct,
    TypeExpr,
    recursive_types,
)


class _WriterGenerator:
    """Writes the encoding functions for a schema.

    Generated names: ``write_T(v, out)`` for structure ``T`` and
    ``write_T_c(v, out)`` for constructor ``c`` of inductive ``T`` append the
    head and fields of an already type-checked value; ``put_T(v, out)`` is an
    entry point that also checks the value's class.  Writers of recursive
    types take a ``depth`` argument and have a generator twin
    ``gwrite_...``: as in the reader, nesting deeper than
    :data:`nesting.FAST_DEPTH` continues on an explicit stack
    (:func:`nesting.write_deep`), so no depth is refused.
    """

    def __init__(self, schema: dict[str, Definition]):
        self.schema = schema
        self.recursive = recursive_types(schema)
        self.src = Source()
        self.gen = False  # writing a generator twin
        self.ns: dict[str, Any] = {
            "FAST_DEPTH": nesting.FAST_DEPTH,
            "write_deep": nesting.write_deep,
            "OPT_NONE": wire.OPTION_NONE,
            "OPT_SOME": wire.OPTION_SOME,
            "cannot_write": wire.cannot_write,
            "write_head": wire.write_head,
            "write_nat": wire.write_nat,
            "write_int": wire.write_int,
            "write_str": wire.write_str,
            "write_float": wire.write_float,
        }

    def generate(self) -> dict[str, Any]:
        dispatch: dict[str, dict[type, str]] = {}
        for d in self.schema.values():
            if isinstance(d, Struct):
                self.ns[f"C_{d.name}"] = T.class_for(d.name)
                self._records(f"write_{d.name}", d.name, d.name, d.head, d.fields)
            elif isinstance(d, Inductive):
                dispatch[d.name] = {}
                for c in d.ctors:
                    fn = f"write_{d.name}_{c.name}"
                    dispatch[d.name][T.class_for(d.name, c.name)] = fn
                    self._records(fn, d.name, f"{d.name}.{c.name}", d.head(c), c.fields)
            else:
                self.ns[f"C_{d.name}"] = T.class_for(d.name)
                # Indexed by the member's wire index (its Enum value).
                self.ns[f"EH_{d.name}"] = tuple(d.head(i) for i in range(len(d.values)))
            self._entry(d)
        self.src.compile_into(self.ns, "<klr-writer>")
        for name, fns in dispatch.items():
            self.ns[f"W_{name}"] = {cls: self.ns[fn] for cls, fn in fns.items()}
            if name in self.recursive:
                self.ns[f"WG_{name}"] = {cls: self.ns[f"g{fn}"] for cls, fn in fns.items()}
        return self.ns

    def _entry(self, d: Definition) -> None:
        with self.src.block(f"def put_{d.name}(v, out):"):
            self._write(Ref(d.name), "v", d.name, caller=None)

    def _records(self, fn: str, type_name: str, label: str, head: bytes, fields) -> None:
        """``fn`` and, for a recursive type, its generator twin ``g<fn>``."""
        for self.gen in (False, True) if type_name in self.recursive else (False,):
            self._record(f"g{fn}" if self.gen else fn, type_name, label, head, fields)
        self.gen = False

    def _record(self, fn: str, type_name: str, label: str, head: bytes, fields) -> None:
        src = self.src
        self.ns[f"H_{fn}"] = head
        recursive = type_name in self.recursive
        with src.block(f"def {fn}(v, out{', depth' if recursive and not self.gen else ''}):"):
            if recursive and not self.gen:
                with src.block("if depth > FAST_DEPTH:"):
                    src.line(f"return write_deep(g{fn}, v, out)")
            src.line(f"out += H_{fn}")
            nested = False
            for f in fields:
                if f.is_prop:  # counted in the head, no bytes (spec §2.9)
                    continue
                var = src.fresh("x")
                src.line(f"{var} = v.{f.name}")
                nested |= self._write(f.type, var, f"{label}.{f.name}", caller=type_name)
            if self.gen and not nested:
                src.line("return")
                src.line("yield  # never reached: makes this a generator like its siblings")

    def _write(self, t: TypeExpr, var: str, where: str, caller: str | None) -> bool:
        """Emit code appending the encoding of `var` (declared type `t`) to out.

        Returns whether that code yields (a nested value of a recursive type,
        in a generator twin)."""
        src, w = self.src, repr(where)
        if isinstance(t, Prim):
            self._write_primitive(t.name, var, w)
            return False
        elif isinstance(t, ListOf):
            with src.block(f"if {var}.__class__ is not tuple:"):
                src.line(f"cannot_write({var}, {f'{t} (a tuple)'!r}, {w})")
            count, item = src.fresh("n"), src.fresh("y")
            src.line(f"{count} = len({var})")
            with src.block(f"if {count} < 24:"):
                src.line(f"out.append(0x80 + {count})")
            with src.block("else:"):
                src.line(f"write_head(out, 4, {count})")
            with src.block(f"for {item} in {var}:"):
                return self._write(t.item, item, where, caller)
        elif isinstance(t, OptionOf):
            with src.block(f"if {var} is None:"):
                src.line("out += OPT_NONE")
            with src.block("else:"):
                src.line("out += OPT_SOME")
                return self._write(t.item, var, where, caller)
        else:
            d = self.schema[t.name]
            nested = d.name in self.recursive and caller in self.recursive
            depth = (", depth + 1" if nested else ", 0") if d.name in self.recursive else ""
            if isinstance(d, Struct):
                with src.block(f"if {var}.__class__ is not C_{d.name}:"):
                    src.line(f"cannot_write({var}, {d.name!r}, {w})")
                if nested and self.gen:
                    src.line(f"yield gwrite_{d.name}, {var}")
                else:
                    src.line(f"write_{d.name}({var}, out{depth})")
            elif isinstance(d, Inductive):
                src.line(f"g = {'WG' if nested and self.gen else 'W'}_{d.name}.get({var}.__class__)")
                with src.block("if g is None:"):
                    src.line(f"cannot_write({var}, {f'a {d.name} constructor'!r}, {w})")
                if nested and self.gen:
                    src.line(f"yield g, {var}")
                else:
                    src.line(f"g({var}, out{depth})")
            else:
                with src.block(f"if {var}.__class__ is not C_{d.name}:"):
                    src.line(f"cannot_write({var}, {f'a {d.name} member'!r}, {w})")
                src.line(f"out += EH_{d.name}[{var}._value_]")
            return nested and self.gen

    def _write_primitive(self, name: str, var: str, w: str) -> None:
        src = self.src
        if name in ("Nat", "Int"):
            # Inline the shortest forms up to 0xffff (sizes, strides, offsets);
            # everything else, and every error, goes through wire.
            low = "-24" if name == "Int" else "0"
            with src.block(f"if {var}.__class__ is int and {low} <= {var} < 0x10000:"):
                if name == "Int":
                    with src.block(f"if {var} < 0:"):
                        src.line(f"out.append(0x1f - {var})  # major 1: 0x20 + (-1 - v)")
                with src.block(f"{'el' if name == 'Int' else ''}if {var} < 24:"):
                    src.line(f"out.append({var})")
                with src.block(f"elif {var} < 0x100:"):
                    src.line("out.append(0x18)")
                    src.line(f"out.append({var})")
                with src.block("else:"):
                    src.line(f"out += (0x190000 | {var}).to_bytes(3, 'big')")
            with src.block("else:"):
                src.line(f"write_{name.lower()}(out, {var}, {w})")
        elif name == "Bool":
            with src.block(f"if {var} is True:"):
                src.line("out.append(0xf5)")
            with src.block(f"elif {var} is False:"):
                src.line("out.append(0xf4)")
            with src.block("else:"):
                src.line(f"cannot_write({var}, 'Bool', {w})")
        elif name == "String":
            # Short ASCII strings: length == byte count and encoding cannot fail.
            with src.block(f"if {var}.__class__ is str and len({var}) < 24 and {var}.isascii():"):
                src.line(f"out.append(0x60 + len({var}))")
                src.line(f"out += {var}.encode()")
            with src.block("else:"):
                src.line(f"write_str(out, {var}, {w})")
        elif name == "Float":
            src.line(f"write_float(out, {var}, {w})")
        else:
            assert name == "Prop"


_NS = _WriterGenerator(SCHEMA).generate()


def write_value(type_name: str, value: Any) -> bytes:
    """Encode one value of schema type `type_name`."""
    if type_name not in SCHEMA:
        raise KeyError(f"unknown KLR type {type_name!r}")
    out = bytearray()
    wire.WIDTH_WARNED.clear()
    _guarded(_NS[f"put_{type_name}"], value, out)
    return bytes(out)


def default_file(kernel: Any) -> T.KLRFileContents:
    """Wrap an LncKernel the way KLR's Lean writer does: version 0.0.12, "NKI", lnc."""
    return T.KLRFileContents(
        T.KLRFile(*FORMAT_VERSION), T.KLRMetaData("NKI"), T.Contents.lnc(kernel=kernel)
    )


def write_klr(obj: Any) -> bytes:
    """Encode a :class:`KLRFileContents` (or a bare ``LncKernel``) as ``.klr`` bytes.

    The inverse of :func:`ir.klr.read_klr`: the three items are written back
    to back in canonical form.  A bare ``LncKernel`` is wrapped by
    :func:`default_file` first.
    """
    if isinstance(obj, T.LncKernel):
        obj = default_file(obj)
    if not isinstance(obj, T.KLRFileContents):
        raise FormatError(f"write_klr needs KLRFileContents or LncKernel, got {type(obj).__name__}")
    out = bytearray()
    wire.WIDTH_WARNED.clear()
    _guarded(_NS["put_KLRFile"], obj.header, out)
    _guarded(_NS["put_KLRMetaData"], obj.metadata, out)
    _guarded(_NS["put_Contents"], obj.contents, out)
    return bytes(out)


def _guarded(put, value: Any, out: bytearray) -> None:
    try:
        put(value, out)
    except RecursionError:
        raise FormatError("value nested too deeply to write") from None

