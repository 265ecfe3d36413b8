"""The writer's columnar path: instructions grouped chunk by chunk, each group filled from a template.

An unrolled function is mostly clones: instructions that differ from one another only in their clone
iteration (the ``-it<k>`` of their name), the element offsets of their physical access patterns and
the iterations of the instructions they depend on.  The writer groups the instructions of a block,
chunk by chunk, by everything else (a 64-bit signature over their columns, then checked column by
column against the group's first member), renders each group once with placeholders
(:class:`.layouts.Template`), and fills the placeholders of all members from the numpy columns at once
(:func:`.layouts.assemble`).  No Python runs per cloned instruction; instructions in small groups
(originals, loops) are rendered one by one.  Memory is bounded by the chunk, not by the function.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import orjson

from tusk.ir import wire
from tusk.ir.bir_json.digits import ndigits
from tusk.ir.bir_json.layouts import SEP, Layout, Skeleton, Template, assemble
from tusk.ir.bir_json.policy import SPLICE, SPLICE_JSON, derived_keys, json_bytes, jsonable
from tusk.ir.enums import EDGE_NAMES, Kind
from tusk.ir.module import Function, concat_ranges, distinct

CHUNK = 16384          # instructions rendered at once
MIN_GROUP = 6          # smaller groups are rendered one by one (clones excepted: _templates_of_groups)
NARROW = 8             # templates with at most this many slots form a band of their own


# ====================================================================== writing


def write_blocks(fn: Function, render: Any, out: Any) -> None:
    """Write ``fn``'s blocks (the value of its ``blocks`` key) to ``out``.

    Rows are in program preorder, so a block's rows lie in a range of rows, with the rows of its
    loops' bodies between them; each range is scanned a window at a time (no per-row index of the
    whole function is built)."""
    children: dict[int, list[int]] = {}
    for b, parent in enumerate(fn.blocks["parent"].tolist()):
        if parent >= 0:
            children.setdefault(parent, []).append(b)
    loops = np.asarray(sorted(children), dtype=np.int64)
    bcol = fn.insts["block"]
    writer = Templates(fn, render)
    at = getattr(out, "at", lambda row: True)

    def next_row(b: int, lo: int, hi: int) -> int:
        """The first row of block ``b`` in [lo, hi), else hi."""
        for w in range(lo, hi, CHUNK):
            hit = np.flatnonzero(bcol[w:min(w + CHUNK, hi)] == b)
            if len(hit):
                return w + int(hit[0])
        return hi

    def block(b: int, lo: int, hi: int) -> None:
        before, after = json_bytes(_block_head(fn, b)).split(SPLICE_JSON)
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
            d["blocks"] = SPLICE
            before_i, after_i = json_bytes(d).split(SPLICE_JSON)
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
    d, patch = wire.split(fn.record(fn.blocks.get("extra", b)))
    d = jsonable(d)
    d["name"] = fn.strings[fn.blocks.get("name", b)]
    d["instructions"] = SPLICE
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




class _RecordFacts:
    """What the templates need of each record, in arrays indexed by record id, so that a chunk looks its
    rows' records up with numpy; only records a chunk meets for the first time are asked of
    :class:`Templates` (one by one)."""

    def __init__(self, owner: Templates, n_values: int):
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
            ro = distinct(a[miss] * 256 + opc[miss])
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
            for x in distinct(e[f < 0]).tolist():
                self.fixed[x] = self.owner.offset_fixed(x if x < self.n else -1)
            f = self.fixed[e]
        return f.astype(bool)


class Templates:
    """Groups a function's instructions by everything but their slots and fills templates."""

    def __init__(self, fn: Function, render: Any):
        self.fn, self.render = fn, render
        ins, ops = fn.insts, fn.operands
        self.cols = {c: ins[c] for c in ("opcode", "engine", "name", "iter", "attrs", "pred", "nops", "ops")}
        self.op = ops.arrays()
        self.dep_dst, self.dep_src, self.dep_kind = render.dep_dst, render.dep_src, render.dep_kind
        self.name_col, self.iter_col = ins["name"], ins["iter"]
        self.carried_dst = distinct(fn.carried["dst"]) if len(fn.carried) else np.zeros(0, np.int64)
        self.templates: dict[tuple, Template | None] = {}
        self.by_signature: dict[bytes, Template | None] = {}
        self.records = _RecordFacts(self, len(fn.values))
        # layouts and skeleton lines recur from chunk to chunk (the templates they come from are kept)
        self.layouts: dict[bytes, Layout] = {}
        # per template seen (Template.tid): its slots' kinds (SLOT_KINDS, -1 past the last) and indices
        self.t_kind = np.full((0, 1), -1, dtype=np.int8)
        self.t_k = np.zeros((0, 1), dtype=np.int32)
        self.t_nslots = np.zeros(0, dtype=np.int64)
        self.skeletons: dict[tuple, Skeleton] = {}
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

    def chunk(self, R: np.ndarray) -> list[bytes] | list[bytearray]:
        """Instructions ``R``, each followed by ",\\n", in pieces."""
        if len(R) < MIN_GROUP:
            return [b"".join(json_bytes(self.render.inst(int(i))) + SEP for i in R.tolist())]
        ch = _Chunk(self, R.astype(np.int64))
        self._sign_operands(ch)
        self._sign_dependencies(ch)
        self._group(ch)
        groups = self._templates_of_groups(ch)
        sl = self._fill_slots(ch, groups)
        generic_rows = np.flatnonzero(~ch.templ)
        texts = [json_bytes(self.render.inst(int(ch.R[i]))) for i in generic_rows.tolist()]
        if texts:
            sl.lengths[generic_rows] = [len(t) for t in texts]
        return assemble(ch.n, sl, generic_rows, texts, self.skeletons)

    def _sign_operands(self, ch: _Chunk) -> None:
        """Each row's operands as one signature: (role, kind, dtype, memloc, pattern, aux, dyn, extra,
        offset unless a slot)."""
        ch.J = concat_ranges(ch.start, ch.nops)
        ch.op_owner = np.repeat(np.arange(ch.n), ch.nops)
        ch.k_in = ch.J - np.repeat(ch.start, ch.nops)
        oj = ch.oj = {col: self.op[col][ch.J] for col in (*OPERAND_KEY, "offset")}
        fixed = self.records.offset_fixed(oj["extra"])
        ch.slot_off = (oj["kind"] == Kind.PHYSICAL) & ~fixed
        ch.sig_off = np.where(ch.slot_off, 0, oj["offset"])
        h = _lin([oj[c] for c in OPERAND_KEY] + [ch.sig_off, ch.slot_off, ch.k_in])
        ch.op_starts = _starts(ch.nops)
        ch.ops_h = _segment_sums(h, ch.op_starts, ch.nops)

    def _sign_dependencies(self, ch: _Chunk) -> None:
        """Each row's dependencies as one signature: (source name, whether it is a clone, kind); the
        source's iteration is a slot."""
        Rd = ch.R.astype(self.dep_dst.dtype)  # keys of the column's type: no copy of the column per search
        ch.dlo = np.searchsorted(self.dep_dst, Rd, "left")
        dhi = np.searchsorted(self.dep_dst, Rd, "right")
        ch.ndeps = (dhi - ch.dlo).astype(np.int64)
        ch.D = concat_ranges(ch.dlo, ch.ndeps)
        ch.dk_in = ch.D - np.repeat(ch.dlo, ch.ndeps)
        dsrc_rows = self.dep_src[ch.D]
        ch.d_iter = self.iter_col[dsrc_rows]
        dj = ch.dj = {"name": self.name_col[dsrc_rows], "clone": ch.d_iter >= 0, "kind": self.dep_kind[ch.D]}
        dh = _lin([dj["name"], dj["clone"], dj["kind"], ch.dk_in], 11)
        ch.dep_starts = _starts(ch.ndeps)
        ch.deps_h = _segment_sums(dh, ch.dep_starts, ch.ndeps)

    def _group(self, ch: _Chunk) -> None:
        """Rows grouped by signature, every member checked against its group's first member column by
        column; ``ch.templ``: the rows that may be templated (groups of at least MIN_GROUP members, and
        clones in smaller groups, see :meth:`_templates_of_groups`)."""
        ins_cols = ch.ins_cols()
        hh = _mix(_mix(_lin(ins_cols, 20), ch.ops_h), ch.deps_h)
        hh[ch.generic] = np.arange(int(ch.generic.sum()), dtype=np.uint64) ^ np.uint64(0xFFFF000000000000)
        ch.uniq, ch.first, ch.inv, counts = np.unique(hh, return_index=True, return_inverse=True,
                                                      return_counts=True)
        rep = ch.first[ch.inv]
        bad = ch.generic.copy()
        for arr in ins_cols:
            bad |= arr != arr[rep]
        if len(ch.J):
            owner = ch.op_owner
            rep_pos = ch.op_starts[rep][owner] + np.minimum(ch.k_in, ch.nops[rep][owner] - 1)
            ob = (ch.sig_off != ch.sig_off[rep_pos]) | (ch.slot_off != ch.slot_off[rep_pos])
            for col in OPERAND_KEY:
                ob |= ch.oj[col] != ch.oj[col][rep_pos]
            bad[owner[ob]] = True
        if len(ch.D):
            downer = np.repeat(np.arange(ch.n), ch.ndeps)
            rep_dpos = ch.dep_starts[rep][downer] + np.minimum(ch.dk_in, ch.ndeps[rep][downer] - 1)
            db = np.zeros(len(ch.D), dtype=bool)
            for col in ("name", "clone", "kind"):
                db |= ch.dj[col] != ch.dj[col][rep_dpos]
            bad[downer[db]] = True
        ch.templ = ((counts[ch.inv] >= MIN_GROUP) | ch.iterflag) & ~bad

    def _templates_of_groups(self, ch: _Chunk) -> dict[int, Template]:
        """Per group: its template (rendered once per distinct signature, cached across chunks).  A
        group's identity is the bytes of its first member's columns (what :meth:`template` keys on), so
        that a template seen in an earlier chunk costs a few slices, not a tuple of Python integers.

        A clone's group is templated whatever its size: rotated buffers spread a loop's clones over a ring
        of names, so a chunk holds a few clones of each combination, but the combinations recur chunk
        after chunk and their templates are kept (on large_matmul's final output, 8,560 rows were
        rendered one by one, ~10 % of the writer's time).  What a chunk spells depends on the chunk
        alone (the parts of a document are rendered apart), so whether a group is templated may not
        depend on the chunks before it; the kept templates only save time."""
        groups: dict[int, Template] = {}
        gs = np.flatnonzero(np.bincount(ch.inv[ch.templ], minlength=len(ch.uniq)))  # (ascending, no sort)
        reps = ch.first[gs]
        ins_key = np.stack([c[reps] for c in ch.ins_cols()], axis=1).astype(np.int64)
        ona, dnb = ch.nops[reps], ch.ndeps[reps]
        OJ = concat_ranges(ch.op_starts[reps], ona)
        ops_key = np.stack([ch.oj[c][OJ] for c in OPERAND_KEY] + [ch.sig_off[OJ], ch.slot_off[OJ]],
                           axis=1).astype(np.int64)
        DJ = concat_ranges(ch.dep_starts[reps], dnb)
        deps_key = np.stack([ch.dj["name"][DJ], ch.dj["clone"][DJ], ch.dj["kind"][DJ], np.minimum(ch.d_iter[DJ], 0)],
                            axis=1).astype(np.int64)
        oat, dat = _starts(ona).tolist(), _starts(dnb).tolist()
        for k, (g, r, na, nb) in enumerate(zip(gs.tolist(), reps.tolist(), ona.tolist(), dnb.tolist())):
            a, b = oat[k], dat[k]
            sig = ins_key[k].tobytes() + ops_key[a:a + na].tobytes() + deps_key[b:b + nb].tobytes()
            if sig in self.by_signature:
                t = self.by_signature[sig]
            else:
                o = int(ch.op_starts[r])
                t = self.by_signature[sig] = self.template(int(ch.R[r]), int(ch.start[r]), na, int(ch.dlo[r]), nb,
                                                           ch.slot_off[o:o + na])
            if t is not None:
                groups[g] = t
        has_t = np.zeros(len(ch.uniq), dtype=bool)
        has_t[list(groups)] = True
        ch.templ &= has_t[ch.inv]
        return groups

    def _fill_slots(self, ch: _Chunk, groups: dict[int, Template]) -> _Slots:
        """Slot values of templated rows, and this chunk's layout of each group: a slot whose value is the
        same in every member is spelled into the template; an offset (or an attribute integer) is
        right-aligned in a field as wide as its widest value (JSON allows the spaces); an iteration inside
        a name is spelled as it is, and its width joins the group to make the row's layout class.

        Slots are columns by their place in the template, every group's at once, and the templated rows
        stay in group order (``order``) from here to the assembly: the work per group is one dictionary
        lookup of its layout, and no (rows, slots) table is scattered back to row order.  Groups whose
        templates have few slots (DMAs: a name, a dependency or two, two offsets) and groups with many
        (matmuls with their attribute integers) are two bands, each a table as wide as its widest
        template: one table would be half padding on real kernels."""
        n = ch.n
        trows = np.flatnonzero(ch.templ)
        out = _Slots(n)
        if not len(trows):
            return out
        tid_of = np.zeros(len(ch.uniq), dtype=np.int64)
        for g, t in groups.items():
            tid_of[g] = self._tid(t)
        wide = self.t_nslots[tid_of] > NARROW
        ginv = ch.inv[trows]
        key = ginv + wide[ginv] * len(ch.uniq)   # narrow groups first, each band in group order
        order = trows[np.argsort(key.astype(np.uint16 if len(ch.uniq) < 1 << 15 else np.int64), kind="stable")]
        split = int((~wide[ginv]).sum())
        for lo, hi in ((0, split), (split, len(order))):
            if hi > lo:
                self._fill_band(ch, groups, tid_of, order[lo:hi], out)
        return out

    def _fill_band(self, ch: _Chunk, groups: dict[int, Template], tid_of: np.ndarray, order: np.ndarray,
                   out: _Slots) -> None:
        """:meth:`_fill_slots` for the rows ``order`` (whole groups, in group order) of one band."""
        gr_inv = ch.inv[order]
        bnd = np.flatnonzero(np.diff(gr_inv, prepend=-1))
        bgroups = gr_inv[bnd].tolist()                                   # the group of each boundary
        tids = tid_of[gr_inv[bnd]]
        S = max(int(self.t_nslots[tids].max()), 1)
        at_group = np.cumsum(np.diff(gr_inv, prepend=-1) != 0) - 1     # each row's group (its index in bnd)
        tk = self.t_kind[tids, :S]                                       # slot kinds (-1: no such slot)
        K = tk[at_group]
        RV = self._slot_values(ch, order, K, self.t_k[tids, :S][at_group])
        gmin = np.minimum.reduceat(RV, bnd, axis=0)
        # a slot the same in every member is spelled into the layout, except in groups too small for that
        # to pay: their values change from chunk to chunk, and a new layout and skeleton cost more than
        # writing a few numbers (a spelled constant and a field of its own width are the same bytes)
        big = np.diff(bnd, append=len(order)) >= MIN_GROUP
        const = ((gmin == np.maximum.reduceat(RV, bnd, axis=0)) & big[:, None]) | (tk < 0)
        # characters of the cells of varying slots (a quarter of the cells on real kernels): counted for
        # those alone, as small integers
        vary = ~const[at_group]
        vi = np.flatnonzero(vary)
        v = RV.reshape(-1)[vi]
        nd = ndigits(v).astype(np.int8)
        ND = np.zeros(RV.shape, dtype=np.int8)
        ND.reshape(-1)[vi] = nd
        wmax = np.where(~const & (tk >= 2), np.maximum.reduceat(ND, bnd, axis=0), 0)  # offsets, attribute ints
        # a layout is its template with the constant slots' values and the fields' widths
        lkey = np.concatenate([tids[:, None], const, np.where(const, gmin, 0), wmax], axis=1)
        lay_len = np.zeros(len(bnd), dtype=np.int64)
        for b_, (g, key) in enumerate(zip(bgroups, map(bytes, lkey))):
            lay = self.layouts.get(key)
            if lay is None:
                lay = self.layouts[key] = _layout(groups[g], const[b_], gmin[b_], wmax[b_])
            out.layouts[g] = lay
            lay_len[b_] = lay.const_len
        # names and dependencies are not padded: their widths (2 x characters + sign) make layout classes
        var_w = np.zeros(RV.shape, dtype=np.int8)
        named = K.reshape(-1)[vi] < 2
        var_w.reshape(-1)[vi[named]] = nd[named] * 2 + (v[named] < 0)
        out.add_band(order, gr_inv, RV, var_w)
        length = lay_len[at_group]
        for j in np.flatnonzero(var_w.any(axis=0)).tolist():  # (a column at a time: a sum along the short
            length += var_w[:, j] >> 1                        # axis of a narrow table is slow in numpy)
        out.lengths[order] = length

    def _slot_values(self, ch: _Chunk, order: np.ndarray, K: np.ndarray, KK: np.ndarray) -> np.ndarray:
        """The value of every slot of every templated row (in ``order``; kinds ``K``: 0 name, 1 dependency,
        2 offset, 3 attribute integer, -1 none (0); ``KK`` the slot's index among its kind's): one gather
        from the chunk's values of all four kinds laid end to end (each row's base in each kind's part,
        plus the slot's index; both built once per chunk, for all its bands)."""
        if ch.pool is None:
            n, nd, nj, L = ch.n, len(ch.d_iter), len(ch.oj["offset"]), ch.leafvals.shape[1]
            ch.pool = np.concatenate([ch.it.astype(np.int64), ch.d_iter.astype(np.int64),
                                      ch.oj["offset"].astype(np.int64), ch.leafvals.reshape(-1).astype(np.int64),
                                      np.zeros(1, np.int64)])
            rows = np.arange(n, dtype=np.int64)
            ch.kind_base = np.stack([rows, n + ch.dep_starts, n + nd + ch.op_starts, n + nd + nj + rows * L], axis=1)
        pool = ch.pool
        # each cell's base by its kind: a flat gather (take_along_axis builds 2-D index tuples)
        pick = np.maximum(K, 0).astype(np.intp)
        pick += (order.astype(np.intp) * 4)[:, None]
        idx = ch.kind_base.reshape(-1).take(pick)
        idx += KK
        idx[K < 0] = len(pool) - 1
        return pool.take(idx, mode="clip")

    def _tid(self, t: Template) -> int:
        """The row of template ``t`` in the tables of slot kinds and indices (added on first sight)."""
        if t.tid < 0:
            t.tid = len(self.t_nslots)
            width = max(self.t_kind.shape[1], len(t.slots))
            grown_kind = np.full((t.tid + 1, width), -1, dtype=np.int8)
            grown_k = np.zeros((t.tid + 1, width), dtype=np.int32)
            grown_kind[:t.tid, :self.t_kind.shape[1]] = self.t_kind
            grown_k[:t.tid, :self.t_k.shape[1]] = self.t_k
            for j, (kind, k) in enumerate(t.slots):
                grown_kind[t.tid, j] = SLOT_KINDS.index(kind)
                grown_k[t.tid, j] = k
            self.t_kind, self.t_k = grown_kind, grown_k
            self.t_nslots = np.append(self.t_nslots, len(t.slots))
        return t.tid

    # ------------------------------------------------------------------ templates
    def template(self, i: int, start: int, nops: int, dlo: int, ndeps: int, slot_off: np.ndarray) -> Template | None:
        """The template of instruction ``i`` (its slots: clone iteration, dependency iterations, offsets)."""
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
            plain, _ = wire.split(fn.record(rid))
            attrs = _mask_ints(jsonable(plain), [], lambda k: mark("attr", k))
        d = render.inst(i, name=name, deps=deps if ndeps else [], offsets=offsets, attrs=attrs)
        text = json_bytes(d)
        parts: list[bytes] = []
        pos = 0
        enc = {m: json_bytes(m)[1:-1] for m in marks}  # the JSON-escaped spelling of each mark
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
        t = Template(parts, slots)
        self.templates[key] = t
        return t


