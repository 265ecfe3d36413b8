"""Write KLR ``LncKernel`` files in a few readable lines, the way the NKI front end emits them.

    k = KernelWriter("tensor_add")
    a, b = k.input("a", (128, 512)), k.input("b", (128, 512))
    c = k.output("c", (128, 512))
    ta, tb = k.sbuf("ta", (128, 512), addr=0), k.sbuf("tb", (128, 512), addr=2048)
    k.dma(ta, a)
    k.dma(tb, b)
    k.tensor_tensor(ta, ta, tb, "add")
    k.dma(c, ta)
    data = k.to_bytes()          # a .klr file (format 0.0.12, Contents lnc)

Conventions (klr-format.md §4, "what the front end emits"):

* every operand is ``TensorRef.abstract(Access.birPattern(...))``; a tensor
  passed where an access is expected means the whole tensor, ``t[r0:r1, c]``
  slices it, and :meth:`Tensor.ap` takes an explicit ``[[step, num], ...]``
  pattern (element offset + pairs over the row-major ``[parDim] + freeDims``
  layout), a scalar offset (a register name or a one-element access) or a
  vector offset (an index access, indirect dim 0) and a dtype override;
* SBUF/PSUM tensors are placed (``addr`` = byte offset in the partition,
  ``base`` = first partition); DRAM inputs/outputs are unplaced;
* statements are named ``inst.N`` (``jmp.N`` / ``br.N`` for branches,
  ``reg.N`` for register ops) and carry a Pos in ``<kernel>.py``;
* straight-line code, plus blocks and ``cmpBranch`` for dynamic loops
  (:meth:`KernelWriter.block`, :meth:`jump`, :meth:`branch`);
* several logical cores: ``with k.core(1): ...`` writes the second body.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from tusk.frontend.klr_operators import build_operator
from tusk.ir.klr import types as T
from tusk.ir.klr import write_klr
from tusk.ir.klr.wire import round_to_float32

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "float32r": 4, "int8": 1, "int16": 2, "int32": 4,
               "int64": 8, "uint8": 1, "uint16": 2, "uint32": 4, "uint64": 8,
               "float8e3": 1, "float8e4": 1, "float8e5": 1, "float8_e4m3": 1, "float8_e4m3fn": 1,
               # MX packed containers: four fp8 in 4 bytes, four fp4 in 2 bytes (docs/semantics.md, MX)
               "float8_e5m2_x4": 4, "float8_e4m3fn_x4": 4, "float4_e2m1fn_x4": 2}

Pairs = Sequence[Sequence[int]]


def _pairs(pattern: Pairs) -> tuple:
    return tuple(T.APPair(step=int(s), num=int(n), offset=0) for s, n in pattern)


@dataclass(frozen=True)
class Tensor:
    """A KLR TensorName with the writer that owns it."""

    writer: KernelWriter
    tn: Any  # TensorName

    @property
    def name(self) -> str:
        return self.tn.name

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.tn.shape.parDim, *self.tn.shape.freeDims)

    @property
    def strides(self) -> tuple[int, ...]:
        dims = self.shape
        return tuple(math.prod(dims[k + 1:]) for k in range(len(dims)))

    def ap(self, pattern: Pairs | None = None, offset: int = 0, *, scalar: str | AP | None = None,
           vector: AP | None = None, indirect_dim: int = 0, dtype: str | None = None) -> AP:
        """An access pattern over this tensor (default: the whole tensor)."""
        if pattern is None:
            pattern = tuple(zip(self.strides, self.shape))
        return AP(self, tuple((int(s), int(n)) for s, n in pattern), int(offset), scalar, vector, indirect_dim, dtype)

    def __getitem__(self, index: Any) -> AP:
        """``t[r0:r1, c0:c1]`` (slices with steps, or integers that drop a dimension)."""
        if not isinstance(index, tuple):
            index = (index,)
        index = index + (slice(None),) * (len(self.shape) - len(index))
        offset, pattern = 0, []
        for ix, dim, stride in zip(index, self.shape, self.strides):
            if isinstance(ix, int):
                offset += ix * stride
                continue
            start, stop, step = ix.indices(dim)
            offset += start * stride
            pattern.append((step * stride, len(range(start, stop, step))))
        return AP(self, tuple(pattern) or ((1, 1),), offset, None, None, 0, None)


@dataclass(frozen=True)
class AP:
    """A birPattern access: tensor, element offset, [step, num] pairs, runtime offsets."""

    tensor: Tensor
    pattern: tuple[tuple[int, int], ...]
    offset: int = 0
    scalar: str | AP | None = None
    vector: AP | None = None
    indirect_dim: int = 0
    dtype: str | None = None

    def bap(self) -> Any:
        scalar = None
        if isinstance(self.scalar, str):
            scalar = T.ScalarOffset.reg(r=self.scalar)
        elif self.scalar is not None:
            scalar = T.ScalarOffset.acc(a=_as_ap(self.scalar).access())
        vector = _as_ap(self.vector).access() if self.vector is not None else None
        return T.BirAccessPattern(tensor=self.tensor.tn, offset=self.offset, pattern=_pairs(self.pattern),
                                  scalarOffset=scalar, vectorOffset=vector, indirectDim=self.indirect_dim,
                                  dtypeOverride=None if self.dtype is None else T.Dtype[self.dtype])

    def access(self) -> Any:
        return T.Access.birPattern(access=self.bap())

    def ref(self) -> Any:
        return T.TensorRef.abstract(access=self.access())


def _as_ap(x: Tensor | AP) -> AP:
    return x.ap() if isinstance(x, Tensor) else x


def ref(x: Tensor | AP) -> Any:
    """TensorRef.abstract(Access.birPattern(...)) of a tensor (whole) or an access."""
    return _as_ap(x).ref()


def imm(value: float) -> Any:
    """An Immediate: int32 for ints, float32 (rounded to binary32) otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"not an immediate: {value!r}")
    if isinstance(value, int):
        return T.Immediate.int32(i=value)
    return T.Immediate.float32(f=round_to_float32(float(value)))


