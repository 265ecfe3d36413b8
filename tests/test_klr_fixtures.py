"""Golden fixtures (tests/data/klr, copied from the shared KLR fixture set).

Each positive fixture ``0*.klr`` must decode to exactly its ``.expected.json``,
re-encode byte for byte, and pretty-print to its ``.expected.txt`` (KLR's C++
printer output).  Each negative fixture must fail the way its README row says.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tusk.ir.errors import FormatError, TuskError
from tusk.ir.klr import (
    from_json,
    iter_operators,
    listing,
    load_lnc_kernel,
    pretty,
    read_klr,
    tensor_of,
    to_json,
    write_klr,
)
from tusk.ir.klr import types as T

DATA = Path(__file__).parent / "data" / "klr"
POSITIVE = sorted(DATA.glob("0*.klr"))
NEGATIVE_DECODABLE = ["neg_wrong_version", "neg_hlo_contents", "neg_kernel_contents"]


def _ids(paths):
    return [p.stem for p in paths]


def test_fixture_set_is_present():
    # Guards against an empty glob silently turning the tests below into no-ops.
    assert len(POSITIVE) == 7
    for p in POSITIVE:
        assert p.with_suffix(".expected.json").exists() and p.with_suffix(".expected.txt").exists()


@pytest.mark.parametrize("path", POSITIVE, ids=_ids(POSITIVE))
def test_reads_to_expected_json(path):
    expected = json.loads(path.with_suffix(".expected.json").read_text())
    assert to_json(read_klr(path.read_bytes())) == expected


@pytest.mark.parametrize("path", POSITIVE, ids=_ids(POSITIVE))
def test_writes_back_byte_identical(path):
    data = path.read_bytes()
    assert write_klr(read_klr(data)) == data


@pytest.mark.parametrize("path", POSITIVE, ids=_ids(POSITIVE))
def test_expected_json_encodes_to_the_bytes(path):
    value = from_json(json.loads(path.with_suffix(".expected.json").read_text()))
    assert write_klr(value) == path.read_bytes()
    assert value == read_klr(path.read_bytes())


@pytest.mark.parametrize("path", POSITIVE, ids=_ids(POSITIVE))
def test_pretty_reproduces_cpp_printer(path):
    assert pretty(read_klr(path.read_bytes())) == path.with_suffix(".expected.txt").read_text()


@pytest.mark.parametrize("path", POSITIVE, ids=_ids(POSITIVE))
def test_load_lnc_kernel_accepts_positive_fixtures(path):
    kernel = load_lnc_kernel(path)
    assert isinstance(kernel, T.LncKernel)
    assert kernel == read_klr(path.read_bytes()).contents.kernel


# -- negative fixtures -------------------------------------------------------


@pytest.mark.parametrize("stem", NEGATIVE_DECODABLE)
def test_decodable_negative_fixtures_read_like_cpp(stem):
    """read_klr itself succeeds (like KLR's deserializer), JSON and bytes round-trip,
    and pretty() gives the deserializer/pretty-printer lines of the .expected.txt."""
    path = DATA / f"{stem}.klr"
    data = path.read_bytes()
    value = read_klr(data)
    assert to_json(value) == json.loads(path.with_suffix(".expected.json").read_text())
    assert write_klr(value) == data
    expected_txt = path.with_suffix(".expected.txt").read_text()
    for line in pretty(value).splitlines():
        assert line in expected_txt.splitlines()


def test_wrong_version_is_rejected_by_load():
    path = DATA / "neg_wrong_version.klr"
    assert read_klr(path.read_bytes()).header == T.KLRFile(0, 0, 11)
    with pytest.raises(TuskError) as info:
        load_lnc_kernel(path)
    assert info.value.message.startswith("Wrong KLR version")
    assert "0.0.11" in info.value.message


@pytest.mark.parametrize("stem,ctor,cpp_tag", [("neg_hlo_contents", "hlo", 5), ("neg_kernel_contents", "kernel", 3)])
def test_non_lnc_contents_are_rejected_by_load(stem, ctor, cpp_tag):
    path = DATA / f"{stem}.klr"
    assert read_klr(path.read_bytes()).contents.klr_ctor == ctor
    with pytest.raises(TuskError) as info:
        load_lnc_kernel(path)
    assert info.value.message.startswith("Wrong KLIR content type")
    assert ctor in info.value.message and f"C++ tag {cpp_tag}" in info.value.message
    # The C++ load_test prints the same tag before throwing.
    assert f"KLR content type : {cpp_tag}" in path.with_suffix(".expected.txt").read_text()


def test_cpp_writer_prop_bytes_are_rejected_like_cpp():
    """KLR's unmodified C++ writer emits 0x80 per Prop; the reader must fail where
    C++ does: 'expecting Bool' for TensorName.addressRotation (spec §1.5: 0x5b)."""
    path = DATA / "neg_cpp_writer_prop_bytes.klr"
    with pytest.raises(FormatError) as info:
        read_klr(path.read_bytes(), file=str(path))
    err = info.value
    assert "expecting Bool" in path.with_suffix(".expected.txt").read_text()
    assert "Bool" in err.message and "TensorName.addressRotation" in err.message
    assert re.search(r"byte 0x5b\b", err.message)
    assert err.offset == 0x5B and path.read_bytes()[0x5B] == 0x80
    assert str(path) in str(err)
    with pytest.raises(FormatError):
        load_lnc_kernel(path)


def test_missing_file_is_reported_with_its_path(tmp_path):
    missing = tmp_path / "nowhere" / "kernel.klr"
    with pytest.raises(TuskError) as info:
        load_lnc_kernel(missing)
    assert info.value.message.startswith("fail to locate KLIR artifact")
    assert str(missing) in str(info.value)


# -- helpers for later passes --------------------------------------------------


@pytest.mark.parametrize("path", POSITIVE, ids=_ids(POSITIVE))
def test_iter_operators_walks_every_statement_of_every_core(path):
    kernel = load_lnc_kernel(path)
    raw = json.loads(path.with_suffix(".expected.json").read_text())["contents"]["kernel"]
    for core, blocks in enumerate(raw["bodies"]):
        expected = [(b["label"], s["name"]) for b in blocks for s in b["body"]]
        got = [(label, stmt.name) for label, stmt in iter_operators(kernel, core)]
        assert got == expected


@pytest.mark.parametrize("path", POSITIVE, ids=_ids(POSITIVE))
def test_tensor_of_matches_the_json_tensor_names(path):
    """tensor_of agrees with a direct walk of the JSON for every abstract operand."""
    raw = json.loads(path.with_suffix(".expected.json").read_text())["contents"]["kernel"]
    expected = []
    for blocks in raw["bodies"]:
        for b in blocks:
            for s in b["body"]:
                for value in s["op"]["op"].values():
                    if isinstance(value, dict) and value.get("_type") == "TensorRef":
                        acc = value.get("access")
                        expected.append(None if acc is None else (acc.get("tensor") or acc["access"]["tensor"])["name"])
    kernel = load_lnc_kernel(path)
    got = []
    for core in range(len(kernel.bodies)):
        for _, stmt in iter_operators(kernel, core):
            for f in stmt.op.op.__dataclass_fields__:
                value = getattr(stmt.op.op, f)
                if isinstance(value, T.TensorRef):
                    t = tensor_of(value)
                    got.append(None if t is None else t.name)
    assert got == expected and got


@pytest.mark.parametrize("path", POSITIVE, ids=_ids(POSITIVE))
def test_listing_names_every_tensor_and_statement(path):
    file = read_klr(path.read_bytes())
    text = listing(file)
    assert text == listing(read_klr(path.read_bytes()))  # deterministic
    kernel = file.contents.kernel
    assert f"kernel {kernel.name}" in text
    for t in kernel.inputs + kernel.outputs + kernel.sharedBuffers:
        assert re.search(rf"^  {re.escape(t.name)} +{t.dtype.name}\[", text, re.M)
    lines = text.splitlines()
    for core in range(len(kernel.bodies)):
        for label, stmt in iter_operators(kernel, core):
            assert f"  block {label}" in text
            assert any(line.split()[:2] == [stmt.name or "-", stmt.op.klr_ctor] for line in lines)
