"""``nl`` math beyond the basic elementwise ops: bitwise and logical ops, rounding, remainders, ``where``,
and the composite reductions (``var``, ``all``, ``softmax``, ``rms_norm``).

Each is lowered to KLR operators whose numbers are the documented ones:
``floor(x) = x - mod(x, 1)`` (``mod`` is numpy's, so the fraction is exact in
float32), ``fmod(x, y) = sign(x) * mod(|x|, |y|)``, ``softmax`` as
``exp(x - max) / sum``.  ``language`` re-exports every public name here.
"""

from __future__ import annotations

from builtins import abs as builtins_abs
from typing import Any

from tusk.frontend.affine import Mask
from tusk.frontend.errors import unsupported
from tusk.frontend.nki import language as nl
from tusk.frontend.tensors import Tensor, View
from tusk.frontend.tracer import current

__all__ = [
    "abs_max",
    "abs_min",
    "all",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "ceil",
    "floor",
    "fmod",
    "invert",
    "left_shift",
    "logical_and",
    "logical_not",
    "logical_or",
    "logical_xor",
    "mod",
    "right_shift",
    "rms_norm",
    "softmax",
    "trunc",
    "var",
    "where",
]


def _integer_tile(x: Any, what: str) -> View:
    v = nl._tile(x, what)
    if "int" not in v.dtype:
        raise unsupported(f"{what} of a {v.dtype} tile (bitwise operations take integer tiles)")
    return v


def _scalar_op(x: View, op0: str, imm0: Any, dtype: Any, mask: Any, op1: str | None = None, imm1: Any = None,
               *, reverse0: bool = False) -> View:
    tr = current()
    dst = tr.tile(x.shape, nl._out_dtype(dtype, x))
    d, s = nl._masked([dst, x], mask)
    tr.op("tensor_scalar", (s,), (d,), dst=d, src=s, op0=op0, imm0=imm0, reverse0=reverse0, op1=op1, imm1=imm1,
          reverse1=False)
    return dst


# ---------------------------------------------------------------------------- bitwise and logical
def _make_bitwise(name: str):
    def fn(x: Any, y: Any, dtype: Any = None, mask: Any = None, **kw: Any) -> Any:
        nl._no_keywords(f"nl.{name}", kw)
        for t in (x, y):
            if not nl._is_number(t):
                _integer_tile(t, f"nl.{name}")
            elif isinstance(t, float):
                raise unsupported(f"nl.{name} with the float {t!r} (integers only)")
        return nl._binary(name, x, y, dtype, mask)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"nl.{name}(x, y): elementwise on integer tiles."
    return fn


bitwise_and = _make_bitwise("bitwise_and")
bitwise_or = _make_bitwise("bitwise_or")
bitwise_xor = _make_bitwise("bitwise_xor")
logical_and = nl._make_binary("logical_and")
logical_or = nl._make_binary("logical_or")
logical_xor = nl._make_binary("logical_xor")
mod = nl._make_binary("mod")


def _abs_pick(compare: str, x: Any, y: Any, dtype: Any, mask: Any) -> Any:
    """``x`` where ``|x| compare |y|``, else ``y``: the input of the larger (abs_max) or smaller (abs_min)
    magnitude with its sign, ``y`` on a tie, as the NKI reference defines them (``abs_max(-5, 3)`` is -5).
    KLR has no such ALU op: the magnitudes are compared, then the winner copied (``nl.where``), so the value
    is the input's own, not recomputed."""
    if nl._is_number(x) and nl._is_number(y):
        bigger = builtins_abs(x) > builtins_abs(y) if compare == "greater" else builtins_abs(x) < builtins_abs(y)
        return x if bigger else y

    def magnitude(v: Any) -> Any:
        return builtins_abs(float(v)) if nl._is_number(v) else nl._activation("abs", v, None, mask)
    pick = nl._binary(compare, magnitude(x), magnitude(y), "uint8", mask)
    return where(pick, x, y, dtype=dtype, mask=mask)


def abs_max(x: Any, y: Any, dtype: Any = None, mask: Any = None, **kw: Any) -> View:
    nl._no_keywords("nl.abs_max", kw)
    return _abs_pick("greater", x, y, dtype, mask)


def abs_min(x: Any, y: Any, dtype: Any = None, mask: Any = None, **kw: Any) -> View:
    nl._no_keywords("nl.abs_min", kw)
    return _abs_pick("less", x, y, dtype, mask)


def invert(x: Any, dtype: Any = None, mask: Any = None, **kw: Any) -> View:
    nl._no_keywords("nl.invert", kw)
    return _scalar_op(_integer_tile(x, "nl.invert"), "bitwise_not", 0, dtype, mask)


def _shift(name: str, x: Any, y: Any, dtype: Any, mask: Any) -> View:
    src = _integer_tile(x, f"nl.{name}")
    # numpy's right_shift: arithmetic on signed integers, logical on unsigned ones
    key = f"{name}_unsigned" if name == "right_shift" and src.dtype.startswith("uint") else name
    if isinstance(y, (View, Tensor)):  # a tile of shift counts, element by element (or a column per partition)
        _integer_tile(y, f"nl.{name} shift count")
        return nl._binary(key, src, y, dtype, mask)
    if not isinstance(y, int) or isinstance(y, bool):
        raise unsupported(f"nl.{name} by {y!r} (a Python int or an integer tile of shift counts)")
    return _scalar_op(src, nl._ALU[key], y, dtype, mask)


