"""``neuronxcc.nki.isa`` of NKI 1.x (``import neuronxcc.nki.isa as nisa``): calls that return new tiles.

Signatures are the NKI 1.x API reference's (aws-neuron-sdk before the 2.x docs, general/nki/api/nki/isa);
arguments bind by them (:func:`~tusk.frontend.nki.isa_signature.documented`; the reference's catch-all
``**kwargs`` is not taken: an unknown keyword is refused).  Each call makes its result tile (SBUF, the
input's dtype unless ``dtype=``; PSUM for the PE array's results) and lets :mod:`isa_ops` write it; a
``mask=`` narrows every view of the call.
"""

from __future__ import annotations

import numbers
from typing import Any

from tusk.frontend.affine import AffinePredicate, IndexGrid, IndexVector, Mask
from tusk.frontend.nki import isa_ops as ops
from tusk.frontend.nki import language as nl
from tusk.frontend.nki.isa_ops import any_view, refuse, tile
from tusk.frontend.nki.isa_signature import (  # noqa: F401 - the nisa names kernels use
    ENUMS,
    constants,
    dge_mode,
    dma_engine,
    documented,
    engine,
    get_nc_version,
    gpsimd_engine,
    missing_name,
    nc_version,
    oob_mode,
    reduce_cmd,
    scalar_engine,
    sync_engine,
    tensor_engine,
    unknown_engine,
    vector_engine,
)
from tusk.frontend.tensors import View, as_dtype
from tusk.frontend.tracer import as_shape, current

get_nc_version = documented("nisa.get_nc_version")(get_nc_version)


def _result(like: View, dtype: Any, shape: tuple[int, ...] | None = None, memory: str = "sbuf") -> View:
    shape = shape or (like.shape if like.ndim > 1 else (like.shape[0], 1))
    return current().tile(shape, nl._out_dtype(dtype, like), memory)


def _masked(mask: Any, *views: View, columns: tuple[Any, ...] = ()) -> list[Any]:
    """The views narrowed by ``mask``, then ``columns`` (per-partition operands: a bias, a scale, an operand
    column, reduce_res) cut to the partitions it keeps, as NKI's mask predicates every operand."""
    return nl._masked(list(views), mask, columns)


def _unmasked(call: str, mask: Any, *views: View) -> bool:
    """An instruction Tusk runs on whole tiles takes ``mask=`` only when it keeps every element of ``views``
    (``mask=True``, as kernels pass ``forward_mask = ... if causal else True``, or a prefix as long as the
    tiles); False when it keeps none (``mask=False``): the call then writes nothing (``Tracer.unwritten``)."""
    return nl._whole_tiles(call, mask, list(views), "Tusk takes mask= here only when it holds for every element")



@documented("nisa.dma_copy")
def dma_copy(*, dst, src, mask=None, dst_rmw_op=None, oob_mode=oob_mode.error, dge_mode=dge_mode.unknown):
    call = "nisa.dma_copy"
    if dst_rmw_op is not None and ops.alu(dst_rmw_op, f"{call} dst_rmw_op") != "add":
        raise refuse(call, "dst_rmw_op", dst_rmw_op, "the DMA engine adds (np.add)")
    d, s = _masked(mask, any_view(dst, f"{call} dst"), any_view(src, f"{call} src"))
    ops.dma_copy(call, d, s, oob=ops.oob_name(call, oob_mode), accumulate=dst_rmw_op is not None)


@documented("nisa.tensor_copy")
def tensor_copy(src, *, mask=None, dtype=None, engine=engine.unknown):
    s = tile(src, "nisa.tensor_copy")
    out = _result(s, dtype)
    d, s = _masked(mask, out, s)
    ops.tensor_copy("nisa.tensor_copy", d, s)
    return out


