"""KLR -> BIR lowerings of the NKI ISA operators beyond the core set (docs/translate.md, "ISA operators").

Each function lowers one KLR operator payload ``p`` through the codegen ``cg``
(:class:`stages.klr_codegen.KlirToBirCodegen`); :data:`LOWERING` maps the KLR
constructor name to it.  Opcode and attribute spellings follow BIR-JSON
(docs/bir-json.md; the ones public evidence does not show are in its table
of Tusk-only spellings).  An operator that reduces into a second result
(``reduceRes``) becomes its instruction plus a TensorReduce of that
instruction's output, the form ``activationReduce`` already has.  The Vector
engine's accumulator carried *across* instructions (``reduceCmd``
``Accumulate``) has no lowering: it is refused, never dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tusk.ir.enums import Role
from tusk.ir.klr import types as T
from tusk.ir.klr.schema import OPERATORS

TRANSPOSE_ENGINES = ("DVE",)
# AccumCmd values whose reduction starts afresh in this instruction (the ones Tusk lowers): Idle (the
# documented numpy: the reduction of this instruction's result), ZeroAccumulate (NKI reset_reduce) and
# LoadAccumulate (load_reduce).  Zero (reset without accumulating) and Accumulate (reduce: continue the
# accumulator of earlier instructions) depend on engine state Tusk does not model: refused.
FRESH_REDUCE = ("Idle", "ZeroAccumulate", "LoadAccumulate")


def _alu(op: Any) -> str:
    return op.name


def _reverse(rev: Any) -> tuple[bool, bool]:
    return rev.name in ("first", "both"), rev.name in ("second", "both")


def _scalar_in(cg: Any, x: Any, what: str) -> tuple:
    """The operand row of an Operand: the tile's access, or an immediate."""
    row, const = cg._scalar_operand(x, what)
    return row if row is not None else cg._imm(float(const))


def _fresh(cg: Any, cmd: Any, what: str) -> str:
    if cmd.name not in FRESH_REDUCE:
        raise cg._unsupported(f"{what} reduceCmd {cmd.name} (the Vector engine's accumulator state across "
                              "instructions)")
    return cmd.name


def _reduce_of(cg: Any, dst: tuple, res_ref: Any, op: str, hoisted: list) -> tuple:
    """TensorReduce of the instruction's output ``dst`` (all free axes) into ``res_ref`` (select_reduce: Select
    has no reduce registers in BIR)."""
    cg._indirect = hoisted  # the reduction reads the same (possibly dynamic) output
    res = cg.operand(res_ref, Role.OUT)
    axis = ("X", "XY", "XYZ", "XYZW")[max(0, min(len(cg.fn.patterns[dst[5]]) - 2, 3))]
    cg._emit("TensorReduce", "DVE", [(Role.IN,) + dst[1:]], [res], {"op": op, "axis": axis, "negate": False},
             suffix=".reduce")
    return res


def read_accumulator(cg: Any, res_ref: Any, engine: str) -> tuple:
    """The engine's reduce registers (left by the accumulating instruction just emitted) into ``res_ref``."""
    res = cg.operand(res_ref, Role.OUT)
    cg._emit("ActivationReadAccumulator" if engine == "Activation" else "DveReadAccumulator", engine, [], [res],
             suffix=".reduce")
    return res


# ---------------------------------------------------------------------------- elementwise + reduce


def tensor_scalar_reduce(cg: Any, p: Any) -> None:
    cmd = _fresh(cg, p.reduceCmd, "tensorScalarReduce")
    src = cg.operand(p.src, Role.IN)
    row, const = cg._scalar_operand(p.operand0, "tensorScalarReduce operand0")
    dst = cg.operand(p.dst, Role.OUT)
    op0 = _alu(p.op0)
    red_op = _alu(p.reduceOp) if p.reduceOp is not None else "add"
    reduce = {"acc": "ZeroAccumulate", "reduce_op": red_op}  # the computed values into the DVE's reduce registers
    if row is None:
        cg._emit("TensorScalar", "DVE", [src], [dst], {"op0": op0, "const0": float(const), "reverse0": bool(p.reverse0),
                                                       "op1": "bypass", "const1": 0.0, "reverse1": False, **reduce})
    else:
        cg._emit("TensorScalarPtr", "DVE", [src, row], [dst],
                 {"op0": op0, "reverse0": bool(p.reverse0), "op1": "bypass", "reverse1": False, **reduce})
    res = read_accumulator(cg, p.reduceRes, "DVE")
    _load_init(cg, cmd, p.reduceInit, res, red_op)


