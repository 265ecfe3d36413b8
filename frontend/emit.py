"""Write a placed trace as a KLR ``LncKernel`` (the shape KLR's own front end emits, klr-format.md §4).

Dynamic loops become the block shape of §3.10: a counter register, a bound
register, ``lt_reg`` branches.  An access whose offset depends on loop
indices gets a *form register* holding ``sum(coeff * index)`` in elements
(``scalarOffset.reg``, ``indirectDim`` = the last axis, so the coefficient is
one element).  KLR registers only take ``dst = src op imm``, so a form is
kept incrementally: set to its value at the loop starts in the preheader of
its outermost loop, advanced by ``coeff * step`` at the end of every body of
a loop it depends on, and moved back by ``coeff * step * trip`` when an inner
loop exits.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from tusk.frontend.affine import LoopVar
from tusk.frontend.errors import TraceError
from tusk.frontend.klr_writer import AP, KernelWriter
from tusk.frontend.tensors import INTERFACE_ROLES, PARTITIONS, Tensor, View, is_register
from tusk.frontend.tracer import LoopBegin, LoopEnd, Op, Tracer
from tusk.ir.klr import types as T

Form = tuple[tuple[LoopVar, int], ...]


class Emitter:
    def __init__(self, tr: Tracer, filename: str):
        self.tr = tr
        self.k = KernelWriter(tr.name, filename=filename)
        self.forms: dict[Form, str] = {}
        # per form, the lowest constant an access adds to it, when negative (``dst[:, y - 1]`` in a loop from
        # 1): the form's register starts that much lower and each access adds its constant less that, because
        # an access pattern's offset is a natural number
        self.form_base: dict[Form, int] = {}
        self.open_loops: dict[LoopVar, Any] = {}  # the KernelWriter loop each open dynamic loop is writing
        self.counters: dict[LoopVar, str] = {}  # the counter register of each dynamic loop (a loop index reads it)
        self._labels = 0
        self._regs = 0
        # which forms each loop advances, and which it initialises (its outermost variable)
        self.advance: dict[LoopVar, list[Form]] = {}
        self.init_at: dict[LoopVar, list[Form]] = {}
        self._collect_forms()

    # ------------------------------------------------------------------ registers
    def _reg(self) -> str:
        self._regs += 1
        return f"reg.{self._regs}"

    def _collect_forms(self) -> None:
        for entry in self.tr.prog:
            if isinstance(entry, Op):
                for v in self._views(entry):
                    if not v.offset.is_static:
                        form = v.offset.terms
                        if v.offset.const < self.form_base.get(form, 0):
                            self.form_base[form] = v.offset.const
                        if form not in self.forms:
                            self.forms[form] = self._reg()
                            outer = min((var for var, _ in form), key=lambda x: x.depth)
                            self.init_at.setdefault(outer, []).append(form)
                            for var, _ in form:
                                self.advance.setdefault(var, []).append(form)

    @staticmethod
    def _views(op: Op) -> list[View]:
        return [x for x in op.params.values() if isinstance(x, View)]

    # ------------------------------------------------------------------ tensors and accesses
    def klr_tensor(self, t: Tensor) -> Any:
        if t.klr is None and t.alias_of is not None:  # the same TensorName read as another dtype
            base = self.klr_tensor(t.alias_of)
            phys = t.physical_shape  # another element width rescales the last axis (the address stays)
            tn = dataclasses.replace(base.tn, dtype=T.Dtype[t.dtype], freeElements=math.prod(phys[1:]),
                                     shape=T.Shape(parDim=phys[0], freeDims=tuple(phys[1:])))
            t.klr = type(base)(base.writer, tn)
        if t.klr is None:
            k = self.k
            shape = t.physical_shape
            if t.memory == "sbuf":
                t.klr = k.sbuf(t.name, shape, t.dtype, addr=t.addr or 0)
            elif t.memory == "psum":
                t.klr = k.psum(t.name, shape, t.dtype, addr=t.addr or 0)
            elif t.role in ("input", "inout"):
                t.klr = k.input(t.name, shape, t.dtype)
                if t.role == "inout":  # read and written in place: KLR lists it among the outputs too
                    k.outputs.append(t.klr.tn)
            elif t.role == "output":
                t.klr = k.output(t.name, shape, t.dtype)
            else:
                t.klr = k.tensor(t.name, shape, t.dtype, "hbm")
        return t.klr

    def ap(self, v: View) -> AP:
        t = self.klr_tensor(v.tensor)
        dims = v.dims
        if v.tensor.on_chip and len(dims) == 1:
            dims = dims + ((1, 1),)  # a column: partitions, one element each
        scalar: Any = None
        indirect = 0
        offset = v.offset.const
        if not v.offset.is_static:
            scalar = self.forms[v.offset.terms]
            indirect = len(v.tensor.shape) - 1  # element units: the accumulated shape past the last axis
            offset -= self.form_base.get(v.offset.terms, 0)
            if offset < 0:
                raise TraceError(f"{self.k.filename}: not supported: an access of {v.tensor.name} at {v.offset} "
                                 f"below its loop's first address (a negative access-pattern offset)")
        elif getattr(v, "scalar", None) is not None:  # ap(scalar_offset=<tile or register>): a runtime offset
            s = v.scalar
            scalar = s.name if is_register(s) else self.ap(s)
            indirect = v.indirect_dim
        vector = None if v.vector is None else self.ap(v.vector)  # a gather/scatter: rows from an index tile
        return t.ap([list(d) for d in dims], offset, scalar=scalar, vector=vector, indirect_dim=indirect)

    # ------------------------------------------------------------------ program
    def run(self) -> KernelWriter:
        k = self.k
        for t in self.tr.tensors:  # the interface, in argument order, whether or not it is touched
            if t.role in INTERFACE_ROLES and not t.on_chip:
                self.klr_tensor(t)
        if self.tr.identity is not None and self.tr.identity.addr is not None:
            self._identity()
        for entry in self.tr.prog:
            if isinstance(entry, LoopBegin):
                k.pos_line = entry.line
                self._loop_begin(entry.var)
            elif isinstance(entry, LoopEnd):
                k.pos_line = entry.line
                self._loop_end(entry.var)
            else:
                k.pos_line = entry.line
                handler = getattr(self, "op_" + entry.kind)
                for params in _fit(entry.kind, entry.params, where=f"{self.k.filename}:{entry.line}"):
                    handler(**params)
        return k

    def _identity(self) -> None:
        k, ident = self.k, self.tr.identity
        ident_t = self.klr_tensor(ident)
        iot = self.klr_tensor(self.tr.identity_iota)
        k.pos_line = 0
        k.iota(iot, 0, [[-1, PARTITIONS]], channel_multiplier=1)  # p - j
        k.tensor_scalar(ident_t, iot, "is_equal", 0)

    def _loop_begin(self, var: LoopVar) -> None:
        k = self.k
        if getattr(var, "while_init", None) is not None:  # nl.while_loop: runtime_loop.while_loop
            cond = self._reg()
            self._labels += 1
            self._klr_operator("registerAluOp", dst=cond, src=var.while_init, imm=0, op="add")
            loop = k.while_loop(cond, f"loop.{self._labels}")
            loop.__enter__()
            self.open_loops[var] = loop
            self.counters[var] = cond
            return
        counter, bound = self._reg(), self._reg()
        self._labels += 1
        label = f"loop.{self._labels}"
        for form in self.init_at.get(var, ()):
            k.reg_move(self.forms[form], sum(c * v.start for v, c in form) + self.form_base.get(form, 0))
        if getattr(var, "bound_reg", None) is not None:  # nl.dynamic_range(reg): the bound is the kernel's register
            self._klr_operator("registerAluOp", dst=bound, src=var.bound_reg, imm=0, op="add")
        else:
            k.reg_move(bound, var.start + var.step * var.trip)
        loop = k.dynamic_loop(counter, var.start, bound, var.step, label)
        loop.__enter__()
        self.open_loops[var] = loop
        self.counters[var] = counter

    def _loop_end(self, var: LoopVar) -> None:
        k = self.k
        for form in self.advance.get(var, ()):
            c = dict(form)[var]
            k.reg_alu(self.forms[form], self.forms[form], "add", c * var.step)
        self.open_loops.pop(var).__exit__(None, None, None)
        for form in self.advance.get(var, ()):
            if form not in self.init_at.get(var, ()):
                c = dict(form)[var]
                k.reg_alu(self.forms[form], self.forms[form], "add", -c * var.step * var.trip)

    # ------------------------------------------------------------------ operations
    def op_dma(self, dst: View, src: View, accumulate: bool = False, oob: str = "error") -> None:
        self.k.dma(self.ap(dst), self.ap(src), accumulate=accumulate, oob=oob)

    def op_copy(self, dst: View, src: View) -> None:
        self.k.tensor_copy(self.ap(dst), self.ap(src))

    def op_memset(self, dst: View, value: Any) -> None:
        self.k.memset(self.ap(dst), as_immediate(value))

    def op_tensor_tensor(self, dst: View, a: View, b: View, op: str) -> None:
        self.k.tensor_tensor(self.ap(dst), self.ap(a), self.ap(b), op)

    def _imm(self, x: Any) -> Any:
        return self.ap(x) if isinstance(x, View) else as_immediate(x)

    def op_tensor_scalar(self, dst: View, src: View, op0: str, imm0: Any, reverse0: bool = False,
                         op1: str | None = None, imm1: Any = None, reverse1: bool = False) -> None:
        self.k.tensor_scalar(self.ap(dst), self.ap(src), op0, self._imm(imm0), op1,
                             None if op1 is None else self._imm(imm1), reverse0=reverse0, reverse1=reverse1)

    def op_activation(self, dst: View, src: View, func: str, bias: View | None, scale: float) -> None:
        self.k.activation(self.ap(dst), self.ap(src), func, scale=as_immediate(float(scale)),
                          bias=None if bias is None else self.ap(bias))

    def op_reciprocal(self, dst: View, src: View) -> None:
        self.k.reciprocal(self.ap(dst), self.ap(src))

    def op_tensor_reduce(self, dst: View, src: View, op: str, axis: str, negate: bool) -> None:
        self.k.tensor_reduce(self.ap(dst), self.ap(src), op, axis=axis, negate=negate)

    def op_matmul(self, dst: View, stationary: View, moving: View, transpose: bool = False) -> None:
        self.k.matmul(self.ap(dst), self.ap(stationary), self.ap(moving), transpose=transpose)

    def op_iota(self, dst: View, offset: int, pattern: list, channel_multiplier: int) -> None:
        self.k.iota(self.ap(dst), offset, [list(p) for p in pattern], channel_multiplier=channel_multiplier)

    # ================================================================== ISA operators (back half of issue 20)
    # Contract with the front end: a traced op is recorded as ``tr.op(KIND, reads, writes, **params)`` where
    # KIND is the KLR operator name in snake_case (below, beside the KLR constructor it writes) and
    # ``params`` are named exactly as the KLR operator's fields (ir/klr/schema.py, camelCase as spelled
    # there).  A TensorRef field takes a View; an Operand field a View or a Python number; an Immediate a
    # number; an enumeration field its KLR name ("add", "ZeroAccumulate", "is_ge"); a DataPattern
    # ``(offset, [[step, num], ...], channel_multiplier)``.  Fields left out take KLR's defaults
    # (frontend/klr_operators.py); ``dtype`` defaults to the destination's.  docs/frontend.md lists them.

    def _klr_operator(self, ctor: str, **params: Any) -> None:
        fields = {}
        for name, v in params.items():
            if isinstance(v, View):
                v = self.ap(v)
            elif isinstance(v, (list, tuple)) and v and all(isinstance(x, View) for x in v):
                v = [self.ap(x) for x in v]
            elif isinstance(v, (int, float, np.integer, np.floating, bool)) and not isinstance(v, str):
                v = as_immediate(v)
            fields[name] = v
        try:
            self.k.operator(ctor, **fields)
        except TypeError as e:
            raise TraceError(f"{self.k.filename}:{self.k.pos_line}: {e}") from None

    def op_nc_activate(self, **p: Any) -> None:
        self._klr_operator("ncActivate", **p)  # the KLR-field form of activation (a tile scale, no reduce)

    def op_activation_reduce(self, **p: Any) -> None:
        self._klr_operator("activationReduce", **p)

    def op_tensor_scalar_reduce(self, **p: Any) -> None:
        self._klr_operator("tensorScalarReduce", **p)

    def op_affine_select(self, **p: Any) -> None:
        self._klr_operator("ncAffineSelect", **p)

    def op_tensor_tensor_scan(self, **p: Any) -> None:
        self._klr_operator("tensorTensorScan", **p)

    def op_scalar_tensor_tensor(self, **p: Any) -> None:
        self._klr_operator("ncScalarTensorTensor", **p)

    def op_transpose(self, **p: Any) -> None:
        self._klr_operator("transpose", **p)

    def op_batch_norm_stats(self, **p: Any) -> None:
        self._klr_operator("batchNormStats", **p)

    def op_batch_norm_aggregate(self, **p: Any) -> None:
        self._klr_operator("batchNormAggregate", **p)

    def op_tensor_partition_reduce(self, **p: Any) -> None:
        self._klr_operator("tensorPartitionReduce", **p)

    def op_select_reduce(self, **p: Any) -> None:
        self._klr_operator("selectReduce", **p)

    def op_range_select(self, **p: Any) -> None:
        self._klr_operator("ncRangeSelect", **p)

    def op_copy_predicated(self, **p: Any) -> None:
        self._klr_operator("copyPredicated", **p)

    def op_dropout(self, **p: Any) -> None:
        self._klr_operator("dropout", **p)

    def op_rng(self, **p: Any) -> None:
        self._klr_operator("rng", **p)

    def op_rand2(self, **p: Any) -> None:
        self._klr_operator("rand2", **p)

    def op_rand_set_state(self, **p: Any) -> None:
        self._klr_operator("randSetState", **p)

    def op_rand_get_state(self, **p: Any) -> None:
        self._klr_operator("randGetState", **p)

    def op_set_rng_seed(self, **p: Any) -> None:
        self._klr_operator("setRngSeed", **p)

    def op_max8(self, **p: Any) -> None:
        self._klr_operator("max8", **p)

    def op_find_index8(self, **p: Any) -> None:
        self._klr_operator("findIndex8", **p)

    def op_match_replace8(self, **p: Any) -> None:
        self._klr_operator("matchReplace8", **p)

    def op_local_gather(self, **p: Any) -> None:
        self._klr_operator("ncLocalGather", **p)

    def op_dma_compute(self, **p: Any) -> None:
        self._klr_operator("dmaCompute", **p)

    def op_dma_transpose(self, **p: Any) -> None:
        self._klr_operator("dmaTranspose", **p)

    def op_tensor_scalar_cumulative(self, **p: Any) -> None:
        self._klr_operator("tensorScalarCumulative", **p)

    def op_shuffle(self, **p: Any) -> None:
        self._klr_operator("shuffle", **p)

    def op_nc_n_gather(self, **p: Any) -> None:
        self._klr_operator("ncNGather", **p)

    def op_nonzero_with_count(self, **p: Any) -> None:
        self._klr_operator("nonzeroWithCount", **p)

    def op_sequence_bounds(self, **p: Any) -> None:
        self._klr_operator("sequenceBounds", **p)

    def op_quantize_mx(self, **p: Any) -> None:
        self._klr_operator("quantizeMX", **p)

    def op_nc_matmul_mx(self, **p: Any) -> None:
        self._klr_operator("ncMatMulMX", **p)

    # nisa register calls (the front end's isa_ops records them; registers are named vreg.N)
    def op_while_next(self, src: str, var: Any) -> None:
        """The register an nl.while_loop body returned becomes the loop's condition for the next test."""
        self._klr_operator("registerAluOp", dst=self.counters[var], src=src, imm=0, op="add")

    def op_loop_index(self, dst: str, var: Any) -> None:
        """The index register of a loop bounded by a register: a copy of its counter (isa_ops.LoopIndexRegister)."""
        self._klr_operator("registerAluOp", dst=dst, src=self.counters[var], imm=0, op="add")

    def op_register_move(self, **p: Any) -> None:
        self._klr_operator("registerMove", **p)

    def op_register_alu_op(self, **p: Any) -> None:
        self._klr_operator("registerAluOp", **p)

    def op_tensor_load(self, **p: Any) -> None:
        self._klr_operator("tensorLoad", **p)

    def op_tensor_store(self, **p: Any) -> None:
        self._klr_operator("tensorStore", **p)

    def op_exponential(self, **p: Any) -> None:
        self._klr_operator("exponential", **p)

    def op_activate2(self, **p: Any) -> None:
        self._klr_operator("activate2", **p)