@documented("nisa.tensor_copy_dynamic_src")
def tensor_copy_dynamic_src(src, *, mask=None, dtype=None, engine=engine.unknown):
    """``tensor_copy`` of an SBUF access whose free-axis subscript adds a one-element integer tile's value
    (``t[i_p, offs[0, k] + i_f]``), read when the copy runs: a DMA moves it (docs/frontend.md)."""
    return tensor_copy(src, mask=mask, dtype=dtype, engine=engine)


@documented("nisa.tensor_copy_dynamic_dst")
def tensor_copy_dynamic_dst(*, dst, src, mask=None, dtype=None, engine=engine.unknown):
    """``tensor_copy`` into an SBUF access moved at run time as in :func:`tensor_copy_dynamic_src`; NKI
    returns nothing useful here (the copy writes ``dst``)."""
    call = "nisa.tensor_copy_dynamic_dst"
    d, s = _masked(mask, tile(dst, f"{call} dst"), tile(src, call))
    ops.tensor_copy(call, d, s if dtype is None or as_dtype(dtype) == s.dtype else nl.copy(s, dtype=dtype))


@documented("nisa.memset")
def memset(shape, value, dtype, *, mask=None, engine=engine.unknown):
    out = current().tile(as_shape(shape), as_dtype(dtype))
    d, = _masked(mask, out)
    ops.memset("nisa.memset", d, value)
    return out


@documented("nisa.iota")
def iota(expr, dtype, *, mask=None):
    """``dst[p, f...] = expr`` for an nl.arange / nl.mgrid expression; a [1, 1] tile of an integer (``nisa.iota(
    nl.program_id(1), nl.int32)``, a program's index as a tile)."""
    if isinstance(expr, numbers.Integral) and not isinstance(expr, bool):
        out = current().tile((1, 1), as_dtype(dtype))
        d, = _masked(mask, out)
        ops.memset("nisa.iota", d, int(expr))
        return out
    if isinstance(expr, IndexVector):
        expr = IndexGrid.of(expr)
    if not isinstance(expr, IndexGrid):
        raise ops.unsupported(f"nisa.iota of a {type(expr).__name__} (an expression of nl.arange / nl.mgrid "
                              "indices)")
    # iota's offset is a constant: a loop index in it unrolls its loop (a re-trace; each iteration its own)
    offset = expr.const._unrolled()
    shape = expr.shape if len(expr.shape) > 1 else (expr.shape[0], 1)
    out = current().tile(shape, as_dtype(dtype))
    _, par_step = expr.axes.get(0, (1, 0))
    pattern = [(expr.axes.get(d, (1, 0))[1], n) for d, n in enumerate(shape) if d > 0]
    d, = _masked(mask, out)
    current().op("iota", (), (d,), dst=d, offset=offset, pattern=pattern, channel_multiplier=par_step)
    return out


@documented("nisa.nc_matmul")
def nc_matmul(stationary, moving, *, is_stationary_onezero=False, is_moving_onezero=False, is_transpose=False,
              tile_position=(), tile_size=(), mask=None, perf_mode=None):
    """``stationary[K, M]^T @ moving[K, N]`` -> a new PSUM [M, N] tile (``psum[...] += nc_matmul(...)``
    accumulates).  ``perf_mode`` (the reference's ``**kwargs``; "double_row_gen3" in the 1.x examples)
    packs two rows: [K, 2, M] and [K, 2, N] tiles, both rows summed."""
    call = "nisa.nc_matmul"
    st, mv = tile(stationary, call), tile(moving, call)
    double = ops.double_row(call, perf_mode, st, mv)
    shape = (st.shape[-1], mv.shape[-1]) if double else (ops.free(st), ops.free(mv))
    if not double and mask is None and mv.ndim > 2 and st.ndim == 2:
        shape = (ops.free(st),) + tuple(mv.shape[1:])  # [M, B, H] for a [K, B, H] moving tile, as 1.x keeps it
    out = current().tile(shape, as_dtype("float32"), "psum")
    cut = None if double or is_transpose else nl._matmul_cut(mask, st, mv, True)
    if cut is None and not nl._whole_tiles(call, mask, [st, mv], "the PE array takes whole tiles"):
        return current().unwritten(out)
    if cut is not None:  # a mask= on the result's axes: the first m stationary and n moving columns
        m, n = cut
        ops.perf_matmul(call, out.narrowed({0: m, 1: n}), st.narrowed({1: m}), mv.narrowed({1: n}), False, False,
                        False)
        return out
    ops.perf_matmul(call, out, st, mv, False, bool(is_transpose), double)
    return out


