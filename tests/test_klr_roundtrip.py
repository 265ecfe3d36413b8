"""Property tests: read_klr(write_klr(k)) == k for KLIR values generated from the schema.

The hypothesis strategies are derived from :data:`ir.klr.schema.SCHEMA` (one
per type, recursive types depth-limited), so every structure, constructor and
field of the table is exercised, including all 76 operators, every
Access/TensorRef variant, birPatterns with scalar and vector offsets,
Option some/none, negative and 64-bit integers, float32-exact floats
(infinities and -0.0 included) and arbitrary unicode strings.
"""

from __future__ import annotations

import json
from functools import lru_cache

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tusk.ir.klr import from_json, listing, read_klr, read_value, to_json, write_klr, write_value
from tusk.ir.klr import types as T
from tusk.ir.klr.schema import SCHEMA, Enum, ListOf, OptionOf, Prim, Struct, recursive_types

RECURSIVE = recursive_types()
DEPTH = 4  # recursive-type entries allowed along one path (Access -> BAP -> Access -> BAP)

PRIMITIVES = {
    "Nat": st.one_of(st.integers(0, 23), st.integers(0, 70000), st.integers(0, 2**32 - 1), st.integers(0, 2**64 - 1)),
    "Int": st.one_of(st.integers(-30, 30), st.integers(-(2**31), 2**31 - 1), st.integers(-(2**63), 2**64 - 1)),
    "Bool": st.booleans(),
    "Float": st.floats(width=32, allow_nan=False),  # exactly representable as binary32
    "String": st.one_of(st.text(max_size=6), st.text(min_size=20, max_size=40)),
}

