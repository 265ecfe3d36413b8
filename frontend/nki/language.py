"""``nki.language`` (``nl``) as Tusk traces it.  The supported API is in docs/frontend.md.

Every call records KLR-shaped operations on the current trace; results are
tiles (views of fresh SBUF/PSUM tensors) that the placer gives addresses
after tracing.  Calls outside this module's API are refused by name (see
``__getattr__``) with the kernel's file:line.
"""

from __future__ import annotations

import builtins  # sum, max, min and abs are NKI names in this module
import inspect
import linecache
import math
import re
from typing import Any

import numpy as np

from tusk.frontend.affine import Affine, IndexGrid, IndexVector, LoopVar, Mask, MGrid, loop_index
from tusk.frontend.errors import TraceError, current_user_line, missing_attribute, unsupported
from tusk.frontend.tensors import PARTITIONS, Dtype, ParDim, Tensor, View, as_dtype
from tusk.frontend.tracer import CEILING, Op, WatchedRange, as_shape, current, too_many, trips
from tusk.ir.arch import get_arch as _get_arch

# ---------------------------------------------------------------------------- dtypes and buffers
float32, bfloat16, float16 = Dtype("float32"), Dtype("bfloat16"), Dtype("float16")
int32, int16, int8 = Dtype("int32"), Dtype("int16"), Dtype("int8")
uint32, uint16, uint8 = Dtype("uint32"), Dtype("uint16"), Dtype("uint8")
# NKI 0.7.0: 64-bit integers, for tensors DMAs move and for nisa.scalar_load (compute instructions take none)
int64, uint64 = Dtype("int64"), Dtype("uint64")
tfloat32 = float32
float8_e4m3, float8_e5m2 = Dtype("float8_e4m3"), Dtype("float8e5")  # KLR's names (float8e5: E5M2)
float8_e4m3fn = Dtype("float8_e4m3fn")
# packed MX types (nisa.quantize_mx / nc_matmul_mx).  KLR has no E8M0 dtype: an MX scale is its byte, uint8
float8_e5m2_x4, float8_e4m3fn_x4 = Dtype("float8_e5m2_x4"), Dtype("float8_e4m3fn_x4")
float4_e2m1fn_x4, float8_e8m0fnu = Dtype("float4_e2m1fn_x4"), uint8
bool_ = uint8
bool = bool_
tensor = NkiTensor = Tensor  # type annotations (``x: nl.tensor``)
dtype = Dtype


class NKIObjectType(type):
    """NKI configuration classes declare fields as plain class attributes (``section_idx = None``) under
    ``@dataclass``, which makes them no fields; NKI still takes them as keywords: set them after ``__init__``."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        fields = getattr(cls, "__dataclass_fields__", None)
        declared = {} if fields is None else {k: kwargs.pop(k) for k in list(kwargs)
                                               if k not in fields and hasattr(cls, k)}
        obj = super().__call__(*args, **kwargs)
        for k, v in declared.items():
            setattr(obj, k, v)
        return obj


class NKIObject(metaclass=NKIObjectType):
    """The base of NKI 2.x kernel configuration classes (usually dataclasses)."""

    def __init__(self, **kwargs: Any) -> None:
        for k, v in kwargs.items():
            setattr(self, k, v)

class _Buffer(str):
    """A memory's name (``buffer=nl.sbuf``): a string, as the tracer compares them, that says what it is when a
    kernel asks it for more (``nl.sbuf.view(...)`` is not an NKI call)."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise unsupported(f"nl.{self}.{name} (nl.{self} names a memory: nl.ndarray(shape, dtype, buffer=nl.{self}) "
                          f"makes a tensor in it)")


sbuf, psum, hbm, shared_hbm = _Buffer("sbuf"), _Buffer("psum"), _Buffer("hbm"), _Buffer("shared_hbm")
private_hbm = hbm
_BUFFERS = {"sbuf": "sbuf", "psum": "psum", "hbm": "hbm", "shared_hbm": "shared_hbm", "private_hbm": "hbm"}


