"""Elementwise and broadcasting ops: unary math, binary arithmetic, comparisons, where, clip."""

from __future__ import annotations

import math

import numpy as np

from ..expr import OPERATORS
from ..ty import TensorType
from .registry import OpDef, OpPattern, RelCtx, broadcast_shapes, identity_rel

ELEMWISE, BROADCAST = OpPattern.ELEMWISE, OpPattern.BROADCAST


def _erf(x: np.ndarray) -> np.ndarray:
    # numpy has no erf; math.erf per element is exact but slow, so vectorize it only for
    # small arrays and use a 1e-7-accurate rational approximation (A&S 7.1.26 refined) otherwise.
    if x.size <= 4096:
        return np.vectorize(math.erf, otypes=[np.float64])(x).astype(x.dtype)
    z = np.abs(x.astype(np.float64))
    t = 1.0 / (1.0 + 0.5 * z)
    # Numerical Recipes erfc approximation, relative error < 1.2e-7 everywhere.
    poly = -z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (
        -0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (
            -0.82215223 + t * 0.17087277))))))))
    erfc = t * np.exp(poly)
    return (np.sign(x) * (1.0 - erfc)).astype(x.dtype)


def _float_unary(name: str, fn, doc: str) -> OpDef:
    return OpDef(name, ("data",), {}, identity_rel, ELEMWISE,
                 lambda attrs, x: np.asarray(fn(x)).astype(x.dtype, copy=False), doc=doc)


def _bool_rel(ctx: RelCtx) -> TensorType:
    return TensorType(ctx.tensor(0).shape, "bool")


def _binary_rel(ctx: RelCtx) -> TensorType:
    dtype = ctx.same_dtype(0, 1)
    return TensorType(broadcast_shapes(ctx, [ctx.tensor(0).shape, ctx.tensor(1).shape]), dtype)


def _compare_rel(ctx: RelCtx) -> TensorType:
    return TensorType(_binary_rel(ctx).shape, "bool")


def _int_div(a, b):
    if a.dtype.kind in "iu":  # C semantics: truncate toward zero, as TVM and ONNX do
        q = np.abs(a) // np.maximum(np.abs(b), 1)
        return (np.sign(a) * np.sign(b) * q).astype(a.dtype)
    return a / b


def _binary(name: str, fn, doc: str) -> OpDef:
    return OpDef(name, ("lhs", "rhs"), {}, _binary_rel, BROADCAST,
                 lambda attrs, a, b: np.asarray(fn(a, b)).astype(a.dtype, copy=False), doc=doc)


def _compare(name: str, fn, doc: str) -> OpDef:
    return OpDef(name, ("lhs", "rhs"), {}, _compare_rel, BROADCAST,
                 lambda attrs, a, b: np.asarray(fn(a, b)), doc=doc)


def _where_rel(ctx: RelCtx) -> TensorType:
    if ctx.tensor(0).dtype != "bool":
        ctx.fail(f"input 'condition' must be bool, got {ctx.tensor(0).dtype}")
    dtype = ctx.same_dtype(1, 2)
    return TensorType(broadcast_shapes(ctx, [ctx.tensor(i).shape for i in range(3)]), dtype)


def _clip_ref(attrs, x):
    return np.clip(x, attrs.a_min, attrs.a_max).astype(x.dtype)


def _round_half_even(x):
    return np.round(x)


def _rsqrt(x):
    return 1.0 / np.sqrt(x)


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x.astype(np.float64)))


NEGATIVE = _float_unary("negative", np.negative, "-x")
EXP = _float_unary("exp", np.exp, "e^x")
LOG = _float_unary("log", np.log, "natural log")
SQRT = _float_unary("sqrt", np.sqrt, "square root")
RSQRT = _float_unary("rsqrt", _rsqrt, "1/sqrt(x)")
TANH = _float_unary("tanh", np.tanh, "hyperbolic tangent")
SIGMOID = _float_unary("sigmoid", _sigmoid, "1/(1+e^-x)")
ERF = _float_unary("erf", _erf, "Gauss error function")
ABS = _float_unary("abs", np.abs, "|x|")
FLOOR = _float_unary("floor", np.floor, "round down")
CEIL = _float_unary("ceil", np.ceil, "round up")
ROUND = _float_unary("round", _round_half_even, "round half to even")
SIGN = _float_unary("sign", np.sign, "-1, 0 or 1")
SIN = _float_unary("sin", np.sin, "sine")
COS = _float_unary("cos", np.cos, "cosine")
COPY = _float_unary("copy", np.copy, "identity (a copy)")
RECIPROCAL = _float_unary("reciprocal", np.reciprocal, "1/x")
LOGICAL_NOT = OpDef("logical_not", ("data",), {}, _bool_rel, ELEMWISE,
                    lambda attrs, x: np.logical_not(x), doc="not x")
ISNAN = OpDef("isnan", ("data",), {}, _bool_rel, ELEMWISE, lambda attrs, x: np.isnan(x), doc="x != x")
CLIP = OpDef("clip", ("data",), {"a_min": -math.inf, "a_max": math.inf}, identity_rel, ELEMWISE, _clip_ref,
             doc="min(max(x, a_min), a_max)")

