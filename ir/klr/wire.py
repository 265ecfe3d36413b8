"""The CBOR subset KLR uses (spec §2): primitive readers/writers and errors.

The generated reader and writer (:mod:`ir.klr.reader`, :mod:`ir.klr.writer`)
inline the common one-byte cases themselves and call into this module only
for the rest: multi-byte integers, strings, floats, long lists, and every
error.

Reader conventions.  The reader works on the file's bytes followed by
:data:`PAD`, a run of ``0xff`` bytes.  ``0xff`` (CBOR "break") is invalid at
the start of every KLR value, so reading at or past the end of the real data
always fails a check that is there anyway, and the inlined code needs no
separate bounds tests.  Helpers here take ``(d, p, where)`` — padded bytes,
position, and the ``Type.field`` being read — and return ``(value, new_p)``.
"""

from __future__ import annotations

import struct
import warnings

from tusk.ir.errors import FormatError
from tusk.ir.klr.magic import MAGIC, is_klr_bytes  # noqa: F401 (re-exported)
from tusk.ir.klr.schema import SCHEMA, Inductive, Struct

#: Appended after the data; see the module docstring.  Longer than any
#: fixed-size read (a 9-byte integer head) so slices never come up short.
PAD = b"\xff" * 16
_PADLEN = len(PAD)

OPTION_NONE = b"\xd9\xff\x00\x80"
OPTION_SOME = b"\xd9\xff\x01\x81"

#: The C++ reader refuses longer strings (cbor.c, ``len > 0x10000``).
MAX_STRING_BYTES = 0x10000

_INT64_MAX = (1 << 63) - 1
_ARG_SIZE = {24: 1, 25: 2, 26: 4, 27: 8}
_F32 = struct.Struct(">f")
_F64_BITS = struct.Struct(">Q")
_F64 = struct.Struct(">d")
_MAJOR_NAMES = ("Nat", "Int", "bytes", "String", "List", "map", "tag", "simple/float")


# --------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------


def format_error(message: str, offset: int | None = None, file: str | None = None) -> FormatError:
    """A FormatError that also remembers the byte offset as ``.offset``."""
    err = FormatError(message, file=file)
    err.offset = offset
    return err


def data_length(d: bytes) -> int:
    """Length of the real data inside a padded buffer."""
    return len(d) - _PADLEN


def fail(d: bytes, p: int, expected: str, where: str, detail: str = "") -> None:
    """Raise the FormatError for "a value of type `expected` was wanted at p"."""
    n = data_length(d)
    if p >= n:
        # p can lie past the end when an inlined multi-byte integer ran into
        # the padding; the data itself ends at n.
        raise format_error(
            f"unexpected end of data at byte 0x{n:x} (expecting {expected}) while reading {where}", n
        )
    msg = f"expecting {expected} at byte 0x{p:x} while reading {where}"
    if detail:
        msg += f" ({detail})"
    raise format_error(msg, p)


def _hex(bs: bytes) -> str:
    return " ".join(f"{b:02x}" for b in bs)


def bad_head(d: bytes, p: int, expected: str, where: str) -> None:
    """Explain why the 4 bytes at p are not a head of type `expected`.

    `expected` is a schema type name or ``Option[...]``.  The wording follows
    the C++ reader's distinctions (wrong type tag / invalid constructor /
    wrong number of elements) so a mismatch can be traced to the spec.
    """
    n = data_length(d)
    if p >= n:
        fail(d, p, expected, where)
    got = bytes(d[p : p + 4])  # may run into the padding: shown as far as it is data
    shown = _hex(got[: n - p])
    if p + 4 > n and got[0] == 0xD9:
        raise format_error(
            f"unexpected end of data at byte 0x{n:x} inside the {expected} head at byte 0x{p:x} "
            f"while reading {where}",
            n,
        )
    if expected.startswith("Option["):
        detail = f"got {shown}, want d9 ff 00 80 (none) or d9 ff 01 81 (some)"
    else:
        t = SCHEMA[expected]
        if isinstance(t, Struct):
            detail = f"got {shown}, want {_hex(t.head)}"
        elif got[0] != 0xD9 or got[1] != t.tag:
            detail = f"got {shown}, want type tag d9 {t.tag:02x}"
        else:
            ctors = t.ctors if isinstance(t, Inductive) else None
            count = len(ctors) if ctors is not None else len(t.values)
            c = got[2]
            if c >= count:
                detail = f"invalid constructor {c} (0..{count - 1})"
            else:
                want = len(ctors[c].fields) if ctors is not None else 0
                label = ctors[c].name if ctors is not None else t.values[c]
                detail = f"wrong number of elements: {shown} but {expected}.{label} has {want}"
    fail(d, p, expected, where, detail)


