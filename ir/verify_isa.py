"""Shape and dtype rules of the NKI ISA instructions beyond the core set (the NKI ISA reference's
"Tile size" / "Data types" paragraphs), checked by :func:`ir.verify.verify_function`.

An operand's shape here is (partitions, elements per partition): the first
access-pattern pair counts partitions, the rest multiply to the elements.
Immediates have no shape (None) and pass every shape rule.
"""

from __future__ import annotations

from collections.abc import Callable
from math import prod

import numpy as np

from tusk.ir import mx
from tusk.ir.enums import AP_KINDS, DTYPE_NAMES, OPCODE_BY_NAME, Op
from tusk.ir.module import Function, InstView, OperandView

# DMACopy transpose_op (KLR TransposeOps) -> the numpy axes of the 4-D transpose (KLR's getTransposeOps)
TRANSPOSE_AXES = {"None": (0, 1, 2, 3), "WZXY": (0, 1, 3, 2), "WXZY": (0, 3, 1, 2), "WYXZ": (0, 2, 3, 1),
                  "ZWYX": (1, 0, 2, 3), "ZYWX": (1, 2, 0, 3), "ZYXW": (1, 2, 3, 0), "YXWZ": (2, 3, 0, 1),
                  "YXZW": (2, 3, 1, 0), "YWZX": (2, 0, 1, 3), "XWZY": (3, 0, 1, 2), "XZYW": (3, 1, 2, 0),
                  "XYZW": (3, 2, 1, 0), "XYWZ": (3, 2, 0, 1)}

INT_DTYPES = frozenset({"uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64", "bool"})
UINT_INDEX_DTYPES = frozenset({"uint16", "uint32", "int32", "uint64", "int64"})


def shape(o: OperandView):
    if o.kind not in AP_KINDS or not o.pattern:
        return None
    pat = o.pattern
    return int(pat[0][1]), int(prod(n for _, n in pat[1:]))


def _dt(o: OperandView) -> str:
    return DTYPE_NAMES[o.dtype]


def _same(what: str, a: OperandView, b: OperandView) -> list[str]:
    sa, sb = shape(a), shape(b)
    if sa is None or sb is None or sa == sb:
        return []
    return [f"{what}: shapes {sa} and {sb} differ (partitions, elements per partition)"]


def _parts(what: str, a: OperandView, b: OperandView) -> list[str]:
    sa, sb = shape(a), shape(b)
    if sa is None or sb is None or sa[0] == sb[0]:
        return []
    return [f"{what}: {sa[0]} and {sb[0]} partitions differ"]


def _elems(what: str, o: OperandView, ok: Callable[[int], bool], rule: str) -> list[str]:
    s = shape(o)
    return [] if s is None or ok(s[1]) else [f"{what} has {s[1]} elements per partition; {rule}"]


def _per_partition(what: str, o: OperandView, like: OperandView) -> list[str]:
    s, t = shape(o), shape(like)
    if s is None or t is None or s == (t[0], 1) or s == (1, 1):
        return []
    return [f"{what} has shape {s}; one element per partition ({t[0]}, 1) is needed"]


def _transpose(v: InstView) -> list[str]:
    src, dst = v.ins[0], v.outs[0]
    s, d = shape(src), shape(dst)
    out = []
    if s is not None and (s[0] > 32 or s[1] > 32):
        out.append(f"the Vector-engine transpose reads a {s[0]}x{s[1]} tile; at most 32x32")
    if s is not None and d is not None and d != (s[1], s[0]):
        out.append(f"transposing {s} needs a destination of shape {(s[1], s[0])}, not {d}")
    if src.dtype != dst.dtype:
        out.append(f"transpose changes the dtype ({_dt(src)} -> {_dt(dst)})")
    return out


def _bn_stats(v: InstView) -> list[str]:
    return (_parts("bn_stats", v.ins[0], v.outs[0]) + _elems("bn_stats input", v.ins[0], lambda n: n <= 512, "at most 512")
            + _elems("bn_stats output", v.outs[0], lambda n: n == 6, "6 are needed"))


def _bn_aggr(v: InstView) -> list[str]:
    return (_parts("bn_aggr", v.ins[0], v.outs[0])
            + _elems("bn_aggr input", v.ins[0], lambda n: n > 0 and n % 3 == 0, "a multiple of 3 is needed")
            + _elems("bn_aggr output", v.outs[0], lambda n: n == 2, "2 are needed"))


def _max8(v: InstView) -> list[str]:
    return (_parts("max8", v.ins[0], v.outs[0])
            + _elems("max8 input", v.ins[0], lambda n: 8 <= n <= 16384, "8 to 16384 are needed")
            + _elems("max8 output", v.outs[0], lambda n: n == 8, "8 are needed"))


