"""numpy references for the kernels of examples/nki (keyed by the unit names of tusk.toml).

``REFERENCES[unit](*inputs)`` takes the input arrays in the kernel's
argument order and returns its output (a tuple when the kernel returns
several), in float32; a bfloat16 output is returned as float32 holding the
bfloat16 value.  References compute in float64 and round once at the end
unless the kernel's own rounding is part of what it computes.

``TOLERANCE[unit] = (rtol, atol)`` for ``numpy.testing.assert_allclose``;
``RANGES[unit]`` gives the (low, high) of the uniform random values each
input should hold (positive where the kernel takes a log or a square root).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

F32 = np.float32


def round_bf16(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to the nearest bfloat16 (ties to even), still as float32."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return rounded.astype(np.uint32).view(np.float32)


def round_fp8_e4m3(x: np.ndarray) -> np.ndarray:
    """float values rounded to Neuron's float8_e4m3 (4 exponent bits, bias 7, 3 mantissa bits, largest 240;
    subnormals below 2^-6), ties to even, as the interpreter stores an fp8 input given as floats."""
    x = np.asarray(x, dtype=np.float64)
    exp = np.maximum(np.floor(np.log2(np.where(x == 0, 1.0, np.abs(x)))), -6.0)
    quantum = np.exp2(exp - 3)
    out = np.round(x / quantum) * quantum  # numpy rounds halves to even
    return np.where(np.abs(x) >= 248.0, np.copysign(np.inf, x), out)


def _f64(*arrays: np.ndarray) -> list[np.ndarray]:
    return [np.asarray(a, dtype=np.float64) for a in arrays]


def tensor_add(a, b):
    return (np.asarray(a, F32) + np.asarray(b, F32)).astype(F32)


def tensor_exp(x):
    return np.exp(np.asarray(x, np.float64)).astype(F32)


def transpose2d(x, shape2d=(32, 16)):
    p = x.shape[0]
    return np.asarray(x, F32).reshape(p, *shape2d).transpose(0, 2, 1).reshape(p, -1)


def matmul(lhsT, rhs):
    a, b = _f64(lhsT, rhs)
    return (a.T @ b).astype(F32)


def matmul_bf16(lhsT, rhs):
    """The bfloat16 kernel: float32 PSUM result, rounded to bfloat16 by the copy out of PSUM."""
    return round_bf16(matmul(round_bf16(lhsT), round_bf16(rhs)))


def matmul_fp8_double_row(lhsT, rhs, row_scale):
    """fp8 inputs (the kernel's float8_e4m3 tensors), exact products summed in float32 PSUM, times the row scale."""
    a, b = round_fp8_e4m3(lhsT), round_fp8_e4m3(rhs)
    return ((a.T @ b).astype(F32).astype(np.float64) * np.asarray(row_scale, np.float64)).astype(F32)


def rmsnorm(a, g):
    a, g = _f64(a, g)
    return (a / np.sqrt(np.mean(a * a, axis=1, keepdims=True)) * g[None, :]).astype(F32)


def layernorm(x, gamma, beta, epsilon=1e-5):
    x, gamma, beta = _f64(x, gamma, beta)
    mean = x.mean(axis=1, keepdims=True)
    var = (x * x).mean(axis=1, keepdims=True) - mean * mean  # the kernel's formula
    return ((x - mean) / np.sqrt(var + epsilon) * gamma[None, :] + beta[None, :]).astype(F32)


def avgpool(x, pool=2):
    (x,) = _f64(x)
    c, h, w = x.shape
    return x.reshape(c, h // pool, pool, w // pool, pool).mean(axis=(2, 4)).astype(F32)


def softmax(x):
    (x,) = _f64(x)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).astype(F32)


def attention(q, k, v, scale=0.125):
    q, k, v = _f64(q, k, v)
    s = (q * scale) @ k.T
    p = np.exp(s - s.max(axis=1, keepdims=True))
    return (p @ v / p.sum(axis=1, keepdims=True)).astype(F32)


def mamba(delta, u, a, b, c):
    """y[b, c, t] = sum_n C[b, n, t] h[b, c, n, t], h[t] = exp(delta[t] A[c, n]) h[t-1] + delta[t] u[t] B[b, n, t]."""
    delta, u, a, b, c = _f64(delta, u, a, b, c)
    d_a = np.exp(delta[:, :, None, :] * a[None, :, :, None])          # [batch, channels, state, time]
    d_bu = (delta * u)[:, :, None, :] * b[:, None, :, :]
    h = np.zeros(d_a.shape[:3])
    y = np.zeros(delta.shape)
    for t in range(delta.shape[2]):
        h = d_a[..., t] * h + d_bu[..., t]
        y[:, :, t] = np.einsum("bcn,bn->bc", h, c[:, :, t])
    return y.astype(F32)


_erf = np.vectorize(math.erf, otypes=[np.float64])


def activations(x, y):
    x, y = _f64(x, y)
    gelu = 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))
    sigmoid = 1.0 / (1.0 + np.exp(-x))
    out_a = gelu + sigmoid * np.tanh(x) - np.maximum(x, 0.0) + np.clip(x, -1.0, 1.0) - x * x
    out_b = np.log(y) + np.sqrt(y) / y - (1.0 - y) + np.exp(-y)
    return out_a.astype(F32), out_b.astype(F32)


