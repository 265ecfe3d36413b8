"""Numpy building blocks the bench's references share (written for this bench from the NKI ISA documentation)."""

from __future__ import annotations

import numpy as np

FP32_MIN = float(np.finfo(np.float32).min)


def bf16(x: np.ndarray) -> np.ndarray:
    """Round to bfloat16 (nearest even) and back, as a bf16 intermediate does."""
    u = np.asarray(x, np.float32).view(np.uint32)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32)


def top8(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The eight largest values of each row, descending, and their first indices."""
    idx = np.argsort(-rows, axis=1, kind="stable")[:, :8]
    return np.take_along_axis(rows, idx, axis=1), idx


def match_replace8(data: np.ndarray, imm: float) -> tuple[np.ndarray, np.ndarray]:
    """nc_match_replace8 after max8 on the same data: the top eight of each partition replaced by imm."""
    flat = data.reshape(data.shape[0], -1).copy()
    _, idx = top8(flat)
    np.put_along_axis(flat, idx, imm, axis=1)
    return flat.reshape(data.shape), idx.astype(np.float32)


def scan(a: np.ndarray, b: np.ndarray, init) -> np.ndarray:
    """h[j] = a[j] * h[j-1] + b[j] along the last axis, h[-1] = init."""
    out = np.empty_like(a, dtype=np.float64)
    h = np.broadcast_to(np.asarray(init, np.float64), a.shape[:-1]).copy()
    for j in range(a.shape[-1]):
        h = a[..., j] * h + b[..., j]
        out[..., j] = h
    return out


def scattered_rows(n_rows: int, idx: np.ndarray, src: np.ndarray, base: float = np.nan) -> np.ndarray:
    """out[idx[i]] = src[i]; rows written by two different sources are left NaN (either may win)."""
    out = np.full((n_rows, src.shape[1]), base, np.float32)
    idx = np.asarray(idx).astype(np.int64).reshape(-1)
    seen: dict[int, int] = {}
    for i, r in enumerate(idx):
        seen[int(r)] = seen.get(int(r), 0) + 1
        out[r] = src[i]
    for r, c in seen.items():
        if c > 1:
            out[r] = np.nan
    return out


def sequence_bounds(seg: np.ndarray) -> np.ndarray:
    """nisa.sequence_bounds of one row of segment ids: [start; end) of each id's run, 0 is padding."""
    n = seg.shape[0]
    lo = np.zeros(n, np.float32)
    hi = np.zeros(n, np.float32)
    for i in range(n):
        if seg[i] == 0:
            lo[i] = n
        elif i > 0 and seg[i] == seg[i - 1]:
            lo[i] = lo[i - 1]
        else:
            lo[i] = i
    for i in range(n - 1, -1, -1):
        if seg[i] == 0:
            hi[i] = -1
        elif i < n - 1 and seg[i] == seg[i + 1]:
            hi[i] = hi[i + 1]
        else:
            hi[i] = i + 1
    return np.stack([lo, hi])


def pool2d(x: np.ndarray, p: int, how) -> np.ndarray:
    c, h, w = x.shape
    return how(x[:, : h // p * p, : w // p * p].reshape(c, h // p, p, w // p, p), axis=(2, 4))


def mamba(delta, u, A, B, C) -> np.ndarray:
    """The selective-scan of the Mamba docs example, in float64."""
    out = np.zeros(delta.shape, np.float64)
    for s in range(A.shape[1]):
        dA = np.exp(delta * A[None, :, s : s + 1])
        dBu = delta * u * B[:, s : s + 1, :]
        out += scan(dA, dBu, 0.0) * C[:, s : s + 1, :]
    return out



# MX: (mantissa bits, largest exponent of a normal value, smallest normal exponent) per element kind
# mantissa bits, largest and smallest normal exponent
MX_KINDS = {"float8_e4m3fn_x4": (3, 8, -6), "float8_e5m2_x4": (2, 15, -14), "float8_e4m3": (3, 7, -6),
            "float8e5": (2, 15, -14)}
FP8_INFINITE_FROM = {"float8_e4m3": 248.0, "float8e5": 61440.0}  # largest + half a step: the IEEE-like kinds


def fp8_round(x: np.ndarray, kind: str) -> np.ndarray:
    """Round to Neuron's float8_e4m3 (largest 240) / float8e5 (e5m2) by quanta, past the largest to infinity."""
    r = mx_round(np.asarray(x, np.float64), kind)
    return np.where(np.abs(x) >= FP8_INFINITE_FROM[kind], np.copysign(np.inf, x), r)


def fp8_e4m3(x: np.ndarray) -> np.ndarray:
    return fp8_round(x, "float8_e4m3")


def fp8_e4m3_value(code: np.ndarray) -> np.ndarray:
    """A float8_e4m3 code's value: exponent 15 is infinity (mantissa 0) or NaN, as in IEEE formats."""
    code = np.asarray(code).astype(np.int64)
    top = ((code >> 3) & 0xF) == 0xF
    special = np.where(code & 7, np.nan, np.where(code & 0x80, -np.inf, np.inf))
    return np.where(top, special, fp8_value(code, "float8_e4m3"))


def mx_round(v: np.ndarray, kind: str) -> np.ndarray:
    """Round to the nearest value of the fp8 kind (ties to even): a quantum of 2^(e - mantissa bits)."""
    man, _, emin = MX_KINDS[kind]
    mag = np.abs(v)
    e = np.maximum(np.floor(np.log2(np.where(mag > 0, mag, 1.0))), emin)
    q = np.exp2(e - man)
    return np.round(v / q) * q


def mx_quantized_rows(x: np.ndarray, kind: str) -> np.ndarray:
    """quantize_mx of a [P, 4F] tile, dequantized, as (P, F, 4): each group of 8 partitions x 4 neighbours
    shares the scale 2^(floor(log2 amax) - emax + 1)."""
    p, f4 = x.shape
    g = x.astype(np.float64).reshape(p // 8, 8, f4 // 4, 4)
    amax = np.abs(g).max(axis=(1, 3), keepdims=True)
    e = np.where(amax > 0, np.floor(np.log2(np.where(amax > 0, amax, 1.0))) - MX_KINDS[kind][1] + 1, -127)
    return (mx_round(g / np.exp2(e), kind) * np.exp2(e)).reshape(p, f4 // 4, 4)


def mx_strided(x: np.ndarray) -> np.ndarray:
    """A [4P, F] tile as copy_data_strided lays it out: [P, 4F], value t of element f from row t * P + p."""
    four_p, f = x.shape
    return x.reshape(4, four_p // 4, f).transpose(1, 2, 0).reshape(four_p // 4, 4 * f)


def fp8_value(code: np.ndarray, kind: str) -> np.ndarray:
    man, _, emin = MX_KINDS[kind]
    code = code.astype(np.int64)
    e, m = (code >> man) & ((1 << (7 - man)) - 1), code & ((1 << man) - 1)
    mag = np.where(e == 0, m / 2 ** man * 2.0 ** emin, (1 + m / 2 ** man) * np.exp2(e + emin - 1))
    return np.where(code & 0x80, -mag, mag)


def mx_packed(data: np.ndarray, scale: np.ndarray, kind: str) -> np.ndarray:
    """uint32 [P, F] words of four fp8 bytes (little-endian) and contiguous [P / 8, F] E8M0 scales -> (P, F, 4)."""
    codes = np.ascontiguousarray(data.astype(np.uint32)).view(np.uint8).reshape(*data.shape, 4)
    return fp8_value(codes, kind) * np.exp2(scale.astype(np.float64) - 127).repeat(8, axis=0)[:, :, None]


def mx_product(st: np.ndarray, mv: np.ndarray) -> np.ndarray:
    """nc_matmul_mx of two dequantized (K, F, 4) tiles, rounded to the bf16 result."""
    return bf16(np.einsum("kmt,knt->mn", st, mv).astype(np.float32))


def mx_matmul(st: np.ndarray, mv: np.ndarray, kind: str) -> np.ndarray:
    """The copy-strided MX kernels: both [4K, F] tiles strided, quantized and multiplied."""
    return mx_product(mx_quantized_rows(mx_strided(st), kind), mx_quantized_rows(mx_strided(mv), kind))
