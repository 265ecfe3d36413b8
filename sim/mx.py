"""What QuantizeMx and MatmultMx compute (docs/semantics.md, "MX").

A packed ``_x4`` element holds four values of one partition's free axis: byte ``t`` (fp8, little-endian,
lowest address first) or nibble ``t`` (fp4, low nibble first) is value ``4 j + t`` of packed element ``j``.
A scaling group is 8 partitions x one packed element; its scale is an E8M0 byte ``s`` (``2^(s - 127)``)
at scale-tile partition ``tusk.ir.mx.scale_row(p)`` and the packed element's column.
"""

from __future__ import annotations

import numpy as np

from tusk.ir import mx
from tusk.ir.enums import DTYPE_NAMES
from tusk.ir.errors import InputError
from tusk.sim.machine import Frame
from tusk.sim.minifloat import FORMATS

# largest normal exponent of each element kind (e4m3fn: 448 = 1.75 * 2^8, e5m2: 57344 = 1.75 * 2^15)
_EMAX = {"float8_e4m3fn": 8, "float8_e5m2": 15, "float4_e2m1fn": 2}


TABLES = {kind: FORMATS[kind].table for kind in ("float8_e4m3fn", "float8_e5m2", "float4_e2m1fn")}


def encode(x: np.ndarray, kind: str) -> np.ndarray:
    """Round to the nearest value of ``kind`` (ties to the even code), saturating at the largest."""
    return FORMATS[kind].encode(x, saturate=True)


def unpack(raw: np.ndarray, kind: str) -> np.ndarray:
    """(P, F) packed containers -> (P, F, 4) float32 values."""
    raw = np.ascontiguousarray(raw)
    if kind == "float4_e2m1fn":
        b = raw.astype(np.uint16)[..., None]
        return TABLES[kind][(b >> (4 * np.arange(4, dtype=np.uint16))) & 0xF]
    return TABLES[kind][raw.astype("<u4").view(np.uint8).reshape(*raw.shape, 4)]


def pack8(codes: np.ndarray) -> np.ndarray:
    """(P, F, 4) fp8 codes -> (P, F) uint32 containers."""
    return np.ascontiguousarray(codes.astype(np.uint8)).view("<u4").reshape(codes.shape[:-1]).astype(np.uint32)


def scales_of(raw: np.ndarray, partitions: int) -> np.ndarray:
    """(S, F) scale bytes -> (partitions, F) float64 factors, each data partition's group's."""
    rows = [mx.scale_row(p) for p in range(partitions)]
    if raw.shape[0] <= rows[-1]:
        raise InputError(f"MX scales of {raw.shape[0]} partitions for {partitions} data partitions")
    return np.exp2(raw[rows].astype(np.float64) - 127.0)


def _operands(fr: Frame, i: int, n_in: int, n_out: int) -> tuple[list[int], list[int]]:
    ins, _, outs = fr.split(i)
    if len(ins) != n_in or len(outs) != n_out:
        raise InputError(f"{fr.opname(i)} with {len(ins)} "
                        f"inputs and {len(outs)} outputs; {n_in} and {n_out} are needed")
    return ins, outs


def _kind(fr: Frame, j: int) -> str:
    name = DTYPE_NAMES[fr.dtype[j]]
    if name not in mx.PACKED:
        raise InputError(f"an MX operand of dtype {name}; a packed _x4 dtype is needed")
    return mx.PACKED[name]


def _rows(a: np.ndarray) -> np.ndarray:
    return a.reshape(a.shape[0] if a.ndim else 1, -1)


def quantize(x: np.ndarray, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """(P, 4F) values -> ((P, F, 4) codes, (P // 8, F) scale bytes): the group's largest magnitude's
    exponent less the kind's largest, plus one (twice the OCP scale, room to round without saturating)."""
    p, f = x.shape[0], x.shape[1] // mx.PACK
    g = x.astype(np.float64).reshape(p // mx.GROUP_PARTITIONS, mx.GROUP_PARTITIONS, f, mx.PACK)
    amax = np.abs(g).max(axis=(1, 3))
    with np.errstate(divide="ignore"):
        e = np.where(amax > 0, np.floor(np.log2(np.where(amax > 0, amax, 1.0))) - _EMAX[kind] + 1, -127.0)
    e = np.clip(e, -127.0, 127.0)
    scaled = g / np.exp2(e)[:, None, :, None]
    return encode(scaled, kind).reshape(p, f, mx.PACK), (e + 127).astype(np.uint8)


def h_quantize_mx(fr: Frame, i: int) -> None:
    ins, outs = _operands(fr, i, 1, 2)
    x = _rows(fr.value(ins[0]))
    codes, scale = quantize(x, _kind(fr, outs[0]))
    fr.store_raw(outs[0], pack8(codes))
    acc = fr.access(outs[1])
    old = _rows(acc.read()).copy()  # rows outside the groups' keep their bytes
    rows = [mx.scale_row(p) for p in range(0, x.shape[0], mx.GROUP_PARTITIONS)]
    if old.shape[0] <= rows[-1] or old.shape[1] != scale.shape[1]:
        raise InputError(f"QuantizeMx scales {list(old.shape)} for {list(scale.shape)} groups")
    old[rows] = scale
    acc.write(old.reshape(-1))
    from tusk.sim.ops_isa import mark_partitions  # ops_isa registers this module's handlers
    mark_partitions(acc, np.asarray(rows))


def _scale_bytes(fr: Frame, j: int, partitions: int) -> np.ndarray:
    """The scale tile's bytes; strict mode checks only the partitions the groups read."""
    from tusk.sim.ops_isa import partitions_written
    acc = fr.access(j)
    rows = np.unique([mx.scale_row(p) for p in range(partitions)])
    if fr.m.strict and rows[-1] < acc.count and not partitions_written(acc, rows):
        raise InputError(f"strict mode: MX scales read from uninitialised memory of {acc.loc.name}")
    return _rows(acc.read())


def dequantized(fr: Frame, data: int, scale: int) -> np.ndarray:
    """(K, F, 4) float64 values of a packed tile times its group scales."""
    raw = _rows(fr.read_raw(data))
    vals = unpack(raw, _kind(fr, data)).astype(np.float64)
    return vals * scales_of(_scale_bytes(fr, scale, raw.shape[0]), raw.shape[0])[:, :, None]


def h_matmul_mx(fr: Frame, i: int) -> None:
    """``dst[m, n] = sum_{k, t} S[k, m, t] * V[k, n, t]`` (dequantized), summed in float64, rounded once."""
    ins, outs = _operands(fr, i, 4, 1)
    st, mv = dequantized(fr, ins[0], ins[2]), dequantized(fr, ins[1], ins[3])
    if st.shape[0] != mv.shape[0]:
        raise InputError(f"MatmultMx contracts {st.shape[0]} stationary partitions with {mv.shape[0]} moving ones")
    prod = np.einsum("kmt,knt->mn", st, mv).astype(np.float32)
    attrs = fr.attrs(i)
    if fr.maybe_affine(attrs.get("accumulation_flag", 0)):
        prod = prod + _rows(fr.value(outs[0])).astype(np.float32).reshape(prod.shape)
    fr.store(outs[0], prod)
