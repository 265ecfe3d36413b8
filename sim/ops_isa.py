"""What the NKI ISA instructions beyond the core set compute (docs/semantics.md, "ISA instructions").

Every handler follows the ISA reference's numpy description, computes in
float32 (statistics in float64 rounded once to float32, like matmul), and
reads a tile per partition: ``rows(x)`` is ``(partitions, elements per
partition)`` in the operand's iteration order.  Per-partition scalars (a
``[P, 1]`` tile) and immediates broadcast along the free axis.

Random numbers (Rng, Rand2, Dropout) come from one counter-based generator
per engine: element ``n`` of partition ``p`` after seed ``s`` is
``splitmix64(s * 2^32 + p * 2^48 + n)`` truncated to 32 bits, the counter of
each partition advancing by the elements it drew.  SetRandState sets the seed
(one 32-bit value, or one per partition) and restarts the counters; a run
starts with seed 0.  Same seed, same program: same numbers.

A whole state per partition (``nisa.rand_set_state``: 6 uint32 words, an
XORWOW state ``x0..x4, d``, on GpSimd; 24 words, four of them, on the Vector
engine) switches the engine's generator to XORWOW on those words: each draw
steps every state of the partition once (Marsaglia's xorwow: ``t = x4 ^ x4 >> 2;
t ^= t << 1; t ^= x0 ^ x0 << 4``, the words shift up, ``x0 = t``, ``d += 362437``)
and is the xor of their ``t + d``.  GetRandState writes the words as they are
now, so a state read and set again continues the same numbers, and one set
and read back is what was set.  Read while still seeded, the state is made
from the seed and counters (splitmix64) and the generator goes on from it.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tusk.ir.enums import ENGINE_NAMES, OPCODE_BY_NAME, Op
from tusk.ir.errors import InputError, PassError
from tusk.ir.verify_isa import TRANSPOSE_AXES
from tusk.sim.accumulators import accumulate, h_read_accumulator
from tusk.sim.machine import Frame
from tusk.sim.memory import from_compute, to_compute
from tusk.sim.mx import h_matmul_mx, h_quantize_mx
from tusk.sim.ops import (
    ACTIVATIONS,
    F32,
    _broadcast,
    _one,
    alu,
    h_activation,
    h_copy,
    h_tensor_reduce,
    h_tensor_scalar_ptr,
    op_name,
)

Handler = Callable[[Frame, int], None]
_IDENTITY = {"add": 0.0, "subtract": 0.0, "mult": 1.0, "max": -np.inf, "min": np.inf}


def rows(x: np.ndarray) -> np.ndarray:
    """``x`` as (partitions, elements per partition)."""
    x = np.asarray(x)
    return x.reshape(x.shape[0] if x.ndim else 1, -1)


def _io(fr: Frame, i: int, n_in: int, n_out: int = 1) -> tuple[list[int], list[int]]:
    """The input and output operand rows of ``i``, at least ``n_in`` and ``n_out`` of them."""
    ins, _, outs = fr.split(i)
    _one(ins, "input", n_in)
    _one(outs, "output", n_out)
    return ins, outs


def _lookup(table: dict, name: object, what: str):
    got = table.get(name)
    if got is None:
        raise PassError(f"{what} {name!r} is not supported by the interpreter")
    return got


def _f32(fr: Frame, j: int) -> np.ndarray:
    return rows(fr.value(j)).astype(F32, copy=False)


def _per_partition(fr: Frame, j: int, like: np.ndarray, what: str) -> np.ndarray:
    """An immediate or a [P, 1] tile as a (P, 1) (or scalar) float32 operand of ``like``."""
    v = fr.value(j).astype(F32, copy=False)
    if v.size == 1:
        return v.reshape(())
    if v.size == like.shape[0]:
        return v.reshape(like.shape[0], 1)
    raise InputError(f"{what} has {v.size} elements; expected one, or one per partition ({like.shape[0]})")


def _ordered(op: str, x, y, reverse: bool):
    """``op(x, y)``, or ``op(y, x)`` when reversed."""
    return alu(op, y, x) if reverse else alu(op, x, y)


# --------------------------------------------------------------------------- scans


def variant(special: Handler, general: Handler, key: str, value: object = True) -> Handler:
    """The handler of an opcode some of whose instructions mean something else: ``special`` where
    attribute ``key`` is ``value``, else the opcode's ``general`` handler."""
    def handler(fr: Frame, i: int) -> None:
        v = fr.attrs(i).get(key)
        if v is not None and not isinstance(v, str):
            v = fr.maybe_affine(v)  # a flag may be a loop-index expression
        (special if v == value else general)(fr, i)
    handler.__doc__ = f"{general.__name__}, or {special.__name__} where {key} is {value!r}"
    return handler


