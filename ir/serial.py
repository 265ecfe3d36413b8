"""A module as plain arrays and JSON, for stores that must not pickle, and back.

The parts and the identity (``module_to_parts``, ``content_hash``, ...) are
made by :mod:`tusk.ir.identity` (re-exported here); this module reads them
back into Functions and Modules.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tusk.ir.columns import Pool, Record, Table, freeze, pool_key
from tusk.ir.errors import FormatError
from tusk.ir.expr import AffinePredicate, expr_from_json
from tusk.ir.identity import (
    FORMAT_VERSION,
    content_hash,
    encode_value,
    function_to_parts,
    module_meta,
    module_to_parts,
    parts_hash,
)
from tusk.ir.module import SCHEMAS, Function, Module
from tusk.ir.values import ImmValue, SymAddr

__all__ = ["FORMAT_VERSION", "content_hash", "decode_value", "encode_value", "function_from_parts",
           "function_to_parts", "module_from_parts", "module_meta", "module_to_parts", "parts_hash"]


def decode_value(j: Any) -> Any:
    if not isinstance(j, dict):
        return j
    t = j.get("t")
    if t == "rec":
        return Record.of(j["v"])
    if t == "expr":
        return expr_from_json(j["v"])
    if t == "pred":
        return AffinePredicate.from_json(j["v"])
    if t == "sym":
        return SymAddr(expr_from_json(j["o"]), None if j["b"] is None else expr_from_json(j["b"]))
    if t == "dyn":
        from tusk.ir.bir_json.fields import read_dyn_info

        return read_dyn_info(j["v"], "dyn")
    if t == "imm":
        return ImmValue(decode_value(j["v"]))
    if t == "tup":
        return tuple(decode_value(x) for x in j["v"])
    if t == "f":
        return float(j["v"])
    raise FormatError(f"unknown pool value tag {t!r}")


def function_from_parts(arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> Function:
    fn = Function(meta["name"], meta["kind"], set(meta["attrs"]))
    fn.extras = Record.of(meta["extras"])
    fn.strings = Pool(meta["strings"], exact=True)
    fn.patterns = Pool((tuple(tuple(p) for p in pat) for pat in meta["patterns"]), exact=True)
    values: Pool[Any] = Pool()
    # Keep ids: append without interning-order surprises (duplicates cannot occur in a saved pool).
    for j in meta["values"]:
        values.items.append(decode_value(j))
    values._index = {pool_key(v): i for i, v in enumerate(values.items)}
    fn.values = values
    if len(fn.strings) != len(meta["strings"]) or len(fn.patterns) != len(meta["patterns"]):
        raise FormatError("stored pools contain duplicates")
    for table, schema in SCHEMAS.items():
        cols = {}
        for col, dt in schema:
            key = f"{table}.{col}"
            if key not in arrays:
                raise FormatError(f"stored function {fn.name} lacks column {key}")
            cols[col] = np.asarray(arrays[key], dtype=dt)
        setattr(fn, table, Table.from_arrays(schema, cols))
    return fn


def module_from_parts(meta: dict[str, Any], functions: list[tuple[dict[str, np.ndarray], dict[str, Any]]]) -> Module:
    if meta.get("format") != FORMAT_VERSION:
        raise FormatError(f"stored module has format {meta.get('format')!r}, expected {FORMAT_VERSION}")
    fns = [function_from_parts(a, m) for a, m in functions]
    return Module(fns, arch=meta["arch"], version=meta["version"], attributes=Record.of(meta["attributes"]),
                  artifact_dir=meta["artifact_dir"], queues=freeze(meta["queues"]), extras=Record.of(meta["extras"]))