def _eight(v: InstView) -> list[str]:
    data, vals = v.ins[0], v.ins[1]
    out = _parts("vals", data, vals) + _elems("vals", vals, lambda n: n == 8, "8 are needed")
    out += _elems("data", data, lambda n: 8 <= n <= 16384, "8 to 16384 are needed")
    if v.opcode == OPCODE_BY_NAME["MaxIndex"]:
        out += _elems("the index output", v.outs[0], lambda n: n == 8, "8 are needed")
        if _dt(v.outs[0]) not in UINT_INDEX_DTYPES:
            out.append(f"find_index8 writes indices; its output is {_dt(v.outs[0])}, not an integer dtype")
    else:
        out += _same("match_replace8 output", data, v.outs[0])
        if len(v.outs) > 1:
            out += _elems("the index output", v.outs[1], lambda n: n == 8, "8 are needed")
    return out


def _affine_select(v: InstView) -> list[str]:
    n = prod(int(num) for _, num in v.attrs.get("pattern", ()))
    out = _same("affine_select", v.ins[0], v.outs[0])
    out += _elems("affine_select output", v.outs[0], lambda k: k == n, f"its pattern has {n}")
    return out


def _predicated(v: InstView) -> list[str]:
    pred_pos = 1 if v.opcode == OPCODE_BY_NAME["CopyPredicated"] else 0
    pred = v.ins[pred_pos]
    data = v.ins[1 - pred_pos]
    out = _same("predicate", pred, v.outs[0])
    if shape(data) is not None and shape(data) != (shape(v.outs[0]) or (0, 0))[:1] + (1,):
        out += _same("data", data, v.outs[0])
    if _dt(pred) not in INT_DTYPES:
        out.append(f"the predicate is {_dt(pred)}; an integer dtype is needed")
    if v.opcode == OPCODE_BY_NAME["CopyPredicated"] and shape(data) is not None and data.dtype != v.outs[0].dtype:
        out.append(f"copy_predicated copies {_dt(data)} into {_dt(v.outs[0])}; the dtypes must match")
    return out


def _range_select(v: InstView) -> list[str]:
    t = v.ins[0]
    return (_same("range_select", t, v.outs[0]) + _per_partition("bound0", v.ins[1], t)
            + _per_partition("bound1", v.ins[2], t))


def _scalar_ptr(v: InstView) -> list[str]:
    if not v.attrs.get("is_tensor_tensor_scan", False):
        return []
    a, b = v.ins[0], v.ins[1]
    return _same("tensor_tensor_scan inputs", a, b) + _same("tensor_tensor_scan output", a, v.outs[0]) + \
        (_per_partition("the scan's initial value", v.ins[2], a) if len(v.ins) > 2 else [])


def _reduce(v: InstView) -> list[str]:
    if v.attrs.get("axis") != "C":
        return []
    s, d = shape(v.ins[0]), shape(v.outs[0])
    if s is None or d is None or d == (1, s[1]):
        return []
    return [f"a partition reduce of {s} writes shape (1, {s[1]}), not {d}"]


def _exponential(v: InstView) -> list[str]:
    return _same("exponential", v.ins[0], v.outs[0]) + _per_partition("max_value", v.ins[1], v.ins[0])


def _rng(v: InstView) -> list[str]:
    d = _dt(v.outs[0])
    return [] if d in INT_DTYPES else [f"rng writes random bits; its output is {d}, not an integer dtype"]


def _dropout(v: InstView) -> list[str]:
    out = _same("dropout", v.ins[0], v.outs[0]) + _per_partition("the dropout threshold", v.ins[1], v.ins[0])
    if v.ins[0].dtype != v.outs[0].dtype:
        out.append(f"dropout writes {_dt(v.outs[0])} from {_dt(v.ins[0])}; the dtypes must match")
    return out


def _shuffle(v: InstView) -> list[str]:
    mask = [int(m) for m in v.attrs.get("mask", ())]
    out = []
    if len(mask) > 32 or any(not (0 <= m < 32 or m == 255) for m in mask):
        out.append(f"shuffle mask {mask}: at most 32 entries, each a partition 0..31 or 255")
    s, d = shape(v.ins[0]), shape(v.outs[0])
    if s is not None and d is not None and s[1] != d[1]:
        out.append(f"shuffle: {s[1]} source and {d[1]} destination elements per partition")
    return out


