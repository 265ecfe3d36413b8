"""Turn an :class:`~stages.unroll_expand.Expansion` into the unrolled function.

Everything here is vectorised over output positions; Python loops run over
*original* instructions, operands and edges only:

* predicates are evaluated per original instruction over all its clones at
  once, and clones whose predicate is false are dropped;
* symbolic access patterns become physical ones: offsets of affine
  expressions are ``const + sum(coeff * axis)`` over whole arrays, other
  expressions are evaluated group by group; a block index picks the block's
  memory location through a flat table (genPhyAP's grid);
* symbolic immediates and MaybeAffine attributes are folded to constants;
* dependence edges are cloned per common iteration; loop-carried edges join
  iteration ``k - d`` to ``k`` and predicated ones only where their
  predicates hold; every edge keeps ``src < dst`` (program order).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from tusk.ir.columns import Record, Table
from tusk.ir.enums import Kind, Op
from tusk.ir.errors import PassError
from tusk.ir.expr import (
    AffineIdx,
    AffinePredicate,
    Env,
    FloorDivExpr,
    ModuloExpr,
    QuasiAffine,
    expr_from_json,
    expr_to_json,
)
from tusk.ir.module import (
    BLOCK_SCHEMA,
    CARRIED_LOOP,
    CARRIED_SCHEMA,
    DEP_SCHEMA,
    INST_SCHEMA,
    OPERAND_SCHEMA,
    Function,
    _ranges,
    clone_name,
    distinct,
)
from tusk.ir.values import ImmValue, SymAddr
from tusk.stages.unroll_expand import IDX, Expander, Expansion

NON_FOLDED_KEYS = {"LoopAxis", "DynamicForLoopAxis", "blocks"}


class Plan:
    """The expansion of a whole function plus the groupings every step needs."""

    def __init__(self, fn: Function, expander: Expander, exp: Expansion, top_of: np.ndarray):
        self.fn, self.ex, self.exp = fn, expander, exp
        self.top_of = top_of  # output block of entries sitting directly in a top-level block
        n_orig = len(fn.insts)
        rows = exp.rows
        self.count = np.bincount(rows, minlength=n_orig).astype(IDX)
        self.start = np.zeros(n_orig + 1, IDX)
        np.cumsum(self.count, out=self.start[1:])
        self.grouped = np.empty(len(rows), IDX)
        self.grouped[self.start[rows] + exp.iters] = np.arange(len(rows), dtype=IDX)
        self.keep = np.ones(len(rows), dtype=bool)
        self.axis_names = set(exp.axes)
        # the function being built: pools start as copies, new values (folded records,
        # substituted predicates) are interned into it as the steps run
        out = Function(fn.name, fn.kind, set(fn.attrs))
        out.extras = fn.extras
        out.strings, out.patterns, out.values = fn.strings.copy(), fn.patterns.copy(), fn.values.copy()
        out.regs = fn.regs.copy()
        self.out = out

    def positions(self, row: int) -> np.ndarray:
        """Output positions of the clones of original ``row``, in iteration order."""
        return self.grouped[self.start[row]:self.start[row + 1]]

    def env(self, pos: np.ndarray) -> Env:
        return Env({a: v[pos] for a, v in self.exp.axes.items()})

    def static_in(self, e: QuasiAffine) -> bool:
        """True when ``e`` only uses unrolled loop axes (it folds to a constant)."""
        for atom in e.walk():
            if isinstance(atom, AffineIdx):
                if atom.axis not in self.axis_names:
                    return False
            elif not isinstance(atom, (FloorDivExpr, ModuloExpr)):
                return False
        return True


# --------------------------------------------------------------------- predicates


def evaluate_predicates(plan: Plan) -> np.ndarray:
    """Clear ``plan.keep`` where a clone's predicate is false; return each clone's predicate id.

    A clone is guarded by its own predicates and by those of the unrolled
    loops around it.  Predicates that only use unrolled loop indices fold to
    true/false per clone; the others (runtime values, loops that stay loops)
    keep what cannot be folded, with the known loop indices substituted.
    Returns an array over expansion positions (-1: no predicate left).
    """
    fn = plan.fn
    pred_col = fn.insts["pred"]
    out = np.full(len(plan.exp), -1, np.int32)
    rows = np.nonzero(plan.count > 0)[0].tolist()
    for row in rows:
        preds = list(fn.values[int(pred_col[row])]) if pred_col[row] >= 0 else []
        for loop in plan.ex.chains.get(row, ()):
            if pred_col[loop] >= 0:  # an unrolled loop's predicate guards every clone of its body
                preds.extend(fn.values[int(pred_col[loop])])
        if not preds:
            continue
        pos = plan.positions(row)
        static = [p for p in preds if plan.static_in(p.expr)]
        rest = [p for p in preds if not plan.static_in(p.expr)]
        if static:
            env = plan.env(pos)
            ok = np.ones(len(pos), dtype=bool)
            for p in static:
                ok &= np.broadcast_to(p.eval_np(env), ok.shape)
            plan.keep[pos] &= ok
        if rest:
            ids, alive = substitute_per_clone(plan, pos, rest, _subst_preds)
            out[pos] = ids
            plan.keep[pos] &= alive
    _drop_orphans(plan)
    return out


def _subst_preds(preds: list, values: dict, out_fn: Function) -> tuple[int, bool]:
    """(predicate id, still possible) of ``preds`` with ``values`` substituted."""
    left = []
    for p in preds:
        q = AffinePredicate(p.expr.subst(values), p.rel)
        if q.expr.is_const:
            if not q.eval():
                return -1, False
            continue
        left.append(q)
    return (out_fn.intern(tuple(left)) if left else -1), True


def substitute_per_clone(plan: Plan, pos: np.ndarray, obj, subst) -> tuple[np.ndarray, np.ndarray]:
    """Apply ``subst(obj, {axis: value}, out_fn) -> (id, alive)`` once per distinct combination
    of the unrolled axes ``obj`` uses, over the clones at ``pos``."""
    axes = sorted(_free_axes(obj) & plan.axis_names)
    if axes:
        combos, inv = _unique_rows(np.stack([plan.exp.axes[a][pos] for a in axes], axis=1))
    else:
        combos, inv = np.zeros((1, 0), IDX), np.zeros(len(pos), IDX)
    results = [subst(obj, dict(zip(axes, map(int, c))), plan.out) for c in combos.tolist()]
    ids = np.array([r[0] for r in results], np.int32)[inv]
    alive = np.array([r[1] for r in results], dtype=bool)[inv]
    return ids, alive


def _free_axes(obj) -> set[str]:
    if isinstance(obj, (list, tuple)):
        out: set[str] = set()
        for x in obj:
            out |= _free_axes(x)
        return out
    return set(obj.free_axes())


def _drop_orphans(plan: Plan) -> None:
    """Entries inside a cloned body block whose loop instruction was dropped go too."""
    exp = plan.exp
    if not exp.blocks:
        return
    parents = np.array([p for _, p in exp.blocks], dtype=IDX)
    inside = exp.blk >= 0
    while True:
        alive = plan.keep[parents]
        new = plan.keep & (~inside | alive[np.where(inside, exp.blk, 0)])
        if np.array_equal(new, plan.keep):
            return
        plan.keep = new


# --------------------------------------------------------------------- operands


class OperandFolder:
    """Folds symbolic operands of the kept clones into physical ones."""

    def __init__(self, plan: Plan, fn_out: Function):
        self.plan, self.fn, self.out = plan, plan.fn, fn_out
        ml = plan.fn.memlocs
        sets = ml["set"]
        tids = ml["tensor_id"]
        # genPhyAP's grid, flattened: block_memloc[set_base[s] + b] = memloc of block b of set s
        n_sets = len(plan.fn.sets)
        nblocks = np.maximum(plan.fn.sets["n_blocks"].astype(IDX), 1)
        self.set_base = np.zeros(n_sets + 1, IDX)
        np.cumsum(nblocks, out=self.set_base[1:])
        self.block_memloc = np.full(int(self.set_base[-1]), -1, IDX)
        per_set = np.bincount(sets, minlength=n_sets) if len(ml) else np.zeros(n_sets, IDX)
        for m in range(len(ml)):
            s, t = int(sets[m]), int(tids[m])
            slot = self.set_base[s] + max(t, 0)
            if t < 0 and nblocks[s] > 1 and per_set[s] > 1:
                raise PassError(f"memory location {plan.fn.strings[ml.get('name', m)]} belongs to block tensor "
                                f"{plan.fn.strings[plan.fn.sets.get('name', s)]} but has no block index "
                                f"(tensor_id)")
            if t < 0 and self.block_memloc[self.set_base[s]] >= 0:
                continue
            if t >= nblocks[s]:
                raise PassError(f"memory location {plan.fn.strings[ml.get('name', m)]} has block index {t} "
                                f"but its set has {nblocks[s]} blocks")
            self.block_memloc[slot] = m
        for s in range(n_sets):  # a block set with one memloc: every block shares it
            first = self.block_memloc[self.set_base[s]]
            span = self.block_memloc[self.set_base[s]:self.set_base[s + 1]]
            span[span < 0] = first
        self.nblocks = nblocks
        self.memloc_set = sets

    def fold(self, cols: dict[str, np.ndarray], src_ops: np.ndarray, pos: np.ndarray) -> None:
        """Rewrite ``cols`` (operand columns of the output) in place."""
        kind = cols["kind"]
        for j in distinct(src_ops[kind == Kind.SYMBOLIC_DIMS]).tolist():
            exprs = self.fn.values[int(self.fn.operands["aux"][j])]
            if any(a.axis in self.plan.axis_names for e in exprs for a in e.walk() if isinstance(a, AffineIdx)):
                raise PassError("a symbolic_ap with one address per access-pattern dimension (KLR's form) "
                                "depends on an unrolled loop index; Tusk cannot fold that form yet")
        sym = np.nonzero(kind == Kind.SYMBOLIC)[0]
        if len(sym):
            self._fold_symbolic(cols, sym, src_ops[sym], pos[sym])
        simm = np.nonzero(kind == Kind.SYMBOLIC_IMM)[0]
        if len(simm):
            self._fold_symbolic_imm(cols, simm, src_ops[simm], pos[simm])

    def _fold_symbolic(self, cols, idx, src, pos) -> None:
        fn, plan = self.fn, self.plan
        aux = fn.operands["aux"]
        uniq, inv = _small_unique(src)
        syms: list[SymAddr] = [fn.values[int(aux[o])] for o in uniq.tolist()]
        static = np.array([plan.static_in(s.offset) and (s.block is None or plan.static_in(s.block)) for s in syms])
        linear = np.array([_is_linear(s.offset) for s in syms])
        # offsets: linear expressions all at once
        lin = static & linear
        sel = slice(None) if lin.all() else lin[inv]
        ci, pi = inv[sel], pos[sel]
        offset = np.zeros(len(idx), IDX)
        if len(ci):
            c = np.array([s.offset.c for s in syms], IDX)
            acc = c[ci]
            for axis, values in plan.exp.axes.items():
                k = np.array([s.offset.coeff(AffineIdx(axis)) for s in syms], IDX)
                if k.any():
                    acc += k[ci] * values[pi]
            offset[sel] = acc
        # everything static but not linear: per original operand group
        groups = _groups(inv, np.nonzero(static & ~linear)[0])
        for u, members in groups:
            offset[members] = syms[u].offset.eval_np(plan.env(pos[members]))
        # block index -> memory location
        memloc = cols["memloc"][idx]
        has_block = np.array([s.block is not None for s in syms]) & static
        for u, members in _groups(inv, np.nonzero(has_block)[0]):
            b = np.broadcast_to(syms[u].block.eval_np(plan.env(pos[members])), members.shape).astype(IDX)
            s = int(self.memloc_set[int(memloc[members[0]])])
            if (b < 0).any() or (b >= self.nblocks[s]).any():
                bad = int(b[(b < 0) | (b >= self.nblocks[s])][0])
                raise PassError(f"block index {bad} of {syms[u].block!r} is outside tensor "
                                f"{fn.strings[fn.sets.get('name', s)]} ({self.nblocks[s]} blocks)")
            memloc[members] = self.block_memloc[self.set_base[s] + b]
        st = slice(None) if static.all() else static[inv]
        at = idx[st]
        cols["offset"][at] = offset[st]
        cols["memloc"][at] = memloc[st]
        cols["kind"][at] = Kind.PHYSICAL
        cols["aux"][at] = -1
        if static.all():
            return
        # partially symbolic (runtime values, loops kept as loops): substitute what is known
        for k in np.nonzero(~st)[0].tolist():
            s = syms[int(inv[k])]
            p = int(pos[k])
            values = {a: int(v[p]) for a, v in plan.exp.axes.items()}
            block = None if s.block is None else s.block.subst(values)
            m = int(cols["memloc"][idx[k]])
            if block is not None and block.is_const:
                sid = int(self.memloc_set[m])
                if not 0 <= block.c < self.nblocks[sid]:
                    raise PassError(f"block index {block.c} of {s.block!r} is outside tensor "
                                    f"{fn.strings[fn.sets.get('name', sid)]} ({self.nblocks[sid]} blocks)")
                m = int(self.block_memloc[self.set_base[sid] + block.c])
                block = None
            cols["memloc"][idx[k]] = m
            cols["aux"][idx[k]] = self.out.intern(SymAddr(s.offset.subst(values), block))

    def _fold_symbolic_imm(self, cols, idx, src, pos) -> None:
        fn, plan = self.fn, self.plan
        aux = fn.operands["aux"]
        uniq, inv = _small_unique(src)
        for u, members in _groups(inv, np.arange(len(uniq))):
            e: QuasiAffine = fn.values[int(aux[int(uniq[u])])]
            if not plan.static_in(e):  # substitute the unrolled indices, keep the rest symbolic
                ids, _ = substitute_per_clone(plan, pos[members], e, _subst_imm)
                cols["aux"][idx[members]] = ids
                folded = np.array([isinstance(self.out.values[i], ImmValue) for i in ids.tolist()], dtype=bool)
                cols["kind"][idx[members[folded]]] = Kind.IMM
                continue
            vals = np.broadcast_to(e.eval_np(plan.env(pos[members])), members.shape)
            ids = {v: self.out.intern(ImmValue(int(v))) for v in distinct(vals).tolist()}
            cols["aux"][idx[members]] = [ids[v] for v in vals.tolist()]
            cols["kind"][idx[members]] = Kind.IMM


def _subst_imm(e: QuasiAffine, values: dict, out_fn: Function) -> tuple[int, bool]:
    e = e.subst(values)
    return out_fn.intern(ImmValue(e.c) if e.is_const else e), True


def _small_unique(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(values, return_inverse=True) for non-negative ids of a small range, in linear time."""
    present = np.zeros(int(values.max()) + 1, dtype=bool)
    present[values] = True
    uniq = np.nonzero(present)[0]
    lookup = np.zeros(len(present), IDX)
    lookup[uniq] = np.arange(len(uniq))
    return uniq, lookup[values]


