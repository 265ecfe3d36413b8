"""``nki.isa`` of NKI 2.x (``import nki.isa as nisa``): destination-passing calls, ``nisa.X(dst, ...)``.

Signatures are the NKI 2.x API reference's (aws-neuron-sdk nki/api/nki/isa); arguments bind by them
(:func:`~tusk.frontend.nki.isa_signature.documented`).  Engine, queue and name choices (``engine=``,
``priority=``, ``dge_mode=``, ``oob_mode=``, ``name=``) do not change the numbers and are accepted as
given.  What each call records: docs/frontend.md.
"""

from __future__ import annotations

from typing import Any

from tusk.frontend import phases
from tusk.frontend.nki import isa_mx
from tusk.frontend.nki import isa_ops as ops
from tusk.frontend.nki import language as nl
from tusk.frontend.nki.isa_ops import any_view, tile
from tusk.frontend.nki.isa_signature import (  # noqa: F401 - the nisa names kernels use
    constants,
    dge_mode,
    dma_engine,
    documented,
    engine,
    get_nc_sub_version,
    get_nc_version,
    gpsimd_engine,
    matmul_perf_mode,
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

get_nc_version = documented("nisa.get_nc_version")(get_nc_version)
get_nc_sub_version = documented("nisa.get_nc_sub_version")(get_nc_sub_version)


@documented("nisa.dma_copy")
def dma_copy(dst, src, priority=None, oob_mode=oob_mode.error, dge_mode=dge_mode.unknown,
             engine=engine.unknown, name=None):
    ops.dma_copy("nisa.dma_copy", any_view(dst, "nisa.dma_copy dst"), any_view(src, "nisa.dma_copy src"),
                 oob=ops.oob_name("nisa.dma_copy", oob_mode))


@documented("nisa.dma_compute")
def dma_compute(dst, srcs, reduce_op, scales=None, unique_indices=True, oob_mode=oob_mode.error, name=None):
    call = "nisa.dma_compute"
    if isinstance(reduce_op, (list, tuple)) and not isinstance(scales, (list, tuple)):
        # the reference's first 2.x signature put scales before reduce_op: (dst, srcs, scales, reduce_op)
        reduce_op, scales = scales, reduce_op
    if not isinstance(srcs, (list, tuple)):
        raise ops.unsupported(f"{call} srcs={srcs!r}: a list of tensors")
    ops.dma_compute(call, any_view(dst, f"{call} dst"),
                    [any_view(s, f"{call} srcs[{k}]") for k, s in enumerate(srcs)], reduce_op, scales,
                    unique_indices=unique_indices, oob=ops.oob_name(call, oob_mode))


@documented("nisa.tensor_copy")
def tensor_copy(dst, src, engine=engine.unknown, name=None):
    ops.tensor_copy("nisa.tensor_copy", tile(dst, "nisa.tensor_copy dst"), tile(src, "nisa.tensor_copy src"))


@documented("nisa.memset")
def memset(dst, value, engine=engine.unknown, name=None):
    ops.memset("nisa.memset", any_view(dst, "nisa.memset dst"), value)


@documented("nisa.nc_matmul")
def nc_matmul(dst, stationary, moving, is_stationary_onezero=False, is_moving_onezero=False,
              is_transpose=False, accumulate=None, tile_position=(), tile_size=(),
              perf_mode=matmul_perf_mode.none, name=None):
    call = "nisa.nc_matmul"
    st, mv = tile(stationary, f"{call} stationary"), tile(moving, f"{call} moving")
    # tile_position / tile_size place the matmul on part of the PE array: the same products
    ops.perf_matmul(call, tile(dst, f"{call} dst"), st, mv, accumulate, bool(is_transpose),
                    ops.double_row(call, perf_mode, st, mv))


@documented("nisa.nc_matmul_mx")
def nc_matmul_mx(dst, stationary, moving, stationary_scale, moving_scale, tile_position=None, tile_size=None,
                 accumulate=None, name=None):
    call = "nisa.nc_matmul_mx"
    isa_mx.nc_matmul_mx(call, tile(dst, f"{call} dst"), tile(stationary, f"{call} stationary"),
                        tile(moving, f"{call} moving"), tile(stationary_scale, f"{call} stationary_scale"),
                        tile(moving_scale, f"{call} moving_scale"), tile_position, tile_size, accumulate)


@documented("nisa.quantize_mx")
def quantize_mx(dst, src, dst_scale, name=None):
    call = "nisa.quantize_mx"
    isa_mx.quantize_mx(call, tile(dst, f"{call} dst"), tile(src, f"{call} src"),
                       tile(dst_scale, f"{call} dst_scale"))


@documented("nisa.nc_transpose")
def nc_transpose(dst, data, engine=engine.unknown, name=None):
    ops.nc_transpose("nisa.nc_transpose", tile(dst, "nisa.nc_transpose dst"), tile(data, "nisa.nc_transpose"))


@documented("nisa.tensor_tensor")
def tensor_tensor(dst, data1, data2, op, engine=engine.unknown, name=None):
    call = "nisa.tensor_tensor"
    ops.tensor_tensor(call, tile(dst, f"{call} dst"), tile(data1, call), tile(data2, call), op)


@documented("nisa.tensor_scalar")
def tensor_scalar(dst, data, op0, operand0, reverse0=False, op1=None, operand1=None, reverse1=False,
                  engine=engine.unknown, name=None):
    call = "nisa.tensor_scalar"
    ops.tensor_scalar(call, tile(dst, f"{call} dst"), tile(data, call), op0, operand0, reverse0, op1, operand1,
                      reverse1)


@documented("nisa.scalar_tensor_tensor")
def scalar_tensor_tensor(dst, data, op0, operand0, op1, operand1, reverse0=False, reverse1=False,
                         reduce_cmd=reduce_cmd.reset_reduce, reduce_op=..., reduce_res=None, name=None):
    call = "nisa.scalar_tensor_tensor"
    ops.scalar_tensor_tensor_accumulating(call, tile(dst, f"{call} dst"), tile(data, call), op0, operand0, op1,
                                          operand1, reverse0, reverse1, reduce_cmd, reduce_op, reduce_res)


@documented("nisa.tensor_tensor_scan")
def tensor_tensor_scan(dst, data0, data1, initial, op0, op1, reverse0=False, reverse1=False, name=None):
    call = "nisa.tensor_tensor_scan"
    ops.tensor_tensor_scan(call, tile(dst, f"{call} dst"), tile(data0, call), tile(data1, call), initial, op0,
                           op1, reverse0, reverse1)


@documented("nisa.tensor_reduce")
def tensor_reduce(dst, op, data, axis, negate=False, keepdims=False, name=None):
    call = "nisa.tensor_reduce"
    ops.tensor_reduce(call, tile(dst, f"{call} dst"), op, tile(data, call), axis, negate)


@documented("nisa.activation")
def activation(dst, op, data, bias=None, scale=1.0, reduce_op=None, reduce_res=None,
               reduce_cmd=reduce_cmd.idle, engine=engine.scalar, name=None):
    call = "nisa.activation"
    d = tile(dst, f"{call} dst")
    ops.activation_engine(call, engine, reduce_op, reduce_res, reduce_cmd)
    ops.activation_accumulating(call, d, op, tile(data, call), bias, scale, reduce_op, reduce_res, reduce_cmd)


@documented("nisa.activation_reduce")
def activation_reduce(dst, op, data, reduce_op, reduce_res, bias=None, scale=1.0, name=None):
    call = "nisa.activation_reduce"
    d = tile(dst, f"{call} dst")
    ops.activation_accumulating(call, d, op, tile(data, call), bias, scale, reduce_op, reduce_res,
                                reduce_cmd.reset_reduce)


@documented("nisa.exponential")
def exponential(dst, src, max_value=0.0, reduce_res=None, reduce_cmd=reduce_cmd.idle, reduce_init=0.0,
                name=None):
    call = "nisa.exponential"
    d = tile(dst, f"{call} dst")
    ops.exponential(call, d, tile(src, call), max_value, reduce_res, reduce_cmd, reduce_init)


@documented("nisa.activate2")
def activate2(dst, op, data, imm0, imm1, op0, op1, relu_param=0.0, reverse0=False, reverse1=False, reduce_op=None,
              reduce_res=None, reduce_cmd=reduce_cmd.idle, engine=engine.scalar, name=None):
    call = "nisa.activate2"
    ops.activation_engine(call, engine, reduce_op, reduce_res, reduce_cmd)
    ops.activate2(call, tile(dst, f"{call} dst"), op, tile(data, call), imm0, imm1, op0, op1, relu_param,
                  reverse0, reverse1, reduce_op, reduce_res, reduce_cmd)


@documented("nisa.tensor_scalar_reduce")
def tensor_scalar_reduce(dst, data, op0, operand0, reduce_op, reduce_res=None, reverse0=False,
                         reduce_cmd=reduce_cmd.reset_reduce, reduce_init=None, reduce_res_negate=False,
                         name=None):
    call = "nisa.tensor_scalar_reduce"
    d = tile(dst, f"{call} dst")
    ops.tensor_scalar_reduce_accumulating(call, d, tile(data, call), op0, operand0, reverse0, reduce_op, reduce_res,
                                          reduce_cmd, reduce_init, bool(reduce_res_negate))


@documented("nisa.reciprocal")
def reciprocal(dst, data, name=None):
    ops.reciprocal("nisa.reciprocal", tile(dst, "nisa.reciprocal dst"), tile(data, "nisa.reciprocal"))


@documented("nisa.iota")
def iota(dst, pattern, offset=0, channel_multiplier=0, name=None):
    ops.iota("nisa.iota", tile(dst, "nisa.iota dst"), pattern, offset, channel_multiplier)


# ---------------------------------------------------------------------------- KLR operators of their own
@documented("nisa.tensor_partition_reduce")
def tensor_partition_reduce(dst, op, data, name=None):
    call = "nisa.tensor_partition_reduce"
    ops.tensor_partition_reduce(call, tile(dst, f"{call} dst"), op, tile(data, call))


@documented("nisa.bn_stats")
def bn_stats(dst, data, name=None):
    ops.bn_stats("nisa.bn_stats", tile(dst, "nisa.bn_stats dst"), tile(data, "nisa.bn_stats"))


@documented("nisa.bn_aggr")
def bn_aggr(dst, data, name=None):
    ops.bn_aggr("nisa.bn_aggr", tile(dst, "nisa.bn_aggr dst"), tile(data, "nisa.bn_aggr"))


@documented("nisa.dropout")
def dropout(dst, data, prob, name=None):
    ops.dropout("nisa.dropout", tile(dst, "nisa.dropout dst"), tile(data, "nisa.dropout"), prob)


@documented("nisa.affine_select")
def affine_select(dst, pattern, channel_multiplier, on_true_tile, on_false_value, cmp_op=nl.equal, offset=0,
                  name=None):
    call = "nisa.affine_select"
    if ops.number(on_true_tile) and not ops.number(on_false_value):
        # NKI 0.2.0's order (dst, pattern, offset, channel_multiplier, on_true_tile, on_false_value)
        raise ops.unsupported(f"{call}: on_true_tile={on_true_tile!r} is a number and on_false_value a tile: "
                              "the arguments of NKI 0.2.0's (dst, pattern, offset, channel_multiplier, "
                              "on_true_tile, on_false_value)? Since NKI 0.3.0 offset is the keyword offset= "
                              "(dst, pattern, channel_multiplier, on_true_tile, on_false_value, cmp_op, offset)")
    ops.affine_select(call, tile(dst, f"{call} dst"), pattern, channel_multiplier, tile(on_true_tile, call),
                      on_false_value, cmp_op, offset)


@documented("nisa.select_reduce")
def select_reduce(dst, predicate, on_true, on_false, reduce_res=None, reduce_cmd=reduce_cmd.idle,
                  reduce_op=nl.maximum, reverse_pred=False, name=None):
    call = "nisa.select_reduce"
    ops.select_reduce(call, tile(dst, f"{call} dst"), tile(predicate, call), tile(on_true, call), on_false,
                      reduce_res, reduce_cmd, reduce_op, reverse_pred)


@documented("nisa.range_select")
def range_select(dst, on_true_tile, comp_op0, comp_op1, bound0, bound1, reduce_cmd=reduce_cmd.reset_reduce,
                 reduce_res=None, reduce_op=nl.maximum, range_start=0, on_false_value=-3.4028234663852886e38,
                 name=None):
    call = "nisa.range_select"
    ops.range_select(call, tile(dst, f"{call} dst"), tile(on_true_tile, call), comp_op0, comp_op1,
                     tile(bound0, call), tile(bound1, call), reduce_cmd, reduce_res, reduce_op, range_start,
                     on_false_value)


@documented("nisa.max8")
def max8(dst, src, name=None):
    ops.max8("nisa.max8", tile(dst, "nisa.max8 dst"), tile(src, "nisa.max8"))


@documented("nisa.nc_find_index8")
def nc_find_index8(dst, data, vals, name=None):
    call = "nisa.nc_find_index8"
    ops.find_index8(call, tile(dst, f"{call} dst"), tile(data, call), tile(vals, call))


@documented("nisa.nc_match_replace8")
def nc_match_replace8(dst, data, vals, imm, dst_idx=None, name=None):
    call = "nisa.nc_match_replace8"
    ops.match_replace8(call, tile(dst, f"{call} dst"), tile(data, call), tile(vals, call), imm, dst_idx)


@documented("nisa.local_gather")
def local_gather(dst, src_buffer, index, num_elem_per_idx=1, num_valid_indices=None, name=None):
    call = "nisa.local_gather"
    ops.local_gather(call, tile(dst, f"{call} dst"), tile(src_buffer, call), tile(index, call), num_elem_per_idx,
                     num_valid_indices)


@documented("nisa.nc_n_gather")
def nc_n_gather(dst, data, indices, name=None):
    call = "nisa.nc_n_gather"
    ops.n_gather(call, tile(dst, f"{call} dst"), tile(data, call), tile(indices, call))


@documented("nisa.nc_stream_shuffle")
def nc_stream_shuffle(dst, src, shuffle_mask, name=None):
    call = "nisa.nc_stream_shuffle"
    ops.stream_shuffle(call, tile(dst, f"{call} dst"), tile(src, call), shuffle_mask)


@documented("nisa.dma_transpose")
def dma_transpose(dst, src, axes=None, priority=None, dge_mode=dge_mode.unknown, oob_mode=oob_mode.error,
                  name=None):
    call = "nisa.dma_transpose"
    ops.dma_transpose(call, any_view(dst, f"{call} dst"), any_view(src, call), axes)


@documented("nisa.sequence_bounds")
def sequence_bounds(dst, segment_ids, name=None):
    call = "nisa.sequence_bounds"
    ops.sequence_bounds(call, tile(dst, f"{call} dst"), tile(segment_ids, call))


@documented("nisa.tensor_scalar_cumulative")
def tensor_scalar_cumulative(dst, src, op0, op1, imm0, imm1=None, reduce_cmd=reduce_cmd.reset_reduce, name=None):
    call = "nisa.tensor_scalar_cumulative"
    ops.tensor_scalar_cumulative(call, tile(dst, f"{call} dst"), tile(src, call), op0, op1, imm0, imm1,
                                 reduce_cmd)


@documented("nisa.nonzero_with_count")
def nonzero_with_count(dst, src, index_offset=0, padding_val=-1):
    call = "nisa.nonzero_with_count"
    ops.nonzero_with_count(call, tile(dst, f"{call} dst"), tile(src, call), index_offset, padding_val)


@documented("nisa.tensor_copy_predicated")
def tensor_copy_predicated(dst, src, predicate, reverse_pred=False, name=None):
    call = "nisa.tensor_copy_predicated"
    ops.copy_predicated(call, tile(dst, f"{call} dst"), src, tile(predicate, call), reverse_pred)


@documented("nisa.rng")
def rng(dst, engine=engine.vector, name=None):
    d = tile(dst, "nisa.rng dst")
    ops.native("nisa.rng", "rng", (), (d,), dst=d, engine=ops.klr_engine("nisa.rng", engine))


@documented("nisa.rand2")
def rand2(dst, min, max, name=None):  # the documented parameter names shadow min and max
    d = tile(dst, "nisa.rand2 dst")
    lo = ops.imm_or_column(min, d.shape[0], "nisa.rand2 min")
    hi = ops.imm_or_column(max, d.shape[0], "nisa.rand2 max")
    ops.native("nisa.rand2", "rand2", ops.reads(lo, hi), (d,), dst=d, min=lo, max=hi)


@documented("nisa.rand_set_state")
def rand_set_state(src_seeds, engine=engine.gpsimd, name=None):
    """Seed an engine's generator with a whole state per partition (uint32: 6 words on GpSimd, 24 on the Vector
    engine; KLR randSetState).  What the interpreter's generator does with it: docs/semantics.md."""
    call = "nisa.rand_set_state"
    s = tile(src_seeds, call)
    ops.rand_state_tile(call, s, engine)
    ops.native(call, "rand_set_state", (s,), (), src=s, engine=ops.klr_engine(call, engine))


@documented("nisa.rand_get_state")
def rand_get_state(dst, engine=engine.gpsimd, name=None):
    """An engine's generator state, per partition, into a uint32 tile (KLR randGetState)."""
    call = "nisa.rand_get_state"
    d = tile(dst, f"{call} dst")
    ops.rand_state_tile(call, d, engine)
    ops.native(call, "rand_get_state", (), (d,), dst=d, engine=ops.klr_engine(call, engine))


@documented("nisa.set_rng_seed")
def set_rng_seed(src_seeds, name=None):
    s = tile(src_seeds, "nisa.set_rng_seed")
    ops.native("nisa.set_rng_seed", "set_rng_seed", (s,), (), src=s)


@documented("nisa.core_barrier")
def core_barrier(data, cores, engine=engine.gpsimd, name=None):
    """A barrier between the programs (NeuronCores) of a launch after they write ``data`` (shared HBM): no
    instruction in Tusk's one stream, which holds every program's instructions before the barrier ahead of
    any program's after it (:mod:`~tusk.frontend.phases`).  With one program it waits for nothing
    (nki-library's router_topk calls it so at LNC 1)."""
    call = "nisa.core_barrier"
    any_view(data, f"{call} data")  # NKI documents shared HBM; the ordering is the same for any tensor
    try:
        listed = sorted(int(c) for c in (cores if isinstance(cores, (tuple, list)) else (cores,)))
    except (TypeError, ValueError):
        listed = None
    programs = nl.num_programs(None)
    # (0, 1) meets the two cores; a launch of one program may name itself alone (nki-library's `(0)`)
    if listed != [0, 1] and not (programs == 1 and listed == [0]):
        raise ops.unsupported(f"{call} cores={cores!r} (NKI supports (0, 1))")
    if programs > 1:
        phases.barrier(call)  # the programs meet here (frontend.phases)


@documented("nisa.sendrecv")
def sendrecv(src, dst, send_to_rank, recv_from_rank, pipe_id, dma_engine=dma_engine.dma, use_gpsimd_dma=False,
             name=None):  # noqa: F811 - the parameter is named as NKI documents it
    """Point-to-point exchange between the programs (NeuronCores) of a launch: ``src`` to program
    ``send_to_rank``'s ``dst``, program ``recv_from_rank``'s ``src`` into ``dst`` (:mod:`~tusk.frontend.phases`).
    ``dma_engine`` / ``use_gpsimd_dma`` choose the queues on the device: the data is the same."""
    call = "nisa.sendrecv"
    phases.sendrecv(call, tile(dst, f"{call} dst"), tile(src, f"{call} src"), send_to_rank, recv_from_rank, pipe_id)


@documented("nisa.sendrecv_compute")
def sendrecv_compute(src, dst, send_to_rank, recv_from_rank, reduce_op, name=None):
    """``dst = reduce_op(src, the peer's src)``: ``nki.lnc.sendrecv_compute`` (this entry point, NKI 0.8.0's
    deprecated wrapper, pairs calls by their order as that one does)."""
    from tusk.frontend.nki import lnc
    lnc.sendrecv_compute(src, dst, send_to_rank, recv_from_rank, reduce_op)


# ---------------------------------------------------------------------------- registers
VirtualRegister = ops.VirtualRegister


@documented("nisa.register_alloc")
def register_alloc(x=None):
    return ops.register_alloc("nisa.register_alloc", x)


@documented("nisa.register_move")
def register_move(dst, src):
    ops.register_move("nisa.register_move", dst, src)


@documented("nisa.register_load")
def register_load(dst, src):
    ops.register_load("nisa.register_load", dst, any_view(src, "nisa.register_load src"))


@documented("nisa.register_store")
def register_store(dst, src):
    ops.register_store("nisa.register_store", any_view(dst, "nisa.register_store dst"), src)


NkiScalar = ops.NkiScalar


@documented("nisa.scalar_load")
def scalar_load(src):
    """NKI 0.7.0+: a 1x1 nl.int32 tile read into an NkiScalar."""
    return ops.scalar_load("nisa.scalar_load", any_view(src, "nisa.scalar_load src"))


@documented("nisa.scalar_store")
def scalar_store(dst, value):
    """NKI 0.7.0+: an NkiScalar written into a 1x1 nl.int32 tile."""
    ops.scalar_store("nisa.scalar_store", any_view(dst, "nisa.scalar_store dst"), value)


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    return missing_name("nisa", "nki.isa", name)
