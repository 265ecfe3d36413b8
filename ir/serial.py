"""A module as plain arrays and JSON, for stores that must not pickle.

``module_to_parts`` gives, per function, its column arrays (numpy, fixed
dtypes) plus JSON-able metadata (pools, flags); ``module_from_parts`` is its
inverse.  ``content_hash`` digests exactly those parts, so it is stable
across processes and machines (no ``hash()``, no pickle) and two modules
built the same way by a deterministic pass hash the same.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np

from tusk.ir.columns import Pool, Record, Table, freeze, thaw
from tusk.ir.errors import FormatError
from tusk.ir.expr import AffinePredicate, QuasiAffine, expr_from_json, expr_to_json
from tusk.ir.module import SCHEMAS, Function, Module
from tusk.ir.values import DynamicAPInfo, ImmValue, SymAddr

FORMAT_VERSION = 1


# ---------------------------------------------------------------- pool values


def encode_value(v: Any) -> Any:
    """A tagged JSON form of any value a function's pool may hold."""
    if isinstance(v, Record):
        return {"t": "rec", "v": thaw(v)}
    if isinstance(v, QuasiAffine):
        return {"t": "expr", "v": expr_to_json(v)}
    if isinstance(v, AffinePredicate):
        return {"t": "pred", "v": v.to_json()}
    if isinstance(v, SymAddr):
        return {"t": "sym", "o": expr_to_json(v.offset), "b": None if v.block is None else expr_to_json(v.block)}
    if isinstance(v, DynamicAPInfo):
        return {"t": "dyn", "v": v.to_json()}
    if isinstance(v, ImmValue):
        return {"t": "imm", "v": encode_value(v.value)}
    if isinstance(v, tuple):
        return {"t": "tup", "v": [encode_value(x) for x in v]}
    if isinstance(v, float):
        return {"t": "f", "v": repr(v)}  # repr keeps nan/inf and every bit of the value
    if isinstance(v, bool) or isinstance(v, int) or isinstance(v, str) or v is None:
        return v
    raise TypeError(f"cannot serialise pool value {v!r}")


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
        from tusk.ir.bir_json import _dyn_info

        return _dyn_info(j["v"], "dyn")
    if t == "imm":
        return ImmValue(decode_value(j["v"]))
    if t == "tup":
        return tuple(decode_value(x) for x in j["v"])
    if t == "f":
        return float(j["v"])
    raise FormatError(f"unknown pool value tag {t!r}")


# ---------------------------------------------------------------- functions and modules


def function_to_parts(fn: Function) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Column arrays keyed ``table.column`` and JSON metadata of one function."""
    arrays = {}
    for table in SCHEMAS:
        t: Table = getattr(fn, table)
        for col, arr in t.arrays().items():
            arrays[f"{table}.{col}"] = np.ascontiguousarray(arr)
    meta = {
        "name": fn.name,
        "kind": fn.kind,
        "attrs": sorted(fn.attrs),
        "extras": thaw(fn.extras),
        "strings": list(fn.strings.items),
        "patterns": [[list(p) for p in pat] for pat in fn.patterns.items],
        "values": [encode_value(v) for v in fn.values.items],
    }
    return arrays, meta


def function_from_parts(arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> Function:
    fn = Function(meta["name"], meta["kind"], set(meta["attrs"]))
    fn.extras = Record.of(meta["extras"])
    fn.strings = Pool(meta["strings"], exact=True)
    fn.patterns = Pool((tuple(tuple(p) for p in pat) for pat in meta["patterns"]), exact=True)
    values: Pool[Any] = Pool()
    # Keep ids: append without interning-order surprises (duplicates cannot occur in a saved pool).
    for j in meta["values"]:
        values.items.append(decode_value(j))
    from tusk.ir.columns import pool_key

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


def module_meta(module: Module) -> dict[str, Any]:
    return {
        "format": FORMAT_VERSION,
        "arch": module.arch,
        "version": module.version,
        "attributes": thaw(module.attributes),
        "artifact_dir": module.artifact_dir,
        "queues": thaw(module.queues),
        "extras": thaw(module.extras),
        "functions": [f.name for f in module.functions],
    }


def module_to_parts(module: Module) -> tuple[dict[str, Any], list[tuple[dict[str, np.ndarray], dict[str, Any]]]]:
    return module_meta(module), [function_to_parts(f) for f in module.functions]


def module_from_parts(meta: dict[str, Any], functions: list[tuple[dict[str, np.ndarray], dict[str, Any]]]) -> Module:
    if meta.get("format") != FORMAT_VERSION:
        raise FormatError(f"stored module has format {meta.get('format')!r}, expected {FORMAT_VERSION}")
    fns = [function_from_parts(a, m) for a, m in functions]
    return Module(fns, arch=meta["arch"], version=meta["version"], attributes=Record.of(meta["attributes"]),
                  artifact_dir=meta["artifact_dir"], queues=freeze(meta["queues"]), extras=Record.of(meta["extras"]))


def content_hash(module: Module) -> str:
    """SHA-256 over the module's parts: column bytes with their dtypes, and canonical JSON."""
    h = hashlib.sha256()
    meta, fns = module_to_parts(module)
    h.update(_canon(meta))
    for arrays, fmeta in fns:
        h.update(_canon(fmeta))
        for key in sorted(arrays):
            arr = arrays[key]
            h.update(f"{key}:{arr.dtype.str}:{arr.shape}".encode())
            h.update(memoryview(np.ascontiguousarray(arr)).cast("B"))
    return h.hexdigest()


def _canon(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
