"""``nl`` buffers, constants, data movement helpers and the loop forms of both NKI generations.

``language`` re-exports every public name here.  Constants are built on chip
from the kernel's own data while tracing (memsets of runs of equal values, an
``iota`` plus a column for index tables, ``iota`` + compare for identities), so a
KLR file needs no side files.
"""

from __future__ import annotations

import contextlib
import inspect
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from tusk.frontend.errors import unsupported
from tusk.frontend.nki import language as nl
from tusk.frontend.tensors import PARTITIONS, Dtype, DynSlice, Tensor, View, as_dtype
from tusk.frontend.tracer import current

__all__ = [
    "atomic_rmw",
    "bf16",
    "broadcast_to",
    "dropout",
    "ds",
    "dynamic_range",
    "empty_like",
    "expand_dims",
    "finfo",
    "fori_loop",
    "fp16",
    "fp32",
    "full_like",
    "iinfo",
    "is_hbm",
    "is_on_chip",
    "is_psum",
    "is_sbuf",
    "load_transpose2d",
    "loop_reduce",
    "nc",
    "no_reorder",
    "ones_like",
    "rand",
    "random_seed",
    "shared_constant",
    "shared_identity_matrix",
    "spmd_dim",
    "while_loop",
]

# runs of memsets one constant may take; beyond it the kernel should load its constant from an input
MAX_CONSTANT_RUNS = 4096


def ds(start: Any, size: Any) -> DynSlice:
    """``nl.ds(start, size)``: ``t[nl.ds(i * 128, 128)]`` is ``t[i * 128:i * 128 + 128]``."""
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or int(size) <= 0:
        raise unsupported(f"nl.ds size {size!r} (a positive Python int)")
    return DynSlice(start, int(size))


def broadcast_to(x: Any, shape: Any, dtype: Any = None, **kw: Any) -> View:
    nl._no_keywords("nl.broadcast_to", kw)
    out = nl._broadcast_to(nl._tile(x, "nl.broadcast_to"), nl.as_shape(shape))
    return out if dtype is None or nl.as_dtype(dtype) == out.dtype else nl.copy(out, dtype=dtype)


def expand_dims(x: Any, axis: int, **kw: Any) -> View:
    nl._no_keywords("nl.expand_dims", kw)
    v = x._user_view() if isinstance(x, Tensor) else x
    if not isinstance(v, View):
        raise unsupported(f"nl.expand_dims of {type(x).__name__}")
    return v.expand_dim(axis)


def _like(x: Any, what: str) -> tuple[tuple[int, ...], Any, str]:
    if not isinstance(x, (View, Tensor)):
        raise unsupported(f"{what} of {type(x).__name__} (a tensor or tile)")
    return tuple(x.shape), x.dtype, x.memory


def empty_like(x: Any, dtype: Any = None, buffer: Any = None, name: str = "", **kw: Any) -> Tensor:
    nl._no_keywords("nl.empty_like", kw)
    shape, dt, mem = _like(x, "nl.empty_like")
    return nl.ndarray(shape, dtype or dt, buffer if buffer is not None else mem, name)


def ones_like(x: Any, dtype: Any = None, buffer: Any = None, name: str = "", **kw: Any) -> Tensor:
    nl._no_keywords("nl.ones_like", kw)
    shape, dt, _ = _like(x, "nl.ones_like")
    return nl.full(shape, 1, dtype or dt, buffer, name)


def full_like(x: Any, fill_value: Any, dtype: Any = None, buffer: Any = None, name: str = "", **kw: Any) -> Tensor:
    nl._no_keywords("nl.full_like", kw)
    shape, dt, _ = _like(x, "nl.full_like")
    return nl.full(shape, fill_value, dtype or dt, buffer, name)


# ---------------------------------------------------------------------------- constants
def shared_identity_matrix(n: int = PARTITIONS, dtype: Any = "uint8", dst: Any = None, **kw: Any) -> View:
    """An [n, n] identity tile: ``iota(p - j)`` compared with 0."""
    nl._no_keywords("nl.shared_identity_matrix", kw)
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= PARTITIONS:
        raise unsupported(f"nl.shared_identity_matrix(n={n!r}) (1 to {PARTITIONS})")
    tr = current()
    if dst is None:
        out = tr.tile((n, n), as_dtype(dtype))
        out.tensor.shared_constant = True  # type: ignore[attr-defined]  # nl.load of it is a copy (1.x)
    else:
        out = nl._tile(dst, "nl.shared_identity_matrix dst")
        if out.shape != (n, n):
            raise unsupported(f"nl.shared_identity_matrix dst of shape {list(out.shape)} (expected [{n}, {n}])")
    diff = tr.tile((n, n), nl.int32)
    tr.op("iota", (), (diff,), dst=diff, offset=0, pattern=[(-1, n)], channel_multiplier=1)
    tr.op("tensor_scalar", (diff,), (out,), dst=out, src=diff, op0="is_equal", imm0=0, reverse0=False, op1=None,
          imm1=None, reverse1=False)
    return out


