"""The KLR JSON form is standard JSON: NaN (payload and sign kept) and infinities as tagged binary32 bits."""

from __future__ import annotations

import json
import math
import struct

import pytest

from tusk.ir import klr
from tusk.ir.errors import FormatError
from tusk.ir.klr import types as T


def _nan_with_payload(bits32: int) -> float:
    """The float64 NaN that widens the binary32 NaN ``bits32`` exactly (as the KLR reader builds it)."""
    wide = (bits32 >> 31) << 63 | 0x7FF << 52 | (bits32 & 0x7FFFFF) << 29
    return struct.unpack(">d", struct.pack(">Q", wide))[0]


def _bits(x: float) -> int:
    return struct.unpack(">Q", struct.pack(">d", x))[0]


@pytest.mark.parametrize("bits32", [0x7FC00001, 0xFFA00005, 0x7F800001])
def test_nan_payload_survives_standard_json(bits32):
    x = _nan_with_payload(bits32)
    text = json.dumps(klr.to_json(T.Immediate_float32(x)), allow_nan=False)
    assert f"float32:0x{bits32:08x}" in text
    back = klr.from_json(json.loads(text))
    assert math.isnan(back.f) and _bits(back.f) == _bits(x)


@pytest.mark.parametrize("x", [math.inf, -math.inf])
def test_infinities_are_standard_json(x):
    text = json.dumps(klr.to_json(T.Immediate_float32(x)), allow_nan=False)
    assert klr.from_json(json.loads(text)).f == x


def test_finite_floats_stay_numbers():
    assert klr.to_json(T.Immediate_float32(1.5))["f"] == 1.5


def test_malformed_float_bits_are_refused():
    data = klr.to_json(T.Immediate_float32(math.inf))
    data["f"] = "float32:0xZZ"
    with pytest.raises(FormatError, match="Float bits"):
        klr.from_json(data)