def _is_linear(e: QuasiAffine) -> bool:
    return all(isinstance(a, AffineIdx) for a, _ in e.terms)


def _groups(inv: np.ndarray, wanted: np.ndarray):
    """(group id, member indices) for each wanted group id of ``inv``."""
    if not len(wanted):
        return []
    mask = np.zeros(int(inv.max()) + 1 if len(inv) else 0, dtype=bool)
    mask[wanted] = True
    members = np.nonzero(mask[inv])[0]
    order = np.argsort(inv[members], kind="stable")
    members = members[order]
    keys = inv[members]
    cuts = np.nonzero(np.diff(keys))[0] + 1
    return [(int(k[0]), g) for g, k in zip(np.split(members, cuts), np.split(keys, cuts))]


# --------------------------------------------------------------------- attributes


def fold_attributes(plan: Plan, out: Function, newidx: np.ndarray) -> np.ndarray:
    """Attribute record ids of the kept clones (indexed like the output).

    MaybeAffine values (a matmul's ``accumulation_flag = ki``) and the bounds
    of loops that stay loops (a DynamicForLoop's ``ub`` may use an outer index)
    get the clone's loop indices substituted: constants where they fold, the
    rest of the expression where they do not.  ``loopnest``/``order`` keys are
    dropped from clones.
    """
    fn = plan.fn
    attr_col = fn.insts["attrs"]
    result = attr_col[plan.exp.rows[plan.keep]].astype(np.int32)
    for row in np.nonzero((plan.count > 0) & (attr_col >= 0))[0].tolist():
        if not plan.ex.chains.get(row):
            continue
        rec: Record = fn.values[int(attr_col[row])]
        slots = _expr_slots(rec)
        drop = [k for k in ("loopnest", "order") if k in rec]
        used = [(path, e) for path, e in slots if e.free_axes() & plan.axis_names]
        if not used and not drop:
            continue
        pos = plan.positions(row)
        pos = pos[plan.keep[pos]]
        if not len(pos):
            continue
        at = newidx[pos]
        base = rec.without(*drop)
        if not used:
            result[at] = out.intern(base)
            continue
        exprs = [e for _, e in used]
        ids, _ = substitute_per_clone(plan, pos, exprs, lambda es, values, o: (o.intern(
            _with_slots(base, {path: e.subst(values) for (path, _), e in zip(used, es)})), True))
        result[at] = ids
    return result