def operand(x: float | Tensor | AP) -> Any:
    """Operand.imm for numbers, Operand.tile for tensors and accesses."""
    if isinstance(x, (Tensor, AP)):
        return T.Operand.tile(t=ref(x))
    return T.Operand.imm(i=imm(x))


_ENGINE = {e.name: e for e in T.Engine}
_REVERSE = {(False, False): "none", (True, False): "first", (False, True): "second", (True, True): "both"}


class KernelWriter:
    """Builds one LncKernel; ``cores`` bodies with identical block labels."""

    def __init__(self, name: str, cores: int = 1, *, filename: str | None = None):
        self.name = name
        self.filename = filename or f"{name}.py"
        self.inputs: list[Any] = []
        self.outputs: list[Any] = []
        self.shared_constants: list[Any] = []
        self.shared_buffers: list[Any] = []
        self.edges: list[Any] = []
        self.bodies: list[list[list]] = [[] for _ in range(cores)]  # core -> [[label, noReorder, stmts]]
        self._core = 0
        self._counters: dict[tuple[int, str], int] = {}  # per core: bodies name their statements alike
        self._lines = [1] * cores
        self.pos_line: int | None = None  # when set, the source line every new statement records
        for c in range(cores):
            self.bodies[c].append(["main.1", False, []])

    # ------------------------------------------------------------------ tensors
    def tensor(self, name: str, shape: Sequence[int], dtype: str = "float32", memory: str = "sbuf", *,
               addr: int | None = None, base: int | None = None, region: str | None = None,
               shared: bool = False, free_bytes: int | None = None) -> Tensor:
        """A TensorName.  SBUF/PSUM: ``addr`` is the byte offset in the partition, ``base`` the partition."""
        par, free = int(shape[0]), tuple(int(d) for d in shape[1:])
        elems = math.prod(free) if free else 1
        size = DTYPE_BYTES[dtype]
        onchip = memory in ("sbuf", "psum")
        address = T.Address(name=region or name, memory=T.Memory[memory], parSize=par,
                            freeSize=free_bytes if free_bytes is not None else elems * size,
                            parOffset=(base or 0) if onchip and addr is not None else None,
                            freeOffset=addr if onchip else None, isShared=shared)
        tn = T.TensorName(name=name, dtype=T.Dtype[dtype], shape=T.Shape(parDim=par, freeDims=free),
                          address=address, freeElements=elems, addressRotation=False)
        return Tensor(self, tn)

    def sbuf(self, name: str, shape: Sequence[int], dtype: str = "float32", *, addr: int, base: int = 0,
             free_bytes: int | None = None) -> Tensor:
        return self.tensor(name, shape, dtype, "sbuf", addr=addr, base=base, free_bytes=free_bytes)

    def psum(self, name: str, shape: Sequence[int], dtype: str = "float32", *, addr: int, base: int = 0) -> Tensor:
        return self.tensor(name, shape, dtype, "psum", addr=addr, base=base)

    def input(self, name: str, shape: Sequence[int], dtype: str = "float32") -> Tensor:
        t = self.tensor(name, shape, dtype, "hbm")
        self.inputs.append(t.tn)
        return t

    def output(self, name: str, shape: Sequence[int], dtype: str = "float32") -> Tensor:
        t = self.tensor(name, shape, dtype, "hbm")
        self.outputs.append(t.tn)
        return t

    def shared_constant(self, name: str, shape: Sequence[int], dtype: str, file_name: str) -> Tensor:
        """A DRAM tensor initialised from a .npy file (relative to the compiler output folder)."""
        t = self.tensor(name, shape, dtype, "hbm", shared=True)
        self.shared_constants.append(T.SharedConstantFile(name=name, fileName=file_name))
        return t

    def shared_buffer(self, name: str, shape: Sequence[int], dtype: str = "float32") -> Tensor:
        """A DRAM buffer shared by the logical cores (memory shared_hbm)."""
        t = self.tensor(name, shape, dtype, "shared_hbm", shared=True)
        self.shared_buffers.append(t.tn)
        return t

    # ------------------------------------------------------------------ structure
    @contextlib.contextmanager
    def core(self, c: int) -> Iterator[None]:
        """Write the statements of logical core ``c`` inside the block."""
        old = self._core
        self._core = c
        try:
            yield
        finally:
            self._core = old

    def block(self, label: str, *, no_reorder: bool = False) -> str:
        """Start block ``label`` in the current core's body; later statements go there."""
        body = self.bodies[self._core]
        if len(body) == 1 and body[0][0] == "main.1" and not body[0][2] and label != "main.1":
            body[0] = [label, no_reorder, []]
        else:
            body.append([label, no_reorder, []])
        return label

    def edge(self, src: str, dsts: Sequence[str]) -> None:
        """Scheduling edge: every statement in ``dsts`` after ``src``."""
        self.edges.append(T.Edges(fromEdge=src, toEdges=tuple(dsts)))

    def _name(self, prefix: str) -> str:
        key = (self._core, prefix)
        k = self._counters.get(key, 0) + 1
        self._counters[key] = k
        return f"{prefix}.{k}"

    def stmt(self, op: Any, prefix: str = "inst", name: str | None = None) -> str:
        """Append ``Operator`` value ``op`` as a statement of the current block; returns its name."""
        name = name or self._name(prefix)
        line = self.pos_line if self.pos_line is not None else self._lines[self._core]
        pos = T.Pos(line=line, column=0, lineEnd=None, columnEnd=None, filename=self.filename)
        self._lines[self._core] += 1
        self.bodies[self._core][-1][2].append(T.Stmt.oper(op=op, name=name, pos=pos))
        return name

    @property
    def n_statements(self) -> int:
        return sum(len(b[2]) for body in self.bodies for b in body)

    def kernel(self) -> Any:
        bodies = tuple(tuple(T.Block(label=lab, noReorder=nr, body=tuple(st)) for lab, nr, st in body)
                       for body in self.bodies)
        return T.LncKernel(name=self.name, inputs=tuple(self.inputs), outputs=tuple(self.outputs), bodies=bodies,
                           sharedConstants=tuple(self.shared_constants), sharedBuffers=tuple(self.shared_buffers),
                           edges=tuple(self.edges))

    def to_bytes(self) -> bytes:
        return write_klr(self.kernel())

    # ------------------------------------------------------------------ operators
    def dma(self, dst: Tensor | AP, src: Tensor | AP, *, oob: str = "error", unique_indices: bool = False,
            engine: str = "unassigned", priority: int | None = None, accumulate: bool = False) -> str:
        """nisa.dma_copy; ``accumulate`` adds into the destination (DgeComputeOp.add)."""
        bounds = T.DmaBounds.error() if oob == "error" else T.DmaBounds.skip()
        compute = T.DgeComputeOp.add if accumulate else T.DgeComputeOp.none
        return self.stmt(T.Operator.ncDmaCopy(op=T.NcDmaCopy(
            dst=ref(dst), src=ref(src), compute_op=compute, oobMode=bounds, dgeMode=0,
            uniqueIndices=unique_indices, priority=priority, engine=_ENGINE[engine])))

    def dma_plain(self, dst: Tensor | AP, src: Tensor | AP) -> str:
        """The non-"nc" dmaCopy (both bounds checks: error)."""
        return self.stmt(T.Operator.dmaCopy(op=T.DmaCopy(
            dst=ref(dst), src=ref(src), compute_op=T.DgeComputeOp.none, dstBoundsCheck=T.DmaBounds.error(),
            srcBoundsCheck=T.DmaBounds.error())))

    def tensor_tensor(self, dst: Tensor | AP, a: Tensor | AP, b: Tensor | AP, op: str, *,
                      engine: str = "dve") -> str:
        return self.stmt(T.Operator.tensorTensor(op=T.TensorTensor(
            dst=ref(dst), src0=ref(a), src1=ref(b), op=T.AluOp[op], dtype=None, engine=_ENGINE[engine])))

    def tensor_scalar(self, dst: Tensor | AP, src: Tensor | AP, op0: str, imm0: Any, op1: str | None = None,
                      imm1: Any = None, *, reverse0: bool = False, reverse1: bool = False,
                      engine: str = "unassigned") -> str:
        """``dst = (src op0 imm0) op1 imm1``; an operand is a number or a per-partition column (tensor)."""
        dtype = _as_ap(dst).tensor.tn.dtype
        return self.stmt(T.Operator.tensorScalar(op=T.TensorScalar(
            dst=ref(dst), src=ref(src), imm0=operand(imm0), op0=T.AluOp[op0],
            imm1=None if imm1 is None else operand(imm1), op1=None if op1 is None else T.AluOp[op1],
            reverse=T.TensorScalarReverseOps[_REVERSE[(reverse0, reverse1)]], engine=_ENGINE[engine],
            dtype=dtype)))

    def activation(self, dst: Tensor | AP, src: Tensor | AP, func: str, *, scale: float = 1.0,
                   bias: Tensor | AP | None = None, reduce_op: str | None = None,
                   reduce_res: Tensor | AP | None = None) -> str:
        """NKI ``activation`` (``activation_reduce`` when ``reduce_res`` is given)."""
        payload = T.NcActivate(dst=ref(dst), src=ref(src), accumulatorCmd=T.AccumCmd.Idle,
                               activationFunc=T.ActivationFunc[func], scale=operand(float(scale)),
                               bias=None if bias is None else ref(bias),
                               reduceOp=None if reduce_op is None else T.AluOp[reduce_op],
                               reduceRes=None if reduce_res is None else ref(reduce_res), dtype=None)
        if reduce_res is not None:
            return self.stmt(T.Operator.activationReduce(op=payload))
        return self.stmt(T.Operator.ncActivate(op=payload))

    def tensor_reduce(self, dst: Tensor | AP, src: Tensor | AP, op: str, *, axis: str = "X",
                      negate: bool = False) -> str:
        return self.stmt(T.Operator.tensorReduce(op=T.TensorReduce(
            dst=ref(dst), src=ref(src), op=T.AluOp[op], opDim=T.TensorSubDim[axis], negated=negate, dtype=None,
            keepdims=True)))

    def reciprocal(self, dst: Tensor | AP, src: Tensor | AP) -> str:
        return self.stmt(T.Operator.reciprocal(op=T.Reciprocal(dst=ref(dst), src=ref(src), dtype=None)))

    def matmul(self, dst: Tensor | AP, stationary: Tensor | AP, moving: Tensor | AP, *,
               transpose: bool = False) -> str:
        """``dst[M, N] = stationary[K, M]^T @ moving[K, N]`` (NKI ``nc_matmul``)."""
        return self.stmt(T.Operator.ncMatMul(op=T.NcMatMul(
            dst=ref(dst), stationary=ref(stationary), moving=ref(moving), isStationaryOneZero=False,
            isMovingZero=False, isTranspose=transpose, tilePosition=(), tileSize=(),
            perfMode=T.MatmulPerfMode["None"])))

    def tensor_copy(self, dst: Tensor | AP, src: Tensor | AP, *, engine: str = "act") -> str:
        dtype = _as_ap(dst).tensor.tn.dtype
        return self.stmt(T.Operator.ncCopy(op=T.NcCopy(dst=ref(dst), src=ref(src), dtype=dtype,
                                                      engine=_ENGINE[engine])))

    def memset(self, dst: Tensor | AP, value: float, *, engine: str = "pool") -> str:
        dtype = _as_ap(dst).tensor.tn.dtype
        return self.stmt(T.Operator.memSet(op=T.MemSet(dst=ref(dst), value=imm(value), dtype=dtype,
                                                      engine=_ENGINE[engine])))

    def iota(self, dst: Tensor | AP, offset: int, pattern: Pairs, channel_multiplier: int = 0) -> str:
        """``dst[p, i...] = offset + sum(i_k * step_k) + channel_multiplier * p``."""
        dtype = _as_ap(dst).tensor.tn.dtype
        return self.stmt(T.Operator.iota(op=T.Iota(dst=ref(dst), pattern=T.DataPattern(
            offset=offset, pattern=_pairs(pattern), channelMultiplier=channel_multiplier), dtype=dtype)))

    def operator(self, ctor: str, **fields: Any) -> str:
        """Any KLR operator by its constructor name, its fields under their KLR names
        (:mod:`frontend.klr_operators` converts them by their schema types)."""
        convert = {"ref": ref, "operand": operand, "imm": imm,
                   "dtype_of": lambda d: _as_ap(d).tensor.tn.dtype}
        return self.stmt(build_operator(ctor, fields, convert))

    def core_barrier(self, data: Tensor | AP, cores: Sequence[int], *, engine: str = "sp") -> str:
        return self.stmt(T.Operator.coreBarrier(op=T.CoreBarrier(data=ref(data), cores=tuple(cores),
                                                               engine=_ENGINE[engine])))

    # ------------------------------------------------------------------ registers and control flow
    def reg_move(self, dst: str, value: int) -> str:
        return self.stmt(T.Operator.registerMove(op=T.RegisterMove(dst=dst, imm=value)), "reg")

    def reg_alu(self, dst: str, src: str, op: str, value: int) -> str:
        """``dst = src op value``."""
        return self.stmt(T.Operator.registerAluOp(op=T.RegisterAluOp(dst=dst, src=src, imm=value,
                                                                     op=T.AluOp[op])), "reg")

    def tensor_load(self, reg: str, src: Tensor | AP) -> str:
        return self.stmt(T.Operator.tensorLoad(op=T.TensorLoad(dst=reg, src=ref(src))))

    def tensor_store(self, dst: Tensor | AP, reg: str) -> str:
        return self.stmt(T.Operator.tensorStore(op=T.TensorStore(dst=ref(dst), src=reg)))

    def jump(self, label: str) -> str:
        return self.stmt(T.Operator.cmpBranch(op=T.CmpBranch(reg1="", reg2="", imm=0, op=T.BrCmpOp.always,
                                                             trueLabel=label, falseLabel="")), "jmp")

    def branch(self, op: str, reg1: str, other: str | int, on_true: str, on_false: str) -> str:
        """``op`` is ``lt_reg``/``ne_imm``/...: a register compared with a register or an immediate."""
        reg2, value = (other, 0) if isinstance(other, str) else ("", int(other))
        return self.stmt(T.Operator.cmpBranch(op=T.CmpBranch(reg1=reg1, reg2=reg2, imm=value, op=T.BrCmpOp[op],
                                                             trueLabel=on_true, falseLabel=on_false)), "br")

    def dynamic_loop(self, reg: str, start: int, stop_reg: str, step: int, label: str) -> _Loop:
        """``for reg in range(start, stop_reg, step)`` as blocks (klr-format.md §3.10).

        Use as ``with k.dynamic_loop("reg.i", 0, "reg.n", 1, "loop.1"):``; the
        body goes in block ``<label>.body``, the code after it in ``<label>.exit``.
        """
        return _Loop(self, reg, start, stop_reg, step, label)

    def while_loop(self, cond: str, label: str) -> _While:
        """``while cond != 0:`` as blocks; the body (block ``<label>.body``) sets ``cond`` again."""
        return _While(self, cond, label)


