"""Reading KLR binary files (spec §1-§2), compiled from the schema table.

For every schema type the generator below writes one Python function that
decodes a value of that type: it checks the 4-byte head against a
precomputed ``bytes`` constant (structures) or looks it up in a
head -> constructor dict (inductives, enums), then decodes the fields in wire
order with the one-byte integer, bool, list-length and Option cases inlined,
and builds the frozen dataclass.  Everything else goes through
:mod:`ir.klr.wire`.

Strictness follows KLR's C++ reader (spec §1.6, §2.11): a head whose tag,
constructor or field count differs from the schema is an error, Prop fields
consume no bytes, only ``fa`` floats are accepted.  In two places it is
stricter, like KLR's Lean reader: heads must be exactly 4 bytes and Options
exactly ``d9 ff 00 80`` / ``d9 ff 01 81`` (C++ also accepts long-form array
lengths and other Option bytes, which no KLR writer produces).  Integers in
non-shortest form are accepted, as both KLR readers do.

Every malformed or truncated input raises :class:`ir.errors.FormatError`
naming the byte offset, the type expected and the ``Type.field`` being read
(the offset is also kept as the exception's ``offset`` attribute).

Speed: besides the inlining, two measures matter on large files.  The cyclic
garbage collector is paused while decoding (the decoded values cannot form
cycles, and its repeated scans of the growing heap doubled the time), and
``TensorName`` values are interned: a TensorName is repeated in full in
every access that names it, so identical bytes are decoded once and the
same immutable object is reused (see ``_interning``).  The intern table is
module-level and bounded; it never changes results, only speed and memory.
"""

from __future__ import annotations

import gc
from typing import Any