def _load_init(cg: Any, cmd: str, init: Any, res: tuple, op: str) -> None:
    """LoadAccumulate: the reduction starts from ``init`` (an Immediate, or an Operand: a number or a
    per-partition tile), so the result is ``res op init``."""
    if cmd != "LoadAccumulate":
        return
    if init is None:
        raise cg._unsupported("reduceCmd LoadAccumulate without a reduceInit")
    row = None
    if isinstance(init, (T.Operand_imm, T.Operand_tile)):  # type: ignore[attr-defined]  # generated classes
        row, value = cg._scalar_operand(init, "reduceInit")
    else:
        value = cg._value(init, "reduceInit")
    acc = (Role.IN,) + res[1:]
    if row is not None:
        cg._emit("TensorScalarPtr", "DVE", [acc, row], [res], {"op0": op, "reverse0": False, "op1": "bypass",
                                                               "reverse1": False}, suffix=".init")
        return
    cg._emit("TensorScalar", "DVE", [acc], [res],
             {"op0": op, "const0": float(value), "reverse0": False, "op1": "bypass", "const1": 0.0, "reverse1": False},
             suffix=".init")


def activate2(cg: Any, p: Any) -> None:
    """``func((src op0 imm0) op1 imm1)`` on the Activation engine (``is_activate2``), + an optional reduce."""
    cmd = p.reduceCmd.name
    if p.reduceRes is not None and cmd not in ("ZeroAccumulate", "LoadAccumulate"):
        raise cg._unsupported(f"activate2 with a reduceRes and reduceCmd {cmd} (the accumulator it reads is only "
                              "defined after reset_reduce)")
    if cmd == "LoadAccumulate":
        raise cg._unsupported("activate2 reduceCmd LoadAccumulate")
    func = _activation_func(cg, p.activationFunc)
    src = cg.operand(p.src, Role.IN)
    ins = [src, _scalar_in(cg, p.imm0, "activate2 imm0"), _scalar_in(cg, p.imm1, "activate2 imm1")]
    relu_row, relu = cg._scalar_operand(p.reluParam, "activate2 reluParam")
    if relu_row is not None:
        raise cg._unsupported("an activate2 reluParam given as a tile")
    dst = cg.operand(p.dst, Role.OUT)
    reduced = p.reduceRes is not None
    cg._emit("Activation", "Activation", ins, [dst],
             {"func": func, "scale": 1.0, "alpha": float(relu), "acc": "ZeroAccumulate" if reduced else "Idle",
              "is_activate2": True, "op0": _alu(p.op0), "reverse0": bool(p.reverse0), "op1": _alu(p.op1),
              "reverse1": bool(p.reverse1), "reduce_op": _alu(p.reduceOp) if reduced else "bypass"})
    if reduced:
        read_accumulator(cg, p.reduceRes, "Activation")


def _activation_func(cg: Any, f: Any) -> str:
    from tusk.stages.klr_codegen import ACTIVATION_FUNCS  # the one table of BIR function names

    name = ACTIVATION_FUNCS[f.name]
    if name is None:
        raise cg._unsupported(f"activation function {f.name}")
    return name


def exponential(cg: Any, p: Any) -> None:
    cmd = p.reducecmd.name
    if p.reduceRes is not None and cmd not in ("ZeroAccumulate", "LoadAccumulate"):
        raise cg._unsupported(f"exponential with a reduceRes and reduceCmd {cmd} (the sum is only defined after "
                              "reset_reduce or load_reduce)")
    src = cg.operand(p.src, Role.IN)
    top = _scalar_in(cg, p.maxValue, "exponential maxValue")
    dst = cg.operand(p.dst, Role.OUT)
    reduced = p.reduceRes is not None
    cg._emit("Exponential", "DVE", [src, top], [dst], {"reduce_cmd": "ZeroAccumulate" if reduced else "Idle"})
    if reduced:
        res = read_accumulator(cg, p.reduceRes, "DVE")
        _load_init(cg, cmd, p.reduceInit, res, "add")


