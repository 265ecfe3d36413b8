"""The pelican expression algebra: quasi-affine index expressions.

Every expression is kept in one canonical form, a :class:`QuasiAffine`
``c + sum(coeff * atom)``, whose atoms are loop indices (:class:`AffineIdx`),
gather indices (:class:`IndirectArgExpr`, pelican kind 3), runtime register
values (:class:`IntRuntimeValue`, kind 7), shard ids, and the two non-linear
forms :class:`FloorDivExpr` and :class:`ModuloExpr`.  Canonical means equal
expressions are equal objects: ``2*i + i == 3*i``, terms are merged and
sorted, zero terms vanish, and divisions that are exact fold away.  All
expressions are immutable and hashable, so they can be interned in a pool
and shared by thousands of cloned instructions.

Evaluation comes in two flavours: :meth:`QuasiAffine.eval` with exact Python
integers for one point, and :meth:`QuasiAffine.eval_np` over numpy arrays for a
whole iteration space at once (the unroller's hot path).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

import numpy as np

from tusk.ir.errors import FormatError, InputError

# Pelican in-memory kinds (spec §4.1), kept for the wire tags and for users
# who know the backend's numbering.
KIND_INDIRECT_ARG = 3
KIND_AFF_IV = 6
KIND_RUNTIME_VALUE = 7
KIND_SHARD_ID = 13
KIND_AFF_EXPR = 17
KIND_SUM = 18
KIND_MULT = 23
KIND_FLOORDIV = 25
KIND_MODULO = 26


class Env:
    """Values for the free symbols of an expression.

    ``axes`` maps loop-axis names, ``regs`` register names and ``indirect``
    gather-argument ids to integers (or to numpy arrays for ``eval_np``).
    """

    __slots__ = ("axes", "regs", "indirect", "shard")

    def __init__(self, axes: Mapping[str, Any] | None = None, regs: Mapping[str, Any] | None = None,
                 indirect: Mapping[int, Any] | None = None, shard: Any = None):
        # keep the caller's mappings (even empty ones): an interpreter fills them as it runs
        self.axes = {} if axes is None else axes
        self.regs = {} if regs is None else regs
        self.indirect = {} if indirect is None else indirect
        self.shard = shard


def _lookup(table: Mapping, key, what: str):
    try:
        return table[key]
    except KeyError:
        raise InputError(f"cannot evaluate expression: {what} {key!r} has no value") from None


# --------------------------------------------------------------------------- atoms


class Atom:
    """A term of a quasi-affine sum that is not itself a sum."""

    __slots__ = ("_key", "_hash")
    kind: int = -1

    def key(self) -> tuple:
        return self._key

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other._key == self._key  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return self._hash

    def __lt__(self, other: "Atom") -> bool:
        return self._key < other._key

    def _init(self, key: tuple) -> None:
        self._key = key
        self._hash = hash(key)

    # subclasses implement these
    def eval(self, env: Env) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    def eval_np(self, env: Env):  # pragma: no cover - abstract
        raise NotImplementedError

    def bounds(self, ranges: Mapping[str, tuple[int, int]]) -> tuple[float, float]:
        return (-np.inf, np.inf)

    def subst(self, axes: Mapping[str, "int | QuasiAffine"]) -> "QuasiAffine":
        return QuasiAffine(((self, 1),), 0)

    def free_axes(self) -> frozenset[str]:
        return frozenset()

    def is_leaf(self) -> bool:
        return True


class AffineIdx(Atom):
    """A static loop index, named by its loop axis (pelican AffIVKind, kind 6)."""

    __slots__ = ("axis",)
    kind = KIND_AFF_IV

    def __init__(self, axis: str):
        self.axis = axis
        self._init((0, axis))

    def eval(self, env: Env) -> int:
        return _lookup(env.axes, self.axis, "loop axis")

    def eval_np(self, env: Env):
        return _lookup(env.axes, self.axis, "loop axis")

    def bounds(self, ranges):
        if self.axis in ranges:
            return ranges[self.axis]
        return (-np.inf, np.inf)

    def subst(self, axes):
        if self.axis in axes:
            v = axes[self.axis]
            return v if isinstance(v, QuasiAffine) else QuasiAffine((), int(v))
        return QuasiAffine(((self, 1),), 0)

    def free_axes(self):
        return frozenset((self.axis,))

    def __repr__(self) -> str:
        return self.axis


class IndirectArgExpr(Atom):
    """The value of a gather index argument (pelican kind 3); arg_id 1 in practice."""

    __slots__ = ("arg_id",)
    kind = KIND_INDIRECT_ARG

    def __init__(self, arg_id: int = 1):
        self.arg_id = int(arg_id)
        self._init((1, self.arg_id))

    def eval(self, env: Env) -> int:
        return _lookup(env.indirect, self.arg_id, "indirect argument")

    eval_np = eval

    def __repr__(self) -> str:
        return f"indirect{self.arg_id}"


class IntRuntimeValue(Atom):
    """A register's runtime value parked in an expression (pelican kind 7)."""

    __slots__ = ("reg",)
    kind = KIND_RUNTIME_VALUE

    def __init__(self, reg: str):
        self.reg = reg
        self._init((2, reg))

    def eval(self, env: Env) -> int:
        return _lookup(env.regs, self.reg, "register")

    eval_np = eval

    def __repr__(self) -> str:
        return f"%{self.reg}"