from tusk.ir.errors import FormatError
from tusk.ir.klr import nesting, wire
from tusk.ir.klr import types as T
from tusk.ir.klr._codegen import Source
from tusk.ir.klr.schema import (
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

#: Structures whose values are interned while reading (see ``_interning``).
#: A TensorName (45-60 bytes) is repeated in full inside every access that
#: names it (spec §2.8), so most of a real file's bytes are repeats of a few
#: hundred of them.
INTERNED = ("TensorName",)

#: Bound on each intern table; it is emptied when full.
INTERN_LIMIT = 4096


class _ReaderGenerator:
    """Writes the decoding functions for a schema (see the module docstring).

    Generated names: ``body_T`` decodes the fields of structure ``T`` after
    its head; ``body_T_c`` those of constructor ``c`` of inductive ``T``;
    ``read_T`` is an entry point that checks the head and calls the body;
    ``interned_T`` wraps ``body_T`` for the types in :data:`INTERNED`.
    Bodies of recursive types take a ``depth`` argument and have a
    generator twin ``gbody_...`` (see ``_record_bodies``).
    """

    def __init__(self, schema: dict[str, Definition]):
        self.schema = schema
        self.interned = set(INTERNED)
        self.recursive = recursive_types(schema)
        self.src = Source()
        self.gen = False  # writing a generator twin (see _record_bodies)
        self.ns: dict[str, Any] = {
            "new": object.__new__,
            "OPT_NONE": wire.OPTION_NONE,
            "OPT_SOME": wire.OPTION_SOME,
            "FAST_DEPTH": nesting.FAST_DEPTH,
            "run_nested": nesting.run,
            "fail": wire.fail,
            "bad_head": wire.bad_head,
            "read_nat": wire.read_nat,
            "read_int": wire.read_int,
            "read_str": wire.read_str,
            "read_float": wire.read_float,
            "read_list_len": wire.read_list_len,
        }

    # -- whole schema -------------------------------------------------------

    def generate(self) -> dict[str, Any]:
        dispatch: dict[str, dict[bytes, str]] = {}
        for d in self.schema.values():
            if isinstance(d, Struct):
                self.ns[f"H_{d.name}"] = d.head
                self._record_bodies(f"body_{d.name}", d.name, d.name, T.class_for(d.name), d.fields)
                if d.name in self.interned:
                    self._interning(d)
            elif isinstance(d, Inductive):
                dispatch[d.name] = {}
                for c in d.ctors:
                    fn = f"body_{d.name}_{c.name}"
                    dispatch[d.name][d.head(c)] = fn
                    cls = T.class_for(d.name, c.name)
                    self._record_bodies(fn, d.name, f"{d.name}.{c.name}", cls, c.fields)
            else:
                members = list(T.class_for(d.name))
                self.ns[f"E_{d.name}"] = {d.head(i): m for i, m in enumerate(members)}
            self._entry(d)
        self.src.compile_into(self.ns, "<klr-reader>")
        for name, heads in dispatch.items():
            self.ns[f"D_{name}"] = {h: self.ns[fn] for h, fn in heads.items()}
            if name in self.recursive:
                self.ns[f"DG_{name}"] = {h: self.ns[f"g{fn}"] for h, fn in heads.items()}
        return self.ns

    def _entry(self, d: Definition) -> None:
        with self.src.block(f"def read_{d.name}(d, p):"):
            self._read(Ref(d.name), "v", d.name, caller=None)
            self.src.line("return v, p")

    def _interning(self, d: Struct) -> None:
        """``interned_T(d, p)``: decode the T whose (checked) head is at p, reusing
        the object decoded earlier from identical bytes.

        The table is keyed by the head plus the first field, a String (for
        TensorName, its name), and holds the complete encoding last seen
        with that key.  When the bytes at p start with that encoding, decoding
        would consume exactly those bytes and rebuild an equal immutable
        value, so the stored one is returned.  Sharing is safe because values
        are frozen; the table only ever affects speed and memory.
        """
        assert d.fields[0].type == Prim("String") and d.name not in self.recursive
        table = f"INTERN_{d.name}"
        self.ns[table] = {}
        self.ns["INTERN_LIMIT"] = INTERN_LIMIT
        src = self.src
        with src.block(f"def interned_{d.name}(d, p):"):
            src.line("b = d[p + 4]")
            with src.block("if not 0x60 <= b < 0x78:"):
                src.line(f"return body_{d.name}(d, p + 4)")
            src.line("key = d[p:p + b - 0x5b]  # head + short first string")
            src.line(f"hit = {table}.get(key)")
            with src.block("if hit is not None and d.startswith(hit[0], p):"):
                src.line("return hit[1], p + len(hit[0])")
            src.line(f"v, q = body_{d.name}(d, p + 4)")
            with src.block(f"if len({table}) >= INTERN_LIMIT:"):
                src.line(f"{table}.clear()")
            src.line(f"{table}[key] = (d[p:q], v)")
            src.line("return v, q")

    def _record_bodies(self, fn: str, type_name: str, label: str, cls: type, fields) -> None:
        """``fn`` and, for a recursive type, its generator twin ``g<fn>``.

        The recursive types (Access, BirAccessPattern, ScalarOffset) can nest
        without bound.  ``fn(d, p, depth)`` reads nested values by direct
        calls, which is fastest; past :data:`nesting.FAST_DEPTH` levels it hands
        the rest of the value to ``g<fn>`` run by :func:`nesting.run`, whose
        bodies read nested values by yielding their generators (an explicit
        stack).
        """
        for self.gen in (False, True) if type_name in self.recursive else (False,):
            self._record_body(f"g{fn}" if self.gen else fn, type_name, label, cls, fields)
        self.gen = False

    def _record_body(self, fn: str, type_name: str, label: str, cls: type, fields) -> None:
        """Decode `fields` in order, then build one `cls` value."""
        recursive = type_name in self.recursive
        data_fields = [f for f in fields if not f.is_prop]
        if not data_fields:
            # Field-less constructors (Immediate.pointer...) share one instance.
            self.ns[f"K_{cls.__name__}"] = cls()
        src = self.src
        with src.block(f"def {fn}(d, p{', depth' if recursive and not self.gen else ''}):"):
            if recursive and not self.gen:
                with src.block("if depth > FAST_DEPTH:"):
                    src.line(f"return run_nested(g{fn}(d, p))")
            if not data_fields:
                src.line(f"return K_{cls.__name__}, p")
                if self.gen:
                    src.line("yield  # never reached: makes this a generator like its siblings")
                return
            names = []
            for f in data_fields:
                var = src.fresh("f")
                self._read(f.type, var, f"{label}.{f.name}", caller=type_name)
                names.append((f.name, var))
            # Building through the slot descriptors skips the frozen-dataclass
            # __init__ (object.__setattr__ per field): about twice as fast.
            src.line(f"o = new(C_{cls.__name__})")
            self.ns[f"C_{cls.__name__}"] = cls
            for fname, var in names:
                setter = f"S_{cls.__name__}_{fname}"
                self.ns[setter] = cls.__dict__[fname].__set__
                src.line(f"{setter}(o, {var})")
            src.line("return o, p")
            if self.gen and not any(self._reaches_recursive(f.type) for f in data_fields):
                src.line("yield  # never reached: makes this a generator like its siblings")

    def _reaches_recursive(self, t: TypeExpr) -> bool:
        if isinstance(t, (ListOf, OptionOf)):
            return self._reaches_recursive(t.item)
        return isinstance(t, Ref) and t.name in self.recursive

    # -- one value ----------------------------------------------------------

    def _read(self, t: TypeExpr, target: str, where: str, caller: str | None) -> None:
        """Emit code that decodes a `t` at p into `target` and advances p."""
        src, w = self.src, repr(where)
        if isinstance(t, Prim):
            self._read_primitive(t.name, target, w)
        elif isinstance(t, ListOf):
            count, items, item = src.fresh("n"), src.fresh("items"), src.fresh("x")
            src.line("b = d[p]")
            with src.block("if 0x80 <= b < 0x98:"):
                src.line(f"{count} = b - 0x80")
                src.line("p += 1")
            with src.block("else:"):
                src.line(f"{count}, p = read_list_len(d, p, {w})")
            src.line(f"{items} = []")
            with src.block(f"for _ in range({count}):"):
                self._read(t.item, item, where, caller)
                src.line(f"{items}.append({item})")
            src.line(f"{target} = tuple({items})")
        elif isinstance(t, OptionOf):
            src.line("h = d[p:p + 4]")
            with src.block("if h == OPT_NONE:"):
                src.line(f"{target} = None")
                src.line("p += 4")
            with src.block("elif h == OPT_SOME:"):
                src.line("p += 4")
                self._read(t.item, target, where, caller)
            with src.block("else:"):
                src.line(f"bad_head(d, p, {str(t)!r}, {w})")
        else:
            self._read_named(self.schema[t.name], target, w, caller)

    def _read_named(self, d: Definition, target: str, w: str, caller: str | None) -> None:
        src = self.src
        depth = ""
        nested = d.name in self.recursive and caller in self.recursive
        if d.name in self.recursive:
            depth = ", depth + 1" if nested else ", 0"
        if isinstance(d, Struct):
            with src.block(f"if d[p:p + 4] != H_{d.name}:"):
                src.line(f"bad_head(d, p, {d.name!r}, {w})")
            if d.name in self.interned:
                src.line(f"{target}, p = interned_{d.name}(d, p)")
            elif nested and self.gen:
                src.line(f"{target}, p = yield gbody_{d.name}(d, p + 4)")
            else:
                src.line(f"{target}, p = body_{d.name}(d, p + 4{depth})")
        elif isinstance(d, Inductive):
            table = "DG" if nested and self.gen else "D"
            src.line(f"g = {table}_{d.name}.get(d[p:p + 4])")
            with src.block("if g is None:"):
                src.line(f"bad_head(d, p, {d.name!r}, {w})")
            if nested and self.gen:
                src.line(f"{target}, p = yield g(d, p + 4)")
            else:
                src.line(f"{target}, p = g(d, p + 4{depth})")
        else:
            src.line(f"{target} = E_{d.name}.get(d[p:p + 4])")
            with src.block(f"if {target} is None:"):
                src.line(f"bad_head(d, p, {d.name!r}, {w})")
            src.line("p += 4")

    def _read_primitive(self, name: str, target: str, w: str) -> None:
        src = self.src
        if name in ("Nat", "Int"):
            src.line("b = d[p]")
            with src.block("if b < 24:"):
                src.line(f"{target} = b")
                src.line("p += 1")
            if name == "Int":
                with src.block("elif 0x20 <= b < 0x38:"):
                    src.line(f"{target} = 0x1f - b")
                    src.line("p += 1")
            # One- and two-byte arguments (24..65535: sizes, strides, offsets)
            # are common enough to inline.  If they run into the padding the
            # next read fails, or read_klr's final length check does.
            with src.block("elif b == 0x18:"):
                src.line(f"{target} = d[p + 1]")
                src.line("p += 2")
            with src.block("elif b == 0x19:"):
                src.line(f"{target} = (d[p + 1] << 8) | d[p + 2]")
                src.line("p += 3")
            with src.block("else:"):
                src.line(f"{target}, p = read_{name.lower()}(d, p, {w})")
        elif name == "Bool":
            src.line("b = d[p]")
            with src.block("if b == 0xf4:"):
                src.line(f"{target} = False")
            with src.block("elif b == 0xf5:"):
                src.line(f"{target} = True")
            with src.block("else:"):
                src.line(f"fail(d, p, 'Bool', {w})")
            src.line("p += 1")
        elif name == "String":
            src.line("b = d[p]")
            with src.block("if 0x60 <= b < 0x78:"):
                src.line("q = p + b - 0x5f")
                # Bad UTF-8 and strings running into the 0xff padding (never
                # valid UTF-8) both land in read_str, which explains them.
                with src.block("try:"):
                    src.line(f"{target} = d[p + 1:q].decode()")
                with src.block("except UnicodeDecodeError:"):
                    src.line(f"{target}, q = read_str(d, p, {w})")
                src.line("p = q")
            with src.block("else:"):
                src.line(f"{target}, p = read_str(d, p, {w})")
        elif name == "Float":
            src.line(f"{target}, p = read_float(d, p, {w})")
        else:  # Prop: counted in the head, no bytes
            assert name == "Prop"


_NS = _ReaderGenerator(SCHEMA).generate()


# --------------------------------------------------------------------------
# Public entry points
# --------------------------------------------------------------------------


def _padded(data: bytes | bytearray | memoryview) -> bytes:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"KLR data must be bytes-like, not {type(data).__name__}")
    return bytes(data) + wire.PAD


