"""Accesses nested to any depth (spec §2.8), and floats kept bit for bit.

KLR's format does not bound how deep Access values nest inside a
BirAccessPattern's ``scalarOffset.acc`` / ``vectorOffset``, and KLR's own
C++ reader and writer follow chains of 33, 65, 100, 1000 and 5000 levels.
Tusk's reader and writer must agree with it and with each other at every
depth, without leaning on Python recursion: a depth of 100,000 gives the
right value, and damaged deep input a FormatError that names a byte offset.

The expected bytes are assembled here by hand from the spec's encoding of
each level, independently of the writer.
"""

from __future__ import annotations

import dataclasses
import math
import random
import re
import struct
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

from tusk.ir.errors import FormatError
from tusk.ir.klr import from_json, listing, pretty, read_klr, read_value, to_json, write_klr, write_value
from tusk.ir.klr import types as T
from tusk.ir.klr.listing import access as access_text

DATA = Path(__file__).parent / "data" / "klr"
OFFSET = re.compile(r"byte 0x([0-9a-f]+)")

TENSOR = read_klr((DATA / "01_dma_copy.klr").read_bytes()).contents.kernel.inputs[0]
TENSOR_BYTES = write_value("TensorName", TENSOR)

# Heads from the spec (§2.3, §3.4): Access.simple / Access.birPattern,
# BirAccessPattern (7 fields), ScalarOffset.acc, Option none / some.
ACCESS_SIMPLE = bytes.fromhex("d9 7d 00 81")
ACCESS_BIR = bytes.fromhex("d9 7d 03 81")
BAP = bytes.fromhex("d9 7c 00 87")
SCALAR_ACC = bytes.fromhex("d9 7b 01 81")
NONE = bytes.fromhex("d9 ff 00 80")
SOME = bytes.fromhex("d9 ff 01 81")

VIAS = ("vector", "scalar", "mixed")


def _via(via: str, level: int) -> str:
    return via if via != "mixed" else ("vector" if level % 2 else "scalar")


def chain_bytes(depth: int, via: str = "vector") -> bytes:
    """The encoding of an Access nested `depth` levels deep, assembled by hand.

    Level i (outermost = depth - 1) is Access.birPattern of a BAP with offset
    i % 24, no pattern, the next level in its vectorOffset or scalarOffset.acc,
    indirectDim 0 and no dtype override; the innermost value is Access.simple.
    """
    before, after = [], []
    for i in range(depth):
        head = ACCESS_BIR + BAP + TENSOR_BYTES + bytes((i % 24,)) + b"\x80"
        if _via(via, i) == "vector":
            before.append(head + NONE + SOME)
            after.append(b"\x00" + NONE)
        else:
            before.append(head + SOME + SCALAR_ACC)
            after.append(NONE + b"\x00" + NONE)
    return b"".join(reversed(before)) + ACCESS_SIMPLE + TENSOR_BYTES + b"".join(after)


def chain_value(depth: int, via: str = "vector"):
    """The same Access as a value."""
    access = T.Access.simple(tensor=TENSOR)
    for i in range(depth):
        vector = _via(via, i) == "vector"
        access = T.Access.birPattern(access=T.BirAccessPattern(
            tensor=TENSOR, offset=i % 24, pattern=(),
            scalarOffset=None if vector else T.ScalarOffset.acc(a=access),
            vectorOffset=access if vector else None, indirectDim=0, dtypeOverride=None))
    return access


def check_chain(access, depth: int, via: str = "vector") -> None:
    """`access` is chain_value(depth, via), checked level by level without recursion
    (``==`` on dataclasses recurses, so it is not used on deep values)."""
    for i in reversed(range(depth)):
        assert type(access) is T.Access_birPattern, i
        b = access.access
        assert (b.tensor, b.offset, b.pattern, b.indirectDim, b.dtypeOverride) == (TENSOR, i % 24, (), 0, None)
        if _via(via, i) == "vector":
            assert b.scalarOffset is None
            access = b.vectorOffset
        else:
            assert b.vectorOffset is None and type(b.scalarOffset) is T.ScalarOffset_acc
            access = b.scalarOffset.a
    assert access == T.Access.simple(tensor=TENSOR)


def frame_depth() -> int:
    f, n = sys._getframe(), 0
    while f is not None:
        f, n = f.f_back, n + 1
    return n