ADD = _binary("add", np.add, "lhs + rhs")
SUBTRACT = _binary("subtract", np.subtract, "lhs - rhs")
MULTIPLY = _binary("multiply", np.multiply, "lhs * rhs")
DIVIDE = _binary("divide", _int_div, "lhs / rhs (integers truncate toward zero)")
POWER = _binary("power", np.power, "lhs ** rhs")
MAXIMUM = _binary("maximum", np.maximum, "elementwise max")
MINIMUM = _binary("minimum", np.minimum, "elementwise min")
MOD = _binary("mod", np.fmod, "remainder with the sign of lhs")
FLOOR_DIVIDE = _binary("floor_divide", np.floor_divide, "floor(lhs / rhs)")
FLOOR_MOD = _binary("floor_mod", np.mod, "remainder with the sign of rhs")
LOGICAL_AND = _binary("logical_and", np.logical_and, "lhs and rhs (bool)")
LOGICAL_OR = _binary("logical_or", np.logical_or, "lhs or rhs (bool)")
LOGICAL_XOR = _binary("logical_xor", np.logical_xor, "lhs xor rhs (bool)")
EQUAL = _compare("equal", np.equal, "lhs == rhs")
NOT_EQUAL = _compare("not_equal", np.not_equal, "lhs != rhs")
LESS = _compare("less", np.less, "lhs < rhs")
LESS_EQUAL = _compare("less_equal", np.less_equal, "lhs <= rhs")
GREATER = _compare("greater", np.greater, "lhs > rhs")
GREATER_EQUAL = _compare("greater_equal", np.greater_equal, "lhs >= rhs")
WHERE = OpDef("where", ("condition", "x", "y"), {}, _where_rel, BROADCAST,
              lambda attrs, c, x, y: np.where(c, x, y), doc="x where condition else y")

OPS = [NEGATIVE, EXP, LOG, SQRT, RSQRT, TANH, SIGMOID, ERF, ABS, FLOOR, CEIL, ROUND, SIGN, SIN, COS, COPY,
       RECIPROCAL, LOGICAL_NOT, ISNAN, CLIP, ADD, SUBTRACT, MULTIPLY, DIVIDE, POWER, MAXIMUM, MINIMUM, MOD,
       FLOOR_DIVIDE, FLOOR_MOD, LOGICAL_AND, LOGICAL_OR, LOGICAL_XOR, EQUAL, NOT_EQUAL, LESS, LESS_EQUAL,
       GREATER, GREATER_EQUAL, WHERE]


# -- constructors (relay.add, relay.exp, ...) --------------------------------------------------------

def negative(data): return NEGATIVE(data)
def exp(data): return EXP(data)
def log(data): return LOG(data)
def sqrt(data): return SQRT(data)
def rsqrt(data): return RSQRT(data)
def tanh(data): return TANH(data)
def sigmoid(data): return SIGMOID(data)
def erf(data): return ERF(data)
def abs(data): return ABS(data)  # noqa: A001 - relay's name
def floor(data): return FLOOR(data)
def ceil(data): return CEIL(data)
def round(data): return ROUND(data)  # noqa: A001
def sign(data): return SIGN(data)
def sin(data): return SIN(data)
def cos(data): return COS(data)
def copy(data): return COPY(data)
def reciprocal(data): return RECIPROCAL(data)
def logical_not(data): return LOGICAL_NOT(data)
def isnan(data): return ISNAN(data)
def clip(a, a_min, a_max): return CLIP(a, a_min=float(a_min), a_max=float(a_max))
def add(lhs, rhs): return ADD(lhs, rhs)
def subtract(lhs, rhs): return SUBTRACT(lhs, rhs)
def multiply(lhs, rhs): return MULTIPLY(lhs, rhs)
def divide(lhs, rhs): return DIVIDE(lhs, rhs)
def power(lhs, rhs): return POWER(lhs, rhs)
def maximum(lhs, rhs): return MAXIMUM(lhs, rhs)
def minimum(lhs, rhs): return MINIMUM(lhs, rhs)
def mod(lhs, rhs): return MOD(lhs, rhs)
def floor_divide(lhs, rhs): return FLOOR_DIVIDE(lhs, rhs)
def floor_mod(lhs, rhs): return FLOOR_MOD(lhs, rhs)
def logical_and(lhs, rhs): return LOGICAL_AND(lhs, rhs)
def logical_or(lhs, rhs): return LOGICAL_OR(lhs, rhs)
def logical_xor(lhs, rhs): return LOGICAL_XOR(lhs, rhs)
def equal(lhs, rhs): return EQUAL(lhs, rhs)
def not_equal(lhs, rhs): return NOT_EQUAL(lhs, rhs)
def less(lhs, rhs): return LESS(lhs, rhs)
def less_equal(lhs, rhs): return LESS_EQUAL(lhs, rhs)
def greater(lhs, rhs): return GREATER(lhs, rhs)
def greater_equal(lhs, rhs): return GREATER_EQUAL(lhs, rhs)
def where(condition, x, y): return WHERE(condition, x, y)


# What Python's operators on expressions build (kiln/relay/expr.py OPERATORS): a + b is add(a, b).
OPERATORS.update(add=add, subtract=subtract, multiply=multiply, divide=divide, negative=negative)