# No example database: these tests write nothing into the repository.
FAST = dict(deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _field(t, budget: int):
    """Strategy for a field type; None when it cannot be built within `budget`."""
    if isinstance(t, Prim):
        return PRIMITIVES[t.name]
    if isinstance(t, ListOf):
        inner = _field(t.item, budget)
        return st.just(()) if inner is None else st.lists(inner, max_size=3).map(tuple)
    if isinstance(t, OptionOf):
        inner = _field(t.item, budget)
        return st.none() if inner is None else st.none() | inner
    return named(t.name, budget)


@st.composite
def value_of(draw, type_name: str, ctor_name: str | None, budget: int):
    """A value of a schema type (or constructor).

    The indirection gives every schema strategy a short repr: Hypothesis
    formats the repr of a strategy whose draw is rejected, and the expanded
    repr of these nested, shared strategies runs to megabytes.
    """
    return draw(_raw(type_name, ctor_name, budget))


@lru_cache(maxsize=None)
def named(name: str, budget: int = DEPTH):
    """Strategy for schema type `name`, or None if it cannot be built within `budget`."""
    return None if _raw(name, None, budget) is None else value_of(name, None, budget)


@lru_cache(maxsize=None)
def ctor(type_name: str, ctor_name: str, budget: int = DEPTH):
    return None if _raw(type_name, ctor_name, budget) is None else value_of(type_name, ctor_name, budget)


@lru_cache(maxsize=None)
def _raw(name: str, ctor_name: str | None, budget: int):
    d = SCHEMA[name]
    if ctor_name is not None:
        c = d.ctor_named(ctor_name)
        return _record(T.class_for(name, ctor_name), c.data_fields, budget)
    # Recursive types spend one unit of budget.
    if name in RECURSIVE:
        if budget == 0:
            return None
        budget -= 1
    if isinstance(d, Enum):
        return st.sampled_from(list(T.class_for(name)))
    if isinstance(d, Struct):
        return _record(T.class_for(name), d.data_fields, budget)
    options = [ctor(name, c.name, budget) for c in d.ctors]
    options = [o for o in options if o is not None]
    return st.one_of(options) if options else None


def _record(cls, fields, budget):
    parts = [_field(f.type, budget) for f in fields]
    if any(p is None for p in parts):
        return None
    return st.builds(cls, *parts)


def kernel_with(ops, *, most: int = 3):
    """An LncKernel around a strategy of Operators; statements, blocks and bodies
    (at most `most` of each) vary."""
    stmt = st.builds(T.Stmt.oper, ops, _field(OptionOf(Prim("String")), 0), named("Pos"))
    block = st.builds(T.Block, PRIMITIVES["String"], st.booleans(), st.lists(stmt, min_size=1, max_size=most).map(tuple))
    bodies = st.lists(st.lists(block, min_size=1, max_size=most).map(tuple), min_size=1, max_size=most).map(tuple)
    small = lambda t: st.lists(named(t), max_size=2).map(tuple)
    return st.builds(
        T.LncKernel, PRIMITIVES["String"], small("TensorName"), small("TensorName"), bodies,
        small("SharedConstantFile"), small("TensorName"), small("Edges"),
    )


def file_with(kernel):
    return st.builds(T.KLRFileContents, named("KLRFile"), named("KLRMetaData"), st.builds(T.Contents.lnc, kernel))


def assert_round_trip(value):
    data = write_klr(value)
    assert write_klr(value) == data  # deterministic
    back = read_klr(data)
    assert back == value
    assert write_klr(back) == data
    # the JSON form is lossless too
    assert from_json(json.loads(json.dumps(to_json(value)))) == value


OPERATOR_NAMES = [c.name for c in SCHEMA["Operator"].ctors]


@pytest.mark.parametrize("op", OPERATOR_NAMES)
@settings(max_examples=4, **FAST)
@given(data=st.data())
def test_every_operator_round_trips(op, data):
    # Budget 3: operands may carry offsets, whose accesses are not birPatterns
    # again (deeper nesting has its own tests below).
    operators = ctor("Operator", op, 3)
    value = data.draw(file_with(kernel_with(operators, most=1)))
    assert_round_trip(value)
    stmts = [s for body in value.contents.kernel.bodies for b in body for s in b.body]
    assert all(s.op.klr_ctor == op for s in stmts)
    # the human-readable listing handles every operator and field kind,
    # one line per statement whatever the names contain
    lines = listing(value).splitlines()
    assert sum(line.startswith("    ") and line.split()[1] == op for line in lines) == len(stmts)


@settings(max_examples=30, **FAST)
@given(file_with(kernel_with(named("Operator"), most=2)))
def test_whole_files_round_trip(value):
    assert_round_trip(value)


@pytest.mark.parametrize("type_name", sorted(SCHEMA))
@settings(max_examples=3, **FAST)
@given(data=st.data())
def test_every_schema_type_round_trips_on_its_own(type_name, data):
    value = data.draw(named(type_name))
    encoded = write_value(type_name, value)
    assert read_value(type_name, encoded + b"\x00trailing") == (value, len(encoded))


VARIANTS = [("TensorRef", c.name) for c in SCHEMA["TensorRef"].ctors] + [
    ("Access", c.name) for c in SCHEMA["Access"].ctors] + [("ScalarOffset", c.name) for c in SCHEMA["ScalarOffset"].ctors]


@pytest.mark.parametrize("type_name,ctor_name", VARIANTS)
@settings(max_examples=10, **FAST)
@given(data=st.data())
def test_every_access_and_tensor_ref_variant_round_trips(type_name, ctor_name, data):
    value = data.draw(ctor(type_name, ctor_name))
    assert type(value) is T.class_for(type_name, ctor_name)
    assert read_value(type_name, write_value(type_name, value))[0] == value


def _bir_with_offsets():
    """birPatterns whose scalar and vector offsets are both present."""
    return st.builds(
        T.BirAccessPattern,
        named("TensorName"), PRIMITIVES["Nat"], st.lists(named("APPair"), max_size=3).map(tuple),
        named("ScalarOffset", 2), named("Access", 2), PRIMITIVES["Int"], st.none() | named("Dtype"),
    ).map(lambda b: T.TensorRef.abstract(T.Access.birPattern(b)))


@settings(max_examples=40, **FAST)
@given(_bir_with_offsets())
def test_bir_patterns_with_scalar_and_vector_offsets_round_trip(ref):
    bap = ref.access.access
    assert bap.scalarOffset is not None and bap.vectorOffset is not None
    assert read_value("TensorRef", write_value("TensorRef", ref))[0] == ref


def test_strategies_cover_the_whole_table():
    for name in SCHEMA:
        assert named(name) is not None, name
    for c in SCHEMA["Operator"].ctors:
        assert ctor("Operator", c.name) is not None
