"""The pelican expression algebra: canonical forms, evaluation, wire round trip."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tusk.ir.errors import FormatError, TuskError
from tusk.ir.expr import (
    AffinePredicate,
    Env,
    ModuloExpr,
    const,
    expr_from_json,
    expr_to_json,
    floordiv,
    idx,
    indirect,
    mod,
    runtime,
)

i, j = idx("i"), idx("j")


def test_like_terms_merge_and_order_does_not_matter():
    assert 2 * i + i == 3 * i
    assert i + j == j + i
    assert (i + 2) - i == const(2)
    assert hash(2 * i + i) == hash(3 * i)
    assert i * 0 == const(0)


def test_exact_floordiv_folds_and_inexact_stays():
    assert floordiv(4 * i + 8, 4) == i + 2
    assert floordiv(const(7), 2) == const(3)
    assert floordiv(const(-7), 2) == const(-4)
    e = floordiv(i + 1, 2)
    assert not e.is_const and e.eval({"i": 4}) == 2


def test_modulo_reduces_coefficients_and_is_idempotent():
    assert mod(4 * i + 6, 4) == const(2)
    assert mod(5 * i, 4) == mod(i, 4)
    assert mod(mod(i, 3), 3) == mod(i, 3)
    assert mod(const(-1), 4) == const(3)  # Euclidean


def test_modulo_supremum_is_denominator_minus_one():
    e = mod(i, 4)
    atom = e.terms[0][0]
    assert isinstance(atom, ModuloExpr)
    assert e.bounds({"i": (0, 100)}) == (0, 3)
    assert e.bounds({"i": (0, 2)}) == (0, 2)  # tighter when the numerator already fits


def test_eval_with_registers_and_indirect_arguments():
    e = 3 * runtime("r1") + 2 * indirect(1) + i + 5
    env = Env(axes={"i": 2}, regs={"r1": 10}, indirect={1: 4})
    assert e.eval(env) == 30 + 8 + 2 + 5
    with pytest.raises(TuskError, match="register 'r1'"):
        e.eval(Env(axes={"i": 2}, indirect={1: 4}))


def test_vectorised_eval_matches_scalar_eval():
    e = floordiv(3 * i + j, 4) + mod(i - 2 * j, 5) - 7
    ii, jj = np.meshgrid(np.arange(-3, 9), np.arange(0, 6), indexing="ij")
    got = e.eval_np({"i": ii, "j": jj})
    want = np.array([[e.eval({"i": a, "j": b}) for b in range(0, 6)] for a in range(-3, 9)])
    assert np.array_equal(got, want)


def test_subst_is_partial_evaluation():
    e = 4 * i + mod(j + i, 3)
    assert e.subst({"i": 2}) == 8 + mod(j + 2, 3)
    assert e.subst({"i": 2, "j": 2}) == const(9)


def test_predicates():
    p = AffinePredicate(i - 2, "ge")
    assert not p.eval({"i": 1}) and p.eval({"i": 2})
    assert list(p.eval_np({"i": np.arange(4)})) == [False, False, True, True]
    with pytest.raises(TuskError):
        AffinePredicate(i, "bogus")


def test_wire_forms_round_trip():
    for e in (const(3), i, 2 * i + 3 * j - 1, floordiv(i, 2), mod(i + 1, 4) * 3 + j,
              runtime("r") * 8 + 1, indirect(1) * 64):
        assert expr_from_json(expr_to_json(e)) == e


def test_v1_legacy_form_is_read():
    obj = {"terms": [{"AxisLabel": "i", "coef": 2}], "c": 1, "op": "Mod", "op_param": 3}
    assert expr_from_json(obj) == mod(2 * i + 1, 3)


def test_unknown_kind_uses_the_backend_message():
    with pytest.raises(FormatError, match="Walrus doesn't support this kind of Expr"):
        expr_from_json({"kind": "APIndex"})


exprs = st.deferred(lambda: st.one_of(
    st.integers(-20, 20).map(const),
    st.sampled_from(["i", "j", "k"]).map(idx),
    st.tuples(exprs, exprs).map(lambda t: t[0] + t[1]),
    st.tuples(exprs, st.integers(-4, 4)).map(lambda t: t[0] * t[1]),
    st.tuples(exprs, st.integers(1, 6)).map(lambda t: floordiv(t[0], t[1])),
    st.tuples(exprs, st.integers(1, 6)).map(lambda t: mod(t[0], t[1])),
))


@settings(max_examples=200, deadline=None)
@given(exprs, st.integers(-10, 10), st.integers(-10, 10), st.integers(-10, 10))
def test_canonicalisation_preserves_value(e, a, b, c):
    env = {"i": a, "j": b, "k": c}
    assert expr_from_json(expr_to_json(e)) == e
    assert expr_from_json(expr_to_json(e)).eval(env) == e.eval(env)
    assert (e + e).eval(env) == 2 * e.eval(env)
    assert e.subst({"i": a}).eval(env) == e.eval(env)
    lo, hi = e.bounds({"i": (a, a), "j": (b, b), "k": (c, c)})
    assert lo <= e.eval(env) <= hi