def as_immediate(x: Any) -> Any:
    """A kernel's Python number as KLR stores it: ints within int32, floats rounded to float32 (a
    float beyond float32's range becomes an infinity, as the hardware's conversion does)."""
    if isinstance(x, (bool, np.bool_)):
        return int(x)
    if isinstance(x, (int, np.integer)):
        x = int(x)
        if not -(1 << 31) <= x < (1 << 31):
            raise TraceError(f"the integer immediate {x} does not fit in int32")
        return x
    with np.errstate(over="ignore"):
        return float(np.float32(x))


MAX_DIMS = 4  # BIR access patterns: the partition dim plus three free dims
# operations whose views keep their dims as written (a DMA transpose permutes exactly four of them)
KEEP_DIMS: dict[str, set[str]] = {"dma_transpose": {"src", "dst"}}
# ISA operations that cannot be split into per-slice operations (reductions, scans, selections by position)
WHOLE_TILE = frozenset({
    "activation_reduce", "tensor_scalar_reduce", "affine_select", "tensor_tensor_scan", "transpose",
    "batch_norm_stats", "batch_norm_aggregate", "tensor_partition_reduce", "select_reduce", "range_select",
    "max8", "find_index8", "match_replace8", "local_gather", "dma_transpose", "tensor_scalar_cumulative",
    "shuffle", "sequence_bounds", "exponential", "activate2", "nc_n_gather", "nonzero_with_count",
    "quantize_mx", "nc_matmul_mx"})


