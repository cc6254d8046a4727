"""exp, tanh, erf and sigmoid from + - * only, so vectors stay vectors.

LLVM lowers ``llvm.exp`` on a vector to one libm call per lane on x86 (no vector math library
is linked), which makes softmax or GELU an order of magnitude slower than the surrounding code.
These versions use a range reduction and a polynomial (float32; max relative error ~1e-7 for
exp and sigmoid, ~1e-6 for tanh and erf) and vectorize like any arithmetic. On a CUDA target
they are CUDA's own expf / tanhf / erff (no vectors to keep; the written-out polynomials copy
their input many times, which NVRTC did not undo: a float16 GELU's erf ran 15x slower).

    y = topi.fast_exp(x)        # element-wise tensors, like topi.exp
    e = fast_exp_expr(v)        # on a single expression inside your own compute
"""

from __future__ import annotations

from kiln import te, tir
from kiln.ir.expr import const

_LOG2E = 1.4426950408889634
_LN2_HI = 0.693359375  # ln 2 split in two so that n * ln2 subtracts exactly (Cody-Waite)
_LN2_LO = -2.12194440e-4
# Minimax polynomial of (e^r - 1 - r) / r^2 on [-ln2/2, ln2/2] (the classic float expf one).
_EXP_POLY = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1)


def _c(v, dtype="float32"):
    return const(v, dtype)


def _native(x) -> bool:
    """Whether x's math goes to the target's own functions: not float32, or a CUDA target (its
    erff / tanhf / expf are fast and need no vectors; written out, the polynomials copy their
    input a dozen times, and a float16 GELU's erf over 605k elements took 46 us on an H200)."""
    if str(x.dtype) != "float32":
        return True
    from kiln.target import Target

    target = Target.current(allow_none=True)
    return target is not None and target.kind == "cuda"


def _bound_once(fn):
    """fn(x) with a compound x bound to a variable first: the polynomials read their input many
    times, so nested calls (tanh of a sigmoid, inlined into one kernel) would grow as the product of
    those counts and every later pass would walk each copy."""
    def wrapped(x):
        if _native(x) or isinstance(x, (tir.Var, tir.FloatImm)):
            return fn(x)
        v = tir.Var(f"{fn.__name__}_x", x.dtype)
        body = fn(v)
        return tir.Let(v, x, body, body.dtype)

    wrapped.__name__, wrapped.__doc__ = fn.__name__, fn.__doc__
    return wrapped


@_bound_once
def fast_exp_expr(x):
    """e^x for a float32 expression: 2^n * p(r) with x = n ln2 + r."""
    if _native(x):
        return tir.exp(x)
    # keep 2^n a normal float; selects (one vmaxps/vminps each on x86, where tir.max/min are
    # NaN-propagating and cost three more instructions a vector); a NaN stays NaN
    x = tir.Select(x < _c(-87.3), _c(-87.3), x, x.dtype)
    x = tir.Select(x > _c(88.3), _c(88.3), x, x.dtype)
    t = x * _c(_LOG2E) + _c(0.5)
    # floor(t) by truncation and a correction: tir.floor is a libm call on targets without a
    # vector rounding instruction (ARMv7 NEON), and device runtimes need not provide libm.
    ti = t.astype("int32")
    ni = tir.Select(t < ti.astype("float32"), ti - 1, ti, ti.dtype)
    n = ni.astype("float32")
    r = x - n * _c(_LN2_HI) - n * _c(_LN2_LO)
    p = _c(_EXP_POLY[0])
    for coeff in _EXP_POLY[1:]:
        p = p * r + _c(coeff)
    y = p * (r * r) + r + _c(1.0)
    two_n = tir.reinterpret("float32", (ni + 127) << 23)
    return y * two_n


@_bound_once
def fast_tanh_expr(x):
    """tanh x = sign(x) (1 - e) / (1 + e) with e = exp(-2|x|) (never overflows)."""
    if _native(x):
        return tir.tanh(x)
    e = fast_exp_expr(_c(-2.0) * tir.abs(x))
    t = (_c(1.0) - e) / (_c(1.0) + e)
    t = tir.Select(x < _c(0.0), -t, t, x.dtype)
    # Near 0, 1 - e cancels; the odd series is exact to float precision below 0.1.
    x2 = x * x
    series = x * (_c(1.0) + x2 * (_c(-1.0 / 3) + x2 * (_c(2.0 / 15) + x2 * _c(-17.0 / 315))))
    return tir.Select(tir.abs(x) < _c(0.1), series, t, x.dtype)


