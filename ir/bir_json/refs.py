"""Name references (dependencies, carried edges) of one function, resolved to row edges together.

The ordinary reader adds references one by one, the columnar loader whole arrays; both resolve here.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from tusk.ir.bir_json.fields import format_error
from tusk.ir.columns import Table
from tusk.ir.module import DEP_SCHEMA, Function, clone_name, split_clone_name


class Refs:
    """Name references of one function (dependencies, carried edges), resolved together.

    Single references are appended to lists; the columnar loader adds whole arrays (``add_arrays``)."""

    FIELDS = ("dst", "block", "name", "iter", "kind", "flavour", "payload")

    def __init__(self) -> None:
        for f in self.FIELDS:
            setattr(self, "_" + f, [])
        self.chunks: list[dict[str, np.ndarray]] = []
        self.where: list[str | None] = []
        self._n = 0

    def add(self, fn: Function, dst: int, block: int, name: str, kind: int, flavour: int, payload: int,
            where: str) -> None:
        split = split_clone_name(name)
        if split:
            self._name.append(fn.s(split[0]))
            self._iter.append(split[1])
        else:
            self._name.append(fn.s(name))
            self._iter.append(-1)
        self._dst.append(dst)
        self._block.append(block)
        self._kind.append(kind)
        self._flavour.append(flavour)
        self._payload.append(payload)
        self.where.append(where)

    def mark(self) -> int:
        """How many single references there are (see :meth:`rollback`)."""
        return len(self._dst)

    def rollback(self, n: int) -> dict[str, list]:
        """Remove the single references added since :meth:`mark` returned ``n``; returns them."""
        out = {f: getattr(self, "_" + f)[n:] for f in self.FIELDS}
        for f in self.FIELDS:
            del getattr(self, "_" + f)[n:]
        del self.where[n:]
        return out

    def add_arrays(self, **cols: np.ndarray) -> None:
        self._flush()
        self.chunks.append(cols)

    TYPES = {"dst": np.int32, "block": np.int32, "name": np.int32, "iter": np.int32, "kind": np.int8,
             "flavour": np.int8, "payload": np.int32}

    def _flush(self) -> None:
        if self._dst:
            self.chunks.append({f: np.asarray(getattr(self, "_" + f), dtype=self.TYPES[f]) for f in self.FIELDS})
            self.chunks[-1]["where"] = self.where  # type: ignore[assignment]
            for f in self.FIELDS:
                setattr(self, "_" + f, [])
            self.where = []

    def all_chunks(self) -> list[dict]:
        self._flush()
        return self.chunks


RESOLVE_SLICE = 1 << 20  # references resolved at once


def resolve_refs(fn: Function, refs: "Refs", fn_where: str, may_repeat: bool = True) -> None:
    """Turn name references into edges: the instruction of that name in the referring block when there is
    exactly one, else the only one in the function; none or several is an error naming the places.

    Dependencies become one edge per (src, dst), the strongest kind, in the order first written
    (``may_repeat=False``: the caller knows no instruction names a source twice).
    """
    chunks = refs.all_chunks()
    if not chunks:
        return
    ins = fn.insts
    ikey = (ins["name"].astype(np.int64) << 32) | (ins["iter"].astype(np.int64) + 1)
    order = np.argsort(ikey, kind="stable")
    skey = ikey[order]
    del ikey
    dep_parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    for chunk in chunks:
        where_list = chunk.get("where")
        for s0 in range(0, len(chunk["dst"]), RESOLVE_SLICE):
            sl = slice(s0, s0 + RESOLVE_SLICE)
            dst = chunk["dst"][sl].astype(np.int64)
            key = (chunk["name"][sl].astype(np.int64) << 32) | (chunk["iter"][sl].astype(np.int64) + 1)

            def where_of(r: int) -> str:
                w = where_list[s0 + r] if where_list is not None else None
                return w or _row_path(fn, int(dst[r]), fn_where)

            src = _lookup(fn, skey, order, key, chunk["block"][sl], dst, fn_where, where_of)
            flavour, kind = chunk["flavour"][sl], chunk["kind"][sl]
            deps = flavour == 0
            dep_parts.append((src[deps].astype(np.int32), dst[deps].astype(np.int32), kind[deps].astype(np.uint8)))
            if not deps.all():
                payload = chunk["payload"][sl]
                car = ~deps
                for a, d, k, f, p in zip(src[car].tolist(), dst[car].tolist(), kind[car].tolist(),
                                         flavour[car].tolist(), payload[car].tolist()):
                    fn.carried.append((a, d, k, f, p))
    del order, skey
    s = np.concatenate([p[0] for p in dep_parts])
    if not len(s):
        return
    d = np.concatenate([p[1] for p in dep_parts])
    k = np.concatenate([p[2] for p in dep_parts])
    del dep_parts
    if may_repeat:
        pair = (d.astype(np.int64) << 32) | s.astype(np.int64)
        sp = np.sort(pair)
        if len(sp) > 1 and (sp[1:] == sp[:-1]).any():  # a pair written twice: one edge, the strongest kind
            uniq, first, inv = np.unique(pair, return_index=True, return_inverse=True)
            best = np.zeros(len(uniq), dtype=np.uint8)
            np.maximum.at(best, inv, k)
            by_first = np.argsort(first, kind="stable")
            s, d, k = s[first[by_first]], d[first[by_first]], best[by_first]
        del pair, sp
    if len(fn.deps):
        s = np.concatenate([fn.deps["src"], s])
        d = np.concatenate([fn.deps["dst"], d])
        k = np.concatenate([fn.deps["kind"], k])
    # rows in destination order, each destination's edges in the order they were written
    if len(d) > 1 and not (d[1:] >= d[:-1]).all():
        o = np.argsort(d, kind="stable")
        s, d, k = s[o], d[o], k[o]
    fn.deps = Table.from_arrays(DEP_SCHEMA, {"src": s, "dst": d, "kind": k})


def _lookup(fn: Function, skey: np.ndarray, order: np.ndarray, key: np.ndarray, blk: np.ndarray, dst: np.ndarray,
            fn_where: str, where_of: Callable[[int], str]) -> np.ndarray:
    """The instruction row each reference names (see :func:`resolve_refs`)."""
    # one search: a key names one row when it is at lo and not at lo + 1 (the right end is searched only
    # for the keys that name several)
    lo = np.searchsorted(skey, key, "left")
    n = len(skey)
    at = skey[np.minimum(lo, n - 1)] == key if n else np.zeros(len(key), dtype=bool)
    again = at & (skey[np.minimum(lo + 1, n - 1)] == key) & (lo + 1 < n) if n else at
    src = np.where(at & ~again, order[np.minimum(lo, n - 1)] if n else -1, -1)
    several = np.flatnonzero(again)
    if len(several):
        hi = lo.copy()
        hi[several] = np.searchsorted(skey, key[several], "right")
        iblock = fn.insts["block"]
        for r in several.tolist():
            matches = order[lo[r]:hi[r]]
            same = matches[iblock[matches] == blk[r]]
            if len(same) == 1:
                src[r] = int(same[0])
                continue
            places = same if len(same) > 1 else matches
            a, b = (_row_path(fn, int(p), fn_where) for p in places[:2])
            scope = "in its block" if len(same) > 1 else "in the function"
            raise format_error(f"ambiguous dependency {_ref_name(fn, int(key[r]))!r}: {scope} it names both {a} and {b}",
                       where_of(r))
    missing = np.flatnonzero(src < 0)
    if len(missing):
        r = int(missing[0])
        raise format_error(f"Unknown dependency {_ref_name(fn, int(key[r]))!r}", where_of(r))
    return src


def _ref_name(fn: Function, key: int) -> str:
    base, it = fn.strings[key >> 32], (key & 0xFFFFFFFF) - 1
    return base if it < 0 else clone_name(base, it)


def _row_path(fn: Function, row: int, fn_where: str) -> str:
    """The JSON path of instruction ``row`` (for messages)."""
    blocks = fn.insts["block"]
    b = int(blocks[row])
    pos = int(np.count_nonzero(blocks[:row] == b))
    path = f".instructions[{pos}]"
    parents = fn.blocks["parent"]
    while True:
        p = int(parents[b])
        siblings = np.flatnonzero(parents == p).tolist()
        path = f".blocks[{siblings.index(b)}]" + path
        if p < 0:
            return fn_where + path
        b = int(blocks[p])
        pos = int(np.count_nonzero(blocks[:p] == b))
        path = f".instructions[{pos}]" + path

