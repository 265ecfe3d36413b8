"""The schema table, the generated classes, and the spec's worked byte examples.

The byte strings below are spec §2.12's examples, each the actual output of
KLR's C++ serializer; the table facts are spec §3's registry.
"""

from __future__ import annotations

import dataclasses
import keyword
import math
import pickle

import pytest

from tusk.ir.klr import pretty, read_value, write_value
from tusk.ir.klr import types as T
from tusk.ir.klr.schema import OPERATORS, SCHEMA, Enum, Inductive, Prim, Struct, recursive_types


def test_table_has_every_type_of_the_spec_registry():
    structs = [d for d in SCHEMA.values() if isinstance(d, Struct)]
    enums = [d for d in SCHEMA.values() if isinstance(d, Enum)]
    inductives = [d for d in SCHEMA.values() if isinstance(d, Inductive)]
    # §3.1: 116 types (87 structures, 13 inductives with fields, 16 enums)
    assert (len(structs), len(inductives), len(enums)) == (87, 13, 16)
    assert len(OPERATORS) == 76 and len(SCHEMA["Operator"].ctors) == 76
    assert [c.index for c in SCHEMA["Operator"].ctors] == list(range(76))
    # every operator payload is a structure; only tag 0xd9 is shared (KLRFile/Activate2)
    for c in SCHEMA["Operator"].ctors:
        (f,) = c.fields
        assert isinstance(SCHEMA[f.type.name], Struct)
    tags = [d.tag for d in SCHEMA.values()]
    assert sorted(t for t in set(tags) if tags.count(t) > 1) == [0xD9]


def test_prop_fields_are_exactly_the_four_of_the_spec():
    props = sorted(f"{d.name}.{f.name}" for d in SCHEMA.values() if isinstance(d, Struct)
                   for f in d.fields if f.type == Prim("Prop"))
    assert props == ["AccessBasic.lenWF", "Slice.wf", "TensorName.freeWF", "TensorName.parWF"]
    assert SCHEMA["TensorName"].head == bytes.fromhex("d9 72 00 88")
    assert [f.name for f in dataclasses.fields(T.TensorName)] == [
        "name", "dtype", "shape", "address", "freeElements", "addressRotation"]


@pytest.mark.parametrize(
    "name,head",
    [("KLRFile", "d9 d9 f7 83"), ("Activate2", "d9 d9 00 8e"), ("LncKernel", "d9 6c 00 87"),
     ("BirAccessPattern", "d9 7c 00 87"), ("NcDmaCopy", "d9 99 00 88"), ("Slice", "d9 73 00 84"),
     ("AccessBasic", "d9 76 00 83"), ("KLRMetaData", "d9 eb 00 81")],
)
def test_structure_heads(name, head):
    assert SCHEMA[name].head == bytes.fromhex(head)


def test_recursion_is_only_through_access_offsets():
    assert recursive_types() == {"Access", "BirAccessPattern", "ScalarOffset"}


def test_field_names_are_python_identifiers():
    for d in SCHEMA.values():
        fields = d.fields if isinstance(d, Struct) else [f for c in getattr(d, "ctors", ()) for f in c.fields]
        for f in fields:
            assert f.name.isidentifier() and not keyword.iskeyword(f.name), (d.name, f.name)


# -- generated classes -------------------------------------------------------------


def test_naming_scheme_of_generated_classes():
    assert T.Access.birPattern is T.Access_birPattern
    assert T.Access_birPattern.klr_type == "Access" and T.Access_birPattern.klr_ctor == "birPattern"
    assert T.Access.ctors == (T.Access_simple, T.Access_basic, T.Access_pattern, T.Access_birPattern)
    assert T.Immediate.float32(f=1.5) == T.Immediate_float32(1.5)
    assert repr(T.Immediate.float32(f=1.5)) == "Immediate.float32(f=1.5)"
    assert isinstance(T.Immediate.pointer(), T.Immediate) and not isinstance(T.Immediate.pointer(), T.Access)
    assert T.Dtype.float32.value == 5 and T.Dtype["float32"] is T.Dtype.float32
    assert T.MatmulPerfMode["None"].value == 0
    with pytest.raises(TypeError):
        T.Access()