def activation_reduce(cg: Any, p: Any) -> None:
    if p.reduceRes is None:
        raise cg._unsupported("activationReduce without a reduceRes")
    cg.nc_activate(p)


def tensor_tensor_scan(cg: Any, p: Any) -> None:
    if p.accumulatorCmd.name != "Idle":
        raise cg._unsupported(f"tensorTensorScan accumulatorCmd {p.accumulatorCmd.name}")
    a, b = cg.operand(p.src0, Role.IN), cg.operand(p.src1, Role.IN)
    init = _scalar_in(cg, p.imm0, "tensorTensorScan initial")
    dst = cg.operand(p.dst, Role.OUT)
    r0, r1 = _reverse(p.reverseOperands)
    cg._emit("TensorScalarPtr", "DVE", [a, b, init], [dst],
             {"op0": _alu(p.op0), "reverse0": r0, "op1": _alu(p.op1), "reverse1": r1, "is_tensor_tensor_scan": True})


def nc_scalar_tensor_tensor(cg: Any, p: Any) -> None:
    data = cg.operand(p.data, Role.IN)
    s0 = _scalar_in(cg, p.src0, "scalarTensorTensor operand0")
    s1 = _scalar_in(cg, p.src1, "scalarTensorTensor operand1")
    dst = cg.operand(p.dst, Role.OUT)
    _stt(cg, [data, s0, s1], dst, p)


def scalar_tensor_tensor(cg: Any, p: Any) -> None:
    if p.accumulatorCmd.name != "Idle":
        raise cg._unsupported(f"scalarTensorTensor accumulatorCmd {p.accumulatorCmd.name}")
    data = cg.operand(p.src0, Role.IN)
    s0 = cg._imm(float(cg._value(p.imm0, "scalarTensorTensor imm0")))
    s1 = cg.operand(p.src1, Role.IN)
    dst = cg.operand(p.dst, Role.OUT)
    _stt(cg, [data, s0, s1], dst, p)


def _stt(cg: Any, ins: list, dst: tuple, p: Any) -> None:
    r0, r1 = _reverse(p.reverseOperands)
    cg._emit("TensorScalarPtr", "DVE", ins, [dst], {"op0": _alu(p.op0), "reverse0": r0, "op1": _alu(p.op1),
                                                    "reverse1": r1, "is_scalar_tensor_tensor": True})


def tensor_scalar_cumulative(cg: Any, p: Any) -> None:
    cmd = _fresh(cg, p.reduceCmd, "tensorScalarCumulative")
    src = cg.operand(p.src, Role.IN)
    ins = [src, _scalar_in(cg, p.imm0, "tensorScalarCumulative imm0")]
    if cmd == "LoadAccumulate":
        if p.imm1 is None:
            raise cg._unsupported("tensorScalarCumulative reduceCmd LoadAccumulate without imm1")
        ins.append(_scalar_in(cg, p.imm1, "tensorScalarCumulative imm1"))
    dst = cg.operand(p.dst, Role.OUT)
    r0, r1 = _reverse(p.reverse)
    cg._emit("TensorScalarCache", "DVE", ins, [dst], {"op0": _alu(p.op0), "reverse0": r0, "op1": _alu(p.op1),
                                                      "reverse1": r1, "mode": "Cumulative", "acc": cmd})


# ---------------------------------------------------------------------------- selection and masks


def nc_affine_select(cg: Any, p: Any) -> None:
    dp = p.pred
    on_true = cg.operand(p.onTrueTile, Role.IN)
    dst = cg.operand(p.dst, Role.OUT)
    fill = float(cg._value(p.onFalseValue, "affineSelect onFalseValue"))
    cg._emit("TensorScalarAffineSelect", "Pool", [on_true], [dst],
             {"base": int(dp.offset), "pattern": [[a.step, a.num] for a in dp.pattern],
              "channel_multiplier": int(dp.channelMultiplier), "compare_op": _alu(p.cmpOp), "fill_value": fill})


def copy_predicated(cg: Any, p: Any) -> None:
    src = cg.operand(p.src, Role.IN)
    pred = cg.operand(p.predicate, Role.IN)
    # the destination keeps its values where the predicate is false: it is read as well as written
    dst = cg.operand(p.dst, Role.OUT)
    cg._emit("CopyPredicated", "DVE", [src, pred], [dst], {"reverse_pred": bool(p.reversePred)})


