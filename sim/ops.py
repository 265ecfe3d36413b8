"""What each data instruction computes (docs/semantics.md, "Instructions").

``HANDLERS`` maps an opcode to a small function ``(frame, row) -> None``.
Control flow (loops, branches, calls) lives in :mod:`sim.control`.

Arithmetic domain: float32 when any tensor operand has a float dtype (or a
constant is not integral), else int64.  Integer ``divide``/``mod`` are floor
division / floor modulo with x/0 = x%0 = 0; float ``mod`` is numpy's
(sign of the divisor).  ``bypass`` returns its left operand (after
``reverse``), comparisons return 1/0, logical ops treat non-zero as true.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from tusk.ir.enums import ALU_OP_NAMES, Kind, Op
from tusk.ir.errors import InputError, PassError
from tusk.sim.accumulators import accumulate
from tusk.sim.machine import Frame
from tusk.sim.memory import DT_CLASS, RAW, is_int, to_compute, unsupported

F32 = np.float32

# --------------------------------------------------------------------------- ALU


def _idiv(a, b):
    zero = b == 0
    q = np.floor_divide(a, np.where(zero, 1, b))
    return np.where(zero, 0, q)


def _imod(a, b):
    zero = b == 0
    r = np.mod(a, np.where(zero, 1, b))
    return np.where(zero, 0, r)


def _shift(b):
    return np.clip(b, 0, 63)


def _bool(x, dom):
    return x.astype(dom)


def _ipow(a, b):
    r = np.power(a, np.maximum(b, 0))
    return np.where(b < 0, np.where(np.abs(a) == 1, np.power(a, np.abs(b) % 2), 0), r)


_FLOAT_OPS: dict[str, Callable] = {
    "bypass": lambda a, b: a,
    "add": lambda a, b: a + b,
    "subtract": lambda a, b: a - b,
    "mult": lambda a, b: a * b,
    "elemwise_mul": lambda a, b: a * b,
    "divide": lambda a, b: a / b,
    "max": np.maximum,
    "min": np.minimum,
    "pow": lambda a, b: np.power(a, b),
    "mod": lambda a, b: np.mod(a, b),
    "abs": lambda a, b: np.abs(a),
    "rsqrt": lambda a, b: F32(1) / np.sqrt(a),
    "is_equal": lambda a, b: (a == b).astype(F32),
    "not_equal": lambda a, b: (a != b).astype(F32),
    "is_gt": lambda a, b: (a > b).astype(F32),
    "is_ge": lambda a, b: (a >= b).astype(F32),
    "is_lt": lambda a, b: (a < b).astype(F32),
    "is_le": lambda a, b: (a <= b).astype(F32),
    "logical_and": lambda a, b: ((a != 0) & (b != 0)).astype(F32),
    "logical_or": lambda a, b: ((a != 0) | (b != 0)).astype(F32),
    "logical_xor": lambda a, b: ((a != 0) ^ (b != 0)).astype(F32),
    "average": lambda a, b: (a + b) * F32(0.5),
    "abs_max": lambda a, b: np.maximum(np.abs(a), np.abs(b)),
    "abs_min": lambda a, b: np.minimum(np.abs(a), np.abs(b)),
}

_I64 = np.int64
_INT_OPS: dict[str, Callable] = {
    "bypass": lambda a, b: a,
    "add": lambda a, b: a + b,
    "subtract": lambda a, b: a - b,
    "mult": lambda a, b: a * b,
    "elemwise_mul": lambda a, b: a * b,
    "divide": _idiv,
    "max": np.maximum,
    "min": np.minimum,
    "pow": _ipow,
    "mod": _imod,
    "mod_int": _imod,
    "abs": lambda a, b: np.abs(a),
    "is_equal": lambda a, b: (a == b).astype(_I64),
    "not_equal": lambda a, b: (a != b).astype(_I64),
    "is_gt": lambda a, b: (a > b).astype(_I64),
    "is_ge": lambda a, b: (a >= b).astype(_I64),
    "is_lt": lambda a, b: (a < b).astype(_I64),
    "is_le": lambda a, b: (a <= b).astype(_I64),
    "bitwise_and": lambda a, b: a & b,
    "bitwise_or": lambda a, b: a | b,
    "bitwise_xor": lambda a, b: a ^ b,
    "bitwise_not": lambda a, b: ~a,
    "logical_and": lambda a, b: ((a != 0) & (b != 0)).astype(_I64),
    "logical_or": lambda a, b: ((a != 0) | (b != 0)).astype(_I64),
    "logical_xor": lambda a, b: ((a != 0) ^ (b != 0)).astype(_I64),
    "average": lambda a, b: (a + b) >> 1,
    "abs_max": lambda a, b: np.maximum(np.abs(a), np.abs(b)),
    "abs_min": lambda a, b: np.minimum(np.abs(a), np.abs(b)),
    "arith_shift_left": lambda a, b: a << _shift(b),
    "arith_shift_right": lambda a, b: a >> _shift(b),
    "logical_shift_left": lambda a, b: a << _shift(b),
    "logical_shift_right": lambda a, b: (np.asarray(a).astype(np.uint64) >> _shift(b).astype(np.uint64)).astype(_I64),
}
# Ops that only make sense on floats are computed in float32 even for integer operands.
_FLOAT_ONLY = {"rsqrt"}


def op_name(op) -> str:
    if isinstance(op, int) and not isinstance(op, bool):
        if 0 <= op < len(ALU_OP_NAMES):
            return ALU_OP_NAMES[op]
        raise InputError(f"unknown ALU op ordinal {op}")
    return str(op)


def alu(op, a: np.ndarray, b) -> np.ndarray:
    """``a op b`` in the domain of the operands (int64 if both are integer, else float32)."""
    name = op_name(op)
    a = np.asarray(a)
    b = np.asarray(b)
    if a.dtype.kind in "iu" and b.dtype.kind in "iu" and name not in _FLOAT_ONLY:
        f = _INT_OPS.get(name)
        if f is None:
            raise PassError(f"ALU op {name!r} is not supported by the interpreter")
        return np.asarray(f(a.astype(_I64, copy=False), b.astype(_I64, copy=False)))
    f = _FLOAT_OPS.get(name)
    if f is None:
        if name in _INT_OPS:
            raise InputError(f"ALU op {name!r} needs integer operands")
        raise PassError(f"ALU op {name!r} is not supported by the interpreter")
    return np.asarray(f(a.astype(F32, copy=False), b.astype(F32, copy=False)), dtype=F32)


def const(v, integral_ok: bool):
    """An attribute constant as an operand: int64 when integral and the data is integer, else float32."""
    if isinstance(v, bool):
        v = int(v)
    if integral_ok and (isinstance(v, int) or (isinstance(v, float) and v.is_integer())):
        return np.int64(int(v))
    return F32(v)


# --------------------------------------------------------------------------- activation functions


def _erf(x: np.ndarray) -> np.ndarray:
    """erf by Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7), evaluated in float64."""
    x = x.astype(np.float64)
    s = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t \
        * np.exp(-a * a)
    return (s * y).astype(F32)


def _sigmoid(x):
    return (F32(1) / (F32(1) + np.exp(-x))).astype(F32)


_GELU_C = F32(math.sqrt(2.0 / math.pi))


def _gelu_tanh(x):
    return F32(0.5) * x * (F32(1) + np.tanh(_GELU_C * (x + F32(0.044715) * x * x * x)))


def _softplus(x):
    return np.logaddexp(F32(0), x).astype(F32)


ACTIVATIONS: dict[str, Callable] = {
    "Identity": lambda x, al: x,
    "Copy": lambda x, al: x,
    "Exp": lambda x, al: np.exp(x),
    "Relu": lambda x, al: np.maximum(x, F32(0)),
    # Gelu: the exact erf form (erf approximated to 1.5e-7, see _erf); Gelu_apprx_tanh: the tanh form.
    "Gelu": lambda x, al: F32(0.5) * x * (F32(1) + _erf(x * F32(1 / math.sqrt(2.0)))),
    "Gelu_apprx_tanh": lambda x, al: _gelu_tanh(x),
    "Sigmoid": lambda x, al: _sigmoid(x),
    "Silu": lambda x, al: x * _sigmoid(x),
    "Tanh": lambda x, al: np.tanh(x),
    "Sqrt": lambda x, al: np.sqrt(x),
    "Rsqrt": lambda x, al: F32(1) / np.sqrt(x),
    "Reciprocal": lambda x, al: F32(1) / x,
    "Square": lambda x, al: x * x,
    "Ln": lambda x, al: np.log(x),
    "Abs": lambda x, al: np.abs(x),
    "Sin": lambda x, al: np.sin(x),
    "Arctan": lambda x, al: np.arctan(x),
    "Erf": lambda x, al: _erf(x),
    "Sign": lambda x, al: np.sign(x),
    "Softplus": lambda x, al: _softplus(x),
    "Mish": lambda x, al: x * np.tanh(_softplus(x)),
    "Lrelu": lambda x, al: np.where(x > 0, x, F32(al) * x),
    "Prelu": lambda x, al: np.where(x > 0, x, F32(al) * x),
    "Is_finite": lambda x, al: np.isfinite(x).astype(F32),
    "MemsetZero": lambda x, al: np.zeros_like(x),
    "Abs_reciprocal_sqrt": lambda x, al: F32(1) / np.sqrt(np.abs(x)),
}


# --------------------------------------------------------------------------- helpers


def _broadcast(a: np.ndarray, b: np.ndarray, what: str) -> np.ndarray:
    """``b`` shaped to combine with ``a``: same count (iteration order), one per partition, or one."""
    if b.size == a.size:
        return b.reshape(a.shape)
    if b.size == 1:
        return b.reshape(())
    if a.ndim >= 1 and b.size == a.shape[0]:
        return b.reshape((a.shape[0],) + (1,) * (a.ndim - 1))
    raise InputError(f"{what} has {b.size} elements; expected {a.size}, one per partition "
                    f"({a.shape[0] if a.ndim else 1}) or one")


def _one(ops: list[int], what: str, n: int = 1) -> None:
    if len(ops) < n:
        raise InputError(f"needs {n} {what} operand(s), has {len(ops)}")


def _require_idle(attrs, *keys: str) -> None:
    for k in keys:
        v = attrs.get(k)
        if v not in (None, "Idle", "bypass", 0, False):
            raise PassError(f"{k}={v!r} is not supported by the interpreter")


# --------------------------------------------------------------------------- handlers


def h_copy(fr: Frame, i: int) -> None:
    ins, _, outs = fr.split(i)
    attrs = fr.attrs(i)
    mode = attrs.get("mode", "Copy")
    if mode in ("CCE", 2) and "constants" in attrs:
        _dma_compute(fr, ins, outs, attrs)
        return
    _one(ins, "input")
    _one(outs, "output")
    src, dst = ins[0], outs[0]
    if mode in ("CCE", 2) and _accumulate_repeated_rows(fr, src, dst, attrs):
        return
    if attrs.get("oob_is_err", True) is False:
        try:
            if not _copy_skipping_oob(fr, src, dst, mode):
                _plain_copy(fr, src, dst, mode, attrs)
        finally:
            fr.resolved.clear()
        return
    _plain_copy(fr, src, dst, mode, attrs)


def _plain_copy(fr: Frame, src: int, dst: int, mode, attrs) -> None:
    if mode in ("CCE", 2):  # DMA with compute: dst = dst cce_op src (e.g. an accumulating store)
        old = fr.value(dst)
        fr.store(dst, alu(attrs.get("cce_op", "add"), old, _broadcast(old, fr.value(src), "in0")))
        return
    if mode not in ("Copy", 0):
        raise PassError(f"copy mode {mode!r} is not supported by the interpreter")
    if fr.same_storage_dtype(src, dst):
        fr.store_raw(dst, fr.read_raw(src))  # byte for byte (also fp8 and NaN payloads)
        return
    if DT_CLASS[fr.dtype[src]] == RAW or DT_CLASS[fr.dtype[dst]] == RAW:
        raise unsupported(fr.dtype[src] if DT_CLASS[fr.dtype[src]] == RAW else fr.dtype[dst])
    fr.store(dst, fr.value(src))


def _accumulate_repeated_rows(fr: Frame, src: int, dst: int, attrs: dict) -> bool:
    """An accumulating DMA (``dst = dst cce_op src``) that scatters through an index tile naming a row more than
    once: the updates of one row apply one after another, each reading what the one before wrote (NKI's
    ``nl.atomic_rmw`` serialises them; a histogram counts every hit), where a plain scatter would let the last
    one win.  Rows that ``oob_is_err`` false skips stay skipped.  False when no index repeats (or the form is
    not a scatter of dim 0): the ordinary copy does it."""
    try:
        rows = fr.runtime_rows(dst)
        if rows is None or rows[0] != 0 or fr.runtime_rows(src) is not None:
            return False
        _, ok, found = rows
        idx = np.asarray(found, dtype=np.int64).reshape(-1)
        rank = _occurrence(idx, ok)
        vals = fr.value(src)
        if rank.max(initial=-1) < 1 or vals.size % idx.size:
            return False
        vals = vals.reshape(idx.size, -1)
        for r in range(int(rank.max()) + 1):
            _accumulate_once(fr, dst, idx, rank == r, vals, attrs.get("cce_op", "add"))
        return True
    finally:
        fr.resolved.clear()
        fr.gather_override.clear()


def _occurrence(idx: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """For each index, how many earlier in-bounds indices name the same row (-1 for a skipped one)."""
    rank = np.full(idx.shape, -1, dtype=np.int64)
    seen: dict[int, int] = {}
    for k in np.flatnonzero(ok):
        rank[k] = seen.get(int(idx[k]), 0)
        seen[int(idx[k])] = rank[k] + 1
    return rank


def _accumulate_once(fr: Frame, dst: int, idx: np.ndarray, sel: np.ndarray, vals: np.ndarray, op) -> None:
    """One pass of :func:`_accumulate_repeated_rows` over the rows ``sel`` (their indices are distinct); the
    other rows are pointed at a selected one and write its new value again (no effect)."""
    k0 = int(np.argmax(sel))
    fr.gather_override[dst] = np.where(sel, idx, idx[k0])
    old = to_compute(fr.access(dst).read(), fr.dtype[dst]).reshape(idx.size, -1)
    new = alu(op, old, vals)
    new[~sel] = new[k0]
    fr.store(dst, new)


def _copy_skipping_oob(fr: Frame, src: int, dst: int, mode) -> bool:
    """A DMA with ``oob_is_err`` false whose source or destination is addressed at run time: a runtime offset
    that puts the whole access outside its tensor skips the DMA; a gather or scatter skips the rows whose index
    does (their destination rows keep what they held), as NKI's ``oob_mode=skip``.  False when every part is
    in bounds (the ordinary copy does it) or the form is not one handled here (the copy checks bounds)."""
    rows = {j: fr.runtime_rows(j) for j in (src, dst)}
    if all(r is None for r in rows.values()):
        return False
    if any(r is not None and r[0] is None and not bool(r[1]) for r in rows.values()):
        return True  # a whole access outside its tensor: the DMA moves nothing
    gathers = {j: r for j, r in rows.items() if r is not None and r[0] is not None}
    if not gathers or mode not in ("Copy", 0, "CCE", 2) or any(r[0] != 0 for r in gathers.values()):
        return False
    counts = {len(r[1]) for r in gathers.values()}
    if len(counts) != 1:
        return False
    n = counts.pop()
    ok = np.logical_and.reduce([r[1] for r in gathers.values()])
    if ok.all():
        return False
    if not ok.any():
        return True
    k0 = int(np.argmax(ok))
    for j, (_, _, found) in gathers.items():
        idx = np.array(found, dtype=np.int64).reshape(-1)
        idx[~ok] = idx[k0]  # a row in bounds, read or written with the same values (no effect)
        fr.gather_override[j] = idx
    try:
        same = fr.same_storage_dtype(src, dst) and mode not in ("CCE", 2)  # an add needs the values
        vals = fr.read_raw(src) if same else fr.value(src)
        if vals.size % n:
            return False
        vals = vals.reshape(n, -1)
        old = fr.access(dst).read()
        old = (old if same else to_compute(old, fr.dtype[dst])).reshape(n, -1)
        if mode in ("CCE", 2):
            vals = alu(fr.attrs(fr.cur).get("cce_op", "add"), old, vals)
        if dst in gathers:
            new = vals.copy()
            new[~ok] = vals[k0]
        else:
            new = np.where(ok[:, None], vals, old)
        (fr.store_raw if same else fr.store)(dst, new)
    finally:
        fr.gather_override.clear()
    return True


def _dma_compute(fr: Frame, ins: list[int], outs: list[int], attrs: dict) -> None:
    """nisa.dma_compute: ``dst = ins[0] * constants[0] <cce_op> ins[1] * constants[1] ...``, element k of
    every access in row-major order, computed in float32 and cast to the output's dtype once."""
    _one(outs, "output")
    scales = attrs.get("constants")
    if not ins or not isinstance(scales, (list, tuple)) or len(scales) != len(ins):
        raise PassError(f"a DMA compute of {len(ins)} inputs needs one constant each, not {scales!r}")
    acc = np.asarray(fr.value(ins[0]), dtype=np.float32).reshape(-1) * np.float32(scales[0])  # ins: not empty
    for j, c in zip(ins[1:], scales[1:]):
        v = np.asarray(fr.value(j), dtype=np.float32).reshape(-1) * np.float32(c)
        if v.size != acc.size:
            raise InputError(f"a DMA compute's inputs hold {acc.size} and {v.size} elements (they must match)")
        acc = alu(attrs.get("cce_op", "add"), acc, v).astype(np.float32)
    fr.store(outs[0], acc)


