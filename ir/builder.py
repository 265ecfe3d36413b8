"""Author BIR functions in a few lines (tests, examples, benchmarks).

    b = Builder("main")
    x = b.dram("x", (2048, 512), kind="ExternalInput")
    y = b.dram("y", (2048, 512), kind="ExternalOutput")
    t = b.sbuf("t", (128, 512), addr=0)
    with b.loop("i", 0, 16) as i:
        b.dma(t.ap(), x.tile(i * 128, 128, 0, 512))
        b.activation(t.ap(), t.ap(), "Exp")
        b.dma(y.tile(i * 128, 128, 0, 512), t.ap())
    module = b.module()

Offsets are element offsets; an offset that is an expression of loop
indices (or a block index) makes a symbolic access pattern, a plain integer
a physical one.  SBUF/PSUM tensors are partitions x bytes; their partition
pair uses the pitch form ``[pitch * k, nparts]`` (pitch = elements per
partition row), as the backend writes it.
"""

from __future__ import annotations

import contextlib
import functools
import math
import re
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

from tusk.ir import enums
from tusk.ir.columns import Record
from tusk.ir.enums import (
    DTYPE_BY_NAME,
    DTYPE_SIZES,
    ENGINE_BY_NAME,
    OPCODE_BY_NAME,
    TENSOR_KIND_BY_NAME,
    Kind,
    Mem,
    Role,
)
from tusk.ir.errors import InputError
from tusk.ir.expr import AffinePredicate, QuasiAffine, as_expr, expr_to_json
from tusk.ir.module import Function, Module
from tusk.ir.values import ImmValue, Pattern, SymAddr

Offset = int | QuasiAffine


def _dtype(d: str | int) -> int:
    if isinstance(d, int):
        return d
    if d not in DTYPE_BY_NAME:
        raise InputError(f"unknown dtype {d!r}")
    return DTYPE_BY_NAME[d]


@dataclass(frozen=True)
class Tensor:
    """A memory-location set with its memory locations (one per block)."""

    builder: "Builder"
    set_id: int
    memlocs: tuple[int, ...]
    dtype: int
    shape: tuple[int, ...]
    mtype: int
    pitch: int  # elements per partition row (SB/PSUM) or per logical row (DRAM)

    @property
    def name(self) -> str:
        fn = self.builder.fn
        return fn.strings[fn.sets.get("name", self.set_id)]

    @property
    def rows(self) -> int:
        return self.shape[0]

    @property
    def cols(self) -> int:
        return math.prod(self.shape[1:]) if len(self.shape) > 1 else 1

    def ap(self, pattern: Sequence[Sequence[int]] | None = None, offset: Offset = 0, *,
           block: Offset | None = None, dtype: str | int | None = None) -> "AP":
        """An access pattern; the default pattern covers the whole tensor."""
        pairs = ((self.pitch, self.rows), (1, self.cols)) if pattern is None else \
            tuple((int(s), int(n)) for s, n in pattern)
        return AP(self, pairs, offset, block, self.dtype if dtype is None else _dtype(dtype))

    def tile(self, row: Offset, nrows: int, col: Offset, ncols: int, *, block: Offset | None = None) -> "AP":
        """Rows [row, row+nrows) x columns [col, col+ncols) of a 2-D view."""
        return AP(self, ((self.pitch, nrows), (1, ncols)), row * self.pitch + col, block, self.dtype)

    def block(self, b: Offset) -> "AP":
        return self.ap(block=b)


@dataclass(frozen=True)
class AP:
    tensor: Tensor
    pattern: Pattern
    offset: Offset
    block: Offset | None
    dtype: int


@dataclass(frozen=True)
class Reg:
    row: int
    name: str


Operand = AP | Reg | int | float | QuasiAffine