def _reverses(fr: Frame, attrs) -> tuple[bool, bool]:
    """``reverse0`` / ``reverse1``: whether op0 / op1 take their operands swapped (flags may be loop-index
    expressions)."""
    return (bool(fr.maybe_affine(attrs.get("reverse0", False))),
            bool(fr.maybe_affine(attrs.get("reverse1", False))))


def h_tensor_tensor_scan(fr: Frame, i: int) -> None:
    """``r[:, k] = op1(op0(a[:, k], r[:, k-1]), b[:, k])``, ``r[:, -1] = initial``."""
    ins, outs = _io(fr, i, 3)
    attrs = fr.attrs(i)
    a, b = _f32(fr, ins[0]), _f32(fr, ins[1])
    if a.shape != b.shape:
        raise InputError(f"tensor_tensor_scan inputs have shapes {a.shape} and {b.shape}")
    prev = np.broadcast_to(_per_partition(fr, ins[2], a, "the scan's initial value"), (a.shape[0], 1))[:, 0]
    op0, op1 = attrs.get("op0", "add"), attrs.get("op1", "add")
    r0, r1 = _reverses(fr, attrs)
    out = np.empty_like(a)
    for k in range(a.shape[1]):
        prev = _ordered(op1, _ordered(op0, a[:, k], prev, r0), b[:, k], r1)
        out[:, k] = prev
    fr.store(outs[0], out)


def h_tensor_scalar_cache(fr: Frame, i: int) -> None:
    """TensorScalarCache ``mode`` Cumulative: ``reg = op1(op0(x[:, k], imm0), reg)``, ``out[:, k] = reg``."""
    ins, outs = _io(fr, i, 2)
    attrs = fr.attrs(i)
    if attrs.get("mode", "Cumulative") != "Cumulative":
        raise PassError(f"TensorScalarCache mode {attrs.get('mode')!r} is not supported by the interpreter")
    x = _f32(fr, ins[0])
    s0 = _per_partition(fr, ins[1], x, "imm0")
    op0, op1 = op_name(attrs.get("op0", "bypass")), op_name(attrs.get("op1", "add"))
    r0, r1 = _reverses(fr, attrs)
    if attrs.get("acc", "ZeroAccumulate") == "LoadAccumulate":
        _one(ins, "input", 3)
        reg = np.broadcast_to(_per_partition(fr, ins[2], x, "imm1"), (x.shape[0], 1))[:, 0].astype(F32)
    else:
        if op1 not in _IDENTITY:
            raise InputError(f"cumulative op {op1!r} has no reset value (add, subtract, mult, max, min)")
        reg = np.full(x.shape[0], _IDENTITY[op1], dtype=F32)
    t = _ordered(op0, x, s0, r0)
    out = np.empty_like(x)
    for k in range(x.shape[1]):
        reg = _ordered(op1, t[:, k], reg, r1)
        out[:, k] = reg
    fr.store(outs[0], out)


def h_activate2(fr: Frame, i: int) -> None:
    """Activation ``is_activate2``: ``func((in op0 ins[1]) op1 ins[2])`` with per-partition scalars."""
    attrs = fr.attrs(i)
    ins, outs = _io(fr, i, 3)
    f = _lookup(ACTIVATIONS, attrs.get("func", "Identity"), "activation function")
    x = _f32(fr, ins[0])
    s0, s1 = _per_partition(fr, ins[1], x, "imm0"), _per_partition(fr, ins[2], x, "imm1")
    r0, r1 = _reverses(fr, attrs)
    y = _ordered(op_name(attrs.get("op1", "bypass")), _ordered(op_name(attrs.get("op0", "bypass")), x, s0, r0), s1, r1)
    out = np.asarray(f(y, attrs.get("alpha", 0.0)), dtype=F32)
    fr.store(outs[0], out)
    accumulate(fr, i, out, attrs)