@documented("nisa.nc_transpose")
def nc_transpose(data, *, mask=None, dtype=None, engine=engine.unknown):
    call = "nisa.nc_transpose"
    src = tile(data, call)
    memory = "sbuf" if engine == vector_engine else "psum"  # the PE array writes PSUM, the DVE SBUF
    out = current().tile((ops.free(src), src.shape[0]),
                         as_dtype(dtype or (src.dtype if memory == "sbuf" else "float32")), memory)
    if not nl._whole_tiles(call, mask, [src], "the PE array takes whole tiles"):
        return current().unwritten(out)
    ops.nc_transpose(call, out, src)
    return out


@documented("nisa.tensor_tensor")
def tensor_tensor(data1, data2, op, *, dtype=None, mask=None, engine=engine.unknown):
    call = "nisa.tensor_tensor"
    a, b = tile(data1, call), tile(data2, call)
    if a.shape != b.shape and a.ndim == b.ndim and a.shape[0] == b.shape[0] \
            and (a.elements != b.elements or nl._stretches(a.shape, b.shape)) and ops.free(a) != 1 and ops.free(b) != 1:
        # 1.x broadcasts size-1 free axes numpy's way (q [D, B, H] times k.reshape((D, B, 1))); stride 0
        shape = nl._broadcast_shape(a.shape, b.shape, call)
        a, b = nl._stretched(a, shape), nl._stretched(b, shape)
    wide = b if ops.free(a) == 1 and ops.free(b) > 1 else a  # a [P, 1] data1 broadcast along data2's free axis
    out = _result(wide, dtype if dtype is not None else nl._out_dtype(None, a, b))
    d, a, b = _masked(mask, out, a, b)
    ops.tensor_tensor(call, d, a, b, op)
    return out


@documented("nisa.tensor_scalar")
def tensor_scalar(data, op0, operand0, reverse0=False, op1=None, operand1=None, reverse1=False, *, dtype=None,
                  mask=None, engine=engine.unknown):
    call = "nisa.tensor_scalar"
    src = tile(data, call)
    out = _result(src, dtype)
    d, s, operand0, operand1 = _masked(mask, out, src, columns=(operand0, operand1))
    ops.tensor_scalar(call, d, s, op0, operand0, reverse0, op1, operand1, reverse1)
    return out


@documented("nisa.scalar_tensor_tensor")
def scalar_tensor_tensor(*, data, op0, operand0, op1, operand1, reverse0=False, reverse1=False, dtype=None,
                         mask=None):
    call = "nisa.scalar_tensor_tensor"
    src = tile(data, call)
    out = _result(src, dtype)
    other = tile(operand1, f"{call} operand1")
    d, s, o, operand0 = _masked(mask, out, src, other, columns=(operand0,))
    ops.scalar_tensor_tensor(call, d, s, op0, operand0, op1, o, reverse0, reverse1)
    return out


@documented("nisa.tensor_tensor_scan")
def tensor_tensor_scan(data0, data1, initial, op0, op1, reverse0=False, reverse1=False, *, dtype=None,
                       mask=None):
    call = "nisa.tensor_tensor_scan"
    a, b = tile(data0, call), tile(data1, call)
    out = _result(a, dtype)
    if isinstance(mask, Mask) and mask.row is not None:
        raise refuse(call, "mask", mask, "a flattened-index mask cuts a row; each row scans from its initial")
    d, x, y = _masked(mask, out, a, b)
    # a prefix of the free axis scans as the whole row's prefix; fewer partitions take fewer initials
    rows = d.shape[0]
    if rows != a.shape[0] and not isinstance(initial, numbers.Number):
        initial = tile(initial, f"{call} initial").narrowed({0: rows})
    ops.tensor_tensor_scan(call, d, x, y, initial, op0, op1, reverse0, reverse1)
    return out


