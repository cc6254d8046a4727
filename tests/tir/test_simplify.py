"""The simplifier: constant folding and index arithmetic, checked against Python's integers."""

from hypothesis import given, settings, strategies as st

from kiln import tir
from kiln.ir import IntImm, Range, const, structural_equal, var
from kiln.tir.simplify import Analyzer, simplify


def test_split_index_math_folds_back():
    i, j = var("i"), var("j")
    ranges = {i: Range(const(0), const(8)), j: Range(const(0), const(32))}
    assert simplify((i * 32 + j) // 32, ranges) is i
    assert simplify((i * 32 + j) % 32, ranges) is j


def test_linear_terms_cancel():
    i, j = var("i"), var("j")
    assert structural_equal(simplify(i * 2 + 3 - i * 2 + j), j + 3)
    assert structural_equal(simplify((i + 1) * 4 - i * 4), const(4))


def test_comparisons_decided_by_ranges():
    i = var("i")
    r = {i: Range(const(0), const(10))}
    assert simplify(i < 10, r).value == 1
    assert simplify(i >= 10, r).value == 0
    assert not isinstance(simplify(i < 5, r), IntImm)


def test_float_constants_fold_with_float32_rounding():
    x = simplify(const(0.1, "float32") + const(0.2, "float32"))
    import numpy as np

    assert x.value == float(np.float32(0.1) + np.float32(0.2))


ints = st.integers(min_value=-50, max_value=50)
divisors = st.integers(min_value=1, max_value=9)


@settings(max_examples=200, deadline=None)
@given(ints, ints, divisors, ints, ints)
def test_floordiv_floormod_match_python(a, b, c, x, y):
    i, j = var("i"), var("j")
    e = tir.floordiv(i * a + j * b + 7, c) * 3 + tir.floormod(i * a - j * b, c)
    expected = ((x * a + y * b + 7) // c) * 3 + ((x * a - y * b) % c)
    got = simplify(simplify(e).__class__ and _subst(simplify(e), {i: x, j: y}))
    assert got.value == expected


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 7), st.integers(0, 31), st.sampled_from([2, 4, 8, 16, 32]))
def test_simplify_under_ranges_preserves_value(x, y, c):
    i, j = var("i"), var("j")
    ranges = {i: Range(const(0), const(8)), j: Range(const(0), const(32))}
    e = tir.floordiv(i * 32 + j, c) + tir.floormod(i * 32 + j, c) * 100
    s = simplify(e, ranges)
    assert _subst(s, {i: x, j: y}).value == (x * 32 + y) // c + ((x * 32 + y) % c) * 100


def _subst(e, values):
    from kiln.ir import substitute

    return simplify(substitute(e, {k: const(v) for k, v in values.items()}))


def test_analyzer_bounds():
    i = var("i")
    an = Analyzer({i: Range(const(2), const(5))})
    assert an.const_bound(i * 3 - 1) == (5, 17)


def test_a_fused_index_put_back_together_is_the_index():
    # A fused (row, column) loop splits q into q // W and q % W; the row-major address puts them
    # back: W * (q // W) + q % W is q, for floor and truncating division alike.
    q, r = var("q"), var("r")
    assert simplify(tir.floordiv(q, 7) * 7 + tir.floormod(q, 7)) is q
    assert structural_equal(simplify(((r * 7 + tir.floordiv(q, 7)) * 7 + tir.floormod(q, 7)) * 8), r * 392 + q * 8)
    assert structural_equal(simplify(tir.truncdiv(q * 3 + 2, 7) * 14 + tir.truncmod(q * 3 + 2, 7) * 2 + 1), q * 6 + 5)
    # Coefficients that do not match, or a divide and a modulo of different kinds, stay as they are.
    kept = simplify(tir.floordiv(q, 7) * 14 + tir.floormod(q, 7))
    assert "//" in str(kept) and "%" in str(kept)
    assert "%" in str(simplify(tir.truncdiv(q, 7) * 7 + tir.floormod(q, 7)))


@settings(max_examples=200, deadline=None)
@given(ints, divisors, st.integers(-3, 3), ints)
def test_joining_divide_and_modulo_keeps_the_value(a, c, k, x):
    i = var("i")
    e = tir.floordiv(i * a + 5, c) * (c * k) + tir.floormod(i * a + 5, c) * k + i
    assert _subst(simplify(e), {i: x}).value == ((x * a + 5) // c) * c * k + ((x * a + 5) % c) * k + x
