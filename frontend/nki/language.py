"""``nki.language`` (``nl``) as Tusk traces it.  The supported API is in docs/frontend.md.

Every call records KLR-shaped operations on the current trace; results are
tiles (views of fresh SBUF/PSUM tensors) that the placer gives addresses
after tracing.  Calls outside this module's API are refused by name (see
``__getattr__``) with the kernel's file:line.
"""

from __future__ import annotations

import builtins  # sum, max, min and abs are NKI names in this module
import linecache
import math
import re
from typing import Any

import numpy as np

from tusk.frontend.affine import Affine, IndexVector, LoopVar, Mask, MGrid, loop_index
from tusk.frontend.errors import TraceError, current_user_line, unsupported
from tusk.frontend.tensors import PARTITIONS, Dtype, ParDim, Tensor, View, as_dtype
from tusk.frontend.tracer import CEILING, WatchedRange, as_shape, current, too_many, trips

# ---------------------------------------------------------------------------- dtypes and buffers
float32, bfloat16, float16 = Dtype("float32"), Dtype("bfloat16"), Dtype("float16")
int32, int16, int8 = Dtype("int32"), Dtype("int16"), Dtype("int8")
uint32, uint16, uint8 = Dtype("uint32"), Dtype("uint16"), Dtype("uint8")
tfloat32 = float32
float8_e4m3, float8_e5m2 = Dtype("float8_e4m3"), Dtype("float8e5")  # KLR's names (float8e5: E5M2)
bool_ = uint8

sbuf, psum, hbm, shared_hbm, private_hbm = "sbuf", "psum", "hbm", "shared_hbm", "hbm"
_BUFFERS = {"sbuf": "sbuf", "psum": "psum", "hbm": "hbm", "shared_hbm": "shared_hbm", "private_hbm": "hbm"}


class tile_size:
    pmax = 128
    psum_pmax = 128
    gemm_stationary_fmax = 128
    gemm_moving_fmax = 512
    psum_fmax = 512
    bn_stats_fmax = 512


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
        try:
            r = range(*[int(Affine.of(a)) for a in args])
        except (TraceError, TypeError, ValueError):
            raise unsupported(f"nl.{kind} bounds that are not Python ints ({args!r})") from None
        n = trips(r)
        if n >= CEILING:  # every iteration runs the body: at least one instruction each once unrolled
            raise too_many(n, f"the iterations of an nl.{kind} loop")
        self.kind, self.r, self.n = kind, r, n

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        r, n = self.r, self.n
        if n <= 1:  # nothing to loop over: a static body (or none)
            yield from r
            return
        tr = current()
        ordinal = tr.loop_ordinal
        tr.loop_ordinal += 1
        keep = tr.peel.get(ordinal, n)
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


def affine_range(*args: Any, **_: Any) -> _Range:
    return _Range("affine_range", args)


def sequential_range(*args: Any, **_: Any) -> _Range:
    return _Range("sequential_range", args)


def static_range(*args: Any, **_: Any) -> Any:
    r = range(*[int(Affine.of(a)) for a in args])
    return WatchedRange(r, f"nl.static_range({', '.join(map(str, args))})")


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
def _tile(x: Any, what: str) -> View:
    if isinstance(x, Tensor):
        x = x.view()
    if not isinstance(x, View):
        raise unsupported(f"{what}: expected a tile, got {type(x).__name__}")
    if not x.tensor.on_chip:
        raise unsupported(f"{what} of HBM tensor {x.tensor.name} (load it into SBUF with nl.load first)")
    return x


def _hbm(x: Any, what: str) -> View:
    if isinstance(x, Tensor):
        x = x._user_view()
    if not isinstance(x, View) or x.tensor.on_chip:
        raise unsupported(f"{what}: expected an HBM tensor, got {x!r}")
    return x


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool)


def _masked(views: list[View], mask: Any) -> list[View]:
    if mask is None:
        return views
    if not isinstance(mask, Mask):
        raise unsupported(f"mask={mask!r} (masks compare nl.arange indices with ints, joined with &)")
    return [v.narrowed(mask.counts(v.ndim)) for v in views]


