"""Malformed input: every failure is a FormatError that names a byte offset.

Truncations at every prefix length, seeded and hypothesis-driven corruptions
of the fixtures, and the specific strictness rules of spec §1.6 / §2.11.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.test_klr_depth import chain_bytes, deep_kernel_file
from tusk.ir.errors import FormatError
from tusk.ir.klr import read_klr, read_value, write_klr, write_value
from tusk.ir.klr import types as T

DATA = Path(__file__).parent / "data" / "klr"
POSITIVE = sorted(DATA.glob("0*.klr"))
ALL_KLR = sorted(DATA.glob("*.klr"))
OFFSET = re.compile(r"byte 0x([0-9a-f]+)")


def _assert_located(err: FormatError, data_len: int) -> None:
    """The message names a hex byte offset inside (or at the end of) the data."""
    m = OFFSET.search(err.message)
    assert m, err.message
    assert int(m.group(1), 16) <= data_len, err.message
    assert err.offset is not None and err.offset <= data_len


def _decode_or_format_error(data: bytes) -> None:
    """Decoding either succeeds or raises FormatError; a successful decode re-encodes."""
    try:
        value = read_klr(data)
    except FormatError as e:
        _assert_located(e, len(data))
        return
    again = write_klr(value)  # canonical form of whatever was decoded
    assert write_klr(read_klr(again)) == again


def test_fixture_set_is_present():
    assert len(POSITIVE) == 7 and len(ALL_KLR) == 11


@pytest.mark.parametrize("path", POSITIVE, ids=[p.stem for p in POSITIVE])
def test_every_truncation_raises_format_error(path):
    _assert_every_truncation_fails(path.read_bytes())


def _assert_every_truncation_fails(data: bytes) -> None:
    for n in range(len(data)):
        with pytest.raises(FormatError) as info:
            read_klr(data[:n])
        _assert_located(info.value, n)
        if n > 0:
            assert "unexpected end of data" in info.value.message, (n, info.value.message)


@pytest.mark.parametrize("path", ALL_KLR, ids=[p.stem for p in ALL_KLR])
def test_seeded_random_corruptions_decode_or_raise_format_error(path):
    data = path.read_bytes()
    rng = random.Random(f"klr-{path.stem}")
    for _ in range(400):
        buf = bytearray(data)
        for _ in range(rng.randint(1, 3)):
            kind = rng.randrange(4)
            i = rng.randrange(len(buf))
            if kind == 0:
                buf[i] = rng.randrange(256)
            elif kind == 1:
                buf[i] ^= 1 << rng.randrange(8)
            elif kind == 2:
                del buf[i]
            else:
                buf.insert(i, rng.choice((0x00, 0x18, 0x80, 0x98, 0xD9, 0xF4, 0xFA, 0xFF, rng.randrange(256))))
        _decode_or_format_error(bytes(buf))


@settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    which=st.sampled_from(ALL_KLR),
    edits=st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 255)), min_size=1, max_size=4),
)
def test_hypothesis_corruptions_decode_or_raise_format_error(which, edits):
    buf = bytearray(which.read_bytes())
    for where, byte in edits:
        buf[int(where * len(buf))] = byte
    _decode_or_format_error(bytes(buf))


@settings(max_examples=200, deadline=None, database=None)
@given(st.binary(max_size=64))
def test_arbitrary_bytes_decode_or_raise_format_error(blob):
    _decode_or_format_error(blob)
    _decode_or_format_error(b"\xd9\xd9\xf7\x83\x00\x00\x0c\xd9\xeb\x00\x81\x63NKI" + blob)


# -- specific rules (spec §1.6, §2.5-§2.11) ---------------------------------------

HEADER = write_value("KLRFile", T.KLRFile(0, 0, 12)) + write_value("KLRMetaData", T.KLRMetaData("NKI"))


def _error(type_name: str, data: bytes) -> FormatError:
    with pytest.raises(FormatError) as info:
        read_value(type_name, data)
    _assert_located(info.value, len(data))
    return info.value


def test_wrong_struct_head_names_expected_and_found_bytes():
    err = _error("Shape", bytes.fromhex("d9 70 00 83 18 80 81 19 02 00"))
    assert "expecting Shape at byte 0x0" in err.message
    assert "got d9 70 00 83, want d9 70 00 82" in err.message


@pytest.mark.parametrize(
    "hexdata,words",
    [
        ("d9 7c 01 81", ["type tag"]),  # BirAccessPattern tag for an Access
        ("d9 7d 09 81", ["invalid constructor 9"]),
        ("d9 7d 03 82", ["wrong number of elements", "Access.birPattern has 1"]),
        ("d9 7d 03", ["unexpected end of data"]),
    ],
)
def test_inductive_head_errors_follow_the_cpp_distinctions(hexdata, words):
    err = _error("Access", bytes.fromhex(hexdata))
    for w in words:
        assert w in err.message


def test_enum_value_out_of_range_is_rejected():
    assert "invalid constructor 20" in _error("Dtype", bytes.fromhex("d9 6f 14 80")).message
    assert read_value("Dtype", bytes.fromhex("d9 6f 13 80"))[0] is T.Dtype.float4_e2m1fn_x4


def test_bool_float_and_integer_kinds_are_checked():
    assert "expecting Bool" in _error("Block", bytes.fromhex("d9 68 00 83 61 62 00 80")).message
    # half and double floats are never accepted (spec §2.5)
    assert "expecting Float" in _error("Immediate", bytes.fromhex("d9 83 03 81 f9 3e 00")).message
    assert "expecting Float" in _error("Immediate", bytes.fromhex("d9 83 03 81 fb 3f f8 00 00 00 00 00 00")).message
    # a negative where a Nat is declared
    assert "expecting Nat" in _error("Immediate", bytes.fromhex("d9 83 00 81 20")).message
    # Int: C++ cbor_decode_int refuses negatives below -2**63 ...
    below = bytes.fromhex("d9 83 02 81 3b 80 00 00 00 00 00 00 00")
    assert "int64" in _error("Immediate", below).message
    # ... and accepts everything from -2**63 up, and any unsigned value
    lowest = bytes.fromhex("d9 83 02 81 3b 7f ff ff ff ff ff ff ff")
    assert read_value("Immediate", lowest)[0] == T.Immediate.int32(-(2**63))
    assert read_value("Immediate", bytes.fromhex("d9 83 02 81 1b ff ff ff ff ff ff ff ff"))[0].i == 2**64 - 1


def test_non_shortest_integers_are_accepted_as_by_both_klr_readers():
    value, end = read_value("APPair", bytes.fromhex("d9 77 00 83 18 05 1a 00 00 00 80 1b 00 00 00 00 00 00 00 00"))
    assert value == T.APPair(step=5, num=128, offset=0) and end == 20
    assert write_value("APPair", value) == bytes.fromhex("d9 77 00 83 05 18 80 00")


def test_noncanonical_heads_are_rejected_like_the_lean_reader():
    # long-form array length inside a head, and Option bytes other than the two patterns
    assert "Shape" in _error("Shape", bytes.fromhex("d9 70 00 98 02 00 80")).message
    for bad in ("d9 ff 02 81 00", "d9 ff 01 80 00", "d9 ff 00 81 00"):
        err = _error("Pos", bytes.fromhex("d9 64 00 85 00 00") + bytes.fromhex(bad) + bytes.fromhex("d9 ff 00 80" * 2))
        assert "Option[Nat]" in err.message and "Pos.lineEnd" in err.message


def test_strings_must_be_utf8_and_at_most_64k():
    err = _error("KLRMetaData", bytes.fromhex("d9 eb 00 81 62 c3 28"))
    assert "invalid UTF-8" in err.message and "KLRMetaData.format" in err.message
    long = b"\xd9\xeb\x00\x81\x7a" + (0x10001).to_bytes(4, "big") + b"a" * 0x10001
    assert "65536" in _error("KLRMetaData", long).message
    ok = b"\xd9\xeb\x00\x81\x7a" + (0x10000).to_bytes(4, "big") + b"a" * 0x10000
    assert read_value("KLRMetaData", ok)[0].format == "a" * 0x10000


def test_impossible_list_lengths_fail_fast():
    err = _error("Shape", bytes.fromhex("d9 70 00 82 01 9b ff ff ff ff ff ff ff ff"))
    assert "cannot fit" in err.message and "Shape.freeDims" in err.message


def test_trailing_bytes_after_contents_are_ignored():
    data = (DATA / "01_dma_copy.klr").read_bytes()
    assert read_klr(data + b"\xff\x00garbage") == read_klr(data)


def test_truncated_two_byte_integer_at_the_very_end_is_detected():
    # An inlined 0x19 argument in the last field runs into the reader's padding;
    # the final length check must still report the truncation.
    data = bytes.fromhex("d9 77 00 83 01 01 19 01")
    err = _error("APPair", data)
    assert "unexpected end of data" in err.message and err.offset == len(data)
    # ... and in the middle of a value the next read notices it.
    assert "end of data" in _error("Pos", bytes.fromhex("d9 64 00 85 00 19 01")).message


# -- deep nesting (spec §2.8): no depth limit, damaged deep input still a located FormatError


DEEP_FILES = {f"deep40-{via}": deep_kernel_file(40, via) for via in ("vector", "scalar", "mixed")}


@pytest.mark.parametrize("name", sorted(DEEP_FILES))
def test_every_truncation_of_a_deep_file_raises_format_error(name):
    data = DEEP_FILES[name]
    assert write_klr(read_klr(data)) == data
    _assert_every_truncation_fails(data)


@pytest.mark.parametrize("depth,via", [(1000, "scalar"), (5000, "mixed")])
def test_sampled_truncations_of_very_deep_accesses_raise_format_error(depth, via):
    data = chain_bytes(depth, via)
    rng = random.Random(f"deep-{depth}-{via}")
    for n in sorted(rng.sample(range(len(data)), 40)) + [len(data) - 1]:
        with pytest.raises(FormatError) as info:
            read_value("Access", data[:n])
        _assert_located(info.value, n)
        assert "unexpected end of data" in info.value.message, (n, info.value.message)


@pytest.mark.parametrize("name", sorted(DEEP_FILES))
def test_seeded_random_corruptions_of_deep_files_decode_or_raise_format_error(name):
    data = DEEP_FILES[name]
    rng = random.Random(f"klr-{name}")
    for _ in range(300):
        buf = bytearray(data)
        for _ in range(rng.randint(1, 3)):
            i = rng.randrange(len(buf))
            kind = rng.randrange(3)
            if kind == 0:
                buf[i] = rng.randrange(256)
            elif kind == 1:
                buf[i] ^= 1 << rng.randrange(8)
            else:
                del buf[i]
        _decode_or_format_error(bytes(buf))


def test_deep_garbage_heads_fail_with_format_error_at_their_offset():
    # 3000 levels of Access.birPattern + BirAccessPattern heads, then a bad byte
    data = chain_bytes(3000, "vector")
    cut = data.index(bytes.fromhex("d9 7d 00 81"))  # the innermost Access.simple
    bad = data[:cut] + bytes.fromhex("d9 7d 07 81") + data[cut + 4:]
    err = _error("Access", bad)
    assert err.offset == cut and "invalid constructor 7" in err.message


# -- writer-side validation -----------------------------------------------------------


@pytest.mark.parametrize(
    "type_name,value,words",
    [
        ("APPair", T.APPair(step=1, num=-1, offset=0), ["APPair.num", "Nat"]),
        ("APPair", T.APPair(step=1.0, num=1, offset=0), ["APPair.step", "Int"]),
        ("Shape", T.Shape(parDim=1, freeDims=[2]), ["Shape.freeDims", "tuple"]),
        ("Immediate", T.Immediate.float32(f=0.1), ["Immediate.float32.f", "binary32"]),
        ("Immediate", T.Immediate.float32(f=1e39), ["binary32"]),
        ("Immediate", T.Immediate.int32(i=True), ["Immediate.int32.i", "Int"]),
        ("Block", T.Block(label="b", noReorder=0, body=()), ["Block.noReorder", "Bool"]),
        ("Address", T.Address("a", "hbm", 1, 1, None, None, False), ["Address.memory", "Memory"]),
        ("TensorRef", T.Access.simple(tensor=None), ["TensorRef"]),
        ("KLRMetaData", T.KLRMetaData(format="\ud800"), ["KLRMetaData.format", "UTF-8"]),
    ],
)
def test_writer_rejects_values_that_do_not_fit_the_schema(type_name, value, words):
    with pytest.raises(FormatError) as info:
        write_value(type_name, value)
    for w in words:
        assert w in info.value.message