# --------------------------------------------------------------------------
# Reading (slow paths)
# --------------------------------------------------------------------------


def _argument(d: bytes, p: int, expected: str, where: str) -> tuple[int, int]:
    """The unsigned argument of the CBOR head at p (any length form)."""
    info = d[p] & 0x1F
    if info < 24:
        return info, p + 1
    size = _ARG_SIZE.get(info)
    if size is None:  # reserved or indefinite length: never written by KLR
        fail(d, p, expected, where, f"unsupported CBOR head byte 0x{d[p]:02x}")
    if p + 1 + size > data_length(d):
        raise format_error(
            f"unexpected end of data inside the {expected} at byte 0x{p:x} while reading {where}",
            p,
        )
    return int.from_bytes(d[p + 1 : p + 1 + size], "big"), p + 1 + size


def _check_major(d: bytes, p: int, major: int, expected: str, where: str) -> None:
    got = d[p] >> 5
    if got != major:
        fail(d, p, expected, where, f"found a CBOR {_MAJOR_NAMES[got]} item")


def read_nat(d: bytes, p: int, where: str) -> tuple[int, int]:
    """Nat: CBOR major 0, any length form (the C++ reader accepts them all)."""
    _check_major(d, p, 0, "Nat", where)
    return _argument(d, p, "Nat", where)


def read_int(d: bytes, p: int, where: str) -> tuple[int, int]:
    """Int: major 0 (v >= 0) or major 1 (v = -1 - argument)."""
    major = d[p] >> 5
    if major == 0:
        return _argument(d, p, "Int", where)
    _check_major(d, p, 1, "Int", where)
    arg, q = _argument(d, p, "Int", where)
    if arg > _INT64_MAX:  # as cbor_decode_int: outside int64
        fail(d, p, "Int", where, "negative value outside the int64 range")
    return -1 - arg, q


def read_str(d: bytes, p: int, where: str) -> tuple[str, int]:
    """String: major 3, length head, UTF-8 bytes."""
    _check_major(d, p, 3, "String", where)
    length, q = _argument(d, p, "String", where)
    if length > MAX_STRING_BYTES:
        fail(d, p, "String", where, f"{length} bytes, more than the KLR reader's {MAX_STRING_BYTES}")
    end = q + length
    if end > data_length(d):
        raise format_error(
            f"unexpected end of data inside the String at byte 0x{p:x} ({length} bytes announced) "
            f"while reading {where}",
            p,
        )
    try:
        return d[q:end].decode("utf-8"), end
    except UnicodeDecodeError as e:
        fail(d, p, "String", where, f"invalid UTF-8 at byte 0x{q + e.start:x}")


def read_list_len(d: bytes, p: int, where: str) -> tuple[int, int]:
    """List: major 4 length head (the items follow, read by the caller)."""
    _check_major(d, p, 4, "List", where)
    count, q = _argument(d, p, "List", where)
    # Every item takes at least one byte: refuse impossible counts up front.
    if count > data_length(d) - q:
        fail(d, p, "List", where, f"{count} items cannot fit in the remaining bytes")
    return count, q


def read_float(d: bytes, p: int, where: str) -> tuple[float, int]:
    """Float: always ``fa`` + big-endian binary32 (half/double are rejected).

    NaNs keep their bits: sign and the 23-bit payload, signalling or quiet,
    become the float64 NaN with that payload in its top bits (the exact
    widening), so :func:`write_float` gives back the same four bytes.  The C
    conversion behind ``struct`` would set the quiet bit instead.
    """
    if d[p] != 0xFA:
        fail(d, p, "Float", where)
    if p + 5 > data_length(d):
        raise format_error(
            f"unexpected end of data inside the Float at byte 0x{p:x} while reading {where}", p
        )
    if d[p + 1] & 0x7F == 0x7F and d[p + 2] & 0x80:  # exponent all ones: infinity or NaN
        bits = int.from_bytes(d[p + 1 : p + 5], "big")
        if bits & 0x7FFFFF:
            wide = (bits >> 31) << 63 | 0x7FF << 52 | (bits & 0x7FFFFF) << 29
            return _F64.unpack(_F64_BITS.pack(wide))[0], p + 5
    return _F32.unpack_from(d, p + 1)[0], p + 5


