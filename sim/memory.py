"""Memories, dtypes and addressing for the interpreter (docs/semantics.md).

Every memory is a flat byte array (:class:`Storage`): SBUF and PSUM are
``128 x bytes-per-partition`` laid out partition-major, the shared DRAM space
holds every allocated DRAM memory location, and each unallocated DRAM memory
location has a private buffer.  Operands become :class:`Access` objects that
read and write *bytes*, so two buffers placed on overlapping addresses really
clobber each other.

Addressing (element units of the operand's dtype, ``pitch = pbytes // size``):

* ``e = offset + sum_k i_k * step_k`` over the pattern's box, outermost first;
* SB/PSUM: partition ``base + e // pitch``, byte ``addr + (e % pitch) * size``;
* DRAM: byte ``addr + e * size`` (``addr`` = 0 inside a private buffer).

An affine pattern whose column part never wraps across a partition row (the
"pitch form" the builder and the backend write) is turned into a strided
numpy *view* of the storage: no index arrays, and a read is one copy.  Other
patterns and gathers fall back to an array of byte addresses.

Values: float dtypes compute in float32, integer dtypes in int64.  bfloat16
is stored as uint16 (the upper half of a float32) and rounded to nearest even
on store.  The fp8 dtypes (float8e3/e4/e5, float8_e4m3fn) are stored as their
codes and computed through exact tables (:mod:`sim.minifloat`).  The packed MX
dtypes and the E8M0 scale are raw bytes: copied byte for byte, anything else
raises "dtype X not supported by the interpreter".
"""

from __future__ import annotations

import math
import os

import numpy as np

from tusk.ir.arch import PARTITIONS
from tusk.ir.enums import DTYPE_NAMES, DTYPE_SIZES
from tusk.ir.errors import InputError, PassError, TuskError
from tusk.sim.minifloat import FORMATS

# --------------------------------------------------------------------------- dtypes

FLOAT, BF16, INT, RAW, FP8 = range(5)

_u1, _i1, _u2, _i2, _u4, _i4, _u8, _i8 = (np.dtype(t) for t in ("u1", "i1", "u2", "i2", "u4", "i4", "u8", "i8"))
_f2, _f4 = np.dtype("f2"), np.dtype("f4")

#: numpy storage dtype per BIR dtype ordinal (bf16 as uint16, fp8 family as raw unsigned ints)
NP_DTYPES: tuple[np.dtype, ...] = (
    _u1, _i1, _u2, _u1, _u1, _u1, _u1, _u1, _u4, _u4,   # uint8 int8 fp4x4 fp8e3 fp8e4 e4m3fn e8m0 fp8e5 fp8x4 x4
    _u2, _i2, _u2, _f2, _u4, _i4, _f4, _f4, _u8, _i8,   # uint16 int16 bf16 fp16 uint32 int32 fp32 fp32r uint64 int64
    _u1,                                                 # bool (0/1 in one byte)
)
#: value class per dtype ordinal
DT_CLASS: tuple[int, ...] = (
    INT, INT, RAW, FP8, FP8, FP8, RAW, FP8, RAW, RAW,
    INT, INT, BF16, FLOAT, INT, INT, FLOAT, FLOAT, INT, INT,
    INT,
)
assert len(NP_DTYPES) == len(DT_CLASS) == len(DTYPE_NAMES)


def unsupported(dt: int) -> TuskError:
    return PassError(f"dtype {DTYPE_NAMES[dt]} not supported by the interpreter (only byte-for-byte copies)")