def h_exponential(fr: Frame, i: int) -> None:
    """``out = exp(in - max_value)`` (max_value a per-partition scalar)."""
    ins, outs = _io(fr, i, 2)
    x = _f32(fr, ins[0])
    y = np.exp(x - _per_partition(fr, ins[1], x, "max_value"))
    fr.store(outs[0], y)
    accumulate(fr, i, y, fr.attrs(i))  # reduce_cmd: the sum into the engine's reduce registers


# --------------------------------------------------------------------------- selection


def h_affine_select(fr: Frame, i: int) -> None:
    """``dst = on_true where cmp(base + cm * p + sum(i_k * step_k), 0) else fill_value``."""
    ins, outs = _io(fr, i, 1)
    attrs = fr.attrs(i)
    on_true = _f32(fr, ins[0])
    parts = on_true.shape[0]
    pattern = [(int(s), int(n)) for s, n in attrs.get("pattern", ())]
    vals = np.full((parts,) + tuple(n for _, n in pattern), int(fr.maybe_affine(attrs.get("base", 0))), np.int64)
    nd = vals.ndim
    cm = int(fr.maybe_affine(attrs.get("channel_multiplier", 0)))
    vals += (np.arange(parts, dtype=np.int64) * cm).reshape((parts,) + (1,) * (nd - 1))
    for k, (s, n) in enumerate(pattern):
        shape = [1] * nd
        shape[k + 1] = n
        vals += (np.arange(n, dtype=np.int64) * s).reshape(shape)
    per_row = rows(vals)
    if per_row.shape != on_true.shape:
        raise InputError(f"affine_select: the pattern has {per_row.shape[1]} elements per partition, the tile "
                        f"{on_true.shape[1]}")
    pred = alu(attrs.get("compare_op", "is_equal"), per_row, np.int64(0)) != 0
    fr.store(outs[0], np.where(pred, on_true, F32(attrs.get("fill_value", 0.0))))


def _mask(fr: Frame, j: int, like: np.ndarray, reverse: object) -> np.ndarray:
    p = rows(fr.value(j))
    if p.shape != like.shape:
        raise InputError(f"predicate has shape {p.shape}; the data {like.shape}")
    return (p != 0) ^ bool(reverse)


def h_copy_predicated(fr: Frame, i: int) -> None:
    """``dst = src where predicate (xor reverse_pred) else dst``."""
    ins, outs = _io(fr, i, 2)
    old = rows(fr.value(outs[0]))
    src = fr.value(ins[0])
    src = rows(src) if src.size == old.size else _broadcast(old, src, "src")
    mask = _mask(fr, ins[1], old, fr.maybe_affine(fr.attrs(i).get("reverse_pred", False)))
    fr.store(outs[0], np.where(mask, src, old))


def h_select(fr: Frame, i: int) -> None:
    """``dst = on_true where predicate (xor reverse_pred) else on_false``."""
    ins, outs = _io(fr, i, 3)
    on_true = _f32(fr, ins[1])
    on_false = _broadcast(on_true, fr.value(ins[2]).astype(F32, copy=False), "on_false")
    mask = _mask(fr, ins[0], on_true, fr.maybe_affine(fr.attrs(i).get("reverse_pred", False)))
    fr.store(outs[0], np.where(mask, on_true, on_false))


def h_range_select(fr: Frame, i: int) -> None:
    """``dst = on_true where cmp0(base + k, bound0) and cmp1(base + k, bound1) else fill_value``."""
    ins, outs = _io(fr, i, 3)
    attrs = fr.attrs(i)
    on_true = _f32(fr, ins[0])
    b0 = _per_partition(fr, ins[1], on_true, "bound0")
    b1 = _per_partition(fr, ins[2], on_true, "bound1")
    idx = (F32(attrs.get("base", 0.0)) + np.arange(on_true.shape[1], dtype=F32))[None, :]
    mask = (alu(attrs.get("compare_op0", "is_ge"), idx, b0) != 0) & (alu(attrs.get("compare_op1", "is_lt"), idx, b1) != 0)
    y = np.where(mask, on_true, F32(attrs.get("fill_value", -3.4028235e38)))
    fr.store(outs[0], y)
    accumulate(fr, i, y, attrs)


# --------------------------------------------------------------------------- statistics and layout


