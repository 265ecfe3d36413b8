"""The column schemas of a Function's tables, the pool-id columns, and clone names.

Below :mod:`tusk.ir.module` (which re-exports every name here), so that code that only reads
modules -- their identity (:mod:`tusk.ir.identity`) -- needs no import of the classes.
"""

from __future__ import annotations

import re
from typing import Literal

import numpy as np

from tusk.ir.enums import Kind

i1, u1, u2, i4, i8 = np.int8, np.uint8, np.uint16, np.int32, np.int64

INST_SCHEMA = (("opcode", u1), ("engine", u1), ("block", i4), ("name", i4), ("iter", i4),
               ("attrs", i4), ("ops", i8), ("nops", u2), ("pred", i4))
OPERAND_SCHEMA = (("role", u1), ("kind", u1), ("dtype", u1), ("memloc", i4), ("offset", i8),
                  ("pattern", i4), ("aux", i4), ("dyn", i4), ("extra", i4))
MEMLOC_SCHEMA = (("set", i4), ("name", i4), ("mtype", u1), ("bank", i4), ("base", i4),
                 ("nparts", i4), ("addr", i8), ("pbytes", i8), ("tensor_id", i4),
                 ("const_path", i4), ("extra", i4))
SET_SCHEMA = (("name", i4), ("kind", u1), ("tclass", i1), ("dtype", u1), ("shape", i4),
              ("is_block", u1), ("n_blocks", i4), ("extra", i4))
REG_SCHEMA = (("name", i4), ("extra", i4))
BLOCK_SCHEMA = (("name", i4), ("parent", i4), ("extra", i4))
DEP_SCHEMA = (("src", i4), ("dst", i4), ("kind", u1))
# flavour 1: loop_carried_dependencies (payload: distances), 2: unroll_dependencies
# (payload: (exprs, predicates)).
CARRIED_SCHEMA = (("src", i4), ("dst", i4), ("kind", u1), ("flavour", u1), ("payload", i4))

# The column names as types, so the type checker refuses a misspelt column (``fn.insts["opcod"]``);
# tests/test_ir_columns.py checks each against its schema.
InstCol = Literal["opcode", "engine", "block", "name", "iter", "attrs", "ops", "nops", "pred"]
OperandCol = Literal["role", "kind", "dtype", "memloc", "offset", "pattern", "aux", "dyn", "extra"]
MemlocCol = Literal["set", "name", "mtype", "bank", "base", "nparts", "addr", "pbytes", "tensor_id", "const_path",
                    "extra"]
SetCol = Literal["name", "kind", "tclass", "dtype", "shape", "is_block", "n_blocks", "extra"]
RegCol = Literal["name", "extra"]
BlockCol = Literal["name", "parent", "extra"]
DepCol = Literal["src", "dst", "kind"]
CarriedCol = Literal["src", "dst", "kind", "flavour", "payload"]

SCHEMAS = {"insts": INST_SCHEMA, "operands": OPERAND_SCHEMA, "memlocs": MEMLOC_SCHEMA,
           "sets": SET_SCHEMA, "regs": REG_SCHEMA, "blocks": BLOCK_SCHEMA, "deps": DEP_SCHEMA,
           "carried": CARRIED_SCHEMA}

# Columns that hold ids into a function's pools; serialisation and content hashes renumber the
# pools through exactly these.  ``operands.aux`` is a value id only for the kinds in AUX_VALUE_KINDS
# (register operands keep a register row there).
STRING_REFS = (("insts", "name"), ("memlocs", "name"), ("memlocs", "const_path"), ("sets", "name"),
               ("regs", "name"), ("blocks", "name"))
VALUE_REFS = (("insts", "attrs"), ("insts", "pred"), ("operands", "dyn"), ("operands", "extra"),
              ("memlocs", "extra"), ("sets", "shape"), ("sets", "extra"), ("regs", "extra"), ("blocks", "extra"),
              ("carried", "payload"))
PATTERN_REFS = (("operands", "pattern"),)
AUX_VALUE_KINDS = (Kind.SYMBOLIC, Kind.IMM, Kind.SYMBOLIC_IMM, Kind.IMM_ARRAY, Kind.SYMBOLIC_DIMS)

CARRIED_LOOP, CARRIED_UNROLL = 1, 2
MAX_OPERANDS = np.iinfo(np.uint16).max  # the nops column


def clone_name(base: str, iteration: int) -> str:
    """The wire name of clone ``iteration`` of instruction ``base``."""
    return f"{base}-it{iteration}"


CLONE_NAME = re.compile(r"(.+)-it(0|[1-9][0-9]{0,8})")


def split_clone_name(name: str) -> tuple[str, int] | None:
    """``(base, k)`` for a clone's wire name ``<base>-it<k>``, else None (the inverse of :func:`clone_name`)."""
    m = CLONE_NAME.fullmatch(name)
    return (m.group(1), int(m.group(2))) if m else None