def select_reduce(cg: Any, p: Any) -> None:
    _fresh(cg, p.reduceCmd, "selectReduce")
    pred = cg.operand(p.predicate, Role.IN)
    on_true = cg.operand(p.onTrue, Role.IN)
    on_false = _scalar_in(cg, p.onFalse, "selectReduce onFalse")
    dst = cg.operand(p.dst, Role.OUT)
    hoisted = list(cg._indirect)
    cg._emit("Select", "DVE", [pred, on_true, on_false], [dst], {"reverse_pred": bool(p.reversePred)})
    if p.reduceRes is not None:
        _reduce_of(cg, dst, p.reduceRes, _alu(p.reduceOp), hoisted)


def nc_range_select(cg: Any, p: Any) -> None:
    _fresh(cg, p.reduceCommand, "rangeSelect")
    on_true = cg.operand(p.onTrueTile, Role.IN)
    b0, b1 = cg.operand(p.bound0, Role.IN), cg.operand(p.bound1, Role.IN)
    dst = cg.operand(p.dst, Role.OUT)
    red_op = _alu(p.reduceOp) if p.reduceOp is not None else "max"
    reduced = p.reduceRes is not None
    # with a reduceRes: the selected values into the DVE's reduce registers from zero, then read out
    cg._emit("RangeSelect", "DVE", [on_true, b0, b1], [dst],
             {"base": float(cg._value(p.rangeStart, "rangeSelect rangeStart")), "compare_op0": _alu(p.compOp0),
              "compare_op1": _alu(p.compOp1), "fill_value": float(cg._value(p.onFalseValue, "onFalseValue")),
              "reduce_op": red_op, "reduce_cmd": "ZeroAccumulate" if reduced else "Idle"})
    if reduced:
        read_accumulator(cg, p.reduceRes, "DVE")


def range_select(cg: Any, p: Any) -> None:
    """The older form: immediate bounds, no reduceRes (its reduction stays in the accumulator: unobservable)."""
    _fresh(cg, p.reduceCommand, "rangeSelect")
    src = cg.operand(p.src, Role.IN)
    b0 = cg._imm(float(cg._value(p.bound0, "rangeSelect bound0")))
    b1 = cg._imm(float(cg._value(p.bound1, "rangeSelect bound1")))
    dst = cg.operand(p.dst, Role.OUT)
    cg._emit("RangeSelect", "DVE", [src, b0, b1], [dst],
             {"base": float(p.base), "compare_op0": _alu(p.compOp0), "compare_op1": _alu(p.compOp1),
              "fill_value": float(p.fillValue), "reduce_op": _alu(p.reduceOp), "reduce_cmd": p.reduceCommand.name})


# ---------------------------------------------------------------------------- statistics, transposes, top-8


def transpose(cg: Any, p: Any) -> None:
    engine = cg._engine(p.engine, "DVE")
    if engine not in TRANSPOSE_ENGINES:
        raise cg._unsupported(f"transpose on engine {p.engine.name} (Tensor-engine transposes are matmuls)")
    src = cg.operand(p.src, Role.IN)
    dst = cg.operand(p.dst, Role.OUT)
    cg._emit("StreamTranspose", engine, [src], [dst])


def _unary(opcode: str, engine: str = "DVE") -> Callable[[Any, Any], None]:
    def lower(cg: Any, p: Any) -> None:
        src = cg.operand(p.src, Role.IN)
        dst = cg.operand(p.dst, Role.OUT)
        cg._emit(opcode, engine, [src], [dst])
    return lower


def tensor_partition_reduce(cg: Any, p: Any) -> None:
    data = cg.operand(p.data, Role.IN)
    dst = cg.operand(p.dst, Role.OUT)
    cg._emit("TensorReduce", "Pool", [data], [dst], {"op": _alu(p.op), "axis": "C", "negate": False})


def find_index8(cg: Any, p: Any) -> None:
    src, vals = cg.operand(p.src, Role.IN), cg.operand(p.vals, Role.IN)
    dst = cg.operand(p.dst, Role.OUT)
    cg._emit("MaxIndex", "DVE", [src, vals], [dst])