def merged(v: View) -> View:
    """Unit dims dropped (the partition dim stays) and contiguous neighbours joined: the same elements."""
    if v.vector is not None or getattr(v, "scalar", None) is not None:
        return v  # a gather/scatter (its first dim walks the index tile's rows), or a runtime-offset access
    dims = [d for k, d in enumerate(v.dims) if d[1] != 1 or (k == 0 and v.tensor.on_chip)]
    out: list[tuple[int, int]] = []
    for stride, n in dims:
        if out and len(out) > (1 if v.tensor.on_chip else 0) and out[-1][0] == stride * n:
            out[-1] = (stride, out[-1][1] * n)
        else:
            out.append((stride, n))
    return View(v.tensor, v.offset, tuple(out) or ((1, 1),), ())


def _fit(kind: str, params: dict[str, Any], where: str = "") -> list[dict[str, Any]]:
    """One operation's views within MAX_DIMS; an operation over more dims is split along its outer free dims.

    Elementwise operations see their views merged (same elements, same order);
    a reduction keeps its source's dims, whose innermost ones it reduces.
    """
    if kind == "tensor_reduce":
        return _fit_reduce(params, where)
    views = {k: v for k, v in params.items() if isinstance(v, View)}
    keep = KEEP_DIMS.get(kind, set())
    shaped = {k: (v if k in keep else merged(v)) for k, v in views.items()}
    if all(v.ndim <= MAX_DIMS for v in shaped.values()):
        return [{**params, **shaped}]
    dst = views.get("dst")
    if dst is None or dst.ndim < 3:
        return [{**params, **shaped}]  # the codegen names the view that does not fit
    if kind in WHOLE_TILE:
        raise TraceError(f"{where}: not supported: {kind} over a view of more than {MAX_DIMS} dimensions (it "
                         "reads the tile as a whole; splitting it would change the result)")
    # split every view that walks the destination's outer free dim
    n = dst.dims[1][1]
    same = {k for k, v in views.items() if v.ndim == dst.ndim and v.dims[1][1] == n}
    out = []
    for j in range(n):
        sub = dict(params)
        for k in same:
            v = views[k]
            if getattr(v, "scalar", None) is not None:
                raise TraceError(f"{where}: not supported: an ap(scalar_offset=<a tile>) access of more than "
                                 f"{MAX_DIMS} dimensions")
            sub[k] = View(v.tensor, v.offset + j * v.dims[1][0], v.dims[:1] + v.dims[2:], ())
        out.extend(_fit(kind, sub))
    return out


