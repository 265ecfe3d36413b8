"""``nki.isa`` (``nisa``): one call, one engine instruction.  Supported calls: docs/frontend.md."""

from __future__ import annotations

from typing import Any

import numpy as np

from tusk.frontend.affine import IndexGrid, IndexVector
from tusk.frontend.errors import unsupported
from tusk.frontend.nki import language as nl
from tusk.frontend.tensors import View, as_dtype
from tusk.frontend.tracer import as_shape, current

# nl functions and numpy ufuncs as ALU operators (nisa.tensor_scalar(op0=np.add) and op0=nl.add both appear)
_ALU_BY_NAME = {**nl._ALU, "max": "max", "min": "min", "rsqrt": "rsqrt", "sum": "add", "prod": "mult",
                "true_divide": "divide", "mult": "mult", "bypass": "bypass"}


def _alu(op: Any, what: str) -> str:
    name = getattr(op, "__name__", None) or str(op)
    alu = _ALU_BY_NAME.get(name)
    if alu is None:
        raise unsupported(f"{what} op {op!r}")
    return alu


def _operand(x: Any, rows: int, what: str) -> Any:
    if nl._is_number(x):
        return float(x) if isinstance(x, (float, np.floating)) else int(x)
    v = nl._tile(x, what)
    if not nl._column(v, rows):
        raise unsupported(f"{what} of shape {list(v.shape)} (a number or a [P, 1] column)")
    return nl._as_column(v)


def nc_matmul(stationary: Any, moving: Any, is_stationary_onezero: bool = False, is_moving_onezero: bool = False,
              mask: Any = None, **_: Any) -> View:
    """``stationary[K, M]^T @ moving[K, N]`` -> PSUM [M, N]."""
    if mask is not None:
        raise unsupported("mask= on nisa.nc_matmul")
    return nl._matmul(nl._tile(stationary, "nisa.nc_matmul"), nl._tile(moving, "nisa.nc_matmul"),
                      "nisa.nc_matmul")


def nc_transpose(data: Any, engine: Any = None, mask: Any = None, **_: Any) -> View:
    return nl._transpose(nl._tile(data, "nisa.nc_transpose"), "nisa.nc_transpose")


def activation(op: Any, data: Any, bias: Any = None, scale: Any = 1.0, dtype: Any = None, mask: Any = None,
               **_: Any) -> View:
    func = getattr(op, "_activation", None)
    if func is None:
        name = getattr(op, "__name__", str(op))
        func = {"exp": "exp", "log": "log", "tanh": "tanh", "sqrt": "sqrt", "abs": "abs", "sin": "sin",
                "arctan": "arctan", "sign": "sign", "square": "square", "copy": "copy"}.get(name)
        if func is None:
            raise unsupported(f"nisa.activation op {op!r}")
    if not nl._is_number(scale):
        raise unsupported("nisa.activation scale given as a tile")
    return nl._activation(func, data, dtype, mask, bias=bias, scale=float(scale))


def tensor_scalar(data: Any, op0: Any, operand0: Any, reverse0: bool = False, op1: Any = None,
                  operand1: Any = None, reverse1: bool = False, dtype: Any = None, mask: Any = None,
                  **_: Any) -> View:
    src = nl._tile(data, "nisa.tensor_scalar")
    tr = current()
    o0 = _operand(operand0, src.shape[0], "nisa.tensor_scalar operand0")
    o1 = None if op1 is None else _operand(operand1, src.shape[0], "nisa.tensor_scalar operand1")
    dst = tr.tile(src.shape, nl._out_dtype(dtype, src))
    d, s = nl._masked([dst, src], mask)
    reads = (s,) + tuple(x for x in (o0, o1) if isinstance(x, View))
    tr.op("tensor_scalar", reads, (d,), dst=d, src=s, op0=_alu(op0, "nisa.tensor_scalar"), imm0=o0,
          reverse0=bool(reverse0), op1=None if op1 is None else _alu(op1, "nisa.tensor_scalar"), imm1=o1,
          reverse1=bool(reverse1))
    return dst


def tensor_tensor(data1: Any, data2: Any, op: Any, dtype: Any = None, mask: Any = None, **_: Any) -> View:
    a, b = nl._tile(data1, "nisa.tensor_tensor"), nl._tile(data2, "nisa.tensor_tensor")
    if a.shape != b.shape:
        raise unsupported(f"nisa.tensor_tensor of {list(a.shape)} and {list(b.shape)} tiles")
    tr = current()
    dst = tr.tile(a.shape, nl._out_dtype(dtype, a, b))
    d, sa, sb = nl._masked([dst, a, b], mask)
    tr.op("tensor_tensor", (sa, sb), (d,), dst=d, a=sa, b=sb, op=_alu(op, "nisa.tensor_tensor"))
    return dst


def tensor_reduce(op: Any, data: Any, axis: Any, negate: bool = False, keepdims: bool = False, dtype: Any = None,
                  mask: Any = None, **_: Any) -> View:
    alu = _alu(op, "nisa.tensor_reduce")
    return nl._reduce(alu, data, axis, dtype, keepdims, mask, negate=bool(negate), what="nisa.tensor_reduce")


def tensor_copy(src: Any, dtype: Any = None, mask: Any = None, **_: Any) -> View:
    return nl.copy(src, dtype=dtype, mask=mask)


def iota(expr: Any, dtype: Any, mask: Any = None, **_: Any) -> View:
    """``dst[p, f...] = expr`` for an nl.arange / nl.mgrid expression."""
    if isinstance(expr, IndexVector):
        expr = IndexGrid.of(expr)
    if not isinstance(expr, IndexGrid) or not expr.const.is_static:
        raise unsupported(f"nisa.iota of {expr!r} (an expression of nl.arange / nl.mgrid indices)")
    shape = expr.shape
    if len(shape) == 1:
        shape = (shape[0], 1)
    tr = current()
    dst = tr.tile(shape, as_dtype(dtype))
    _, par_step = expr.axes.get(0, (1, 0))
    pattern = [(expr.axes.get(d, (1, 0))[1], n) for d, n in enumerate(shape) if d > 0]
    d, = nl._masked([dst], mask)
    tr.op("iota", (), (d,), dst=d, offset=expr.const.const, pattern=pattern, channel_multiplier=par_step)
    return dst


def memset(shape: Any, value: Any, dtype: Any, mask: Any = None, **_: Any) -> View:
    tr = current()
    dst = tr.tile(as_shape(shape), as_dtype(dtype))
    d, = nl._masked([dst], mask)
    nl._memset(d, value)
    return dst


def reciprocal(data: Any, dtype: Any = None, mask: Any = None, **_: Any) -> View:
    return nl.reciprocal(data, dtype=dtype, mask=mask)


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    raise unsupported(f"nisa.{name} (not in Tusk's NKI front end; docs/frontend.md lists what is)")