class _Blocks:
    """A loop as blocks: ``<label>.head`` tests, ``<label>.body`` runs and tests again, ``<label>.exit`` follows
    (klr-format.md §3.10).  Subclasses say how it starts, how it advances and what it tests."""

    def __init__(self, k: KernelWriter, reg: str, label: str):
        self.k, self.reg, self.label = k, reg, label  # reg: the loop's counter, or its condition

    def _start(self) -> None:
        """Statements before the first test."""

    def _advance(self) -> None:
        """Statements at the end of the body, before the test."""

    def _test(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> str:
        k, lab = self.k, self.label
        self._start()
        k.jump(f"{lab}.head")
        k.block(f"{lab}.head")
        self._test()
        k.block(f"{lab}.body")
        return self.reg

    def __exit__(self, *exc: object) -> None:
        if exc[0] is not None:
            return
        self._advance()
        self._test()
        self.k.block(f"{self.label}.exit")


class _While(_Blocks):
    """``while cond != 0: body`` (the body sets ``cond`` for the next test)."""

    def _test(self) -> None:
        self.k.branch("ne_imm", self.reg, 0, f"{self.label}.body", f"{self.label}.exit")


class _Loop(_Blocks):
    """``for reg in range(start, stop_reg, step)``."""

    def __init__(self, k: KernelWriter, reg: str, start: int, stop_reg: str, step: int, label: str):
        super().__init__(k, reg, label)
        self.start, self.stop, self.step = start, stop_reg, step

    def _start(self) -> None:
        self.k.reg_move(self.reg, self.start)

    def _advance(self) -> None:
        self.k.reg_alu(self.reg, self.reg, "add", self.step)

    def _test(self) -> None:
        self.k.branch("lt_reg", self.reg, self.stop, f"{self.label}.body", f"{self.label}.exit")