OPERAND_KEY = ("role", "kind", "dtype", "memloc", "pattern", "aux", "dyn", "extra")  # an operand's identity
SLOT_KINDS = ("name", "dep", "off", "attr")


class _Chunk:
    """One chunk's rows and what the stages of :meth:`Templates.chunk` find out about them."""

    # operands (Templates._sign_operands): their rows, owner row, index within the row, columns, slots
    J: np.ndarray
    op_owner: np.ndarray
    k_in: np.ndarray
    oj: dict[str, np.ndarray]
    slot_off: np.ndarray
    sig_off: np.ndarray
    op_starts: np.ndarray
    ops_h: np.ndarray
    # dependencies (Templates._sign_dependencies)
    dlo: np.ndarray
    ndeps: np.ndarray
    D: np.ndarray
    dk_in: np.ndarray
    d_iter: np.ndarray
    dj: dict[str, np.ndarray]
    dep_starts: np.ndarray
    deps_h: np.ndarray
    # groups (Templates._group): signature groups, first member, row -> group; rows templated
    uniq: np.ndarray
    first: np.ndarray
    inv: np.ndarray
    templ: np.ndarray
    # every slot value of the chunk end to end, and each row's first in each kind's part (_slot_values)
    pool: np.ndarray | None = None
    kind_base: np.ndarray

    def __init__(self, owner: Templates, R: np.ndarray):
        c = owner.cols
        self.R, self.n = R, len(R)
        self.opcode, self.engine, self.name, self.it = c["opcode"][R], c["engine"][R], c["name"][R], c["iter"][R]
        self.attrs, self.pred, self.start = c["attrs"][R], c["pred"][R], c["ops"][R]
        self.nops = c["nops"][R].astype(np.int64)
        self.iterflag = self.it >= 0
        # rows the templates do not cover
        self.generic = np.isin(R, owner.carried_dst) if len(owner.carried_dst) else np.zeros(self.n, dtype=bool)
        # attribute records by shape: their integers are slots (per-record facts kept in tables by record)
        ok, self.shape, self.leafvals = owner.records.lookup(self.attrs, self.opcode)
        self.generic |= ~ok

    def ins_cols(self) -> list[np.ndarray]:
        """The instruction columns a group shares (the operands' and dependencies' come beside them)."""
        return [self.opcode, self.engine, self.name, self.iterflag, self.shape, self.pred, self.nops, self.ndeps]