def shared_constant(constant: Any, dtype: Any = None, **kw: Any) -> View:
    """An HBM tensor holding ``constant`` (a numpy array or a .npy path), written by the kernel at this line:
    row blocks of up to 128 partitions built on chip and copied out.  A block is memsets of its runs of equal
    values (a fill, then one memset per run of another value); a constant of more runs whose rows are each an
    integer progression of one common step (``np.arange(n).reshape(p, f)``, tiled or offset per row: index
    tables) is an iota of the step plus a column of each row's first value."""
    nl._no_keywords("nl.shared_constant", kw)
    if isinstance(constant, str):
        try:
            constant = np.load(constant, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise unsupported(f"nl.shared_constant({constant!r}): {e}") from None
    try:
        data = np.asarray(constant)
    except (TypeError, ValueError):
        raise unsupported(f"nl.shared_constant of {type(constant).__name__} (a numpy array)") from None
    if data.dtype.kind not in "biuf" or data.size == 0:
        raise unsupported(f"nl.shared_constant of a {data.dtype} array of shape {data.shape}")
    dt = as_dtype(dtype) if dtype is not None else as_dtype("uint8" if data.dtype.kind == "b" else data.dtype)
    tr = current()
    hbm = tr.new_tensor(tuple(data.shape) if data.ndim else (1,), dt, "shared_hbm", nl._assigned_name() or "const")
    rows = data.reshape(data.shape[0] if data.ndim >= 2 else 1, -1)  # the row-major elements, a row per partition
    blocks = [rows[r0:r0 + PARTITIONS] for r0 in range(0, rows.shape[0], PARTITIONS)]
    runs = [_runs(b) for b in blocks]
    step = None
    if sum(n for _, n in runs) > MAX_CONSTANT_RUNS:
        step = _row_progression(rows)
        if step is None:
            raise unsupported(f"nl.shared_constant of a {list(data.shape)} array with more than "
                              f"{MAX_CONSTANT_RUNS} runs of values whose rows are not integer progressions of one "
                              f"step (pass it as a kernel input)")
    for k, block in enumerate(blocks):
        tile = _memsets(block, dt, runs[k][0]) if step is None else _progressions(block, step, dt)
        r0 = k * PARTITIONS
        flat = View(hbm, nl.Affine(r0 * rows.shape[1]), ((rows.shape[1], block.shape[0]), (1, rows.shape[1])))
        tr.op("dma", (tile,), (flat,), dst=flat, src=tile)
    return hbm._user_view()


def _runs(block: np.ndarray) -> tuple[Any, int]:
    """(the block's most common value, how many runs of other values its rows hold)."""
    values, counts = np.unique(block, return_counts=True)
    common = values[int(np.argmax(counts))]
    other = block != common
    starts = other.copy()
    starts[:, 1:] &= block[:, 1:] != block[:, :-1]
    return common, int(starts.sum())


def _memsets(block: np.ndarray, dt: Dtype, common: Any) -> View:
    """A tile of ``block``: a fill with ``common`` (its most common value), then a memset per run of another
    value."""
    tile = current().tile(block.shape, dt)
    value = (lambda v: int(v)) if "int" in dt else (lambda v: float(v))
    nl._memset(tile, value(common))
    for p, row in enumerate(block):
        c = 0
        while c < row.size:
            if row[c] == common:
                c += 1
                continue
            end = c + 1
            while end < row.size and row[end] == row[c]:
                end += 1
            nl._memset(tile[p:p + 1, c:end], value(row[c]))
            c = end
    return tile


EXACT_IN_FLOAT32 = 1 << 24  # integers of at most this magnitude survive the ALU's float32 arithmetic exactly


def _row_progression(rows: np.ndarray) -> int | None:
    """The common integer step when every row is ``first + step * j`` (its first value integral), values
    exact through float32 arithmetic; else None."""
    if rows.shape[1] < 2 or rows.dtype.kind == "b":
        return None
    rows = rows.astype(np.float64)
    if not np.all(np.isfinite(rows)) or np.abs(rows).max() >= EXACT_IN_FLOAT32:
        return None
    step = rows[0, 1] - rows[0, 0]
    if step != int(step) or np.any(rows[:, 0] != np.round(rows[:, 0])):
        return None
    if not np.array_equal(rows, rows[:, :1] + step * np.arange(rows.shape[1])):
        return None
    return int(step)


def _progressions(block: np.ndarray, step: int, dt: Dtype) -> View:
    """A tile of ``block``, whose rows are ``first + step * j``: an iota of ``step * j`` plus the column of
    first values (itself memsets: at most one per partition)."""
    tr = current()
    ramp = tr.tile(block.shape, Dtype("int32"))
    tr.op("iota", (), (ramp,), dst=ramp, offset=0, pattern=[(step, block.shape[1])], channel_multiplier=0)
    column = block[:, :1]
    first = _memsets(column, Dtype("float32" if "float" in dt else "int32"), _runs(column)[0])
    return nl._binary("add", ramp, first, dtype=dt)


# ---------------------------------------------------------------------------- data movement
def atomic_rmw(dst: Any, value: Any, op: Any, *, mask: Any = None, **kw: Any) -> None:
    """``dst = op(dst, value)`` in HBM by one accumulating DMA (``np.add`` only); a repeated index adds each value.

    NKI documents the update as atomic: an index tile naming a row twice adds both values, one after the other
    (the interpreter applies such rows in index order)."""
    from tusk.frontend.nki import isa_ops as ops  # isa_ops imports language, which imports this module

    call = "nl.atomic_rmw"
    nl._no_keywords(call, kw)
    if ops.alu(op, f"{call} op") != "add":
        raise ops.refuse(call, "op", op, "NKI supports np.add only")
    d = nl._hbm(dst, f"{call} dst")
    if nl._is_number(value):
        v = current().tile(d.shape, d.dtype)
        nl._memset(v, value)
    else:
        v = nl._tile(value, f"{call} value")
    if v.dtype != d.dtype:  # the DMA adds values of dst's dtype
        v = nl.copy(v, dtype=d.dtype)
    d, v = nl._masked([d, v], mask)
    ops.dma_copy(call, d, v, accumulate=True)


def load_transpose2d(src: Any, dtype: Any = None, mask: Any = None, **kw: Any) -> View:
    """A [K, M] HBM view into a [M, K] tile: the DMA walks the source column by column."""
    nl._no_keywords("nl.load_transpose2d", kw)
    s = nl._hbm(src, "nl.load_transpose2d")
    if s.ndim != 2:
        raise unsupported(f"nl.load_transpose2d of a {s.ndim}-axis view (2 axes)")
    k, m = s.shape
    if m > PARTITIONS:
        raise unsupported(f"nl.load_transpose2d of a [{k}, {m}] view ({m} > {PARTITIONS} partitions after the "
                          "transpose)")
    if s.vector is not None or getattr(s, "scalar", None) is not None:
        # the transposed walk below would drop the index tile (a silent wrong result): gather, then transpose
        raise unsupported("nl.load_transpose2d of gathered rows or of a runtime-offset access (nl.load them, "
                          "then transpose on chip)")
    tr = current()
    dst = tr.tile((m, k), s.dtype)
    s.check_bounds()
    walk = View(s.tensor, s.offset, (s.dims[1], s.dims[0]))
    d, w = nl._masked([dst, walk], mask)
    tr.op("dma", (w,), (d,), dst=d, src=w)
    return dst if dtype is None or as_dtype(dtype) == dst.dtype else nl.copy(dst, dtype=dtype)


# the value a reduction that nothing started yet starts from (the operator's identity)
REDUCE_START = {"add": 0.0, "mult": 1.0, "max": float("-inf"), "min": float("inf")}


class LoopReduce:
    """``acc[...] = nl.loop_reduce(x, op, loop_indices)``: ``acc = acc op x``, once per iteration.  Into
    elements nothing wrote yet (an ``nl.ndarray`` accumulator, as compiler-printed kernels declare it), the
    reduction starts from the operator's identity, filled once before the loop it runs over, as a ``+=`` of a
    matmul into an unwritten PSUM tile starts from zero."""

    def __init__(self, x: View, op: str, mask: Any):
        self.x, self.op, self.mask = x, op, mask

    def _assign_into(self, dst: View) -> None:
        acc = nl._tile(dst, "nl.loop_reduce destination")
        if acc.shape != self.x.shape:
            raise unsupported(f"nl.loop_reduce of a {list(self.x.shape)} tile into a {list(acc.shape)} view")
        d, x = nl._masked([acc, self.x], self.mask)
        tr = current()
        if self.op in REDUCE_START and not nl.written_before(tr, d):
            from tusk.frontend.nki.isa_ops import fill_before_accumulation

            fill_before_accumulation(tr, d, REDUCE_START[self.op])
        tr.op("tensor_tensor", (d, x), (d,), dst=d, a=d, b=x, op=self.op)

    def __repr__(self) -> str:
        return "<nl.loop_reduce result: assign it into its accumulator, acc[...] = nl.loop_reduce(...)>"


def loop_reduce(x: Any, op: Any, loop_indices: Any, *, dtype: Any = None, mask: Any = None, **kw: Any) -> LoopReduce:
    nl._no_keywords("nl.loop_reduce", kw)
    from tusk.frontend.nki.isa_ops import alu as _alu
    return LoopReduce(nl._tile(x, "nl.loop_reduce"), _alu(op, "nl.loop_reduce"), mask)


# ---------------------------------------------------------------------------- loops
def fori_loop(lower: Any, upper: Any, body_fun: Callable[[Any], Any], step: int = 1, **kw: Any) -> None:
    """``for i in range(lower, upper, step): body_fun(i)`` as a dynamic loop (its body is traced once)."""
    unroll = kw.pop("unroll", False)
    nl._no_keywords("nl.fori_loop", kw)
    if not callable(body_fun):
        raise unsupported(f"nl.fori_loop body {body_fun!r} (a function of the loop index)")
    _takes_one_argument("nl.fori_loop", body_fun, "the loop index")
    from tusk.frontend.nki.isa_ops import NkiScalar
    for bound in (lower, upper):
        if isinstance(bound, NkiScalar) and bound.dtype != "int32":
            raise unsupported(f"nl.fori_loop bounded by an nl.{bound.dtype} NkiScalar (NKI: the trip-count "
                              "comparison has no 64-bit form)")
    if isinstance(lower, NkiScalar) and not unroll:
        # an NkiScalar start (NKI 0.7.0+): the loop counts j from 0 below upper - lower, and the body gets
        # i = lower + j, a scalar of its own (KLR's loop starts at a number)
        for j in nl._Range("fori_loop", (0, upper - lower, step)):
            body_fun(NkiScalar(j.name) + lower)
        return
    loop = range(*[int(nl.Affine.of(a)) for a in (lower, upper, step)]) if unroll \
        else nl._Range("fori_loop", (lower, upper, step))
    for i in loop:
        body_fun(i)


def dynamic_range(*args: Any, **kw: Any) -> Any:
    args = nl._range_args("dynamic_range", args, kw)
    nl._no_keywords("nl.dynamic_range", kw)
    return nl._Range("dynamic_range", args)


dynamic_range.__signature__ = nl._RANGE_SIGNATURE  # type: ignore[attr-defined]


def _takes_one_argument(what: str, body_fun: Any, arg: str) -> None:
    """A loop body is called with one argument: one that cannot take it is refused at the kernel's line (not a
    TypeError from inside Tusk's call)."""
    try:
        sig = inspect.signature(body_fun)
    except (TypeError, ValueError):  # a builtin without a signature: called as it is
        return
    try:
        sig.bind(None)
    except TypeError:
        name = getattr(body_fun, "__name__", type(body_fun).__name__)
        raise unsupported(f"{what} body {name}{sig} (it is called with one argument, {arg})") from None


def while_loop(init: Any, body_fun: Any, **kw: Any) -> None:
    """``r = init; while r != 0: r = body_fun(r)`` on a register condition read at run time (runtime_loop)."""
    nl._no_keywords("nl.while_loop", kw)
    if callable(body_fun):
        _takes_one_argument("nl.while_loop", body_fun, "the condition register")
    from tusk.frontend.nki.runtime_loop import while_loop as _while

    _while(init, body_fun)


def no_reorder() -> contextlib.AbstractContextManager:
    """``with nl.no_reorder():`` the scheduler keeps dependences; program order gives the same numbers."""
    return contextlib.nullcontext()


def spmd_dim(*dims: Any) -> int:
    """``kernel[nl.spmd_dim(nl.nc(2), 2)]``: the grid axis as the product of its parts."""
    return math.prod(int(d) for d in dims)


def nc(n: int) -> int:
    """``nl.nc(2)``: logical cores along a grid axis (Tusk runs every program instance)."""
    return int(n)


def is_hbm(buffer: Any) -> bool:
    return str(buffer) in ("hbm", "shared_hbm", "private_hbm")


def is_on_chip(buffer: Any) -> bool:
    return str(buffer) in ("sbuf", "psum")


def is_psum(buffer: Any) -> bool:
    return str(buffer) == "psum"


def is_sbuf(buffer: Any) -> bool:
    return str(buffer) == "sbuf"


# ---------------------------------------------------------------------------- random numbers
def rand(shape: Any, dtype: Any = "float32", buffer: Any = None, name: str = "", **kw: Any) -> Tensor:
    """Uniform values in [0, 1) (KLR ``rand2``; the interpreter's generator is seeded by nl.random_seed)."""
    nl._no_keywords("nl.rand", kw)
    nl._needs_back_half("rand2", "nl.rand")
    t = nl.ndarray(shape, dtype, buffer, name)
    if not t.on_chip:
        raise unsupported("nl.rand in HBM (generate an SBUF tile and nl.store it)")
    v = t.view()
    current().op("rand2", (), (v,), dst=v, min=0.0, max=1.0)
    return t


def random_seed(seed: Any, **kw: Any) -> None:
    nl._no_keywords("nl.random_seed", kw)
    nl._needs_back_half("set_rng_seed", "nl.random_seed")
    s = nl._tile(seed, "nl.random_seed")
    if s.elements != 1:
        raise unsupported(f"nl.random_seed of a {list(s.shape)} tile (a [1, 1] tile)")
    current().op("set_rng_seed", (s,), (), src=s)


def dropout(x: Any, rate: Any, dtype: Any = None, mask: Any = None, **kw: Any) -> View:
    nl._no_keywords("nl.dropout", kw)
    nl._needs_back_half("dropout", "nl.dropout")
    src = nl._tile(x, "nl.dropout")
    tr = current()
    dst = tr.tile(src.shape, nl._out_dtype(dtype, src))
    d, s = nl._masked([dst, src], mask)
    if nl._is_number(rate):
        threshold, reads = float(rate), (s,)
    else:
        threshold = nl._as_column(nl._tile(rate, "nl.dropout rate"))
        if not nl._column(threshold, s.shape[0]):
            raise unsupported(f"nl.dropout rate of shape {list(threshold.shape)} (a number or a [P, 1] column)")
        reads = (s, threshold)
    tr.op("dropout", reads, (d,), dst=d, src=s, thresholdType="DropRate", threshold=threshold)
    return dst


# ---------------------------------------------------------------------------- dtype limits (nl.fp32.min ...)
class fp32:
    min = float(np.finfo(np.float32).min)
    max = float(np.finfo(np.float32).max)


class fp16:
    min = float(np.finfo(np.float16).min)
    max = float(np.finfo(np.float16).max)


class bf16:
    min = -3.3895313892515355e38
    max = 3.3895313892515355e38


class _FloatInfo:
    def __init__(self, bits: int, eps: float, max_: float, tiny: float):
        self.bits, self.eps, self.max, self.min, self.tiny = bits, eps, max_, -max_, tiny
        self.smallest_normal = tiny

    def __repr__(self) -> str:
        return f"finfo(bits={self.bits}, min={self.min}, max={self.max}, eps={self.eps})"


def finfo(dtype: Any) -> Any:
    """``nl.finfo(nl.bfloat16).min`` ...: numpy's finfo, with bfloat16 and the float8 types added."""
    dt = as_dtype(dtype)
    special = {"bfloat16": _FloatInfo(16, 2.0 ** -7, 3.3895313892515355e38, 2.0 ** -126),
               "float8_e4m3": _FloatInfo(8, 2.0 ** -3, 240.0, 2.0 ** -6),
               "float8_e4m3fn": _FloatInfo(8, 2.0 ** -3, 448.0, 2.0 ** -6),
               "float8e5": _FloatInfo(8, 2.0 ** -2, 57344.0, 2.0 ** -14)}
    if dt in special:
        return special[dt]
    if "float" not in dt:
        raise unsupported(f"nl.finfo({dtype!r}) of an integer dtype (nl.iinfo)")
    return np.finfo(np.dtype(str(dt)))


def iinfo(dtype: Any) -> Any:
    dt = as_dtype(dtype)
    if "int" not in dt:
        raise unsupported(f"nl.iinfo({dtype!r}) of a float dtype (nl.finfo)")
    return np.iinfo(np.dtype(str(dt)))