def _moments(x: np.ndarray) -> np.ndarray:
    """(count, mean, variance * count) of each row, in float64."""
    n = x.shape[1]
    if n == 0:
        return np.zeros((x.shape[0], 3))
    mean = x.mean(axis=1)
    m2 = ((x - mean[:, None]) ** 2).sum(axis=1)
    return np.stack([np.full(x.shape[0], float(n)), mean, m2], axis=1)


def h_bn_stats(fr: Frame, i: int) -> None:
    """Six values per partition: (count, mean, variance * count) of the even, then of the odd elements."""
    ins, outs = _io(fr, i, 1)
    x = _f32(fr, ins[0]).astype(np.float64)
    fr.store(outs[0], np.concatenate([_moments(x[:, 0::2]), _moments(x[:, 1::2])], axis=1).astype(F32))


def h_bn_aggr(fr: Frame, i: int) -> None:
    """(mean, variance) per partition from (count, mean, variance * count) triples."""
    ins, outs = _io(fr, i, 1)
    x = _f32(fr, ins[0]).astype(np.float64)
    if x.shape[1] % 3:
        raise InputError(f"bn_aggr reads {x.shape[1]} elements per partition; a multiple of three is needed")
    t = x.reshape(x.shape[0], -1, 3)
    count, mean, m2 = t[..., 0], t[..., 1], t[..., 2]
    with np.errstate(all="ignore"):
        total = count.sum(axis=1)
        mu = (count * mean).sum(axis=1) / total
        var = (m2.sum(axis=1) + (count * (mean - mu[:, None]) ** 2).sum(axis=1)) / total
    fr.store(outs[0], np.stack([mu, var], axis=1).astype(F32))


def h_stream_transpose(fr: Frame, i: int) -> None:
    """``dst[f, p] = src[p, f]`` (the free axes flattened)."""
    ins, outs = _io(fr, i, 1)
    fr.store(outs[0], rows(fr.value(ins[0])).T)


def h_partition_reduce(fr: Frame, i: int) -> None:
    """TensorReduce ``axis`` C: across partitions (tensor_partition_reduce)."""
    ins, outs = _io(fr, i, 1)
    x = rows(fr.value(ins[0]))
    op = op_name(fr.attrs(i).get("op", "add"))
    reducers: dict[str, Callable] = {"add": np.add.reduce, "max": np.maximum.reduce, "min": np.minimum.reduce,
                                     "mult": np.multiply.reduce, "bitwise_or": np.bitwise_or.reduce,
                                     "bitwise_and": np.bitwise_and.reduce}
    if op == "average":
        r = x.astype(F32).sum(axis=0, dtype=F32) / F32(x.shape[0])
    elif op in reducers:
        r = reducers[op](x, axis=0)
    else:
        raise PassError(f"partition reduce op {op!r} is not supported by the interpreter")
    fr.store(outs[0], r)


def h_max8(fr: Frame, i: int) -> None:
    """The 8 largest values of each partition, in descending order."""
    ins, outs = _io(fr, i, 1)
    x = _f32(fr, ins[0])
    if x.shape[1] < 8:
        raise InputError(f"max8 reads {x.shape[1]} elements per partition; at least 8 are needed")
    fr.store(outs[0], -np.sort(-x, axis=1, kind="stable")[:, :8])


def _match_positions(data: np.ndarray, vals: np.ndarray, order: range) -> np.ndarray:
    """Per partition, the position of each value (taken in ``order``), each position used once; -1 if none."""
    out = np.full(vals.shape, -1, dtype=np.int64)
    for p in range(data.shape[0]):
        used: set[int] = set()
        for j in order:
            for k in np.flatnonzero(data[p] == vals[p, j]).tolist():
                if k not in used:
                    used.add(k)
                    out[p, j] = k
                    break
    return out


def _data_and_vals(fr: Frame, ins: list[int]) -> tuple[np.ndarray, np.ndarray]:
    data, vals = _f32(fr, ins[0]), _f32(fr, ins[1])
    if vals.shape != (data.shape[0], 8):
        raise InputError(f"vals has shape {vals.shape}; expected ({data.shape[0]}, 8)")
    return data, vals


def h_max_index(fr: Frame, i: int) -> None:
    """find_index8: the index of the first occurrence of each of 8 values (all ones when absent)."""
    ins, outs = _io(fr, i, 2)
    data, vals = _data_and_vals(fr, ins)
    fr.store(outs[0], _match_positions(data, vals, range(8)))  # -1 wraps to the all-ones sentinel