def match_replace8(cg: Any, p: Any) -> None:
    src, vals = cg.operand(p.src, Role.IN), cg.operand(p.vals, Role.IN)
    outs = [cg.operand(p.dst, Role.OUT)]
    opcode = "MatchReplace"
    if p.dstIdx is not None:
        outs.append(cg.operand(p.dstIdx, Role.OUT))
        opcode = "MaxIndexAndMatchReplace"
    cg._emit(opcode, "DVE", [src, vals], outs, {"imm_value": float(cg._value(p.replaceValue, "replaceValue"))})


def shuffle(cg: Any, p: Any) -> None:
    mask = [int(cg._value(m, "shuffleMask entry")) for m in p.shuffleMask]
    src = cg.operand(p.src, Role.IN)
    dst = cg.operand(p.dst, Role.OUT)
    cg._emit("StreamShuffle", "DVE", [src], [dst], {"mask": mask})


def nc_local_gather(cg: Any, p: Any) -> None:
    src, index = cg.operand(p.src, Role.IN), cg.operand(p.index, Role.IN)
    dst = cg.operand(p.dst, Role.OUT)
    attrs = {"num_elem_per_idx": int(cg._value(p.numElemPerIdx, "localGather numElemPerIdx"))}
    if p.numValidIndicies is not None:
        attrs["num_valid_indices"] = int(cg._value(p.numValidIndicies, "localGather numValidIndicies"))
    cg._emit("Gather", "Pool", [src, index], [dst], attrs)


def nc_n_gather(cg: Any, p: Any) -> None:
    data, indices = cg.operand(p.data, Role.IN), cg.operand(p.indices, Role.IN)
    dst = cg.operand(p.dst, Role.OUT)
    cg._emit("Gather", "Pool", [data, indices], [dst], {"within_partition": True})


def sequence_bounds(cg: Any, p: Any) -> None:
    ids = cg.operand(p.segmentIds, Role.IN)
    dst = cg.operand(p.dst, Role.OUT)
    cg._emit("GetSequenceBounds", "Pool", [ids], [dst])


def quantize_mx(cg: Any, p: Any) -> None:
    src = cg.operand(p.src, Role.IN)
    dst, scale = cg.operand(p.dst, Role.OUT), cg.operand(p.dstScale, Role.OUT)
    cg._emit("QuantizeMx", "DVE", [src], [dst, scale])


def nc_mat_mul_mx(cg: Any, p: Any) -> None:
    """MatmultMx: the Matmult keys; the scales are its third and fourth inputs (bir-json.md 5.3)."""
    ins = [cg.operand(x, Role.IN) for x in (p.stationary, p.moving, p.stationaryScale, p.movingScale)]
    dst = cg.operand(p.dst, Role.OUT)
    attrs = {"accumulation_flag": 0, "psum_zero_region": 0, "replication_resolution": 0,
             "replication_shift_amnt": 0, "replication_num_rows": 0, "is_transpose": False,
             "is_fmap_onezero": False, "is_weight_onezero": False,
             "tile_size": list(p.tileSize) if p.tileSize else [128, 128],
             "tile_position": list(p.tilePosition) if p.tilePosition else [0, 0],
             "perf_mode": "None", "ifmap_quant_offset": 0, "weights_quant_offset": 0}
    cg._emit("MatmultMx", "PE", ins, [dst], attrs)


def nonzero_with_count(cg: Any, p: Any) -> None:
    src = cg.operand(p.src, Role.IN)
    dst = cg.operand(p.dst, Role.OUT)
    attrs = {"index_offset": int(cg._value(p.indexOffset, "nonzeroWithCount indexOffset")),
             "padding_val": int(cg._value(p.paddingVal, "nonzeroWithCount paddingVal"))}
    cg._emit("NonzeroWithCount", "Pool", [src], [dst], attrs)


def dma_transpose(cg: Any, p: Any) -> None:
    oob = cg._bounds(p.oobMode, "oobMode")
    src = cg.operand(p.src, Role.IN)
    dst = cg.operand(p.dst, Role.OUT)
    cg._emit("DMACopy", "DMA", [src], [dst], {"oob_is_err": oob, "mode": "Transpose", "transpose_op": p.axes.name})