class _TileSizes(type):
    """``nl.tile_size.NAME``: the SBUF sizes of the architecture the trace targets (``tusk trace --arch``), read
    when asked (fixed at import, they stayed gen3's for core_v4); a constant Tusk lacks is refused by name
    (still an AttributeError, for hasattr)."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        if name in _SBUF_SIZES:
            from tusk.frontend.nki.isa_signature import _TARGET

            return _SBUF_SIZES[name](_get_arch(_TARGET[-1] if _TARGET else None))
        raise missing_attribute("nl.tile_size", name)


def _usable_sbuf(a: Any) -> int:
    """SBUF bytes per partition a kernel may use (gen3: 224 KiB less the reserved tail)."""
    return a.sb_bytes_per_partition - a.sb_reserved


_SBUF_SIZES = {
    "total_available_sbuf_size": _usable_sbuf,
    "sbuf_fmax_bytes": _usable_sbuf,
    "sbuf_fmax": lambda a: _usable_sbuf(a) // 4,
    # the whole SBUF, every partition (NKI's "total SBUF capacity")
    "sbuf_size_bytes": lambda a: PARTITIONS * a.sb_bytes_per_partition,
}


class tile_size(metaclass=_TileSizes):
    pmax = 128
    psum_pmax = 128
    gemm_stationary_fmax = 128
    gemm_moving_fmax = 512
    psum_fmax = 512
    psum_bank_fmax = 512
    psum_bank_fmax_bytes = 2048
    psum_num_banks = 8
    bn_stats_fmax = 512
    # byte alignment of a tile's start along the free axis (KLR's tracer: 4 in PSUM, 1 in SBUF)
    psum_min_align = 4
    sbuf_min_align = 1


def par_dim(n: int) -> ParDim:
    return ParDim(int(n))


mgrid = MGrid()


def arange(start: int, stop: int | None = None, step: int = 1) -> IndexVector:
    if stop is None:
        start, stop = 0, start
    n = len(range(int(start), int(stop), int(step)))
    return IndexVector(n, offset=int(start), step=int(step))


# ---------------------------------------------------------------------------- loops
class _Range:
    def __init__(self, kind: str, args: tuple):
        if not 1 <= len(args) <= 3:
            raise unsupported(f"nl.{kind} with {len(args)} arguments")
        from tusk.frontend.nki.runtime_loop import register_bound
        self.reg = register_bound(kind, args) if kind in ("dynamic_range", "fori_loop") else None
        if self.reg is not None:  # a trip count read at run time: frontend/nki/runtime_loop.py
            self.kind, self.r, self.n = kind, range(0), -1
            return
        try:
            r = range(*[int(Affine.of(a)) for a in args])
        except (TraceError, TypeError, ValueError):
            raise unsupported(f"nl.{kind} bounds that are not Python ints ({args!r})") from None
        n = trips(r)
        if n >= CEILING:  # every iteration runs the body: at least one instruction each once unrolled
            raise too_many(n, f"the iterations of an nl.{kind} loop")
        self.kind, self.r, self.n = kind, r, n

    def __len__(self) -> int:
        if self.reg is not None:
            raise unsupported(f"len() of an nl.{self.kind} loop bounded by a register")
        return self.n

    def __iter__(self):
        if self.reg is not None:
            from tusk.frontend.nki.runtime_loop import iterate
            yield from iterate(self.kind, self.reg)
            return
        r, n = self.r, self.n
        if n <= 1:  # nothing to loop over: a static body (or none)
            yield from r
            return
        tr = current()
        ordinal = tr.loop_ordinal
        tr.loop_ordinal += 1
        keep = 0 if tr.unroll_all else tr.peel.get(ordinal, n)
        done = False
        try:
            if keep > 1:
                var = LoopVar(self.kind, r.start, r.step, keep, len(tr.loops), ordinal)
                with tr.loop(var):
                    yield loop_index(var)
            # iterations a mask cuts short: traced one by one (see PeelLoop)
            yield from r[keep if keep > 1 else 0:]
            done = True
        finally:
            if not done and tr.broken_loop is None:
                # closed early: a `break` or `return` in the body (or an exception passing through it); the
                # kernel's line now is that statement (checked once the kernel returns: trace.py)
                tr.broken_loop = current_user_line() or ("", 0)


_RANGE_PARAMS = ("start", "stop", "step")


def _range_args(kind: str, args: tuple, kw: dict[str, Any]) -> tuple:
    """The bounds of ``nl.KIND(start, stop=None, step=1)`` (NKI's documented parameters), given by position or
    by keyword, as the arguments of Python's ``range``.  ``kw`` keeps the other keywords."""
    if len(args) > 3:
        raise unsupported(f"nl.{kind} with {len(args)} arguments (start, stop=None, step=1)")
    given = dict(zip(_RANGE_PARAMS, args))
    for name in _RANGE_PARAMS:
        if name in kw:
            if name in given:
                raise unsupported(f"nl.{kind}: {name} given twice, by position and by keyword")
            given[name] = kw.pop(name)
    if not given:
        return ()
    if "start" not in given:
        if "stop" not in given:
            raise unsupported(f"nl.{kind} without start or stop (start, stop=None, step=1)")
        given["start"] = 0  # nl.affine_range(stop=4): from 0, as range(4)
    start, stop, step = given["start"], given.get("stop"), given.get("step", 1)
    if stop is None:  # start is the stop, as in range(n)
        return (start,) if "step" not in given else (0, start, step)
    return (start, stop) if "step" not in given else (start, stop, step)


def affine_range(*args: Any, **kw: Any) -> _Range:
    return _Range("affine_range", _range_args("affine_range", args, kw))


def sequential_range(*args: Any, **kw: Any) -> _Range:
    return _Range("sequential_range", _range_args("sequential_range", args, kw))


def static_range(*args: Any, **kw: Any) -> Any:
    args = _range_args("static_range", args, kw)
    if not args:
        raise unsupported("nl.static_range with 0 arguments")
    r = range(*[int(Affine.of(a)) for a in args])
    return WatchedRange(r, f"nl.static_range({', '.join(map(str, args))})")


# the documented signature, for help() and the API table (the functions take it by position or by keyword)
_P = inspect.Parameter
_RANGE_SIGNATURE: inspect.Signature = inspect.Signature([
    _P("start", _P.POSITIONAL_OR_KEYWORD), _P("stop", _P.POSITIONAL_OR_KEYWORD, default=None),
    _P("step", _P.POSITIONAL_OR_KEYWORD, default=1)])
for _fn in (affine_range, sequential_range, static_range):
    _fn.__signature__ = _RANGE_SIGNATURE  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------- SPMD
def program_id(axis: int = 0) -> int:
    tr = current()
    if not 0 <= axis < len(tr.program_ids):
        if not tr.program_ids and axis == 0:
            return 0
        raise unsupported(f"nl.program_id({axis}) in a launch grid of {len(tr.grid)} axes")
    return tr.program_ids[axis]


def num_programs(axes: int | None = 0) -> int:
    tr = current()
    if axes is None:
        return math.prod(tr.grid) if tr.grid else 1
    if not tr.grid:
        return 1
    return tr.grid[axes]


def program_ndim() -> int:
    return len(current().grid)


# ---------------------------------------------------------------------------- helpers
# keywords NKI 1.x takes on every call and Tusk has no use for (a debug name)
_IGNORED_KEYWORDS = frozenset({"name"})


def _no_keywords(what: str, kw: dict[str, Any]) -> None:
    """An unknown keyword argument is the kernel's mistake: name it, never swallow it."""
    unknown = sorted(set(kw) - _IGNORED_KEYWORDS)
    if unknown:
        raise unsupported(f"{what}(..., {', '.join(k + '=' for k in unknown)}) (no such keyword argument)")


def _needs_back_half(kind: str, what: str) -> None:
    """Refuse a call whose KLR operator the emitter cannot write yet (rather than emit something else)."""
    from tusk.frontend.emit import Emitter
    if not hasattr(Emitter, "op_" + kind):
        raise unsupported(f"{what} (its KLR operator, {kind}, has no writer in this build)")


def _broadcast_operand(x: Any, shape: tuple[int, ...], what: str) -> View:
    """A number or a tile as a tile of ``shape`` (numbers are memset, tiles broadcast as nl.broadcast_to)."""
    if _is_number(x):
        t = current().tile(shape, float32)
        _memset(t, x)
        return t
    v = _tile(x, what)
    return v if v.shape == shape else _broadcast_to(v, shape)


def _tile(x: Any, what: str) -> View:
    if isinstance(x, Tensor):
        x = x.view()
    if isinstance(x, (IndexVector, IndexGrid)):
        raise unsupported(f"{what} of an nl.arange index expression (NKI documents nl.arange for indexing only; "
                          "make it a tile first: nisa.iota(expr, dtype=nl.int32))")
    if not isinstance(x, View):
        raise unsupported(f"{what}: expected a tile, got {type(x).__name__}")
    if not x.tensor.on_chip:
        raise unsupported(f"{what} of HBM tensor {x.tensor.name} (load it into SBUF with nl.load first)")
    if getattr(x, "scalar", None) is not None:  # an SBUF access moved at run time (ap(scalar_offset=...))
        from tusk.frontend import scalar_offset
        return scalar_offset.staged(x)
    return x


def _hbm(x: Any, what: str) -> View:
    if isinstance(x, Tensor):
        x = x._user_view()
    if not isinstance(x, View) or x.tensor.on_chip:
        raise unsupported(f"{what}: expected an HBM tensor, got {x!r}")
    return x


def _as_number(x: Any) -> Any:
    """A loop index (or an expression of loop indices) as an operand is a number: an immediate is static, so
    its loops unroll (``vals + i * 8`` in an nl.affine_range: a re-trace, as a peel); anything else as it is."""
    return x._unrolled() if isinstance(x, Affine) else x


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, builtins.bool)


def always(mask: Any) -> builtins.bool:
    """A mask that is a predicate of static indices found true (``mask=(2 * i + g) * 128 < n``): every element."""
    return isinstance(mask, (builtins.bool, np.bool_)) and builtins.bool(mask)