def _out_dtype(dtype: Any, *xs: Any) -> Dtype:
    if dtype is not None:
        return as_dtype(dtype)
    for x in xs:
        if isinstance(x, (View, Tensor)):
            return x.dtype
    return float32


def _column(v: View, rows: int) -> bool:
    """One value per partition: shape (P,), (P, 1), (P, 1, 1) ..."""
    return v.shape[0] == rows and all(n == 1 for n in v.shape[1:])


def _as_column(v: View) -> View:
    """A per-partition column as a (P, 1) access."""
    return v.with_dims(((v.dims[0]), (1, 1))) if v.ndim == 1 else v


# ---------------------------------------------------------------------------- memory
def ndarray(shape: Any, dtype: Any = float32, buffer: Any = None, name: str = "", **_: Any) -> Tensor:
    as_shape(shape)
    shape = tuple(shape)
    mem = _BUFFERS.get(str(buffer) if buffer is not None else "sbuf")
    if mem is None:
        raise unsupported(f"buffer={buffer!r} (use nl.sbuf, nl.psum, nl.hbm or nl.shared_hbm)")
    par = [k for k, d in enumerate(shape) if isinstance(d, ParDim)]
    if len(par) > 1:
        raise unsupported("more than one nl.par_dim in a shape")
    par_axis = par[0] if par else 0
    if mem not in ("sbuf", "psum") and par:
        raise unsupported("nl.par_dim in an HBM tensor's shape")
    return current().new_tensor(shape, as_dtype(dtype), mem, name or _assigned_name(), par_axis=par_axis)


_ASSIGNED = re.compile(r"^\s*([A-Za-z_][A-Za-z_0-9]*)\s*(?::[^=]*)?=[^=]")


def _assigned_name() -> str:
    """``c_output = nl.ndarray(...)`` names the tensor ``c_output`` (KLR names tensors after variables)."""
    where = current_user_line()
    if where is None:
        return ""
    m = _ASSIGNED.match(linecache.getline(where[0], where[1]))
    return m.group(1) if m else ""


def full(shape: Any, fill_value: Any, dtype: Any = float32, buffer: Any = None, name: str = "", **kw: Any) -> Tensor:
    t = ndarray(shape, dtype, buffer, name)
    if not t.on_chip:
        raise unsupported("nl.zeros/nl.full/nl.ones in HBM (fill an SBUF tile and nl.store it)")
    _memset(t.view(), fill_value)
    return t


def zeros(shape: Any, dtype: Any = float32, buffer: Any = None, name: str = "", **kw: Any) -> Tensor:
    return full(shape, 0, dtype, buffer, name)


def ones(shape: Any, dtype: Any = float32, buffer: Any = None, name: str = "", **kw: Any) -> Tensor:
    return full(shape, 1, dtype, buffer, name)


def zeros_like(a: Any, dtype: Any = None, buffer: Any = None, name: str = "", **kw: Any) -> Tensor:
    return full(a.shape, 0, dtype or a.dtype, buffer, name)


def _memset(dst: View, value: Any) -> None:
    if not _is_number(value):
        raise unsupported(f"filling a tile with {value!r}")
    if "float" not in dst.dtype and not math.isfinite(float(value)):
        raise unsupported(f"filling an {dst.dtype} tile with {value!r}")
    current().op("memset", (), (dst,), dst=dst, value=float(value) if "float" in dst.dtype else int(value))


def load(src: Any, dtype: Any = None, mask: Any = None, **_: Any) -> View:
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


def store(dst: Any, value: Any, mask: Any = None, **_: Any) -> None:
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


def copy(x: Any, dtype: Any = None, mask: Any = None, **_: Any) -> View:
    src = _tile(x, "nl.copy")
    dt = as_dtype(dtype) if dtype is not None else src.dtype
    dst = current().tile(src.shape, dt)
    d, s = _masked([dst, src], mask)
    current().op("copy", (s,), (d,), dst=d, src=s)
    return dst