class ShardIdx(Atom):
    """The logical-core (shard) id, bounded by ``ub`` (pelican ShardIDKind)."""

    __slots__ = ("ub",)
    kind = KIND_SHARD_ID

    def __init__(self, ub: int):
        self.ub = int(ub)
        self._init((3, self.ub))

    def eval(self, env: Env) -> int:
        if env.shard is None:
            raise InputError("cannot evaluate expression: shard id has no value")
        return env.shard

    eval_np = eval

    def bounds(self, ranges):
        return (0, self.ub - 1)

    def __repr__(self) -> str:
        return f"shard<{self.ub}>"


class FloorDivExpr(Atom):
    """``floor(numer / denom)`` with a positive integer denominator."""

    __slots__ = ("numer", "denom")
    kind = KIND_FLOORDIV

    def __init__(self, numer: "QuasiAffine", denom: int):
        self.numer = numer
        self.denom = denom
        self._init((4, numer.key(), denom))

    def eval(self, env: Env) -> int:
        return self.numer.eval(env) // self.denom

    def eval_np(self, env: Env):
        return np.floor_divide(self.numer.eval_np(env), self.denom)

    def bounds(self, ranges):
        lo, hi = self.numer.bounds(ranges)
        return (_fdiv(lo, self.denom), _fdiv(hi, self.denom))

    def subst(self, axes):
        return floordiv(self.numer.subst(axes), self.denom)

    def free_axes(self):
        return self.numer.free_axes()

    def is_leaf(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"({self.numer!r}) floordiv {self.denom}"


class ModuloExpr(Atom):
    """Euclidean ``numer mod denom``: result in ``[0, denom)``, supremum ``denom - 1``.

    The unroller's LowerDynamicExprs is its only producer: ring-buffer slot
    indices of dynamic loops.
    """

    __slots__ = ("numer", "denom")
    kind = KIND_MODULO

    def __init__(self, numer: "QuasiAffine", denom: int):
        self.numer = numer
        self.denom = denom
        self._init((5, numer.key(), denom))

    def eval(self, env: Env) -> int:
        return self.numer.eval(env) % self.denom

    def eval_np(self, env: Env):
        return np.mod(self.numer.eval_np(env), self.denom)

    def bounds(self, ranges):
        lo, hi = self.numer.bounds(ranges)
        if lo >= 0 and hi < self.denom:
            return (lo, hi)
        return (0, self.denom - 1)

    def subst(self, axes):
        return mod(self.numer.subst(axes), self.denom)

    def free_axes(self):
        return self.numer.free_axes()

    def is_leaf(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"({self.numer!r}) mod {self.denom}"


def _fdiv(x: float, d: int) -> float:
    if x in (np.inf, -np.inf):
        return x
    return int(x) // d


# --------------------------------------------------------------------------- sums


class QuasiAffine:
    """``c + sum(coeff * atom)``: the canonical form of every expression."""

    __slots__ = ("terms", "c", "_key", "_hash")

    def __init__(self, terms: tuple[tuple[Atom, int], ...], c: int):
        # Callers inside this module pass canonical terms; use ``_make`` otherwise.
        self.terms = terms
        self.c = int(c)
        # nested, so that keys of sums with different term counts still compare
        self._key = (tuple((a.key(), k) for a, k in terms), self.c)
        self._hash = hash(self._key)

    @staticmethod
    def _make(pairs: Iterable[tuple[Atom, int]], c: int) -> "QuasiAffine":
        acc: dict[Atom, int] = {}
        for atom, k in pairs:
            if k:
                acc[atom] = acc.get(atom, 0) + int(k)
        terms = tuple(sorted(((a, k) for a, k in acc.items() if k), key=lambda t: t[0].key()))
        return QuasiAffine(terms, c)

    # ----------------------------------------------------------- identity
    def key(self) -> tuple:
        return self._key

    def __eq__(self, other: object) -> bool:
        return isinstance(other, QuasiAffine) and other._key == self._key

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        parts = []
        for atom, k in self.terms:
            parts.append(repr(atom) if k == 1 else f"{k}*{atom!r}")
        if self.c or not parts:
            parts.append(str(self.c))
        return " + ".join(parts)

    # ----------------------------------------------------------- queries
    @property
    def is_const(self) -> bool:
        return not self.terms

    def atoms(self) -> tuple[Atom, ...]:
        return tuple(a for a, _ in self.terms)

    def free_axes(self) -> frozenset[str]:
        out: frozenset[str] = frozenset()
        for atom, _ in self.terms:
            out |= atom.free_axes()
        return out

    def coeff(self, atom: Atom) -> int:
        for a, k in self.terms:
            if a == atom:
                return k
        return 0

    def walk(self) -> Iterable[Atom]:
        """Every atom, including those nested inside floordiv/mod numerators."""
        for atom, _ in self.terms:
            yield atom
            if isinstance(atom, (FloorDivExpr, ModuloExpr)):
                yield from atom.numer.walk()

    # ----------------------------------------------------------- arithmetic
    def __add__(self, other: "QuasiAffine | int") -> "QuasiAffine":
        if isinstance(other, (int, np.integer)):
            return QuasiAffine(self.terms, self.c + int(other))
        if not isinstance(other, QuasiAffine):
            return NotImplemented
        return QuasiAffine._make(self.terms + other.terms, self.c + other.c)

    __radd__ = __add__

    def __neg__(self) -> "QuasiAffine":
        return QuasiAffine(tuple((a, -k) for a, k in self.terms), -self.c)

    def __sub__(self, other: "QuasiAffine | int") -> "QuasiAffine":
        return self + (-other)

    def __rsub__(self, other: int) -> "QuasiAffine":
        return (-self) + other

    def __mul__(self, k: int) -> "QuasiAffine":
        if not isinstance(k, (int, np.integer)):
            return NotImplemented  # quasi-affine: only scaling by constants
        k = int(k)
        if k == 0:
            return QuasiAffine((), 0)
        return QuasiAffine(tuple((a, c * k) for a, c in self.terms), self.c * k)

    __rmul__ = __mul__

    def __floordiv__(self, d: int) -> "QuasiAffine":
        return floordiv(self, d)

    def __mod__(self, d: int) -> "QuasiAffine":
        return mod(self, d)

    # ----------------------------------------------------------- evaluation
    def eval(self, env: Env | Mapping[str, int] | None = None) -> int:
        """Exact integer value under ``env`` (an Env or a plain axis->int map)."""
        if not isinstance(env, Env):
            env = Env(env)
        total = self.c
        for atom, k in self.terms:
            total += k * atom.eval(env)
        return total

    def eval_np(self, env: Env | Mapping[str, Any]):
        """Value over numpy arrays (broadcasting), e.g. every iteration of a nest at once."""
        if not isinstance(env, Env):
            env = Env(env)
        total: Any = np.int64(self.c)
        for atom, k in self.terms:
            total = total + np.int64(k) * np.asarray(atom.eval_np(env), dtype=np.int64)
        return total

    def subst(self, axes: Mapping[str, "int | QuasiAffine"]) -> "QuasiAffine":
        """Replace the given loop axes by constants (partial evaluation) or by expressions."""
        if not self.terms:
            return self
        out = QuasiAffine((), self.c)
        for atom, k in self.terms:
            out = out + atom.subst(axes) * k
        return out

    def bounds(self, ranges: Mapping[str, tuple[int, int]]) -> tuple[float, float]:
        """Interval [lo, hi] over inclusive axis ranges (infinite where unknown)."""
        lo: float = self.c
        hi: float = self.c
        for atom, k in self.terms:
            alo, ahi = atom.bounds(ranges)
            if k >= 0:
                lo, hi = lo + k * alo, hi + k * ahi
            else:
                lo, hi = lo + k * ahi, hi + k * alo
        return (lo, hi)

    # ----------------------------------------------------------- wire
    def to_json(self) -> dict:
        return expr_to_json(self)


# --------------------------------------------------------------------------- constructors


def const(k: int) -> QuasiAffine:
    return QuasiAffine((), int(k))


def idx(axis: str) -> QuasiAffine:
    """The loop index of ``axis`` as an expression."""
    return QuasiAffine(((AffineIdx(axis), 1),), 0)


def runtime(reg: str) -> QuasiAffine:
    return QuasiAffine(((IntRuntimeValue(reg), 1),), 0)


def indirect(arg_id: int = 1) -> QuasiAffine:
    return QuasiAffine(((IndirectArgExpr(arg_id), 1),), 0)


def shard(ub: int) -> QuasiAffine:
    return QuasiAffine(((ShardIdx(ub), 1),), 0)


def as_expr(x: "QuasiAffine | int") -> QuasiAffine:
    if isinstance(x, QuasiAffine):
        return x
    if isinstance(x, (int, np.integer)):
        return const(int(x))
    raise TypeError(f"not an expression: {x!r}")


def floordiv(e: "QuasiAffine | int", d: int) -> QuasiAffine:
    e = as_expr(e)
    d = int(d)
    if d <= 0:
        raise InputError(f"floordiv by non-positive denominator {d}")
    if d == 1:
        return e
    if not e.terms:
        return const(e.c // d)
    if all(k % d == 0 for _, k in e.terms):
        # floor((d*q + c) / d) == q + floor(c / d) exactly, q being integral.
        return QuasiAffine(tuple((a, k // d) for a, k in e.terms), e.c // d)
    return QuasiAffine(((FloorDivExpr(e, d), 1),), 0)


def mod(e: "QuasiAffine | int", d: int) -> QuasiAffine:
    e = as_expr(e)
    d = int(d)
    if d <= 0:
        raise InputError(f"modulo by non-positive denominator {d}")
    if d == 1:
        return const(0)
    # (k*x + c) mod d == ((k mod d)*x + c mod d) mod d: reduce coefficients first.
    reduced = QuasiAffine._make(((a, k % d) for a, k in e.terms), e.c % d)
    if not reduced.terms:
        return const(reduced.c)
    if len(reduced.terms) == 1:
        atom, k = reduced.terms[0]
        if k == 1 and reduced.c == 0 and isinstance(atom, ModuloExpr) and atom.denom == d:
            return reduced  # (x mod d) mod d
    return QuasiAffine(((ModuloExpr(reduced, d), 1),), 0)


# --------------------------------------------------------------------------- predicates

_RELS = {"ge": lambda v: v >= 0, "gt": lambda v: v > 0, "eq": lambda v: v == 0,
         "ne": lambda v: v != 0, "le": lambda v: v <= 0, "lt": lambda v: v < 0}


class AffinePredicate:
    """``expr <rel> 0`` with rel in ge/gt/eq/ne/le/lt; an instruction's guard."""

    __slots__ = ("expr", "rel", "_hash")

    def __init__(self, expr: QuasiAffine | int, rel: str = "ge"):
        if rel not in _RELS:
            raise InputError(f"unknown predicate relation {rel!r} (expected one of {sorted(_RELS)})")
        self.expr = as_expr(expr)
        self.rel = rel
        self._hash = hash((self.expr, rel))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AffinePredicate) and other.expr == self.expr and other.rel == self.rel

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return f"[{self.expr!r} {self.rel} 0]"

    def eval(self, env: Env | Mapping[str, int] | None = None) -> bool:
        return bool(_RELS[self.rel](self.expr.eval(env)))

    def eval_np(self, env):
        return _RELS[self.rel](self.expr.eval_np(env))

    def subst(self, axes: Mapping[str, int]) -> "AffinePredicate":
        return AffinePredicate(self.expr.subst(axes), self.rel)

    def free_axes(self) -> frozenset[str]:
        return self.expr.free_axes()

    def to_json(self) -> dict:
        return {"kind": "AffinePredicate", "expr": expr_to_json(self.expr), "rel": self.rel}

    @staticmethod
    def from_json(obj: Any, where: str = "") -> "AffinePredicate":
        if not isinstance(obj, dict) or "expr" not in obj:
            raise FormatError("an AffinePredicate must be an object with 'expr' and 'rel'", where=where)
        return AffinePredicate(expr_from_json(obj["expr"], where + ".expr"), obj.get("rel", "ge"))


# --------------------------------------------------------------------------- JSON (pelican v2)


def _atom_to_json(atom: Atom) -> dict:
    if isinstance(atom, AffineIdx):
        return {"kind": "AffIVKind", "axis": atom.axis}
    if isinstance(atom, IntRuntimeValue):
        return {"kind": "IntRuntimeValueKind", "regref": atom.reg}
    if isinstance(atom, IndirectArgExpr):
        return {"kind": "IndirectArgId", "arg_id": atom.arg_id}
    if isinstance(atom, ShardIdx):
        return {"kind": "ShardIDKind", "ub": atom.ub}
    if isinstance(atom, FloorDivExpr):
        return {"kind": "FloorDivKind", "numer": expr_to_json(atom.numer), "denom": atom.denom}
    if isinstance(atom, ModuloExpr):
        return {"kind": "ModuloKind", "numer": expr_to_json(atom.numer), "denom": atom.denom}
    raise TypeError(atom)


def expr_to_json(e: QuasiAffine) -> dict:
    """Pelican v2 JSON: AffExprKind when every atom is a leaf, else a SumKind tree."""
    if all(a.is_leaf() for a, _ in e.terms):
        return {"kind": "AffExprKind", "c": e.c,
                "terms": [{"idx": _atom_to_json(a), "coeff": k} for a, k in e.terms]}
    if len(e.terms) == 1 and e.terms[0][1] == 1 and e.c == 0:
        return _atom_to_json(e.terms[0][0])
    leaves = [(a, k) for a, k in e.terms if a.is_leaf()]
    parts: list[dict] = []
    if leaves or e.c:
        parts.append({"kind": "AffExprKind", "c": e.c,
                      "terms": [{"idx": _atom_to_json(a), "coeff": k} for a, k in leaves]})
    for a, k in e.terms:
        if a.is_leaf():
            continue
        node = _atom_to_json(a)
        parts.append(node if k == 1 else {"kind": "MultKind", "var": node, "scale": k})
    return {"kind": "SumKind", "n_terms": len(parts), "terms": parts}


def _int(obj: Any, key: str, where: str) -> int:
    if key not in obj:
        raise FormatError(f"expression node is missing '{key}'", where=where)
    v = obj[key]
    if isinstance(v, bool) or not isinstance(v, int):
        raise FormatError(f"'{key}' must be an integer, got {_short(v)}", where=f"{where}.{key}")
    if not -(1 << 63) <= v < (1 << 63):
        raise FormatError(f"'{key}' {_short(v)} is out of range (int64)", where=f"{where}.{key}")
    return v


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def expr_from_json(obj: Any, where: str = "expr") -> QuasiAffine:
    """Decode a pelican v2 node (or the legacy v1 flat form) into canonical form."""
    if isinstance(obj, bool):
        raise FormatError(f"expected an expression, got {obj!r}", where=where)
    if isinstance(obj, int):
        if not -(1 << 63) <= obj < (1 << 63):
            raise FormatError(f"integer {_short(obj)} is out of range (int64)", where=where)
        return const(obj)
    if not isinstance(obj, dict):
        raise FormatError(f"expected an expression object, got {type(obj).__name__}", where=where)
    if "expr" in obj and "kind" not in obj:  # a QuasiAffineExpr wrapper around its tree
        return expr_from_json(obj["expr"], where + ".expr")
    kind = obj.get("kind")
    if kind is None:
        return _v1_from_json(obj, where)
    if kind == "AffExprKind":
        terms = obj.get("terms", [])
        if not isinstance(terms, (list, tuple)):
            raise FormatError("'terms' must be a list", where=f"{where}.terms")
        out = const(_int(obj, "c", where) if "c" in obj else 0)
        for i, t in enumerate(terms):
            tw = f"{where}.terms[{i}]"
            if not isinstance(t, dict) or "idx" not in t:
                raise FormatError("a term must be an object with 'idx' and 'coeff'", where=tw)
            out = out + expr_from_json(t["idx"], tw + ".idx") * _int(t, "coeff", tw)
        return out
    if kind == "AffIVKind":
        axis = obj.get("axis")
        if not isinstance(axis, str):
            raise FormatError("AffIVKind needs an 'axis' name", where=where)
        return idx(axis)
    if kind == "IntRuntimeValueKind":
        reg = obj.get("regref")
        if not isinstance(reg, str):
            raise FormatError("IntRuntimeValueKind needs a 'regref' name", where=where)
        return runtime(reg)
    if kind == "IndirectArgId":
        return indirect(_int(obj, "arg_id", where))
    if kind == "ShardIDKind":
        return shard(_int(obj, "ub", where))
    if kind == "SumKind":
        terms = obj.get("terms")
        if not isinstance(terms, (list, tuple)):
            raise FormatError("SumKind needs a 'terms' list", where=where)
        if "n_terms" in obj and obj["n_terms"] != len(terms):
            raise FormatError(f"SumKind n_terms {obj['n_terms']} != {len(terms)} terms", where=where)
        out = const(0)
        for i, t in enumerate(terms):
            out = out + expr_from_json(t, f"{where}.terms[{i}]")
        return out
    if kind == "MultKind":
        if "var" not in obj:
            raise FormatError("MultKind needs 'var'", where=where)
        return expr_from_json(obj["var"], where + ".var") * _int(obj, "scale", where)
    if kind in ("FloorDivKind", "ModuloKind", "CCModKind"):
        if "numer" not in obj:
            raise FormatError(f"{kind} needs 'numer'", where=where)
        numer = expr_from_json(obj["numer"], where + ".numer")
        denom = _int(obj, "denom", where)
        if denom <= 0:
            raise FormatError(f"{kind} denominator must be positive, got {denom}", where=where)
        return floordiv(numer, denom) if kind == "FloorDivKind" else mod(numer, denom)
    raise FormatError(f"Walrus doesn't support this kind of Expr: {kind!r}", where=where)


def _v1_from_json(obj: dict, where: str) -> QuasiAffine:
    """Legacy v1 flat form: {terms:[{AxisLabel, coef}], c, op?, op_param?}."""
    terms = obj.get("terms", [])
    if not isinstance(terms, (list, tuple)):
        raise FormatError("'terms' must be a list", where=where)
    out = const(_int(obj, "c", where) if "c" in obj else 0)
    for i, t in enumerate(terms):
        tw = f"{where}.terms[{i}]"
        if not isinstance(t, dict) or not isinstance(t.get("AxisLabel"), str):
            raise FormatError("a v1 term needs 'AxisLabel' and 'coef'", where=tw)
        out = out + idx(t["AxisLabel"]) * _int(t, "coef", tw)
    op = obj.get("op")
    if op is None:
        return out
    param = _int(obj, "op_param", where)
    if op == "Mod":
        return mod(out, param)
    if op == "Div":
        return floordiv(out, param)
    if op == "IndirectArgId":
        return indirect(param)
    raise FormatError(f"Walrus doesn't support this kind of Expr: v1 op {op!r}", where=where)