def _seed(v: InstView) -> list[str]:
    s = shape(v.ins[0])
    # one seed per partition, or a whole generator state (nisa.rand_set_state: 6 words on GpSimd, 24 on Vector)
    return [] if s is None or s[1] in (1, 6, 24) else [f"a seed tile of shape {s}; one value or one state (6 or 24 "
                                                       "words) per partition is needed"]


def _gather(v: InstView) -> list[str]:
    src, index = shape(v.ins[0]), shape(v.ins[1])
    if v.attrs.get("within_partition", False):  # nc_n_gather
        out = _parts("nc_n_gather", v.ins[0], v.ins[1]) + _same("nc_n_gather indices and output", v.ins[1], v.outs[0])
        if _dt(v.ins[1]) not in INT_DTYPES:
            out.append(f"nc_n_gather indices are {_dt(v.ins[1])}; an integer dtype is needed")
        return out
    out = []
    if src is not None and index is not None and (src[0] != index[0] or src[0] % 16):
        out.append(f"local_gather of {src[0]} source and {index[0]} index partitions; equal multiples of 16")
    if _dt(v.ins[1]) not in INT_DTYPES:
        out.append(f"local_gather indices are {_dt(v.ins[1])}; an integer dtype is needed")
    if v.ins[0].dtype != v.outs[0].dtype:
        out.append("local_gather cannot change the dtype")
    n = int(v.attrs.get("num_elem_per_idx", 1))
    if n not in (1, 2, 4, 8, 16, 32):
        out.append(f"num_elem_per_idx {n}: one of 1, 2, 4, 8, 16, 32")
    return out


def _sequence_bounds(v: InstView) -> list[str]:
    s, d = shape(v.ins[0]), shape(v.outs[0])
    if s is None or d is None or d == (s[0], 2 * s[1]):
        return []
    return [f"sequence bounds of {s} segment ids write shape ({s[0]}, 2 x {s[1]}), not {d}"]


def _nonzero(v: InstView) -> list[str]:
    s, d = shape(v.ins[0]), shape(v.outs[0])
    if s is None or d is None or (d[0] == s[0] and prod(d[1:]) == prod(s[1:]) + 1):
        return []
    return [f"nonzero_with_count of {s} writes ({s[0]}, {int(prod(s[1:]))} + 1), not {d}"]


def _mx_dtypes(pairs: list[tuple[str, OperandView, tuple[str, ...]]]) -> list[str]:
    return [f"{what} is {_dt(o)}; one of {', '.join(ok)}" for what, o, ok in pairs if _dt(o) not in ok]


def _quantize_mx(v: InstView) -> list[str]:
    src, dst, scale = v.ins[0], v.outs[0], v.outs[1]
    out = _mx_dtypes([("quantize_mx src", src, ("bfloat16", "float16")),
                      ("quantize_mx dst", dst, mx.QUANTIZE_TARGETS),
                      ("quantize_mx dst_scale", scale, mx.SCALE_DTYPES)])
    shapes = (shape(src), shape(dst), shape(scale))
    return out if None in shapes else out + mx.quantize_problems(*shapes)  # type: ignore[arg-type]


def _matmul_mx(v: InstView) -> list[str]:
    st, mv, ss, ms = v.ins[:4]
    out = _mx_dtypes([("nc_matmul_mx stationary", st, tuple(mx.PACKED)), ("nc_matmul_mx moving", mv, tuple(mx.PACKED)),
                      ("nc_matmul_mx stationary_scale", ss, mx.SCALE_DTYPES),
                      ("nc_matmul_mx moving_scale", ms, mx.SCALE_DTYPES)])
    shapes = (shape(st), shape(mv), shape(ss), shape(ms), shape(v.outs[0]))
    return out if None in shapes else out + mx.matmul_problems(*shapes)  # type: ignore[arg-type]


def _dma(v: InstView) -> list[str]:
    if v.attrs.get("mode") != "Transpose":
        return []
    src, dst = v.ins[0].pattern, v.outs[0].pattern
    axes = TRANSPOSE_AXES.get(v.attrs.get("transpose_op", "None"))
    if axes is None:
        return [f"transpose_op {v.attrs.get('transpose_op')!r} is not a TransposeOps value"]
    if len(src) != 4:
        return [f"a DMA transpose reads a {len(src)}-dimensional pattern; four dimensions are needed"]
    want = tuple(src[a][1] for a in axes)
    got = tuple(n for _, n in dst)
    if int(prod(got)) != int(prod(want)) or (len(got) == 4 and got != want):
        return [f"a DMA transpose of {tuple(n for _, n in src)} by {axes} writes {want}, not {got}"]
    return []


