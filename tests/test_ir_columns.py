"""Column names are checked before run time: the Literal types the type checker sees match the schemas,
and every string-keyed column read of product code (``fn.insts["opcode"]``, ``fn.operands.get("role", r)``)
names a column of that table."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import get_args

import pytest

from tusk.ir import schema
from tusk.ir.columns import Table

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("ir", "stages", "sim", "workflows", "cache", "frontend")
LITERALS = {"insts": schema.InstCol, "operands": schema.OperandCol, "memlocs": schema.MemlocCol,
            "sets": schema.SetCol, "regs": schema.RegCol, "blocks": schema.BlockCol, "deps": schema.DepCol,
            "carried": schema.CarriedCol}
ACCESSORS = {"get", "set", "column"}


@pytest.mark.parametrize("table", sorted(schema.SCHEMAS))
def test_the_column_literal_of_each_table_is_its_schema(table):
    assert get_args(LITERALS[table]) == tuple(name for name, _ in schema.SCHEMAS[table])


def _table_of(node: ast.expr) -> str | None:
    """``fn.insts`` / ``self.fn.operands`` -> the table name, else None."""
    return node.attr if isinstance(node, ast.Attribute) and node.attr in schema.SCHEMAS else None


def column_reads(tree: ast.AST):
    """(table, column, line) of every string-constant column read or write on a table attribute."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and (table := _table_of(node.value)) \
                and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
            yield table, node.slice.value, node.lineno
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ACCESSORS and (table := _table_of(node.func.value)) and node.args \
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            yield table, node.args[0].value, node.lineno


def test_every_string_keyed_column_read_names_a_column_of_its_table():
    bad, seen = [], 0
    for folder in PRODUCT:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for table, column, line in column_reads(ast.parse(path.read_text(), str(path))):
                seen += 1
                if column not in get_args(LITERALS[table]):
                    bad.append(f"{path.relative_to(ROOT)}:{line}: {table}[{column!r}]")
    assert seen > 200  # the scan sees the reads it is about
    assert not bad, "\n".join(bad)


def test_the_scan_catches_a_misspelt_column():
    src = "def f(fn):\n    a = fn.insts['opcod']\n    return fn.operands.get('rol', 0), a\n"
    found = [(t, c) for t, c, _ in column_reads(ast.parse(src))]
    assert found == [("insts", "opcod"), ("operands", "rol")]
    assert all(c not in get_args(LITERALS[t]) for t, c in found)


def test_a_computed_name_reads_through_column():
    t: Table = Table(schema.DEP_SCHEMA)
    t.append((0, 1, 2))
    assert t.column("dst").tolist() == [1] and t["kind"].tolist() == [2]
    with pytest.raises(KeyError):
        t.column("dstt")


def test_one_of_is_isin_for_a_few_codes():
    import numpy as np

    from tusk.ir.columns import one_of
    from tusk.ir.enums import Kind, Mem

    rng = np.random.default_rng(7)
    for dtype in (np.uint8, np.int8, np.int32, np.int64, np.uint16):
        col = rng.integers(-3 if np.dtype(dtype).kind == "i" else 0, 40, 5000).astype(dtype)
        for values in ((), (1,), (Kind.PHYSICAL, Kind.SYMBOLIC), (Mem.SB, Mem.PSUM), (3, 300, -1),
                       tuple(range(12)), [np.int64(5), 7]):
            assert (one_of(col, values) == np.isin(col, list(values))).all(), (dtype, values)
    assert one_of(np.zeros(0, np.uint8), (1, 2)).shape == (0,)
    floats = np.array([0.5, 1.0, 2.0])
    assert (one_of(floats, (1.0,)) == np.isin(floats, [1.0])).all()