def _assign(dst: View, value: Any) -> None:
    """``dst[...] = value``."""
    tr = current()
    if _is_number(value):
        _memset(dst, value)
        return
    if isinstance(value, Tensor):
        value = value.view()
    if not isinstance(value, View):
        raise unsupported(f"assigning {type(value).__name__} to a tile")
    if not dst.tensor.on_chip:
        store(dst, value)
        return
    if tr.retarget(value, dst):
        return
    src = _tile(value, "assignment")
    # a column may land in a 1-axis view and back ((P, 1) <-> (P,)); nothing else changes shape
    same_column = src.elements == dst.elements and (src.ndim == 1 or dst.ndim == 1)
    if src.shape != dst.shape and not same_column:
        raise unsupported(f"assigning a {list(src.shape)} tile to a {list(dst.shape)} view")
    tr.op("copy", (src,), (dst,), dst=dst, src=src)


def _accumulate(dst: View, value: Any) -> None:
    """``dst += value`` (a PSUM accumulation group when value is a matmul)."""
    if _is_number(value):
        _assign(dst, _binary("add", dst, value))
        return
    value = _tile(value, "+=")
    dst = _tile(dst, "+=")
    current().op("tensor_tensor", (dst, value), (dst,), dst=dst, a=dst, b=value, op="add")


# ---------------------------------------------------------------------------- elementwise
_ALU = {"add": "add", "subtract": "subtract", "multiply": "mult", "divide": "divide", "maximum": "max",
        "minimum": "min", "equal": "is_equal", "not_equal": "not_equal", "greater": "is_gt",
        "greater_equal": "is_ge", "less": "is_lt", "less_equal": "is_le", "power": "pow",
        "bitwise_and": "bitwise_and", "bitwise_or": "bitwise_or", "bitwise_xor": "bitwise_xor",
        "logical_and": "logical_and", "logical_or": "logical_or", "logical_xor": "logical_xor"}


def _binary(name: str, x: Any, y: Any, dtype: Any = None, mask: Any = None) -> Any:
    alu = _ALU[name]
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
    if a.shape[0] != b.shape[0]:
        raise unsupported(f"nl.{name} of tiles with {a.shape[0]} and {b.shape[0]} partitions "
                          "(broadcasting along the partition dimension)")
    if a.shape == b.shape or (a.elements == b.elements and not _column(a, a.shape[0])):
        dst = tr.tile(a.shape, _out_dtype(dtype, a, b))
        d, sa, sb = _masked([dst, a, b], mask)
        tr.op("tensor_tensor", (sa, sb), (d,), dst=d, a=sa, b=sb, op=alu)
        return dst
    if _column(b, b.shape[0]):
        full_, col, reverse = a, b, False
    elif _column(a, a.shape[0]):
        full_, col, reverse = b, a, True
    else:
        raise unsupported(f"nl.{name} of {list(a.shape)} and {list(b.shape)} tiles (only equal shapes, or a "
                          "[P, 1] column broadcast along the free dimensions)")
    dst = tr.tile(full_.shape, _out_dtype(dtype, a, b))
    d, s = _masked([dst, full_], mask)
    tr.op("tensor_scalar", (s, col), (d,), dst=d, src=s, op0=alu, imm0=_as_column(col), reverse0=reverse)
    return dst


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
    def fn(x: Any, y: Any, dtype: Any = None, mask: Any = None, **_: Any) -> Any:
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
    d, s = _masked([dst, src], mask)
    reads = (s,)
    if bias is not None:
        bias = _tile(bias, "activation bias")
        if not _column(bias, s.shape[0]):
            raise unsupported(f"an activation bias of shape {list(bias.shape)} (a [P, 1] column)")
        bias = _as_column(bias)
        reads = (s, bias)
    tr.op("activation", reads, (d,), dst=d, src=s, func=func, bias=bias, scale=float(scale))
    return dst