def h_tensor_tensor(fr: Frame, i: int) -> None:
    ins, _, outs = fr.split(i)
    _one(ins, "input", 2)
    _one(outs, "output")
    attrs = fr.attrs(i)
    _require_idle(attrs, "acc")
    a = fr.value(ins[0])
    b = _broadcast(a, fr.value(ins[1]), "in1")
    fr.store(outs[0], alu(attrs.get("op", "bypass"), a, b))


def _scalar_chain(fr: Frame, i: int, x: np.ndarray, s0, s1) -> np.ndarray:
    attrs = fr.attrs(i)
    op0, op1 = attrs.get("op0", "bypass"), attrs.get("op1", "bypass")
    y = alu(op0, s0, x) if fr.maybe_affine(attrs.get("reverse0", False)) else alu(op0, x, s0)
    return alu(op1, s1, y) if fr.maybe_affine(attrs.get("reverse1", False)) else alu(op1, y, s1)


def h_tensor_scalar(fr: Frame, i: int) -> None:
    ins, _, outs = fr.split(i)
    _one(ins, "input")
    _one(outs, "output")
    attrs = fr.attrs(i)
    x = fr.value(ins[0])
    ints = x.dtype.kind in "iu"
    s0 = const(fr.maybe_affine(attrs.get("const0", 0.0)), ints)
    s1 = const(fr.maybe_affine(attrs.get("const1", 0.0)), ints)
    y = _scalar_chain(fr, i, x, s0, s1)
    fr.store(outs[0], y)
    accumulate(fr, i, y, attrs)  # tensor_scalar_reduce: the computed values into the engine's reduce registers