def iota_fill(x):
    """In float32, in the kernel's order: each step rounds as the kernel's does."""
    ramp = np.arange(x.size, dtype=F32).reshape(x.shape)
    acc = np.asarray(x, F32) * F32(2.0) + ramp * F32(1.0 / 1024)
    for _ in range(3):
        acc = acc + F32(0.5)
    return acc


def flash_attention_fwd(q, k, v, scale=0.125):
    """Causal attention: row i attends to keys 0..i (the kernel's online softmax gives the same numbers)."""
    q, k, v = _f64(q, k, v)
    s = (q * scale) @ k.T
    s = np.where(np.tril(np.ones(s.shape, dtype=bool)), s, -np.inf)
    p = np.exp(s - s.max(axis=1, keepdims=True))
    return (p @ v / p.sum(axis=1, keepdims=True)).astype(F32)


def rmsnorm_linear(x, gamma, w, eps=1e-6):
    x, gamma, w = _f64(x, gamma, w)
    normed = x / np.sqrt(np.mean(x * x, axis=1, keepdims=True) + eps) * gamma[None, :]
    return (normed @ w).astype(F32)


def rotary_embedding(x, cos, sin):
    """Rotate halves, in float32 in the kernel's order (two products, then one add or subtract)."""
    x, cos, sin = (np.asarray(a, F32) for a in (x, cos, sin))
    half = x.shape[1] // 2
    x1, x2 = x[:, :half], x[:, half:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=1)


def resize_nearest(x, scale_h=2, scale_w=2):
    """out[c, y, x] = in[c, y // scale_h, x // scale_w] (torch's nearest mode, integer factors)."""
    return np.repeat(np.repeat(np.asarray(x, F32), scale_h, axis=1), scale_w, axis=2)


