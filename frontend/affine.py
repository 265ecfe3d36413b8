"""Index arithmetic while tracing: loop indices, affine offsets, ``nl.arange`` vectors and masks.

An ``nl.affine_range`` / ``nl.sequential_range`` loop is traced once; its
index is a :class:`LoopVar` and every offset computed from it is an
:class:`Affine` (``const + sum(coeff * var)``).  Static loops
(``nl.static_range``, ``range``) give plain ints.  ``nl.arange(n)`` and
``nl.mgrid`` give :class:`IndexVector`\\ s (a run of ``n`` indices placed on
one axis of a broadcast shape), which subscripts turn into access patterns.
Anything outside that algebra (a loop index divided, compared or used as a
Python int) is a :class:`~tusk.frontend.errors.TraceError` naming the
kernel's line.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from tusk.frontend.errors import current_user_line, unsupported

_ids = itertools.count()


@dataclass(eq=False)
class LoopVar:
    """The index of a loop that stays a loop in KLR (a register counts it)."""

    kind: str          # "affine_range" | "sequential_range"
    start: int
    step: int
    trip: int
    depth: int
    ordinal: int = -1  # the n-th dynamic loop the trace started (stable across re-traces)
    uid: int = 0

    def __post_init__(self) -> None:
        self.uid = next(_ids)

    def __repr__(self) -> str:
        return f"i{self.uid}"


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


class Affine:
    """``const + sum(coeff * var)`` over the indices of enclosing dynamic loops."""

    __slots__ = ("const", "terms")

    def __init__(self, const: int = 0, terms: tuple[tuple[LoopVar, int], ...] = ()):
        self.const = int(const)
        self.terms = tuple((v, c) for v, c in sorted(terms, key=lambda t: t[0].uid) if c)

    @staticmethod
    def of(x: Any) -> Affine:
        if isinstance(x, Affine):
            return x
        if _is_int(x):
            return Affine(x)
        if hasattr(x, "__index__") and not isinstance(x, bool) and getattr(x, "ndim", 0) == 0:
            return Affine(int(x.__index__()))  # numpy integer scalars (their shape is ())
        raise unsupported(f"an index of type {type(x).__name__} ({x!r})")

    @property
    def is_static(self) -> bool:
        return not self.terms

    def bounds(self) -> tuple[int, int]:
        """Smallest and largest value over every iteration of the loops it depends on."""
        lo = hi = self.const
        for v, c in self.terms:
            a, b = c * v.start, c * (v.start + v.step * (v.trip - 1))
            lo, hi = lo + min(a, b), hi + max(a, b)
        return lo, hi

    def _combine(self, other: Any, sign: int) -> Affine:
        o = Affine.of(other)
        coeffs: dict[LoopVar, int] = dict(self.terms)
        for v, c in o.terms:
            coeffs[v] = coeffs.get(v, 0) + sign * c
        return Affine(self.const + sign * o.const, tuple(coeffs.items()))

    def __add__(self, other: Any) -> Any:
        if isinstance(other, (IndexVector, IndexGrid)):
            return other + self
        if not (_is_int(other) or isinstance(other, Affine)):
            return NotImplemented
        return self._combine(other, 1)

    __radd__ = __add__

    def __sub__(self, other: Any) -> Any:
        if isinstance(other, (IndexVector, IndexGrid)):
            return (other * -1) + self
        if not (_is_int(other) or isinstance(other, Affine)):
            return NotImplemented
        return self._combine(other, -1)

    def __rsub__(self, other: Any) -> Any:
        return (self * -1) + other

    def __neg__(self) -> Affine:
        return self * -1

    def __mul__(self, other: Any) -> Any:
        if isinstance(other, Affine):
            if other.is_static:
                other = other.const
            elif self.is_static:
                return other * self.const
            else:
                raise unsupported("multiplying two loop indices (the offset would not be affine)")
        if isinstance(other, (IndexVector, IndexGrid)):
            if not self.is_static:
                raise unsupported("multiplying nl.arange indices by a loop index")
            return other * self.const
        if not _is_int(other):
            return NotImplemented
        return Affine(self.const * other, tuple((v, c * other) for v, c in self.terms))

    __rmul__ = __mul__

    def _static_only(self, what: str) -> int:
        if not self.is_static:
            raise unsupported(f"{what} of the index of an nl.affine_range/nl.sequential_range loop "
                              "(use nl.static_range to unroll the loop while tracing)")
        return self.const

    def _unrolled(self) -> int:
        """The value where the trace needs a Python int: a loop index makes its loop unroll (a re-trace).

        Iterations of an nl.affine_range loop are independent (NKI 2.x runs it
        as Python's range), so tracing them one by one gives the same kernel.
        """
        if self.terms:
            var = max((v for v, _ in self.terms), key=lambda v: v.depth)
            if var.ordinal >= 0:
                raise PeelLoop(var.ordinal, 0)
        return self._static_only("using as a Python int")

    def __floordiv__(self, other: Any) -> Any:
        return Affine(self._unrolled() // int(other))

    def __mod__(self, other: Any) -> Any:
        return Affine(self._unrolled() % int(other))

    def __index__(self) -> int:
        return self._unrolled()

    __int__ = __index__

    # a comparison or an `if` on a loop index unrolls its loop (see _unrolled): NKI 2.x loops are Python's
    def __bool__(self) -> bool:
        return bool(self._unrolled())

    def __eq__(self, other: object) -> Any:  # type: ignore[override]
        if _is_int(other) or isinstance(other, Affine):
            o = Affine.of(other)
            if self.terms == o.terms:
                return self.const == o.const
            return (self - o)._unrolled() == 0
        return NotImplemented

    def __ne__(self, other: object) -> Any:  # type: ignore[override]
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __lt__(self, other: Any) -> Any:
        return self._unrolled() < int(Affine.of(other))

    def __le__(self, other: Any) -> Any:
        return self._unrolled() <= int(Affine.of(other))

    def __gt__(self, other: Any) -> Any:
        return self._unrolled() > int(Affine.of(other))

    def __ge__(self, other: Any) -> Any:
        return self._unrolled() >= int(Affine.of(other))

    def __hash__(self) -> int:
        return hash((self.const, self.terms))

    def __repr__(self) -> str:
        parts = [f"{c}*{v}" for v, c in self.terms]
        if self.const or not parts:
            parts.append(str(self.const))
        return " + ".join(parts)


class PeelLoop(Exception):
    """A mask= cuts the last iterations of a dynamic loop short: re-trace with those iterations static.

    KLR has no predicated instructions, so the front end keeps the first
    ``keep`` iterations a loop (where the mask keeps everything) and unrolls
    the rest while tracing, where the mask is a constant.
    """

    def __init__(self, ordinal: int, keep: int):
        super().__init__(f"peel loop {ordinal} after {keep} iterations")
        self.ordinal, self.keep = ordinal, keep
        self.where = current_user_line()  # the kernel line whose mask (or int use) asked for the split

    @staticmethod
    def for_mask(first: Affine, span: int, limit: int) -> PeelLoop:
        # the innermost loop the mask depends on is split; outer ones are taken at their largest value
        var, coeff = max(first.terms, key=lambda t: t[0].depth)
        if coeff <= 0:
            raise unsupported("a mask= on an index that decreases with the loop index")
        rest = Affine(first.const, tuple(t for t in first.terms if t[0] is not var))
        hi_rest = rest.bounds()[1] + span
        keep = 0
        while keep < var.trip and hi_rest + coeff * (var.start + var.step * keep) < limit:
            keep += 1
        return PeelLoop(var.ordinal, keep)


def loop_index(var: LoopVar) -> Affine:
    return Affine(0, ((var, 1),))


class IndexVector:
    """``offset + step * k`` for ``k < n``, placed on axis ``dim`` of an ``ndim``-axis broadcast shape."""

    __slots__ = ("dim", "n", "ndim", "offset", "step")

    def __init__(self, n: int, *, offset: Any = 0, step: int = 1, ndim: int = 1, dim: int = 0):
        self.offset = Affine.of(offset)
        self.n, self.step, self.ndim, self.dim = int(n), int(step), int(ndim), int(dim)

    def _with(self, **kw: Any) -> IndexVector:
        args = {"n": self.n, "offset": self.offset, "step": self.step, "ndim": self.ndim, "dim": self.dim}
        args.update(kw)
        return IndexVector(args.pop("n"), **args)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.n if k == self.dim else 1 for k in range(self.ndim))

    def __getitem__(self, key: Any) -> IndexVector:
        """``[:, None]`` / ``[None, :]``: place the vector on one axis of a broadcast shape."""
        key = key if isinstance(key, tuple) else (key,)
        slots = [k for k, x in enumerate(key) if isinstance(x, slice)]
        if len(slots) != 1 or any(x is not None and not isinstance(x, slice) for x in key) \
                or key[slots[0]] != slice(None):
            raise unsupported(f"subscript {key!r} of an nl.arange index (use [:, None] or [None, :])")
        return self._with(ndim=len(key), dim=slots[0])

    def __add__(self, other: Any) -> Any:
        if isinstance(other, IndexVector):
            return IndexGrid.of(self) + IndexGrid.of(other)
        if isinstance(other, IndexGrid):
            return other + self
        if not (_is_int(other) or isinstance(other, Affine)):
            return NotImplemented
        return self._with(offset=self.offset + other)

    __radd__ = __add__

    def __sub__(self, other: Any) -> Any:
        if isinstance(other, (IndexVector, IndexGrid)):
            return self + other * -1
        if not (_is_int(other) or isinstance(other, Affine)):
            return NotImplemented
        return self._with(offset=self.offset - other)

    def __rsub__(self, other: Any) -> Any:
        return self * -1 + other

    def __mul__(self, other: Any) -> Any:
        if isinstance(other, Affine):
            if not other.is_static:
                raise unsupported("multiplying nl.arange indices by a loop index")
            other = other.const
        if not _is_int(other):
            return NotImplemented
        return self._with(offset=self.offset * other, step=self.step * other)

    __rmul__ = __mul__

    def __neg__(self) -> IndexVector:
        return self * -1

    def _mask(self, bound: Any, strict: bool) -> Mask:
        if isinstance(bound, (IndexVector, IndexGrid)):
            return AffinePredicate.of(self, bound, strict)
        if not _is_int(bound) and not (isinstance(bound, Affine) and bound.is_static):
            raise unsupported(f"a mask bound of type {type(bound).__name__} (a Python int)")
        if self.step <= 0:
            raise unsupported("a mask on a decreasing index")
        if not self.offset.is_static:
            # a loop-dependent mask is resolved here when it keeps every index of every iteration
            limit = int(bound) if strict else int(bound) + 1
            hi = self.offset.bounds()[1] + self.step * (self.n - 1)
            if hi < limit:
                return Mask({})
            raise PeelLoop.for_mask(self.offset, self.step * (self.n - 1), limit)
        bound = int(bound) - self.offset.const
        keep = max(0, min(self.n, -(-bound // self.step) if strict else bound // self.step + 1))
        if self.n == 1:
            # one index: the predicate is one truth value, broadcast along the axis numpy's way -- in
            # `(i_m < M) & (i_n < N)` with i_m = m + nl.arange(1)[None, :] it does not cut i_n's axis to 1
            return Mask({}) if keep else Mask.NOTHING
        return Mask({(self.ndim, self.dim): keep})

    def __lt__(self, other: Any) -> Mask:
        return self._mask(other, True)

    def __le__(self, other: Any) -> Mask:
        return self._mask(other, False)

    def __eq__(self, other: object) -> Any:  # type: ignore[override]
        return _index_equality(self, other, "is_equal")

    def __ne__(self, other: object) -> Any:  # type: ignore[override]
        return _index_equality(self, other, "not_equal")

    __hash__ = object.__hash__

    # `c - nl.arange(n) >= 0` (the NKIBench baselines' row-bound masks): the negated index kept below the
    # negated bound; a rising index from a bound up (`i - 3 >= 0`, a causal convolution's left padding) keeps
    # a suffix
    def __ge__(self, other: Any) -> Any:
        if isinstance(other, (IndexVector, IndexGrid)):
            return NotImplemented  # `iy >= ix` is `ix <= iy`, an affine predicate
        return self._from(other, False) if self.step > 0 else (-self)._mask(_negated(other), False)

    def __gt__(self, other: Any) -> Any:
        if isinstance(other, (IndexVector, IndexGrid)):
            return NotImplemented
        return self._from(other, True) if self.step > 0 else (-self)._mask(_negated(other), True)

    def _from(self, bound: Any, strict: bool) -> Mask:
        """The indices ``k`` with ``offset + step * k >= bound`` (``>`` when ``strict``), ``step`` > 0."""
        if not _is_int(bound) and not (isinstance(bound, Affine) and bound.is_static):
            raise unsupported(f"a mask bound of type {type(bound).__name__} (a Python int)")
        limit = int(bound) + (1 if strict else 0)
        if not self.offset.is_static:
            if self.offset.bounds()[0] >= limit:  # every index of every iteration is kept
                return Mask({})
            self.offset._unrolled()  # the first iterations are cut: the loop unrolls (a re-trace)
        first = max(0, min(self.n, -(-(limit - self.offset.const) // self.step)))
        key = (self.ndim, self.dim)
        return Mask({key: self.n}, skip={key: first}) if first else Mask({})

    def __repr__(self) -> str:
        return f"arange({self.n}) * {self.step} + {self.offset} @ {self.dim}/{self.ndim}"


def _negated(bound: Any) -> Any:
    return bound * -1 if _is_int(bound) or isinstance(bound, Affine) else bound


class IndexGrid:
    """A sum of index vectors on different axes (``nisa.iota``'s expression): ``const + sum(step_d * k_d)``."""

    def __repr__(self) -> str:
        axes = " + ".join(f"{step}*arange({n})@{d}" for d, (n, step) in sorted(self.axes.items()))
        return f"<index grid {self.const} + {axes} over {self.ndim} axes>"

    def __init__(self, const: Affine, axes: dict[int, tuple[int, int]], ndim: int):
        self.const, self.axes, self.ndim = const, dict(axes), ndim

    @staticmethod
    def of(v: IndexVector) -> IndexGrid:
        return IndexGrid(v.offset, {v.dim: (v.n, v.step)}, v.ndim)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.axes.get(k, (1, 0))[0] for k in range(self.ndim))

    def _mask(self, bound: Any, strict: bool) -> Mask:
        if isinstance(bound, (IndexVector, IndexGrid)):
            return AffinePredicate.of(self, bound, strict)
        if len(self.axes) != 1:
            return self._flat_mask(bound, strict)
        (dim, (n, step)), = self.axes.items()
        return IndexVector(n, offset=self.const, step=step, ndim=self.ndim, dim=dim)._mask(bound, strict)

    def _flat_mask(self, bound: Any, strict: bool) -> Mask:
        """``base + 512 * ix + iy < n`` (a flattened index): a prefix of whole rows of the outermost axis.

        Kept whole for every loop value: no mask.  Cut in some iterations of a
        dynamic loop: that loop is peeled (as for one axis).  Otherwise the
        rows are kept or dropped whole, or the mask is refused (KLR has no
        predicates for a partial row).
        """
        if not _is_int(bound) and not (isinstance(bound, Affine) and bound.is_static):
            raise unsupported(f"a mask bound of type {type(bound).__name__} (a Python int)")
        if any(step <= 0 for _, step in self.axes.values()):
            raise unsupported("a mask on a sum of nl.arange indices that decreases along an axis")
        limit = int(bound) if strict else int(bound) + 1
        span = sum(step * (n - 1) for n, step in self.axes.values())
        if self.const.bounds()[1] + span < limit:
            return Mask({})
        if not self.const.is_static:
            raise PeelLoop.for_mask(self.const, span, limit)
        outer, (rows, row_step) = max(self.axes.items(), key=lambda kv: kv[1][1])
        inner = span - row_step * (rows - 1)
        keep = 0
        for r in range(rows):
            first = self.const.const + row_step * r
            if first + inner < limit:
                keep = r + 1
            elif first >= limit:
                break
            else:
                return self._cut_row(outer, r, first, limit)
        return Mask({(self.ndim, outer): keep})

    def _cut_row(self, outer: int, r: int, first: int, limit: int) -> Mask:
        """Rows before ``r`` whole and a prefix of row ``r`` (a 2-axis flattened index): two pieces."""
        if len(self.axes) != 2:
            raise unsupported(f"a mask on a sum of {len(self.axes)} nl.arange indices that cuts row {r} of axis "
                              f"{outer} part way (only whole rows, or a row of a 2-axis index, can be cut)")
        inner, (n, step) = next((d, v) for d, v in self.axes.items() if d != outer)
        cut = min(n, -(-(limit - first) // step))
        return Mask({(self.ndim, outer): r}, row=((self.ndim, outer), r, {(self.ndim, inner): cut}))

    def __lt__(self, other: Any) -> Mask:
        return self._mask(other, True)

    def __le__(self, other: Any) -> Mask:
        return self._mask(other, False)

    def __eq__(self, other: object) -> Any:  # type: ignore[override]
        return _index_equality(self, other, "is_equal")

    def __ne__(self, other: object) -> Any:  # type: ignore[override]
        return _index_equality(self, other, "not_equal")

    __hash__ = object.__hash__

    def __add__(self, other: Any) -> IndexGrid:
        if isinstance(other, IndexVector):
            other = IndexGrid.of(other)
        if isinstance(other, IndexGrid):
            if set(self.axes) & set(other.axes):
                raise unsupported("adding two nl.arange indices on the same axis")
            return IndexGrid(self.const + other.const, {**self.axes, **other.axes}, max(self.ndim, other.ndim))
        if _is_int(other) or isinstance(other, Affine):
            return IndexGrid(self.const + other, self.axes, self.ndim)
        return NotImplemented

    __radd__ = __add__

    def __sub__(self, other: Any) -> IndexGrid:
        return self + other * -1

    def __mul__(self, other: Any) -> IndexGrid:
        if isinstance(other, Affine) and other.is_static:
            other = other.const
        if not _is_int(other):
            return NotImplemented
        return IndexGrid(self.const * other, {d: (n, s * other) for d, (n, s) in self.axes.items()}, self.ndim)

    __rmul__ = __mul__


class AffinePredicate:
    """``lhs < rhs`` (``<=``, ``==``, ``!=``) of two index expressions (1.x ``nisa.affine_select(pred=(iy < ix),
    ...)``, ``i_p == i_f`` for a diagonal): the predicate ``expr cmp 0`` with ``expr = lhs - rhs``, evaluated
    per element; not a mask= prefix."""

    def __init__(self, expr: IndexGrid, cmp: str):
        self.expr, self.cmp = expr, cmp

    @staticmethod
    def of(lhs: Any, rhs: Any, strict: bool, cmp: str | None = None) -> AffinePredicate:
        def grid(v: Any) -> IndexGrid:
            return IndexGrid.of(v) if isinstance(v, IndexVector) else v
        return AffinePredicate(grid(lhs) - grid(rhs), cmp or ("is_lt" if strict else "is_le"))

    def __bool__(self) -> bool:
        raise unsupported("a comparison of nl.arange indices as a Python truth value (it holds per element: "
                          "a pred= of nisa.affine_select)")


def _index_equality(lhs: Any, rhs: Any, cmp: str) -> Any:
    """``i_p == i_f`` of two index expressions: a predicate; with anything else, Python's (identity)."""
    if isinstance(rhs, (IndexVector, IndexGrid)):
        return AffinePredicate.of(lhs, rhs, False, cmp)
    return NotImplemented


class Mask:
    """``mask=`` as a window kept on some axes: indices ``skip`` (default 0) up to ``keep`` of axis (ndim, axis)
    -- a prefix ``i < c``, or from a lower bound up, ``i >= c``; ``&`` intersects.

    ``row``: a second piece, row ``r`` of axis ``key`` with the prefix ``piece`` on other axes (a flattened
    index that cuts a row part way: ``512 * ix + iy < n``); the call runs once per piece.
    """

    NOTHING: ClassVar[Mask]  # the mask that keeps no element (made below the class)

    def __init__(self, keep: dict[tuple[int, int], int],
                 row: tuple[tuple[int, int], int, dict[tuple[int, int], int]] | None = None,
                 skip: dict[tuple[int, int], int] | None = None):
        self.keep = dict(keep)
        self.row = row
        self.skip = {k: v for k, v in (skip or {}).items() if v > 0}  # every key of skip is one of keep's
        if self.row is not None and self.skip:
            raise unsupported("a mask with a lower bound that also cuts a row part way")

    def __repr__(self) -> str:  # named in refusals: which window of which axis the predicate keeps
        kept = ", ".join(f"indices {self.skip[k]}..{n - 1} of axis {k[1]}" if k in self.skip else
                         f"the first {n} of axis {k[1]}" for k, n in sorted(self.keep.items()))
        return f"<a mask keeping {kept or 'every index'}{' and a cut row' if self.row else ''}>"

    def _row_and(self, other: Mask) -> tuple[tuple[int, int], int, dict[tuple[int, int], int]] | None:
        """(prefix | row) & other's prefix = (prefix & other) | (row & other)."""
        if self.row is None:
            return None
        if other.row is not None:
            raise unsupported("two masks that each cut a row part way, joined with &")
        key, r, piece = self.row
        if other.keep.get(key, r + 1) <= r:
            return None
        merged = dict(piece)
        for k, v in other.keep.items():
            if k != key:
                merged[k] = min(merged.get(k, v), v)
        return key, r, merged

    def row_piece(self, ndim: int) -> tuple[int, int, dict[int, int]] | None:
        """The row piece for an ``ndim``-axis tile: (output axis, row, kept counts on the other axes)."""
        if self.row is None:
            return None
        key, r, piece = self.row
        axis = Mask({key: 0}).counts(ndim)
        return next(iter(axis)), r, Mask(piece).counts(ndim)

    def __and__(self, other: Mask) -> Mask:
        if isinstance(other, (bool, np.bool_)):  # `(i_p < n) & (2 * i * 128 < m)`: a predicate of static indices
            return self if other else Mask.NOTHING
        if not isinstance(other, Mask):
            return NotImplemented
        out = dict(self.keep)
        for k, v in other.keep.items():
            out[k] = min(out.get(k, v), v)
        skip = dict(self.skip)
        for k, v in other.skip.items():
            skip[k] = max(skip.get(k, v), v)
        return Mask(out, self._row_and(other) if self.row is not None else other._row_and(self), skip)

    def __or__(self, other: Any) -> Mask:
        """``(i_p < n) | (i_f < 0)``: a union is a prefix only when one side keeps nothing (it is the other
        side), keeps everything, or both are the same prefix."""
        if isinstance(other, (bool, np.bool_)):
            return Mask({}) if other else self
        if not isinstance(other, Mask):
            return NotImplemented
        for a, b in ((self, other), (other, self)):
            if a.row is None and any(n <= a.skip.get(k, 0) for k, n in a.keep.items()):
                return b
            if a.row is None and not a.keep:
                return a
        if self.row is None and other.row is None and (self.keep, self.skip) == (other.keep, other.skip):
            return self
        raise unsupported(f"the union {self!r} | {other!r} (masks keep one prefix per axis: join "
                          "comparisons with &)")

    __ror__ = __or__

    __rand__ = __and__

    def window_for(self, view: Any) -> tuple[dict[int, int], dict[int, int]]:
        """(first kept index, kept count) per output dim of ``view``: through its grid axes where several of
        its dims walk one axis of the index grid (the one of them longer than 1 is cut), else as
        :meth:`window`."""
        grid = view.grid_axes
        if grid is None:
            return self.window(view.ndim)

        def dim_of(axis: int) -> int:
            dims = [d for d, g in enumerate(grid) if g == axis]
            long = [d for d in dims if view.dims[d][1] > 1]
            if not dims or len(long) > 1:
                raise unsupported(f"a mask on axis {axis} of the index grid of a view whose dims walk it "
                                  f"{len(dims)} times")
            return long[0] if long else dims[-1]
        return self._window({key: dim_of(key[1]) for key in self.keep})

    def window(self, ndim: int) -> tuple[dict[int, int], dict[int, int]]:
        """(first kept index, kept count) per output axis of an ``ndim``-axis tile."""
        for nd, axis in self.keep:
            if nd > ndim or axis >= ndim:
                raise unsupported(f"a mask on axis {axis} of a {nd}-axis index applied to a {ndim}-axis tile")
        return self._window({key: key[1] for key in self.keep})

    def _window(self, dim_of: dict[tuple[int, int], int]) -> tuple[dict[int, int], dict[int, int]]:
        """The windows of the mask's axes, each on the output dim ``dim_of`` names (several meet: intersected)."""
        starts: dict[int, int] = {}
        stops: dict[int, int] = {}
        for key, d in dim_of.items():
            stops[d] = min(stops.get(d, self.keep[key]), self.keep[key])
            starts[d] = max(starts.get(d, 0), self.skip.get(key, 0))
        return starts, {d: max(0, stops[d] - starts[d]) for d in stops}

    def partitions(self) -> Mask:
        """What the mask keeps of a per-partition operand (a bias or scale column, a row reduction's result):
        its window on the partition axis alone, as a mask of a 1-axis grid, so it applies to a tile of any rank
        (``[P]``, ``[P, 1]``); a partition row cut part way keeps that row (a row piece of its own)."""
        keep: dict[tuple[int, int], int] = {}
        skip: dict[tuple[int, int], int] = {}
        for (_, axis), n in self.keep.items():
            if axis == 0:
                keep[(1, 0)] = min(keep.get((1, 0), n), n)
        for (_, axis), n in self.skip.items():
            if axis == 0:
                skip[(1, 0)] = max(skip.get((1, 0), n), n)
        row = None
        if self.row is not None:
            (_, axis), r, piece = self.row
            if axis != 0:
                raise unsupported(f"{self!r} on a per-partition operand (a mask that cuts a row of a free axis "
                                  "part way)")
            if all(n > 0 for n in piece.values()):
                row = ((1, 0), r, {})
        return Mask(keep, row, skip)

    def counts(self, ndim: int) -> dict[int, int]:
        """Kept counts per output axis of an ``ndim``-axis tile, for a prefix."""
        return self._prefix(*self.window(ndim))

    def _prefix(self, starts: dict[int, int], counts: dict[int, int]) -> dict[int, int]:
        if any(starts.values()):
            raise unsupported(f"{self!r} here (a mask with a lower bound, `i >= c`, is taken by instructions "
                              "that read and write views, not on this one)")
        return counts


# keeps no index: the first 0 of the first axis (a false predicate of static indices, ``mask=False``)
Mask.NOTHING = Mask({(1, 0): 0})


class MGrid:
    """``nl.mgrid[0:128, 0:512]``: ``.p``, ``.x``, ``.y``, ``.z``, or unpack it."""

    def __getitem__(self, key: Any) -> Grid:
        key = key if isinstance(key, tuple) else (key,)
        vecs = []
        for d, s in enumerate(key):
            if not isinstance(s, slice) or s.stop is None:
                raise unsupported(f"nl.mgrid subscript {s!r} (use start:stop[:step])")
            start, stop, step = int(s.start or 0), int(s.stop), int(s.step or 1)
            n = len(range(start, stop, step))
            vecs.append(IndexVector(n, offset=start, step=step, ndim=len(key), dim=d))
        return Grid(vecs)


class Grid(tuple):
    @property
    def p(self) -> IndexVector:
        return self[0]

    @property
    def x(self) -> IndexVector:
        return self[1]

    @property
    def y(self) -> IndexVector:
        return self[2]

    @property
    def z(self) -> IndexVector:
        return self[3]
