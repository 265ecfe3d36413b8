"""A module's one identity: its canonical parts and their digest (no pickle, no ``hash()``).

``module_to_parts`` gives, per function, its column arrays (numpy, fixed
dtypes) plus JSON-able metadata (pools, flags) in *canonical form*: every
pool keeps only the entries some column uses, sorted by their JSON form,
and the id columns are renumbered to match.  So two modules that differ
only in interning order (or in pool entries nothing uses) have the same
parts.  ``content_hash`` digests exactly those parts: it is a module's one
identity (``Module.__eq__`` and the store both use it), stable across
processes and machines.  The inverse, ``module_from_parts``, is in
:mod:`tusk.ir.serial` (it builds Functions; this module only reads them, so
:mod:`tusk.ir.module` can use it without an import cycle).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from blake3 import blake3

from tusk.ir.canonical import canonical_json
from tusk.ir.columns import Record, Table, thaw
from tusk.ir.errors import FormatError
from tusk.ir.expr import AffinePredicate, QuasiAffine, expr_to_json
from tusk.ir.schema import AUX_VALUE_KINDS, CLONE_NAME, PATTERN_REFS, SCHEMAS, STRING_REFS, VALUE_REFS
from tusk.ir.values import DynamicAPInfo, ImmValue, SymAddr

if TYPE_CHECKING:
    from tusk.ir.module import Function, Module

FORMAT_VERSION = 3  # 2: pools in canonical form; 3: BLAKE3 digests


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


def function_to_parts(fn: Function) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Column arrays keyed ``table.column`` and JSON metadata of one function, in canonical form."""
    arrays = {}
    for table in SCHEMAS:
        t: Table = getattr(fn, table)
        for col, arr in t.arrays().items():
            arrays[f"{table}.{col}"] = np.ascontiguousarray(arr)
    _group_memlocs_by_set(arrays)
    aux_values = np.isin(arrays["operands.kind"], AUX_VALUE_KINDS)
    strings = _canonical_pool(arrays, STRING_REFS, _split_clone_names(arrays, list(fn.strings.items)),
                              lambda v: v)
    patterns = _canonical_pool(arrays, PATTERN_REFS, [[list(p) for p in pat] for pat in fn.patterns.items],
                               _canon_text)
    values = _canonical_pool(arrays, VALUE_REFS, [encode_value(v) for v in fn.values.items], _canon_text,
                             aux_values)
    meta = {
        "name": fn.name,
        "kind": fn.kind,
        "attrs": sorted(fn.attrs),
        "extras": thaw(fn.extras),
        "strings": strings,
        "patterns": patterns,
        "values": values,
    }
    return arrays, meta


def _canonical_pool(arrays: dict[str, np.ndarray], refs: tuple, items: list, sort_key,
                    aux_mask: np.ndarray | None = None) -> list:
    """The used entries of a pool, sorted by ``sort_key``; id columns in ``arrays`` renumbered in place
    (on copies: the function's own arrays are never changed)."""
    n = len(items)
    columns: list[tuple[str, np.ndarray | None]] = [(f"{t}.{c}", None) for t, c in refs]
    if aux_mask is not None:
        columns.append(("operands.aux", aux_mask))
    used = np.zeros(n + 1, dtype=bool)
    for key, mask in columns:
        col = arrays[key] if mask is None else arrays[key][mask]
        if len(col):
            ids = col[col >= 0]
            if len(ids) and int(ids.max()) >= n:
                raise FormatError(f"column {key} refers to entry {int(ids.max())} of a pool of {n}")
            used[ids] = True
    keep = np.nonzero(used[:n])[0]
    order = sorted(keep.tolist(), key=lambda i: sort_key(items[i]))
    if len(order) == n and order == list(range(n)):
        return items  # already canonical: nothing to renumber
    remap = np.full(n + 1, -1, dtype=np.int64)  # remap[-1] == -1: "none" stays none
    remap[np.asarray(order, dtype=np.int64)] = np.arange(len(order))
    in_dtype: dict[np.dtype, np.ndarray] = {}  # the map in each column's own dtype: one gather, no cast after it
    for key, mask in columns:
        col = arrays[key]
        table = in_dtype.setdefault(col.dtype, remap.astype(col.dtype))
        if mask is None:
            arrays[key] = table[col]
        elif mask.any():
            out = col.copy()
            out[mask] = table[col[mask]]
            arrays[key] = out
    return [items[i] for i in order]


def _group_memlocs_by_set(arrays: dict[str, np.ndarray]) -> None:
    """Memory locations in the order a file lists them: by set, in their order within it."""
    sets = arrays["memlocs.set"]
    if len(sets) < 2 or (sets[1:] >= sets[:-1]).all():
        return
    order = np.argsort(sets, kind="stable")
    for name, _ in SCHEMAS["memlocs"]:
        arrays[f"memlocs.{name}"] = arrays[f"memlocs.{name}"][order]
    where = np.empty(len(order) + 1, dtype=np.int64)
    where[order] = np.arange(len(order))
    where[-1] = -1
    refs = arrays["operands.memloc"]
    arrays["operands.memloc"] = where[refs].astype(refs.dtype)