def dma_compute(cg: Any, p: Any) -> None:
    """``dst = srcs[0] * scales[0] + ...`` (the reduce op): a DMACopy in CCE mode over every source, its
    ``constants`` the scales -- which also tell it from an accumulating DMA (CCE with no constants:
    ``dst op= src``).  The DMA computes in float32 and casts to dst's dtype once."""
    srcs = [cg.operand(s, Role.IN) for s in p.srcs]
    scales = [float(cg._value(x, "dmaCompute scales")) for x in p.scales]
    if not srcs or len(scales) != len(srcs):
        raise cg._unsupported(f"dmaCompute with {len(srcs)} sources and {len(scales)} scales")
    dst = cg.operand(p.dst, Role.OUT)
    cg._emit("DMACopy", "DMA", srcs, [dst], {"oob_is_err": True, "mode": "CCE", "cce_op": p.reduceOp.name,
                                            "constants": scales})


# ---------------------------------------------------------------------------- random numbers


def dropout(cg: Any, p: Any) -> None:
    src = cg.operand(p.src, Role.IN)
    thr = _scalar_in(cg, p.threshold, "dropout threshold")
    dst = cg.operand(p.dst, Role.OUT)
    cg._emit("Dropout", "DVE", [src, thr], [dst], {"is_keep_threshold": p.thresholdType.name == "KeepRate"})


def rng(cg: Any, p: Any) -> None:
    dst = cg.operand(p.dst, Role.OUT)
    cg._emit("Rng", cg._engine(p.engine, "DVE"), [], [dst])


def rand2(cg: Any, p: Any) -> None:
    lo = _scalar_in(cg, p.min, "rand2 min")
    hi = _scalar_in(cg, p.max, "rand2 max")
    dst = cg.operand(p.dst, Role.OUT)
    cg._emit("Rand2", "DVE", [lo, hi], [dst])


def set_rng_seed(cg: Any, p: Any) -> None:
    src = cg.operand(p.src, Role.IN)
    cg._emit("SetRandState", "DVE", [src], [], {"rng_engine": "DVE"})


def rand_set_state(cg: Any, p: Any) -> None:
    engine = cg._engine(p.engine, "Pool")
    src = cg.operand(p.src, Role.IN)
    cg._emit("SetRandState", engine, [src], [], {"rng_engine": engine})


def rand_get_state(cg: Any, p: Any) -> None:
    engine = cg._engine(p.engine, "Pool")
    dst = cg.operand(p.dst, Role.OUT)
    cg._emit("GetRandState", engine, [], [dst], {"rng_engine": engine})


LOWERING: dict[str, Callable[[Any, Any], None]] = {
    "activationReduce": activation_reduce,
    "tensorScalarReduce": tensor_scalar_reduce,
    "tensorTensorScan": tensor_tensor_scan,
    "ncScalarTensorTensor": nc_scalar_tensor_tensor,
    "scalarTensorTensor": scalar_tensor_tensor,
    "tensorScalarCumulative": tensor_scalar_cumulative,
    "ncAffineSelect": nc_affine_select,
    "copyPredicated": copy_predicated,
    "selectReduce": select_reduce,
    "ncRangeSelect": nc_range_select,
    "rangeSelect": range_select,
    "transpose": transpose,
    "batchNormStats": _unary("BNStats"),
    "batchNormAggregate": _unary("BNStatsAggregate"),
    "tensorPartitionReduce": tensor_partition_reduce,
    "max8": _unary("Max"),
    "findIndex8": find_index8,
    "matchReplace8": match_replace8,
    "shuffle": shuffle,
    "exponential": exponential,
    "activate2": activate2,
    "ncLocalGather": nc_local_gather,
    "ncNGather": nc_n_gather,
    "sequenceBounds": sequence_bounds,
    "nonzeroWithCount": nonzero_with_count,
    "quantizeMX": quantize_mx,
    "ncMatMulMX": nc_mat_mul_mx,
    "dmaTranspose": dma_transpose,
    "dmaCompute": dma_compute,
    "dropout": dropout,
    "rng": rng,
    "rand2": rand2,
    "setRngSeed": set_rng_seed,
    "randSetState": rand_set_state,
    "randGetState": rand_get_state,
}
assert set(LOWERING) <= {name for name, _ in OPERATORS}