def _located(err: FormatError, file: str | None) -> FormatError:
    if file is None:
        return err
    return wire.format_error(err.message, getattr(err, "offset", None), str(file))


def _run(steps, data, file, what: str):
    """Decode with `steps(padded) -> (value, end)`; errors get the file name."""
    d = _padded(data)
    # Decoding allocates millions of small acyclic objects; left running,
    # the cyclic collector rescans the growing heap over and over and
    # doubles the time.  Nothing decoded here can form a cycle.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        value, end = steps(d)
        if end > wire.data_length(d):
            # An inlined multi-byte integer at the very end ran into the padding.
            raise wire.format_error(
                f"unexpected end of data at byte 0x{wire.data_length(d):x} while reading {what}",
                wire.data_length(d),
            )
        return value, end
    except FormatError as e:
        raise _located(e, file) from None
    except RecursionError:
        # Only reachable if the caller's own stack is already deep.
        raise wire.format_error("values nested too deeply for the Python stack", None, file) from None
    finally:
        if gc_was_enabled:
            gc.enable()


def read_value(type_name: str, data: bytes, offset: int = 0, *, file: str | None = None) -> tuple[Any, int]:
    """Decode one value of schema type `type_name` at `offset`.

    Returns ``(value, end_offset)``.  Bytes after the value are not looked at.
    """
    if type_name not in SCHEMA:
        raise KeyError(f"unknown KLR type {type_name!r}")
    if not 0 <= offset <= len(data):
        raise ValueError(f"offset {offset} outside the data (0..{len(data)})")
    entry = _NS[f"read_{type_name}"]
    return _run(lambda d: entry(d, offset), data, file, type_name)


def read_header(data: bytes, *, file: str | None = None) -> Any:
    """Decode only the first item of a ``.klr`` file, the ``KLRFile`` version header."""
    return read_value("KLRFile", data, file=file)[0]


def read_klr(data: bytes, *, file: str | None = None) -> T.KLRFileContents:
    """Decode a whole ``.klr`` file: ``KLRFile``, ``KLRMetaData``, ``Contents``.

    The three CBOR items are read back to back; bytes after the Contents are
    ignored, as KLR's readers do.  The version and the kind of Contents are
    not checked here (see :func:`ir.klr.load_lnc_kernel`).  `file` only
    names the input in error messages.
    """
    read_file, read_meta, read_contents = _NS["read_KLRFile"], _NS["read_KLRMetaData"], _NS["read_Contents"]

    def steps(d: bytes) -> tuple[T.KLRFileContents, int]:
        header, p = read_file(d, 0)
        metadata, p = read_meta(d, p)
        contents, p = read_contents(d, p)
        return T.KLRFileContents(header, metadata, contents), p

    return _run(steps, data, file, "Contents")[0]

