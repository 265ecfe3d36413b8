"""The ``nki.isa`` operations, once for both API generations: each writes a destination view it is given.

NKI 2.x calls pass that destination (``dst``); NKI 1.x calls return a new tile, which
:mod:`tusk.frontend.nki.isa_v1` makes first and then hands here.  Every function records operations on
the current trace: existing KLR operators where one instruction says it, a short sequence of them where
that gives the same numbers (noted per function), or a KLR operator of its own (:func:`native`) whose
writer lives in ``frontend/emit.py``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tusk.frontend import scalar_offset
from tusk.frontend.affine import Affine
from tusk.frontend.errors import TraceError, Unsupported, current_user_line, unsupported
from tusk.frontend.nki import isa_accum
from tusk.frontend.nki import language as nl
from tusk.frontend.nki.isa_signature import engine, oob_mode, reduce_cmd
from tusk.frontend.tensors import PARTITIONS, Tensor, View, as_dtype
from tusk.frontend.tracer import LoopBegin, Op, current

# nl functions and numpy ufuncs as ALU operators (op0=np.add and op0=nl.add both appear)
_ALU_BY_NAME = {**nl._ALU, "max": "max", "min": "min", "rsqrt": "rsqrt", "sum": "add", "prod": "mult",
                "true_divide": "divide", "mult": "mult", "bypass": "bypass", "amax": "max", "amin": "min",
                "abs": "abs", "mod": "mod", "remainder": "mod", "invert": "bitwise_not",
                "bitwise_not": "bitwise_not", "left_shift": "logical_shift_left",
                "right_shift": "arith_shift_right", "logical_shift_left": "logical_shift_left",
                "logical_shift_right": "logical_shift_right"}
_ACTIVATION_BY_NAME = {"exp": "exp", "log": "log", "tanh": "tanh", "sqrt": "sqrt", "abs": "abs", "sin": "sin",
                       "arctan": "arctan", "sign": "sign", "square": "square", "copy": "copy",
                       "reciprocal": "reciprocal"}


def op_label(op: Any) -> str:
    """An operator as a kernel spells it (``nl.square``, ``np.add``), not its Python repr."""
    name = getattr(op, "__name__", None)
    if not callable(op) or not isinstance(name, str):
        return repr(op)
    module = getattr(op, "__module__", None) or ""
    if module.startswith("tusk.frontend"):
        return f"nl.{name}"
    if module.startswith("numpy"):
        return f"np.{name}"
    return name


def alu(op: Any, what: str) -> str:
    name = getattr(op, "__name__", None) or str(op)
    out = _ALU_BY_NAME.get(name)
    if out is None:
        raise unsupported(f"{what} op {op_label(op)} (not an ALU operator Tusk has: nl.add, nl.maximum, "
                          "nl.bitwise_and, ...)")
    return out


def activation_func(op: Any, what: str) -> str:
    if op is nl.prelu:
        raise unsupported(f"{what} op nl.prelu (its negative slope is nisa.activate2's relu_param; "
                          "nisa.activate2(op=nl.prelu, relu_param=...) computes it)")
    func = getattr(op, "_activation", None) or _ACTIVATION_BY_NAME.get(getattr(op, "__name__", str(op)))
    if func is None:
        raise unsupported(f"{what} op {op_label(op)} (an nl activation function)")
    return func


def tile(x: Any, what: str) -> View:
    return nl._tile(x, what)


def any_view(x: Any, what: str) -> View:
    """A tensor reference anywhere (HBM or on chip): what DMA calls take."""
    if isinstance(x, Tensor):
        x = x._user_view()
    if not isinstance(x, View):
        raise unsupported(f"{what}: expected a tensor, got {type(x).__name__}")
    return x


def number(x: Any) -> bool:
    """A Python number; a loop index is one too (NKI 2.x loops are Python's range): its loop unrolls, so the
    trace sees each iteration's int (``operand0=k * 128`` in an nl.affine_range loop)."""
    if isinstance(x, Affine):
        int(x)  # unrolls the loop whose index it depends on (a re-trace); a static one is its value
        return True
    return nl._is_number(x)


def operand(x: Any, rows: int, what: str) -> Any:
    """A number or a [P, 1] column (tensor_scalar's operands, activation's bias ...)."""
    if number(x):
        return float(x) if isinstance(x, (float, np.floating)) else int(x)
    v = tile(x, what)
    if not nl._column(v, rows):
        raise unsupported(f"{what} of shape {list(v.shape)} (a number or a [{rows}, 1] column)")
    return nl._as_column(v)


def free(v: View) -> int:
    return math.prod(v.shape[1:])


def same_size(call: str, dst: View, src: View, what: str = "data") -> None:
    """An elementwise instruction: same partitions, same elements per partition."""
    if dst.shape[0] != src.shape[0] or free(dst) != free(src):
        raise unsupported(f"{call}: dst {list(dst.shape)} and {what} {list(src.shape)} differ in partitions "
                          "or elements per partition")


def fresh(shape: tuple[int, ...], dtype: Any = "float32", memory: str = "sbuf") -> View:
    return current().tile(shape, as_dtype(dtype), memory)


def reads(*xs: Any) -> tuple[View, ...]:
    return tuple(x for x in xs if isinstance(x, View))


# ---------------------------------------------------------------------------- data movement
def dma_copy(call: str, dst: View, src: View, *, oob: str = "error", accumulate: bool = False) -> None:
    """``dst = src`` by DMA (``accumulate``: ``dst += src``, a read-modify-write DMA); dtypes convert through
    float32 (an ncCopy on chip beside the DMA).  ``oob``: :func:`dma_bounds`."""
    dst, src = dma_bounds(call, dst, src, oob)
    skip = {"oob": "skip"} if oob == "skip" and any(_runtime_address(v) for v in (src, dst)) else {}
    if accumulate:
        if src.dtype != dst.dtype or dst.shape != src.shape and dst.elements != src.elements:
            raise unsupported(f"{call} dst_rmw_op of a {src.dtype}{list(src.shape)} source into a "
                              f"{dst.dtype}{list(dst.shape)} destination (the same dtype and size)")
        current().op("dma", (src, dst, *scalar_offset.scalars(src, dst)), (dst,), dst=dst, src=src,
                     accumulate=True, **skip)
        return
    if dst.shape != src.shape and (dst.elements != src.elements or not _same_stream(dst, src)):
        dst, src = _one_shape(call, dst, src)
    if src.ndim != dst.ndim:  # a (P,) column and its (P, 1) tile: one shape for both accesses
        src, dst = (src.with_dims(src.dims + ((1, 1),)), dst) if src.ndim < dst.ndim else \
            (src, dst.with_dims(dst.dims + ((1, 1),)))
    tr = current()
    if src.dtype != dst.dtype:
        if dst.tensor.on_chip:
            # the stage is laid out as dst (a tile the copy can cast into): src may be an HBM view of any
            # shape that streams the same elements (a 1-D row bias[0, 0:256] into sb[0, :256])
            stage = fresh(dst.shape, src.dtype)
            if skip:
                # the rows the DMA skips keep dst's values: the stage starts as dst (exact in src's dtype)
                if not _widens(dst.dtype, src.dtype):
                    raise unsupported(f"{call} oob_mode=skip of a {src.dtype} source with runtime indices into a "
                                      f"{dst.dtype} tile (the skipped rows would be rounded through {src.dtype})")
                tr.op("copy", (dst,), (stage,), dst=stage, src=dst)
            tr.op("dma", (src, *scalar_offset.scalars(src)), (stage,), dst=stage, src=src, **skip)
            tr.op("copy", (stage,), (dst,), dst=dst, src=stage)
            return
        if src.tensor.on_chip:
            stage = fresh(src.shape, dst.dtype)
            tr.op("copy", (src,), (stage,), dst=stage, src=src)
            src = stage
        else:
            raise unsupported(f"{call} from {src.dtype} HBM to {dst.dtype} HBM (stage it through SBUF)")
    tr.op("dma", (src, *scalar_offset.scalars(src, dst)), (dst,), dst=dst, src=src, **skip)


def _widens(narrow: str, wide: str) -> bool:
    """Whether every value of dtype ``narrow`` is exact in dtype ``wide`` (a round trip keeps it)."""
    if narrow == wide:
        return True
    floats = {"bfloat16": (8, 7), "float16": (5, 10), "float32": (8, 23)}
    if narrow in floats and wide in floats:
        return all(a <= b for a, b in zip(floats[narrow], floats[wide]))
    ints = {"int8": 8, "int16": 16, "int32": 32, "uint8": 8, "uint16": 16, "uint32": 32}
    if narrow in ints and wide in ints:
        return narrow.startswith("u") == wide.startswith("u") and ints[narrow] <= ints[wide] or \
            narrow.startswith("u") and not wide.startswith("u") and ints[narrow] < ints[wide]
    return False


def _runtime_address(v: View) -> bool:
    """Whether a DMA side is addressed at run time (an index tile's rows or a runtime offset): what
    ``oob_mode=skip`` bounds when the DMA runs."""
    return v.vector is not None or getattr(v, "scalar", None) is not None


MAX_DMA_COMPUTE_SOURCES = 16


def dma_compute(call: str, dst: View, srcs: list[View], reduce_op: Any, scales: Any, *,
                unique_indices: Any = True, oob: str = "error") -> None:
    """``dst = srcs[0] * scales[0] + srcs[1] * scales[1] + ...`` by the DMA engines' compute, in float32 and
    cast to dst's dtype once (KLR ``dmaCompute``).  NKI allows only ``nl.add`` and scales of 1.0; every
    tensor holds the same number of elements, taken in row-major order.  The read-modify-write forms (a
    source with a vector offset: scatter / gather accumulation): :func:`_dma_compute_rmw`."""
    op = alu(reduce_op, f"{call} reduce_op")
    if op != "add":
        raise unsupported(f"{call} reduce_op={getattr(reduce_op, '__name__', reduce_op)} (NKI supports nl.add only)")
    if not 1 <= len(srcs) <= MAX_DMA_COMPUTE_SOURCES:
        raise unsupported(f"{call} with {len(srcs)} sources (1 to {MAX_DMA_COMPUTE_SOURCES})")
    factors = [1.0] * len(srcs) if scales is None else list(scales)
    if len(factors) != len(srcs) or not all(number(f) and float(f) == 1.0 for f in factors):
        raise unsupported(f"{call} scales={scales!r}: NKI requires one scale of 1.0 per source (or None)")
    if any(v.vector is not None for v in (dst, *srcs)):
        _dma_compute_rmw(call, dst, srcs, unique_indices, oob)
        return
    for k, v in enumerate((dst, *srcs)):
        what = "dst" if k == 0 else f"srcs[{k - 1}]"
        if getattr(v, "scalar", None) is not None:  # a vector offset went to _dma_compute_rmw above
            raise unsupported(f"{call} {what} with an indirect or runtime offset (the scatter / gather "
                              "read-modify-write forms)")
        if v.elements != dst.elements:
            raise unsupported(f"{call} {what} has {v.elements} elements, dst {dst.elements} (they must match)")
        v.check_bounds()
    native(call, "dma_compute", tuple(srcs), (dst,), dst=dst, srcs=list(srcs), scales=[1.0] * len(srcs),
           reduceOp=op)


def _dma_compute_rmw(call: str, dst: View, srcs: list[View], unique_indices: Any, oob: str) -> None:
    """``dma_compute``'s read-modify-write forms (NKI 0.3.0+, the successor of 0.2.0's
    ``dma_copy(dst_rmw_op=nl.add)``), with two sources, one of them ``dst`` itself:

    * scatter: ``dst`` in HBM with a vector offset, one source that same access, the other data in SBUF:
      ``dst[indices] += data``;
    * gather: ``dst`` in SBUF, one source in HBM with a vector offset, the other ``dst``:
      ``dst += src[indices]``.

    Traced as the DMA gather of the indexed rows into a float32 tile, their float32 sum with the other
    source (cast to dst's dtype once, as the DMA engine computes it) and, for the scatter, the DMA scatter
    back.  NKI requires unique indices (each row is read and written once)."""
    if len(srcs) != 2:
        raise unsupported(f"{call} with a vector offset and {len(srcs)} sources (the read-modify-write forms "
                          "take exactly 2: dst itself and the data)")
    if unique_indices is not True:
        raise refuse(call, "unique_indices", unique_indices, "NKI supports only unique indices with a vector "
                     "offset")

    def same(a: View, b: View) -> bool:
        return a.tensor is b.tensor and a.offset == b.offset and a.dims == b.dims and a.vector is b.vector

    def gathered(shape: tuple[int, ...], dtype: Any, src: View) -> View:
        """The rows of ``src`` as they are stored (no cast); with oob skip, a skipped row reads as 0."""
        got = fresh(shape, dtype)
        if oob == "skip":
            nl._memset(got, 0.0)
        dma_copy(call, got, src, oob=oob)
        return got

    mine = [k for k, v in enumerate(srcs) if same(v, dst)]
    if dst.vector is not None:  # scatter
        if dst.tensor.memory == "sbuf" or not mine:
            raise unsupported(f"{call}: a destination with a vector offset is the scatter form: dst in HBM "
                              "and one of the two sources that same access (dst[indices] += data)")
        data = srcs[1 - mine[0]]
        if data.vector is not None or data.tensor.memory != "sbuf":
            raise unsupported(f"{call}: the scatter form adds data in SBUF without a vector offset")
        # the rows are gathered as they are stored (no cast: a skipped row of a cast stage would be rounded
        # through dst's dtype; here it is never read back, the scatter skips it again)
        old = gathered(data.shape, dst.dtype, dst)
        total = fresh(data.shape, dst.dtype)
        tensor_tensor(call, total, old, data, nl.add)
        dma_copy(call, dst, total, oob=oob)
        return
    if dst.tensor.memory != "sbuf":
        raise unsupported(f"{call}: the gather form (a source with a vector offset) accumulates into dst in "
                          "SBUF")
    if not mine or srcs[1 - mine[0]].vector is None:
        raise unsupported(f"{call}: the gather form adds a source with a vector offset to dst itself "
                          "(dst += src[indices])")
    src = srcs[1 - mine[0]]
    got = gathered(dst.shape, src.dtype, src)  # a skipped row adds nothing; the sum below is float32
    tensor_tensor(call, dst, got, dst, nl.add)


def _one_shape(call: str, dst: View, src: View) -> tuple[View, View]:
    """A DMA between accesses of the same first dim and size but other free shapes ([K, BH, V] of an
    ``ap`` into a [K, BH * V] tile): element k of one row to element k of the other, by one of the two views
    reshaped to the other's shape (row-major; refused when neither can be)."""
    if dst.elements == src.elements and dst.shape[:1] == src.shape[:1]:
        for a, b in ((dst, src), (src, dst)):
            try:
                shaped = a.reshape(b.shape)
            except TraceError:
                continue
            return (shaped, src) if a is dst else (dst, shaped)
    raise unsupported(f"{call} of a {list(src.shape)} source into a {list(dst.shape)} destination")


def _squeezed(v: View) -> tuple[int, ...]:
    return tuple(n for n in v.shape if n != 1)


def _same_stream(a: View, b: View) -> bool:
    """Two accesses that walk the same shape once unit dims go and contiguous dims join: a DMA moves
    element k of one to element k of the other ([P, 4, 128] tile <-> [P, 512] tensor rows)."""
    return _squeezed(a) == _squeezed(b) or _rows(a) == _rows(b)


def _rows(v: View) -> tuple[int, ...]:
    """The shape of ``v`` with its first dim kept and the rest joined where contiguous, unit dims dropped."""
    out = [v.dims[0]]
    for stride, n in v.dims[1:]:
        if n == 1:
            continue
        if len(out) > 1 and out[-1][0] == stride * n:
            out[-1] = (stride, out[-1][1] * n)
        else:
            out.append((stride, n))
    return tuple(n for _, n in out)


def tensor_copy(call: str, dst: View, src: View) -> None:
    same_size(call, dst, src, "src")
    current().op("copy", (src,), (dst,), dst=dst, src=src)


def memset(call: str, dst: View, value: Any) -> None:
    if not dst.tensor.on_chip:
        raise unsupported(f"{call} of HBM tensor {dst.tensor.name} (memset an SBUF tile and copy it)")
    nl._memset(dst, value)


def iota(call: str, dst: View, pattern: Any, offset: Any, channel_multiplier: Any) -> None:
    try:
        pairs = [(int(step), int(num)) for step, num in pattern]
    except (TypeError, ValueError):
        raise unsupported(f"{call} pattern={pattern!r} (a list of [step, num] pairs)") from None
    if not pairs or len(pairs) > 4 or any(n <= 0 for _, n in pairs):
        raise unsupported(f"{call} pattern={pattern!r} (one to four [step, num] pairs, num >= 1)")
    if math.prod(n for _, n in pairs) != free(dst):
        raise unsupported(f"{call}: pattern {pattern!r} makes {math.prod(n for _, n in pairs)} values per "
                          f"partition; dst {list(dst.shape)} holds {free(dst)}")
    if not number(offset) or not number(channel_multiplier):
        raise unsupported(f"{call} offset={offset!r} channel_multiplier={channel_multiplier!r} (ints)")
    current().op("iota", (), (dst,), dst=dst, offset=int(offset), pattern=pairs,
                 channel_multiplier=int(channel_multiplier))


# ---------------------------------------------------------------------------- elementwise
def tensor_tensor(call: str, dst: View, a: View, b: View, op: Any) -> None:
    if a.shape[0] == b.shape[0] and free(a) != free(b) and 1 in (free(a), free(b)):
        # a [P, 1] operand broadcast along the free axis (as numpy would): the column is tensor_scalar's operand
        tile_, column, reverse = (a, b, False) if free(b) == 1 else (b, a, True)
        tensor_scalar(call, dst, tile_, op, column, reverse, None, None, False)
        return
    if a.shape[0] != b.shape[0] or free(a) != free(b):
        raise unsupported(f"{call} of {list(a.shape)} and {list(b.shape)} tiles")
    same_size(call, dst, a, "data1")
    current().op("tensor_tensor", (a, b), (dst,), dst=dst, a=a, b=b, op=alu(op, call))


def tensor_scalar(call: str, dst: View, src: View, op0: Any, operand0: Any, reverse0: bool, op1: Any,
                  operand1: Any, reverse1: bool) -> None:
    same_size(call, dst, src)
    src, op0, operand0, reverse0 = unary_op0(call, src, op0, operand0, reverse0)
    if callable(op1) and getattr(op1, "__name__", None) in _UNARY_OP0:
        raise refuse(call, "op1", op_label(op1), "NKI takes square, relu and reciprocal as op0, the first "
                     "operator, only")
    operand0 = _unary_dummy(op0, operand0, call)
    operand1 = operand1 if op1 is None else _unary_dummy(op1, operand1, call)
    o0 = operand(operand0, src.shape[0], f"{call} operand0")
    o1 = None if op1 is None else operand(operand1, src.shape[0], f"{call} operand1")
    current().op("tensor_scalar", reads(src, o0, o1), (dst,), dst=dst, src=src, op0=alu(op0, call), imm0=o0,
                 reverse0=bool(reverse0), op1=None if op1 is None else alu(op1, call), imm1=o1,
                 reverse1=bool(reverse1))


UNARY_ALU = frozenset({"abs", "rsqrt", "bypass", "bitwise_not"})  # ALU operators that ignore their operand
# the "Arithmetic Unary" operators of NKI's ALU table that KLR's AluOp lacks, as tensor_scalar's and
# tensor_scalar_reduce's op0 (NKI 0.4.0: square and relu on trn3): each is (an ALU operator, its operand,
# reversed) that computes the same float32 numbers; square multiplies data by itself first (unary_op0)
_UNARY_OP0 = {"square": ("bypass", 0.0, False), "relu": ("max", 0.0, False), "reciprocal": ("divide", 1.0, True)}


def unary_op0(call: str, data: View, op0: Any, operand0: Any, reverse0: bool) -> tuple[View, Any, Any, bool]:
    """``op0`` one of NKI's unary arithmetic operators KLR has no ALU operator for (``nl.square``,
    ``nl.relu``, ``nl.reciprocal``): the ALU operator, operand and order that compute it (``relu`` is ``max``
    with 0.0, ``reciprocal`` is 1.0 ``divide``d by data) and, for ``square``, the data it reads: data times
    itself in a float32 tile (a tensorTensor on the Vector engine), which ``bypass`` passes on.  NKI's
    operand0 of a unary operator "must be None or 0"; it is ignored, as is reverse0.  Any other op0 comes
    back as it was."""
    name = getattr(op0, "__name__", None)
    if not callable(op0) or name not in _UNARY_OP0:
        return data, op0, operand0, reverse0
    if not (operand0 is None or (number(operand0) and float(operand0) == 0.0)):
        raise refuse(call, "operand0", operand0, f"op0={op_label(op0)} is a unary operator: NKI requires "
                     "operand0 None or 0")
    alu_op, imm, rev = _UNARY_OP0[name]
    if name == "square":
        sq = fresh(data.shape)
        current().op("tensor_tensor", (data, data), (sq,), dst=sq, a=data, b=data, op="mult")
        data = sq
    return data, alu_op, imm, rev


def _unary_dummy(op: Any, operand_: Any, call: str) -> Any:
    """The operand of a unary ALU operator, which it ignores: ``None`` stands for the dummy 0.0 NKI's examples
    write (``tensor_scalar(op0=nl.rsqrt, operand0=None)``)."""
    return 0.0 if operand_ is None and alu(op, call) in UNARY_ALU else operand_


REVERSE = {(False, False): "none", (True, False): "first", (False, True): "second", (True, True): "both"}


def scalar_tensor_tensor(call: str, dst: View, data: View, op0: Any, operand0: Any, op1: Any, operand1: Any,
                         reverse0: bool, reverse1: bool) -> None:
    """``(data op0 operand0) op1 operand1`` (KLR ncScalarTensorTensor)."""
    same_size(call, dst, data)
    rows = data.shape[0]
    o0 = imm_or_column(operand0, rows, f"{call} operand0")
    o1 = operand1 if number(operand1) else tile(operand1, f"{call} operand1")
    if isinstance(o1, View):
        same_size(call, dst, o1, "operand1")
    native(call, "scalar_tensor_tensor", reads(data, o0, o1), (dst,), dst=dst, data=data, src0=o0,
           src1=float(o1) if number(o1) else o1, op0=alu(op0, call), op1=alu(op1, call),
           reverseOperands=REVERSE[bool(reverse0), bool(reverse1)])


STT_COMMANDS = "NKI 0.7.0 documents idle, reset_reduce and reduce for scalar_tensor_tensor's reduction"


def scalar_tensor_tensor_accumulating(call: str, dst: View, data: View, op0: Any, operand0: Any, op1: Any,
                                      operand1: Any, reverse0: bool, reverse1: bool, cmd: Any, reduce_op: Any,
                                      reduce_res: Any) -> None:
    """NKI 0.7.0's ``scalar_tensor_tensor`` with a reduction of its result along the free axes into the Vector
    engine's accumulator registers (:mod:`isa_accum`, ``"dve"``; ``reset_reduce`` starts them afresh,
    ``reduce`` continues them) and ``reduce_res``.  Without ``reduce_op`` (the default ``...``) and
    ``reduce_res`` it is the plain instruction.  The reduction sums the float32 results (as the engine
    computes them), not ``dst``'s rounded values."""
    if reduce_op is Ellipsis or reduce_op is None:
        if reduce_res is not None:
            raise refuse(call, "reduce_res", "...", "a reduction needs its reduce_op (nl.add, nl.maximum ...)")
        scalar_tensor_tensor(call, dst, data, op0, operand0, op1, operand1, reverse0, reverse1)
        return
    if cmd not in (reduce_cmd.idle, reduce_cmd.reset_reduce, reduce_cmd.reduce):
        raise refuse(call, "reduce_cmd", cmd, STT_COMMANDS)
    red = alu(reduce_op, f"{call} reduce_op")
    rows = data.shape[0]
    res = None if reduce_res is None else column_of(reduce_res, rows, f"{call} reduce_res")
    if cmd == reduce_cmd.idle:
        isa_accum.idle(call, res, lambda: scalar_tensor_tensor(call, dst, data, op0, operand0, op1, operand1,
                                                               reverse0, reverse1))
        return
    if cmd == reduce_cmd.reset_reduce and res is None:
        res = isa_accum.column(rows)  # the registers, in float32

    def emit(_cmd: Any, out: View | None) -> None:
        if out is None:
            scalar_tensor_tensor(call, dst, data, op0, operand0, op1, operand1, reverse0, reverse1)
            return
        full = dst if dst.dtype == as_dtype("float32") else fresh(dst.shape)
        scalar_tensor_tensor(call, full, data, op0, operand0, op1, operand1, reverse0, reverse1)
        if full is not dst:
            current().op("copy", (full,), (dst,), dst=dst, src=full)
        reduce_into(call, out, full, red)

    isa_accum.reducing(call, dst, cmd, red, res, emit)


def tensor_tensor_scan(call: str, dst: View, data0: View, data1: View, initial: Any, op0: Any, op1: Any,
                       reverse0: bool, reverse1: bool) -> None:
    """``r[:, i] = op1(op0(data0[:, i], r[:, i-1]), data1[:, i])`` from ``r[:, -1] = initial`` (KLR
    tensorTensorScan)."""
    if data0.shape[0] != data1.shape[0] or free(data0) != free(data1):
        raise unsupported(f"{call} of {list(data0.shape)} and {list(data1.shape)} tiles")
    same_size(call, dst, data0, "data0")
    init = imm_or_column(initial, data0.shape[0], f"{call} initial")
    native(call, "tensor_tensor_scan", reads(data0, data1, init), (dst,), dst=dst, src0=data0, src1=data1,
           op0=alu(op0, call), op1=alu(op1, call), reverseOperands=REVERSE[bool(reverse0), bool(reverse1)],
           imm0=init)


def reciprocal(call: str, dst: View, src: View) -> None:
    same_size(call, dst, src)
    current().op("reciprocal", (src,), (dst,), dst=dst, src=src)


# ---------------------------------------------------------------------------- activation
def _bias(bias: Any, rows: int, call: str) -> View | None:
    """A bias column; a number becomes a memset column (exact)."""
    if bias is None:
        return None
    if number(bias):
        if float(bias) == 0.0:
            return None
        col = fresh((rows, 1))
        nl._memset(col, float(bias))
        return col
    return operand(bias, rows, f"{call} bias")


def activation(call: str, dst: View, op: Any, data: View, bias: Any, scale: Any, reduce_res: Any = None) -> None:
    """``dst = op(data * scale + bias)``, and with ``reduce_res`` its sum along the free axes (KLR
    activationReduce, from zero: :func:`activation_accumulating` took the command and the reduce op, an add).
    ``scale`` is a number or a [P, 1] column (KLR ncActivate's Operand)."""
    if getattr(op, "_composite", None) == "gelu_apprx_sigmoid":
        _gelu_apprx_sigmoid(call, dst, data, bias, scale, reduce_res)
        return
    func = activation_func(op, call)
    same_size(call, dst, data)
    rows = data.shape[0]
    b = _bias(bias, rows, call)
    scale = float(scale) if number(scale) else column_of(scale, rows, f"{call} scale")
    if reduce_res is None:
        if isinstance(scale, View):  # KLR ncActivate with an Operand scale: one instruction
            native(call, "nc_activate", reads(data, b, scale), (dst,), dst=dst, src=data, activationFunc=func,
                   scale=scale, bias=b)
            return
        current().op("activation", reads(data, b), (dst,), dst=dst, src=data, func=func, bias=b, scale=scale)
        return
    res = column_of(reduce_res, rows, f"{call} reduce_res")
    native(call, "activation_reduce", reads(data, b, scale), (dst, res), dst=dst, src=data, activationFunc=func,
           scale=scale, bias=b, reduceOp="add", reduceRes=res)  # Idle: the codegen reduces from zero


def activation_engine(call: str, eng: Any, reduce_op: Any, reduce_res: Any, cmd: Any) -> None:
    """NKI 0.7.0's ``engine=`` of ``activation`` / ``activate2``: the Scalar engine, or on NeuronCore-v4 the
    GpSimd engine (the same values); only the Scalar engine has the accumulator registers."""
    if eng not in (engine.scalar, engine.gpsimd, engine.unknown):
        raise refuse(call, "engine", eng, "nisa.engine.scalar or nisa.engine.gpsimd")
    if eng == engine.gpsimd and (reduce_op is not None or reduce_res is not None or cmd != reduce_cmd.idle):
        raise refuse(call, "engine", eng, "the accumulator (reduce_op, reduce_res, reduce_cmd) is the Scalar "
                     "engine's only")


def activation_accumulating(call: str, dst: View, op: Any, data: View, bias: Any, scale: Any, reduce_op: Any,
                            reduce_res: Any, cmd: Any) -> None:
    """``nisa.activation`` with its ``reduce_cmd``: the Scalar Engine's accumulator registers
    (:mod:`~tusk.frontend.nki.isa_accum`, ``"act"``) are zeroed (``reset``), started from this instruction's
    row sums (``reset_reduce``), continued (``reduce``: a fresh sum added to the earlier value) or left as
    they are (``idle``); ``reduce_res`` reads them out after the instruction."""
    if reduce_op is not None and alu(reduce_op, f"{call} reduce_op") != "add":
        raise refuse(call, "reduce_op", reduce_op, "the Scalar Engine reduces with add")
    if cmd not in (reduce_cmd.idle, reduce_cmd.reset, reduce_cmd.reset_reduce, reduce_cmd.reduce):
        raise refuse(call, "reduce_cmd", cmd, "activation loads no value (nisa.exponential's reduce_init does)")
    rows = data.shape[0]
    res = None if reduce_res is None else column_of(reduce_res, rows, f"{call} reduce_res")
    if cmd in (reduce_cmd.idle, reduce_cmd.reset):
        isa_accum.idle(call, res if cmd == reduce_cmd.idle else None,
                       lambda: activation(call, dst, op, data, bias, scale), "act")
        if cmd == reduce_cmd.reset:
            isa_accum.left_by(isa_accum.last_op(), lambda _op: isa_accum.zeros(rows), "act")
            if res is not None:
                nl._memset(res, 0.0)
        return
    if cmd == reduce_cmd.reset_reduce and res is None:
        res = isa_accum.column(rows)  # the row sums in float32, as the registers hold them

    def emit(_cmd: Any, out: View | None) -> None:
        activation(call, dst, op, data, bias, scale, out)

    isa_accum.reducing(call, dst, cmd, "add", res, emit, "act")


def _gelu_apprx_sigmoid(call: str, dst: View, data: View, bias: Any, scale: Any, reduce_res: Any) -> None:
    """``z * sigmoid(1.702 z)`` with ``z = data * scale + bias`` (nl.gelu_apprx_sigmoid), in float32 tiles: a
    ScalarE copy for z (when scale or bias change it), the sigmoid, a VectorE multiply, and with ``reduce_res``
    the sum of the float32 products (as the engine's reduction would), then the copy into ``dst``."""
    same_size(call, dst, data)
    z = data
    if bias is not None or not (number(scale) and float(scale) == 1.0):
        z = fresh(data.shape)
        activation(call, z, nl.copy, data, bias, scale)
    s = fresh(data.shape)
    activation(call, s, nl.sigmoid, z, None, nl.GELU_SIGMOID_SLOPE)
    if reduce_res is None:
        tensor_tensor(call, dst, z, s, nl.multiply)
        return
    product = fresh(data.shape)
    tensor_tensor(call, product, z, s, nl.multiply)
    res = column_of(reduce_res, data.shape[0], f"{call} reduce_res")
    tensor_reduce(call, res, nl.add, product, tuple(range(1, product.ndim)), False)
    tensor_copy(call, dst, product)


def column_of(x: Any, rows: int, what: str) -> View:
    out = tile(x, what)
    if not nl._column(out, rows):
        raise unsupported(f"{what} of shape {list(out.shape)} (a [{rows}, 1] column)")
    return nl._as_column(out)


def tensor_scalar_reduce(call: str, dst: View, data: View, op0: Any, operand0: Any, reverse0: bool,
                         reduce_op: Any, reduce_res: Any, negate: bool = False, init: Any = None,
                         load: bool = False) -> None:
    """``dst = data op0 operand0`` and its ``reduce_op`` along the free axes into ``reduce_res`` (KLR
    tensorScalarReduce; negated or from a tile ``reduce_init``: a tensorScalar and a tensorReduce).  ``load``:
    the reduction starts from the number ``init`` (LoadAccumulate).  The Vector engine's register is not
    tracked through it here (tensor_scalar_reduce_accumulating tracks it)."""
    isa_accum.forget()
    data, op0, operand0, reverse0 = unary_op0(call, data, op0, operand0, reverse0)
    if negate or not (init is None or number(init)):
        tensor_scalar(call, dst, data, op0, operand0, reverse0, None, None, False)
        reduce_into(call, reduce_res, dst, reduce_op, negate=negate, init=init)
        return
    same_size(call, dst, data)
    rows = data.shape[0]
    o0 = imm_or_column(operand0, rows, f"{call} operand0")
    res = column_of(reduce_res, rows, f"{call} reduce_res")
    native(call, "tensor_scalar_reduce", reads(data, o0), (dst, res), dst=dst, src=data, operand0=o0,
           op0=alu(op0, call), reverse0=bool(reverse0), reduceOp=alu(reduce_op, call), reduceRes=res,
           reduceCmd="LoadAccumulate" if load else "ZeroAccumulate",
           reduceInit=None if init is None else float(init))


TSR_COMMANDS = "NKI documents reset_reduce, reduce and load_reduce for tensor_scalar_reduce"


def tensor_scalar_reduce_accumulating(call: str, dst: View, data: View, op0: Any, operand0: Any, reverse0: bool,
                                      reduce_op: Any, reduce_res: Any, cmd: Any, init: Any, negate: bool) -> None:
    """2.x ``tensor_scalar_reduce`` on the Vector engine's accumulator registers (:mod:`isa_accum`, ``"dve"``,
    shared with tensor_scalar_cumulative, range_select and select_reduce): ``reset_reduce`` starts them from
    ``reduce_op``'s identity, ``load_reduce`` from ``reduce_init``, ``reduce`` continues them; then this
    instruction's reduction accumulates in.  ``reduce_res`` (optional) receives the registers afterwards,
    negated with ``reduce_res_negate`` (the registers keep their sign)."""
    if cmd not in (reduce_cmd.reset_reduce, reduce_cmd.reduce, reduce_cmd.load_reduce):
        raise refuse(call, "reduce_cmd", cmd, TSR_COMMANDS)
    if cmd == reduce_cmd.load_reduce and init is None:
        raise refuse(call, "reduce_init", None, "reduce_cmd.load_reduce loads the registers from reduce_init")
    if init is not None and cmd != reduce_cmd.load_reduce:
        # under reset_reduce the registers start from reduce_op's identity: a number reduce_init was dropped
        # and a tile one added, so neither is taken
        raise refuse(call, "reduce_init", init, f"only with reduce_cmd.load_reduce, not {cmd.name}")
    rows = data.shape[0]
    res = None if reduce_res is None else column_of(reduce_res, rows, f"{call} reduce_res")
    red = alu(reduce_op, f"{call} reduce_op")
    if cmd == reduce_cmd.reset_reduce and res is not None and not negate and res.dtype == as_dtype("float32"):
        # the reduction read out exactly, as before (the same KLR); a later reduce continues from a copy of it.
        # Negated or rounded into reduce_res, it goes through the registers below: rebuilt from what was read
        # out, the registers took its sign
        tensor_scalar_reduce(call, dst, data, op0, operand0, reverse0, reduce_op, res)
        isa_accum.left_by(isa_accum.last_op(), lambda _o: isa_accum.copy_of(res))
        return

    def emit(_cmd: Any, out: View | None) -> None:
        tensor_scalar_reduce(call, dst, data, op0, operand0, reverse0, reduce_op, out)

    if cmd == reduce_cmd.reduce:
        isa_accum.reducing(call, dst, cmd, red, res, emit, negate=negate)
        return
    reg = isa_accum.column(rows)  # the registers, in float32
    tensor_scalar_reduce(call, dst, data, op0, operand0, reverse0, reduce_op, reg,
                         init=init if cmd == reduce_cmd.load_reduce else None, load=cmd == reduce_cmd.load_reduce)
    isa_accum.holding(reg)
    isa_accum.read_out(reg, res, negate)


def check_reduce(call: str, reduce_op: Any, reduce_res: Any, cmd: Any, engine: str = "dve") -> None:
    """An instruction's built-in reduction where ``engine``'s accumulator register is not tracked: only a
    reduction that starts from zero and is read out (``reduce_res``) is taken."""
    if reduce_res is None and reduce_op is None and cmd == reduce_cmd.idle:
        return
    isa_accum.forget(engine)  # the register is not tracked through this instruction
    if reduce_res is None:
        raise refuse(call, "reduce_res", None, "the accumulator registers are not kept across calls; give "
                     "reduce_res")
    if cmd != reduce_cmd.reset_reduce:
        raise refuse(call, "reduce_cmd", cmd, "only reduce_cmd.reset_reduce: the accumulator registers are "
                     "not kept across calls")


def reduce_into(call: str, res: Any, src: View, reduce_op: Any, *, negate: bool = False, init: Any = None,
                allowed: tuple[str, ...] = ()) -> None:
    """The free-axis reduction of an instruction's own output ``src`` into ``res`` ([P, 1]): a
    tensorReduce after it (check_reduce has taken the command)."""
    if res is None:
        return
    op = alu(reduce_op, f"{call} reduce_op")
    if allowed and op not in allowed:
        raise refuse(call, "reduce_op", reduce_op, f"the engine reduces with {' or '.join(allowed)}")
    out = column_of(res, src.shape[0], f"{call} reduce_res")
    flat = src.with_dims((src.dims[0], (1, free(src)))) if _contiguous_free(src) else src
    k = flat.ndim - 1
    tr = current()
    tr.op("tensor_reduce", (flat,), (out,), dst=out, src=flat, op=op, axis=nl._REDUCE_AXES[k - 1],
          negate=bool(negate))
    if init is not None and not (number(init) and float(init) == 0.0 and op == "add"):
        v = operand(init, src.shape[0], f"{call} reduce_init")
        tr.op("tensor_scalar", reads(out, v), (out,), dst=out, src=out, op0=op, imm0=v, reverse0=False)


def refuse(call: str, param: str, value: Any, why: str = "") -> Unsupported:
    return unsupported(f"{call} {param}={value!r}" + (f" ({why})" if why else ""))


def _contiguous_free(v: View) -> bool:
    dims = v.dims[1:]
    return all(s == math.prod(n for _, n in dims[k + 1:]) for k, (s, _) in enumerate(dims))


def exponential(call: str, dst: View, src: View, max_value: Any, reduce_res: Any, cmd: Any,
                reduce_init: Any) -> None:
    """``dst = exp(src - max_value)`` (KLR exponential) and its row sums on the Vector engine's accumulator
    registers (:mod:`isa_accum`, ``"dve"``, shared with tensor_scalar_cumulative, tensor_scalar_reduce, ...):
    ``reset_reduce`` starts them from zero, ``load_reduce`` from ``reduce_init``, ``reduce`` continues them
    (a fresh sum added to the earlier value), ``idle`` leaves them; ``reduce_res`` reads them out after it."""
    same_size(call, dst, src, "src")
    rows = src.shape[0]
    top = imm_or_column(max_value, rows, f"{call} max_value")
    if cmd not in (reduce_cmd.idle, reduce_cmd.reset_reduce, reduce_cmd.load_reduce, reduce_cmd.reduce):
        raise refuse(call, "reduce_cmd", cmd, "idle, reset_reduce, load_reduce or reduce")
    res = None if reduce_res is None else column_of(reduce_res, rows, f"{call} reduce_res")
    if cmd != reduce_cmd.load_reduce and not (number(reduce_init) and float(reduce_init) == 0.0):
        raise refuse(call, "reduce_init", reduce_init, f"only with reduce_cmd.load_reduce, not {cmd.name}")
    if cmd == reduce_cmd.idle:
        isa_accum.idle(call, res, lambda: native(call, "exponential", reads(src, top), (dst,), dst=dst, src=src,
                                                 maxValue=top))
        return

    def emit(c: Any, out: View | None, init: Any = 0.0) -> None:
        out = out if out is not None else isa_accum.column(rows)  # the row sums in float32, as the registers
        i = imm_or_column(init, rows, f"{call} reduce_init")
        native(call, "exponential", reads(src, top, i), (dst, out), dst=dst, src=src, maxValue=top,
               reduceRes=out, reducecmd=accum_cmd(call, c), reduceInit=i)

    if cmd == reduce_cmd.load_reduce:
        reg = isa_accum.column(rows)
        emit(cmd, reg, reduce_init)
        isa_accum.holding(reg)
        isa_accum.read_out(reg, res)
        return
    if cmd == reduce_cmd.reset_reduce and res is None:
        res = isa_accum.column(rows)
    isa_accum.reducing(call, dst, cmd, "add", res, emit)


def activate2(call: str, dst: View, op: Any, data: View, imm0: Any, imm1: Any, op0: Any, op1: Any,
              relu_param: Any, reverse0: bool, reverse1: bool, reduce_op: Any, reduce_res: Any,
              cmd: Any) -> None:
    """``op((data op0 imm0) op1 imm1)`` on the Scalar Engine, + an optional row reduction (KLR activate2)."""
    same_size(call, dst, data)
    rows = data.shape[0]
    if op is nl.prelu:
        _prelu(call, dst, data, imm0, imm1, op0, op1, relu_param, reverse0, reverse1, reduce_op, reduce_res, cmd)
        return
    if not number(relu_param):
        raise unsupported(f"{call} relu_param given as a tile (a number; a [P, 1] column only with op=nl.prelu)")
    check_reduce(call, reduce_op, reduce_res, cmd, "act")
    i0, i1 = imm_or_column(imm0, rows, f"{call} imm0"), imm_or_column(imm1, rows, f"{call} imm1")
    res = None if reduce_res is None else column_of(reduce_res, rows, f"{call} reduce_res")
    native(call, "activate2", reads(data, i0, i1), (dst,) + reads(res), dst=dst, src=data,
           op0=alu(op0, call), op1=alu(op1, call), imm0=i0, imm1=i1, activationFunc=activation_func(op, call),
           reluParam=float(relu_param), reduceOp="bypass" if reduce_op is None else alu(reduce_op, call),
           reduceRes=res, reduceCmd="ZeroAccumulate" if res is not None else "Idle", reverse0=bool(reverse0),
           reverse1=bool(reverse1))


def _prelu(call: str, dst: View, data: View, imm0: Any, imm1: Any, op0: Any, op1: Any, relu_param: Any,
           reverse0: bool, reverse1: bool, reduce_op: Any, reduce_res: Any, cmd: Any) -> None:
    """``activate2(op=nl.prelu)``: ``v`` if ``v >= 0`` else ``relu_param * v``, ``v`` the tensor-scalar stage's
    float32 result (NKI's PReLU; relu_param a number or a [P, 1] column).  KLR has no PReLU activation, so:
    ``v`` by activate2 with the identity (copy), ``min(v, 0) * relu_param`` (tensorScalar) and
    ``max(v, 0) + that`` (scalar_tensor_tensor) on the Vector engine, all float32: for ``v >= 0`` it is
    ``v + 0``, else ``0 + relu_param * v``.  A reduction is an identity activate2 of that result into dst."""
    rows = data.shape[0]
    alpha = imm_or_column(relu_param, rows, f"{call} relu_param")
    v = fresh(data.shape)
    activate2(call, v, nl.bypass, data, imm0, imm1, op0, op1, 0.0, reverse0, reverse1, None, None,
              reduce_cmd.idle)
    neg = fresh(data.shape)
    tensor_scalar(call, neg, v, "min", 0.0, False, "mult", alpha, False)
    reducing = not (reduce_res is None and reduce_op is None and cmd == reduce_cmd.idle)
    out = fresh(data.shape) if reducing else dst
    scalar_tensor_tensor(call, out, v, "max", 0.0, "add", neg, False, False)
    if reducing:
        activate2(call, dst, nl.bypass, out, 0.0, 0.0, "bypass", "bypass", 0.0, False, False, reduce_op,
                  reduce_res, cmd)


# ---------------------------------------------------------------------------- reductions
def tensor_reduce(call: str, dst: View, op: Any, data: View, axis: Any, negate: bool) -> None:
    """Reduce free axes of ``data``.  Axes that are not the trailing ones are moved last in the access
    pattern (a view, no data moves); the partition axis is tensor_partition_reduce's."""
    a = alu(op, call)
    axes = nl._axes(axis, data.ndim, call)
    if 0 in axes:
        raise unsupported(f"{call} along the partition axis (nisa.tensor_partition_reduce reduces it)")
    if len(axes) > 4:
        raise unsupported(f"{call} along {len(axes)} axes (at most 4)")
    kept = [d for d in range(data.ndim) if d not in axes]
    data.check_bounds()  # the reordered view below drops the per-axis run checks
    src = View(data.tensor, data.offset, tuple(data.dims[d] for d in kept + list(axes)))
    if dst.shape[0] != data.shape[0] or free(dst) != math.prod(data.shape[d] for d in kept[1:]):
        raise unsupported(f"{call}: dst {list(dst.shape)} does not hold the reduction of {list(data.shape)} "
                          f"along axis {axis}")
    current().op("tensor_reduce", (src,), (dst,), dst=dst, src=src, op=a, axis=nl._REDUCE_AXES[len(axes) - 1],
                 negate=bool(negate))


def reduce_shape(data: View, axis: Any, keepdims: bool, call: str) -> tuple[int, ...]:
    """The 1.x result shape of tensor_reduce (a [P, 1] column when nothing else is kept)."""
    axes = nl._axes(axis, data.ndim, call)
    if keepdims:
        return tuple(1 if d in axes else n for d, n in enumerate(data.shape))
    kept = tuple(n for d, n in enumerate(data.shape) if d not in axes)
    return kept if len(kept) > 1 else (data.shape[0], 1)


# ---------------------------------------------------------------------------- matmul and transpose
def nc_matmul(call: str, dst: View, stationary: View, moving: View, accumulate: Any,
              transpose: bool = False, emit: Any = None) -> None:
    """``dst = stationary.T @ moving`` (``accumulate=False``), ``dst += ...`` (True), or as NKI infers
    it (None): the first matmul into a PSUM tile overwrites it, later ones accumulate, and one inside a
    loop that started after the tile was made accumulates over that loop's iterations (the tile is
    zeroed before the loop, so iteration 0 adds to zero: the same sums).  Accumulation is an ncMatMul
    into a fresh PSUM bank plus a DVE add (docs/frontend.md, PSUM accumulation).  ``emit(target)``
    records another matmul (nc_matmul_mx) in place of the ncMatMul."""
    if dst.memory != "psum":
        raise unsupported(f"{call} into {dst.memory} tensor {dst.tensor.name} (dst is a PSUM tile)")
    k, m = stationary.shape[0], free(stationary)
    n = free(moving)
    if dst.shape[0] != m or free(dst) != n:
        raise unsupported(f"{call}: dst {list(dst.shape)} for a [{k}, {m}] stationary and a "
                          f"[{moving.shape[0]}, {n}] moving tile (dst is [{m}, {n}])")
    tr = current()
    if accumulate is None:
        written = nl.written_before(tr, dst)  # this place, not the tensor: an unrolled loop's blocks
        start = _accumulation_loop(tr, dst)
        if not written and start is not None:
            tr.insert_before(start, Op("memset", {"dst": dst, "value": 0.0}, tr.prog[start].line, (), (dst,)))
            written = True
        accumulate = written
    if not isinstance(accumulate, (bool, np.bool_)):
        raise refuse(call, "accumulate", accumulate, "True, False or None; a loop index comparison is a "
                     "runtime predicate")
    if emit is None:
        def emit(target: View) -> None:
            nl_matmul_into(target, stationary, moving, call, transpose)
    if not accumulate:
        emit(dst)
        return
    part = tr.tile(dst.shape, dst.dtype, "psum")
    tr.sum_parts.add(id(part.tensor))
    emit(part)
    tr.op("tensor_tensor", (dst, part), (dst,), dst=dst, a=dst, b=part, op="add")


DOUBLE_ROW = ("double_row", "double_row_gen3")  # 2.x matmul_perf_mode.double_row; 1.x spelled the string


def double_row(call: str, perf_mode: Any, stationary: View, moving: View) -> bool:
    """Whether ``perf_mode`` packs two rows (FP8 double-row): stationary [K, 2, M], moving [K, 2, N]."""
    mode = getattr(perf_mode, "value", perf_mode)
    if mode in (None, "none"):
        return False
    if mode not in DOUBLE_ROW:
        raise refuse(call, "perf_mode", perf_mode, "none or double_row")
    if stationary.ndim != 3 or moving.ndim != 3 or stationary.shape[1] != 2 or moving.shape[1] != 2:
        raise unsupported(f"{call} perf_mode={mode}: stationary {list(stationary.shape)} and moving "
                          f"{list(moving.shape)} (double_row takes [K, 2, M] and [K, 2, N] tiles)")
    return True


def perf_matmul(call: str, dst: View, stationary: View, moving: View, accumulate: Any, transpose: bool,
                double: bool) -> None:
    """nc_matmul; double-row: the two packed rows are two contractions into the same PSUM tile (the same
    sums: the PE adds the pair's products into one accumulator)."""
    if not double:
        nc_matmul(call, dst, stationary, moving, accumulate, transpose)
        return
    if transpose:
        raise refuse(call, "is_transpose", True, "not with perf_mode double_row")
    for row in range(2):
        nc_matmul(call, dst, stationary[:, row, :], moving[:, row, :], accumulate if row == 0 else True)


def nl_matmul_into(dst: View, stationary: View, moving: View, call: str, transpose: bool = False) -> None:
    k, m = stationary.shape[0], free(stationary)
    if k != moving.shape[0]:
        raise unsupported(f"{call}: contraction over {k} and {moving.shape[0]} partitions")
    if m > nl.tile_size.gemm_stationary_fmax or free(moving) > nl.tile_size.gemm_moving_fmax:
        raise unsupported(f"{call} of a [{k}, {m}] stationary and a [{k}, {free(moving)}] moving tile (at most "
                          f"{nl.tile_size.gemm_stationary_fmax} and {nl.tile_size.gemm_moving_fmax} columns)")
    extra = {"transpose": True} if transpose else {}  # the PE's bit-exact transpose mode (KLR isTranspose)
    current().op("matmul", (stationary, moving), (dst,), dst=dst, stationary=stationary, moving=moving, **extra)


def fill_before_accumulation(tr: Any, dst: View, value: float) -> None:
    """Fill ``dst`` with ``value`` once, before the loop an accumulation into it runs over (right here when no
    such loop is open): the start of a sum nothing wrote yet (``+=`` of a matmul, ``nl.loop_reduce``)."""
    start = _accumulation_loop(tr, dst)
    pos = len(tr.prog) if start is None else start
    line = tr.prog[pos].line if pos < len(tr.prog) else (current_user_line() or ("", 0))[1]
    tr.insert_before(pos, Op("memset", {"dst": dst, "value": value}, line, (), (dst,)))


def _accumulation_loop(tr: Any, dst: View) -> int | None:
    """The program position of the outermost open dynamic loop that began after ``dst``'s tensor was made
    and that ``dst``'s place does not move with (nor with any loop inside it): its iterations sum into one
    PSUM location."""
    depth_used = max((v.depth for v, _ in dst.offset.terms), default=-1)
    open_vars = {id(v): v for v in tr.loops}
    for pos in range(max(dst.tensor.site, 0), len(tr.prog)):
        e = tr.prog[pos]
        if isinstance(e, LoopBegin) and id(e.var) in open_vars and e.var.depth > depth_used:
            return pos
    return None


def nc_transpose(call: str, dst: View, data: View) -> None:
    """``dst = data.T`` through the PE array in transpose mode (``data.T @ I``, the values moved), into PSUM;
    an SBUF dst gets a copy."""
    p, f = data.shape[0], free(data)
    if f > PARTITIONS:
        raise unsupported(f"{call} of a tile with {f} columns (at most {PARTITIONS})")
    if dst.shape[0] != f or free(dst) != p:
        raise unsupported(f"{call}: dst {list(dst.shape)} for the transpose of a [{p}, {f}] tile")
    ident = current().identity_tile()[0:p, 0:p]
    # the PE's transpose mode (KLR isTranspose): bit-accurate from NeuronCore-v3, NaN and infinities included
    if dst.memory == "psum" and dst.dtype == "float32":
        nl_matmul_into(dst, data, ident, call, transpose=True)
        return
    part = current().tile((f, p), as_dtype("float32"), "psum")
    nl_matmul_into(part, data, ident, call, transpose=True)
    current().op("copy", (part,), (dst,), dst=dst, src=part)


# ---------------------------------------------------------------------------- KLR operators of their own
def native(call: str, kind: str, reads: tuple[View, ...], writes: tuple[View, ...], **params: Any) -> None:
    """Record KLR operator ``kind`` (snake_case of its KLR name; params named after its KLR fields)."""
    from tusk.frontend.emit import Emitter
    if not hasattr(Emitter, "op_" + kind):
        raise unsupported(f"{call} (the KLR {kind} operator has no writer in Tusk yet)")
    current().op(kind, reads, writes, **params)


ACCUM_CMD = {reduce_cmd.idle: "Idle", reduce_cmd.reset: "Zero", reduce_cmd.reduce: "Accumulate",
             reduce_cmd.reset_reduce: "ZeroAccumulate", reduce_cmd.load_reduce: "LoadAccumulate"}


def accum_cmd(call: str, cmd: Any) -> str:
    if cmd not in ACCUM_CMD:
        raise refuse(call, "reduce_cmd", cmd, "a nisa.reduce_cmd")
    return ACCUM_CMD[cmd]


KLR_ENGINE = {engine.unknown: "unassigned", engine.vector: "dve", engine.scalar: "act", engine.gpsimd: "pool",
              engine.tensor: "pe", engine.sync: "sp", engine.dma: "dma"}


def klr_engine(call: str, e: Any) -> str:
    if e not in KLR_ENGINE:
        raise refuse(call, "engine", e, "a nisa.engine")
    return KLR_ENGINE[e]


def rand_state_tile(call: str, t: View, eng: Any) -> None:
    """A generator state tile as NKI documents it: uint32 in SBUF (PSUM too for the Vector engine's
    rand_get_state), 6 words per partition for the GpSimd engine's XORWOW state, 24 for the Vector engine's."""
    words = {engine.gpsimd: 6, engine.vector: 24}.get(eng)
    if words is None:
        raise refuse(call, "engine", eng, "nisa.engine.gpsimd or nisa.engine.vector")
    if t.dtype != "uint32":
        raise unsupported(f"{call} of a {t.dtype} tile (nl.uint32)")
    if t.memory != "sbuf" and not (eng == engine.vector and call.endswith("get_state")):
        raise unsupported(f"{call} of a {t.memory} tile (SBUF{'' if eng == engine.gpsimd else ' or PSUM'})")
    if free(t) != words:
        raise unsupported(f"{call} of a {list(t.shape)} tile ({words} words per partition on the "
                          f"{'GpSimd' if eng == engine.gpsimd else 'Vector'} engine)")


def imm_or_column(x: Any, rows: int, what: str) -> Any:
    """A KLR Operand: an immediate (a number) or a [P, 1] tile."""
    v = operand(x, rows, what)
    return v if isinstance(v, View) else float(v)


def tensor_partition_reduce(call: str, dst: View, op: Any, data: View) -> None:
    if dst.shape[0] != 1 or free(dst) != free(data):
        raise unsupported(f"{call}: dst {list(dst.shape)} for the partition reduction of {list(data.shape)} "
                          f"(dst is [1, {free(data)}])")
    native(call, "tensor_partition_reduce", (data,), (dst,), dst=dst, op=alu(op, call), data=data,
           dtype=dst.dtype)


def bn_stats(call: str, dst: View, data: View) -> None:
    if data.shape[0] != dst.shape[0] or free(dst) != 6 or free(data) > nl.tile_size.bn_stats_fmax:
        raise unsupported(f"{call}: dst {list(dst.shape)} for the statistics of {list(data.shape)} (dst holds 6 "
                          f"values a partition; data at most {nl.tile_size.bn_stats_fmax})")
    native(call, "batch_norm_stats", (data,), (dst,), dst=dst, src=data, dtype=dst.dtype)


def bn_aggr(call: str, dst: View, data: View) -> None:
    if data.shape[0] != dst.shape[0] or free(dst) != 2 or free(data) % 6:
        raise unsupported(f"{call}: dst {list(dst.shape)} for the aggregate of {list(data.shape)} (dst holds a "
                          "mean and a variance a partition; data holds bn_stats results, 6 values each)")
    native(call, "batch_norm_aggregate", (data,), (dst,), dst=dst, src=data, dtype=dst.dtype)


def dropout(call: str, dst: View, data: View, prob: Any) -> None:
    same_size(call, dst, data)
    p = imm_or_column(prob, data.shape[0], f"{call} prob")
    native(call, "dropout", reads(data, p), (dst,), dst=dst, src=data, thresholdType="DropRate", threshold=p,
           dtype=dst.dtype)


def _pattern(call: str, pattern: Any) -> list[tuple[int, int]]:
    try:
        return [(int(step), int(num)) for step, num in pattern]
    except (TypeError, ValueError):
        raise unsupported(f"{call} pattern={pattern!r} (a list of [step, num] pairs)") from None


def affine_select(call: str, dst: View, pattern: Any, channel_multiplier: Any, on_true: View, on_false: Any,
                  cmp_op: Any, offset: Any) -> None:
    """``dst = on_true if (offset + p * channel_multiplier + pattern . f) cmp_op 0 else on_false``."""
    same_size(call, dst, on_true, "on_true_tile")
    pairs = _pattern(call, pattern)
    if math.prod(n for _, n in pairs) != free(dst):
        raise unsupported(f"{call}: pattern {pattern!r} does not cover dst {list(dst.shape)}")
    if not number(on_false) or not number(offset) or not number(channel_multiplier):
        raise unsupported(f"{call}: on_false_value, offset and channel_multiplier are numbers")
    native(call, "affine_select", (on_true,), (dst,), dst=dst,
           pred=(int(offset), pairs, int(channel_multiplier)),
           onTrueTile=on_true, onFalseValue=float(on_false), dtype=dst.dtype, cmpOp=alu(cmp_op, call))


def select_reduce(call: str, dst: View, predicate: View, on_true: View, on_false: Any, reduce_res: Any,
                  cmd: Any, reduce_op: Any, reverse_pred: bool) -> None:
    same_size(call, dst, on_true, "on_true")
    same_size(call, dst, predicate, "predicate")
    f = on_false if number(on_false) else tile(on_false, f"{call} on_false")
    if isinstance(f, View) and not nl._column(f, dst.shape[0]):
        same_size(call, dst, f, "on_false")  # a full tile, or a [P, 1] column broadcast along the row
    elif isinstance(f, View):
        f = nl._as_column(f)
    res = None if reduce_res is None else tile(reduce_res, f"{call} reduce_res")
    red = alu(reduce_op, call)

    def emit(c: Any, r: View | None) -> None:
        native(call, "select_reduce", reads(predicate, on_true, f), (dst,) + reads(r), dst=dst,
               predicate=predicate, onTrue=on_true, onFalse=float(f) if number(f) else f, reduceRes=r,
               reduceCmd=accum_cmd(call, c), reduceOp=red, reversePred=bool(reverse_pred), dtype=dst.dtype)
    isa_accum.reducing(call, dst, cmd, red, res, emit)


def range_select(call: str, dst: View, on_true: View, comp_op0: Any, comp_op1: Any, bound0: View, bound1: View,
                 cmd: Any, reduce_res: Any, reduce_op: Any, range_start: Any, on_false: Any) -> None:
    same_size(call, dst, on_true, "on_true_tile")
    res = None if reduce_res is None else column_of(reduce_res, dst.shape[0], f"{call} reduce_res")
    if not number(range_start) or not number(on_false):
        raise unsupported(f"{call}: range_start and on_false_value are numbers")
    red = alu(reduce_op if reduce_op is not None else nl.maximum, call)

    def emit(c: Any, r: View | None) -> None:
        native(call, "range_select", (on_true, bound0, bound1), (dst,) + reads(r), dst=dst,
               reduceCommand=accum_cmd(call, c), reduceRes=r, reduceOp=red, compOp0=alu(comp_op0, call),
               compOp1=alu(comp_op1, call), bound0=bound0, bound1=bound1, rangeStart=float(range_start),
               onTrueTile=on_true, onFalseValue=float(on_false), dtype=dst.dtype)
    isa_accum.reducing(call, dst, cmd, red, res, emit)


def max8(call: str, dst: View, src: View) -> None:
    if dst.shape[0] != src.shape[0] or free(dst) != 8:
        raise unsupported(f"{call}: dst {list(dst.shape)} (it is [{src.shape[0]}, 8])")
    native(call, "max8", (src,), (dst,), dst=dst, src=src, dtype=dst.dtype)


def find_index8(call: str, dst: View, data: View, vals: View) -> None:
    if dst.shape[0] != data.shape[0] or free(dst) != 8 or free(vals) != 8:
        raise unsupported(f"{call}: dst {list(dst.shape)} and vals {list(vals.shape)} (both [P, 8])")
    native(call, "find_index8", (data, vals), (dst,), dst=dst, src=data, vals=vals, dtype=dst.dtype)


def match_replace8(call: str, dst: View, data: View, vals: View, imm: Any, dst_idx: Any) -> None:
    same_size(call, dst, data)
    idx = None if dst_idx is None else tile(dst_idx, f"{call} dst_idx")
    if not number(imm):
        raise unsupported(f"{call} imm={imm!r} (a number)")
    native(call, "match_replace8", (data, vals), (dst,) + reads(idx), dst=dst, src=data, vals=vals,
           replaceValue=float(imm), dstIdx=idx, dtype=dst.dtype)


def local_gather(call: str, dst: View, src: View, index: View, num_elem_per_idx: Any,
                 num_valid_indices: Any) -> None:
    if src.shape[0] != index.shape[0] or src.shape[0] % 16:
        raise unsupported(f"{call}: src_buffer {list(src.shape)} and index {list(index.shape)} (the same "
                          "partitions, a multiple of 16)")
    native(call, "local_gather", (src, index), (dst,), dst=dst, src=src, index=index,
           numElemPerIdx=int(num_elem_per_idx),
           numValidIndicies=None if num_valid_indices is None else int(num_valid_indices))


def n_gather(call: str, dst: View, data: View, indices: View) -> None:
    """``dst[p, i] = data[p].flat[indices[p, i]]`` in each partition (KLR ncNGather)."""
    if not (dst.shape[0] == data.shape[0] == indices.shape[0]) or free(dst) != free(indices):
        raise unsupported(f"{call}: dst {list(dst.shape)}, data {list(data.shape)} and indices "
                          f"{list(indices.shape)} (the same partitions; dst holds one value per index)")
    native(call, "nc_n_gather", (data, indices), (dst,), dst=dst, data=data, indices=indices)


def stream_shuffle(call: str, dst: View, src: View, shuffle_mask: Any) -> None:
    """``dst[i] = src[quadrant + shuffle_mask[i]]`` in each 32-partition quadrant (255 keeps dst[i]; KLR
    shuffle)."""
    try:
        masks = [int(m) for m in shuffle_mask]
    except (TypeError, ValueError):
        raise unsupported(f"{call} shuffle_mask={shuffle_mask!r} (32 ints)") from None
    if len(masks) != 32 or any(not (0 <= m < 32 or m == 255) for m in masks):
        raise unsupported(f"{call} shuffle_mask={shuffle_mask!r} (32 partition numbers below 32, or 255)")
    if free(dst) != free(src):  # partitions may differ: [0] * 32 broadcasts one partition to 32
        raise unsupported(f"{call}: dst {list(dst.shape)} and src {list(src.shape)} differ in elements per "
                          "partition")
    if any(m != 255 and m >= src.shape[0] for m in masks):
        raise unsupported(f"{call}: shuffle_mask reads past the {src.shape[0]} partitions of src")
    kept = (dst,) if 255 in masks else ()  # a 255 keeps that dst partition: read then
    native(call, "shuffle", (src, *kept), (dst,), dst=dst, src=src, shuffleMask=masks)


def default_transpose_axes(ndim: int) -> tuple[int, ...]:
    """nisa.dma_transpose's permutation without ``axes=``: (1, 0), (2, 1, 0), and (3, 1, 2, 0) for a 4-D tile
    (the middle axes keep their order: not the reverse)."""
    return (3, 1, 2, 0) if ndim == 4 else tuple(range(ndim))[::-1]


def dma_transpose(call: str, dst: View, src: View, axes: Any) -> None:
    order = default_transpose_axes(src.ndim) if axes is None else tuple(int(a) for a in axes)
    if sorted(order) != list(range(src.ndim)):
        raise unsupported(f"{call} axes={axes!r} (a permutation of the {src.ndim} axes)")
    want = tuple(src.shape[a] for a in order)
    if dst.shape != want and _squeezed(dst) != tuple(n for n in want if n != 1):
        raise unsupported(f"{call}: dst {list(dst.shape)} for src {list(src.shape)} transposed by {order}")
    if src.dtype != dst.dtype:
        raise unsupported(f"{call} from {src.dtype} to {dst.dtype}")
    if dst.vector is not None or getattr(dst, "scalar", None) is not None:
        raise unsupported(f"{call} into an indirect or runtime-offset destination")
    if src.vector is not None or getattr(src, "scalar", None) is not None:
        # gathered rows: gather them into SBUF first, then transpose there (a permuted view of the gather
        # would lose its index tile)
        stage = fresh(src.shape, src.dtype)
        dma_copy(call, stage, src)
        src = stage
    if src.tensor.on_chip:
        # KLR dmaTranspose permutes four access dims: unit dims go after the partition dim of both views
        pad = 4 - src.ndim
        if pad < 0 or dst.ndim != src.ndim:
            raise unsupported(f"{call} of a {src.ndim}-axis tile into a {dst.ndim}-axis one (up to 4, the same)")
        place = [0] + [k + pad for k in range(1, src.ndim)]
        perm = (place[order[0]], *range(1, pad + 1), *(place[a] for a in order[1:]))
        name = TRANSPOSE_OPS.get(perm)
        if name is None:
            raise unsupported(f"{call} axes={axes!r} (not one of KLR's dmaTranspose permutations)")
        unit = ((1, 1),) * pad
        src.check_bounds()
        dst.check_bounds()
        s4 = View(src.tensor, src.offset, src.dims[:1] + unit + src.dims[1:])
        d4 = View(dst.tensor, dst.offset, dst.dims[:1] + unit + dst.dims[1:])
        native(call, "dma_transpose", (s4,), (d4,), dst=d4, src=s4, axes=name)
        return
    # from HBM: a DMA whose source access walks the axes in the permuted order, the same elements in the
    # same places
    src.check_bounds()
    permuted = View(src.tensor, src.offset, tuple(src.dims[a] for a in order))
    current().op("dma", (permuted,), (dst,), dst=dst, src=permuted)


TRANSPOSE_OPS = {(0, 1, 2, 3): "None", (0, 1, 3, 2): "WZXY", (0, 3, 1, 2): "WXZY", (0, 2, 3, 1): "WYXZ",
                 (1, 0, 2, 3): "ZWYX", (1, 2, 0, 3): "ZYWX", (1, 2, 3, 0): "ZYXW", (2, 3, 0, 1): "YXWZ",
                 (2, 3, 1, 0): "YXZW", (2, 0, 1, 3): "YWZX", (3, 0, 1, 2): "XWZY", (3, 1, 2, 0): "XZYW",
                 (3, 2, 1, 0): "XYZW", (3, 2, 0, 1): "XYWZ"}


def sequence_bounds(call: str, dst: View, segment_ids: View) -> None:
    native(call, "sequence_bounds", (segment_ids,), (dst,), dst=dst, segmentIds=segment_ids, dtype=dst.dtype)


def tensor_scalar_cumulative(call: str, dst: View, src: View, op0: Any, op1: Any, imm0: Any, imm1: Any,
                             cmd: Any) -> None:
    """``reg = op1(op0(src[:, k], imm0), reg); dst[:, k] = reg``; ``reduce`` continues the register an
    earlier cumulative instruction left (its last output column, :mod:`isa_accum`), as a load_reduce."""
    same_size(call, dst, src, "src")
    rows = src.shape[0]
    i0 = imm_or_column(imm0, rows, f"{call} imm0")
    if cmd == reduce_cmd.reduce:
        i1: Any = isa_accum.register(call)
        cmd = reduce_cmd.load_reduce
    else:
        i1 = None if imm1 is None else imm_or_column(imm1, rows, f"{call} imm1")
    if cmd == reduce_cmd.load_reduce and i1 is None:
        raise refuse(call, "imm1", None, "reduce_cmd.load_reduce loads the register from imm1")
    native(call, "tensor_scalar_cumulative", reads(src, i0, i1), (dst,), dst=dst, src=src, op0=alu(op0, call),
           op1=alu(op1, call), imm0=i0, imm1=i1, reduceCmd=accum_cmd(call, cmd), reverse="none",
           dtype=dst.dtype)
    if cmd in (reduce_cmd.reset_reduce, reduce_cmd.load_reduce):
        isa_accum.left_by(isa_accum.last_op(),
                          lambda o: isa_accum.copy_of(isa_accum.last_column(isa_accum.written(o, dst), call)))
    else:
        isa_accum.forget()


def nonzero_with_count(call: str, dst: View, src: View, index_offset: Any, padding_val: Any) -> None:
    """In partitions 0, 16, ..., 112 (each GpSimd core's first): the indices of src's nonzero elements (plus
    index_offset), then padding_val, then their count in dst's extra last element; other partitions of dst
    keep their values (so dst is read too)."""
    if dst.shape[0] != src.shape[0] or free(dst) != free(src) + 1:
        raise unsupported(f"{call}: dst {list(dst.shape)} for src {list(src.shape)} (the same partitions, one "
                          "element more per partition: the count)")
    if not (number(index_offset) and number(padding_val)) or isinstance(index_offset, float) \
            or isinstance(padding_val, float):
        raise unsupported(f"{call} index_offset={index_offset!r} padding_val={padding_val!r} (ints)")
    if "int" not in dst.dtype:
        raise unsupported(f"{call} into a {dst.dtype} tile (indices are integers: an int32 dst)")
    native(call, "nonzero_with_count", (src, dst), (dst,), dst=dst, src=src, indexOffset=int(index_offset),
           paddingVal=int(padding_val))


def copy_predicated(call: str, dst: View, src: Any, predicate: View, reverse_pred: bool) -> None:
    """``dst = src where predicate`` (else dst keeps its values: it is read too)."""
    same_size(call, dst, predicate, "predicate")
    s = src if number(src) else tile(src, f"{call} src")
    if isinstance(s, View):
        same_size(call, dst, s, "src")
    else:
        s = fresh(dst.shape, dst.dtype)  # a number: a tile of it, as the instruction broadcasts it
        nl._memset(s, src)
    native(call, "copy_predicated", (dst, s, predicate), (dst,), dst=dst, src=s, predicate=predicate,
           dtype=dst.dtype, reversePred=bool(reverse_pred))


# ---------------------------------------------------------------------------- registers
class VirtualRegister:
    """``nisa.register_alloc()``: a KLR register (``vreg.N``) holding a 32-bit integer at run time."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"<nisa register {self.name}>"

    def __bool__(self) -> bool:
        raise unsupported("the truth value of a register (its value is known only at run time)")

    def __index__(self) -> int:
        raise unsupported("a register used as a Python int (its value is known only at run time)")


class LoopIndexRegister(VirtualRegister):
    """The index of a loop bounded by a register (``nl.fori_loop(0, reg, body)``, ``nl.dynamic_range(reg)``): a
    register holding a copy of the loop's counter, set at the top of each iteration (NKI passes it by value:
    writing it does not move the loop).  Its range is known only at run time, so Python arithmetic on it is
    refused; it is read as ``ap(scalar_offset=i)`` or by the ``nisa.register_*`` instructions."""

    def __init__(self, name: str, kind: str):
        super().__init__(name)
        self.kind = kind

    def _refuse(self, *_: Any, **__: Any) -> Any:
        raise unsupported(f"arithmetic on the index of an nl.{self.kind} loop bounded by a register (a register "
                          f"whose value is known only at run time: read it as ap(scalar_offset=i), or compute "
                          f"with nisa.register_* instructions)")

    __int__ = __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _refuse
    __floordiv__ = __mod__ = __lt__ = __le__ = __gt__ = __ge__ = __neg__ = _refuse


class NkiScalar(VirtualRegister):
    """``nisa.scalar_load(t)`` (NKI 0.7.0+): one nl.int32 integer computed on device, in a KLR register.  Its
    arithmetic (``+``, ``-``, ``*`` with a Python int or another scalar, unary ``-``) is traced into new
    scalars, wrapping at 32 bits as NKI documents; it serves as a ``scalar_offset`` of an HBM access, as an
    ``nl.fori_loop`` bound and as ``nisa.scalar_store``'s value.  Comparisons are refused (NKI traces them but
    their result cannot be used)."""

    dtype = "int32"  # an nl.int64 one (scalar_load of an int64 tile) has its own

    @staticmethod
    def _new() -> NkiScalar:
        tr = current()
        tr.vregs += 1
        return NkiScalar(f"vreg.{tr.vregs}")

    def _imm(self, op: str, k: int) -> NkiScalar:
        self._only_32("arithmetic")
        out = self._new()
        native("NkiScalar arithmetic", "register_alu_op", (), (), dst=out.name, src=self.name, imm=int(k), op=op)
        return out

    def _only_32(self, what: str) -> None:
        if self.dtype != "int32":
            raise unsupported(f"{what} on an nl.int64 NkiScalar (NKI wraps it at 64 bits; KLR's register ALU "
                              "computes 32: Tusk loads, stores and addresses HBM with 64-bit scalars only)")

    def _with(self, op: str, other: Any, reverse: bool = False) -> NkiScalar:
        self._only_32("arithmetic")
        if isinstance(other, NkiScalar):
            other._only_32("arithmetic")
            return _scalar_pair(op, other, self) if reverse else _scalar_pair(op, self, other)
        if isinstance(other, VirtualRegister):
            raise unsupported(f"NkiScalar {op} a register of nisa.register_alloc (scalars combine with scalars "
                              "and Python ints)")
        if isinstance(other, bool) or not isinstance(other, (int, np.integer)):
            raise unsupported(f"NkiScalar {op} {type(other).__name__} (a Python int or another NkiScalar)")
        k = int(other)
        if not -2 ** 31 <= k < 2 ** 31:
            raise unsupported(f"NkiScalar {op} {k} (an nl.int32 scalar's operand fits in 32 bits)")
        if reverse and op == "subtract":  # k - x
            return self._imm("mult", -1)._imm("add", k)
        return self._imm(op, k)

    def __add__(self, other: Any) -> NkiScalar:
        return self._with("add", other)

    def __radd__(self, other: Any) -> NkiScalar:
        return self._with("add", other, reverse=True)

    def __sub__(self, other: Any) -> NkiScalar:
        return self._with("subtract", other)

    def __rsub__(self, other: Any) -> NkiScalar:
        return self._with("subtract", other, reverse=True)

    def __mul__(self, other: Any) -> NkiScalar:
        return self._with("mult", other)

    def __rmul__(self, other: Any) -> NkiScalar:
        return self._with("mult", other, reverse=True)

    def __neg__(self) -> NkiScalar:
        return self._imm("mult", -1)

    def __pos__(self) -> NkiScalar:
        return self

    def _compare(self, *_: Any) -> Any:
        raise unsupported("comparing an NkiScalar (NKI traces the comparison but its result cannot be used; "
                          "a runtime condition is nl.while_loop's register)")

    __lt__ = __le__ = __gt__ = __ge__ = __eq__ = __ne__ = _compare
    __hash__ = VirtualRegister.__hash__

    def _refuse(self, *_: Any, **__: Any) -> Any:
        raise unsupported("that operator on an NkiScalar (NKI's scalars have +, - and *)")

    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = __pow__ = _refuse

    def __repr__(self) -> str:
        return f"<nisa.NkiScalar {self.name}>"


def _scalar_pair(op: str, a: NkiScalar, b: NkiScalar) -> NkiScalar:
    """``a op b`` of two scalars: KLR's register ALU takes a register and an immediate, so both go through
    one-element int32 SBUF tiles, a GpSimd int32 tensor_tensor, and back into a register."""
    tr = current()
    ta, tb, tc = (fresh((1, 1), "int32") for _ in range(3))
    register_store("NkiScalar arithmetic", ta, a)
    register_store("NkiScalar arithmetic", tb, b)
    tr.op("tensor_tensor", (ta, tb), (tc,), dst=tc, a=ta, b=tb, op=op)
    out = NkiScalar._new()
    register_load("NkiScalar arithmetic", out, tc)
    return out


def scalar_load(call: str, src: View) -> NkiScalar:
    """``nisa.scalar_load(src)``: a 1x1 nl.int32 or nl.int64 tile (SBUF or HBM) read into a scalar of that
    width (an int64 one is not truncated: KLR's registers hold 64 bits)."""
    s = single(src, f"{call} src")
    if s.dtype not in ("int32", "int64"):
        raise unsupported(f"{call} of a {s.dtype} tile (nl.int32 or nl.int64; NKI takes no unsigned dtype)")
    out = NkiScalar._new()
    if s.dtype == "int64":
        out.dtype = "int64"
    native(call, "tensor_load", (s,), (), dst=out.name, src=s)
    return out


def scalar_store(call: str, dst: View, value: Any) -> None:
    """``nisa.scalar_store(dst, value)``: an NkiScalar into a 1x1 tile of its dtype (a Python int is refused, as
    NKI refuses it: nisa.memset writes constants)."""
    if not isinstance(value, NkiScalar):
        raise unsupported(f"{call} value={value!r} (an NkiScalar of nisa.scalar_load; nisa.memset writes a "
                          "constant)")
    d = single(dst, f"{call} dst")
    if d.dtype != value.dtype:
        raise unsupported(f"{call} into a {d.dtype} tile (an nl.{value.dtype} scalar is stored at its own "
                          "width)")
    register_store(call, d, value)


def loop_index_register(kind: str, var: Any) -> LoopIndexRegister:
    """A fresh register that the loop ``var`` copies its counter into at the top of each iteration."""
    tr = current()
    tr.vregs += 1
    reg = LoopIndexRegister(f"vreg.{tr.vregs}", kind)
    tr.op("loop_index", (), (), dst=reg.name, var=var)
    return reg


def register_alloc(call: str, x: Any) -> VirtualRegister:
    tr = current()
    n = tr.vregs + 1
    tr.vregs = n
    reg = VirtualRegister(f"vreg.{n}")
    if x is not None:
        register_move(call, reg, x)
    return reg


def register(x: Any, what: str) -> VirtualRegister:
    if not isinstance(x, VirtualRegister):
        raise unsupported(f"{what}: expected a register from nisa.register_alloc, got {type(x).__name__}")
    return x


def register_move(call: str, dst: Any, src: Any) -> None:
    d = register(dst, f"{call} dst")
    if isinstance(src, VirtualRegister):
        native(call, "register_alu_op", (), (), dst=d.name, src=src.name, imm=0, op="add")
        return
    if isinstance(src, bool) or not isinstance(src, (int, np.integer)):
        raise unsupported(f"{call} src={src!r} (an int or a register)")
    native(call, "register_move", (), (), dst=d.name, imm=int(src))


def single(v: View, what: str) -> View:
    if v.elements != 1:
        raise unsupported(f"{what} of shape {list(v.shape)} (one element)")
    return v


def register_load(call: str, dst: Any, src: View) -> None:
    d, s = register(dst, f"{call} dst"), single(src, f"{call} src")
    if s.dtype in ("int64", "uint64"):
        raise unsupported(f"{call} of a {s.dtype} tile (NKI: a scalar value of up to 32 bits; "
                          "nisa.scalar_load reads an nl.int64 one)")
    native(call, "tensor_load", (s,), (), dst=d.name, src=s)


def register_store(call: str, dst: View, src: Any) -> None:
    d, s = single(dst, f"{call} dst"), register(src, f"{call} src")
    native(call, "tensor_store", (), (d,), dst=d, src=s.name)


# ---------------------------------------------------------------------------- indirect DMA bounds
def oob_name(call: str, mode: Any) -> str:
    if mode == oob_mode.error:
        return "error"
    if mode == oob_mode.skip:
        return "skip"
    raise refuse(call, "oob_mode", mode, "nisa.oob_mode.error or .skip")



def static_rows(v: View) -> np.ndarray | None:
    """The rows an indirect view reads or writes when its index tile is an ``nisa.iota`` the trace made
    (and nothing wrote since): known now, so out-of-bounds indices are decided at the call."""
    idx = v.vector
    if idx is None:
        return None
    tr = current()
    for e in reversed(tr.prog):
        if isinstance(e, Op) and any(w.tensor is idx.tensor for w in e.writes):
            dst = e.params.get("dst")
            if e.kind != "iota" or dst is None or dst.offset != idx.offset or dst.dims[0] != idx.dims[0]:
                return None
            if not (number(e.params["offset"]) and number(e.params["channel_multiplier"])):
                return None
            if any(int(s) != 0 and int(n) != 1 for s, n in e.params["pattern"]):
                return None  # one value per partition: the offset and the channel multiplier
            parts = np.arange(idx.shape[0], dtype=np.int64)
            return int(e.params["offset"]) + int(e.params["channel_multiplier"]) * parts
        if isinstance(e, LoopBegin):
            return None
    return None


def dma_bounds(call: str, dst: View, src: View, oob: str) -> tuple[View, View]:
    """``oob_mode`` of an indirect DMA whose indices are known at the call: ``error`` refuses an index past
    the tensor's rows here; ``skip`` leaves out the rows it names (kept to a leading run of rows, which a
    narrowed access says).  Indices read at run time stay the DMA's own bounds check."""
    side = dst if dst.vector is not None else src
    rows = static_rows(side)
    if rows is None:
        return dst, src
    n = side.tensor.shape[0]
    inside = (rows >= 0) & (rows < n)
    if inside.all():
        return dst, src
    bad = int(rows[~inside][0])
    if oob == "error":
        raise unsupported(f"{call}: index {bad} of the index tile is outside the {n} rows of "
                          f"{side.tensor.name} (oob_mode=error)")
    keep = int(np.argmin(inside)) if not inside[0] else int(inside.sum())
    if not inside[:keep].all() or inside[keep:].any():
        raise unsupported(f"{call} oob_mode=skip with in-bounds indices that are not a leading run of the "
                          "index tile's partitions")
    if keep == 0:
        raise unsupported(f"{call} oob_mode=skip where every index is outside {side.tensor.name}")
    return dst.narrowed({0: keep}), src.narrowed({0: keep})