def h_tensor_scalar_ptr(fr: Frame, i: int) -> None:
    ins, _, outs = fr.split(i)
    _one(ins, "input", 2)
    _one(outs, "output")
    x = fr.value(ins[0])
    s0 = _broadcast(x, fr.value(ins[1]), "scalar operand ins[1]")
    s1 = _broadcast(x, fr.value(ins[2]), "scalar operand ins[2]") if len(ins) > 2 else np.int64(0)
    y = _scalar_chain(fr, i, x, s0, s1)
    fr.store(outs[0], y)
    accumulate(fr, i, y, fr.attrs(i))


def h_activation(fr: Frame, i: int) -> None:
    ins, _, outs = fr.split(i)
    _one(ins, "input")
    _one(outs, "output")
    attrs = fr.attrs(i)
    _require_idle(attrs, "op0", "op1")
    func = attrs.get("func", "Identity")
    f = ACTIVATIONS.get(func)
    if f is None:
        raise PassError(f"activation function {func!r} is not supported by the interpreter")
    x = fr.value(ins[0]).astype(F32, copy=False)
    scale = attrs.get("scale", 1.0)
    if not isinstance(scale, (int, float)):
        scale = fr.maybe_affine(scale)
    # An identity scale and an absent bias are not applied: -0.0 and NaN payloads pass through.
    if scale != 1.0:
        x = x * F32(scale)
    if len(ins) > 2:  # a per-partition scale tile (ins[1] is then the bias, an immediate 0 when none)
        x = x * _broadcast(x, fr.value(ins[2]).astype(F32, copy=False), "scale")
    if len(ins) > 1 and fr.kind[ins[1]] != Kind.IMM:
        x = x + _broadcast(x, fr.value(ins[1]).astype(F32, copy=False), "bias")
    elif len(ins) > 1:
        x = x + F32(fr.scalar(ins[1]))
    y = np.asarray(f(x, attrs.get("alpha", 0.0)), dtype=F32)
    fr.store(outs[0], y)
    accumulate(fr, i, y, attrs)  # reduce_res: the computed values, not the destination read back


