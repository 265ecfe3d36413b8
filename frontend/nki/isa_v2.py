"""``nki.isa`` of NKI 2.x (``import nki.isa as nisa``): destination-passing calls, ``nisa.X(dst, ...)``.

Signatures are the NKI 2.x API reference's (aws-neuron-sdk nki/api/nki/isa); arguments bind by them
(:func:`~tusk.frontend.nki.isa_signature.documented`).  Engine, queue and name choices (``engine=``,
``priority=``, ``dge_mode=``, ``oob_mode=``, ``name=``) do not change the numbers and are accepted as
given.  What each call records: docs/frontend.md.
"""

from __future__ import annotations

from typing import Any

from tusk.frontend.nki import isa_ops as ops
from tusk.frontend.nki import language as nl
from tusk.frontend.nki.isa_ops import any_view, refuse, tile
from tusk.frontend.nki.isa_signature import (  # noqa: F401 - the nisa names kernels use
    dge_mode,
    dma_engine,
    documented,
    engine,
    get_nc_version,
    gpsimd_engine,
    matmul_perf_mode,
    nc_version,
    oob_mode,
    reduce_cmd,
    scalar_engine,
    sync_engine,
    tensor_engine,
    unknown_engine,
    unknown_name,
    vector_engine,
)

get_nc_version = documented("nisa.get_nc_version")(get_nc_version)


@documented("nisa.dma_copy")
def dma_copy(dst, src, priority=None, oob_mode=oob_mode.error, dge_mode=dge_mode.unknown,
             engine=engine.unknown, name=None):
    ops.dma_copy("nisa.dma_copy", any_view(dst, "nisa.dma_copy dst"), any_view(src, "nisa.dma_copy src"))


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
    if is_transpose:
        raise refuse(call, "is_transpose", is_transpose, "use nisa.nc_transpose")
    if perf_mode not in (matmul_perf_mode.none, "none", None):
        raise refuse(call, "perf_mode", perf_mode, "FP8 double-row packing")
    # tile_position / tile_size place the matmul on part of the PE array: the same products
    ops.nc_matmul(call, tile(dst, f"{call} dst"), tile(stationary, f"{call} stationary"),
                  tile(moving, f"{call} moving"), accumulate)


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
def scalar_tensor_tensor(dst, data, op0, operand0, op1, operand1, reverse0=False, reverse1=False, name=None):
    call = "nisa.scalar_tensor_tensor"
    ops.scalar_tensor_tensor(call, tile(dst, f"{call} dst"), tile(data, call), op0, operand0, op1, operand1,
                             reverse0, reverse1)


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
               reduce_cmd=reduce_cmd.idle, name=None):
    call = "nisa.activation"
    d = tile(dst, f"{call} dst")
    ops.check_reduce(call, reduce_op, reduce_res, reduce_cmd)
    ops.activation(call, d, op, tile(data, call), bias, scale)
    ops.reduce_into(call, reduce_res, d, reduce_op, allowed=("add",))


@documented("nisa.activation_reduce")
def activation_reduce(dst, op, data, reduce_op, reduce_res, bias=None, scale=1.0, name=None):
    call = "nisa.activation_reduce"
    d = tile(dst, f"{call} dst")
    ops.activation(call, d, op, tile(data, call), bias, scale)
    ops.reduce_into(call, reduce_res, d, reduce_op, allowed=("add",))


@documented("nisa.exponential")
def exponential(dst, src, max_value=0.0, reduce_res=None, reduce_cmd=reduce_cmd.idle, reduce_init=0.0,
                name=None):
    call = "nisa.exponential"
    d = tile(dst, f"{call} dst")
    ops.check_reduce(call, None if reduce_res is None else nl.add, reduce_res, reduce_cmd)
    ops.exponential(call, d, tile(src, call), max_value)
    ops.reduce_into(call, reduce_res, d, nl.add, init=reduce_init)


@documented("nisa.tensor_scalar_reduce")
def tensor_scalar_reduce(dst, data, op0, operand0, reduce_op, reduce_res=None, reverse0=False,
                         reduce_cmd=reduce_cmd.reset_reduce, reduce_init=None, reduce_res_negate=False,
                         name=None):
    call = "nisa.tensor_scalar_reduce"
    d = tile(dst, f"{call} dst")
    ops.check_reduce(call, reduce_op, reduce_res, reduce_cmd)
    ops.tensor_scalar(call, d, tile(data, call), op0, operand0, reverse0, None, None, False)
    ops.reduce_into(call, reduce_res, d, reduce_op, negate=reduce_res_negate, init=reduce_init)


@documented("nisa.reciprocal")
def reciprocal(dst, data, name=None):
    ops.reciprocal("nisa.reciprocal", tile(dst, "nisa.reciprocal dst"), tile(data, "nisa.reciprocal"))


@documented("nisa.iota")
def iota(dst, pattern, offset=0, channel_multiplier=0, name=None):
    ops.iota("nisa.iota", tile(dst, "nisa.iota dst"), pattern, offset, channel_multiplier)


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    raise unknown_name("nisa", name)