def _edges_sorted(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Dependence edges are a set: their row order is not part of the program, so the digest sees
    them sorted.  The stored arrays keep the order a pass made them in (it is the order the
    BIR-JSON writer lists an instruction's dependencies in, kept for round trips), so a module
    read back from the store writes the same bytes as the module that was stored."""
    out = dict(arrays)
    _sort_rows(out, "deps", ("dst", "src", "kind"))
    _sort_rows(out, "carried", ("dst", "src", "kind", "flavour", "payload"))
    return out


def _sort_rows(arrays: dict[str, np.ndarray], table: str, keys: tuple[str, ...]) -> None:
    cols = [arrays[f"{table}.{k}"] for k in keys]
    if len(cols[0]) < 2 or _rows_sorted(cols):
        return
    order = np.lexsort(cols[::-1])  # lexsort's last key is the primary one
    for name, _ in SCHEMAS[table]:
        arrays[f"{table}.{name}"] = arrays[f"{table}.{name}"][order]


def _rows_sorted(cols: list[np.ndarray]) -> bool:
    """Are the rows in lexicographic order of ``cols`` already?  The passes make their edges sorted, and this
    costs a few comparisons per row where sorting them cost a ``lexsort`` (23M edges hashed in a large_matmul
    build: 0.3 s of lexsort, almost all of it on the kernel's chain of steps)."""
    before = np.zeros(len(cols[0]) - 1, dtype=bool)  # row i < row i+1 on the keys compared so far
    tied = np.ones(len(cols[0]) - 1, dtype=bool)
    for c in cols:
        a, b = c[:-1], c[1:]
        before |= tied & (a < b)
        tied &= a == b
        if not (before | tied).all():
            return False
    return True


def _split_clone_names(arrays: dict[str, np.ndarray], strings: list[str]) -> list[str]:
    """An original instruction named like a clone (``x-it3``, as a BIR-JSON file spells one) becomes
    that clone (name ``x``, iteration 3), so a module reads the same whether its clones were made by
    a pass or loaded from a file.  Returns the string pool, with the base names added."""
    iters = arrays["insts.iter"]
    if not len(iters) or not (iters < 0).any():
        return strings
    index = {s: i for i, s in enumerate(strings)}
    base = np.full(len(strings) + 1, -1, dtype=np.int64)
    k = np.zeros(len(strings) + 1, dtype=np.int64)
    for sid, text in enumerate(strings):
        m = CLONE_NAME.fullmatch(text)
        if m:
            b = index.get(m.group(1))
            if b is None:
                b = index[m.group(1)] = len(strings)
                strings.append(m.group(1))
            base[sid], k[sid] = b, int(m.group(2))
    if not (base >= 0).any():
        return strings
    names = arrays["insts.name"]
    rows = np.nonzero((iters < 0) & (base[names] >= 0))[0]
    if len(rows):
        names, iters = names.copy(), iters.copy()
        iters[rows] = k[names[rows]]
        names[rows] = base[names[rows]]
        arrays["insts.name"], arrays["insts.iter"] = names, iters
    return strings


def _canon_text(v: Any) -> str:
    return canonical_json(v)


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


def content_hash(module: Module) -> str:
    """BLAKE3 (256 bits) over the module's canonical parts: column bytes with their dtypes, and canonical JSON.

    BLAKE3, not SHA-256: every step hashes its whole output and every read from the store hashes what it
    read, on the build's critical path; on large_matmul's 155 MB of columns SHA-256 (with the CPU's SHA
    instructions) took 0.086 s and BLAKE3 on one thread 0.022 s.  Both are cryptographic 256-bit digests."""
    return parts_hash(*module_to_parts(module))


def parts_hash(meta: dict[str, Any], fns: list[tuple[dict[str, np.ndarray], dict[str, Any]]]) -> str:
    """:func:`content_hash` of parts already made by :func:`module_to_parts` (the store hashes what it writes)."""
    h = blake3()  # one thread: a worker's task has one core
    h.update(_canon(meta))
    for arrays, fmeta in fns:
        h.update(_canon(fmeta))
        arrays = _edges_sorted(arrays)
        for key in sorted(arrays):
            arr = arrays[key]
            h.update(f"{key}:{arr.dtype.str}:{arr.shape}".encode())
            h.update(np.ascontiguousarray(arr).data.cast("B"))
    return h.hexdigest()


def _canon(obj: Any) -> bytes:
    return canonical_json(obj).encode()