def test_generated_values_are_frozen_hashable_and_structural():
    a = T.APPair(step=-1, num=128, offset=0)
    assert a == T.APPair(-1, 128, 0) and hash(a) == hash(T.APPair(-1, 128, 0)) and a != T.APPair(-1, 128, 1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.step = 2
    ref = T.TensorRef.reg(reg=3)
    assert ref != T.Immediate.reg(reg=3)  # same field, different constructor class
    assert pickle.loads(pickle.dumps(ref)) == ref


# -- spec §2.12 worked examples (C++ serializer output) --------------------------------

TENSOR_T = T.TensorName(
    name="t", dtype=T.Dtype.float32, shape=T.Shape(128, (512,)),
    address=T.Address("t", T.Memory.sbuf, 128, 2048, 0, None, False),
    freeElements=512, addressRotation=False,
)

EXAMPLES = [
    ("KLRFile", T.KLRFile(0, 0, 12), "d9 d9 f7 83 00 00 0c"),
    ("KLRMetaData", T.KLRMetaData("NKI"), "d9 eb 00 81 63 4e 4b 49"),
    ("APPair", T.APPair(-1, 128, 0), "d9 77 00 83 20 18 80 00"),
    ("APPair", T.APPair(1000, 70000, 24), "d9 77 00 83 19 03 e8 1a 00 01 11 70 18 18"),
    ("Dtype", T.Dtype.float32, "d9 6f 05 80"),
    ("Memory", T.Memory.sbuf, "d9 6e 01 80"),
    ("Immediate", T.Immediate.float32(1.5), "d9 83 03 81 fa 3f c0 00 00"),
    ("Immediate", T.Immediate.int32(-1000), "d9 83 02 81 39 03 e7"),
    ("Immediate", T.Immediate.pointer(), "d9 83 01 80"),
    ("ScalarOffset", T.ScalarOffset.reg("r0"), "d9 7b 00 81 62 72 30"),
    ("Shape", T.Shape(128, (512,)), "d9 70 00 82 18 80 81 19 02 00"),
    ("Slice", T.Slice(0, 10, 2), "d9 73 00 84 00 0a 02"),
    ("Stmt", T.Stmt.oper(T.Operator.registerMove(T.RegisterMove("r0", 5)), "mv", T.Pos(3, 0, None, None, None)),
     "d9 67 00 83 d9 da 2d 81 d9 c0 00 82 62 72 30 05 d9 ff 01 81 62 6d 76"
     " d9 64 00 85 03 00 d9 ff 00 80 d9 ff 00 80 d9 ff 00 80"),
    ("TensorName", TENSOR_T,
     "d9 72 00 88 61 74 d9 6f 05 80 d9 70 00 82 18 80 81 19 02 00 d9 71 00 87 61 74 d9 6e 01 80"
     " 18 80 19 08 00 d9 ff 01 81 00 d9 ff 00 80 f4 19 02 00 f4"),
    ("TensorRef", T.TensorRef.abstract(T.Access.birPattern(T.BirAccessPattern(
        TENSOR_T, 0, (T.APPair(64, 128, 0), T.APPair(1, 64, 0)), T.ScalarOffset.reg("reg.1"), None, 0, None))),
     "d9 80 00 81 d9 7d 03 81 d9 7c 00 87"
     " d9 72 00 88 61 74 d9 6f 05 80 d9 70 00 82 18 80 81 19 02 00 d9 71 00 87 61 74 d9 6e 01 80"
     " 18 80 19 08 00 d9 ff 01 81 00 d9 ff 00 80 f4 19 02 00 f4"
     " 00 82 d9 77 00 83 18 40 18 80 00 d9 77 00 83 01 18 40 00"
     " d9 ff 01 81 d9 7b 00 81 65 72 65 67 2e 31 d9 ff 00 80 00 d9 ff 00 80"),
]


@pytest.mark.parametrize("type_name,value,hexbytes", EXAMPLES, ids=[f"{e[0]}-{i}" for i, e in enumerate(EXAMPLES)])
def test_spec_byte_examples(type_name, value, hexbytes):
    data = bytes.fromhex(hexbytes)
    assert write_value(type_name, value) == data
    assert read_value(type_name, data) == (value, len(data))


def test_spec_example_sizes():
    assert len(write_value("TensorName", TENSOR_T)) == 49
    assert len(write_value("TensorRef", EXAMPLES[-1][1])) == 103


def test_option_and_float_encodings():
    pos = T.Pos(1, 2, 300, None, "inst.1")
    data = write_value("Pos", pos)
    assert bytes.fromhex("d9 ff 01 81 19 01 2c") in data and bytes.fromhex("d9 ff 00 80") in data
    assert bytes.fromhex("d9 ff 01 81 66 69 6e 73 74 2e 31") in data
    assert write_value("Immediate", T.Immediate.float32(-0.0)) == bytes.fromhex("d9 83 03 81 fa 80 00 00 00")
    nan = read_value("Immediate", bytes.fromhex("d9 83 03 81 fa 7f c0 00 00"))[0]
    assert math.isnan(nan.f)
    assert write_value("Immediate", nan) == bytes.fromhex("d9 83 03 81 fa 7f c0 00 00")


def test_pretty_of_single_values_follows_the_cpp_rules():
    assert pretty(T.Immediate.float32(1.0)) == "ImmediateFloatWrapper(f=1.000000)"
    assert pretty(T.TensorRef.reg(3)) == "TensorRefRegisterWrapper(reg=3)"
    assert pretty(T.Slice(0, 10, 2)) == "Slice(l=0, u=10, step=2, wf=)"
    assert pretty(T.ReplicaGroup.literal(((1, 2), (), (3,)))) == "ReplicaGroupLiteralWrapper(groups=1, 2, , 3)"
    # C++ keeps 32 bits: a Nat of 2**32 + 5 prints as 5, an Int of 2**31 as -2**31
    assert pretty(T.APPair(2**31, 2**32 + 5, 0)) == "APPair(step=-2147483648, num=5, offset=0)"