@contextmanager
def stack_headroom(frames: int):
    """Lower the recursion limit to `frames` above the current depth: code run
    inside must not recurse with the data."""
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(frame_depth() + frames)
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


def _assert_located(err: FormatError, data_len: int) -> None:
    m = OFFSET.search(err.message)
    assert m, err.message
    assert int(m.group(1), 16) <= data_len and err.offset is not None and err.offset <= data_len, err.message


# -- depth ------------------------------------------------------------------------


@pytest.mark.parametrize("via", VIAS)
@pytest.mark.parametrize("depth", [0, 1, 32, 33, 34, 64, 65, 100, 493, 1000, 5000])
def test_reader_and_writer_follow_chains_as_deep_as_klr(depth, via):
    data = chain_bytes(depth, via)
    value, end = read_value("Access", data)
    assert end == len(data)
    check_chain(value, depth, via)
    assert write_value("Access", value) == data
    assert write_value("Access", chain_value(depth, via)) == data


def test_depth_100000_without_python_recursion():
    depth = 100_000
    data = chain_bytes(depth, "mixed")
    value = chain_value(depth, "mixed")
    with stack_headroom(100):
        got, end = read_value("Access", data)
        assert end == len(data)
        assert write_value("Access", value) == data
        assert write_value("Access", got) == data
        for cut in (len(data) // 2, len(data) - 1):  # damaged deep input: a clean error
            with pytest.raises(FormatError) as info:
                read_value("Access", data[:cut])
            _assert_located(info.value, cut)
            assert "unexpected end of data" in info.value.message
    check_chain(got, depth, "mixed")


def deep_kernel_file(depth: int, via: str = "vector") -> bytes:
    """Fixture 05 with the gather index replaced by a `depth`-deep chain."""
    f = read_klr((DATA / "05_vector_offset_gather.klr").read_bytes())
    k = f.contents.kernel
    block = k.bodies[0][0]
    stmt = block.body[1]
    src = stmt.op.op.src
    bap = dataclasses.replace(src.access.access, vectorOffset=chain_value(depth, via))
    src = T.TensorRef.abstract(access=T.Access.birPattern(access=bap))
    stmt = dataclasses.replace(stmt, op=T.Operator.ncDmaCopy(op=dataclasses.replace(stmt.op.op, src=src)))
    block = dataclasses.replace(block, body=(block.body[0], stmt, *block.body[2:]))
    k = dataclasses.replace(k, bodies=((block, *k.bodies[0][1:]), *k.bodies[1:]))
    return write_klr(dataclasses.replace(f, contents=T.Contents.lnc(kernel=k)))


def test_whole_files_with_deep_operands_round_trip_and_list():
    data = deep_kernel_file(5000, "mixed")
    with stack_headroom(150):
        f = read_klr(data)
        assert write_klr(f) == data
        text = listing(f)
        assert text.count("+v:(") == 2501 and text.count("+s:(") == 2500
        assert pretty(f).count("AccessBirPatternWrapper") == 5000 + 6
        assert write_klr(from_json(to_json(f))) == data
    index = f.contents.kernel.bodies[0][0].body[1].op.op.src.access.access.vectorOffset
    check_chain(index, 5000, "mixed")


def test_deep_text_forms_take_linear_time():
    # Each level used to copy the text of everything inside it.
    value = chain_value(20_000, "vector")
    text = access_text(value)
    assert len(text) < 60 * 20_000 and text.count("+v:(") == 20_000


def test_json_form_errors_deep_inside_name_a_shortened_path():
    data = to_json(chain_value(3000))
    node = data
    for _ in range(2999):
        node = node["access"]["vectorOffset"]
    node["access"]["offset"] = -5
    with pytest.raises(FormatError) as info:
        from_json(data)
    assert "expecting Nat, got -5" in info.value.message and len(str(info.value)) < 1000
    assert "(5977 steps)" in str(info.value) and str(info.value).endswith("got -5")


def test_writer_refuses_a_value_that_contains_itself():
    outer = chain_value(40)
    inner = outer
    for _ in range(39):
        inner = inner.access.vectorOffset
    object.__setattr__(inner.access, "vectorOffset", outer)  # only possible by bypassing the frozen class
    with pytest.raises(FormatError, match="contains itself"):
        write_value("Access", outer)


def test_writer_errors_inside_deep_values_name_the_field():
    value = chain_value(200)
    inner = value
    for _ in range(150):
        inner = inner.access.vectorOffset
    object.__setattr__(inner.access, "offset", -1)
    with pytest.raises(FormatError, match="BirAccessPattern.offset"):
        write_value("Access", value)


# -- floats ---------------------------------------------------------------------------


def _float_bytes(bits: int) -> bytes:
    return b"\xfa" + bits.to_bytes(4, "big")


def _nan_patterns() -> list[int]:
    """Signalling and quiet NaNs of both signs: every single payload bit, the
    extremes, and a seeded sample."""
    rng = random.Random("nan-payloads")
    payloads = {1, 0x3FFFFF, 0x400000, 0x400001, 0x7FFFFF} | {1 << k for k in range(23)}
    payloads |= {rng.randrange(1, 1 << 23) for _ in range(300)}
    return sorted(sign | 0x7F800000 | m for m in payloads for sign in (0, 0x80000000))


def _widened(bits32: int) -> int:
    """The float64 bits of the exact widening of binary32 NaN `bits32`."""
    return (bits32 >> 31) << 63 | 0x7FF << 52 | (bits32 & 0x7FFFFF) << 29


def test_signalling_nan_payload_survives_a_rewrite():
    data = bytes.fromhex("d9 83 03 81 fa 7f 80 00 01")  # Immediate.float32, signalling NaN
    value, _ = read_value("Immediate", data)
    assert math.isnan(value.f)
    assert write_value("Immediate", value) == data


def test_every_kind_of_nan_keeps_its_bits_as_float32_and_float64():
    for bits in _nan_patterns():
        data = bytes.fromhex("d9 83 03 81") + _float_bytes(bits)
        value, _ = read_value("Immediate", data)
        # float64: the value read is the exact widening (payload in the top bits)
        assert struct.unpack(">Q", struct.pack(">d", value.f))[0] == _widened(bits), hex(bits)
        # float32: written back byte for byte
        assert write_value("Immediate", value) == data, hex(bits)


def test_float64_nans_are_written_exactly_or_refused():
    for bits in _nan_patterns():
        f = struct.unpack(">d", struct.pack(">Q", _widened(bits)))[0]
        assert write_value("Immediate", T.Immediate.float32(f=f))[4:] == _float_bytes(bits)
    assert write_value("Immediate", T.Immediate.float32(f=math.nan))[4:] == _float_bytes(0x7FC00000)  # as Lean writes it
    low = struct.unpack(">d", bytes.fromhex("7f f0 00 00 00 00 00 01"))[0]  # a payload binary32 cannot hold
    with pytest.raises(FormatError, match="binary32"):
        write_value("Immediate", T.Immediate.float32(f=low))


def test_non_nan_special_floats_round_trip():
    for bits in (0x7F800000, 0xFF800000, 0x80000000, 0x00000001, 0x7F7FFFFF, 0x3F800000):
        data = bytes.fromhex("d9 83 03 81") + _float_bytes(bits)
        assert write_value("Immediate", read_value("Immediate", data)[0]) == data


def test_nans_in_a_whole_file_survive_a_rewrite():
    data = (DATA / "02_add_activation.klr").read_bytes()
    at = data.index(_float_bytes(0x3F800000))  # NcActivate.scale = 1.0
    for bits in (0x7F800001, 0xFFBFFFFF, 0x7FC00001, 0xFFFFFFFF):
        patched = data[:at] + _float_bytes(bits) + data[at + 5:]
        value = read_klr(patched)
        assert write_klr(value) == patched, hex(bits)
        assert write_klr(from_json(to_json(value))) == patched, hex(bits)  # the JSON data keeps the float object


@pytest.mark.slow
def test_all_nan_bit_patterns_round_trip():
    from tusk.ir.klr import wire

    out = bytearray()
    for sign in (0, 0x80000000):
        for m in range(1, 1 << 23):
            bits = sign | 0x7F800000 | m
            raw = _float_bytes(bits)
            value, _ = wire.read_float(raw + wire.PAD, 0, "Float")
            del out[:]
            wire.write_float(out, value, "Float")
            assert out == raw, hex(bits)