@_bound_once
def fast_sigmoid_expr(x):
    if _native(x):
        return tir.sigmoid(x)
    return _c(1.0) / (_c(1.0) + fast_exp_expr(-x))


@_bound_once
def fast_erf_expr(x):
    """Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7), odd-extended."""
    if _native(x):
        return tir.erf(x)
    a = tir.abs(x)
    t = _c(1.0) / (_c(1.0) + _c(0.3275911) * a)
    poly = ((((_c(1.061405429) * t + _c(-1.453152027)) * t + _c(1.421413741)) * t + _c(-0.284496736)) * t
            + _c(0.254829592)) * t
    y = _c(1.0) - poly * fast_exp_expr(-a * a)
    y = tir.Select(x < _c(0.0), -y, y, x.dtype)
    # The A&S form has absolute, not relative, accuracy: near 0 use the Taylor series.
    x2 = x * x
    series = _c(1.1283791670955126) * x * (_c(1.0) + x2 * (_c(-1.0 / 3) + x2 * (_c(0.1) + x2 * (_c(-1.0 / 42) + x2 * _c(1.0 / 216)))))
    return tir.Select(a < _c(0.5), series, y, x.dtype)


def _unary(name, fn):
    def op(x):
        return te.compute(x.shape, lambda *i: fn(x(*i)), name=f"T_{name}", tag="elemwise")

    op.__name__ = name
    op.__doc__ = f"Element-wise {name} (vectorizable float32 approximation)."
    return op


fast_exp = _unary("fast_exp", fast_exp_expr)
fast_tanh = _unary("fast_tanh", fast_tanh_expr)
fast_erf = _unary("fast_erf", fast_erf_expr)
fast_sigmoid = _unary("fast_sigmoid", fast_sigmoid_expr)


def fast_gelu(x):
    """x * Phi(x) with the vectorizable erf."""
    half = _c(0.5, x.dtype)
    return te.compute(x.shape, lambda *i: half * x(*i) * (_c(1.0, x.dtype) + fast_erf_expr(x(*i) * _c(0.7071067811865476, x.dtype))),
                      name="T_fast_gelu", tag="elemwise")


def gelu(x, approximate: str = "none"):
    """GELU in one stage: ``x * (0.5 + 0.5 erf(x / sqrt 2))``, or GPT-2's
    ``0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))``, with the vectorizable erf/tanh above."""
    import math

    def f(v):
        c = lambda value: const(value, v.dtype)  # noqa: E731
        if approximate == "tanh":
            inner = c(math.sqrt(2 / math.pi)) * (v + c(0.044715) * v * v * v)
            return c(0.5) * v * (c(1.0) + fast_tanh_expr(inner))
        return v * (c(0.5) + c(0.5) * fast_erf_expr(v * c(1 / math.sqrt(2))))

    def bound(*i):
        # the input bound once: inlined into a GEMM's epilogue it is a whole expression, which the
        # erf/tanh polynomials would otherwise copy a dozen times (and the simplifier walk each copy)
        v = tir.Var("gelu_x", x.dtype)
        body = f(v)
        return tir.Let(v, x(*i), body, body.dtype)

    return te.compute(x.shape, bound, name="T_gelu", tag="elemwise")


def hardswish(x):
    """``x * clip(x / 6 + 1/2, 0, 1)`` in one stage (the input bound once, as in gelu)."""
    def bound(*i):
        v = tir.Var("hardswish_x", x.dtype)
        c = lambda value: const(value, x.dtype)  # noqa: E731
        body = v * tir.min(tir.max(v * c(1 / 6) + c(0.5), c(0.0)), c(1.0))
        return tir.Let(v, x(*i), body, body.dtype)

    return te.compute(x.shape, bound, name="T_hardswish", tag="elemwise")
