"""Columnar BIR-JSON: the writer's and the loader's bulk paths.

Writer.  An unrolled function is mostly clones: instructions that differ from
one another only in their clone iteration (the ``-it<k>`` of their name), the
element offsets of their physical access patterns and the iterations of the
instructions they depend on.  The writer groups the instructions of a block,
chunk by chunk, by everything else (a 64-bit signature over their columns,
then checked column by column against the group's first member), renders
each group once with placeholders, and fills the placeholders of all members
from the numpy columns at once: digits are computed arithmetically and the
lines are assembled in one byte array.  No Python runs per cloned
instruction; instructions in small groups (originals, loops) are rendered
one by one.  Memory is bounded by the chunk, not by the function.

Loader.  See :func:`try_load`: lines that are whole instructions are grouped
by their text with every digit masked, each group's first line is read by
the ordinary reader, and the digit runs that differ between members (clone
iteration, offsets, dependency iterations) are parsed with numpy into the
columns.  Anything else (other layouts, other spellings) goes through the
ordinary reader, so both paths build the same module.
"""

from __future__ import annotations

import itertools
import os
import re
from typing import Any

import numpy as np
import orjson

from tusk.ir import wire
from tusk.ir.enums import Kind
from tusk.ir.errors import TuskError
from tusk.ir.module import Function, Module, _ranges, split_clone_name

CHUNK = 16384          # instructions rendered at once
_MISSING = object()
MIN_GROUP = 6          # smaller groups are rendered one by one
_SEP = b",\n"


# ====================================================================== writing


def write_blocks(fn: Function, render: Any, out: Any) -> None:
    """Write ``fn``'s blocks (the value of its ``blocks`` key) to ``out``.

    Rows are in program preorder, so a block's rows lie in a range of rows, with the rows of its
    loops' bodies between them; each range is scanned a window at a time (no per-row index of the
    whole function is built)."""
    from tusk.ir.bir_json import _SPLICE, _SPLICE_JSON, _dump

    children: dict[int, list[int]] = {}
    for b, parent in enumerate(fn.blocks["parent"].tolist()):
        if parent >= 0:
            children.setdefault(parent, []).append(b)
    loops = np.asarray(sorted(children), dtype=np.int64)
    bcol = fn.insts["block"]
    writer = _Templates(fn, render)
    at = getattr(out, "at", lambda row: True)

    def next_row(b: int, lo: int, hi: int) -> int:
        """The first row of block ``b`` in [lo, hi), else hi."""
        for w in range(lo, hi, CHUNK):
            hit = np.flatnonzero(bcol[w:min(w + CHUNK, hi)] == b)
            if len(hit):
                return w + int(hit[0])
        return hi

    def block(b: int, lo: int, hi: int) -> None:
        before, after = _dump(_block_head(fn, b)).split(_SPLICE_JSON)
        out.write(before)
        out.write(b"[")
        first = True
        w = lo
        while w < hi:
            e = min(w + CHUNK, hi)
            rows = np.flatnonzero(bcol[w:e] == b) + w
            a, z = np.searchsorted(loops, [w, e]) if len(loops) else (0, 0)
            lp = loops[a:z]
            lp = lp[bcol[lp] == b] if len(lp) else lp
            if len(lp):
                i = int(lp[0])
                rows = rows[rows < i]
            if len(rows):
                if at(int(rows[0])):  # a part renders only the runs that start in it
                    out.write(b"\n" if first else b",\n")
                    writer.write_run(rows, out)
                first = False
            if not len(lp):
                w = e
                continue
            at(i)
            out.write(b"\n" if first else b",\n")
            first = False
            d = render.inst(i)
            d["blocks"] = _SPLICE
            before_i, after_i = _dump(d).split(_SPLICE_JSON)
            out.write(before_i)
            end = next_row(b, i + 1, hi)
            out.write(b"[")
            for k, c in enumerate(children[i]):
                out.write(b",\n" if k else b"\n")
                block(c, i + 1, end)
            out.write(b"\n]")
            out.write(after_i)
            w = end
        out.write(b"\n]")
        out.write(after)

    out.write(b"[")
    n = len(bcol)
    for k, b in enumerate(fn.top_blocks()):
        out.write(b",\n" if k else b"\n")
        block(b, 0, n)
    out.write(b"\n]")


def _block_head(fn: Function, b: int) -> dict:
    from tusk.ir.bir_json import _SPLICE, jsonable

    d, patch = wire.split(fn.record(fn.blocks.get("extra", b)))
    d = jsonable(d)
    d["name"] = fn.strings[fn.blocks.get("name", b)]
    d["instructions"] = _SPLICE
    if patch:
        wire.apply(d, {k: v for k, v in patch.items() if k != "instructions"})
    return d


_M1, _M2 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9)


def _mix(h: np.ndarray, v: np.ndarray) -> np.ndarray:
    """One step of a 64-bit hash (wrapping arithmetic)."""
    x = (h ^ v.astype(np.uint64)) * _M2
    return x ^ (x >> np.uint64(31))


_MULT = np.array([  # odd 64-bit multipliers (drawn once from numpy's default_rng(20260511))
    0x7dc8afcad18e5f85, 0x3dd8aae96e113e93, 0x46a3a2e7b4ac78f9, 0x4b9ab2259023d745, 0x4a8222c778f0bfc9,
    0x22d839a8c0fdb87d, 0x4fd6ade6fad0dfd3, 0x2816d1cd464eff6b, 0x6f2832ba40031133, 0x3dadbd459d6def95,
    0x2911be1de045d391, 0x392855b825aae7ab, 0x6656e9c9f12fefe9, 0x40f261be81bd7887, 0x4758019e194104cd,
    0x51d8fb54e3fbbf79, 0x2c1267ffc11629e5, 0x3b6c1fc9e775fb7f, 0x08b0a2f1092b3cf7, 0x6f059d972917ce3f,
    0x3c82b741fac8f813, 0x26016a72b86b9b0f, 0x4e9076118168e597, 0x30d89cd1a6a8d885, 0x5034c704295adb63,
    0x5a168b89f2757fa1, 0x64e372595fcb0623, 0x2b3236b31da4be9d, 0x38b1cd9baccc4e9d, 0x22390dccfd57787f,
    0x25ceec6729e4ae93, 0x6009f23534359441, 0x7aa058bc8825d13f, 0x7e4bb15b3f18bac7, 0x60c38d624ead1215,
    0x1c25827b46eb9551, 0x1a988328a5b408a3, 0x510a5564aab9c5ff, 0x6275e3c3cea9734d, 0x32c688dc46202623,
], dtype=np.uint64)


def _lin(cols: list[np.ndarray], first: int = 0) -> np.ndarray:
    """A cheap 64-bit signature of rows of several columns (collisions are caught by the caller's check)."""
    h = cols[0].astype(np.uint64) * _MULT[first]
    for k, c in enumerate(cols[1:], first + 1):
        h += c.astype(np.uint64) * _MULT[k]
    return _mix(h, h >> np.uint64(29))