def _make_activation(name: str, func: str):
    def fn(x: Any, dtype: Any = None, mask: Any = None, **_: Any) -> View:
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


def abs(x: Any, dtype: Any = None, mask: Any = None, **_: Any) -> View:
    return _activation("abs", x, dtype, mask)


def reciprocal(x: Any, dtype: Any = None, mask: Any = None, **_: Any) -> View:
    src = _tile(x, "nl.reciprocal")
    dst = current().tile(src.shape, _out_dtype(dtype, src))
    d, s = _masked([dst, src], mask)
    current().op("reciprocal", (s,), (d,), dst=d, src=s)
    return dst


def negative(x: Any, dtype: Any = None, mask: Any = None, **_: Any) -> View:
    return _binary("multiply", x, -1.0, dtype, mask)


reciprocal._activation = "reciprocal"
abs._activation = "abs"


# ---------------------------------------------------------------------------- reductions
_REDUCE_AXES = ("X", "XY", "XYZ", "XYZW")


def _reduce(op: str, x: Any, axis: Any, dtype: Any, keepdims: bool, mask: Any, *, negate: bool = False,
            what: str = "") -> View:
    src = _tile(x, what)
    axes = _axes(axis, src.ndim, what)
    k = len(axes)
    if 0 in axes or axes != tuple(range(src.ndim - k, src.ndim)):
        raise unsupported(f"{what} along axis {axis} of a {src.ndim}-axis tile (only the trailing free "
                          "axes; the partition axis cannot be reduced)")
    tr = current()
    kept = src.shape[:src.ndim - k]
    dst = tr.tile(kept + (1,) * k if len(kept) > 1 else (src.shape[0], 1), _out_dtype(dtype, src))
    d, s = _masked([dst, src], mask)
    tr.op("tensor_reduce", (s,), (d,), dst=d, src=s, op=op, axis=_REDUCE_AXES[k - 1], negate=negate)
    if keepdims:
        return dst.with_dims(dst.dims[:1] + ((1, 1),) * (src.ndim - 1)) if dst.ndim != src.ndim else dst
    return dst.with_dims(dst.dims[:len(kept)])


def _axes(axis: Any, ndim: int, what: str) -> tuple[int, ...]:
    items = axis if isinstance(axis, (tuple, list)) else (axis,)
    if not items or any(isinstance(a, bool) or not isinstance(a, (int, np.integer)) for a in items):
        raise unsupported(f"{what} along axis={axis!r} (ints naming free axes)")
    if any(not -ndim <= int(a) < ndim for a in items):
        raise unsupported(f"{what} along axis={axis!r} of a {ndim}-axis tile")
    return tuple(sorted({int(a) % ndim for a in items}))


def sum(x: Any, axis: Any, dtype: Any = None, keepdims: bool = False, mask: Any = None, **_: Any) -> View:
    return _reduce("add", x, axis, dtype, keepdims, mask, what="nl.sum")


def max(x: Any, axis: Any, dtype: Any = None, keepdims: bool = False, mask: Any = None, **_: Any) -> View:
    return _reduce("max", x, axis, dtype, keepdims, mask, what="nl.max")


def min(x: Any, axis: Any, dtype: Any = None, keepdims: bool = False, mask: Any = None, **_: Any) -> View:
    return _reduce("min", x, axis, dtype, keepdims, mask, what="nl.min")


def prod(x: Any, axis: Any, dtype: Any = None, keepdims: bool = False, mask: Any = None, **_: Any) -> View:
    return _reduce("mult", x, axis, dtype, keepdims, mask, what="nl.prod")


def mean(x: Any, axis: Any, dtype: Any = None, keepdims: bool = False, mask: Any = None, **_: Any) -> View:
    src = _tile(x, "nl.mean")
    total = _reduce("add", src, axis, float32 if dtype is None else dtype, keepdims, mask, what="nl.mean")
    count = math.prod(src.shape[a] for a in _axes(axis, src.ndim, "nl.mean"))
    current().op("tensor_scalar", (total,), (total,), dst=total, src=total, op0="mult", imm0=1.0 / count,
                 reverse0=False)
    return total


