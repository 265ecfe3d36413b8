"""uint64 immediates of 2**63 or more (BIR writes them unsigned) are read, written back byte for byte, and run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tusk.ir import bir_json
from tusk.ir.errors import FormatError
from tusk.sim.interp import random_inputs, run, same_outputs

KERNEL = Path(__file__).parent / "data" / "dynamic_loop_expr_bounds.json"  # its loop runs r times, storing each time
BIG = (1 << 64) - 3   # uint64 -3: adding 7 in a 64-bit register gives 4


def _with_counter(first: int, dtype: str, add: int) -> str:
    """The kernel with its trip-count register set to ``first`` (of ``dtype``) and then ``add`` added."""
    doc = json.loads(KERNEL.read_text())
    insts = doc["functions"][0]["blocks"][0]["instructions"]
    move = insts[0]
    move["ins"][0].update(dtype=dtype, value=first)
    alu = {"engine": "SP", "ins": [{"dtype": "int64", "kind": "register_access", "regref": "r"},
                                   {"dtype": dtype, "kind": "imm_value", "value": add}],
           "is_64bit": True, "name": "register_alu0", "op": "add", "opcode": "RegisterAlu",
           "outs": [{"dtype": "int64", "kind": "register_access", "regref": "r"}]}
    insts.insert(1, alu)
    return bir_json.dumps(bir_json.loads(json.dumps(doc)))


def test_uint64_immediate_past_int64_round_trips_byte_identical():
    text = _with_counter(BIG, "uint64", 7)
    assert f'"value":{BIG}' in text
    assert bir_json.dumps(bir_json.loads(text)) == text


def test_uint64_immediate_runs_as_its_unsigned_value():
    big = bir_json.loads(_with_counter(BIG, "uint64", 7))
    small = bir_json.loads(_with_counter(1, "int32", 3))
    inputs = random_inputs(small, 0)
    assert same_outputs(run(big, inputs), run(small, inputs))


def test_signed_immediate_past_int64_is_still_refused():
    doc = json.loads(KERNEL.read_text())
    doc["functions"][0]["blocks"][0]["instructions"][0]["ins"][0]["value"] = 1 << 63
    with pytest.raises(FormatError, match="out of range"):
        bir_json.loads(json.dumps(doc))