def is_int(dt: int) -> bool:
    return DT_CLASS[dt] == INT


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(x: np.ndarray) -> np.ndarray:
    """Round float32 to bfloat16 bits, to nearest even; NaNs stay (quiet) NaNs."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    b = x.view(np.uint32)
    out = ((b + np.uint32(0x7FFF) + ((b >> 16) & np.uint32(1))) >> 16).astype(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        out[nan] = ((b[nan] >> 16) | np.uint32(0x40)).astype(np.uint16)
    return out


def to_compute(raw: np.ndarray, dt: int) -> np.ndarray:
    """Storage values -> float32 (float dtypes) or int64 (integer dtypes)."""
    c = DT_CLASS[dt]
    if c == FLOAT:
        return raw.astype(np.float32, copy=False)
    if c == INT:
        return raw.astype(np.int64, copy=False)
    if c == BF16:
        return bf16_to_f32(raw)
    if c == FP8:
        return FORMATS[DTYPE_NAMES[dt]].decode(raw)
    raise unsupported(dt)


def _int_limits(npdt: np.dtype) -> tuple[float, float]:
    info = np.iinfo(npdt)
    # float64 cannot hold 2**63 - 1 exactly: clip to the largest double below it.
    hi = float(info.max) if info.bits < 64 else float(np.nextafter(np.float64(info.max), 0))
    return float(info.min), hi


def from_compute(vals: np.ndarray, dt: int) -> np.ndarray:
    """Computed values -> storage dtype of ``dt``.

    float -> int rounds half to even, saturates, and maps NaN to 0;
    int -> int wraps (two's complement); anything -> bfloat16 goes through
    float32 and rounds to nearest even.
    """
    c = DT_CLASS[dt]
    npdt = NP_DTYPES[dt]
    vals = np.asarray(vals)
    if c == INT:
        if vals.dtype.kind == "f":
            lo, hi = _int_limits(npdt)
            v = np.rint(vals.astype(np.float64))
            v = np.where(np.isnan(v), 0.0, np.clip(v, lo, hi))
            return v.astype(npdt)
        return vals.astype(npdt)
    if c == FLOAT:
        return vals.astype(npdt)
    if c == BF16:
        return f32_to_bf16(vals.astype(np.float32, copy=False))
    if c == FP8:
        return FORMATS[DTYPE_NAMES[dt]].encode(vals).reshape(vals.shape)
    raise unsupported(dt)


# --------------------------------------------------------------------------- storages


SMALL_BYTES = 1 << 30  # a request below this is never checked against the free memory (no /proc read per tensor)


def free_memory() -> int:
    """Bytes of RAM the interpreter may fill: what the system has available now (Linux), else all of it.  A
    memory it is asked to hold beyond that is refused, not left to the kernel's out-of-memory killer."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return 1 << 40


class Storage:
    """One memory: a flat byte array plus (strict mode) a per-byte written mask."""

    __slots__ = ("name", "data", "written", "_typed")

    def __init__(self, name: str, nbytes: int, *, strict: bool = False, rng: np.random.Generator | None = None):
        n = max(8, -(-int(nbytes) // 8) * 8)  # a multiple of 8 so that every dtype view fits
        self.name = name
        too_big = (f"{name} needs {n:,} bytes, more than this machine has free: the interpreter cannot hold it "
                   f"(a size or an address out of range?)")
        need = n * (2 if strict else 1)
        if need > SMALL_BYTES and need > free_memory():
            raise InputError(too_big)
        try:
            if rng is None:
                self.data = np.zeros(n, dtype=np.uint8)
            else:
                self.data = rng.integers(0, 256, size=n, dtype=np.uint8)
            self.written = np.zeros(n, dtype=bool) if strict else None
        except MemoryError:
            raise InputError(too_big) from None
        self._typed: dict[np.dtype, np.ndarray] = {}

    def __len__(self) -> int:
        return len(self.data)

    def typed(self, npdt: np.dtype) -> np.ndarray:
        v = self._typed.get(npdt)
        if v is None:
            v = self._typed[npdt] = self.data.view(npdt)
        return v

    def put(self, byte: int, raw: np.ndarray) -> None:
        """Write raw bytes at ``byte`` (inputs) and mark them written."""
        b = np.ascontiguousarray(raw).reshape(-1).view(np.uint8)
        if byte < 0 or byte + len(b) > len(self.data):
            raise InputError(f"{self.name}: {len(b)} bytes at {byte} do not fit")
        self.data[byte:byte + len(b)] = b
        if self.written is not None:
            self.written[byte:byte + len(b)] = True

    def get(self, byte: int, nbytes: int) -> np.ndarray:
        return self.data[byte:byte + nbytes].copy()


class Loc:
    """Where a memory location lives in a frame: its storage and placement.

    ``partitioned`` (SB/PSUM): element rows of ``pbytes`` start at byte
    ``addr`` of partitions ``base, base+1, ...`` of a storage whose partitions
    are ``pstride`` bytes apart.  Otherwise (DRAM) the location is linear
    from byte ``addr`` of its storage.
    """

    __slots__ = ("name", "storage", "partitioned", "addr", "pstride", "base", "pbytes")

    def __init__(self, name: str, storage: Storage, partitioned: bool, addr: int, pbytes: int,
                 pstride: int = 0, base: int = 0):
        self.name, self.storage, self.partitioned = name, storage, partitioned
        self.addr, self.pbytes, self.pstride, self.base = int(addr), int(pbytes), int(pstride), int(base)


# --------------------------------------------------------------------------- accesses


class Access:
    """The elements one operand touches: a strided view, or byte addresses (gathers)."""

    __slots__ = ("loc", "npdt", "size", "shape", "count", "view", "start", "strides", "addr", "_idx")

    def __init__(self, loc: Loc, npdt: np.dtype, shape: tuple[int, ...], *, view: np.ndarray | None = None,
                 start: int = 0, strides: tuple[int, ...] = (), addr: np.ndarray | None = None):
        self.loc, self.npdt, self.size, self.shape = loc, npdt, npdt.itemsize, shape
        self.count = math.prod(shape)
        self.view, self.start, self.strides, self.addr = view, start, strides, addr
        self._idx = None
        if addr is not None and self.size > 1 and not (addr % self.size).any():
            self._idx = addr // self.size

    def read(self) -> np.ndarray:
        """A copy of the elements, in the storage dtype, shaped like the pattern."""
        if self.view is not None:
            return np.array(self.view)
        st = self.loc.storage
        if self.size == 1:
            return st.data[self.addr].view(self.npdt)
        if self._idx is not None:
            return st.typed(self.npdt)[self._idx]
        raw = st.data[self.addr[..., None] + np.arange(self.size)]
        return raw.view(self.npdt).reshape(self.shape)

    def write(self, vals: np.ndarray) -> None:
        """Store ``vals`` (storage dtype, ``count`` elements in iteration order)."""
        if vals.dtype != self.npdt:
            vals = vals.astype(self.npdt)
        if vals.size != self.count:
            raise InputError(f"writes {vals.size} elements into an access pattern of {self.count} elements "
                            f"(memory location {self.loc.name})")
        if self.view is not None:
            self.view[...] = vals.reshape(self.shape)
            return
        st = self.loc.storage
        vals = vals.reshape(self.shape)
        if self.size == 1:
            st.data[self.addr] = vals.view(np.uint8)
        elif self._idx is not None:
            st.typed(self.npdt)[self._idx] = vals
        else:
            st.data[self.addr[..., None] + np.arange(self.size)] = \
                np.ascontiguousarray(vals).view(np.uint8).reshape(self.shape + (self.size,))

    # ------------------------------------------------------------ strict mode
    def _mask_index(self):
        st = self.loc.storage
        if self.view is not None:
            return np.ndarray(self.shape + (self.size,), dtype=bool, buffer=st.written, offset=self.start,
                              strides=self.strides + (1,)), None
        return None, self.addr[..., None] + np.arange(self.size)

    def all_written(self) -> bool:
        st = self.loc.storage
        if st.written is None or self.count == 0:
            return True
        mask, idx = self._mask_index()
        return bool(mask.all()) if mask is not None else bool(st.written[idx].all())

    def mark_written(self) -> None:
        st = self.loc.storage
        if st.written is None or self.count == 0:
            return
        mask, idx = self._mask_index()
        if mask is not None:
            mask[...] = True
        else:
            st.written[idx] = True


def make_access(loc: Loc, dt: int, offset: int, pattern, gather: tuple[int, np.ndarray] | None = None) -> Access:
    """The access of ``pattern`` at element ``offset`` of ``loc`` for dtype ``dt``.

    ``gather = (dim, index)`` replaces ``i_dim * step_dim`` by
    ``index[i_dim] * step_dim`` (docs/semantics.md, dynamic info).
    """
    npdt = NP_DTYPES[dt]
    size = DTYPE_SIZES[dt]
    shape = tuple(int(n) for _, n in pattern)
    steps = tuple(int(s) for s, _ in pattern)
    offset = int(offset)
    if gather is None:
        acc = _affine(loc, npdt, size, offset, shape, steps)
        if acc is not None:
            return acc
    return _indexed(loc, npdt, size, offset, shape, steps, gather)


def range_of(steps, shape) -> tuple[int, int]:
    lo = hi = 0
    for s, n in zip(steps, shape):
        ext = s * (n - 1)
        if ext < 0:
            lo += ext
        else:
            hi += ext
    return lo, hi


def _outside(loc: Loc, what: str) -> TuskError:
    return InputError(f"access pattern reaches {what} outside memory location {loc.name}'s memory "
                     f"({loc.storage.name})")


def _affine(loc: Loc, npdt, size, offset, shape, steps) -> Access | None:
    st = loc.storage
    empty = any(n == 0 for n in shape)
    if not loc.partitioned:
        start = loc.addr + offset * size
        strides = tuple(s * size for s in steps)
        if not empty:
            lo, hi = range_of(strides, shape)
            if start + lo < 0 or start + hi + size > len(st.data):
                raise _outside(loc, f"bytes [{start + lo}, {start + hi + size})")
        else:
            start = 0
        view = np.ndarray(shape, dtype=npdt, buffer=st.data, offset=start, strides=strides)
        return Access(loc, npdt, shape, view=view, start=start, strides=strides)
    pitch = loc.pbytes // size
    if pitch <= 0:
        raise InputError(f"memory location {loc.name} rows ({loc.pbytes} bytes) hold no element of {size} bytes")
    q0, r0 = divmod(offset, pitch)
    strides = []
    plo = phi = clo = chi = 0
    for s, n in zip(steps, shape):
        if s % pitch == 0:
            k = s // pitch
            strides.append(k * loc.pstride)
            ext = k * (n - 1)
            if ext < 0:
                plo += ext
            else:
                phi += ext
        else:
            strides.append(s * size)
            ext = s * (n - 1)
            if ext < 0:
                clo += ext
            else:
                chi += ext
    if not empty and (r0 + clo < 0 or r0 + chi >= pitch):
        return None  # the column part wraps across partition rows: not a strided view
    part0 = loc.base + q0
    start = part0 * loc.pstride + loc.addr + r0 * size
    if empty:
        start = 0
    else:
        if part0 + plo < 0 or part0 + phi >= PARTITIONS:
            raise _outside(loc, f"partitions [{part0 + plo}, {part0 + phi}]")
        b_lo, b_hi = loc.addr + (r0 + clo) * size, loc.addr + (r0 + chi + 1) * size
        if b_lo < 0 or b_hi > loc.pstride:
            raise _outside(loc, f"bytes [{b_lo}, {b_hi}) of a partition")
    strides_t = tuple(strides)
    view = np.ndarray(shape, dtype=npdt, buffer=st.data, offset=start, strides=strides_t)
    return Access(loc, npdt, shape, view=view, start=start, strides=strides_t)


def element_indices(offset: int, shape, steps, gather=None) -> np.ndarray:
    """``offset + sum_k i_k * step_k`` over the box (int64, shaped like the pattern)."""
    e = np.full(shape, offset, dtype=np.int64) if shape else np.array(offset, dtype=np.int64)
    nd = len(shape)
    for k, (s, n) in enumerate(zip(steps, shape)):
        axis_shape = [1] * nd
        axis_shape[k] = n
        if gather is not None and gather[0] == k:
            idx = np.asarray(gather[1], dtype=np.int64).reshape(-1)
            if idx.size != n:
                raise InputError(f"gather index has {idx.size} elements but the indirect dimension has {n}")
            e = e + (idx * s).reshape(axis_shape)
        else:
            e = e + (np.arange(n, dtype=np.int64) * s).reshape(axis_shape)
    return e


def _indexed(loc: Loc, npdt, size, offset, shape, steps, gather) -> Access:
    if gather is not None and not 0 <= gather[0] < len(shape):
        raise InputError(f"indirect dimension {gather[0]} outside a {len(shape)}-dimensional access pattern")
    e = element_indices(offset, shape, steps, gather)
    st = loc.storage
    if not loc.partitioned:
        addr = loc.addr + e * size
        if addr.size and (addr.min() < 0 or addr.max() + size > len(st.data)):
            raise _outside(loc, f"bytes [{addr.min()}, {addr.max() + size})")
        return Access(loc, npdt, shape, addr=addr)
    pitch = loc.pbytes // size
    if pitch <= 0:
        raise InputError(f"memory location {loc.name} rows ({loc.pbytes} bytes) hold no element of {size} bytes")
    part = loc.base + e // pitch
    col = e % pitch
    if part.size and (part.min() < 0 or part.max() >= PARTITIONS):
        raise _outside(loc, f"partitions [{part.min()}, {part.max()}]")
    byte = loc.addr + col * size
    if byte.size and (byte.min() < 0 or byte.max() + size > loc.pstride):
        raise _outside(loc, f"bytes [{byte.min()}, {byte.max() + size}) of a partition")
    return Access(loc, npdt, shape, addr=part * loc.pstride + byte)