# ---------------------------------------------------------------------------- matmul and transpose
def _matmul(stationary: View, moving: View, what: str) -> View:
    k, m = stationary.shape[0], math.prod(stationary.shape[1:])
    k2, n = moving.shape[0], math.prod(moving.shape[1:])
    if k != k2:
        raise unsupported(f"{what}: contraction over {k} and {k2} partitions")
    if m > tile_size.gemm_stationary_fmax or n > tile_size.gemm_moving_fmax:
        raise unsupported(f"{what} of a [{k}, {m}] stationary and a [{k}, {n}] moving tile (at most "
                          f"{tile_size.gemm_stationary_fmax} and {tile_size.gemm_moving_fmax} columns)")
    tr = current()
    dst = tr.tile((m, n), float32, "psum")
    tr.op("matmul", (stationary, moving), (dst,), dst=dst, stationary=stationary, moving=moving)
    return dst


def _transpose(x: View, what: str) -> View:
    """``x.T`` through the PE array (x^T @ I), into PSUM."""
    p, f = x.shape[0], math.prod(x.shape[1:])
    if f > PARTITIONS:
        raise unsupported(f"{what} of a tile with {f} columns (at most {PARTITIONS})")
    ident = current().identity_tile()
    return _matmul(x, ident[0:p, 0:p], what)


def matmul(x: Any, y: Any, transpose_x: bool = False, mask: Any = None, **_: Any) -> View:
    """``x @ y`` into PSUM; ``transpose_x``: x is given as [K, M]."""
    a, b = _tile(x, "nl.matmul"), _tile(y, "nl.matmul")
    if mask is not None:
        raise unsupported("mask= on nl.matmul")
    if not transpose_x:
        at = _transpose(a, "nl.matmul (transposing x)")
        a = copy(at, dtype=a.dtype)
    return _matmul(a, b, "nl.matmul")


def transpose(x: Any, dtype: Any = None, mask: Any = None, **_: Any) -> View:
    src = _tile(x, "nl.transpose")
    out = _transpose(src, "nl.transpose")
    return copy(out, dtype=dtype or src.dtype) if dtype is not None else out


def _broadcast_to(x: View, shape: tuple[int, ...]) -> View:
    """A [1, F] row to [P, F] (ones[1, P]^T @ row on the PE, as NKI does), or a [P, 1] column to [P, F]."""
    src = _tile(x, "broadcast_to")
    tr = current()
    if src.shape == shape:
        return src
    if len(shape) != src.ndim or any(a != b and a != 1 for a, b in zip(src.shape, shape)):
        raise unsupported(f"broadcasting a {list(src.shape)} tile to {list(shape)}")
    p, free = shape[0], math.prod(shape[1:])
    if src.shape[0] == 1:
        if math.prod(src.shape[1:]) != free:
            raise unsupported(f"broadcasting a {list(src.shape)} tile along partitions and free axes at once")
        ones_ = tr.tile((1, p), float32)
        _memset(ones_, 1.0)
        out = tr.tile((p, free), src.dtype)
        step = tile_size.gemm_moving_fmax
        for c in range(0, free, step):
            n = builtins.min(step, free - c)
            row = View(src.tensor, src.offset + c, (src.dims[0], (1, n)), src.axes)
            part = _matmul(ones_, row, "broadcast_to")
            dst = View(out.tensor, out.offset + c, (out.dims[0], (1, n)), out.axes)
            tr.op("copy", (part,), (dst,), dst=dst, src=part)
        return out
    out = tr.tile(shape, src.dtype)
    _memset(out, 0)
    tr.op("tensor_scalar", (out, src), (out,), dst=out, src=out, op0="add", imm0=_as_column(src), reverse0=False)
    return out


# ---------------------------------------------------------------------------- everything else
def device_print(*_: Any, **__: Any) -> None:
    return None


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    raise unsupported(f"nl.{name} (not in Tusk's NKI front end; docs/frontend.md lists what is)")
