"""The small float formats numpy lacks (fp8, fp4), as exact code <-> float32 tables (docs/semantics.md).

Each format is 1 sign bit, ``e`` exponent bits (bias ``2^(e-1) - 1``, subnormals at exponent 0) and ``m``
mantissa bits; what the top exponent means is the format's style:

* ``ieee`` (float8e3 = e3m4, float8e4 = e4m3, float8e5 = e5m2, the Neuron FP8 types): the top exponent holds
  infinity (mantissa 0) and NaNs, so e4m3's largest value is 240;
* ``fn`` (float8_e4m3fn, OCP): no infinity, only ``S.1111.111`` is NaN, so the largest value is 448;
* ``fnx`` (float4_e2m1fn): every code is a number.

Writes round to the nearest value, ties to the even code.  Past the largest finite value by half a step
or more, a value becomes infinity (``ieee``) or NaN (``fn``): the format's own overflow, as an IEEE cast
does; MX quantization saturates instead (``saturate=True``), as its scale leaves room for.  NaN becomes
the format's quiet NaN; zero keeps its sign.

Tables are built from the bit layout, so no package with fp8 dtypes is needed.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np


@dataclass(frozen=True)
class Format:
    name: str
    exp_bits: int
    man_bits: int
    style: str  # "ieee" | "fn" | "fnx"

    @property
    def codes(self) -> int:
        return 1 << (1 + self.exp_bits + self.man_bits)

    @cached_property
    def table(self) -> np.ndarray:
        """The float32 value of every code."""
        e_bits, m_bits = self.exp_bits, self.man_bits
        codes = np.arange(self.codes)
        sign = np.where(codes & (self.codes >> 1), -1.0, 1.0)
        e, m = (codes >> m_bits) & ((1 << e_bits) - 1), codes & ((1 << m_bits) - 1)
        bias = (1 << (e_bits - 1)) - 1
        mag = np.where(e == 0, m / (1 << m_bits) * 2.0 ** (1 - bias), (1 + m / (1 << m_bits)) * 2.0 ** (e - bias))
        top = e == (1 << e_bits) - 1
        if self.style == "ieee":
            mag = np.where(top, np.where(m == 0, np.inf, np.nan), mag)
        elif self.style == "fn":
            mag = np.where(top & (m == (1 << m_bits) - 1), np.nan, mag)
        return (sign * mag).astype(np.float32)

    @cached_property
    def finite(self) -> tuple[np.ndarray, np.ndarray]:
        """The non-negative finite codes in increasing value (code order is value order) and their values."""
        half = self.codes >> 1
        pos = np.flatnonzero(np.isfinite(self.table[:half]))
        return pos, self.table[pos].astype(np.float64)

    @property
    def nan_code(self) -> int:
        """The quiet NaN: top exponent with the top mantissa bit (ieee), all ones (fn)."""
        top = ((1 << self.exp_bits) - 1) << self.man_bits
        return top | (1 << (self.man_bits - 1)) if self.style == "ieee" else top | ((1 << self.man_bits) - 1)

    @property
    def max(self) -> float:
        return float(self.finite[1][-1])

    def decode(self, codes: np.ndarray) -> np.ndarray:
        return self.table[np.asarray(codes).astype(np.intp) & (self.codes - 1)]

    def encode(self, x: np.ndarray, *, saturate: bool = False) -> np.ndarray:
        """float values -> uint8 codes (see the module docstring for rounding and overflow)."""
        pos, vals = self.finite
        x = np.asarray(x, dtype=np.float64)
        mag = np.abs(x)
        hi = np.clip(np.searchsorted(vals, mag), 1, len(vals) - 1)
        lo = hi - 1
        d_lo, d_hi = mag - vals[lo], vals[hi] - mag
        pick_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (pos[hi] % 2 == 0))
        code = np.where(pick_hi, pos[hi], pos[lo])
        # beyond the largest value: the tie at half a step goes to the even code, which is the overflow
        # code (inf / NaN) exactly when the largest code is odd
        step = vals[-1] - vals[-2]
        limit = vals[-1] + step / 2
        over = (mag > limit) | ((mag == limit) & (pos[-1] % 2 == 1))
        over_code = pos[-1] if saturate or self.style == "fnx" else (
            pos[-1] + 1 if self.style == "ieee" else self.nan_code)
        code = np.where(over, over_code, code)
        code = np.where(np.signbit(x), code | (self.codes >> 1), code)
        nan = self.nan_code if self.style != "fnx" else 0
        return np.where(np.isnan(x), nan, code).astype(np.uint8)


FORMATS: dict[str, Format] = {f.name: f for f in (
    Format("float8e3", 3, 4, "ieee"), Format("float8e4", 4, 3, "ieee"), Format("float8e5", 5, 2, "ieee"),
    Format("float8_e4m3fn", 4, 3, "fn"), Format("float4_e2m1fn", 2, 1, "fnx"),
)}
FORMATS["float8_e5m2"] = FORMATS["float8e5"]  # the MX element kinds' spelling