def _expr_slots(rec: Record) -> list[tuple[tuple[str, ...], QuasiAffine]]:
    """The expression-valued attributes: top-level MaybeAffine keys and dynamic loop bounds."""
    out = []
    for k, v in rec.items():
        if k in ("LoopAxis", "DynamicForLoopAxis") and isinstance(v, Mapping):
            out.extend(((k, b), expr_from_json(v[b])) for b in ("lb", "ub", "stride")
                       if isinstance(v.get(b), Mapping) and _is_expr(v[b]))
        elif k not in NON_FOLDED_KEYS and isinstance(v, Mapping) and _is_expr(v):
            out.append(((k,), expr_from_json(v)))
    return out


def _with_slots(rec: Record, values: dict[tuple[str, ...], QuasiAffine]) -> Record:
    data = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in rec.items()}
    for path, e in values.items():
        v = e.c if e.is_const else expr_to_json(e)
        if len(path) == 1:
            data[path[0]] = v
        else:
            data[path[0]][path[1]] = v
    return Record.of(data)


def _unique_rows(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(values, axis=0, return_inverse=True), in linear time for small integer ranges."""
    lo = values.min(axis=0)
    span = values.max(axis=0) - lo + 1
    if np.prod(span.astype(np.float64)) <= 1 << 22:
        key = np.zeros(len(values), np.int64)
        for c in range(values.shape[1]):
            key = key * span[c] + (values[:, c] - lo[c])
        present = np.zeros(int(np.prod(span)), dtype=bool)
        present[key] = True
        codes = np.nonzero(present)[0]
        lookup = np.zeros(len(present), np.int64)
        lookup[codes] = np.arange(len(codes))
        uniq = np.empty((len(codes), values.shape[1]), np.int64)
        rest = codes.copy()
        for c in range(values.shape[1] - 1, -1, -1):
            uniq[:, c] = rest % span[c] + lo[c]
            rest //= span[c]
        return uniq, lookup[key]
    uniq, inv = np.unique(values, axis=0, return_inverse=True)
    return uniq, inv.reshape(-1)


def _is_expr(v: dict) -> bool:
    return str(v.get("kind", "")).endswith("Kind")


# --------------------------------------------------------------------- dependencies


class EdgeMapper:
    """Clones the original edges onto output positions."""

    def __init__(self, plan: Plan):
        self.plan = plan
        fn = plan.fn
        self.trips = {}
        for row in set(r for chain in plan.ex.chains.values() for r in chain):
            self.trips[row] = max(fn.loop_axis(row).trip_count, 1)
        self.loop_rows = {r for r in range(len(fn.insts)) if int(fn.insts["opcode"][r]) == Op.Loop
                          and r in self.trips}
        self.subtree: dict[int, list[int]] = {}
        for row, chain in plan.ex.chains.items():
            for loop in chain:
                self.subtree.setdefault(loop, []).append(row)
        # every loop (unrolled or kept) around each row, outermost first
        parents, blocks = fn.blocks["parent"], fn.insts["block"]
        self.loops_around: dict[int, tuple[int, ...]] = {}
        for row in range(len(fn.insts)):
            chain, b = [], int(blocks[row])
            while parents[b] >= 0:
                chain.append(int(parents[b]))
                b = int(blocks[int(parents[b])])
            self.loops_around[row] = tuple(reversed(chain))

    def carried_by_kept_loop(self, s: int, d: int) -> bool:
        """True when the innermost loop around both ends stays a loop: the carry stays a carry."""
        a, b = self.loops_around.get(s, ()), self.loops_around.get(d, ())
        k = 0
        while k < min(len(a), len(b)) and a[k] == b[k]:
            k += 1
        return k > 0 and a[k - 1] not in self.loop_rows

    def empty(self, loop: int) -> bool:
        """An unrolled loop that produced no instruction (zero trips or an empty body)."""
        return loop in self.loop_rows and not any(self.plan.count[r] > 0 for r in self._ends(loop))

    def _ends(self, row: int) -> list[int]:
        """An unrolled loop row stands for every instruction of its body."""
        if row in self.loop_rows:
            return [r for r in self.subtree.get(row, []) if r not in self.loop_rows]
        return [row]

    def _common(self, s: int, d: int) -> tuple[int, int, int, list[int]]:
        cs, cd = self.plan.ex.chains.get(s, ()), self.plan.ex.chains.get(d, ())
        k = 0
        while k < min(len(cs), len(cd)) and cs[k] == cd[k]:
            k += 1
        common = list(cs[:k])
        g = int(np.prod([self.trips[r] for r in common])) if common else 1
        return g, int(self.plan.count[s]) // max(g, 1), int(self.plan.count[d]) // max(g, 1), common

    def plain(self, s: int, d: int) -> tuple[np.ndarray, np.ndarray]:
        srcs, dsts = [], []
        for s2 in self._ends(s):
            for d2 in self._ends(d):
                a, b = self._pairs(s2, d2, None)
                srcs.append(a)
                dsts.append(b)
        return _cat(srcs), _cat(dsts)

    def _pairs(self, s: int, d: int, shift) -> tuple[np.ndarray, np.ndarray]:
        plan = self.plan
        ps, pd = plan.positions(s), plan.positions(d)
        if not len(ps) or not len(pd):
            return np.zeros(0, IDX), np.zeros(0, IDX)
        g, inner_s, inner_d, common = self._common(s, d)
        src = ps.reshape(g, inner_s)
        dst = pd.reshape(g, inner_d)
        if shift is not None:  # carried: each destination clone waits for its source group
            flat = dst.reshape(-1)
            gs = shift(common, flat)
            ok = gs >= 0
            chosen = src[np.where(ok, gs, 0)][ok]  # (destinations kept, inner_s)
            return chosen.reshape(-1), np.repeat(flat[ok], inner_s)
        a = np.broadcast_to(src[:, :, None], (len(dst), inner_s, inner_d)).reshape(-1)
        b = np.broadcast_to(dst[:, None, :], (len(dst), inner_s, inner_d)).reshape(-1)
        return a, b

    def carried(self, s: int, d: int, flavour: int, payload: Any) -> tuple[np.ndarray, np.ndarray]:
        plan = self.plan
        fn = plan.fn

        def shift(common: list[int], dst_pos: np.ndarray) -> np.ndarray:
            """Index of the source iteration group for each destination clone (-1: none)."""
            axes = [fn.loop_axis(r) for r in common]
            vals = [plan.exp.axes[a.name][dst_pos] for a in axes]
            digits = [(v - a.lb) // a.stride for v, a in zip(vals, axes)]
            ok = np.ones(len(dst_pos), dtype=bool)
            if flavour == CARRIED_LOOP:
                dist = list(payload or ())
                dist = [0] * (len(axes) - len(dist)) + dist[-len(axes):] if axes else []
                digits = [dg - dd for dg, dd in zip(digits, dist)]
            else:
                exprs, preds = payload
                env = plan.env(dst_pos)
                for p in preds:
                    ok &= np.broadcast_to(p.eval_np(env), ok.shape)
                exprs = list(exprs)[-len(axes):] if axes else []
                start = len(axes) - len(exprs)
                for k, e in enumerate(exprs):
                    a = axes[start + k]
                    v = np.broadcast_to(e.eval_np(env), ok.shape)
                    ok &= (v - a.lb) % a.stride == 0
                    digits[start + k] = (v - a.lb) // a.stride
            g = np.zeros(len(dst_pos), IDX)
            for dg, a in zip(digits, axes):
                ok &= (dg >= 0) & (dg < max(a.trip_count, 1))
                g = g * max(a.trip_count, 1) + dg
            return np.where(ok, g, -1)

        srcs, dsts = [], []
        for s2 in self._ends(s):
            for d2 in self._ends(d):
                a, b = self._pairs(s2, d2, shift)
                srcs.append(a)
                dsts.append(b)
        return _cat(srcs), _cat(dsts)


def _cat(xs: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(xs) if xs else np.zeros(0, IDX)


def map_edges(plan: Plan, newidx: np.ndarray) -> tuple[Table, Table]:
    """Output (deps, carried): cloned plain and carried edges, deduplicated, strongest kind.

    A carried edge of a loop that stays a loop (a DynamicForLoop) stays a
    carried edge between the clones of each unrolled iteration; the others
    become plain edges.  Edges through an unrolled loop that produced nothing
    are joined around it, so the order they imposed survives.
    """
    fn = plan.fn
    mapper = EdgeMapper(plan)
    deps = list(zip(fn.deps["src"].tolist(), fn.deps["dst"].tolist(), fn.deps["kind"].tolist()))
    for loop in [r for r in mapper.loop_rows if mapper.empty(r)]:
        into = [(a, k) for a, b, k in deps if b == loop]
        out_of = [(b, k) for a, b, k in deps if a == loop]
        deps += [(a, b, max(k1, k2)) for a, k1 in into for b, k2 in out_of]
    srcs, dsts, kinds = [], [], []
    for s, d, k in deps:
        a, b = mapper.plain(s, d)
        srcs.append(a)
        dsts.append(b)
        kinds.append(np.full(len(a), k, np.uint8))
    c = fn.carried
    kept = {"src": [], "dst": [], "kind": [], "flavour": [], "payload": []}
    for s, d, k, fl, pl in zip(c["src"].tolist(), c["dst"].tolist(), c["kind"].tolist(), c["flavour"].tolist(),
                               c["payload"].tolist()):
        if mapper.carried_by_kept_loop(s, d):
            a, b = mapper.plain(s, d)
            ok = plan.keep[a] & plan.keep[b] if len(a) else np.zeros(0, bool)
            for col, v in (("src", newidx[a[ok]]), ("dst", newidx[b[ok]]), ("kind", np.full(ok.sum(), k)),
                           ("flavour", np.full(ok.sum(), fl)), ("payload", np.full(ok.sum(), pl))):
                kept[col].append(v)
            continue
        a, b = mapper.carried(s, d, fl, fn.value(pl))
        srcs.append(a)
        dsts.append(b)
        kinds.append(np.full(len(a), k, np.uint8))
    src, dst = _cat(srcs), _cat(dsts)
    kind = np.concatenate(kinds) if kinds else np.zeros(0, np.uint8)
    ok = plan.keep[src] & plan.keep[dst] & (src < dst) if len(src) else np.zeros(0, bool)
    src, dst, kind = newidx[src[ok]], newidx[dst[ok]], kind[ok]
    if len(src):
        order = np.lexsort((-kind.astype(np.int16), dst, src))
        src, dst, kind = src[order], dst[order], kind[order]
        first = np.ones(len(src), dtype=bool)
        first[1:] = (src[1:] != src[:-1]) | (dst[1:] != dst[:-1])
        src, dst, kind = src[first], dst[first], kind[first]
        order = np.lexsort((src, dst))
        src, dst, kind = src[order], dst[order], kind[order]
    deps_t = Table.from_arrays(DEP_SCHEMA, {"src": src.astype(np.int32), "dst": dst.astype(np.int32), "kind": kind})
    carried_t = Table.from_arrays(CARRIED_SCHEMA, {col: (np.concatenate(v) if v else np.zeros(0, np.int64))
                                                   for col, v in kept.items()})
    return deps_t, carried_t


# --------------------------------------------------------------------- the whole function


def materialize(plan: Plan, pred_ids: np.ndarray) -> Function:
    """The unrolled function: ``pred_ids`` (per expansion position) from :func:`evaluate_predicates`."""
    fn, exp, out = plan.fn, plan.exp, plan.out

    K = np.nonzero(plan.keep)[0]
    newidx = np.full(len(exp) + 1, -1, IDX)
    newidx[K] = np.arange(len(K), dtype=IDX)
    rows_k = exp.rows[K]
    ins = fn.insts
    n_orig = len(ins)

    # ---- blocks: top-level blocks keep their order; cloned bodies of kept loops follow,
    # except those whose loop instruction a predicate dropped
    top = fn.top_blocks()
    block_rows = [(fn.blocks.get("name", b), -1, fn.blocks.get("extra", b)) for b in top]
    block_id = np.full(len(exp.blocks), -1, IDX)  # local cloned-block id -> output block row
    for k, ((orig_b, parent_pos), it) in enumerate(zip(exp.blocks, exp.block_iters)):
        if newidx[parent_pos] < 0:
            continue
        name = fn.strings[fn.blocks.get("name", orig_b)]
        if plan.ex.chains.get(int(exp.rows[parent_pos])):
            name = clone_name(name, it)
        block_id[k] = len(block_rows)
        block_rows.append((out.s(name), int(newidx[parent_pos]), fn.blocks.get("extra", orig_b)))
    out.blocks = Table.from_arrays(BLOCK_SCHEMA, {
        "name": np.array([r[0] for r in block_rows], np.int32),
        "parent": np.array([r[1] for r in block_rows], np.int32),
        "extra": np.array([r[2] for r in block_rows], np.int32)})
    blk_k = exp.blk[K]
    top_lookup = np.zeros(len(fn.blocks), IDX)
    top_lookup[top] = np.arange(len(top))
    block_k = np.where(blk_k >= 0, block_id[np.maximum(blk_k, 0)] if len(block_id) else -1,
                       top_lookup[plan.top_of[K]])

    # ---- names: clones are named from their origin and iteration
    in_static = np.array([bool(plan.ex.chains.get(r)) for r in range(n_orig)], dtype=bool)
    base_name = ins["name"].astype(np.int32).copy()
    orig_iter = ins["iter"]
    for r in np.nonzero(in_static & (orig_iter >= 0))[0].tolist():
        base_name[r] = out.s(fn.inst_name(r))  # a clone cloned again keeps its full name as origin
    iters_k = np.where(in_static[rows_k], exp.iters[K], orig_iter[rows_k]).astype(np.int32)

    # ---- operands
    nops = ins["nops"][rows_k].astype(IDX)
    src_ops = _ranges(ins["ops"][rows_k], nops)
    op_cols = {c: fn.operands[c][src_ops] for c in fn.operands.names}
    OperandFolder(plan, out).fold(op_cols, src_ops, np.repeat(K, nops))
    starts = np.zeros(len(K), IDX)
    if len(K):
        np.cumsum(nops[:-1], out=starts[1:])

    attrs_k = fold_attributes(plan, out, newidx)
    out.insts = Table.from_arrays(INST_SCHEMA, {
        "opcode": ins["opcode"][rows_k], "engine": ins["engine"][rows_k], "block": block_k.astype(np.int32),
        "name": base_name[rows_k], "iter": iters_k, "attrs": attrs_k, "ops": starts,
        "nops": ins["nops"][rows_k], "pred": pred_ids[K]})
    out.operands = Table.from_arrays(OPERAND_SCHEMA, op_cols)
    out.deps, out.carried = map_edges(plan, newidx)
    out.memlocs, out.sets = fn.memlocs.copy(), fn.sets.copy()
    out.invalidate()
    return out