def select_and_scatter(x, grad, pool=2):
    """max_pool2d backward: each window's gradient at its first (row-major) maximum, 0 elsewhere."""
    x, grad = np.asarray(x, F32), np.asarray(grad, F32)
    c, h, w = x.shape
    windows = x.reshape(c, h // pool, pool, w // pool, pool).transpose(0, 1, 3, 2, 4).reshape(c, h // pool, w // pool, -1)
    first = np.argmax(windows, axis=3)  # numpy's argmax takes the first maximum, as PyTorch's does
    dx = np.zeros_like(windows)
    np.put_along_axis(dx, first[..., None], grad[..., None], axis=3)
    return dx.reshape(c, h // pool, w // pool, pool, pool).transpose(0, 1, 3, 2, 4).reshape(c, h, w)


def adaptive_avgpool(x, output_size=(5, 7)):
    """torch.nn.AdaptiveAvgPool2d: output (i, j) is the mean of rows floor(i H / OH) .. ceil((i + 1) H / OH)
    (exclusive) and the columns likewise."""
    (x,) = _f64(x)
    c, h, w = x.shape
    oh, ow = output_size
    out = np.empty((c, oh, ow))
    for i in range(oh):
        h0, h1 = (i * h) // oh, -(-((i + 1) * h) // oh)
        for j in range(ow):
            w0, w1 = (j * w) // ow, -(-((j + 1) * w) // ow)
            out[:, i, j] = x[:, h0:h1, w0:w1].mean(axis=(1, 2))
    return out.astype(F32)


def attention_bwd(q, k, v, d_out, scale=0.125):
    """(dQ, dK, dV) of O = softmax(scale q k^T) v by the chain rule, in float64."""
    q, k, v, d_out = _f64(q, k, v, d_out)
    s = scale * q @ k.T
    p = np.exp(s - s.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    d_p = d_out @ v.T
    d_s = p * (d_p - (d_p * p).sum(axis=1, keepdims=True))  # the softmax Jacobian applied row by row
    return (scale * d_s @ k).astype(F32), (scale * d_s.T @ q).astype(F32), (p.T @ d_out).astype(F32)


def row_normalize(x):
    """y = x / row sums, m = row maxima (the kernel splits the columns between two cores)."""
    (x64,) = _f64(x)
    return (x64 / x64.sum(axis=1, keepdims=True)).astype(F32), np.asarray(x, F32).max(axis=1, keepdims=True)


def prelu_rows(x, slope):
    """y = x where x >= 0, else slope (per row) * x, in float32; each row's sum of y squared."""
    x32, s32 = np.asarray(x, F32), np.asarray(slope, F32)
    y = np.where(x32 >= 0, x32, s32 * x32).astype(F32)
    return y, (y.astype(np.float64) ** 2).sum(axis=1, keepdims=True).astype(F32)


REFERENCES: dict[str, Callable[..., np.ndarray | tuple]] = {
    "tensor_add": tensor_add,
    "tensor_add_spmd": tensor_add,
    "tensor_exp": tensor_exp,
    "transpose2d": transpose2d,
    "matmul_basic": matmul_bf16,
    "matmul_tiled": matmul,
    "matmul_hoisted": matmul,
    "matmul_blocked": matmul,
    "matmul_optimized": matmul,
    "rmsnorm": rmsnorm,
    "layernorm": layernorm,
    "avgpool": avgpool,
    "softmax": softmax,
    "attention": attention,
    "mamba": mamba,
    "activations": activations,
    "iota_fill": iota_fill,
    "flash_attention_fwd": flash_attention_fwd,
    "rmsnorm_linear": rmsnorm_linear,
    "rotary_embedding": rotary_embedding,
    "matmul_accumulate_v2": matmul,
    "resize_nearest": resize_nearest,
    "select_and_scatter": select_and_scatter,
    "adaptive_avgpool": adaptive_avgpool,
    "attention_bwd": attention_bwd,
    "matmul_fp8_double_row": matmul_fp8_double_row,
    "row_normalize_lnc2": row_normalize,
    "prelu_rows": prelu_rows,
}

# (rtol, atol) per unit, by the class of what it computes
_EXACT = (0.0, 0.0)       # one float32 add, or data movement only: bit-identical
_ELEMENTWISE = (2e-6, 0.0)  # one transcendental / division per element: the result may differ by an ulp
_REDUCE = (1e-5, 1e-6)    # float32 sums over a row: summation order differs from numpy's (~N eps)
_MATMUL = (1e-5, 1e-4)    # the interpreter sums a matmul in float64 and rounds once, PSUM adds round per
#                           K tile; outputs reach ~100, so atol is ~1e-6 of the largest
_BF16 = (1e-2, 1e-2)      # one rounding to bfloat16 (8 bits of mantissa): one ulp is 2^-8 relative

TOLERANCE: dict[str, tuple[float, float]] = {
    "tensor_add": _EXACT,
    "tensor_add_spmd": _EXACT,
    "transpose2d": _EXACT,
    "tensor_exp": _ELEMENTWISE,
    "iota_fill": _EXACT,  # the reference repeats the kernel's float32 steps in order
    "matmul_basic": _BF16,
    "matmul_tiled": _MATMUL,
    "matmul_hoisted": _MATMUL,
    "matmul_blocked": _MATMUL,
    "matmul_optimized": _MATMUL,
    "rmsnorm": _REDUCE,
    "layernorm": (1e-5, 1e-5),  # var = E[x^2] - E[x]^2 loses a few bits to cancellation
    "avgpool": _REDUCE,
    "softmax": _REDUCE,
    "attention": (2e-5, 2e-6),  # exp, a row sum and two float32 matmuls
    "mamba": (2e-5, 1e-5),      # a 64-step float32 recurrence: rounding accumulates along time
    "activations": (1e-5, 1e-6),  # gelu's erf is approximated to 1.5e-7 absolute
    "flash_attention_fwd": (2e-5, 2e-6),  # as attention, plus the float32 rescaling by exp(m_old - m_new)
    "rmsnorm_linear": _MATMUL,  # a float32 row sum of squares, rsqrt, then one 128-deep float32 matmul
    "rotary_embedding": _EXACT,  # the reference repeats the kernel's float32 steps in order
    "matmul_accumulate_v2": _MATMUL,
    "resize_nearest": _EXACT,
    "select_and_scatter": _EXACT,  # comparisons and copies only
    "adaptive_avgpool": _REDUCE,   # a mean of row means: float32 sums in another order than numpy's
    "matmul_fp8_double_row": _MATMUL,  # fp8 products are exact in float32; sums over 512 rows
    "row_normalize_lnc2": _REDUCE,  # float32 half-row sums added across the cores, then a reciprocal
    "prelu_rows": _REDUCE,  # y is exact; the float32 sum of squares over 200 columns is in another order
    "attention_bwd": (1e-5, 1e-6),  # float32 matmuls over 256 keys / queries: measured max abs error 1.8e-7 on
    #                                 outputs up to 1.4 (a few ulps), the reference checked by finite differences
}

_DEFAULT = (-2.0, 2.0)
RANGES: dict[str, tuple[tuple[float, float], ...]] = {
    "tensor_exp": ((-4.0, 4.0),),
    "softmax": ((-8.0, 8.0),),
    # delta > 0 (a softplus output), A < 0 (a decay), so exp(delta A) < 1
    "mamba": ((0.01, 0.2), (-1.0, 1.0), (-2.0, -0.1), (-1.0, 1.0), (-1.0, 1.0)),
    "activations": ((-3.0, 3.0), (0.25, 4.0)),
    "matmul_fp8_double_row": ((-4.0, 4.0), (-4.0, 4.0), (0.01, 0.1)),
    "row_normalize_lnc2": ((0.5, 2.0),),  # positive: the row sums stay away from zero
    "prelu_rows": (_DEFAULT, (0.1, 0.5)),  # slopes of a leaky ReLU
}


def input_ranges(unit: str, count: int) -> tuple[tuple[float, float], ...]:
    """The value range of each of ``unit``'s ``count`` inputs."""
    return RANGES.get(unit, (_DEFAULT,) * count)