@documented("nisa.tensor_reduce")
def tensor_reduce(op, data, axis, *, mask=None, dtype=None, negate=False, keepdims=False):
    call = "nisa.tensor_reduce"
    src = tile(data, call)
    out = _result(src, dtype, ops.reduce_shape(src, axis, keepdims, call))
    d, s = _masked(mask, out, src)
    ops.tensor_reduce(call, d, op, s, axis, negate)
    return out


@documented("nisa.activation")
def activation(op, data, *, bias=None, scale=1.0, reduce_op=None, reduce_res=None, reduce_cmd=reduce_cmd.idle,
               mask=None, dtype=None):
    call = "nisa.activation"
    src = tile(data, call)
    out = _result(src, dtype)
    d, s, bias, scale, reduce_res = _masked(mask, out, src, columns=(bias, scale, reduce_res))
    ops.activation_accumulating(call, d, op, s, bias, scale, reduce_op, reduce_res,
                                _v1_reduce_cmd(reduce_op, reduce_res, reduce_cmd))
    return out


def _v1_reduce_cmd(reduce_op: Any, reduce_res: Any, cmd: Any) -> Any:
    """1.x activation with ``reduce_res`` and the default command reduces into it from zero (what the
    1.x examples rely on)."""
    if reduce_res is not None and reduce_op is not None and cmd == reduce_cmd.idle:
        return reduce_cmd.reset_reduce
    return cmd


@documented("nisa.activation_reduce")
def activation_reduce(op, data, *, reduce_op, reduce_res, bias=None, scale=1.0, mask=None, dtype=None):
    call = "nisa.activation_reduce"
    src = tile(data, call)
    out = _result(src, dtype)
    d, s, bias, scale, reduce_res = _masked(mask, out, src, columns=(bias, scale, reduce_res))
    ops.activation_accumulating(call, d, op, s, bias, scale, reduce_op, reduce_res, reduce_cmd.reset_reduce)
    return out


@documented("nisa.tensor_scalar_reduce")
def tensor_scalar_reduce(*, data, op0, operand0, reduce_op, reduce_res, reverse0=False, dtype=None, mask=None):
    call = "nisa.tensor_scalar_reduce"
    src = tile(data, call)
    out = _result(src, dtype)
    d, s, operand0, reduce_res = _masked(mask, out, src, columns=(operand0, reduce_res))
    ops.tensor_scalar_reduce(call, d, s, op0, operand0, reverse0, reduce_op, reduce_res)
    return out


@documented("nisa.reciprocal")
def reciprocal(data, *, dtype=None, mask=None):
    src = tile(data, "nisa.reciprocal")
    out = _result(src, dtype)
    d, s = _masked(mask, out, src)
    ops.reciprocal("nisa.reciprocal", d, s)
    return out


class fp32:
    """``nisa.fp32.min``: the float32 extremes 1.x defaults use."""
    min = -3.4028234663852886e38
    max = 3.4028234663852886e38


# ---------------------------------------------------------------------------- KLR operators of their own
@documented("nisa.tensor_partition_reduce")
def tensor_partition_reduce(op, data, *, mask=None, dtype=None):
    call = "nisa.tensor_partition_reduce"
    src = tile(data, call)
    out = _result(src, dtype, (1, *src.shape[1:]) if src.ndim > 1 else (1, 1))
    d, s = _masked(mask, out, src)
    ops.tensor_partition_reduce(call, d, op, s)
    return out