def _segment_sums(values: np.ndarray, owner_starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Wrapping uint64 sums of consecutive segments (lengths ``counts``) of ``values``."""
    cs = np.zeros(len(values) + 1, dtype=np.uint64)
    np.cumsum(values, out=cs[1:])
    ends = owner_starts + counts
    return cs[ends] - cs[owner_starts]


def _ndigits(v: np.ndarray) -> np.ndarray:
    """Characters of each integer's decimal spelling (with the minus sign)."""
    return _digit_count(np.abs(v)) + (v < 0)


def _digit_count(a: np.ndarray) -> np.ndarray:
    """Decimal digits of non-negative integers (of any shape)."""
    if not len(a):
        return np.zeros(0, dtype=np.int64)
    top = int(a.max())
    if top >= 1 << 32:
        return np.searchsorted(_POW10[1:], a, side="right") + 1
    a32 = a.astype(np.uint32)   # one comparison per power of ten up to the largest value: cheaper than a log
    n = np.ones(a.shape, dtype=np.int64)
    for k in range(1, len(str(top))):
        n += a32 >= np.uint32(10 ** k)
    return n


def _mask_ints(value: Any, leaves: list[int], repl: Any = None) -> Any:
    """``value`` with every integer (not bool) replaced, in sorted-key order; the integers go to
    ``leaves``.  ``repl(k)`` gives the replacement of the k-th (default: one fixed marker)."""
    t = type(value)
    if t is int:
        leaves.append(value)
        return repl(len(leaves) - 1) if repl else "\u0000int"
    if t is dict:
        return {k: _mask_ints(value[k], leaves, repl) for k in sorted(value)}
    if t is list:
        return [_mask_ints(v, leaves, repl) for v in value]
    return value


class _Template:
    __slots__ = ("const_len", "parts", "slots")

    def __init__(self, parts: list[bytes], slots: list[tuple[str, int]]):
        self.parts = parts
        self.slots = slots
        self.const_len = sum(len(p) for p in parts)


class _Layout:
    """A template as one chunk spells it: constant slots spelled in, the others ("pad": right-aligned in a
    field of fixed width; "var": as many characters as the row's value has, per layout class)."""

    __slots__ = ("const_len", "modes", "raw")

    def __init__(self, t: _Template, consts: dict[int, int], modes: list[tuple[str, int]]):
        parts = [t.parts[0]]
        for j in range(len(t.slots)):
            if j in consts:
                parts[-1] += str(consts[j]).encode() + t.parts[j + 1]
            else:
                parts.append(t.parts[j + 1])
        self.raw = parts
        self.modes = modes
        self.const_len = sum(len(p) for p in parts) + sum(w for m, w in modes if m == "pad")


class _RecordFacts:
    """What the templates need of each record, in arrays indexed by record id, so that a chunk looks its
    rows' records up with numpy; only records a chunk meets for the first time are asked of
    :class:`_Templates` (one by one)."""

    def __init__(self, owner: _Templates, n_values: int):
        self.owner = owner
        self.n = n_values
        size = n_values + 256                               # rows without a record: one entry per opcode
        self.opcode = np.full(size, -1, dtype=np.int64)     # the opcode the shape below was found for
        self.ok = np.zeros(size, dtype=bool)
        self.shape = np.zeros(size, dtype=np.int64)
        self.leaves = np.zeros((size, 1), dtype=np.int64)
        self.nleaf = np.zeros(size, dtype=np.int64)
        self.fixed = np.full(size, -1, dtype=np.int8)       # offset spelled as the document did: 1/0/-1 unknown

    def lookup(self, attrs: np.ndarray, opcode: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(templatable, shape id, integer leaves (rows, leaves)) of each row's attribute record."""
        opc = opcode.astype(np.int64)
        a = attrs.astype(np.int64)
        a = np.where(a < 0, self.n + opc, a)     # (the empty record's shape depends on the opcode alone)
        miss = self.opcode[a] != opc
        if miss.any():
            ro = np.unique(a[miss] * 256 + opc[miss])
            for x in ro.tolist():
                at, o = x // 256, x % 256
                rid = at if at < self.n else -1
                sid, lv = self.owner.shape(rid, o)
                if len(lv) > self.leaves.shape[1]:
                    grown = np.zeros((len(self.leaves), len(lv)), dtype=np.int64)
                    grown[:, :self.leaves.shape[1]] = self.leaves
                    self.leaves = grown
                self.leaves[at] = 0
                self.leaves[at, :len(lv)] = lv
                self.nleaf[at] = len(lv)
                self.shape[at] = sid
                self.ok[at] = self.owner.attrs_ok(rid)
                self.opcode[at] = o
            still = self.opcode[a] != opc       # a record met with two opcodes: those rows the slow way
            if still.any():
                return self._slow(attrs, opcode)
        width = max(int(self.nleaf[a].max()) if len(a) else 0, 1)
        return self.ok[a], self.shape[a], self.leaves[a, :width]

    def _slow(self, attrs: np.ndarray, opcode: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        ro = (attrs.astype(np.int64) + 1) * 256 + opcode
        uro, roinv = np.unique(ro, return_inverse=True)
        shapes = [self.owner.shape(int(x) // 256 - 1, int(x) % 256) for x in uro.tolist()]
        nleaf = max((len(sh[1]) for sh in shapes), default=0)
        leaf_u = np.zeros((len(uro), max(nleaf, 1)), dtype=np.int64)
        for u, (_, lv) in enumerate(shapes):
            leaf_u[u, :len(lv)] = lv
        ok = np.array([self.owner.attrs_ok(int(x) // 256 - 1) for x in uro.tolist()], dtype=bool)
        return ok[roinv], np.array([sh[0] for sh in shapes], dtype=np.int64)[roinv], leaf_u[roinv]

    def offset_fixed(self, extra: np.ndarray) -> np.ndarray:
        """Whether each operand's extra record spells its offset as the document did."""
        e = extra.astype(np.int64)
        e = np.where(e < 0, self.n, e)
        f = self.fixed[e]
        if (f < 0).any():
            for x in np.unique(e[f < 0]).tolist():
                self.fixed[x] = self.owner.offset_fixed(x if x < self.n else -1)
            f = self.fixed[e]
        return f.astype(bool)


class _Templates:
    """Groups a function's instructions by everything but their slots and fills templates."""

    def __init__(self, fn: Function, render: Any):
        self.fn, self.render = fn, render
        ins, ops = fn.insts, fn.operands
        self.cols = {c: ins[c] for c in ("opcode", "engine", "name", "iter", "attrs", "pred", "nops", "ops")}
        self.op = {c: ops[c] for c in ops.names}
        self.dep_dst, self.dep_src, self.dep_kind = render.dep_dst, render.dep_src, render.dep_kind
        self.name_col, self.iter_col = ins["name"], ins["iter"]
        self.carried_dst = np.unique(fn.carried["dst"]) if len(fn.carried) else np.zeros(0, np.int64)
        self.templates: dict[tuple, _Template | None] = {}
        self.by_signature: dict[bytes, _Template | None] = {}
        self.records = _RecordFacts(self, len(fn.values))
        # layouts and skeleton lines recur from chunk to chunk (the templates they come from are kept)
        self.layouts: dict[tuple, _Layout] = {}
        self.skeletons: dict[tuple, tuple[bytes, list[int], list[int], list[int]]] = {}
        self._attrs_ok: dict[int, bool] = {}
        self._shapes: dict[tuple[int, int], tuple[int, tuple[int, ...]]] = {}
        self._shape_ids: dict[Any, int] = {}
        self._offset_fixed: dict[int, bool] = {}
        self.sentinel = f"\u0001{os.getpid()}:{id(self)}:"

    # ------------------------------------------------------------------ per-record facts (cached)
    def shape(self, rid: int, opcode: int) -> tuple[int, tuple[int, ...]]:
        """(shape id, integer leaves) of an attribute record: records that differ only in their integers
        (a MaybeAffine value folded per clone, say) share a shape, and their integers become slots."""
        hit = self._shapes.get((rid, opcode))
        if hit is None:
            from tusk.ir.bir_json import derived_keys, jsonable

            d, patch = wire.split(self.fn.record(rid))
            key: Any = ("record", rid, opcode)
            leaves: list[int] = []
            if not patch:
                plain = jsonable(d)
                masked = _mask_ints(plain, leaves)
                if all(-(1 << 62) < v < (1 << 62) for v in leaves):
                    key = (orjson.dumps(masked, option=orjson.OPT_SORT_KEYS),
                           orjson.dumps(derived_keys(opcode, plain), option=orjson.OPT_SORT_KEYS))
                else:  # an integer beyond the columns' range: this record is its own shape
                    leaves = []
            sid = self._shape_ids.setdefault(key, len(self._shape_ids))
            hit = self._shapes[(rid, opcode)] = (sid, tuple(leaves))
        return hit

    def attrs_ok(self, rid: int) -> bool:
        """Instructions with this record can be templated (no patch of their dependency spelling)."""
        hit = self._attrs_ok.get(rid)
        if hit is None:
            keys = wire.patched_keys(self.fn.record(rid))
            hit = self._attrs_ok[rid] = not (keys & {"dependencies", "loop_carried_dependencies",
                                                      "unroll_dependencies"})
        return hit

    def offset_fixed(self, rid: int) -> bool:
        """Operands with this extra record spell their offset as the document did (not a slot)."""
        hit = self._offset_fixed.get(rid)
        if hit is None:
            hit = self._offset_fixed[rid] = "offset" in wire.patched_keys(self.fn.record(rid))
        return hit

    # ------------------------------------------------------------------ a run of leaf instructions
    def write_run(self, rows: np.ndarray, out: Any) -> None:
        """Write instructions ``rows`` separated by ",\\n" (no separator after the last)."""
        last = None
        for s in range(0, len(rows), CHUNK):
            for piece in self.chunk(rows[s:s + CHUNK]):
                if last is not None:
                    out.write(last)
                last = piece
        if last is not None:
            out.write(memoryview(last)[:-2])

    def chunk(self, R: np.ndarray) -> list[bytes | memoryview]:
        """Instructions ``R``, each followed by ",\\n", in pieces."""
        from tusk.ir.bir_json import _dump

        n = len(R)
        if n < MIN_GROUP:
            return [b"".join(_dump(self.render.inst(int(i))) + _SEP for i in R.tolist())]
        c = self.cols
        R = R.astype(np.int64)
        opcode, engine, name, it = c["opcode"][R], c["engine"][R], c["name"][R], c["iter"][R]
        attrs, pred, nops, start = c["attrs"][R], c["pred"][R], c["nops"][R].astype(np.int64), c["ops"][R]
        iterflag = it >= 0
        # rows the templates do not cover
        generic = np.isin(R, self.carried_dst) if len(self.carried_dst) else np.zeros(n, dtype=bool)
        # attribute records by shape: their integers are slots (per-record facts kept in tables by record)
        ok, shape, self.leafvals = self.records.lookup(attrs, opcode)
        generic |= ~ok
        # operands: (role, kind, dtype, memloc, pattern, aux, dyn, extra, offset unless a slot)
        J = _ranges(start, nops)
        owner = np.repeat(np.arange(n), nops)
        k_in = J - np.repeat(start, nops)
        op = self.op
        oj = {col: op[col][J] for col in ("role", "kind", "dtype", "memloc", "pattern", "aux", "dyn", "extra",
                                          "offset")}
        fixed = self.records.offset_fixed(oj["extra"])
        slot_off = (oj["kind"] == Kind.PHYSICAL) & ~fixed
        sig_off = np.where(slot_off, 0, oj["offset"])
        h = _lin([oj[c] for c in ("role", "kind", "dtype", "memloc", "pattern", "aux", "dyn", "extra")]
                 + [sig_off, slot_off, k_in])
        op_starts = np.zeros(n, dtype=np.int64)
        if n:
            np.cumsum(nops[:-1], out=op_starts[1:])
        ops_h = _segment_sums(h, op_starts, nops)
        # dependencies: (source name, whether it is a clone, kind); the source's iteration is a slot
        Rd = R.astype(self.dep_dst.dtype)  # keys of the column's type: no copy of the column per search
        dlo = np.searchsorted(self.dep_dst, Rd, "left")
        dhi = np.searchsorted(self.dep_dst, Rd, "right")
        ndeps = (dhi - dlo).astype(np.int64)
        D = _ranges(dlo, ndeps)
        dk_in = D - np.repeat(dlo, ndeps)
        dsrc_rows = self.dep_src[D]
        d_iter = self.iter_col[dsrc_rows]
        dj = {"name": self.name_col[dsrc_rows], "clone": d_iter >= 0, "kind": self.dep_kind[D]}
        dh = _lin([dj["name"], dj["clone"], dj["kind"], dk_in], 11)
        dep_starts = np.zeros(n, dtype=np.int64)
        if n:
            np.cumsum(ndeps[:-1], out=dep_starts[1:])
        deps_h = _segment_sums(dh, dep_starts, ndeps)
        hh = _mix(_lin([opcode, engine, name, iterflag, shape, pred, nops, ndeps], 20), ops_h)
        hh = _mix(hh, deps_h)
        hh[generic] = np.arange(int(generic.sum()), dtype=np.uint64) ^ np.uint64(0xFFFF000000000000)
        uniq, first, inv, counts = np.unique(hh, return_index=True, return_inverse=True, return_counts=True)
        rep = first[inv]
        # check every member against its group's first member, column by column
        bad = generic.copy()
        for arr in (opcode, engine, name, iterflag, shape, pred, nops, ndeps):
            bad |= arr != arr[rep]
        if len(J):
            rep_pos = op_starts[rep][owner] + np.minimum(k_in, nops[rep][owner] - 1)
            ob = (sig_off != sig_off[rep_pos]) | (slot_off != slot_off[rep_pos])
            for col in ("role", "kind", "dtype", "memloc", "pattern", "aux", "dyn", "extra"):
                ob |= oj[col] != oj[col][rep_pos]
            bad[owner[ob]] = True
        if len(D):
            downer = np.repeat(np.arange(n), ndeps)
            rep_dpos = dep_starts[rep][downer] + np.minimum(dk_in, ndeps[rep][downer] - 1)
            db = np.zeros(len(D), dtype=bool)
            for col in ("name", "clone", "kind"):
                db |= dj[col] != dj[col][rep_dpos]
            bad[downer[db]] = True
        big = counts[inv] >= MIN_GROUP
        templ = big & ~bad
        # per group: the template (rendered once per distinct signature, cached across chunks)
        groups: dict[int, _Template] = {}
        # a group's identity as bytes of its first member's columns (what template() keys on), so that a
        # template seen in an earlier chunk costs a few slices, not a tuple of Python integers
        ins_key = np.stack([opcode, engine, name, iterflag, shape, pred, nops, ndeps], axis=1).astype(np.int64)
        ops_key = np.stack([oj[c] for c in ("role", "kind", "dtype", "memloc", "pattern", "aux", "dyn", "extra")]
                           + [sig_off, slot_off], axis=1).astype(np.int64)
        deps_key = np.stack([dj["name"], dj["clone"], dj["kind"], np.minimum(d_iter, 0)], axis=1).astype(np.int64)
        for g in np.unique(inv[templ]).tolist():
            r = int(first[g])
            a, b = int(op_starts[r]), int(dep_starts[r])
            sig = (ins_key[r].tobytes() + ops_key[a:a + int(nops[r])].tobytes()
                   + deps_key[b:b + int(ndeps[r])].tobytes())
            t = self.by_signature.get(sig, _MISSING)
            if t is _MISSING:
                t = self.by_signature[sig] = self.template(int(R[r]), int(start[r]), int(nops[r]), int(dlo[r]),
                                                           int(ndeps[r]), slot_off[a:a + int(nops[r])])
            if t is not None:
                groups[g] = t
        if groups:
            has_t = np.zeros(len(uniq), dtype=bool)
            has_t[list(groups)] = True
            templ &= has_t[inv]
        # slot values of templated rows, and this chunk's layout of each group: a slot whose value is the
        # same in every member is spelled into the template; an offset is right-aligned in a field as
        # wide as its widest value (JSON allows the spaces); an iteration inside a name is spelled as it is,
        # and its width joins the group to make the row's layout class
        layouts: dict[int, _Layout] = {}
        gids = list(groups)
        trows = np.flatnonzero(templ)
        order = trows[np.argsort(inv[trows], kind="stable")]
        gr_inv = inv[order]
        bnd = np.flatnonzero(np.diff(gr_inv, prepend=-1)) if len(order) else np.zeros(0, np.int64)
        # integers of attribute records that are the same in every member are spelled in (decided on the
        # records: one row per group suffices); the other slots are candidates
        lv = self.leafvals[order]
        leaf_vary = (np.minimum.reduceat(lv, bnd, axis=0) != np.maximum.reduceat(lv, bnd, axis=0)) \
            if len(order) else np.zeros((0, lv.shape[1]), bool)
        cand: dict[int, list[int]] = {}
        rec_const: dict[int, dict[int, int]] = {}
        for b_, r0 in enumerate(bnd.tolist()):
            g = int(gr_inv[r0])
            c, rc = [], {}
            for j, (kind, k) in enumerate(groups[g].slots):
                if kind == "attr" and not leaf_vary[b_, k]:
                    rc[j] = int(lv[r0, k])
                else:
                    c.append(j)
            cand[g], rec_const[g] = c, rc
        S = max([len(c) for c in cand.values()] + [1])
        values = np.zeros((n, S), dtype=np.int64)
        var_w = np.zeros((n, S), dtype=np.int64)
        lengths = np.zeros(n, dtype=np.int64)
        if len(order):
            # every candidate slot of every templated row at once: kind (0 name, 1 dependency, 2 offset,
            # 3 attribute integer) and index
            gpos = np.full(len(uniq), -1, dtype=np.int64)
            gpos[gids] = np.arange(len(gids))
            kinds = np.full((len(gids), S), -1, dtype=np.int64)
            ks = np.zeros((len(gids), S), dtype=np.int64)
            for a_, g in enumerate(gids):
                for jj, j in enumerate(cand.get(g, [])):
                    kind, k = groups[g].slots[j]
                    kinds[a_, jj] = ("name", "dep", "off", "attr").index(kind)
                    ks[a_, jj] = k
            gr = gpos[gr_inv]
            K, KK = kinds[gr], ks[gr]
            it_o = it[order].astype(np.int64)[:, None]
            dsrc = self.iter_col[self.dep_src[np.minimum(dlo[order][:, None] + KK, len(self.dep_src) - 1)]] \
                if len(self.dep_src) else np.zeros_like(KK)
            offs = op["offset"][np.minimum(start[order][:, None] + KK, len(op["offset"]) - 1)]
            RV = np.where(K == 0, it_o, np.where(K == 1, dsrc, offs)).astype(np.int64)
            if (K == 3).any():
                RV = np.where(K == 3, np.take_along_axis(lv, np.minimum(KK, lv.shape[1] - 1), axis=1), RV)
            RV[K < 0] = 0
            gmin = np.minimum.reduceat(RV, bnd, axis=0)
            gmax = np.maximum.reduceat(RV, bnd, axis=0)
            ND = _digit_count(np.abs(RV)) + (RV < 0)
            wmax = np.maximum.reduceat(ND, bnd, axis=0)
            const = gmin == gmax
            keep = np.full((len(bnd), S), -1, dtype=np.int64)   # kept slot -> its column in RV
            for b_, r0 in enumerate(bnd.tolist()):
                g = int(gr_inv[r0])
                t = groups[g]
                consts, modes, cols = dict(rec_const[g]), [], []
                for jj, j in enumerate(cand[g]):
                    kind = t.slots[j][0]
                    if const[b_, jj]:
                        consts[j] = int(gmin[b_, jj])
                    else:
                        modes.append(("pad", int(wmax[b_, jj])) if kind in ("off", "attr") else ("var", 0))
                        cols.append(jj)
                keep[b_, :len(cols)] = cols
                lkey = (id(t), tuple(consts.items()), tuple(modes))
                lay = self.layouts.get(lkey)
                if lay is None:
                    lay = self.layouts[lkey] = _Layout(t, consts, modes)
                layouts[g] = lay
            rows_keep = keep[np.cumsum(np.diff(gr, prepend=-1) != 0) - 1]     # (rows, S) per row
            valid = rows_keep >= 0
            src = np.where(valid, rows_keep, 0)
            V = np.take_along_axis(RV, src, axis=1)
            values[order] = np.where(valid, V, 0)
            Kk = np.take_along_axis(K, src, axis=1)
            NDk = np.take_along_axis(ND, src, axis=1)
            var = valid & (Kk < 2)
            vw = np.where(var, NDk * 2 + (V < 0), 0)
            var_w[order] = vw
            const_len = np.array([layouts[int(gr_inv[r0])].const_len for r0 in bnd.tolist()], dtype=np.int64)
            lengths[order] = const_len[np.cumsum(np.diff(gr, prepend=-1) != 0) - 1] + (vw >> 1).sum(axis=1)
        generic_rows = np.flatnonzero(~templ)
        texts = [_dump(self.render.inst(int(R[i]))) for i in generic_rows.tolist()]
        if texts:
            lengths[generic_rows] = [len(t) for t in texts]
        # layout class of each row (-1: rendered one by one)
        cls = np.full(n, -1, dtype=np.int64)
        if templ.any():
            key = inv[templ].astype(np.int64)
            span = int(key.max()) + 1
            for j in range(var_w.shape[1]):  # group, then the width of each variable slot, packed
                col = var_w[templ, j]
                if col.any():
                    top = int(col.max()) + 1
                    if span * top >= 1 << 62:  # no room left: renumber densely first
                        _, key = np.unique(key, return_inverse=True)
                        key = key.reshape(-1)
                        span = int(key.max()) + 1
                    key = key * top + col
                    span *= top
            cls[templ] = key
        return _assemble(n, cls, inv, layouts, values, var_w, lengths, generic_rows, texts, self.skeletons)

    # ------------------------------------------------------------------ templates
    def template(self, i: int, start: int, nops: int, dlo: int, ndeps: int, slot_off: np.ndarray) -> _Template | None:
        """The template of instruction ``i`` (its slots: clone iteration, dependency iterations, offsets)."""
        from tusk.ir.bir_json import _dump

        fn, render = self.fn, self.render
        op = self.op
        rid, opc = int(self.cols["attrs"][i]), int(self.cols["opcode"][i])
        shape_id = self.shape(rid, opc)[0]
        key = (opc, int(self.cols["engine"][i]), int(self.cols["name"][i]),
               int(self.cols["iter"][i]) >= 0, shape_id, int(self.cols["pred"][i]),
               tuple((int(op["role"][j]), int(op["kind"][j]), int(op["dtype"][j]), int(op["memloc"][j]),
                      int(op["pattern"][j]), int(op["aux"][j]), int(op["dyn"][j]), int(op["extra"][j]),
                      None if slot_off[j - start] else int(op["offset"][j])) for j in range(start, start + nops)),
               tuple((int(self.name_col[self.dep_src[d]]), int(self.iter_col[self.dep_src[d]]) >= 0,
                      int(self.dep_kind[d]), None if self.iter_col[self.dep_src[d]] >= 0
                      else int(self.iter_col[self.dep_src[d]])) for d in range(dlo, dlo + ndeps)))
        if key in self.templates:
            return self.templates[key]
        s = self.sentinel
        slots: list[tuple[str, int]] = []
        marks: dict[str, tuple[str, int]] = {}

        def mark(kind: str, k: int) -> str:
            text = f"{s}{kind}{k}\u0001"
            marks[text] = (kind, k)
            return text

        name = None
        n = int(self.cols["name"][i])
        if n >= 0 and self.cols["iter"][i] >= 0:
            name = f"{fn.strings[n]}-it{mark('name', 0)}"
        deps = []
        from tusk.ir.enums import EDGE_NAMES

        for k, d in enumerate(range(dlo, dlo + ndeps)):
            sn, si = int(self.name_col[self.dep_src[d]]), int(self.iter_col[self.dep_src[d]])
            base = None if sn < 0 else fn.strings[sn]
            if si >= 0 and base is not None:
                deps.append([f"{base}-it{mark('dep', k)}", EDGE_NAMES[int(self.dep_kind[d])]])
            else:
                deps.append([render.name(int(self.dep_src[d])), EDGE_NAMES[int(self.dep_kind[d])]])
        offsets = {k: mark("off", k) for k in range(nops) if slot_off[k]}
        attrs = None
        if self.shape(rid, opc)[1]:
            from tusk.ir.bir_json import jsonable

            plain, _ = wire.split(fn.record(rid))
            attrs = _mask_ints(jsonable(plain), [], lambda k: mark("attr", k))
        d = render.inst(i, name=name, deps=deps if ndeps else [], offsets=offsets, attrs=attrs)
        text = _dump(d)
        parts: list[bytes] = []
        pos = 0
        enc = {m: _dump(m)[1:-1] for m in marks}  # the JSON-escaped spelling of each mark
        found = []
        for m, e in enc.items():
            at = text.find(e)
            if at < 0 or text.find(e, at + 1) >= 0:
                self.templates[key] = None
                return None
            kind = marks[m][0]
            if kind in ("off", "attr"):  # a string in the template, an integer in the output: drop the quotes
                found.append((at - 1, at + len(e) + 1, marks[m]))
            else:
                found.append((at, at + len(e), marks[m]))
        for a, b, slot in sorted(found):
            parts.append(text[pos:a])
            slots.append(slot)
            pos = b
        parts.append(text[pos:])
        t = _Template(parts, slots)
        self.templates[key] = t
        return t


_POW10 = np.array([10 ** k for k in range(19)], dtype=np.int64)


def _assemble(n: int, cls: np.ndarray, inv: np.ndarray, layouts: dict, values: np.ndarray, widths: np.ndarray,
              lengths: np.ndarray, generic_rows: np.ndarray, texts: list[bytes],
              skeletons: dict[tuple, tuple[bytes, list[int], list[int], list[int]]]) -> list[bytearray]:
    """The chunk's lines, each followed by ",\n", in one byte array.

    Each layout class has one skeleton line (its constant bytes, blanks where its numbers go); the chunk
    is its rows' skeletons (and the one-by-one rendered lines) joined in order, then every number of
    every row is written into it at once, digit position by digit position.  The work per class is a
    little Python; the work per row and per number is numpy over the whole chunk, so many small classes
    (rotated buffers, per-clone records) cost no more than a few large ones."""
    classes, first, cinv = np.unique(cls, return_index=True, return_inverse=True)
    skels: list[bytes] = []
    f_col: list[list[int]] = []
    f_width: list[list[int]] = []
    f_slot: list[list[int]] = []
    for k, r0 in zip(classes.tolist(), first.tolist()):
        if k >= 0:
            lay = layouts[int(inv[r0])]
            key = (id(lay), *widths[r0].tolist())
            hit = skeletons.get(key)
            if hit is None:
                hit = skeletons[key] = _skeleton(lay, widths[r0])
        else:
            hit = (b"", [], [], [])
        skels.append(hit[0])
        f_col.append(hit[1])
        f_width.append(hit[2])
        f_slot.append(hit[3])
    lines = list(map(skels.__getitem__, cinv.reshape(-1).tolist()))
    for r, text in zip(generic_rows.tolist(), texts):
        lines[r] = text + _SEP
    buf = bytearray().join(lines)
    counts = np.array([len(c) for c in f_col], dtype=np.int64)
    if counts.any():
        starts = np.zeros(len(counts), dtype=np.int64)
        np.cumsum(counts[:-1], out=starts[1:])
        cinv = cinv.reshape(-1)
        per_row = counts[cinv]
        idx = _ranges(starts[cinv], per_row)
        owner = np.repeat(np.arange(n), per_row)
        row_start = np.zeros(n, dtype=np.int64)
        np.cumsum(lengths[:-1] + 2, out=row_start[1:])
        flat = list(itertools.chain.from_iterable(f_col))
        fw = np.asarray(list(itertools.chain.from_iterable(f_width)), dtype=np.int64)[idx]
        end = row_start[owner] + np.asarray(flat, dtype=np.int64)[idx] + fw - 1  # last character of the field
        v = values[owner, np.asarray(list(itertools.chain.from_iterable(f_slot)), dtype=np.int64)[idx]]
        _write_numbers(np.frombuffer(buf, dtype=np.uint8), end, fw, v)
    return [buf]


def _skeleton(t: _Layout, w: np.ndarray) -> tuple[bytes, list[int], list[int], list[int]]:
    """The line of a layout class with blanks for its numbers; their columns, widths and slots."""
    cols: list[int] = []
    widths: list[int] = []
    slots: list[int] = []
    head: list[bytes] = []
    col = 0
    wl = w.tolist()
    for j, part in enumerate(t.raw):
        head.append(part)
        col += len(part)
        if j < len(t.modes):
            mode, fixed = t.modes[j]
            n = fixed if mode == "pad" else wl[j] >> 1
            cols.append(col)
            widths.append(n)
            slots.append(j)
            head.append(b" " * n)
            col += n
    head.append(_SEP)
    return b"".join(head), cols, widths, slots


def _write_numbers(out: np.ndarray, end: np.ndarray, width: np.ndarray, v: np.ndarray) -> None:
    """Spell integers ``v`` right-aligned (blanks before them) in the fields ending at ``end``.

    Fields are taken by width, so that each width's fields are one (width, fields) array of characters
    filled digit position by digit position (32-bit arithmetic where the numbers allow) and stored with
    one assignment."""
    if not len(v):
        return
    for w in np.flatnonzero(np.bincount(width)).tolist():
        if w == 0:
            continue
        sel = np.flatnonzero(width == w)
        x = v[sel]
        a = np.abs(x)
        q = a.astype(np.uint32 if int(a.max()) < (1 << 32) else np.uint64)  # 32-bit division is much faster
        chars = np.empty((w, len(sel)), dtype=np.uint8)
        for d in range(w - 1, -1, -1):
            nq = q // 10
            q -= nq * 10
            q += 48
            chars[d] = q
            q = nq
        # positions before a number's first digit are blanks, and the one just before it its sign
        short = a < 10 ** (w - 1) if w <= 18 else np.zeros(len(a), dtype=bool)
        if short.any():
            for d in range(w - 1):
                blank = a < 10 ** (w - 1 - d) if w - 1 - d <= 18 else np.ones(len(a), dtype=bool)
                if not blank.any():
                    break
                chars[d, blank] = 32
        neg = np.flatnonzero(x < 0)
        if len(neg):
            chars[w - 1 - _digit_count(a[neg]), neg] = 45
        out[(end[sel] - (w - 1))[None, :] + np.arange(w)[:, None]] = chars


# ====================================================================== loading


BUILD_LINES = 1 << 14     # lines built column-wise at once
READ_BYTES = 1 << 21       # the file is read this much at a time (temporaries stay below malloc's mmap threshold)
MIN_FAST_BYTES = 1 << 20   # smaller files go to the ordinary reader
LEAF_MAX = 1 << 16         # longer lines are never one instruction
MAX_FAMILIES = 1 << 15     # more distinct line shapes than this: not clone-shaped, use the ordinary reader
_DIGITS = bytes.maketrans(b"0123456789", b"##########")
_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|-?[0-9][0-9.eE+-]*|true|false|null|[{}\[\]:,]')
_RUN = re.compile(rb"[0-9]+")


class _Fallback(Exception):
    """The columnar path does not apply; the ordinary reader takes the file."""


def try_loads(data: bytes, file: str | None) -> Module | None:
    """:func:`try_load` for text in memory."""
    if len(data) < MIN_FAST_BYTES:
        return None
    try:
        return _ColumnLoad(file, data).load()
    except (_Fallback, TuskError, ValueError, KeyError, IndexError, TypeError, OverflowError, RecursionError,
            orjson.JSONDecodeError, UnicodeDecodeError, OSError, EOFError):
        return None


def try_load(path: str) -> Module | None:
    """The module in ``path`` read column-wise, or None: the ordinary reader then reads the file (and
    reports any error in it).  Both build the same module."""
    try:
        size = os.path.getsize(path)
    except OSError:
        return None
    if size < (MIN_FAST_BYTES >> 3 if path.endswith(".gz") else MIN_FAST_BYTES):
        return None
    try:
        return _ColumnLoad(path).load()
    except (_Fallback, TuskError, ValueError, KeyError, IndexError, TypeError, OverflowError, RecursionError,
            orjson.JSONDecodeError, UnicodeDecodeError, OSError, EOFError):
        return None


class _Family:
    """Lines alike but for their digits: which digit runs are slots, and the sub-templates seen so far."""

    __slots__ = ("nruns", "slots", "slot_cols", "const_cols", "sign", "generic", "subs")

    def __init__(self, line: bytes):
        self.subs: dict[bytes, int] = {}
        self.generic = False
        obj = orjson.loads(line)
        if type(obj) is not dict:
            raise _Fallback("not an instruction")
        runs = _runs_with_paths(line)
        self.nruns = len(runs)
        if self.nruns != len(_RUN.findall(line)):
            raise _Fallback("digit runs not accounted for")
        deps = obj.get("dependencies", [])
        if ("loop_carried_dependencies" in obj or "unroll_dependencies" in obj or "blocks" in obj
                or not _canonical_deps(deps)):
            self.generic = True
        order = _operand_order(obj)
        slots: list[tuple[str, int]] = []
        cols: list[int] = []
        sign: list[int] = []
        for r, (path, tok, last, neg) in enumerate(runs):
            kind = None
            if path == ("name",) and tok == "str" and last and type(obj.get("name")) is str \
                    and split_clone_name(obj["name"]):
                kind = ("name", 0)
            elif (len(path) == 3 and path[0] == "dependencies" and path[2] == 0 and tok == "str" and last
                  and type(deps) is list and split_clone_name(deps[path[1]][0])):
                kind = ("dep", path[1])
            elif len(path) == 3 and path[2] == "offset" and tok == "int" and (path[0], path[1]) in order:
                kind = ("off", order[(path[0], path[1])])
            if kind is not None:
                slots.append(kind)
                cols.append(r)
                sign.append(-1 if neg else 1)
        self.slots = slots
        self.slot_cols = np.asarray(cols, dtype=np.int64)
        self.const_cols = np.setdiff1d(np.arange(self.nruns), self.slot_cols)
        self.sign = np.asarray(sign, dtype=np.int64)


def _canonical_deps(deps: Any) -> bool:
    if type(deps) is not list:
        return False
    names = set()
    for d in deps:
        if type(d) is not list or len(d) != 2 or type(d[0]) is not str or type(d[1]) is not str or d[0] in names:
            return False
        names.add(d[0])
    return True


def _operand_order(obj: dict) -> dict[tuple[str, int], int]:
    """(role key, index) of each physical_ap operand -> its position among the instruction's operand rows
    (the reader appends ins, then indirection_ins, then outs)."""
    out = {}
    k = 0
    for key in ("ins", "indirection_ins", "outs"):
        ops = obj.get(key, [])
        if type(ops) is not list:
            raise _Fallback("operands are not a list")
        for i, o in enumerate(ops):
            if type(o) is dict and o.get("kind") == "physical_ap" and type(o.get("offset")) is int:
                out[(key, i)] = k
            k += 1
    return out


def _runs_with_paths(line: bytes) -> list[tuple[tuple, str, bool, bool]]:
    """Every run of digits in a one-line JSON object, in order: (path of the value it is in, "key" | "str" |
    "int" | "num", whether it is the token's last run, whether the token is a negative number)."""
    out: list[tuple[tuple, str, bool, bool]] = []
    stack: list[list] = []   # frames: [is_object, key or index, expecting a key]
    pos = 0
    for m in _TOKEN.finditer(line):
        if line[pos:m.start()].strip():
            raise _Fallback("unexpected text")
        pos = m.end()
        tok = m.group()
        c = tok[:1]
        if c in (b"{", b"["):
            stack.append([c == b"{", None if c == b"{" else 0, c == b"{"])
            continue
        if c in (b"}", b"]"):
            stack.pop()
            continue
        if c == b":":
            stack[-1][2] = False
            continue
        if c == b",":
            top = stack[-1]
            if top[0]:
                top[2] = True
            else:
                top[1] += 1
            continue
        if c == b'"':
            runs = _RUN.findall(tok)
            if stack and stack[-1][0] and stack[-1][2]:  # an object key
                stack[-1][1] = orjson.loads(tok)
                kind = "key"
            else:
                kind = "str"
            path = _path(stack)
            for k in range(len(runs)):
                out.append((path, kind, k == len(runs) - 1, False))
            continue
        runs = _RUN.findall(tok)
        kind = "int" if _RUN.fullmatch(tok.lstrip(b"-")) else "num"
        for k in range(len(runs)):
            out.append((_path(stack), kind, k == len(runs) - 1, tok[:1] == b"-"))
    if stack or line[pos:].strip():
        raise _Fallback("not one whole object")
    return out


def _path(stack: list[list]) -> tuple:
    return tuple(f[1] for f in stack)


def _distinct_rows(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(distinct rows, row -> its distinct row, each distinct row's first row) of a 2-D array of
    non-negative integers."""
    zero = np.zeros(1, dtype=np.int64)
    if not a.shape[1]:
        return a[:1], np.zeros(len(a), dtype=np.int64), zero
    vary = np.flatnonzero((a != a[0]).any(axis=0))
    if not len(vary):
        return a[:1], np.zeros(len(a), dtype=np.int64), zero
    sub = a[:, vary]
    bits = [int(sub[:, j].max()).bit_length() for j in range(sub.shape[1])]
    if sum(bits) <= 62:  # one exact integer per row
        key = np.zeros(len(a), dtype=np.int64)
        for j, b in enumerate(bits):
            key = (key << b) | sub[:, j]
        _, first, inv = np.unique(key, return_index=True, return_inverse=True)
        return a[first], inv.reshape(-1), first
    _, first, inv = np.unique(sub, axis=0, return_index=True, return_inverse=True)
    return a[first], inv.reshape(-1), first


class _Run:
    __slots__ = ("tids", "slots", "generic")

    def __init__(self) -> None:
        self.tids: list[np.ndarray] = []     # per batch: sub-template id per line (-1 - k: generic line k)
        self.slots: list[np.ndarray] = []    # per batch: (lines, slots) values
        self.generic: list[bytes] = []       # texts of lines read one by one


class _ColumnLoad:
    """Scan a file line by line (column-wise for runs of one-line instructions), then read the rest."""

    def __init__(self, path: str | None, data: bytes | None = None):
        self.path, self.data = path, data
        self.nonce = os.urandom(6).hex()
        self.marker = f"\x00tusk-run:{self.nonce}:"  # as read back; the text spells \x00 as \\u0000
        self.skeleton: list[bytes] = []
        self.families: dict[bytes, int] = {}
        self.fams: list[_Family] = []
        self.sub_lines: list[bytes] = []        # sub-template id -> its first line
        self.sub_family: list[int] = []
        self.runs: list[_Run] = []
        self.cur: _Run | None = None
        self.comma = False
        self.protos: dict[int, Any] = {}
        self.used = 0
        self.lines = 0

    # ------------------------------------------------------------------ scanning
    def load(self) -> Module:
        from tusk.ir.bir_json import _guarded, _open_read, _Reader

        if self.data is not None:
            buf = memoryview(self.data)
            at = 0
            while at < len(buf):
                end = self.data.rfind(b"\n", at, at + READ_BYTES) + 1 if at + READ_BYTES < len(buf) else len(buf)
                if end <= at:  # a line longer than the window: take it whole
                    end = self.data.find(b"\n", at + READ_BYTES) + 1 or len(buf)
                piece = bytes(buf[at:end])
                self.scan(piece if piece.endswith(b"\n") else piece + b"\n")
                at = end
        else:
            with _open_read(self.path) as fh:
                rest = b""
                while True:
                    data = fh.read(READ_BYTES)
                    if not data:
                        break
                    data = rest + data
                    cut = data.rfind(b"\n") + 1
                    if cut:
                        self.scan(data[:cut])
                    rest = data[cut:]
                if rest:
                    self.scan(rest + b"\n")
        self.close_run()
        if not self.runs:
            raise _Fallback("no run of one-line instructions")
        text = b"".join(self.skeleton)
        self.skeleton = []
        root = orjson.loads(text)
        reader = _Reader(self.path)
        reader.expand = self
        module = _guarded(reader, lambda: reader.module(root))
        if self.used != len(self.runs):
            raise _Fallback("a run was not where instructions are")
        return module

    def close_run(self) -> None:
        if self.cur is not None:
            self.skeleton.append(b",\n" if self.comma else b"\n")
            self.cur = None

    def scan(self, chunk: bytes) -> None:
        tchunk = chunk.translate(_DIGITS)
        tlines = tchunk.split(b"\n")[:-1]  # the chunk ends with a newline
        length = np.fromiter(map(len, tlines), dtype=np.int64, count=len(tlines))
        starts = np.zeros(len(length), dtype=np.int64)
        np.cumsum(length[:-1] + 1, out=starts[1:])
        ends = starts + length
        buf = np.frombuffer(chunk, dtype=np.uint8)
        safe_s = np.minimum(starts + 1, len(buf) - 1)
        last, before = buf[np.maximum(ends - 1, 0)], buf[np.maximum(ends - 2, 0)]
        leaf = ((length >= 2) & (length < LEAF_MAX) & (buf[starts] == 123) & (buf[safe_s] == 34)
                & ((last == 125) | ((last == 44) & (before == 125))))
        if chunk.find(b"\\") >= 0:  # lines with an escape are read by the ordinary reader
            esc = np.flatnonzero(buf == 92)
            leaf[np.searchsorted(starts, esc, "right") - 1] = False
        if not leaf.any():
            self.close_run()
            self.skeleton.append(chunk)
            return
        self.hash_free = chunk.find(b"#") < 0
        cuts = np.flatnonzero(np.diff(leaf.astype(np.int8))) + 1
        bounds = [0, *cuts.tolist(), len(leaf)]
        for a, b in zip(bounds[:-1], bounds[1:]):
            if not leaf[a]:
                self.close_run()
                self.skeleton.append(chunk[starts[a]:ends[b - 1] + 1])
                continue
            if self.cur is None:
                self.cur = _Run()
                self.skeleton.append(b'"\\u0000tusk-run:' + self.nonce.encode() + b":" + str(len(self.runs)).encode()
                                     + b'"')
                self.runs.append(self.cur)
            self.batch(chunk, buf, tchunk, tlines[a:b], starts[a:b], ends[a:b])
            self.comma = bool(buf[ends[b - 1] - 1] == 44)

    def batch(self, chunk: bytes, buf: np.ndarray, tchunk: bytes, keys: list[bytes], ls: np.ndarray,
              le: np.ndarray) -> None:
        run = self.cur
        self.lines += len(ls)
        core = le - (buf[le - 1] == 44)
        fid = np.fromiter(map(self.families.get, keys, itertools.repeat(-1)), dtype=np.int64, count=len(keys))
        for i in np.flatnonzero(fid < 0).tolist():
            f = self.families.get(keys[i])
            if f is None:
                if len(self.fams) >= MAX_FAMILIES:
                    raise _Fallback("too many line shapes")
                f = len(self.fams)
                self.fams.append(_Family(chunk[ls[i]:core[i]]))
                self.families[keys[i]] = f
            fid[i] = f
        # every digit run of these lines, with its value (digit by digit from the run's end)
        lo, hi = int(ls[0]), int(le[-1])
        seg = buf[lo:hi]
        if self.hash_free:
            isd = np.frombuffer(tchunk, dtype=np.uint8)[lo:hi] == 35
        else:
            isd = (seg >= 48) & (seg <= 57)
        x = isd.view(np.int8)  # the region starts with "{" and ends with "}" or ",": runs alternate start, end
        edges = np.flatnonzero(x[1:] != x[:-1]) + 1
        rs, re_ = edges[0::2], edges[1::2]
        rl = re_ - rs
        if len(rl) and rl.max() > 18:
            raise _Fallback("a number too long for the columnar path")
        vals = seg[re_ - 1].astype(np.int64) - 48
        live = np.flatnonzero(rl > 1)
        for k in range(1, int(rl.max()) if len(rl) else 0):
            vals[live] += (seg[re_[live] - 1 - k].astype(np.int64) - 48) * _POW10[k]
            live = live[rl[live] > k + 1]
        lead0 = (seg[rs] == 48) & (rl > 1)
        first_run = np.searchsorted(rs, ls - lo)
        tids = np.empty(len(ls), dtype=np.int32)
        width = max((len(self.fams[f].slots) for f in np.unique(fid).tolist()), default=0)
        slots = np.zeros((len(ls), max(width, 1)), dtype=np.int64)
        for f in np.unique(fid).tolist():
            fam = self.fams[f]
            members = np.flatnonzero(fid == f)
            if fam.generic:
                self._generic(run, chunk, ls, core, members, tids)
                continue
            idx = first_run[members][:, None] + np.arange(fam.nruns)
            if fam.nruns and idx.max() >= len(vals):
                raise _Fallback("digit runs do not line up")
            V = vals[idx] if fam.nruns else np.zeros((len(members), 0), np.int64)
            bad = np.zeros(len(members), dtype=bool)
            if len(fam.slot_cols):
                sc = idx[:, fam.slot_cols]
                bad |= lead0[sc].any(axis=1)
                for j, (kind, _) in enumerate(fam.slots):
                    if kind != "off":
                        bad |= rl[sc[:, j]] > 9  # a clone iteration has at most 9 digits
                slots[members, :len(fam.slot_cols)] = V[:, fam.slot_cols] * fam.sign
            if bad.any():
                self._generic(run, chunk, ls, core, members[bad], tids)
                members, V = members[~bad], V[~bad]
            if not len(members):
                continue
            ukeys, inv, ufirst = _distinct_rows(V[:, fam.const_cols])
            sub_of = np.empty(len(ukeys), dtype=np.int32)
            for u, k in enumerate(map(bytes, ukeys)):
                sub = fam.subs.get(k)
                if sub is None:
                    if len(self.sub_lines) >= max(MAX_FAMILIES, self.lines // 4):
                        raise _Fallback("not clone-shaped: most lines would be read one by one anyway")
                    i = int(members[ufirst[u]])
                    sub = fam.subs[k] = len(self.sub_lines)
                    self.sub_lines.append(chunk[ls[i]:core[i]])
                    self.sub_family.append(f)
                sub_of[u] = sub
            tids[members] = sub_of[inv]
        run.tids.append(tids)
        if len(slots) and np.abs(slots).max() < (1 << 31):
            slots = slots.astype(np.int32)  # kept until the run is read: as small as the values allow
        run.slots.append(slots)

    @staticmethod
    def _generic(run: _Run, chunk: bytes, ls: np.ndarray, core: np.ndarray, members: np.ndarray,
                 tids: np.ndarray) -> None:
        for i in members.tolist():
            tids[i] = -1 - len(run.generic)
            run.generic.append(chunk[ls[i]:core[i]])

    # ------------------------------------------------------------------ expanding a run while reading
    def run(self, reader: Any, fn: Function, text: str, where: str, block: int) -> None:
        k = int(text.rsplit(":", 1)[1])
        if not 0 <= k < len(self.runs) or self.runs[k] is None:
            raise _Fallback("run marker out of place")
        run = self.runs[k]
        self.runs[k] = None  # type: ignore[call-overload]
        self.used += 1
        tids = np.concatenate(run.tids)
        run.tids = []
        width = max(s.shape[1] for s in run.slots)
        dtype = np.result_type(*[s.dtype for s in run.slots])
        slots = np.zeros((len(tids), width), dtype=dtype)
        at = 0
        for s in run.slots:
            slots[at:at + len(s), :s.shape[1]] = s
            at += len(s)
        run.slots = []
        # stretches of lines built column-wise, and the lines read one by one, in order
        gen = tids < 0
        cuts = np.flatnonzero(np.diff(gen.astype(np.int8))) + 1
        bounds = [0, *cuts.tolist(), len(tids)]
        for a, b in zip(bounds[:-1], bounds[1:]):
            if gen[a]:
                for t in tids[a:b].tolist():
                    reader.inst(fn, orjson.loads(run.generic[-1 - t]), where, block)
            else:
                self.build(reader, fn, tids[a:b], slots[a:b], where, block)

    def proto(self, reader: Any, fn: Function, sub: int, where: str, block: int) -> dict:
        """Read a sub-template's first line with the ordinary reader; keep its rows as a prototype."""
        p = self.protos.get(sub)
        if p is not None:
            return p
        fam = self.fams[self.sub_family[sub]]
        n_ins, n_ops, mark = len(fn.insts), len(fn.operands), reader.refs.mark()
        checks = (len(reader.deps_to_check), len(reader.carried_to_check))
        reader.inst(fn, orjson.loads(self.sub_lines[sub]), where, block)
        if len(fn.insts) != n_ins + 1 or (len(reader.deps_to_check), len(reader.carried_to_check)) != checks:
            raise _Fallback("a template is not one plain instruction")
        row = {c: fn.insts[c][n_ins] for c in fn.insts.names}
        ops = {c: fn.operands[c][n_ops:].copy() for c in fn.operands.names}
        refs = reader.refs.rollback(mark)
        fn.insts.truncate(n_ins)
        fn.operands.truncate(n_ops)
        if any(refs["flavour"]):
            raise _Fallback("carried references in a template")
        p = {"row": row, "ops": ops, "refs": refs, "fam": fam}
        self.protos[sub] = p
        return p

    def build(self, reader: Any, fn: Function, tids: np.ndarray, slots: np.ndarray, where: str, block: int) -> None:
        """Append the instructions of sub-templates ``tids`` with slot values ``slots``, column-wise (a slice
        of lines at a time, so the temporaries stay small)."""
        from tusk.ir.module import INST_SCHEMA, OPERAND_SCHEMA

        subs = np.unique(tids)
        index = np.full(int(subs.max()) + 1, -1, dtype=np.int64)
        index[subs] = np.arange(len(subs))
        protos = [self.proto(reader, fn, int(s), where, block) for s in subs.tolist()]
        nsub = len(protos)
        # per sub-template: instruction columns, and where its slots go
        P = {c: np.array([int(p["row"][c]) for p in protos], dtype=np.int64) for c, _ in INST_SCHEMA}
        name_slot = np.full(nsub, -1, dtype=np.int64)
        op_tables: dict[str, list] = {c: [] for c, _ in OPERAND_SCHEMA}
        op_slot: list[np.ndarray] = []
        op_start = np.zeros(nsub, dtype=np.int64)
        ref_cols: dict[str, list] = {f: [] for f in ("name", "iter", "kind")}
        ref_slot: list[np.ndarray] = []
        ref_start = np.zeros(nsub, dtype=np.int64)
        nrefs = np.zeros(nsub, dtype=np.int64)
        o = r = 0
        for k, p in enumerate(protos):
            fam = p["fam"]
            nops = len(p["ops"]["role"])
            osl = np.full(nops, -1, dtype=np.int64)
            nr = len(p["refs"]["dst"])
            rsl = np.full(nr, -1, dtype=np.int64)
            for j, (kind, q) in enumerate(fam.slots):
                if kind == "name":
                    name_slot[k] = j
                elif kind == "off":
                    osl[q] = j
                else:
                    rsl[q] = j
            for c in op_tables:
                op_tables[c].append(p["ops"][c])
            op_slot.append(osl)
            op_start[k] = o
            o += nops
            for f in ref_cols:
                ref_cols[f].append(np.asarray(p["refs"][f], dtype=np.int64))
            ref_slot.append(rsl)
            ref_start[k] = r
            nrefs[k] = nr
            r += nr
        OPT = {c: np.concatenate(v) for c, v in op_tables.items()}
        OSL = np.concatenate(op_slot)
        RN, RI, RK = (np.concatenate(ref_cols[f]) for f in ("name", "iter", "kind"))
        RSL = np.concatenate(ref_slot)
        nops_all = P["nops"][index[tids]]
        fn.insts.reserve(len(fn.insts) + len(tids))
        fn.operands.reserve(len(fn.operands) + int(nops_all.sum()))
        for s0 in range(0, len(tids), BUILD_LINES):
            local = index[tids[s0:s0 + BUILD_LINES]]
            sl = slots[s0:s0 + BUILD_LINES]
            n = len(local)
            rows0 = len(fn.insts)
            lines = np.arange(n)
            ns = name_slot[local]
            it = np.where(ns >= 0, sl[lines, np.maximum(ns, 0)], P["iter"][local])
            nops = P["nops"][local]
            J = _ranges(op_start[local], nops)
            owner = np.repeat(lines, nops)
            OP = {c: v[J] for c, v in OPT.items()}
            osl = OSL[J]
            OP["offset"] = np.where(osl >= 0, sl[owner, np.maximum(osl, 0)], OP["offset"])
            starts = np.zeros(n, dtype=np.int64)
            if n:
                np.cumsum(nops[:-1], out=starts[1:])
            starts += len(fn.operands)
            fn.operands.extend(len(J), **OP)
            cols = {c: P[c][local] for c, _ in INST_SCHEMA}
            cols.update(block=block, iter=it, ops=starts)
            fn.insts.extend(n, **cols)
            nr = nrefs[local]
            if nr.any():
                K = _ranges(ref_start[local], nr)
                rowner = np.repeat(lines, nr)
                rsl = RSL[K]
                riter = np.where(rsl >= 0, sl[rowner, np.maximum(rsl, 0)], RI[K])
                reader.refs.add_arrays(dst=(rows0 + rowner).astype(np.int32),
                                       block=np.full(len(K), block, dtype=np.int32), name=RN[K].astype(np.int32),
                                       iter=riter.astype(np.int32), kind=RK[K].astype(np.int8),
                                       flavour=np.zeros(len(K), dtype=np.int8),
                                       payload=np.full(len(K), -1, dtype=np.int32))
        fn.invalidate()