def _masked(views: list[View], mask: Any, columns: tuple[Any, ...] = ()) -> list[Any]:
    """``views`` narrowed by ``mask``, then ``columns``: per-partition operands of the same call (a bias, a
    scale, a [P, 1] operand; numbers and None pass as they are).  NKI's mask predicates every operand of the
    instruction, so a column with the views' partitions keeps the partitions the mask keeps, in step with
    them (the same first partition and count); any other column is left to the call's own shape check."""
    if mask is None or always(mask):
        return views + list(columns)
    if isinstance(mask, (builtins.bool, np.bool_)):
        # a predicate of static indices found false (``mask=j + 1 < n`` in the last iteration): in NKI the
        # instruction then writes no element; here it keeps no row, and no instruction is emitted
        mask = Mask.NOTHING
    if not isinstance(mask, Mask):
        raise unsupported(f"mask={mask!r} (masks compare nl.arange indices with ints, joined with &)")
    # a view of several aranges on one grid axis maps the mask's axes to its dims; a tile shaped after it (the
    # load's destination) is cut the same way
    shaped = {v.ndim: mask.window_for(v) for v in views if v.grid_axes is not None}
    out = [v.windowed(*(mask.window_for(v) if v.grid_axes is not None or v.ndim not in shaped else shaped[v.ndim]))
           for v in views]
    tr = current()
    tr.row_pieces, tr.piece_writes = {}, (0, set())  # a new masked call: an earlier split is behind it
    # the columns cut alike: those with the views' partitions, by the mask's window on the partition axis
    columns = tuple(c.view() if isinstance(c, Tensor) else c for c in columns)
    cols = [c for c in columns if isinstance(c, View) and c.tensor.on_chip and c.shape[0] == views[0].shape[0]]
    rows = mask.partitions() if cols else mask
    cut = {id(c): c.windowed(*rows.window(c.ndim)) for c in cols}
    for v, full, by in (*zip(views, out, [mask] * len(views)), *((c, cut[id(c)], rows) for c in cols)):
        piece = by.row_piece(v.ndim)
        if piece is not None:  # the next instruction on these views runs a second time, on the cut row
            axis, row, counts = piece
            tr.row_pieces[id(full)] = v.row_window(axis, row).narrowed(counts)
    return out + [cut.get(id(c), c) for c in columns]


def _whole_tiles(call: str, mask: Any, views: list[View], why: str) -> builtins.bool:
    """For an instruction Tusk runs on whole tiles: True to emit it (no mask, or one that keeps every element of
    ``views``), False when the mask keeps no element (the call does nothing; the caller returns its result
    unwritten, :meth:`~tusk.frontend.tracer.Tracer.unwritten`); any other mask is refused."""
    if mask is None or always(mask):
        return True
    if isinstance(mask, (builtins.bool, np.bool_)):
        return False
    if isinstance(mask, Mask) and mask.row is None:
        try:
            kept = [v.narrowed(mask.counts(v.ndim)) for v in views]
        except TraceError:
            kept = None
        if kept is not None and builtins.all(k.elements == v.elements for k, v in zip(kept, views)):
            return True
        if kept is not None and builtins.all(k.elements == 0 for k in kept):
            return False
    from tusk.frontend.nki.isa_ops import refuse

    raise refuse(call, "mask", mask, why)


def _out_dtype(dtype: Any, *xs: Any) -> Dtype:
    if dtype is not None:
        return as_dtype(dtype)
    for x in xs:
        if isinstance(x, (View, Tensor)):
            return x.dtype
    return float32


def _column(v: View, rows: int) -> bool:
    """One value per partition: shape (P,), (P, 1), (P, 1, 1) ..."""
    return v.shape[0] == rows and builtins.all(n == 1 for n in v.shape[1:])


def _as_column(v: View) -> View:
    """A per-partition column as a (P, 1) access."""
    return v.with_dims(((v.dims[0]), (1, 1))) if v.ndim == 1 else v


# ---------------------------------------------------------------------------- memory
def ndarray(shape: Any, dtype: Any = float32, buffer: Any = None, name: str = "", address: Any = None,
            **kw: Any) -> Tensor:
    """``address=`` (NKI 2.x placement) is ignored: Tusk places every tile itself."""
    _no_keywords("nl.ndarray", kw)
    as_shape(shape)
    shape = tuple(shape)
    mem = _BUFFERS.get(str(buffer) if buffer is not None else "sbuf")
    if mem is None:
        raise unsupported(f"buffer={buffer!r} (use nl.sbuf, nl.psum, nl.hbm or nl.shared_hbm)")
    par = [k for k, d in enumerate(shape) if isinstance(d, ParDim)]
    if len(par) > 1:
        raise unsupported("more than one nl.par_dim in a shape")
    par_axis = par[0] if par else 0
    if mem not in ("sbuf", "psum"):
        par_axis = 0  # HBM has no partitions: nl.par_dim there is just its size, as in NKI
    tr = current()
    t = tr.new_tensor(shape, as_dtype(dtype), mem, name or _assigned_name(), par_axis=par_axis)
    from tusk.frontend.nki.compiler import Allocated
    if address is not None or isinstance(buffer, Allocated) and buffer.placed:
        tr.directly_allocated.add(id(t))  # the kernel placed it: never kept in HBM instead (alloc_spill)
    return t


_ASSIGNED = re.compile(r"^\s*([A-Za-z_][A-Za-z_0-9]*)\s*(?::[^=]*)?=[^=]")


def _assigned_name() -> str:
    """``c_output = nl.ndarray(...)`` names the tensor ``c_output`` (KLR names tensors after variables)."""
    where = current_user_line()
    if where is None:
        return ""
    linecache.checkcache(where[0])  # a file of the same name traced before (a rewritten k.py) is read again
    m = _ASSIGNED.match(linecache.getline(where[0], where[1]))
    return m.group(1) if m else ""


def full(shape: Any, fill_value: Any, dtype: Any = float32, buffer: Any = None, name: str = "", **kw: Any) -> Tensor:
    _fill_keywords("nl.full", kw)
    t = ndarray(shape, dtype, buffer, name)
    if t.on_chip:
        _memset(t.view(), fill_value)
    else:
        _fill_hbm(t, fill_value)
    return t


HBM_FILL_ROW = 2048  # elements per partition of the SBUF tile an HBM fill is copied from (8 KiB of float32)