def h_match_replace(fr: Frame, i: int) -> None:
    """match_replace8: the first occurrence of each value (taken 7 down to 0) replaced by ``imm_value``."""
    ins, outs = _io(fr, i, 2)
    data, vals = _data_and_vals(fr, ins)
    pos = _match_positions(data, vals, range(7, -1, -1))
    out = data.copy()
    p, j = np.nonzero(pos >= 0)
    out[p, pos[p, j]] = F32(fr.attrs(i).get("imm_value", 0.0))
    fr.store(outs[0], out)
    if len(outs) > 1:
        fr.store(outs[1], pos)


def h_stream_shuffle(fr: Frame, i: int) -> None:
    """``dst[q] = src[32 * (q // 32) + mask[q % 32]]``; mask 255 leaves ``dst[q]`` as it is."""
    ins, outs = _io(fr, i, 1)
    mask = [int(m) for m in fr.attrs(i).get("mask", ())]
    src = rows(fr.value(ins[0]))
    keeps = len(mask) < 32 or 255 in mask
    # dst is read only where a partition keeps its value (255): a full mask overwrites every partition
    old = rows(fr.value(outs[0])) if keeps else np.empty(rows(fr.access(outs[0]).read()).shape, np.float32)
    if src.shape[1] != old.shape[1]:
        raise InputError(f"shuffle: {src.shape[1]} source elements per partition, {old.shape[1]} destination")
    out = old.copy()
    for q in range(old.shape[0]):
        m = mask[q % 32] if q % 32 < len(mask) else 255
        if m == 255:
            continue
        s = 32 * (q // 32) + m
        if not 0 <= s < src.shape[0]:
            raise InputError(f"shuffle: destination partition {q} reads source partition {s} of {src.shape[0]}")
        out[q] = src[s]
    fr.store(outs[0], out)


def h_gather(fr: Frame, i: int) -> None:
    """local_gather: per group of 16 partitions, indices (in elements, flattened partitions first) each
    take ``num_elem_per_idx`` contiguous elements of the same partition."""
    ins, outs = _io(fr, i, 2)
    attrs = fr.attrs(i)
    src, index = rows(fr.value(ins[0])), rows(fr.value(ins[1])).astype(np.int64)
    nepi = int(attrs.get("num_elem_per_idx", 1))
    parts = src.shape[0]
    if parts % 16 or index.shape[0] != parts:
        raise InputError(f"local_gather of {parts} source and {index.shape[0]} index partitions; equal multiples "
                        "of 16 are needed")
    valid = int(attrs.get("num_valid_indices", index.size // (parts // 16)))
    out = np.empty((parts, valid * nepi), dtype=src.dtype)
    for c in range(0, parts, 16):
        flat = index[c:c + 16].flatten(order="F")[:valid]
        cols = (flat[:, None] + np.arange(nepi)[None, :]).reshape(-1)
        if cols.size and (cols.min() < 0 or cols.max() >= src.shape[1]):
            raise InputError(f"local_gather reads element {int(cols.max())} of partitions with {src.shape[1]}")
        out[c:c + 16] = src[c:c + 16][:, cols]
    fr.store(outs[0], out)


def h_n_gather(fr: Frame, i: int) -> None:
    """nc_n_gather: ``dst[p, k] = data[p, indices[p, k]]`` (data's free axes flattened)."""
    ins, outs = _io(fr, i, 2)
    data, idx = rows(fr.value(ins[0])), rows(fr.value(ins[1])).astype(np.int64)
    if idx.shape[0] != data.shape[0]:
        raise InputError(f"nc_n_gather of {data.shape[0]} data and {idx.shape[0]} index partitions")
    if idx.size and (idx.min() < 0 or idx.max() >= data.shape[1]):
        raise InputError(f"nc_n_gather index {int(idx.max())} outside the {data.shape[1]} elements of a partition")
    fr.store(outs[0], np.take_along_axis(data, idx, axis=1))


def h_sequence_bounds(fr: Frame, i: int) -> None:
    """Per element, the [start, end) of its run of equal segment ids; id 0 (padding) gets [n, -1]."""
    ins, outs = _io(fr, i, 1)
    ids = rows(fr.value(ins[0]))
    parts, n = ids.shape
    start, end = np.zeros((parts, n), np.int64), np.zeros((parts, n), np.int64)
    for p in range(parts):
        s = ids[p]
        for k in range(n):
            start[p, k] = n if s[k] == 0 else (start[p, k - 1] if k and s[k] == s[k - 1] else k)
        for k in range(n - 1, -1, -1):
            end[p, k] = -1 if s[k] == 0 else (end[p, k + 1] if k < n - 1 and s[k] == s[k + 1] else k + 1)
    fr.store(outs[0], np.stack([start, end], axis=1).astype(ids.dtype))


def partitions_written(acc, parts: np.ndarray) -> bool:
    st = acc.loc.storage
    if st.written is None or acc.count == 0:
        return True
    mask, idx = acc._mask_index()
    return bool(mask[parts].all()) if mask is not None else bool(st.written[idx[parts]].all())


def mark_partitions(acc, parts: np.ndarray) -> None:
    """Strict mode: only these partitions (first axis of the access) were written."""
    st = acc.loc.storage
    if st.written is None or acc.count == 0:
        return
    mask, idx = acc._mask_index()
    if mask is not None:
        mask[parts] = True
    else:
        st.written[idx[parts]] = True


def h_nonzero_with_count(fr: Frame, i: int) -> None:
    """Partitions 0, 16, ... 112 of dst: src's nonzero positions (+ index_offset), padding_val, the count; the
    other partitions are not written (strict mode keeps them unwritten)."""
    ins, outs = _io(fr, i, 1)
    attrs = fr.attrs(i)
    src_acc = fr.access(ins[0])
    parts = src_acc.shape[0]
    # a core whose source partition nothing wrote computes from garbage: its dst partition stays unwritten
    # (strict mode then refuses whatever reads it), as a partial store of garbage would be caught
    keep = np.array([p for p in range(0, parts, 16) if not fr.m.strict or partitions_written(src_acc, np.array([p]))],
                    dtype=np.int64)
    src = rows(to_compute(src_acc.read(), fr.dtype[ins[0]]))  # only partitions 0, 16, ... are used
    acc = fr.access(outs[0])
    n = src.shape[1]
    out = rows(to_compute(acc.read(), fr.dtype[outs[0]])).copy()
    if out.shape != (parts, n + 1):
        raise InputError(f"nonzero_with_count of {src.shape} source elements writes {out.shape}")
    for p in keep.tolist():
        nz = np.flatnonzero(src[p])
        out[p] = int(fr.maybe_affine(attrs.get("padding_val", -1)))
        out[p, :nz.size] = nz + int(fr.maybe_affine(attrs.get("index_offset", 0)))
        out[p, n] = nz.size
    acc.write(from_compute(out.reshape(-1), fr.dtype[outs[0]]))
    if fr.m.strict:
        mark_partitions(acc, keep)


def h_dma_transpose(fr: Frame, i: int) -> None:
    """DMACopy ``mode`` Transpose: the source's four dimensions permuted by ``transpose_op``."""
    attrs = fr.attrs(i)
    ins, outs = _io(fr, i, 1)
    axes = _lookup(TRANSPOSE_AXES, attrs.get("transpose_op", "None"), "DMA transpose_op")
    src = fr.read_raw(ins[0])
    if src.ndim != 4:
        raise InputError(f"a DMA transpose reads a {src.ndim}-dimensional pattern; four dimensions are needed")
    if not fr.same_storage_dtype(ins[0], outs[0]):
        raise InputError("a DMA transpose cannot change the dtype")
    fr.store_raw(outs[0], np.ascontiguousarray(src.transpose(axes)))


# --------------------------------------------------------------------------- random numbers


def _splitmix64(z: np.ndarray) -> np.ndarray:
    z = z + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


class EngineRng:
    """One engine's generator: a seed per partition (all alike until set) and a counter per partition."""

    def __init__(self) -> None:
        self.seeds = np.zeros(128, dtype=np.uint64)
        self.counters = np.zeros(128, dtype=np.uint64)
        self.state: np.ndarray | None = None  # (128, 6 * lanes) uint32 XORWOW words once a state is set

    def get_state(self, words: int) -> np.ndarray:
        """The (128, words) state words; made from the seed and counters (and kept) if none was set."""
        if self.state is None or self.state.shape[1] != words:
            p = np.arange(128, dtype=np.uint64)[:, None]
            k = np.arange(words, dtype=np.uint64)[None, :]
            with np.errstate(over="ignore"):
                z = (self.seeds[:, None] << np.uint64(32)) + (p << np.uint64(48)) + self.counters[:, None] * \
                    np.uint64(words) + k + np.uint64(0x5EED) * np.uint64(1 << 56)
                self.state = (_splitmix64(z) >> np.uint64(32)).astype(np.uint32)
        return self.state

    def set_state(self, rows: np.ndarray) -> None:
        """Rows of words for the first partitions (the others keep theirs)."""
        self.get_state(rows.shape[1])[:rows.shape[0]] = rows

    def _xorwow(self, parts: int, n: int) -> np.ndarray:
        assert self.state is not None
        x = self.state[:parts].reshape(parts, -1, 6)  # a view: the draws advance the state in place
        out = np.zeros((parts, n), dtype=np.uint32)
        for k in range(n):
            s = x[:, :, 0].copy()
            t = x[:, :, 4].copy()
            x[:, :, 4] = x[:, :, 3]
            x[:, :, 3] = x[:, :, 2]
            x[:, :, 2] = x[:, :, 1]
            x[:, :, 1] = s
            t ^= t >> np.uint32(2)
            t ^= t << np.uint32(1)
            t ^= s ^ (s << np.uint32(4))
            x[:, :, 0] = t
            x[:, :, 5] += np.uint32(362437)
            out[:, k] = np.bitwise_xor.reduce(t + x[:, :, 5], axis=1)
        return out

    def bits(self, parts: int, n: int) -> np.ndarray:
        """(parts, n) uint32 random words, advancing the counters (or the XORWOW states)."""
        if self.state is not None:
            return self._xorwow(parts, n)
        p = np.arange(parts, dtype=np.uint64)[:, None]
        k = self.counters[:parts, None] + np.arange(n, dtype=np.uint64)[None, :]
        with np.errstate(over="ignore"):
            z = (self.seeds[:parts, None] << np.uint64(32)) + (p << np.uint64(48)) + k
            words = (_splitmix64(z) >> np.uint64(32)).astype(np.uint32)
        self.counters[:parts] += np.uint64(n)
        return words

    def uniform(self, parts: int, n: int) -> np.ndarray:
        """Floats in [0, 1): the top 24 bits of each word."""
        return ((self.bits(parts, n) >> np.uint32(8)).astype(np.float64) / float(1 << 24)).astype(F32)


def engine_rng(fr: Frame, i: int, named: bool = False) -> EngineRng:
    """The generator of instruction ``i``'s engine (``named``: the engine its ``rng_engine`` attribute names,
    as the state instructions carry it), kept across calls of one run."""
    gens = fr.m.__dict__.setdefault("engine_rngs", {})
    engine = ENGINE_NAMES[int(fr.fn.insts["engine"][i])]
    return gens.setdefault(fr.attrs(i).get("rng_engine", engine) if named else engine, EngineRng())


def _rows(fr: Frame, ap) -> tuple[int, int]:
    """(partitions, elements per partition) of access ``ap``."""
    acc = fr.access(ap)
    parts = acc.shape[0] if acc.shape else 1
    return parts, acc.count // parts


def h_set_rand_state(fr: Frame, i: int) -> None:
    ins, _ = _io(fr, i, 1, 0)
    seeds = fr.value(ins[0]).reshape(-1).astype(np.int64) & 0xFFFFFFFF
    gen = engine_rng(fr, i, named=True)
    parts, words = _rows(fr, ins[0])
    if words in (6, 24) and parts <= 128:  # a whole XORWOW state per partition (nisa.rand_set_state)
        gen.set_state(seeds.reshape(parts, words).astype(np.uint32))
        return
    if seeds.size > 128:
        raise InputError(f"a seed tile of {seeds.size} values; one, or one per partition, is needed")
    gen.state = None
    gen.seeds[:] = seeds[0]
    gen.seeds[:seeds.size] = seeds.astype(np.uint64)
    gen.counters[:] = 0


def h_get_rand_state(fr: Frame, i: int) -> None:
    """The engine's generator state words, one row per partition."""
    _, outs = _io(fr, i, 0)
    parts, words = _rows(fr, outs[0])
    if words not in (6, 24) or parts > 128:
        raise InputError(f"a generator state of {words} words per partition (6 or 24)")
    fr.store(outs[0], engine_rng(fr, i, named=True).get_state(words)[:parts].astype(np.int64))


def h_rng(fr: Frame, i: int) -> None:
    """32 random bits per element; narrower integer dtypes keep the low bits."""
    _, outs = _io(fr, i, 0)
    fr.store(outs[0], engine_rng(fr, i).bits(*_rows(fr, outs[0])).astype(np.int64))


def h_rand2(fr: Frame, i: int) -> None:
    """Uniform floats in [min, max)."""
    ins, outs = _io(fr, i, 2)
    u = engine_rng(fr, i).uniform(*_rows(fr, outs[0]))
    lo = _per_partition(fr, ins[0], u, "min")
    hi = _per_partition(fr, ins[1], u, "max")
    fr.store(outs[0], lo + u * (hi - lo))


def h_dropout(fr: Frame, i: int) -> None:
    """Zero each element with probability ``threshold`` (``is_keep_threshold``: keep with it)."""
    ins, outs = _io(fr, i, 2)
    x = rows(fr.value(ins[0]))
    thr = _per_partition(fr, ins[1], x, "the dropout threshold")
    u = engine_rng(fr, i).uniform(*x.shape)
    keep = u < thr if fr.maybe_affine(fr.attrs(i).get("is_keep_threshold", False)) else u >= thr
    fr.store(outs[0], np.where(keep, x, np.zeros((), dtype=x.dtype)))


ISA_HANDLERS: dict[int, Handler] = {
    # scalar_tensor_tensor is TensorScalarPtr's own rule (its third operand a whole tile)
    Op.TensorScalarPtr: variant(h_tensor_tensor_scan, h_tensor_scalar_ptr, "is_tensor_tensor_scan"),
    Op.TensorReduce: variant(h_partition_reduce, h_tensor_reduce, "axis", "C"),
    Op.DMACopy: variant(h_dma_transpose, h_copy, "mode", "Transpose"),
    Op.Activation: variant(h_activate2, h_activation, "is_activate2"),
    OPCODE_BY_NAME["ActivationReadAccumulator"]: h_read_accumulator,
    OPCODE_BY_NAME["DveReadAccumulator"]: h_read_accumulator,
    OPCODE_BY_NAME["TensorScalarCache"]: h_tensor_scalar_cache,
    Op.TensorScalarAffineSelect: h_affine_select,
    OPCODE_BY_NAME["CopyPredicated"]: h_copy_predicated,
    Op.Select: h_select,
    OPCODE_BY_NAME["RangeSelect"]: h_range_select,
    OPCODE_BY_NAME["BNStats"]: h_bn_stats,
    OPCODE_BY_NAME["BNStatsAggregate"]: h_bn_aggr,
    OPCODE_BY_NAME["StreamTranspose"]: h_stream_transpose,
    Op.Max: h_max8,
    OPCODE_BY_NAME["MaxIndex"]: h_max_index,
    OPCODE_BY_NAME["MatchReplace"]: h_match_replace,
    OPCODE_BY_NAME["MaxIndexAndMatchReplace"]: h_match_replace,
    OPCODE_BY_NAME["StreamShuffle"]: h_stream_shuffle,
    Op.Gather: variant(h_n_gather, h_gather, "within_partition"),
    Op.Exponential: h_exponential,
    OPCODE_BY_NAME["GetSequenceBounds"]: h_sequence_bounds,
    OPCODE_BY_NAME["NonzeroWithCount"]: h_nonzero_with_count,
    OPCODE_BY_NAME["SetRandState"]: h_set_rand_state,
    OPCODE_BY_NAME["GetRandState"]: h_get_rand_state,
    OPCODE_BY_NAME["RandSetState"]: h_set_rand_state,
    OPCODE_BY_NAME["RandGetState"]: h_get_rand_state,
    OPCODE_BY_NAME["Rng"]: h_rng,
    OPCODE_BY_NAME["Rand2"]: h_rand2,
    OPCODE_BY_NAME["Dropout"]: h_dropout,
    OPCODE_BY_NAME["QuantizeMx"]: h_quantize_mx,
    OPCODE_BY_NAME["MatmultMx"]: h_matmul_mx,
}

