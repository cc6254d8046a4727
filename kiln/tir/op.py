"""Intrinsic functions on expressions: math, selection, integer division flavours, limits."""

from __future__ import annotations

import builtins

from kiln.ir.dtype import BOOL_T, dtype as _dtype
from kiln.ir.expr import (
    And, Call, Div, FloorDiv, FloorMod, FloatImm, IntImm, Max, Min, Mod, Or, PrimExpr, Select,
    _binary, _match, cast, const, convert,
)


def _float_arg(name: str, x) -> PrimExpr:
    x = convert(x)
    if not isinstance(x, PrimExpr):
        raise TypeError(f"{name}: expected an expression, got {x!r}")
    if not x.dtype.is_float:
        raise TypeError(f"{name}: argument {x} has dtype {x.dtype}; {name} needs a float (cast it first)")
    return x


def _unary_math(name: str):
    def fn(x):
        x = _float_arg(name, x)
        return Call(x.dtype, f"tir.{name}", (x,))

    fn.__name__ = name
    fn.__doc__ = f"Element-wise {name} of a float expression."
    return fn


exp = _unary_math("exp")
exp2 = _unary_math("exp2")
exp10 = _unary_math("exp10")
log = _unary_math("log")
log2 = _unary_math("log2")
log10 = _unary_math("log10")
log1p = _unary_math("log1p")
sqrt = _unary_math("sqrt")
rsqrt = _unary_math("rsqrt")
tanh = _unary_math("tanh")
erf = _unary_math("erf")
sin = _unary_math("sin")
cos = _unary_math("cos")
tan = _unary_math("tan")
asin = _unary_math("asin")
acos = _unary_math("acos")
atan = _unary_math("atan")
sinh = _unary_math("sinh")
cosh = _unary_math("cosh")
floor = _unary_math("floor")
ceil = _unary_math("ceil")
trunc = _unary_math("trunc")
nearbyint = _unary_math("nearbyint")


def round(x):  # noqa: A001 - seed API name
    """Round to nearest, halves to even (numpy's rule)."""
    x = _float_arg("round", x)
    return Call(x.dtype, "tir.nearbyint", (x,))


def sigmoid(x):
    """1 / (1 + exp(-x))."""
    x = _float_arg("sigmoid", x)
    one = const(1.0, x.dtype)
    return one / (one + exp(-x))


def abs(x):  # noqa: A001
    """|x| for floats and signed integers."""
    x = convert(x)
    if x.dtype.is_float:
        return Call(x.dtype, "tir.fabs", (x,))
    if x.dtype.is_uint or x.dtype.is_bool:
        return x
    return Select(x < 0, -x, x, x.dtype)


def power(x, y):
    """x ** y; integers stay integers (exact, wrapping on overflow like numpy)."""
    x, y = _match(x, y)
    if x.dtype.is_bool:
        x, y = cast(x, "int8"), cast(y, "int8")
    if not x.dtype.is_float:
        return _int_power(x, y)
    return Call(x.dtype, "tir.pow", (x, y))


def _int_power(x, y):
    # Square-and-multiply over every bit of the exponent. A float pow would round results above
    # 2**53 and return a float the integer type relation does not expect. Lets keep the
    # expression linear in size: each step names its base and partial product once.
    from kiln.ir.expr import Let, Var

    t = x.dtype
    one, zero = const(1, t), const(0, t)
    steps = []  # (var, value), innermost last
    base, acc = x, one
    for bit in range(t.bits - (0 if t.is_uint else 1)):
        b, r = Var(f"pow_base{bit}", t), Var(f"pow_acc{bit}", t)
        steps += [(b, base), (r, acc)]
        taken = (bitwise_and(y, const(1 << bit, t)) != zero)
        base, acc = b * b, Select(taken, r * b, r, t)
    result = acc
    if not t.is_uint:
        # x ** -n truncated towards zero: 1 for x == 1, +-1 for x == -1, else 0.
        odd = bitwise_and(y, one) != zero
        neg = Select(x == one, one, Select(x == -one, Select(odd, -one, one, t), zero, t), t)
        result = Select(y < zero, neg, result, t)
    for var, value in reversed(steps):
        result = Let(var, value, result, t)
    return result


pow = power  # noqa: A001


def fmod(x, y):
    x, y = _match(x, y)
    return Call(x.dtype, "tir.fmod", (x, y))


def isnan(x):
    x = convert(x)
    if not x.dtype.is_float:
        return const(False)
    return Call(BOOL_T.with_lanes(x.dtype.lanes), "tir.isnan", (x,))


def isinf(x):
    x = convert(x)
    if not x.dtype.is_float:
        return const(False)
    return Call(BOOL_T.with_lanes(x.dtype.lanes), "tir.isinf", (x,))