REDUCE_AXES = ("X", "XY", "XYZ", "XYZW")  # tensor_reduce's axis: how many trailing dims of its source it reduces


def _joined(dims: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
    """Unit dims dropped (one kept if all are) and contiguous neighbours joined: the same elements, in order."""
    out: list[tuple[int, int]] = []
    for stride, n in (d for d in dims if d[1] != 1):
        if out and out[-1][0] == stride * n:
            out[-1] = (stride, out[-1][1] * n)
        else:
            out.append((stride, n))
    return tuple(out) or dims[-1:]


def _fit_reduce(params: dict[str, Any], where: str) -> list[dict[str, Any]]:
    """A tensor_reduce within MAX_DIMS: the kept and the reduced dims of its source each joined where they are
    contiguous, then, while it still has too many, one reduction per index of its outer kept dim (each
    writes its own part of the destination; the reduced elements of each are the same).  A 2x2 max pool as
    one call over a tile reshaped to [P, h, 2, w, 2] reads five dims."""
    src, dst = params["src"], params["dst"]
    k = REDUCE_AXES.index(params["axis"]) + 1
    part = src.dims[:1] if src.tensor.on_chip else ()
    kept = part + _joined(src.dims[len(part):src.ndim - k]) if src.ndim - k > len(part) else src.dims[:src.ndim - k]
    red = _joined(src.dims[src.ndim - k:])
    src = View(src.tensor, src.offset, kept + red, ())
    if src.ndim <= MAX_DIMS:
        return [{**params, "src": src, "dst": merged(dst), "axis": REDUCE_AXES[len(red) - 1]}]
    if len(kept) < 2:
        raise TraceError(f"{where}: not supported: tensor_reduce along {len(red)} dims of a view whose reduced "
                         f"dims alone take more than {MAX_DIMS} (join them: reshape the tile)")
    n, step = kept[1][1], kept[1][0]
    rows = dst.reshape((dst.shape[0], n, dst.elements // (dst.shape[0] * n)))
    out = []
    for j in range(n):
        sub_src = View(src.tensor, src.offset + j * step, kept[:1] + kept[2:] + red, ())
        sub_dst = View(rows.tensor, rows.offset + j * rows.dims[1][0], rows.dims[:1] + rows.dims[2:], ())
        out.extend(_fit_reduce({**params, "src": sub_src, "dst": sub_dst, "axis": REDUCE_AXES[len(red) - 1]}, where))
    return out


def emit(tr: Tracer, filename: str) -> bytes:
    return Emitter(tr, filename).run().to_bytes()