def _fill_hbm(t: Tensor, value: Any) -> None:
    """``nl.zeros(..., buffer=nl.shared_hbm)``: one SBUF tile of the value, copied over the tensor's elements in
    row-major order by DMAs of up to [128, HBM_FILL_ROW] elements (the layout of a fill does not matter)."""
    tr = current()
    total = math.prod(t.shape)
    row = builtins.min(HBM_FILL_ROW, -(-total // PARTITIONS))
    tile = tr.tile((builtins.min(PARTITIONS, -(-total // row)), row), t.dtype)
    _memset(tile, value)
    at = 0
    while at < total:
        rows = builtins.min(PARTITIONS, (total - at) // row)
        if rows:
            dst = View(t, Affine(at), ((row, rows), (1, row)))
            src = tile[0:rows, :]
            at += rows * row
        else:  # the last part-row
            dst = View(t, Affine(at), ((total - at, 1), (1, total - at)))
            src = tile[0:1, 0:total - at]
            at = total
        tr.op("dma", (src,), (dst,), dst=dst, src=src)


def _fill_keywords(what: str, kw: dict[str, Any]) -> None:
    """``lazy_initialization=`` says when the fill runs, not what it writes: the values are the same."""
    lazy = kw.pop("lazy_initialization", False)
    if not isinstance(lazy, (builtins.bool, np.bool_)):
        raise unsupported(f"{what}(..., lazy_initialization={lazy!r}) (True or False)")
    _no_keywords(what, kw)


def zeros(shape: Any, dtype: Any = float32, buffer: Any = None, name: str = "", **kw: Any) -> Tensor:
    _fill_keywords("nl.zeros", kw)
    return full(shape, 0, dtype, buffer, name)


def ones(shape: Any, dtype: Any = float32, buffer: Any = None, name: str = "", **kw: Any) -> Tensor:
    _fill_keywords("nl.ones", kw)
    return full(shape, 1, dtype, buffer, name)


def zeros_like(x: Any, dtype: Any = None, buffer: Any = None, name: str = "", **kw: Any) -> Tensor:
    _no_keywords("nl.zeros_like", kw)
    if not isinstance(x, (View, Tensor)):
        raise unsupported(f"nl.zeros_like of {type(x).__name__} (a tensor or tile)")
    return full(x.shape, 0, dtype or x.dtype, buffer, name)


def _memset(dst: View, value: Any) -> None:
    if isinstance(value, Affine):
        value = value._unrolled()  # a loop index as the value: its loop unrolls (a re-trace), as NKI 2.x runs it
    if not _is_number(value):
        raise unsupported(f"filling a tile with {value!r}")
    if "float" not in dst.dtype and not math.isfinite(float(value)):
        raise unsupported(f"filling an {dst.dtype} tile with {value!r}")
    current().op("memset", (), (dst,), dst=dst, value=float(value) if "float" in dst.dtype else int(value))


def load(src: Any, dtype: Any = None, mask: Any = None, **kw: Any) -> View:
    _no_keywords("nl.load", kw)
    if isinstance(src, View) and getattr(src.tensor, "shared_constant", False) and mask is None:
        # 1.x's nl.shared_identity_matrix is an HBM constant kernels nl.load; Tusk builds it on chip: a copy
        return copy(src, dtype=dtype)
    src = _hbm(src, "nl.load")
    tr = current()
    if src.shape[0] > PARTITIONS:
        raise unsupported(f"nl.load of a tile with {src.shape[0]} partitions (at most {PARTITIONS})")
    dst = tr.tile(src.shape if src.ndim > 1 else (src.shape[0], 1), src.dtype)
    if src.ndim == 1:
        src = src.with_dims((src.dims[0], (1, 1)))
    d, s = _masked([dst, src], mask)
    tr.op("dma", (s,), (d,), dst=d, src=s)
    if dtype is not None and as_dtype(dtype) != src.dtype:
        return copy(dst, dtype=dtype)
    return dst


def store(dst: Any, value: Any, mask: Any = None, **kw: Any) -> None:
    _no_keywords("nl.store", kw)
    dst = _hbm(dst, "nl.store")
    tr = current()
    if _is_number(value):
        t = tr.tile(dst.shape, dst.dtype)
        _memset(t, value)
        value = t
    src = _tile(value, "nl.store value")
    if src.elements != dst.elements and mask is None:
        raise unsupported(f"nl.store of a {list(src.shape)} tile into a {list(dst.shape)} tensor view")
    if src.dtype != dst.dtype:
        src = copy(src, dtype=dst.dtype)
    if dst.ndim == 1 and src.ndim == 2:
        dst = dst.with_dims((dst.dims[0], (1, 1)))
    d, s = _masked([dst, src], mask)
    tr.op("dma", (s,), (d,), dst=d, src=s)


def copy(x: Any, dtype: Any = None, mask: Any = None, **kw: Any) -> View:
    _no_keywords("nl.copy", kw)
    src = _tile(x, "nl.copy")
    dt = as_dtype(dtype) if dtype is not None else src.dtype
    dst = current().tile(src.shape, dt)
    d, s = _masked([dst, src], mask)
    current().op("copy", (s,), (d,), dst=d, src=s)
    return dst


def _assign(dst: View, value: Any) -> None:
    """``dst[...] = value``."""
    tr = current()
    into = getattr(value, "_assign_into", None)
    if into is not None:  # nl.loop_reduce: the destination is the accumulator
        into(dst)
        return
    if _is_number(value):
        _memset(dst, value)
        return
    if isinstance(value, Tensor):
        value = value.view()
    if not isinstance(value, View):
        raise unsupported(f"assigning {type(value).__name__} to a tile")
    if tr.wrote_nothing(value):
        return  # ``dst[...] = <a call whose mask= kept nothing>``: the statement writes nothing
    if not dst.tensor.on_chip:
        store(dst, value)
        return
    if tr.retarget(value, dst):
        return
    src = _tile(value, "assignment")
    # a column may land in a 1-axis view and back ((P, 1) <-> (P,)); nothing else changes shape
    same_column = src.elements == dst.elements and (src.ndim == 1 or dst.ndim == 1)
    if src.shape != dst.shape and not same_column and src.ndim == dst.ndim and src.shape[0] == dst.shape[0] \
            and src.elements < dst.elements and builtins.all(a in (1, b) for a, b in zip(src.shape[1:], dst.shape[1:])):
        # numpy's assignment broadcasting of size-1 free axes (1.x: qk[:, :, :, 1] = nl.load(sink.reshape(
        # (1, 1, H))) fills every batch): read them with stride 0
        src = _stretched(src, dst.shape)
    if src.shape != dst.shape and not same_column:
        # shapes that differ only by size-1 free axes hold the same elements in the same order
        # (``cache[t, :, :, :] = nl.load(bias[...])``: a [P, 1] tile into a [P, 1, 1] view)
        if _without_unit_free_axes(src.shape) != _without_unit_free_axes(dst.shape):
            raise unsupported(f"assigning a {list(src.shape)} tile to a {list(dst.shape)} view")
        src = src.reshape(dst.shape)
    src, dst = _masked_part(tr, src, dst)
    tr.op("copy", (src,), (dst,), dst=dst, src=src)


def _without_unit_free_axes(shape: tuple[int, ...]) -> tuple[int, ...]:
    return shape[:1] + tuple(n for n in shape[1:] if n != 1)


def _masked_part(tr: Any, src: View, dst: View) -> tuple[View, View]:
    """``dst[...] = <masked op>`` that could not write ``dst`` itself: copy only what the op wrote (a fresh
    tile's narrowed part), so the rest of ``dst`` keeps what it held, as in NKI."""
    from tusk.frontend.tracer import _retargeted

    last = tr.prog[-1] if tr.prog else None
    if not isinstance(last, Op) or src.tensor.site != len(tr.prog) - 1 or src.shape != dst.shape:
        return src, dst
    target = _retargeted(last, src, dst)
    if target is None or target is dst:
        return src, dst
    return last.writes[0], target


def _accumulate(dst: View, value: Any) -> None:
    """``dst += value`` (a PSUM accumulation group when value is a matmul)."""
    if _is_number(value):
        _assign(dst, _binary("add", dst, value))
        return
    if current().wrote_nothing(value):
        return  # ``dst += <a call whose mask= kept nothing>``: nothing to add
    value = _tile(value, "+=")
    dst = _tile(dst, "+=")
    if value.elements != dst.elements and _broadcast_shape(dst.shape, value.shape, "+=") != dst.shape:
        raise unsupported(f"+= of a {list(value.shape)} tile into a {list(dst.shape)} one")
    _start_accumulation(dst, value)
    tr = current()
    if value.shape == dst.shape:  # ``dst += <masked call>``: only the part the call wrote, as in NKI
        value, dst = _masked_part(tr, value, dst)
    tr.op("tensor_tensor", (dst, value), (dst,), dst=dst, a=dst, b=value, op="add")


def _start_accumulation(dst: View, value: View) -> None:
    """``psum[...] += nisa.nc_matmul(...)`` into a PSUM tensor nothing wrote yet starts an accumulation group,
    as NKI reads it: the sum starts from zero, once before the loop the group runs over (as
    ``nc_matmul(dst=psum, ...)`` infers it; see isa_ops.nc_matmul)."""
    from tusk.frontend.nki.isa_ops import fill_before_accumulation

    tr = current()
    if dst.memory != "psum" or not _made_by_matmul(tr, value):
        return
    tr.sum_parts.add(id(value.tensor))  # NKI accumulates in dst's bank: not a bank of the kernel's
    if written_before(tr, dst):
        return
    fill_before_accumulation(tr, dst, 0.0)


def written_before(tr: Any, dst: View) -> builtins.bool:
    """Has an instruction traced so far written an element ``dst`` may reach (over every loop index)?  Block
    ``i`` of a tensor is not written by the writes of block ``i - 1`` (an unrolled loop's earlier iteration).
    Element by element when the accesses are small enough to list (each write is listed once per trace: the
    marks are kept on the tracer); otherwise any write of the tensor counts."""
    from tusk.frontend.alloc_blocks import cells

    t = dst.tensor
    size = math.prod(t.shape)
    mine = cells(dst, None, size)
    book = tr.written_marks  # id(tensor) -> (tensor, marks or None, ids of the ops already marked)
    _, marks, seen = book.setdefault(id(t), (t, np.zeros(size, dtype=builtins.bool), set()))
    for e in tr.prog:
        if isinstance(e, Op) and id(e) not in seen:
            for w in e.writes:
                if w.tensor is t:
                    theirs = None if marks is None else cells(w, None, size)
                    if theirs is None:
                        marks = None
                    else:
                        marks[theirs] = True
            seen.add(id(e))
    book[id(t)] = (t, marks, seen)
    if marks is None or mine is None:
        return builtins.any(isinstance(e, Op) and builtins.any(w.tensor is t for w in e.writes) for e in tr.prog)
    return builtins.bool(marks[mine].any())


def _made_by_matmul(tr: Any, value: View) -> builtins.bool:
    for e in reversed(tr.prog):
        if isinstance(e, Op) and builtins.any(w.tensor is value.tensor for w in e.writes):
            return e.kind == "matmul"
    return False


# ---------------------------------------------------------------------------- elementwise
_ALU = {"mod": "mod", "add": "add", "subtract": "subtract", "multiply": "mult", "divide": "divide", "maximum": "max",
        "minimum": "min", "equal": "is_equal", "not_equal": "not_equal", "greater": "is_gt",
        "greater_equal": "is_ge", "less": "is_lt", "less_equal": "is_le", "power": "pow",
        "bitwise_and": "bitwise_and", "bitwise_or": "bitwise_or", "bitwise_xor": "bitwise_xor",
        "logical_and": "logical_and", "logical_or": "logical_or", "logical_xor": "logical_xor",
        # nl.left_shift / nl.right_shift by a tile of counts (nl_math._shift names the ALU operator)
        "left_shift": "logical_shift_left", "right_shift": "arith_shift_right",
        "right_shift_unsigned": "logical_shift_right"}


def _binary(name: str, x: Any, y: Any, dtype: Any = None, mask: Any = None) -> Any:
    alu = _ALU[name]
    x, y = _as_number(x), _as_number(y)
    if _is_number(x) and _is_number(y):
        return _numbers(name, x, y)
    tr = current()
    if _is_number(x) or _is_number(y):
        reverse = _is_number(x)
        t = _tile(y if reverse else x, f"nl.{name}")
        imm = x if reverse else y
        dst = tr.tile(t.shape, _out_dtype(dtype, t))
        d, s = _masked([dst, t], mask)
        tr.op("tensor_scalar", (s,), (d,), dst=d, src=s, op0=alu, imm0=imm, reverse0=reverse)
        return dst
    a, b = _tile(x, f"nl.{name}"), _tile(y, f"nl.{name}")
    if a.shape[0] != b.shape[0] and 1 in (a.shape[0], b.shape[0]) and a.ndim == b.ndim:
        # a one-partition operand broadcasts along the partitions first (on the PE, as nl.broadcast_to)
        if a.shape[0] == 1:
            a = _broadcast_to(a, (b.shape[0],) + a.shape[1:])
        else:
            b = _broadcast_to(b, (a.shape[0],) + b.shape[1:])
    if a.shape[0] != b.shape[0]:
        raise unsupported(f"nl.{name} of tiles with {a.shape[0]} and {b.shape[0]} partitions "
                          "(broadcasting along the partition dimension)")
    if a.shape == b.shape or (a.elements == b.elements and not _column(a, a.shape[0])
                              and not _stretches(a.shape, b.shape)):
        dst = tr.tile(a.shape, _out_dtype(dtype, a, b))
        d, sa, sb = _masked([dst, a, b], mask)
        tr.op("tensor_tensor", (sa, sb), (d,), dst=d, a=sa, b=sb, op=alu)
        return dst
    if _column(b, b.shape[0]):
        full_, col, reverse = a, b, False
    elif _column(a, a.shape[0]):
        full_, col, reverse = b, a, True
    else:
        # numpy broadcasting of size-1 free axes: read them with stride 0
        shape = _broadcast_shape(a.shape, b.shape, f"nl.{name}")
        a, b = _stretched(a, shape), _stretched(b, shape)
        dst = tr.tile(shape, _out_dtype(dtype, a, b))
        d, sa, sb = _masked([dst, a, b], mask)
        tr.op("tensor_tensor", (sa, sb), (d,), dst=d, a=sa, b=sb, op=alu)
        return dst
    dst = tr.tile(full_.shape, _out_dtype(dtype, a, b))
    d, s, col = _masked([dst, full_], mask, (col,))
    tr.op("tensor_scalar", (s, col), (d,), dst=d, src=s, op0=alu, imm0=_as_column(col), reverse0=reverse)
    return dst


def _stretches(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """Do two different shapes of one rank broadcast numpy's way, size-1 axes against longer ones?  Then
    ``[4, 1, 3] + [4, 3, 1]`` is ``[4, 3, 3]``, not the element-by-element sum of two 12-element streams."""
    return len(a) == len(b) and a != b and builtins.all(x == y or 1 in (x, y) for x, y in zip(a, b))


def _broadcast_shape(a: tuple[int, ...], b: tuple[int, ...], what: str) -> tuple[int, ...]:
    if len(a) != len(b) or any(x != y and 1 not in (x, y) for x, y in zip(a, b)):
        raise unsupported(f"{what} of {list(a)} and {list(b)} tiles (equal shapes, a [P, 1] column, or size-1 "
                          "axes broadcast numpy's way)")
    return tuple(builtins.max(x, y) for x, y in zip(a, b))


def _stretched(v: View, shape: tuple[int, ...]) -> View:
    """``v`` seen with ``shape``: its size-1 axes read repeatedly (stride 0)."""
    if v.shape == shape:
        return v
    return View(v.tensor, v.offset, tuple((0, n) if m == 1 else d for d, m, n in zip(v.dims, v.shape, shape)))


def _numbers(name: str, x: Any, y: Any) -> Any:
    """``nl.add(2, 3)``: plain Python arithmetic, as NKI does for two scalars."""
    ops = {"add": lambda: x + y, "subtract": lambda: x - y, "multiply": lambda: x * y,
           "divide": lambda: x / y, "maximum": lambda: builtins.max(x, y), "minimum": lambda: builtins.min(x, y)}
    if name not in ops:
        raise unsupported(f"nl.{name} of two Python numbers")
    try:
        return ops[name]()
    except ArithmeticError as e:
        raise unsupported(f"nl.{name}({x!r}, {y!r}): {e}") from None


def _make_binary(name: str):
    def fn(x: Any, y: Any, dtype: Any = None, mask: Any = None, **kw: Any) -> Any:
        _no_keywords(f"nl.{name}", kw)
        return _binary(name, x, y, dtype, mask)
    fn.__name__ = name
    fn.__qualname__ = name
    fn.__doc__ = f"nl.{name}(x, y): elementwise, a number or a [P, 1] column broadcasts."
    return fn


add = _make_binary("add")
subtract = _make_binary("subtract")
multiply = _make_binary("multiply")
divide = _make_binary("divide")
maximum = _make_binary("maximum")
minimum = _make_binary("minimum")
equal = _make_binary("equal")
not_equal = _make_binary("not_equal")
greater = _make_binary("greater")
greater_equal = _make_binary("greater_equal")
less = _make_binary("less")
less_equal = _make_binary("less_equal")
power = _make_binary("power")


# ---------------------------------------------------------------------------- activations
def _activation(func: str, x: Any, dtype: Any = None, mask: Any = None, *, bias: Any = None,
                scale: float = 1.0) -> View:
    src = _tile(x, f"nl.{func}")
    tr = current()
    dst = tr.tile(src.shape, _out_dtype(dtype, src))
    bias = None if bias is None else _tile(bias, "activation bias")
    d, s, bias = _masked([dst, src], mask, (bias,))
    reads = (s,)
    if bias is not None:
        if not _column(bias, s.shape[0]):
            raise unsupported(f"an activation bias of shape {list(bias.shape)} (a [P, 1] column)")
        bias = _as_column(bias)
        reads = (s, bias)
    tr.op("activation", reads, (d,), dst=d, src=s, func=func, bias=bias, scale=float(scale))
    return dst


class _OperatorName:
    """An NKI operator that is only a name for an ISA call's ``op=`` / ``op0=`` / ``op1=`` (``nl.bypass``): its
    ALU operator (by ``__name__``) and its activation function (``_activation``); calling it is refused."""

    def __init__(self, name: str, activation: str | None) -> None:
        self.__name__, self._activation = name, activation

    def __repr__(self) -> str:
        return f"nl.{self.__name__}"

    def __call__(self, *_: Any, **__: Any) -> Any:
        raise unsupported(f"calling nl.{self.__name__} (an operator for an ISA call's op=, op0= or op1=)")


# NKI's no-op operator: ALU bypass (the left operand) as op0/op1, the identity activation (KLR copy) as op
bypass = _OperatorName("bypass", "copy")
# NKI's parametric ReLU (x, or relu_param * x where x < 0): an activation op of nisa.activate2 only (the one
# call with a relu_param); KLR has no such activation function (isa_ops.activate2 composes it)
prelu = _OperatorName("prelu", None)


def _make_activation(name: str, func: str):
    def fn(x: Any, dtype: Any = None, mask: Any = None, **kw: Any) -> View:
        _no_keywords(f"nl.{name}", kw)
        return _activation(func, x, dtype, mask)
    fn.__name__ = name
    fn.__qualname__ = name
    fn.__doc__ = f"nl.{name}(x): the ScalarE activation {func}."
    fn._activation = func  # nisa.activation(op=nl.exp) reads it
    return fn


exp = _make_activation("exp", "exp")
log = _make_activation("log", "log")
tanh = _make_activation("tanh", "tanh")
sigmoid = _make_activation("sigmoid", "sigmoid")
relu = _make_activation("relu", "relu")
gelu = _make_activation("gelu", "gelu")
gelu_apprx_tanh = _make_activation("gelu_apprx_tanh", "gelu_apprx_tanh")
silu = _make_activation("silu", "silu")
sqrt = _make_activation("sqrt", "sqrt")
rsqrt = _make_activation("rsqrt", "rsqrt")
square = _make_activation("square", "square")
sin = _make_activation("sin", "sin")
erf = _make_activation("erf", "erf")
softplus = _make_activation("softplus", "softplus")
mish = _make_activation("mish", "mish")
sign = _make_activation("sign", "sign")
arctan = _make_activation("arctan", "arctan")


def abs(x: Any, dtype: Any = None, mask: Any = None, **kw: Any) -> View:
    _no_keywords("nl.abs", kw)
    return _activation("abs", x, dtype, mask)


def reciprocal(x: Any, dtype: Any = None, mask: Any = None, **kw: Any) -> View:
    _no_keywords("nl.reciprocal", kw)
    src = _tile(x, "nl.reciprocal")
    dst = current().tile(src.shape, _out_dtype(dtype, src))
    d, s = _masked([dst, src], mask)
    current().op("reciprocal", (s,), (d,), dst=d, src=s)
    return dst


def negative(x: Any, dtype: Any = None, mask: Any = None, **kw: Any) -> View:
    _no_keywords("nl.negative", kw)
    return _binary("multiply", x, -1.0, dtype, mask)


reciprocal._activation = "reciprocal"
abs._activation = "abs"


# The derivative activations: KLR names them, its BIR lowering has none, so each is composed of the ScalarE
# activations BIR has (sigmoid, erf, square, exp with a scale and a bias) and DVE arithmetic, in float32
# tiles, cast to the result dtype at the end.
_SQRT_HALF = 0.7071067811865476
_LN_2_OVER_SQRT_PI = math.log(2.0 / math.sqrt(math.pi))
_LN_1_OVER_SQRT_2PI = -0.5 * math.log(2.0 * math.pi)


def _sigmoid_dx(name: str, x: Any, dtype: Any, mask: Any, slope: float) -> View:
    """``d/dx [x * sigmoid(c x)] = s + c x s (1 - s)`` with ``s = sigmoid(c x)`` (silu: c = 1)."""
    src = _tile(x, f"nl.{name}")
    s = _activation("sigmoid", src, "float32", mask, scale=slope)
    one_minus = _binary("subtract", 1.0, s, "float32", mask)
    xs = _binary("multiply", src, s, "float32", mask)
    term = _binary("multiply", xs, one_minus, "float32", mask)
    if slope != 1.0:
        term = _binary("multiply", term, float(slope), "float32", mask)
    return _binary("add", s, term, _out_dtype(dtype, src), mask)


def gelu_dx(x: Any, dtype: Any = None, mask: Any = None, **kw: Any) -> View:
    """``d/dx gelu(x) = Phi(x) + x phi(x)``, composed: ScalarE erf, square and exp, DVE arithmetic.

    ``Phi(x) = (1 + erf(x / sqrt 2)) / 2``, ``phi(x) = exp(-x^2 / 2) / sqrt(2 pi)``."""
    _no_keywords("nl.gelu_dx", kw)
    src = _tile(x, "nl.gelu_dx")
    e = _activation("erf", src, "float32", mask, scale=_SQRT_HALF)
    cdf = _binary("multiply", _binary("add", e, 1.0, "float32", mask), 0.5, "float32", mask)
    sq = _activation("square", src, "float32", mask)
    pdf = _activation_bias("exp", sq, -0.5, _LN_1_OVER_SQRT_2PI, mask)
    return _binary("add", cdf, _binary("multiply", src, pdf, "float32", mask), _out_dtype(dtype, src), mask)


def gelu_apprx_sigmoid_dx(x: Any, dtype: Any = None, mask: Any = None, **kw: Any) -> View:
    """The derivative of ``x * sigmoid(1.702 x)`` (nl.gelu_apprx_sigmoid)."""
    _no_keywords("nl.gelu_apprx_sigmoid_dx", kw)
    return _sigmoid_dx("gelu_apprx_sigmoid_dx", x, dtype, mask, GELU_SIGMOID_SLOPE)


def silu_dx(x: Any, dtype: Any = None, mask: Any = None, **kw: Any) -> View:
    """``d/dx [x sigmoid(x)] = s (1 + x (1 - s))``, ``s = sigmoid(x)``, composed: ScalarE sigmoid, DVE arithmetic."""
    _no_keywords("nl.silu_dx", kw)
    return _sigmoid_dx("silu_dx", x, dtype, mask, 1.0)


def erf_dx(x: Any, dtype: Any = None, mask: Any = None, **kw: Any) -> View:
    """``d/dx erf(x) = 2 / sqrt(pi) * exp(-x^2)``, composed: ScalarE square and exp.

    The exp takes scale -1 and the constant as its bias: ``exp(-x^2 + ln(2 / sqrt(pi)))``."""
    _no_keywords("nl.erf_dx", kw)
    src = _tile(x, "nl.erf_dx")
    sq = _activation("square", src, "float32", mask)
    out = _activation_bias("exp", sq, -1.0, _LN_2_OVER_SQRT_PI, mask)
    return out if _out_dtype(dtype, src) == out.dtype else copy(out, dtype=_out_dtype(dtype, src))


def _activation_bias(func: str, src: View, scale: float, bias: float, mask: Any) -> View:
    """``func(src * scale + bias)`` in float32, the bias a memset column."""
    col = current().tile((src.shape[0], 1), as_dtype("float32"))
    _memset(col, float(bias))
    return _activation(func, src, "float32", mask, bias=col, scale=scale)

# the sigmoid GELU approximation ``x * sigmoid(1.702 x)``, as nki-library's own numpy and torch references
# compute it (ActFnType.Swish); BIR has no activation function for it
GELU_SIGMOID_SLOPE = 1.702


def gelu_apprx_sigmoid(x: Any, dtype: Any = None, mask: Any = None, **kw: Any) -> View:
    """``x * sigmoid(1.702 x)``: the ScalarE sigmoid (scale 1.702) in float32, then a multiply by ``x``."""
    _no_keywords("nl.gelu_apprx_sigmoid", kw)
    src = _tile(x, "nl.gelu_apprx_sigmoid")
    s = _activation("sigmoid", src, "float32", mask, scale=GELU_SIGMOID_SLOPE)
    return _binary("multiply", src, s, dtype if dtype is not None else src.dtype, mask)


gelu_apprx_sigmoid._composite = "gelu_apprx_sigmoid"  # nisa.activation(op=...) builds it (isa_ops.activation)


def cos(x: Any, dtype: Any = None, mask: Any = None, **kw: Any) -> View:
    """``sin(x + pi/2)``: the ScalarE activation sin with a bias column (BIR has no cos function)."""
    _no_keywords("nl.cos", kw)
    src = _tile(x, "nl.cos")
    quarter = current().tile((src.shape[0], 1), float32)
    _memset(quarter, math.pi / 2)
    return _activation("sin", src, dtype, mask, bias=quarter)


def tan(x: Any, dtype: Any = None, mask: Any = None, **kw: Any) -> View:
    """``sin(x) / cos(x)`` (as NKI computes it: BIR has no tan function)."""
    _no_keywords("nl.tan", kw)
    src = _tile(x, "nl.tan")
    return _binary("divide", sin(src, float32, mask), cos(src, float32, mask), dtype, mask)


# ---------------------------------------------------------------------------- reductions
_REDUCE_AXES = ("X", "XY", "XYZ", "XYZW")


def _reduce(op: str, x: Any, axis: Any, dtype: Any, keepdims: bool, mask: Any, *, negate: bool = False,
            scale: float = 1.0, what: str = "") -> View:
    """``tensorReduce`` over free axes: the source's access pattern walks the kept axes first and the
    reduced ones innermost (any free axes can be reduced that way; the partition axis cannot).  Under a
    mask the result keeps the indices the mask keeps of the kept axes, in their places (from a lower bound
    on); ``scale`` multiplies what was written (nl.mean's 1 / count)."""
    src = _tile(x, what)
    axes = _axes(axis, src.ndim, what)
    k = len(axes)
    if 0 in axes:
        raise unsupported(f"{what} along axis {axis} of a {src.ndim}-axis tile (the partition axis cannot be "
                          "reduced; transpose it into a free axis first)")
    if k > len(_REDUCE_AXES):
        raise unsupported(f"{what} along {k} axes (at most {len(_REDUCE_AXES)})")
    tr = current()
    kept_axes = [a for a in range(src.ndim) if a not in axes]
    kept = tuple(src.shape[a] for a in kept_axes)
    dst = tr.tile(kept + (1,) * k if len(kept) > 1 else (src.shape[0], 1), _out_dtype(dtype, src))
    cut, = _masked([src], mask)
    cut.check_bounds()
    walk = View(cut.tensor, cut.offset, tuple(cut.dims[a] for a in kept_axes) + tuple(cut.dims[a] for a in axes))
    first = cut.window or (0,) * cut.ndim
    out = dst.windowed({d: first[a] for d, a in enumerate(kept_axes)},
                       {d: cut.shape[a] for d, a in enumerate(kept_axes)})
    tr.op("tensor_reduce", (walk,), (out,), dst=out, src=walk, op=op, axis=_REDUCE_AXES[k - 1], negate=negate)
    if scale != 1.0:
        tr.op("tensor_scalar", (out,), (out,), dst=out, src=out, op0="mult", imm0=scale, reverse0=False)
    if keepdims:
        # the reduced axes as unit dims in their places
        it = iter(dst.dims[:len(kept)])
        return View(dst.tensor, dst.offset, tuple((1, 1) if a in axes else next(it) for a in range(src.ndim)),
                    tuple(-1 if a in axes else a for a in range(src.ndim)))
    return dst.with_dims(dst.dims[:len(kept)])


def _axes(axis: Any, ndim: int, what: str) -> tuple[int, ...]:
    items = axis if isinstance(axis, (tuple, list)) else (axis,)
    if not items or any(isinstance(a, builtins.bool) or not isinstance(a, (int, np.integer)) for a in items):
        raise unsupported(f"{what} along axis={axis!r} (ints naming free axes)")
    if any(not -ndim <= int(a) < ndim for a in items):
        raise unsupported(f"{what} along axis={axis!r} of a {ndim}-axis tile")
    return tuple(sorted({int(a) % ndim for a in items}))


def sum(x: Any, axis: Any, dtype: Any = None, keepdims: bool = False, mask: Any = None, **kw: Any) -> View:
    _no_keywords("nl.sum", kw)
    return _reduce("add", x, axis, dtype, keepdims, mask, what="nl.sum")


def max(x: Any, axis: Any, dtype: Any = None, keepdims: bool = False, mask: Any = None, **kw: Any) -> View:
    _no_keywords("nl.max", kw)
    return _reduce("max", x, axis, dtype, keepdims, mask, what="nl.max")


def min(x: Any, axis: Any, dtype: Any = None, keepdims: bool = False, mask: Any = None, **kw: Any) -> View:
    _no_keywords("nl.min", kw)
    return _reduce("min", x, axis, dtype, keepdims, mask, what="nl.min")


def prod(x: Any, axis: Any, dtype: Any = None, keepdims: bool = False, mask: Any = None, **kw: Any) -> View:
    _no_keywords("nl.prod", kw)
    return _reduce("mult", x, axis, dtype, keepdims, mask, what="nl.prod")


def mean(x: Any, axis: Any, dtype: Any = None, keepdims: bool = False, mask: Any = None, **kw: Any) -> View:
    _no_keywords("nl.mean", kw)
    src = _tile(x, "nl.mean")
    count = math.prod(src.shape[a] for a in _axes(axis, src.ndim, "nl.mean"))
    return _reduce("add", src, axis, float32 if dtype is None else dtype, keepdims, mask, scale=1.0 / count,
                   what="nl.mean")


# ---------------------------------------------------------------------------- matmul and transpose
def _matmul(stationary: View, moving: View, what: str, transpose: bool = False) -> View:
    k, m = stationary.shape[0], math.prod(stationary.shape[1:])
    k2, n = moving.shape[0], math.prod(moving.shape[1:])
    if k != k2:
        raise unsupported(f"{what}: contraction over {k} and {k2} partitions")
    if m > tile_size.gemm_stationary_fmax or n > tile_size.gemm_moving_fmax:
        raise unsupported(f"{what} of a [{k}, {m}] stationary and a [{k}, {n}] moving tile (at most "
                          f"{tile_size.gemm_stationary_fmax} and {tile_size.gemm_moving_fmax} columns)")
    tr = current()
    dst = tr.tile((m, n), float32, "psum")
    extra = {"transpose": True} if transpose else {}
    tr.op("matmul", (stationary, moving), (dst,), dst=dst, stationary=stationary, moving=moving, **extra)
    return dst


def _transpose(x: View, what: str) -> View:
    """``x.T`` through the PE array in transpose mode (x^T @ I, the values moved: NaN and infinities too), into
    PSUM."""
    p, f = x.shape[0], math.prod(x.shape[1:])
    if f > PARTITIONS:
        raise unsupported(f"{what} of a tile with {f} columns (at most {PARTITIONS})")
    ident = current().identity_tile()
    return _matmul(x, ident[0:p, 0:p], what, transpose=True)


def matmul(x: Any, y: Any, transpose_x: bool = False, mask: Any = None, **kw: Any) -> View:
    """``x @ y`` into PSUM; ``transpose_x``: x is given as [K, M]."""
    _no_keywords("nl.matmul", kw)
    a, b = _tile(x, "nl.matmul"), _tile(y, "nl.matmul")
    cut = _matmul_cut(mask, a, b, transpose_x)
    if cut is None and not _whole_tiles("nl.matmul", mask, [a, b], "the PE array takes whole tiles"):
        rows = math.prod(a.shape[1:]) if transpose_x else a.shape[0]
        return current().unwritten(current().tile((rows, math.prod(b.shape[1:])), float32, "psum"))
    if not transpose_x:
        at = _transpose(a, "nl.matmul (transposing x)")
        a = copy(at, dtype=a.dtype)
    if cut is None:
        return _matmul(a, b, "nl.matmul")
    m, n = cut  # the first m rows and n columns of the result: a narrower stationary and moving tile
    out = current().tile((a.shape[1], b.shape[1]), float32, "psum")
    part = _matmul(a.narrowed({1: m}), b.narrowed({1: n}), "nl.matmul")
    current().retarget(part, out.narrowed({0: m, 1: n}))
    return out


def _matmul_cut(mask: Any, a: View, b: View, transpose_x: Any) -> tuple[int, int] | None:
    """(rows, columns) of the [M, N] result a mask= on its axes keeps, when it keeps some of them but not all
    (NKI narrows the PE's operands: fewer stationary columns, a narrower moving tile); else None."""
    if not isinstance(mask, Mask) or mask.row is not None or not mask.keep or a.ndim != 2 or b.ndim != 2:
        return None
    if mask.skip:
        raise unsupported(f"{mask!r} on a matmul (a lower bound on its result axes; masks keep a prefix there)")
    rows, cols = (a.shape[1] if transpose_x else a.shape[0]), b.shape[1]
    try:
        counts = mask.counts(2)
    except TraceError:
        return None
    m, n = builtins.min(rows, counts.get(0, rows)), builtins.min(cols, counts.get(1, cols))
    return None if (m, n) == (rows, cols) or 0 in (m, n) else (m, n)


def transpose(x: Any, dtype: Any = None, mask: Any = None, **kw: Any) -> View:
    _no_keywords("nl.transpose", kw)
    src = _tile(x, "nl.transpose")
    out = _transpose(src, "nl.transpose")
    return copy(out, dtype=dtype or src.dtype) if dtype is not None else out


def _broadcast_to(x: View, shape: tuple[int, ...]) -> View:
    """numpy broadcasting of a tile: a one-partition tile along the partitions (ones[1, P]^T @ row on the PE,
    as NKI does), then size-1 free axes by a copy that reads them with stride 0."""
    src = _tile(x, "broadcast_to")
    tr = current()
    if src.shape == shape:
        return src
    if src.ndim == 1 and len(shape) > 1 and src.shape[0] == shape[0]:
        src = src.with_dims((src.dims[0],) + ((1, 1),) * (len(shape) - 1))  # (P,) is a column, one per partition
    if len(shape) != src.ndim or any(a != b and a != 1 for a, b in zip(src.shape, shape)):
        raise unsupported(f"broadcasting a {list(src.shape)} tile to {list(shape)}")
    if src.shape[0] == 1 and shape[0] > 1:
        src = _partition_broadcast(src, shape[0])
        if src.shape == shape:
            return src
    walk = View(src.tensor, src.offset, tuple((0, n) if m == 1 else d for d, m, n in zip(src.dims, src.shape, shape)))
    out = tr.tile(shape, src.dtype)
    tr.op("copy", (walk,), (out,), dst=out, src=walk)
    return out


def _partition_broadcast(src: View, p: int) -> View:
    """A [1, ...] tile copied to ``p`` partitions: ones[1, p]^T @ row, 512 columns per matmul."""
    from tusk.frontend.tensors import merge_contiguous
    tr = current()
    free = math.prod(src.shape[1:])
    if merge_contiguous(src.dims[1:]) is None or merge_contiguous(src.dims[1:])[0] != 1:
        src = copy(src)  # the matmul walks the row contiguously
    ones_ = tr.tile((1, p), float32)
    _memset(ones_, 1.0)
    out = tr.tile((p,) + src.shape[1:], src.dtype)
    step = tile_size.gemm_moving_fmax
    for c in range(0, free, step):
        n = builtins.min(step, free - c)
        row = View(src.tensor, src.offset + c, (src.dims[0], (1, n)))
        part = _matmul(ones_, row, "broadcast_to")
        dst = View(out.tensor, out.offset + c, (out.dims[0], (1, n)))
        tr.op("copy", (part,), (dst,), dst=dst, src=part)
    return out


# ---------------------------------------------------------------------------- everything else
def device_print(*_: Any, **__: Any) -> None:
    """Printing happens on the device in NKI; a traced kernel has nothing to print (a no-op)."""
    return


# the rest of the nl API (those modules use the helpers above, so they are imported last)
from tusk.frontend.nki.nl_collective import all_reduce  # noqa: E402, F401
from tusk.frontend.nki.nl_gather import gather_flattened  # noqa: E402, F401
from tusk.frontend.nki.nl_grid import *  # noqa: E402, F403
from tusk.frontend.nki.nl_math import *  # noqa: E402, F403
from tusk.frontend.nki.nl_memory import *  # noqa: E402, F403


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    from tusk.frontend.nki.isa_signature import missing_name

    return missing_name("nl", "nki.language", name)