@documented("nisa.bn_stats")
def bn_stats(data, *, mask=None, dtype=None):
    src = tile(data, "nisa.bn_stats")
    out = _result(src, dtype, (src.shape[0], 6))
    s, = _masked(mask, src)
    ops.bn_stats("nisa.bn_stats", out, s)
    return out


@documented("nisa.bn_aggr")
def bn_aggr(data, *, mask=None, dtype=None):
    src = tile(data, "nisa.bn_aggr")
    out = _result(src, dtype, (src.shape[0], 2))
    if mask is not None:
        raise refuse("nisa.bn_aggr", "mask", mask)
    ops.bn_aggr("nisa.bn_aggr", out, src)
    return out


@documented("nisa.dropout")
def dropout(data, prob, *, mask=None, dtype=None):
    src = tile(data, "nisa.dropout")
    out = _result(src, dtype)
    d, s = _masked(mask, out, src)
    ops.dropout("nisa.dropout", d, s, prob)
    return out


@documented("nisa.affine_select")
def affine_select(pred, on_true_tile, on_false_value, *, mask=None, dtype=None):
    """``on_true_tile`` where ``pred`` (a comparison of nl.arange / nl.mgrid index expressions, such as
    ``iy < ix``) holds, else ``on_false_value``."""
    call = "nisa.affine_select"
    if not isinstance(pred, AffinePredicate):
        raise ops.unsupported(f"{call} pred={pred!r} (a comparison of two nl.arange / nl.mgrid expressions)")
    src = tile(on_true_tile, call)
    keep = _unmasked(call, mask, src)
    e = pred.expr
    if not e.const.is_static:  # a loop index in the predicate (a causal mask's q_base + i_p >= k_base + i_f):
        e.const._unrolled()    # KLR's predicate pattern is static, so that loop unrolls (a re-trace, as a peel)
    if not e.const.is_static or any(d >= src.ndim or n != src.shape[d] for d, (n, _) in e.axes.items()):
        raise ops.unsupported(f"{call}: pred's index expression does not run over on_true_tile "
                              f"{list(src.shape)}")
    out = _result(src, dtype)
    if not keep:
        return current().unwritten(out)
    pattern = [(e.axes.get(d, (1, 0))[1], n) for d, n in enumerate(src.shape) if d > 0]
    ops.affine_select(call, out, pattern, e.axes.get(0, (1, 0))[1], src, on_false_value,
                      {"is_lt": nl.less, "is_le": nl.less_equal, "is_equal": nl.equal,
                       "not_equal": nl.not_equal}[pred.cmp], e.const.const)
    return out


@documented("nisa.select_reduce")
def select_reduce(*, dst, predicate, on_true, on_false, reduce_res=None, reduce_cmd=reduce_cmd.idle,
                  reduce_op=nl.maximum, reverse_pred=False, mask=None, dtype=None):
    call = "nisa.select_reduce"
    d, p, t = _masked(mask, tile(dst, f"{call} dst"), tile(predicate, call), tile(on_true, call))
    ops.select_reduce(call, d, p, t, on_false, reduce_res, reduce_cmd, reduce_op, reverse_pred)


@documented("nisa.range_select")
def range_select(*, on_true_tile, comp_op0, comp_op1, bound0, bound1, reduce_cmd=reduce_cmd.idle, reduce_res=None,
                 reduce_op=nl.maximum, range_start=0, on_false_value=fp32.min, mask=None, dtype=None):
    call = "nisa.range_select"
    src = tile(on_true_tile, call)
    out = _result(src, dtype)
    if not _unmasked(call, mask, src):
        return current().unwritten(out)
    ops.range_select(call, out, src, comp_op0, comp_op1, tile(bound0, call), tile(bound1, call), reduce_cmd,
                     reduce_res, reduce_op, range_start, on_false_value)
    return out


@documented("nisa.max8")
def max8(*, src, mask=None, dtype=None):
    s = tile(src, "nisa.max8")
    out = _result(s, dtype, (s.shape[0], 8))
    d, s = _masked(mask, out, s)
    ops.max8("nisa.max8", d, s)
    return out