def isfinite(x):
    x = convert(x)
    if not x.dtype.is_float:
        return const(True)
    return Call(BOOL_T.with_lanes(x.dtype.lanes), "tir.isfinite", (x,))


def if_then_else(cond, t, f):
    """cond ? t : f, evaluating only the chosen side (safe for guarded out-of-range loads)."""
    cond = convert(cond)
    if not cond.dtype.is_bool:
        cond = cond != const(0, cond.dtype)
    t, f = _match(t, f)
    if isinstance(cond, IntImm):
        return t if cond.value else f
    return Call(t.dtype, "tir.if_then_else", (cond, t, f))


def likely(cond):
    """A hint that cond is usually true (loop partitioning splits on these)."""
    cond = convert(cond)
    return Call(cond.dtype, "tir.likely", (cond,))


def max(a, b=None, *rest):  # noqa: A001
    """The larger of the arguments (two or more)."""
    if b is None:
        raise TypeError("tir.max needs at least two arguments (for a reduction use te.max(expr, axis=...))")
    out = _binary(Max, a, b)
    for r in rest:
        out = _binary(Max, out, r)
    return out


def min(a, b=None, *rest):  # noqa: A001
    """The smaller of the arguments (two or more)."""
    if b is None:
        raise TypeError("tir.min needs at least two arguments (for a reduction use te.min(expr, axis=...))")
    out = _binary(Min, a, b)
    for r in rest:
        out = _binary(Min, out, r)
    return out


def all(*conds):  # noqa: A001
    """Logical and of the conditions."""
    conds = _flat(conds)
    out = convert(conds[0])
    for c in conds[1:]:
        out = And(out, convert(c), BOOL_T)
    return out


def any(*conds):  # noqa: A001
    """Logical or of the conditions."""
    conds = _flat(conds)
    out = convert(conds[0])
    for c in conds[1:]:
        out = Or(out, convert(c), BOOL_T)
    return out


def _flat(conds):
    if len(conds) == 1 and isinstance(conds[0], (list, tuple)):
        conds = tuple(conds[0])
    if not conds:
        raise ValueError("tir.all/any need at least one condition")
    return conds


def floordiv(a, b):
    return _binary(FloorDiv, a, b)


def floormod(a, b):
    return _binary(FloorMod, a, b)


def truncdiv(a, b):
    return _binary(Div, a, b)


def truncmod(a, b):
    return _binary(Mod, a, b)


def div(a, b):
    return _binary(Div, a, b)


# In TVM, index arithmetic defaults to floor semantics.
indexdiv = floordiv
indexmod = floormod


def max_value(dtype) -> PrimExpr:
    dt = _dtype(dtype)
    if dt.kind == "bfloat":
        return FloatImm(dt, 3.3895313892515355e38)  # (2 - 2^-7) * 2^127
    if dt.is_float:
        return FloatImm(dt, {16: 65504.0, 32: 3.4028234663852886e38, 64: 1.7976931348623157e308}[dt.bits])
    if dt.is_bool:
        return const(True)
    if dt.is_uint:
        return IntImm(dt, (1 << dt.bits) - 1)
    return IntImm(dt, (1 << (dt.bits - 1)) - 1)


def min_value(dtype) -> PrimExpr:
    dt = _dtype(dtype)
    if dt.is_float:
        return FloatImm(dt, -max_value(dt).value)
    if dt.is_bool:
        return const(False)
    if dt.is_uint:
        return IntImm(dt, 0)
    return IntImm(dt, -(1 << (dt.bits - 1)))


def infinity(dtype) -> PrimExpr:
    return FloatImm(_dtype(dtype), float("inf"))


def reinterpret(dtype, value) -> PrimExpr:
    return Call(_dtype(dtype), "tir.reinterpret", (convert(value),))


def call_extern(dtype, func_name: str, *args) -> PrimExpr:
    """Call a C function available where the module is loaded."""
    return Call(_dtype(dtype), func_name, tuple(convert(a) for a in args))


def call_intrin(dtype, op_name: str, *args) -> PrimExpr:
    name = op_name if op_name.startswith("tir.") else f"tir.{op_name}"
    return Call(_dtype(dtype), name, tuple(convert(a) for a in args))


def popcount(x):
    x = convert(x)
    return Call(x.dtype, "tir.popcount", (x,))


def bitwise_and(a, b):
    return convert(a) & b


def bitwise_or(a, b):
    return convert(a) | b


def bitwise_xor(a, b):
    return convert(a) ^ b


def bitwise_not(a):
    return ~convert(a)


def ceildiv(a, b):
    return floordiv(convert(a) + b - 1, b)


_ = builtins
