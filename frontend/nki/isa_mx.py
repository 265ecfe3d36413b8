"""``nisa.quantize_mx`` and ``nisa.nc_matmul_mx``: the MX (microscaling) instructions as KLR's quantizeMX and
ncMatMulMX operators.  Shape rules: tusk.ir.mx; what they compute: docs/semantics.md, MX."""

from __future__ import annotations

from typing import Any

from tusk.frontend.errors import unsupported
from tusk.frontend.nki import isa_ops as ops
from tusk.frontend.tensors import View
from tusk.frontend.tracer import current
from tusk.ir import mx


def _flat(v: View) -> tuple[int, int]:
    return v.shape[0], ops.free(v)


def _refuse_problems(call: str, problems: list[str]) -> None:
    if problems:
        raise unsupported(f"{call}: {problems[0]}")


def _on_chip(call: str, what: str, v: View, memories: tuple[str, ...] = ("sbuf",)) -> None:
    if v.memory not in memories:
        raise unsupported(f"{call} {what} in {v.memory} (it must be in {' or '.join(memories)})")


def _dtype(call: str, what: str, v: View, allowed: tuple[str, ...]) -> None:
    if str(v.dtype) not in allowed:
        raise unsupported(f"{call} {what} of dtype {v.dtype} (one of {', '.join(allowed)})")


def quantize_mx(call: str, dst: View, src: View, dst_scale: View) -> None:
    for what, v in (("src", src), ("dst", dst), ("dst_scale", dst_scale)):
        _on_chip(call, what, v)
    _dtype(call, "src", src, ("bfloat16", "float16"))
    _dtype(call, "dst", dst, mx.QUANTIZE_TARGETS)
    _dtype(call, "dst_scale", dst_scale, mx.SCALE_DTYPES)
    _refuse_problems(call, mx.quantize_problems(_flat(src), _flat(dst), _flat(dst_scale)))
    ops.native(call, "quantize_mx", (src,), (dst, dst_scale), dst=dst, src=src, dstScale=dst_scale)


def nc_matmul_mx(call: str, dst: View, stationary: View, moving: View, stationary_scale: View,
                 moving_scale: View, tile_position: Any, tile_size: Any, accumulate: Any) -> None:
    """``dst = dequant(stationary).T @ dequant(moving)`` over the 4 x K unpacked contraction values;
    accumulation as nc_matmul (a fresh PSUM tile plus an add)."""
    _on_chip(call, "dst", dst, ("psum",))
    named = (("stationary", stationary), ("moving", moving), ("stationary_scale", stationary_scale),
             ("moving_scale", moving_scale))
    for what, v in named:
        _on_chip(call, what, v)
        _dtype(call, what, v, tuple(mx.PACKED) if what in ("stationary", "moving") else mx.SCALE_DTYPES)
    _dtype(call, "dst", dst, ("float32", "bfloat16"))
    _refuse_problems(call, mx.matmul_problems(_flat(stationary), _flat(moving), _flat(stationary_scale),
                                              _flat(moving_scale), _flat(dst)))
    position = None if tile_position in (None, ()) else [int(x) for x in tile_position]
    size = None if tile_size in (None, ()) else [int(x) for x in tile_size]

    def emit(target: View) -> None:
        current().op("nc_matmul_mx", (stationary, moving, stationary_scale, moving_scale), (target,),
                     dst=target, stationary=stationary, moving=moving, stationaryScale=stationary_scale,
                     movingScale=moving_scale, tilePosition=position, tileSize=size)
    ops.nc_matmul(call, dst, stationary, moving, accumulate, emit=emit)