def left_shift(x: Any, y: Any, dtype: Any = None, mask: Any = None, **kw: Any) -> View:
    nl._no_keywords("nl.left_shift", kw)
    return _shift("left_shift", x, y, dtype, mask)


def right_shift(x: Any, y: Any, dtype: Any = None, mask: Any = None, **kw: Any) -> View:
    nl._no_keywords("nl.right_shift", kw)
    return _shift("right_shift", x, y, dtype, mask)


def logical_not(x: Any, dtype: Any = None, mask: Any = None, **kw: Any) -> View:
    nl._no_keywords("nl.logical_not", kw)
    return _scalar_op(nl._tile(x, "nl.logical_not"), "is_equal", 0, dtype, mask)


# ---------------------------------------------------------------------------- rounding and remainders
def floor(x: Any, dtype: Any = None, mask: Any = None, **kw: Any) -> View:
    """``x - mod(x, 1)``: numpy's mod takes the sign of the divisor, so this is the floor, exactly."""
    nl._no_keywords("nl.floor", kw)
    src = nl._tile(x, "nl.floor")
    if "int" in src.dtype:
        return nl.copy(src, dtype=dtype, mask=mask)
    frac = _scalar_op(src, "mod", 1.0, "float32", mask)
    return nl._binary("subtract", src, frac, dtype, mask)


def ceil(x: Any, dtype: Any = None, mask: Any = None, **kw: Any) -> View:
    """``x + mod(-x, 1)``."""
    nl._no_keywords("nl.ceil", kw)
    src = nl._tile(x, "nl.ceil")
    if "int" in src.dtype:
        return nl.copy(src, dtype=dtype, mask=mask)
    up = _scalar_op(src, "mult", -1.0, "float32", mask, "mod", 1.0)
    return nl._binary("add", src, up, dtype, mask)


def _fmod(x: View, y: Any, dtype: Any, mask: Any, what: str) -> View:
    """``sign(x) * mod(|x|, |y|)``: the remainder with the sign of the dividend (numpy's fmod)."""
    ax = nl._activation("abs", x, "float32", mask)
    if nl._is_number(y):
        r = _scalar_op(ax, "mod", builtins_abs(float(y)), "float32", mask)
    else:
        r = nl._binary("mod", ax, nl._activation("abs", nl._tile(y, what), "float32", mask), "float32", mask)
    return nl._binary("multiply", r, nl._activation("sign", x, "float32", mask), dtype or x.dtype, mask)


def fmod(x: Any, y: Any, dtype: Any = None, mask: Any = None, **kw: Any) -> View:
    nl._no_keywords("nl.fmod", kw)
    src = nl._tile(x, "nl.fmod")
    if "int" in src.dtype:
        raise unsupported("nl.fmod of an integer tile (use nl.mod)")
    return _fmod(src, y, dtype, mask, "nl.fmod")


def trunc(x: Any, dtype: Any = None, mask: Any = None, **kw: Any) -> View:
    """``x - fmod(x, 1)``."""
    nl._no_keywords("nl.trunc", kw)
    src = nl._tile(x, "nl.trunc")
    if "int" in src.dtype:
        return nl.copy(src, dtype=dtype, mask=mask)
    return nl._binary("subtract", src, _fmod(src, 1.0, "float32", mask, "nl.trunc"), dtype, mask)


# ---------------------------------------------------------------------------- selection
def where(condition: Any, x: Any, y: Any, dtype: Any = None, mask: Any = None, **kw: Any) -> View:
    """``y`` copied, then ``x`` copied where ``condition`` is nonzero (KLR ``copyPredicated``)."""
    nl._no_keywords("nl.where", kw)
    nl._needs_back_half("copy_predicated", "nl.where")
    cond = nl._tile(condition, "nl.where condition")
    if "int" not in cond.dtype:
        # NKI's condition may be a float tile (1.0 / 0.0: what nl.greater ... give by default), but BIR's
        # copyPredicated takes an integer predicate; nonzero (NaN included, as numpy) becomes 1
        cond = nl._binary("not_equal", cond, 0.0, "uint8", mask)
    tr = current()
    out_dtype = nl._out_dtype(dtype, x, y)
    dst = tr.tile(cond.shape, out_dtype)
    nl._assign(dst, nl._broadcast_operand(y, cond.shape, "nl.where y"))
    src = nl._broadcast_operand(x, cond.shape, "nl.where x")
    d, s, c = nl._masked([dst, src, cond], mask)
    tr.op("copy_predicated", (s, c, d), (d,), dst=d, src=s, predicate=c, reversePred=False)
    return dst


