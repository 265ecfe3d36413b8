"""KLR -> BIR codegen (seed: ``KlirToBirCodegen``): one LNC body of a KLIR kernel into a BIR function.

    fn = Function("my_kernel", FnKind.NKI)
    cg = KlirToBirCodegen(fn, lnc_kernel, core=0, const_files={"hbm_const.1": "shared_constants/ab.npy"})
    cg.codegen_lnc_kernel()
    assert cg.is_allocated

What becomes what (the full table is docs/translate.md):

* **Tensors.** Every KLR memory region becomes one memory-location set
  (``<name>_set``) holding one memory location.  SBUF/PSUM regions are keyed
  by their whole ``Address`` (base partition = ``parOffset``, partitions =
  ``parSize``, byte address = ``freeOffset``, bytes per partition =
  ``freeSize``, PSUM bank = address // 2048).  DRAM regions (hbm,
  shared_hbm, private_hbm) are keyed by ``Address.name`` so that every view
  of a region shares one unallocated memory location: kernel inputs are
  ExternalInput, outputs ExternalOutput, shared constants Const (with
  ``const_file_path``), shared buffers and other ``isShared`` tensors
  Internal with ``addr_space: "Shared"``, the rest Internal.
* **Accesses.** A ``birPattern`` (element offset + ``[step, num]`` pairs over
  the tensor laid out row-major as ``[parDim] + freeDims``) becomes a
  physical access pattern.  On SBUF/PSUM a logical row of ``freeElements``
  elements is a partition row of ``pitch = freeSize / dtype size``
  elements; when the two differ (padded rows) offsets and partition-crossing
  steps are rescaled to the pitch form.  ``dtypeOverride`` sets the
  operand's dtype and the pattern counts elements of that dtype.
* **Operators.** One BIR instruction per KLIR statement (named by the
  statement's name), except ``ncActivate``/``activationReduce`` with a
  ``reduceRes``, which adds a TensorReduce of the activation's output.  The
  NKI ISA operators beyond this core set are lowered by
  :mod:`stages.klr_codegen_ops` (merged into the dispatch table below).
  Operators without a lowering raise a PassError naming the operator and
  the statement: nothing is dropped silently.
* **Control flow.** KLR blocks become top-level BIR blocks (labels kept as
  block names); ``cmpBranch`` becomes CompareAndBranch (``comp_op``
  ``IS_<REL><REG|IMM>``, register operands, ``on_true``/``on_false``) or
  UnconditionalBranch (op ``always``, ``target``).  Registers are created by
  name before the body is lowered.
* **Dynamic accesses** (scalar / vector offsets) go through
  :mod:`stages.klr_dynamic`; the gather index (or the one-element tensor of a
  scalar ``acc`` offset) is hoisted as the instruction's ``indirection_ins``.

The codegen never allocates: a SBUF/PSUM tensor without ``parOffset`` /
``freeOffset`` leaves :attr:`is_allocated` false (TranslateNKIASTToBIR then
fails, as the backend asserts ``getIsAllocated``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

from tusk.ir import enums
from tusk.ir.arch import PARTITIONS, PSUM_BANK_BYTES
from tusk.ir.columns import Record
from tusk.ir.enums import ALU_OP_NAMES, DTYPE_BY_NAME, DTYPE_SIZES, Dt, Kind, Mem, Role, TensorKind
from tusk.ir.errors import FormatError, PassError
from tusk.ir.input_checks import MAX_BYTES
from tusk.ir.klr import types as T
from tusk.ir.module import Function
from tusk.ir.values import ImmValue, Pattern
from tusk.stages.klr_codegen_ops import LOWERING as ISA_LOWERING
from tusk.stages.klr_codegen_ops import read_accumulator
from tusk.stages.klr_dynamic import (
    StaticArg,
    assemble_dynamic_info,
    extract_dynamic_ap_to_standalone,
    is_access_dynamic,
)

MAX_AP_DIMS = 4

# KLR Dtype name -> BIR dtype name.  Same spelling except float8_e4m3 (OCP e4m3 with
# infinities), which BIR calls float8e4.
KLR_TO_BIR_DTYPE: dict[str, str] = {
    "bfloat16": "bfloat16", "float8e3": "float8e3", "float8e4": "float8e4", "float8e5": "float8e5",
    "float16": "float16", "float32": "float32", "float32r": "float32r", "int8": "int8", "int16": "int16",
    "int64": "int64", "int32": "int32", "uint8": "uint8", "uint16": "uint16", "uint32": "uint32",
    "uint64": "uint64", "float8_e4m3": "float8e4", "float8_e4m3fn": "float8_e4m3fn",
    "float8_e5m2_x4": "float8_e5m2_x4", "float8_e4m3fn_x4": "float8_e4m3fn_x4",
    "float4_e2m1fn_x4": "float4_e2m1fn_x4",
}
assert set(KLR_TO_BIR_DTYPE) == {d.name for d in T.Dtype}

# KLR AluOp names are all BIR AluOpType names.
ALU_OPS: dict[str, str] = {op.name: op.name for op in T.AluOp}
assert set(ALU_OPS.values()) <= set(ALU_OP_NAMES)

# KLR ActivationFunc -> BIR ActivationFunctionType (None: no BIR equivalent in this model).
ACTIVATION_FUNCS: dict[str, str | None] = {
    "abs": "Abs", "arctan": "Arctan", "copy": "Copy", "erf": "Erf", "erf_dx": None, "exp": "Exp",
    "gelu": "Gelu", "gelu_apprx_tanh": "Gelu_apprx_tanh", "gelu_dx": None, "log": "Ln", "mish": "Mish",
    "reciprocal": "Reciprocal", "relu": "Relu", "rsqrt": "Rsqrt", "sigmoid": "Sigmoid", "sign": "Sign",
    "silu": "Silu", "silu_dx": None, "sin": "Sin", "softplus": "Softplus", "sqrt": "Sqrt",
    "square": "Square", "tanh": "Tanh", "gelu_apprx_sigmoid": None, "gelu_apprx_sigmoid_dx": None,
}
assert set(ACTIVATION_FUNCS) == {f.name for f in T.ActivationFunc}

# KLR Engine -> BIR EngineType name (unassigned: the operator's default engine).
ENGINES = {"act": "Activation", "dma": "DMA", "dve": "DVE", "pe": "PE", "pool": "Pool", "sp": "SP"}

DRAM_MEMORIES = frozenset({"hbm", "shared_hbm", "private_hbm"})
MATMUL_PERF = {"None": "None", "DoubleRow": "DoubleRow", "DoubleRowSwInterleave": "DoubleRowSwInterleave"}


_BIR_DTYPE = {d: DTYPE_BY_NAME[KLR_TO_BIR_DTYPE[d.name]] for d in T.Dtype}


def bir_dtype(d: Any) -> int:
    """BIR dtype ordinal of a KLR Dtype."""
    return _BIR_DTYPE[d]


def _key(v: Any) -> Any:
    """A hashable stand-in for a JSON-able attribute value (lists -> tuples, typed scalars)."""
    if isinstance(v, dict):
        return ("d",) + tuple((k, _key(x)) for k, x in sorted(v.items()))
    if isinstance(v, (list, tuple)):
        return ("l",) + tuple(_key(x) for x in v)
    return (type(v).__name__, v)


@dataclass
class _Region:
    memloc: int
    mtype: int
    nparts: int
    nbytes: int  # bytes per partition (SB/PSUM) or of the whole region (DRAM)


class KlirToBirCodegen:
    """Lowers body ``core`` of an ``LncKernel`` into ``fn`` (an empty NKI-kind function).

    ``const_files`` maps a shared-constant tensor name to the path recorded
    as its ``const_file_path`` (TranslateNKIASTToBIR passes artifact-relative
    paths).
    """

    def __init__(self, fn: Function, kernel: Any, core: int = 0, *, const_files: dict[str, str] | None = None):
        self.fn = fn
        self.kernel = kernel
        self.core = core
        self.const_files = dict(const_files or {})
        self.inputs = {t.address.name for t in kernel.inputs} | {t.name for t in kernel.inputs}
        self.outputs = {t.address.name for t in kernel.outputs} | {t.name for t in kernel.outputs}
        self.shared = {t.address.name for t in kernel.sharedBuffers} | {t.name for t in kernel.sharedBuffers}
        # name -> the interface TensorName that fixes a DRAM region's dtype and shape
        self.interface: dict[str, Any] = {}
        for t in (*kernel.inputs, *kernel.outputs, *kernel.sharedBuffers):
            self.interface.setdefault(t.address.name, t)
        self._regions: dict[Any, _Region] = {}
        self._names: set[str] = set()
        self.unallocated: list[str] = []
        self.n_operators = 0
        # per statement
        self._stmt_name = ""
        self._where = ""
        self._indirect: list[StaticArg] = []
        self._block = -1
        self._inst_names: set[str] = set()
        self._rows_by_stmt: dict[str, int] = {}
        self._barriers = 0
        self._pattern_ids: dict[Pattern, int] = {}   # local interning caches (the pools hash deeply)
        self._records: dict[Any, int] = {}

    # ================================================================== entry
    def codegen_lnc_kernel(self) -> Function:
        """Lower the body of this core; returns ``fn``."""
        k = self.kernel
        if not 0 <= self.core < len(k.bodies):
            raise PassError(f"kernel {k.name} has {len(k.bodies)} bodies; no body for core {self.core}")
        blocks = k.bodies[self.core]
        for t in (*k.inputs, *k.outputs, *k.sharedBuffers):
            self._region(t)  # the interface exists even where this core does not touch it
        self._declare_registers(blocks)
        labels = [b.label for b in blocks]
        dup = {x for x in labels if labels.count(x) > 1}
        if dup:
            raise PassError(f"kernel {k.name}: block label(s) {sorted(dup)} are not unique")
        self.labels = set(labels)
        if not blocks:
            self.fn.add_block("Block1")
        for block in blocks:
            extra = Record.of({"no_reorder": True}) if block.noReorder else None
            self._block = self.fn.add_block(block.label, extra=extra)
            for stmt in block.body:
                self._statement(block.label, stmt)
        self._edges(k.edges)
        self.fn.invalidate()
        return self.fn

    @property
    def is_allocated(self) -> bool:
        """True when every SBUF/PSUM tensor has a fixed placement (``getIsAllocated``)."""
        return not self.unallocated

    # ================================================================== tensors
    def _unique(self, name: str) -> str:
        out, k = name, 1
        while out in self._names:
            out = f"{name}.{k}"
            k += 1
        self._names.add(out)
        return out

    def _region(self, t: Any) -> _Region:
        addr = t.address
        mem = addr.memory.name
        dram = mem in DRAM_MEMORIES
        key = ("dram", addr.name) if dram else addr
        hit = self._regions.get(key)
        if hit is not None:
            if dram:
                need = self._dram_bytes(t)
                if need > hit.nbytes:
                    hit.nbytes = need
                    self.fn.memlocs.set("pbytes", hit.memloc, need)
            return hit
        fn = self.fn
        if dram:
            src = self.interface.get(addr.name, t)
            dt = bir_dtype(src.dtype)
            shape = (src.shape.parDim, *src.shape.freeDims)
            kind, extra, const_path = TensorKind.Internal, None, None
            if addr.name in self.outputs:  # first: an argument written in place is among the inputs too
                kind = TensorKind.ExternalOutput
            elif addr.name in self.inputs:
                kind = TensorKind.ExternalInput
            elif t.name in self.const_files or addr.name in self.const_files:
                kind = TensorKind.Const
                const_path = self.const_files.get(t.name, self.const_files.get(addr.name))
            if addr.isShared or addr.name in self.shared or mem == "shared_hbm":
                extra = Record.of({"addr_space": "Shared"})
            name = self._unique(addr.name)
            s = fn.add_set(f"{name}_set", kind, dt, shape, extra=extra)
            nbytes = self._dram_bytes(t)
            m = fn.add_memloc(s, name, Mem.DRAM, pbytes=nbytes, nparts=1, const_path=const_path)
            region = _Region(m, Mem.DRAM, 1, nbytes)
        elif mem in ("sbuf", "psum"):
            mtype = Mem.SB if mem == "sbuf" else Mem.PSUM
            placed = addr.parOffset is not None and addr.freeOffset is not None
            if not placed:
                self.unallocated.append(t.name)
            base = addr.parOffset or 0
            a = addr.freeOffset if placed else -1
            bank = a // PSUM_BANK_BYTES if (mtype == Mem.PSUM and a >= 0) else -1
            name = self._unique(addr.name)
            if max(a, 0) + addr.freeSize > MAX_BYTES or addr.parSize * addr.freeSize > MAX_BYTES:
                # as the BIR-JSON reader refuses: an address near 2^63 wrapped in build_fdeps (an internal error)
                raise FormatError(f"tensor {t.name}: address {a} + {addr.freeSize} bytes x {addr.parSize} "
                                  f"partitions ends past 2^62{self._where}")
            s = fn.add_set(f"{name}_set", TensorKind.Internal, bir_dtype(t.dtype),
                           (t.shape.parDim, *t.shape.freeDims))
            m = fn.add_memloc(s, name, mtype, addr=a, pbytes=addr.freeSize, nparts=addr.parSize, base=base, bank=bank)
            region = _Region(m, mtype, addr.parSize, addr.freeSize)
        else:
            raise PassError(f"tensor {t.name}: memory {mem} is not supported by the KLR -> BIR codegen{self._where}")
        self._regions[key] = region
        return region

    def memloc_name(self, t: Any) -> str:
        """Name of the memory location holding tensor ``t`` (one per memory region)."""
        return self.fn.strings[self.fn.memlocs.get("name", self._region(t).memloc)]

    def _dram_bytes(self, t: Any) -> int:
        a = t.address
        logical = t.shape.parDim * t.freeElements * DTYPE_SIZES[bir_dtype(t.dtype)]
        nbytes = max(a.parSize * a.freeSize, logical)
        if nbytes > MAX_BYTES:  # as the BIR-JSON reader refuses: past int64 once summed with an offset
            raise FormatError(f"tensor {t.name}: {nbytes} bytes of DRAM, past 2^62{self._where}")
        return nbytes

    # ================================================================== accesses
    def static_access(self, access: Any) -> StaticArg:
        """``codegenAccess``: the static operand of an Access (or BirAccessPattern / abstract TensorRef)."""
        if isinstance(access, T.TensorRef_abstract):
            access = access.access
        if isinstance(access, T.Access_birPattern):
            access = access.access
        if isinstance(access, T.BirAccessPattern):
            if is_access_dynamic(access):
                raise PassError(f"a dynamic access nested inside a runtime offset is not supported{self._where}")
            return self.bap_static(access)
        if isinstance(access, T.Access_simple):
            t = access.tensor
            dims = (t.shape.parDim, *t.shape.freeDims)
            return self._place(t, bir_dtype(t.dtype), 0, _row_major(dims))
        if isinstance(access, T.Access_basic):
            return self._basic(access.access)
        raise PassError(f"access form {type(access).__qualname__} is not supported by the KLR -> BIR codegen"
                        f"{self._where}")

    def bap_static(self, bap: Any) -> StaticArg:
        """The static part of a BirAccessPattern (its runtime offsets are ignored here)."""
        t = bap.tensor
        dt = bir_dtype(bap.dtypeOverride) if bap.dtypeOverride is not None else bir_dtype(t.dtype)
        return self._place(t, dt, bap.offset, tuple((p.step, p.num) for p in bap.pattern))

    def _basic(self, ab: Any) -> StaticArg:
        t = ab.tensor
        dims = (t.shape.parDim, *t.shape.freeDims)
        if len(ab.indexes) != len(dims):
            raise PassError(f"tensor {t.name}: {len(ab.indexes)} indexes for {len(dims)} dimensions{self._where}")
        strides = [math.prod(dims[k + 1:]) for k in range(len(dims))]
        offset, pattern = 0, []
        for ix, stride in zip(ab.indexes, strides):
            if isinstance(ix, T.Index_coord):
                offset += ix.e * stride
            else:
                sl = ix.slice
                offset += sl.l * stride
                num = max(0, -(-(sl.u - sl.l) // sl.step)) if sl.step > 0 else max(0, -(-(sl.l - sl.u) // -sl.step))
                pattern.append((sl.step * stride, num))
        return self._place(t, bir_dtype(t.dtype), offset, tuple(pattern) or ((1, 1),))

    def _place(self, t: Any, dt: int, offset: int, pattern: Pattern) -> StaticArg:
        if not pattern:
            raise PassError(f"tensor {t.name}: an access pattern without dimensions{self._where}")
        if len(pattern) > MAX_AP_DIMS:
            raise PassError(f"tensor {t.name}: access pattern of {len(pattern)} dimensions; BIR allows at most "
                            f"{MAX_AP_DIMS}{self._where}")
        region = self._region(t)
        size = DTYPE_SIZES[dt]
        row_bytes = t.freeElements * DTYPE_SIZES[bir_dtype(t.dtype)]
        if row_bytes % size:
            raise PassError(f"tensor {t.name}: a row of {row_bytes} bytes is not a whole number of "
                            f"{enums.DTYPE_NAMES[dt]} elements{self._where}")
        logical = row_bytes // size
        if logical <= 0:
            raise FormatError(f"tensor {t.name}: no elements in a partition row (free dimensions "
                              f"{list(t.shape.freeDims)}){self._where}")
        if region.mtype == Mem.DRAM:
            return StaticArg(region.memloc, dt, offset, pattern, False, 1, region.nbytes, 0, logical)
        pitch = region.nbytes // size
        if pitch != logical:
            offset, pattern = self._to_pitch(t, offset, pattern, logical, pitch)
        return StaticArg(region.memloc, dt, offset, pattern, True, region.nparts, region.nbytes, pitch, logical)

    def _to_pitch(self, t: Any, offset: int, pattern: Pattern, row: int, pitch: int) -> tuple[int, Pattern]:
        """Logical row-major indices (rows of ``row`` elements) -> partition rows of ``pitch`` elements."""
        q, r = divmod(offset, row)
        out, lo, hi = [], 0, 0
        for step, num in pattern:
            if num <= 1 or (step and step % row == 0):
                out.append(((step // row) * pitch if (step and step % row == 0) else step, num))
                continue
            out.append((step, num))
            ext = step * (num - 1)
            lo, hi = (lo + ext, hi) if ext < 0 else (lo, hi + ext)
        if r + lo < 0 or r + hi >= row:
            raise PassError(f"tensor {t.name}: access pattern {list(pattern)} at offset {offset} crosses rows of "
                            f"{row} elements, which cannot be expressed on partition rows of {pitch}{self._where}")
        return q * pitch + r, tuple(out)

    # ================================================================== operands
    def _row(self, role: int, a: StaticArg, dyn: int = -1) -> tuple:
        pid = self._pattern_ids.get(a.pattern)
        if pid is None:
            pid = self._pattern_ids[a.pattern] = self.fn.pattern_id(a.pattern)
        return (role, Kind.PHYSICAL, a.dtype, a.memloc, a.offset, pid, -1, dyn, -1)

    def _record(self, attrs: dict | None) -> int:
        if not attrs:
            return -1
        key = _key(attrs)
        rid = self._records.get(key)
        if rid is None:
            rid = self._records[key] = self.fn.intern_record(Record.of(attrs))
        return rid

    def operand(self, ref: Any, role: int) -> tuple:
        """An operand row for a TensorRef; a dynamic one gets its DynamicAPInfo and hoisted index."""
        if not isinstance(ref, T.TensorRef_abstract):
            raise PassError(f"tensor reference {type(ref).__qualname__} is not supported by the KLR -> BIR "
                            f"codegen (the front end only emits TensorRef.abstract){self._where}")
        if is_access_dynamic(ref):
            bap = ref.access.access
            arg = self.bap_static(bap)
            dyn = assemble_dynamic_info(self, ref, arg)
            if bap.vectorOffset is not None:
                index, _cleared = extract_dynamic_ap_to_standalone(self, ref)
                self._hoist(index)
            elif isinstance(bap.scalarOffset, T.ScalarOffset_acc):
                self._hoist(self.static_access(bap.scalarOffset.a))
            return self._row(role, arg, self.fn.intern(dyn))
        return self._row(role, self.static_access(ref.access))

    def _hoist(self, index: StaticArg) -> None:
        if self._indirect:
            raise PassError(f"more than one runtime-offset tensor on one instruction is not supported{self._where}")
        self._indirect.append(index)

    def _reg(self, name: str, role: int) -> tuple:
        r = self.fn.reg_by_name(name)
        if r < 0:
            r = self.fn.add_reg(name)
        return (role, Kind.REGISTER, Dt.int32, -1, 0, -1, r, -1, -1)

    def _imm(self, value: int | float) -> tuple:
        dt = Dt.int32 if isinstance(value, int) else Dt.float32
        return (Role.IN, Kind.IMM, dt, -1, 0, -1, self.fn.intern(ImmValue(value)), -1, -1)

    def _declare_registers(self, blocks: Any) -> None:
        """Create every register the body names, in order of first appearance (getRegisterByName)."""
        fn = self.fn
        for block in blocks:
            for stmt in block.body:
                p = stmt.op.op
                names: tuple = ()
                if isinstance(p, T.RegisterMove):
                    names = (p.dst,)
                elif isinstance(p, T.RegisterAluOp):
                    names = (p.dst, p.src)
                elif isinstance(p, T.TensorLoad):
                    names = (p.dst,)
                elif isinstance(p, T.TensorStore):
                    names = (p.src,)
                elif isinstance(p, T.CmpBranch):
                    names = (p.reg1, p.reg2)
                for n in names:
                    if n and fn.reg_by_name(n) < 0:
                        fn.add_reg(n)

    # ================================================================== statements
    def _statement(self, label: str, stmt: Any) -> None:
        op = stmt.op
        ctor = op.klr_ctor
        name = stmt.name if stmt.name else f"stmt.{self.n_operators}"
        self._stmt_name = name
        pos = stmt.pos
        at = f", {pos.filename}:{pos.line}" if pos.filename else (f", line {pos.line}" if pos.line else "")
        self._where = f" (statement {name} in block {label}{at})"
        self._indirect = []
        self.n_operators += 1
        lower = _LOWERING.get(ctor)
        if lower is None:
            raise PassError(f"KLIR operator {ctor} is not supported by the KLR -> BIR codegen{self._where}")
        lower(self, op.op)

    def _emit(self, opname: str, engine: str, ins: list[tuple], outs: list[tuple], attrs: dict | None = None,
              suffix: str = "") -> int:
        rows = list(ins)
        rows += [self._row(Role.INDIRECT, a) for a in self._indirect]
        rows += outs
        self._indirect = []
        name = self._stmt_name + suffix
        if name in self._inst_names:
            k = 1
            while f"{name}#{k}" in self._inst_names:
                k += 1
            name = f"{name}#{k}"
        self._inst_names.add(name)
        row = self.fn.add_inst(enums.OPCODE_BY_NAME[opname], enums.ENGINE_BY_NAME[engine], self._block, name,
                               rows, attrs=self._record(attrs))
        if not suffix:
            self._rows_by_stmt.setdefault(self._stmt_name, row)
        return row

    def _engine(self, e: Any, default: str) -> str:
        return ENGINES.get(e.name, default)

    def _unsupported(self, what: str) -> PassError:
        return PassError(f"{what} is not supported by the KLR -> BIR codegen{self._where}")

    def _value(self, imm: Any, what: str) -> int | float:
        if isinstance(imm, T.Immediate_float32):
            return float(imm.f)
        if isinstance(imm, T.Immediate_int32):
            return int(imm.i)
        raise self._unsupported(f"{what} {type(imm).__qualname__}")

    # ------------------------------------------------------------------ DMA
    def _dma_attrs(self, oob_is_err: bool, compute_op: Any) -> dict:
        attrs = {"oob_is_err": oob_is_err}
        if compute_op.name != "none":  # DgeComputeOp.add: the DMA accumulates into its destination
            attrs.update(mode="CCE", cce_op=compute_op.name)
        return attrs

    def nc_dma_copy(self, p: Any) -> None:
        oob = self._bounds(p.oobMode, "oobMode")
        if p.uniqueIndices:
            # the unique-indices gather: the index must come through a vector offset
            target = p.src if is_access_dynamic(p.src) or not is_access_dynamic(p.dst) else p.dst
            extract_dynamic_ap_to_standalone(self, target)
        src = self.operand(p.src, Role.IN)
        dst = self.operand(p.dst, Role.OUT)
        self._emit("DMACopy", "DMA", [src], [dst], self._dma_attrs(oob, p.compute_op))

    def dma_copy(self, p: Any) -> None:
        oob = self._bounds(p.dstBoundsCheck, "dstBoundsCheck") and self._bounds(p.srcBoundsCheck, "srcBoundsCheck")
        src = self.operand(p.src, Role.IN)
        dst = self.operand(p.dst, Role.OUT)
        self._emit("DMACopy", "DMA", [src], [dst], self._dma_attrs(oob, p.compute_op))

    def _bounds(self, b: Any, what: str) -> bool:
        if isinstance(b, T.DmaBounds_error):
            return True
        if isinstance(b, T.DmaBounds_skip):
            return False
        raise self._unsupported(f"{what} DmaBounds.reg")

    # ------------------------------------------------------------------ elementwise
    def tensor_tensor(self, p: Any) -> None:
        a, b = self.operand(p.src0, Role.IN), self.operand(p.src1, Role.IN)
        dst = self.operand(p.dst, Role.OUT)
        self._emit("TensorTensor", self._engine(p.engine, "DVE"), [a, b], [dst], {"op": ALU_OPS[p.op.name]})

    def _scalar_operand(self, x: Any, what: str) -> tuple[tuple | None, int | float | None]:
        """(operand row, None) for a tile, (None, constant) for an immediate."""
        if isinstance(x, T.Operand_tile):
            return self.operand(x.t, Role.IN), None
        return None, self._value(x.i, what)

    def tensor_scalar(self, p: Any) -> None:
        src = self.operand(p.src, Role.IN)
        r0, c0 = self._scalar_operand(p.imm0, "tensorScalar imm0")
        op0 = ALU_OPS[p.op0.name]
        # the second stage applies only when both its operator and its operand are given
        second = p.op1 is not None and p.imm1 is not None
        op1 = ALU_OPS[p.op1.name] if second else "bypass"
        r1, c1 = self._scalar_operand(p.imm1, "tensorScalar imm1") if second else (None, 0.0)
        rev = p.reverse.name
        rev0, rev1 = rev in ("first", "both"), rev in ("second", "both")
        dst = self.operand(p.dst, Role.OUT)
        engine = self._engine(p.engine, "DVE")
        if r0 is None and r1 is None:
            attrs = {"op0": op0, "const0": float(c0), "reverse0": rev0, "op1": op1, "const1": float(c1),
                     "reverse1": rev1}
            self._emit("TensorScalar", engine, [src], [dst], attrs)
            return
        ins = [src, r0 if r0 is not None else self._imm(float(c0))]
        if second:
            ins.append(r1 if r1 is not None else self._imm(float(c1)))
        attrs = {"op0": op0, "reverse0": rev0, "op1": op1, "reverse1": rev1}
        self._emit("TensorScalarPtr", engine, ins, [dst], attrs)

    def reciprocal(self, p: Any) -> None:
        src = self.operand(p.src, Role.IN)
        dst = self.operand(p.dst, Role.OUT)
        attrs = {"op0": "divide", "const0": 1.0, "reverse0": True, "op1": "bypass", "const1": 0.0, "reverse1": False}
        self._emit("TensorScalar", "DVE", [src], [dst], attrs)

    def nc_activate(self, p: Any) -> None:
        if p.accumulatorCmd.name != "Idle":
            raise self._unsupported(f"activation accumulatorCmd {p.accumulatorCmd.name}")
        func = ACTIVATION_FUNCS[p.activationFunc.name]
        if func is None:
            raise self._unsupported(f"activation function {p.activationFunc.name}")
        ins = [self.operand(p.src, Role.IN)]
        if p.bias is not None:
            ins.append(self.operand(p.bias, Role.IN))
        if isinstance(p.scale, T.Operand_tile):
            # a per-partition scale tile is the third input (Tusk's spelling, docs/bir-json.md); attr scale 1.0
            if p.bias is None:
                ins.append(self._imm(0.0))
            ins.append(self.operand(p.scale.t, Role.IN))
            scale = 1.0
        else:
            scale = float(self._value(p.scale.i, "activation scale"))
        dst = self.operand(p.dst, Role.OUT)
        # activation-reduce: the engine reduces the values it computes (float32, along the free axes) into its
        # reduce registers, from zero, and a read-accumulator writes them out (tusk.sim.accumulators)
        reduced = p.reduceRes is not None
        red_op = (ALU_OPS[p.reduceOp.name] if p.reduceOp is not None else "add") if reduced else "bypass"
        attrs = {"func": func, "scale": scale, "alpha": 0.0, "acc": "ZeroAccumulate" if reduced else "Idle",
                 "op0": "bypass", "op1": "bypass", "reduce_op": red_op}
        self._emit("Activation", "Activation", ins, [dst], attrs)
        if reduced:
            read_accumulator(self, p.reduceRes, "Activation")

    def tensor_reduce(self, p: Any) -> None:
        src = self.operand(p.src, Role.IN)
        dst = self.operand(p.dst, Role.OUT)
        self._emit("TensorReduce", "DVE", [src], [dst],
                   {"op": ALU_OPS[p.op.name], "axis": p.opDim.name, "negate": bool(p.negated)})

    def nc_copy(self, p: Any) -> None:
        src = self.operand(p.src, Role.IN)
        dst = self.operand(p.dst, Role.OUT)
        self._emit("TensorCopy", self._engine(p.engine, "Pool"), [src], [dst])

    def copy(self, p: Any) -> None:
        src = self.operand(p.src, Role.IN)
        dst = self.operand(p.dst, Role.OUT)
        self._emit("TensorCopy", "Pool", [src], [dst])

    def mem_set(self, p: Any) -> None:
        value = self._value(p.value, "memSet value")
        dst = self.operand(p.dst, Role.OUT)
        self._emit("Memset", self._engine(p.engine, "Pool"), [], [dst], {"mode": "Const", "constant": value})

    def iota(self, p: Any) -> None:
        dp = p.pattern
        dst = self.operand(p.dst, Role.OUT)
        attrs = {"base": int(dp.offset), "pattern": [[a.step, a.num] for a in dp.pattern],
                 "channel_multiplier": int(dp.channelMultiplier)}
        self._emit("Iota", "Pool", [], [dst], attrs)

    # ------------------------------------------------------------------ matmul
    def nc_mat_mul(self, p: Any) -> None:
        st = self.operand(p.stationary, Role.IN)
        mv = self.operand(p.moving, Role.IN)
        dst = self.operand(p.dst, Role.OUT)
        attrs = {"accumulation_flag": 0, "psum_zero_region": 0, "replication_resolution": 0,
                 "replication_shift_amnt": 0, "replication_num_rows": 0, "is_transpose": bool(p.isTranspose),
                 "is_fmap_onezero": bool(p.isMovingZero), "is_weight_onezero": bool(p.isStationaryOneZero),
                 "tile_size": list(p.tileSize) if p.tileSize else [PARTITIONS, PARTITIONS],
                 "tile_position": list(p.tilePosition) if p.tilePosition else [0, 0],
                 "perf_mode": MATMUL_PERF[p.perfMode.name], "ifmap_quant_offset": 0, "weights_quant_offset": 0}
        self._emit("Matmult", "PE", [st, mv], [dst], attrs)

    # ------------------------------------------------------------------ registers and control
    def register_move(self, p: Any) -> None:
        self._emit("RegisterMove", "SP", [self._imm(int(p.imm))], [self._reg(p.dst, Role.OUT)])

    def register_alu_op(self, p: Any) -> None:
        self._emit("RegisterAlu", "SP", [self._reg(p.src, Role.IN), self._imm(int(p.imm))],
                   [self._reg(p.dst, Role.OUT)], {"op": ALU_OPS[p.op.name], "is_64bit": False})

    def tensor_load(self, p: Any) -> None:
        self._emit("TensorLoad", "SP", [self.operand(p.src, Role.IN)], [self._reg(p.dst, Role.OUT)])

    def tensor_store(self, p: Any) -> None:
        self._emit("TensorSave", "SP", [self._reg(p.src, Role.IN)], [self.operand(p.dst, Role.OUT)])

    def cmp_branch(self, p: Any) -> None:
        op = p.op.name
        for label in (p.trueLabel, p.falseLabel):
            if label and label not in self.labels:
                raise PassError(f"branch to {label!r}, which is not a block of this body{self._where}")
        if op == "always":
            if not p.trueLabel:
                raise PassError(f"an unconditional branch without a target{self._where}")
            self._emit("UnconditionalBranch", "SP", [], [], {"target": p.trueLabel})
            return
        rel, kind = op.split("_")
        ins = [self._reg(p.reg1, Role.IN)]
        ins.append(self._reg(p.reg2, Role.IN) if kind == "reg" else self._imm(int(p.imm)))
        attrs = {"comp_op": f"IS_{rel.upper()}{kind.upper()}", "on_true": p.trueLabel}
        if p.falseLabel:
            attrs["on_false"] = p.falseLabel
        self._emit("CompareAndBranch", "SP", ins, [], attrs)

    def core_barrier(self, p: Any) -> None:
        data = self.operand(p.data, Role.IN)
        self._barriers += 1
        self._emit("CoreBarrier", self._engine(p.engine, "SP"), [data], [],
                   {"cores": [int(c) for c in p.cores], "id": self._barriers - 1})

    # ------------------------------------------------------------------ edges
    def _edges(self, edges: Any) -> None:
        """Scheduling edges between named statements -> Ordered dependencies (forward ones only)."""
        rows = self._rows_by_stmt
        self.skipped_edges = 0
        for e in edges:
            src = rows.get(e.fromEdge)
            for to in e.toEdges:
                dst = rows.get(to)
                if src is None or dst is None or src >= dst:
                    self.skipped_edges += 1
                    continue
                self.fn.add_dep(src, dst, enums.Edge.Ordered)


def _row_major(dims: tuple[int, ...]) -> Pattern:
    """The whole-tensor pattern ``[(F, P), (F2..., F1), ..., (1, Fk)]`` of a row-major tensor."""
    pairs = [(math.prod(dims[k + 1:]), d) for k, d in enumerate(dims)]
    return tuple(pairs) if len(pairs) > 1 else tuple(pairs) + ((1, 1),)


_LOWERING: dict[str, Callable[[KlirToBirCodegen, Any], None]] = {
    "ncDmaCopy": KlirToBirCodegen.nc_dma_copy,
    "dmaCopy": KlirToBirCodegen.dma_copy,
    "tensorTensor": KlirToBirCodegen.tensor_tensor,
    "tensorScalar": KlirToBirCodegen.tensor_scalar,
    "reciprocal": KlirToBirCodegen.reciprocal,
    "ncActivate": KlirToBirCodegen.nc_activate,
    "activationReduce": KlirToBirCodegen.nc_activate,
    "tensorReduce": KlirToBirCodegen.tensor_reduce,
    "ncCopy": KlirToBirCodegen.nc_copy,
    "copy": KlirToBirCodegen.copy,
    "memSet": KlirToBirCodegen.mem_set,
    "iota": KlirToBirCodegen.iota,
    "ncMatMul": KlirToBirCodegen.nc_mat_mul,
    "registerMove": KlirToBirCodegen.register_move,
    "registerAluOp": KlirToBirCodegen.register_alu_op,
    "tensorLoad": KlirToBirCodegen.tensor_load,
    "tensorStore": KlirToBirCodegen.tensor_store,
    "cmpBranch": KlirToBirCodegen.cmp_branch,
    "coreBarrier": KlirToBirCodegen.core_barrier,
}

_LOWERING.update(ISA_LOWERING)  # the ISA operators beyond the core set

#: KLIR operators the codegen lowers (everything else raises a PassError naming it).
SUPPORTED_OPERATORS = frozenset(_LOWERING)