def _starts(counts: np.ndarray) -> np.ndarray:
    """Where each row's entries start in the concatenation of all rows' entries."""
    out = np.zeros(len(counts), dtype=np.int64)
    if len(counts):
        np.cumsum(counts[:-1], out=out[1:])
    return out


def _layout(t: Template, const: np.ndarray, value: np.ndarray, width: np.ndarray) -> Layout:
    """Template ``t`` as a chunk spells it: slots ``const`` spelled in with ``value``, the others as fields
    ("pad": ``width`` characters, right-aligned; "var": as many as each row's value has)."""
    consts, modes, cols = {}, [], []
    n = len(t.slots)
    for j, (kind, _), c, v, w in zip(range(n), t.slots, const[:n].tolist(), value[:n].tolist(), width[:n].tolist()):
        if c:
            consts[j] = v
        else:
            modes.append(("pad", w) if kind in ("off", "attr") else ("var", 0))
            cols.append(j)
    return Layout(t, consts, modes, cols)


class _Slots:
    """A chunk's templated rows in bands (see :meth:`Templates._fill_slots`), each band's rows in group
    order, with their slot values and the widths of their variable slots; each group's layout; every
    row's line length.  ``order`` (all bands' rows end to end) and ``gr_inv`` (their groups) index the
    rows by their place; ``base`` is each place's first cell in ``values`` (the bands' tables flat, end to
    end), ``var_w`` the widths of its variable slots."""

    def __init__(self, n: int):
        self.n = n
        self.layouts: dict[int, Layout] = {}
        self.lengths = np.zeros(n, dtype=np.int64)
        self._bands: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        self.order = self.gr_inv = self.base = self.values = np.zeros(0, dtype=np.int64)
        self.var_w = np.zeros((0, 1), dtype=np.int8)

    def add_band(self, order: np.ndarray, gr_inv: np.ndarray, values: np.ndarray, var_w: np.ndarray) -> None:
        self._bands.append((order, gr_inv, values, var_w))
        if len(self._bands) == 1:  # (most chunks: one band, nothing to join)
            self.order, self.gr_inv, self.values, self.var_w = order, gr_inv, values.reshape(-1), var_w
            self.base = np.arange(len(order), dtype=np.int64) * values.shape[1]
            return
        self.order = np.concatenate([b[0] for b in self._bands])
        self.gr_inv = np.concatenate([b[1] for b in self._bands])
        self.values = np.concatenate([b[2].reshape(-1) for b in self._bands])
        starts = np.cumsum([0] + [b[2].size for b in self._bands])
        self.base = np.concatenate([st + np.arange(len(b[0]), dtype=np.int64) * b[2].shape[1]
                                    for st, b in zip(starts.tolist(), self._bands)])
        # the bands' widths in one table (small integers: padding them to the widest band is cheap)
        wmax = max(b[3].shape[1] for b in self._bands)
        self.var_w = np.zeros((len(self.order), wmax), dtype=np.int8)
        at = 0
        for b in self._bands:
            self.var_w[at:at + len(b[0]), :b[3].shape[1]] = b[3]
            at += len(b[0])

    def classes(self) -> np.ndarray:
        """The layout class of each row (-1: rendered one by one): its group, then the width of each
        variable slot, packed into one integer (groups are numbered across the chunk, so the bands need
        no offsets; a narrow band's columns past its width are zero)."""
        cls = np.full(self.n, -1, dtype=np.int64)
        if not len(self.order):
            return cls
        key = self.gr_inv.astype(np.int64)
        span = int(key.max()) + 1
        for col in self.var_w.T:
            top = int(col.max()) + 1
            if top == 1:
                continue
            if span * top >= 1 << 62:  # no room left: renumber densely first
                _, key = np.unique(key, return_inverse=True)
                key = key.reshape(-1)
                span = int(key.max()) + 1
            key = key * top + col
            span *= top
        cls[self.order] = key
        return cls