_AXES = {"X": 1, "XY": 2, "XYZ": 3, "XYZW": 4, "XYZWC": 5, 0: 1, 1: 2, 2: 3, 3: 4}
_REDUCE = {"add": np.add, "max": np.maximum, "min": np.minimum, "mult": np.multiply,
           "bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or}


def h_tensor_reduce(fr: Frame, i: int) -> None:
    ins, _, outs = fr.split(i)
    _one(ins, "input")
    _one(outs, "output")
    attrs = fr.attrs(i)
    op = op_name(attrs.get("op", "add"))
    axis = attrs.get("axis", "X")
    if axis not in _AXES:
        raise PassError(f"reduction axis {axis!r} is not supported by the interpreter")
    x = fr.value(ins[0])
    k = min(_AXES[axis], max(x.ndim - 1, 0))  # never reduce across partitions
    axes = tuple(range(x.ndim - k, x.ndim))
    if op in ("abs_max", "abs_min"):
        r = (np.max if op == "abs_max" else np.min)(np.abs(x), axis=axes) if axes else np.abs(x)
    else:
        uf = _REDUCE.get(op)
        if uf is None:
            raise PassError(f"reduce op {op!r} is not supported by the interpreter")
        r = uf.reduce(x, axis=axes) if axes else x
    if fr.maybe_affine(attrs.get("negate", False)):
        r = -r
    fr.store(outs[0], r)


def h_matmul(fr: Frame, i: int) -> None:
    ins, _, outs = fr.split(i)
    _one(ins, "input", 2)
    _one(outs, "output")
    attrs = fr.attrs(i)
    st = fr.value(ins[0]).astype(F32, copy=False)
    mv = fr.value(ins[1]).astype(F32, copy=False)
    k = st.shape[0] if st.ndim else 1
    if (mv.shape[0] if mv.ndim else 1) != k:
        raise InputError(f"matmul contracts {k} stationary partitions with {mv.shape[0] if mv.ndim else 1} moving ones")
    st2, mv2 = st.reshape(k, -1), mv.reshape(k, -1)
    if fr.maybe_affine(attrs.get("is_transpose", False)):
        prod = _transposed(st2, mv2)
    else:
        # Products summed in float64 and rounded once to float32: deterministic and order-independent
        # to well below float32 precision.
        prod = (st2.T.astype(np.float64) @ mv2.astype(np.float64)).astype(F32)
    if "accumulation_flag" in attrs:
        accumulate = fr.maybe_affine(attrs["accumulation_flag"])
    else:  # KLR's spelling: start_tensor_calc starts a new sum (no accumulation)
        accumulate = not attrs.get("start_tensor_calc", True)
    if accumulate:
        old = fr.value(outs[0]).astype(F32, copy=False).reshape(-1)
        if old.size != prod.size:
            raise InputError(f"matmul result has {prod.size} elements but the PSUM tile has {old.size}")
        prod = old + prod.reshape(-1)
    fr.store(outs[0], prod)


def _transposed(st: np.ndarray, mv: np.ndarray) -> np.ndarray:
    """The PE's transpose mode (NeuronCore-v3 on: bit-accurate): with a moving tile that picks one row per
    column (the identity, or a permutation of it), ``out[m, n] = st[k, m]`` for the ``k`` that column ``n``
    picks -- the value moved, not multiplied, so NaN and infinities pass through (``-inf * 0`` made every
    masked attention row NaN)."""
    ones = mv == 1
    if not ((ones | (mv == 0)).all() and (ones.sum(axis=0) == 1).all()):
        raise InputError("a matmul in transpose mode needs a moving tile of 0s and 1s with one 1 per column "
                         "(an identity or a permutation)")
    return st[np.argmax(ones, axis=0), :].T.astype(F32)


def h_memset(fr: Frame, i: int) -> None:
    _, _, outs = fr.split(i)
    _one(outs, "output")
    attrs = fr.attrs(i)
    mode = attrs.get("mode", "Const")
    if mode not in ("Const", 0):
        raise PassError(f"Memset mode {mode!r} is not supported by the interpreter")
    c = fr.maybe_affine(attrs.get("constant", 0))
    acc = fr.access(outs[0])
    dt = fr.dtype[outs[0]]
    if DT_CLASS[dt] == RAW:
        if c != 0:
            raise unsupported(dt)
        fr.store_raw(outs[0], np.zeros(acc.count, dtype=acc.npdt))
        return
    v = const(c, is_int(dt))
    fr.store(outs[0], np.full(acc.count, v, dtype=v.dtype))


def h_iota(fr: Frame, i: int) -> None:
    _, _, outs = fr.split(i)
    _one(outs, "output")
    attrs = fr.attrs(i)
    base = int(fr.maybe_affine(attrs.get("base", 0)))
    pattern = [tuple(p) for p in attrs.get("pattern", ())]
    cm = int(fr.maybe_affine(attrs.get("channel_multiplier", 0)))
    acc = fr.access(outs[0])
    parts = acc.shape[0] if acc.shape else 1
    vals = np.full((parts,) + tuple(int(n) for _, n in pattern), base, dtype=np.int64)
    nd = vals.ndim
    vals += (np.arange(parts, dtype=np.int64) * cm).reshape((parts,) + (1,) * (nd - 1))
    for k, (s, n) in enumerate(pattern):
        shape = [1] * nd
        shape[k + 1] = int(n)
        vals += (np.arange(int(n), dtype=np.int64) * int(s)).reshape(shape)
    fr.store(outs[0], vals)


# --------------------------------------------------------------------------- registers


def _wrap64(v: int, bits: int = 64) -> int:
    """``v`` as a two's-complement register of ``bits`` bits holds it."""
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >= 1 << (bits - 1) else v


def _as_int(v) -> int:
    if isinstance(v, float):
        if math.isnan(v):
            return 0
        return int(np.rint(v))
    return int(v)


def h_register_move(fr: Frame, i: int) -> None:
    ins, _, outs = fr.split(i)
    _one(ins, "input")
    _one(outs, "output")
    fr.m.regs[fr.reg_name(outs[0])] = _wrap64(_as_int(fr.scalar(ins[0])))


def h_register_alu(fr: Frame, i: int) -> None:
    ins, _, outs = fr.split(i)
    _one(ins, "input", 2)
    _one(outs, "output")
    a, b = _as_int(fr.scalar(ins[0])), _as_int(fr.scalar(ins[1]))
    attrs = fr.attrs(i)
    r = alu(attrs.get("op", "add"), np.asarray(a, np.int64), np.asarray(b, np.int64)).item()
    # a 32-bit register operation wraps at 32 bits
    fr.m.regs[fr.reg_name(outs[0])] = _wrap64(_as_int(r), 32 if attrs.get("is_64bit", True) is False else 64)


def h_tensor_load(fr: Frame, i: int) -> None:
    ins, _, outs = fr.split(i)
    _one(ins, "input")
    _one(outs, "output")
    v = fr.value(ins[0]).reshape(-1)
    if v.size != 1:
        raise InputError(f"TensorLoad reads {v.size} elements; a register takes one")
    fr.m.regs[fr.reg_name(outs[0])] = _wrap64(_as_int(v[0].item()))


def h_tensor_save(fr: Frame, i: int) -> None:
    ins, _, outs = fr.split(i)
    _one(ins, "input")
    _one(outs, "output")
    v = _as_int(fr.scalar(ins[0]))
    acc = fr.access(outs[0])
    if acc.count != 1:
        raise InputError(f"TensorSave writes a register into {acc.count} elements; expected one")
    fr.store(outs[0], np.array([v], dtype=np.int64))


def h_nothing(fr: Frame, i: int) -> None:
    return None


HANDLERS: dict[int, Callable[[Frame, int], None]] = {
    Op.DMACopy: h_copy, Op.Load: h_copy, Op.Save: h_copy, Op.TensorCopy: h_copy, Op.GenericCopy: h_copy,
    Op.TensorTensor: h_tensor_tensor,
    Op.TensorScalar: h_tensor_scalar,
    Op.TensorScalarPtr: h_tensor_scalar_ptr,
    Op.Activation: h_activation,
    Op.TensorReduce: h_tensor_reduce,
    Op.Matmult: h_matmul,
    Op.Memset: h_memset,
    Op.Iota: h_iota,
    Op.RegisterMove: h_register_move,
    Op.RegisterAlu: h_register_alu,
    Op.TensorLoad: h_tensor_load,
    Op.TensorSave: h_tensor_save,
    Op.NoOp: h_nothing, Op.CoreBarrier: h_nothing,
    16: h_nothing,  # Drain
    15: h_nothing,  # AllEngineBarrier
    80: h_nothing,  # BranchHint
    77: h_nothing,  # Terminator (the end of a block: fall through)
}

# The NKI ISA instructions beyond the core set (sim/ops_isa.py; it builds on the helpers above).
from tusk.sim.ops_isa import ISA_HANDLERS  # noqa: E402

HANDLERS.update(ISA_HANDLERS)
