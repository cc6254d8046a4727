"""ONNX elementwise ops: activations, arithmetic, comparisons, logic, variadic Min/Max/Sum/Mean."""

from __future__ import annotations

import math

from ...expr import Constant, const
from ...op import nn, tensor
from ...op import transform as tf


def _c(ctx, x, value):
    """A scalar constant with x's dtype."""
    return const(value, ctx.type_of(x).dtype)


def _unary(fn):
    return lambda ctx, ins, attrs: fn(ins[0])


def _binary(fn):
    return lambda ctx, ins, attrs: fn(ins[0], ins[1])


def _variadic(fn, mean=False):
    def convert(ctx, ins, attrs):
        out = ins[0]
        for x in ins[1:]:
            out = fn(out, x)
        return tensor.divide(out, _c(ctx, out, len(ins))) if mean else out
    return convert


def _clip(ctx, ins, attrs):
    x = ins[0]
    if ctx.opset < 11:
        return tensor.clip(x, attrs.get("min", -math.inf), attrs.get("max", math.inf))
    lo = ins[1] if len(ins) > 1 else None
    hi = ins[2] if len(ins) > 2 else None
    if all(b is None or isinstance(b, Constant) for b in (lo, hi)):
        return tensor.clip(x, float(lo.data) if lo is not None else -math.inf,
                           float(hi.data) if hi is not None else math.inf)
    # bounds computed at run time: clip as maximum/minimum
    out = tensor.maximum(x, lo) if lo is not None else x
    return tensor.minimum(out, hi) if hi is not None else out


def _leaky_relu(ctx, ins, attrs):
    return nn.leaky_relu(ins[0], attrs.get("alpha", 0.01))


def _gelu(ctx, ins, attrs):
    x = ins[0]
    if attrs.get("approximate", "none") == "tanh":
        inner = tensor.multiply(_c(ctx, x, math.sqrt(2 / math.pi)),
                                tensor.add(x, tensor.multiply(_c(ctx, x, 0.044715), tensor.power(x, _c(ctx, x, 3.0)))))
        return tensor.multiply(tensor.multiply(_c(ctx, x, 0.5), x), tensor.add(_c(ctx, x, 1.0), tensor.tanh(inner)))
    cdf = tensor.add(_c(ctx, x, 0.5), tensor.multiply(_c(ctx, x, 0.5), tensor.erf(tensor.multiply(x, _c(ctx, x, 1 / math.sqrt(2))))))
    return tensor.multiply(x, cdf)


def _pow(ctx, ins, attrs):
    base, exp = ins
    bt, et = ctx.type_of(base).dtype, ctx.type_of(exp).dtype
    if not bt.startswith("float") and et.startswith("float"):
        # integer base, float exponent: ONNX computes in floating point and converts the result
        # back to the base's type (so 2 ** 0.5 is 1)
        wide = tensor.power(tf.cast(base, "float64"), tf.cast(exp, "float64"))
        return tf.cast(wide, bt)
    if et != bt:
        exp = tf.cast(exp, bt)
    return tensor.power(base, exp)


def _elu(ctx, ins, attrs):
    x = ins[0]
    alpha = attrs.get("alpha", 1.0)
    neg = tensor.multiply(_c(ctx, x, alpha), tensor.subtract(tensor.exp(x), _c(ctx, x, 1.0)))
    return tensor.where(tensor.greater(x, _c(ctx, x, 0.0)), x, neg)


def _hard_sigmoid(ctx, ins, attrs):
    x = ins[0]
    y = tensor.add(tensor.multiply(x, _c(ctx, x, attrs.get("alpha", 0.2))), _c(ctx, x, attrs.get("beta", 0.5)))
    return tensor.clip(y, 0.0, 1.0)


def _hard_swish(ctx, ins, attrs):
    x = ins[0]
    return tensor.multiply(x, _hard_sigmoid(ctx, ins, {"alpha": 1 / 6, "beta": 0.5}))


def _softplus(ctx, ins, attrs):
    x = ins[0]
    return tensor.log(tensor.add(tensor.exp(x), _c(ctx, x, 1.0)))


def _prelu(ctx, ins, attrs):
    x, slope = ins
    return tensor.where(tensor.greater(x, _c(ctx, x, 0.0)), x, tensor.multiply(x, slope))


def _mod(ctx, ins, attrs):
    return (tensor.mod if attrs.get("fmod", 0) else tensor.floor_mod)(ins[0], ins[1])


# Element types kiln compiles; ONNX also has float8/float4 and int4/int2 variants.
_KILN_DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                "bfloat16", "float16", "float32", "float64")


def _cast_to(ctx, x, dtype: str):
    if dtype not in _KILN_DTYPES or ctx.type_of(x).dtype not in _KILN_DTYPES:
        ctx.fail(f"cast from {ctx.type_of(x).dtype} to {dtype}: kiln supports the element types {_KILN_DTYPES}")
    return tf.cast(x, dtype)


def _cast(ctx, ins, attrs):
    from onnx import helper
    to = attrs.get("to")
    try:
        dtype = helper.tensor_dtype_to_np_dtype(to).name
    except (KeyError, TypeError, ValueError):
        ctx.fail(f"attribute to={to!r} is not an ONNX element type (TensorProto.DataType)")
    return _cast_to(ctx, ins[0], dtype)


def _cast_like(ctx, ins, attrs):
    return _cast_to(ctx, ins[0], ctx.type_of(ins[1]).dtype)


def _identity(ctx, ins, attrs):
    return ins[0]


def _where(ctx, ins, attrs):
    return tensor.where(ins[0], ins[1], ins[2])


CONVERTERS = {
    "Relu": _unary(nn.relu), "Sigmoid": _unary(tensor.sigmoid), "Tanh": _unary(tensor.tanh), "Erf": _unary(tensor.erf),
    "Sqrt": _unary(tensor.sqrt), "Neg": _unary(tensor.negative), "Exp": _unary(tensor.exp), "Log": _unary(tensor.log),
    "Abs": _unary(tensor.abs), "Reciprocal": _unary(tensor.reciprocal), "Floor": _unary(tensor.floor),
    "Ceil": _unary(tensor.ceil), "Round": _unary(tensor.round), "Sign": _unary(tensor.sign), "Sin": _unary(tensor.sin),
    "Cos": _unary(tensor.cos), "Not": _unary(tensor.logical_not), "IsNaN": _unary(tensor.isnan),
    "Add": _binary(tensor.add), "Sub": _binary(tensor.subtract), "Mul": _binary(tensor.multiply),
    "Div": _binary(tensor.divide), "Pow": _pow, "Equal": _binary(tensor.equal), "Less": _binary(tensor.less),
    "Greater": _binary(tensor.greater), "LessOrEqual": _binary(tensor.less_equal),
    "GreaterOrEqual": _binary(tensor.greater_equal), "And": _binary(tensor.logical_and),
    "Or": _binary(tensor.logical_or), "Xor": _binary(tensor.logical_xor), "Mod": _mod,
    "Min": _variadic(tensor.minimum), "Max": _variadic(tensor.maximum), "Sum": _variadic(tensor.add),
    "Mean": _variadic(tensor.add, mean=True), "Clip": _clip, "LeakyRelu": _leaky_relu, "Gelu": _gelu, "Elu": _elu,
    "HardSigmoid": _hard_sigmoid, "HardSwish": _hard_swish, "Softplus": _softplus, "PRelu": _prelu, "Cast": _cast, "CastLike": _cast_like,
    "Identity": _identity, "Where": _where,
}
