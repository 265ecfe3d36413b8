"""The schema table agrees with the spec text, parsed independently.

``tests/data/klr/klr-format.md`` is a copy of the KLR format spec.  This test
reads its section 3 (and the file-level types of section 1) with a small
markdown parser and compares every tag, constructor, field name, field type
and enum value with :data:`ir.klr.schema.SCHEMA`.  Round-trip tests cannot
catch a transcription slip in a payload no fixture uses, because reader and
writer share the table; this can.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tusk.ir.klr.schema import OPERATORS, SCHEMA, Enum, Inductive, Struct

SPEC = Path(__file__).parent / "data" / "klr" / "klr-format.md"


def _rows(lines: list[str], start: int) -> list[list[str]]:
    """The body rows of the first markdown table after line `start`."""
    i = start + 1
    while not lines[i].startswith("|"):
        i += 1
    rows = []
    i += 2  # header and separator
    while i < len(lines) and lines[i].startswith("|"):
        rows.append([c.strip() for c in lines[i].strip().strip("|").split("|")])
        i += 1
    return rows


def _fields(text: str, sep: str) -> list[tuple[str, str]]:
    if text in ("—", ""):
        return []
    out = []
    for part in text.split(sep):
        name, _, typ = part.partition(":")
        out.append((name.strip(), typ.strip().replace(" (0 bytes)", "")))
    return out


def parse_spec() -> dict[str, dict]:
    lines = SPEC.read_text().splitlines()
    section3 = next(i for i, line in enumerate(lines) if line.startswith("## 3. Schema"))
    found: dict[str, dict] = {}
    head = re.compile(r"^\*\*(\w+)\*\* — type tag (\d+) \(0x[0-9a-f]+\), (constructor 0, array length (\d+)|inductive|enum)")
    for i, line in enumerate(lines[section3:], section3):
        m = head.match(line)
        if m:
            name, tag, kind = m.group(1), int(m.group(2)), m.group(3)
            rows = _rows(lines, i)
            if kind.startswith("constructor"):
                fields = [(r[1], r[2].replace(" (0 bytes)", "")) for r in rows]
                assert len(fields) == int(m.group(4)), name
                found[name] = {"kind": "struct", "tag": tag, "fields": fields}
            elif kind == "inductive":
                ctors = []
                for r in rows:
                    lean = re.search(r"\(Lean: `(\w+)`\)", r[2])
                    cname = r[2].split()[0]
                    ctors.append((int(r[0]), cname, lean.group(1) if lean else None, _fields(r[3], ",")))
                found[name] = {"kind": "inductive", "tag": tag, "ctors": ctors}
            else:
                found[name] = {"kind": "enum", "tag": tag, "values": [(int(r[0]), r[2]) for r in rows]}
        m = re.match(r"^- \*\*(\w+)\*\* \(tag (\d+), 0x[0-9a-f]+\): (.*)$", line)
        if m:
            values = [v.split("=") for v in m.group(3).split(", ")]
            found[m.group(1)] = {"kind": "enum", "tag": int(m.group(2)), "values": [(int(a), b) for a, b in values]}
        m = re.match(r"^- \*\*(\w+)\*\* — tag (\d+) \(0x[0-9a-f]+\), (\d+) fields?: (.*)$", line)
        if m:
            fields = _fields(m.group(4), ";")
            assert len(fields) == int(m.group(3)), m.group(1)
            found[m.group(1)] = {"kind": "struct", "tag": int(m.group(2)), "fields": fields}
    # §3.7: the operator table
    op_start = next(i for i, line in enumerate(lines) if line.startswith("| ctor (CBOR) | C++ enum | Operator variant"))
    found["Operator"] = {
        "kind": "inductive", "tag": 218,
        "ctors": [(int(r[0]), r[2], None, [("op", r[3])]) for r in _rows(lines, op_start - 1)],
    }
    return found


SPEC_TYPES = parse_spec()


def test_spec_parse_found_every_type():
    # Everything in §3 except the file-level items, which §1 describes in prose.
    assert set(SCHEMA) - set(SPEC_TYPES) == {"KLRFile", "KLRMetaData", "Contents"}
    assert set(SPEC_TYPES) <= set(SCHEMA)
    assert len(SPEC_TYPES["Operator"]["ctors"]) == 76


@pytest.mark.parametrize("name", sorted(SPEC_TYPES))
def test_schema_matches_spec(name):
    spec, d = SPEC_TYPES[name], SCHEMA[name]
    assert d.tag == spec["tag"]
    if spec["kind"] == "struct":
        assert isinstance(d, Struct) and d.ctor == 0
        assert [(f.name, str(f.type)) for f in d.fields] == spec["fields"]
    elif spec["kind"] == "enum":
        assert isinstance(d, Enum)
        assert list(enumerate(d.values)) == spec["values"]
    else:
        assert isinstance(d, Inductive)
        mine = [(c.index, c.name, c.lean_name, [(f.name, str(f.type)) for f in c.fields]) for c in d.ctors]
        assert mine == spec["ctors"]


def test_operator_payload_table_matches_spec():
    assert [(c[1], c[3][0][1]) for c in SPEC_TYPES["Operator"]["ctors"]] == list(OPERATORS)


def test_file_level_types_match_section_1():
    text = SPEC.read_text()
    assert SCHEMA["KLRFile"].head == bytes.fromhex("d9 d9 f7 83")
    assert [(f.name, str(f.type)) for f in SCHEMA["KLRFile"].fields] == [("major", "Nat"), ("minor", "Nat"), ("patch", "Nat")]
    assert SCHEMA["KLRMetaData"].head == bytes.fromhex("d9 eb 00 81")
    # §1.4's table: CBOR ctor, C++ tag, name, payload
    section = text[text.index("### 1.4 Contents"):text.index("### 1.5")]
    rows = re.findall(r"^\| (\d) \| \**(\d)\** \| \**(\w+)\** \| \**(\w+)", section, re.M)
    assert len(rows) == 5
    contents = SCHEMA["Contents"]
    assert [(str(c.index), str(c.index + 1), c.name) for c in contents.ctors] == [r[:3] for r in rows]
    assert [str(c.fields[0].type) for c in contents.ctors] == [r[3] for r in rows]