RULES: dict[int, Callable[[InstView], list[str]]] = {
    OPCODE_BY_NAME["StreamTranspose"]: _transpose,
    OPCODE_BY_NAME["BNStats"]: _bn_stats,
    OPCODE_BY_NAME["BNStatsAggregate"]: _bn_aggr,
    Op.Max: _max8,
    OPCODE_BY_NAME["MaxIndex"]: _eight,
    OPCODE_BY_NAME["MatchReplace"]: _eight,
    OPCODE_BY_NAME["MaxIndexAndMatchReplace"]: _eight,
    Op.TensorScalarAffineSelect: _affine_select,
    OPCODE_BY_NAME["CopyPredicated"]: _predicated,
    Op.Select: _predicated,
    OPCODE_BY_NAME["RangeSelect"]: _range_select,
    Op.TensorScalarPtr: _scalar_ptr,
    Op.TensorReduce: _reduce,
    OPCODE_BY_NAME["Rng"]: _rng,
    OPCODE_BY_NAME["Dropout"]: _dropout,
    OPCODE_BY_NAME["StreamShuffle"]: _shuffle,
    OPCODE_BY_NAME["SetRandState"]: _seed,
    Op.Gather: _gather,
    Op.Exponential: _exponential,
    OPCODE_BY_NAME["GetSequenceBounds"]: _sequence_bounds,
    Op.DMACopy: _dma,
    OPCODE_BY_NAME["NonzeroWithCount"]: _nonzero,
    OPCODE_BY_NAME["QuantizeMx"]: _quantize_mx,
    OPCODE_BY_NAME["MatmultMx"]: _matmul_mx,
}
# operand counts each rule reads (fewer is reported, never indexed past)
_ARITY = {OPCODE_BY_NAME["StreamTranspose"]: (1, 1), OPCODE_BY_NAME["BNStats"]: (1, 1),
          OPCODE_BY_NAME["BNStatsAggregate"]: (1, 1), Op.Max: (1, 1), OPCODE_BY_NAME["MaxIndex"]: (2, 1),
          OPCODE_BY_NAME["MatchReplace"]: (2, 1), OPCODE_BY_NAME["MaxIndexAndMatchReplace"]: (2, 2),
          Op.TensorScalarAffineSelect: (1, 1), OPCODE_BY_NAME["CopyPredicated"]: (2, 1), Op.Select: (3, 1),
          OPCODE_BY_NAME["RangeSelect"]: (3, 1), Op.TensorScalarPtr: (2, 1), Op.TensorReduce: (1, 1),
          OPCODE_BY_NAME["Rng"]: (0, 1), OPCODE_BY_NAME["Dropout"]: (2, 1), OPCODE_BY_NAME["StreamShuffle"]: (1, 1),
          OPCODE_BY_NAME["SetRandState"]: (1, 0), Op.Gather: (2, 1), OPCODE_BY_NAME["GetSequenceBounds"]: (1, 1),
          Op.DMACopy: (0, 0), Op.Exponential: (2, 1), OPCODE_BY_NAME["NonzeroWithCount"]: (1, 1),
          OPCODE_BY_NAME["QuantizeMx"]: (1, 2), OPCODE_BY_NAME["MatmultMx"]: (4, 1)}


def check_isa_shapes(fn: Function, limit: int) -> list[str]:
    out: list[str] = []
    rows = np.flatnonzero(np.isin(fn.insts["opcode"], list(RULES))).tolist() if len(fn.insts) else []
    rows = _without_plain_dma(fn, rows)
    for i in rows:
        v = fn.inst(i)
        n_in, n_out = _ARITY[v.opcode]
        ins, outs = v.ins, v.outs
        if len(ins) < n_in or len(outs) < n_out:
            out.append(f"instruction {v.name} ({v.opname}): {len(ins)} inputs and {len(outs)} outputs; "
                       f"{n_in} and {n_out} are needed")
        else:
            out += [f"instruction {v.name} ({v.opname}): {p}" for p in RULES[v.opcode](v)]
        if len(out) >= limit:
            break
    return out


def _without_plain_dma(fn: Function, rows: list[int]) -> list[int]:
    """``rows`` less the DMACopy rows that are no transpose: their rule finds nothing and needs no operand
    (most rows of an unrolled kernel; building their operand views was most of the verifier's time)."""
    if not rows:
        return rows
    at = np.asarray(rows, dtype=np.int64)
    dma = fn.insts["opcode"][at] == Op.DMACopy
    if not dma.any():
        return rows
    attrs = fn.insts["attrs"][at].astype(np.int64)
    transposes = [a for a in np.unique(attrs[dma]).tolist() if a >= 0 and fn.record(a).get("mode") == "Transpose"]
    keep = ~dma | np.isin(attrs, transposes)
    return at[keep].tolist()