# ---------------------------------------------------------------------------- composite reductions
def _trailing_reduction(x: Any, axis: Any, what: str) -> tuple[View, tuple[int, ...], bool]:
    """A tile, the axes of a reduction along its last free axes (``[1]``, ``[1, 2]``, ... ``[2]`` of a 3-axis
    tile: NKI's "last contiguous dim(s)"), and whether they are all its free axes."""
    src = nl._tile(x, what)
    axes = nl._axes(axis, src.ndim, what)
    if not axes or axes != tuple(range(src.ndim - len(axes), src.ndim)) or 0 in axes:
        raise unsupported(f"{what} along axis={axis!r} of a {src.ndim}-axis tile (the last free axes: NKI's "
                          "last contiguous dims)")
    return src, axes, axes == tuple(range(1, src.ndim))


def var(x: Any, axis: Any, dtype: Any = None, keepdims: bool = False, mask: Any = None, **kw: Any) -> View:
    """``mean((x - mean(x))**2)`` (two passes, as numpy); the result keeps the reduced axes."""
    nl._no_keywords("nl.var", kw)
    src, _, _ = _trailing_reduction(x, axis, "nl.var")
    m = nl.mean(src, axis, dtype=nl.float32, keepdims=True, mask=mask)
    d = nl._binary("subtract", src, m, nl.float32, mask)
    sq = nl._binary("multiply", d, d, nl.float32, mask)
    return nl.mean(sq, axis, dtype=dtype or src.dtype, keepdims=True, mask=mask)


def all(x: Any, axis: Any, dtype: Any = None, mask: Any = None, **kw: Any) -> View:
    nl._no_keywords("nl.all", kw)
    src = nl._tile(x, "nl.all")
    truth = _scalar_op(src, "not_equal", 0, nl.float32, mask)
    return nl._reduce("min", truth, axis, dtype or src.dtype, False, mask, what="nl.all")


def _result_dtype(dtype: Any, compute_dtype: Any) -> Any:
    """NKI 1.x's softmax and rms_norm: ``dtype`` and ``compute_dtype`` "behave the same" (either sets the
    result's dtype); Tusk computes in float32 and casts the result once."""
    return dtype if dtype is not None else compute_dtype


def softmax(x: Any, axis: Any = -1, dtype: Any = None, compute_dtype: Any = None, mask: Any = None,
            **kw: Any) -> View:
    """``exp(x - max(x)) / sum(exp(x - max(x)))`` along the free axes."""
    nl._no_keywords("nl.softmax", kw)
    dtype = _result_dtype(dtype, compute_dtype)
    src, axes, whole = _trailing_reduction(x, axis, "nl.softmax")
    if not whole:
        # along the last axes only: the per-group max and sum keep their axes and broadcast back
        if mask is not None:
            raise unsupported("nl.softmax along the last axes only, under a mask=")
        m = nl._reduce("max", src, axes, nl.float32, True, mask, what="nl.softmax")
        e = nl._activation("exp", nl._binary("subtract", src, m, nl.float32, mask), nl.float32, mask)
        total = nl._reduce("add", e, axes, nl.float32, True, mask, what="nl.softmax")
        return nl._binary("divide", e, total, dtype or src.dtype, mask)
    tr = current()
    neg_max = nl._reduce("max", src, axis, nl.float32, False, mask, negate=True, what="nl.softmax")
    e = tr.tile(src.shape, nl.float32)
    d, s, col = nl._masked([e, src], mask, (neg_max,))
    col = nl._as_column(col)
    tr.op("activation", (s, col), (d,), dst=d, src=s, func="exp", bias=col, scale=1.0)
    total = nl._reduce("add", e, axis, nl.float32, False, mask, what="nl.softmax")
    return nl._binary("divide", e, total, dtype or src.dtype, mask)


def rms_norm(x: Any, w: Any, axis: Any, n: Any, epsilon: float = 1e-6, dtype: Any = None,
             compute_dtype: Any = None, mask: Any = None, **kw: Any) -> View:
    """``x / sqrt(sum(x**2) / n + epsilon) * w``."""
    nl._no_keywords("nl.rms_norm", kw)
    dtype = _result_dtype(dtype, compute_dtype)
    src, axes, whole = _trailing_reduction(x, axis, "nl.rms_norm")
    if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
        raise unsupported(f"nl.rms_norm n={n!r} (a positive int)")
    sq = nl._binary("multiply", src, src, nl.float32, mask)
    ss = nl._reduce("add", sq, axes, nl.float32, not whole, mask, what="nl.rms_norm")
    # the sums of squares (one per partition) go on under the mask's partitions alone (along the last axes
    # only: one per group, kept as size-1 axes that broadcast back, under the mask itself)
    rows = (mask.partitions() if isinstance(mask, Mask) else mask) if whole else None
    if not whole and mask is not None:
        raise unsupported("nl.rms_norm along the last axes only, under a mask=")
    ms = _scalar_op(ss, "mult", 1.0 / n, nl.float32, rows, "add", float(epsilon))
    rms = nl._activation("sqrt", ms, nl.float32, rows)
    normed = nl._binary("divide", src, rms, nl.float32, mask)
    weight = nl._broadcast_operand(w, src.shape, "nl.rms_norm w")
    return nl._binary("multiply", normed, weight, dtype or src.dtype, mask)