# --------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------


def cannot_write(value: object, expected: str, where: str) -> None:
    try:
        text = repr(value)
    except RecursionError:  # a deeply nested value: its repr recurses
        text = f"a {type(value).__qualname__} nested too deeply to show"
    if len(text) > 80:
        text = text[:77] + "..."
    raise FormatError(f"cannot write {where}: expecting {expected}, got {text}")


def write_head(out: bytearray, major: int, arg: int) -> None:
    """A CBOR head in the shortest form (what KLR's writers emit)."""
    m = major << 5
    if arg < 24:
        out.append(m | arg)
    elif arg < 0x100:
        out += bytes((m | 24, arg))
    elif arg < 0x10000:
        out.append(m | 25)
        out += arg.to_bytes(2, "big")
    elif arg < 0x100000000:
        out.append(m | 26)
        out += arg.to_bytes(4, "big")
    else:
        out.append(m | 27)
        out += arg.to_bytes(8, "big")


WIDTH_WARNED: set[str] = set()  # the field kinds warned about in the current write (reset by the writer)


class KlrWidthWarning(UserWarning):
    """A value is written that KLR's C++ reader truncates (its Nat is uint32, its Int int32; spec §2.2)."""


def _warn_width(kind: str, v: int, where: str) -> None:
    # every occurrence would flood a large kernel's build: the first per kind and write_klr call (writer.py)
    if kind in WIDTH_WARNED:
        return
    WIDTH_WARNED.add(kind)
    warnings.warn(KlrWidthWarning(f"a KLR {kind} beyond the C++ reader's 32-bit field is written (first: {v} at "
                                  f"{where}); KLR's C++ reader truncates it"), stacklevel=3)


def write_nat(out: bytearray, v: object, where: str) -> None:
    if type(v) is not int or not 0 <= v < 1 << 64:
        cannot_write(v, "Nat (an int in 0 .. 2**64-1)", where)
    if v >= 1 << 32:
        _warn_width("Nat", v, where)
    write_head(out, 0, v)


def write_int(out: bytearray, v: object, where: str) -> None:
    if type(v) is not int or not -(1 << 63) <= v < 1 << 64:
        cannot_write(v, "Int (an int in -2**63 .. 2**64-1)", where)
    if not -(1 << 31) <= v < 1 << 31:
        _warn_width("Int", v, where)
    if v >= 0:
        write_head(out, 0, v)
    else:
        write_head(out, 1, -1 - v)


def write_str(out: bytearray, v: object, where: str) -> None:
    if type(v) is not str:
        cannot_write(v, "String (a str)", where)
    try:
        raw = v.encode("utf-8")
    except UnicodeEncodeError:
        cannot_write(v, "String (encodable as UTF-8)", where)
    if len(raw) > MAX_STRING_BYTES:
        cannot_write(v, f"String of at most {MAX_STRING_BYTES} UTF-8 bytes", where)
    write_head(out, 3, len(raw))
    out += raw


def write_float(out: bytearray, v: object, where: str) -> None:
    """``fa`` + binary32.  The value must be exactly representable, so that
    reading the file back gives the same Python value, bit for bit."""
    if type(v) is not float:
        cannot_write(v, "Float (a float)", where)
    if v != v:  # NaN: narrow by hand, keeping sign and payload (see read_float)
        wide = _F64_BITS.unpack(_F64.pack(v))[0]
        if wide & 0x1FFFFFFF:
            cannot_write(v, "Float exactly representable as binary32 (a NaN payload of at most 23 bits)", where)
        out.append(0xFA)
        out += ((wide >> 63) << 31 | 0x7F800000 | (wide >> 29) & 0x7FFFFF).to_bytes(4, "big")
        return
    try:
        raw = _F32.pack(v)
    except OverflowError:
        cannot_write(v, "Float within the binary32 range", where)
    if _F32.unpack(raw)[0] != v:
        cannot_write(v, "Float exactly representable as binary32", where)
    out.append(0xFA)
    out += raw


def round_to_float32(x: float) -> float:
    """The nearest binary32 value, as a Python float (used by from_json)."""
    return _F32.unpack(_F32.pack(x))[0]