@documented("nisa.nc_find_index8")
def nc_find_index8(*, data, vals, mask=None, dtype=None):
    call = "nisa.nc_find_index8"
    src = tile(data, call)
    out = _result(src, dtype or "uint32", (src.shape[0], 8))
    d, s, v = _masked(mask, out, src, tile(vals, call))
    ops.find_index8(call, d, s, v)
    return out


@documented("nisa.nc_match_replace8")
def nc_match_replace8(*, data, vals, imm, dst_idx=None, mask=None, dtype=None):
    call = "nisa.nc_match_replace8"
    src = tile(data, call)
    out = _result(src, dtype)
    idx = None if dst_idx is None else tile(dst_idx, f"{call} dst_idx")
    d, s, v, *i = _masked(mask, out, src, tile(vals, call), *([idx] if idx is not None else []))
    ops.match_replace8(call, d, s, v, imm, i[0] if i else None)
    return out


@documented("nisa.nc_stream_shuffle")
def nc_stream_shuffle(src, dst, shuffle_mask, *, dtype=None, mask=None):
    call = "nisa.nc_stream_shuffle"
    d, s = _masked(mask, tile(dst, f"{call} dst"), tile(src, call))
    ops.stream_shuffle(call, d, s, shuffle_mask)


@documented("nisa.dma_transpose")
def dma_transpose(src, *, axes=None, mask=None, dtype=None, dge_mode=dge_mode.unknown):
    call = "nisa.dma_transpose"
    s = any_view(src, call)
    order = ops.default_transpose_axes(s.ndim) if axes is None else tuple(axes)
    out = _result(s, dtype, tuple(s.shape[int(a)] for a in order))
    if not _unmasked(call, mask, s):
        return current().unwritten(out)
    ops.dma_transpose(call, out, s, axes)
    return out


@documented("nisa.local_gather")
def local_gather(src_buffer, index, num_elem_per_idx=1, num_valid_indices=None, *, mask=None):
    """A [P, num_valid_indices, num_elem_per_idx] tile (each 16-partition group gathers by its indices)."""
    call = "nisa.local_gather"
    src, idx = tile(src_buffer, call), tile(index, call)
    valid = num_valid_indices if num_valid_indices is not None else ops.free(idx) * 16
    out = current().tile((src.shape[0], int(valid), int(num_elem_per_idx)), src.dtype)
    if not _unmasked(call, mask, src):
        return current().unwritten(out)
    ops.local_gather(call, out, src, idx, num_elem_per_idx, num_valid_indices)
    return out


@documented("nisa.sequence_bounds")
def sequence_bounds(*, segment_ids, dtype=None):
    call = "nisa.sequence_bounds"
    s = tile(segment_ids, call)
    out = _result(s, dtype, (s.shape[0], 2, ops.free(s)))
    ops.sequence_bounds(call, out, s)
    return out


@documented("nisa.tensor_scalar_cumulative")
def tensor_scalar_cumulative(*, src, dst, op0, op1, imm0, imm1=None, reduce_cmd=reduce_cmd.reset_reduce):
    """1.x spells it like 2.x, by keyword, into ``dst``."""
    call = "nisa.tensor_scalar_cumulative"
    ops.tensor_scalar_cumulative(call, tile(dst, f"{call} dst"), tile(src, call), op0, op1, imm0, imm1,
                                 reduce_cmd)


@documented("nisa.tensor_copy_predicated")
def tensor_copy_predicated(*, src, dst, predicate, reverse_pred=False, mask=None, dtype=None):
    call = "nisa.tensor_copy_predicated"
    d, p = _masked(mask, tile(dst, f"{call} dst"), tile(predicate, call))
    ops.copy_predicated(call, d, src, p, reverse_pred)


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    return missing_name("nisa", "neuronxcc.nki.isa", name)