class Builder:
    """Appends to one function; :meth:`module` wraps it in a Module."""

    def __init__(self, name: str = "main", *, kind: int = enums.FnKind.NORMAL, attrs: Sequence[int] = (),
                 fn: Function | None = None):
        self.fn = fn if fn is not None else Function(name, kind, set(attrs))
        self._block = self.fn.add_block("Block1") if fn is None else self.fn.top_blocks()[-1]
        self._counter: dict[str, int] = {}
        self._records: dict[tuple, int] = {}
        self.last = -1

    # ------------------------------------------------------------------ tensors
    def dram(self, name: str, shape: Sequence[int], dtype: str | int = "float32", *, kind: str = "Internal",
             addr: int = -1, const_path: str | None = None) -> Tensor:
        dt = _dtype(dtype)
        shape = tuple(int(s) for s in shape)
        total = math.prod(shape) * DTYPE_SIZES[dt]
        fn = self.fn
        s = fn.add_set(f"{name}_set", TENSOR_KIND_BY_NAME[kind], dt, shape)
        m = fn.add_memloc(s, name, Mem.DRAM, addr=addr, pbytes=total, nparts=1, const_path=const_path)
        pitch = math.prod(shape[1:]) if len(shape) > 1 else 1
        return Tensor(self, s, (m,), dt, shape, Mem.DRAM, pitch)

    def sbuf(self, name: str, shape: Sequence[int], dtype: str | int = "float32", *, addr: int, base: int = 0,
             blocks: int = 1, pbytes: int | None = None, kind: str = "Internal") -> Tensor:
        return self._onchip(name, shape, dtype, Mem.SB, addr, base, blocks, pbytes, kind)

    def psum(self, name: str, shape: Sequence[int], dtype: str | int = "float32", *, addr: int, base: int = 0,
             blocks: int = 1, pbytes: int | None = None) -> Tensor:
        return self._onchip(name, shape, dtype, Mem.PSUM, addr, base, blocks, pbytes, "Internal")

    def _onchip(self, name, shape, dtype, mtype, addr, base, blocks, pbytes, kind) -> Tensor:
        dt = _dtype(dtype)
        shape = tuple(int(s) for s in shape)
        free = math.prod(shape[1:]) if len(shape) > 1 else 1
        row_bytes = pbytes if pbytes is not None else free * DTYPE_SIZES[dt]
        fn = self.fn
        s = fn.add_set(f"{name}_set", TENSOR_KIND_BY_NAME[kind], dt, shape, is_block=blocks > 1, n_blocks=blocks)
        locs = []
        for b in range(blocks):
            a = addr + b * row_bytes if addr >= 0 else -1
            bank = a // 2048 if (mtype == Mem.PSUM and a >= 0) else -1
            locs.append(fn.add_memloc(s, name if blocks == 1 else f"{name}_b{b}", mtype, addr=a, pbytes=row_bytes,
                                      nparts=shape[0], base=base, bank=bank, tensor_id=b if blocks > 1 else -1))
        return Tensor(self, s, tuple(locs), dt, shape, mtype, row_bytes // DTYPE_SIZES[dt])

    def register(self, name: str) -> Reg:
        r = self.fn.reg_by_name(name)
        return Reg(r if r >= 0 else self.fn.add_reg(name), name)

    # ------------------------------------------------------------------ operands
    def _operand(self, x: Operand, role: int) -> tuple:
        fn = self.fn
        if isinstance(x, AP):
            pat = fn.pattern_id(x.pattern)
            if x.block is None and type(x.offset) is int:  # the common physical case, without expressions
                return (role, Kind.PHYSICAL, x.dtype, x.tensor.memlocs[0], x.offset, pat, -1, -1, -1)
            block = None if x.block is None else as_expr(x.block)
            offset = as_expr(x.offset)
            if (block is None or block.is_const) and offset.is_const:
                b = 0 if block is None else block.c
                if not 0 <= b < len(x.tensor.memlocs):
                    raise InputError(f"block {b} out of range for tensor {x.tensor.name}")
                off = offset.c
                return (role, Kind.PHYSICAL, x.dtype, x.tensor.memlocs[b], off, pat, -1, -1, -1)
            aux = fn.intern(SymAddr(offset, block))
            return (role, Kind.SYMBOLIC, x.dtype, x.tensor.memlocs[0], 0, pat, aux, -1, -1)
        if isinstance(x, Reg):
            return (role, Kind.REGISTER, enums.Dt.int32, -1, 0, -1, x.row, -1, -1)
        if isinstance(x, QuasiAffine):
            return (Role.IN, Kind.SYMBOLIC_IMM, enums.Dt.int32, -1, 0, -1, fn.intern(x), -1, -1)
        if isinstance(x, bool) or not isinstance(x, (int, float)):
            raise InputError(f"not an operand: {x!r}")
        dt = enums.Dt.int32 if isinstance(x, int) else enums.Dt.float32
        return (Role.IN, Kind.IMM, dt, -1, 0, -1, fn.intern(ImmValue(x)), -1, -1)

    def emit(self, opname: str, engine: str, ins: Sequence[Operand] = (), outs: Sequence[Operand] = (), *,
             attrs: dict | None = None, name: str | None = None, pred: Sequence[AffinePredicate] = (),
             indirect: Sequence[Operand] = ()) -> int:
        """Append any instruction; the typed helpers below call this."""
        if opname not in OPCODE_BY_NAME:
            raise InputError(f"unknown opcode {opname!r}")
        rows = [self._operand(x, Role.IN) for x in ins]
        rows += [self._operand(x, Role.INDIRECT) for x in indirect]
        rows += [self._operand(x, Role.OUT) for x in outs]
        if name is None:
            base = _snake(opname)
            k = self._counter.get(base, 0)
            self._counter[base] = k + 1
            name = f"{base}{k}"
        pid = self.fn.intern(tuple(pred)) if pred else -1
        self.last = self.fn.add_inst(OPCODE_BY_NAME[opname], ENGINE_BY_NAME[engine], self._block, name, rows,
                                     attrs=self._attrs(attrs), pred=pid)
        return self.last

    def _attrs(self, attrs: dict | None) -> int:
        """Pool id of an attribute record; records of plain scalar values are looked up without JSON."""
        if not attrs:
            return -1
        try:
            key = tuple(sorted(attrs.items()))
            hash(key)
        except TypeError:  # lists, dicts, expressions: canonicalise through JSON
            return self.fn.intern_record(Record.of(_jsonable(attrs)))
        # 1, 1.0 and True stay apart, and so do 0.0 and -0.0
        typed = tuple((k, type(v).__name__, repr(v) if type(v) is float else v) for k, v in key)
        rid = self._records.get(typed)
        if rid is None:
            rid = self._records[typed] = self.fn.intern_record(Record.of(_jsonable(attrs)))
        return rid

    # ------------------------------------------------------------------ data movement
    def dma(self, dst: AP, src: AP, *, queue: str | None = None, **kw: Any) -> int:
        attrs = {"queue": queue} if queue else {}
        return self.emit("DMACopy", "DMA", [src], [dst], attrs=attrs, **kw)

    def copy(self, dst: AP, src: AP, *, engine: str = "Pool", **kw: Any) -> int:
        return self.emit("TensorCopy", engine, [src], [dst], **kw)

    def memset(self, dst: AP, value: int | float = 0, *, engine: str = "Pool", **kw: Any) -> int:
        return self.emit("Memset", engine, [], [dst], attrs={"mode": "Const", "constant": value}, **kw)

    def iota(self, dst: AP, base: int, pattern: Sequence[Sequence[int]], channel_multiplier: int = 0, *,
             engine: str = "Pool", **kw: Any) -> int:
        attrs = {"base": base, "pattern": [list(p) for p in pattern], "channel_multiplier": channel_multiplier}
        return self.emit("Iota", engine, [], [dst], attrs=attrs, **kw)

    # ------------------------------------------------------------------ compute
    def tensor_tensor(self, dst: AP, a: AP, b: AP, op: str = "add", *, engine: str = "DVE", **kw: Any) -> int:
        return self.emit("TensorTensor", engine, [a, b], [dst], attrs={"op": op}, **kw)

    def tensor_scalar(self, dst: AP, src: AP, op0: str, const0: float, op1: str = "bypass", const1: float = 0.0, *,
                      reverse0: bool = False, reverse1: bool = False, engine: str = "DVE", **kw: Any) -> int:
        attrs = {"op0": op0, "const0": float(const0), "reverse0": reverse0, "op1": op1, "const1": float(const1),
                 "reverse1": reverse1}
        return self.emit("TensorScalar", engine, [src], [dst], attrs=attrs, **kw)

    def tensor_scalar_ptr(self, dst: AP, src: AP, scalar: AP, op0: str, op1: str = "bypass",
                          scalar1: AP | None = None, *, engine: str = "DVE", **kw: Any) -> int:
        """``(src op0 scalar) op1 scalar1`` with per-partition scalar columns."""
        ins = [src, scalar] + ([scalar1] if scalar1 is not None else [])
        attrs = {"op0": op0, "reverse0": False, "op1": op1, "reverse1": False}
        return self.emit("TensorScalarPtr", engine, ins, [dst], attrs=attrs, **kw)

    def activation(self, dst: AP, src: AP, func: str = "Identity", *, scale: float = 1.0, bias: AP | None = None,
                   alpha: float = 0.0, acc: str = "Idle", engine: str = "Activation", **kw: Any) -> int:
        attrs = {"func": func, "scale": float(scale), "alpha": float(alpha), "acc": acc, "op0": "bypass",
                 "op1": "bypass", "reduce_op": "bypass"}
        ins = [src] + ([bias] if bias is not None else [])
        return self.emit("Activation", engine, ins, [dst], attrs=attrs, **kw)

    def reduce(self, dst: AP, src: AP, op: str = "add", *, axis: str = "X", engine: str = "DVE", **kw: Any) -> int:
        return self.emit("TensorReduce", engine, [src], [dst], attrs={"op": op, "axis": axis}, **kw)

    def matmul(self, dst: AP, stationary: AP, moving: AP, *, accumulate: Offset = 0, **kw: Any) -> int:
        """``dst[M, N] (+)= stationary[K, M]^T @ moving[K, N]`` on the PE array.

        ``accumulate`` is MaybeAffine: a constant or a loop expression; where it
        is non-zero the product is added to what the PSUM tile holds.
        """
        acc = accumulate if isinstance(accumulate, int) else expr_to_json(as_expr(accumulate))
        attrs = {"accumulation_flag": acc, "psum_zero_region": 0, "replication_resolution": 0,
                 "replication_shift_amnt": 0, "replication_num_rows": 0, "is_transpose": False,
                 "is_fmap_onezero": False, "is_weight_onezero": False, "tile_size": [128, 128],
                 "tile_position": [0, 0], "perf_mode": "None", "ifmap_quant_offset": 0, "weights_quant_offset": 0}
        return self.emit("Matmult", "PE", [stationary, moving], [dst], attrs=attrs, **kw)

    # ------------------------------------------------------------------ registers
    def register_move(self, reg: Reg, value: int, **kw: Any) -> int:
        return self.emit("RegisterMove", "SP", [int(value)], [reg], **kw)

    def register_alu(self, dst: Reg, src: Reg, op: str, imm: int, **kw: Any) -> int:
        return self.emit("RegisterAlu", "SP", [src, int(imm)], [dst], attrs={"op": op, "is_64bit": False}, **kw)

    def tensor_load(self, reg: Reg, src: AP, **kw: Any) -> int:
        return self.emit("TensorLoad", "SP", [src], [reg], **kw)

    def tensor_save(self, dst: AP, reg: Reg, **kw: Any) -> int:
        return self.emit("TensorSave", "SP", [reg], [dst], **kw)

    # ------------------------------------------------------------------ control
    @contextlib.contextmanager
    def loop(self, axis: str, lb: int, ub: int, stride: int = 1, *, name: str | None = None) -> Iterator[QuasiAffine]:
        """A static InstLoop; yields the loop index expression."""
        from tusk.ir.expr import idx

        attrs = {"LoopAxis": {"name": axis, "lb": lb, "ub": ub, "stride": stride}}
        with self._body("Loop", f"{axis}_body", attrs, name or f"loop_{axis}"):
            yield idx(axis)

    @contextlib.contextmanager
    def dynamic_loop(self, axis: str, lb: int, ub: Reg, stride: int = 1, *, name: str | None = None
                     ) -> Iterator[QuasiAffine]:
        """A DynamicForLoop whose upper bound is a register's runtime value."""
        from tusk.ir.expr import idx, runtime

        attrs = {"DynamicForLoopAxis": {"name": axis, "lb": lb, "ub": expr_to_json(runtime(ub.name)),
                                        "stride": stride}}
        with self._body("DynamicForLoop", f"{axis}_body", attrs, name or f"dloop_{axis}"):
            yield idx(axis)

    @contextlib.contextmanager
    def do_while(self, cond: Reg, *, name: str | None = None) -> Iterator[None]:
        """A DoWhile: run the body, repeat while register ``cond`` is non-zero."""
        with self._body("DoWhile", f"{name or 'dowhile'}_body", {"cond": cond.name}, name or "dowhile"):
            yield None

    @contextlib.contextmanager
    def _body(self, opname: str, block_name: str, attrs: dict, name: str) -> Iterator[None]:
        row = self.emit(opname, "Unassigned", attrs=attrs, name=name)
        outer = self._block
        self._block = self.fn.add_block(self._unique_block(block_name), row)
        try:
            yield
        finally:
            self._block = outer

    def _unique_block(self, name: str) -> str:
        existing = set(self.fn.strings[n] for n in self.fn.blocks["name"].tolist())
        if name not in existing:
            return name
        k = 1
        while f"{name}_{k}" in existing:
            k += 1
        return f"{name}_{k}"

    def new_block(self, name: str) -> int:
        """Start a new top-level block; later instructions go there."""
        self._block = self.fn.add_block(self._unique_block(name))
        return self._block

    # ------------------------------------------------------------------ kernels
    def klir_kernel(self, path: str, fmt: str, ins: Sequence[AP], outs: Sequence[AP], *,
                    func_args: dict[str, str] | None = None, func_outs: dict[str, str] | None = None,
                    scope: int = 0, **kw: Any) -> int:
        """An InstNKIKLIRKernel placeholder (56) for TranslateNKIASTToBIR to expand."""
        attrs = {"klir_binary": path, "kernel_format": fmt, "func_args": func_args or {},
                 "func_outs": func_outs or {}, "address_rotation_scope_val": scope}
        return self.emit("NKIKLIRKernel", "Unassigned", ins, outs, attrs=attrs, **kw)

    def dep(self, src: int, dst: int, kind: int = enums.Edge.Flow) -> None:
        self.fn.add_dep(src, dst, kind)

    # ------------------------------------------------------------------ results
    def function(self) -> Function:
        self.fn.invalidate()
        return self.fn

    def module(self, **attributes: Any) -> Module:
        attrs = {"neuron_core_id": 0}
        attrs.update(attributes)
        return Module([self.function()], attributes=Record.of(attrs))


@functools.lru_cache(maxsize=None)
def _snake(name: str) -> str:
    """DMACopy -> dma_copy, TensorTensor -> tensor_tensor (readable default names)."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


def _jsonable(v):
    """Attribute values as JSON: expressions (at any depth) become their pelican form."""
    if isinstance(v, QuasiAffine):
        return expr_to_json(v)
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return v
