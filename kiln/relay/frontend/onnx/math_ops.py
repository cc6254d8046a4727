"""ONNX elementwise ops beyond the common set: more activations (Selu, Celu, ThresholdedRelu,
Mish, Swish, Softsign, Shrink), trigonometry, IsInf, bitwise logic and shifts; and small
normalizations written with relay ops: Hardmax, LpNormalization, LpPool, LRN,
MeanVarianceNormalization."""

from __future__ import annotations

import numpy as np

from ...expr import const
from ...op import math_ops, nn_pool, reduce, tensor
from ...op import transform as tf


def _c(ctx, x, value):
    return const(value, ctx.type_of(x).dtype)


def _unary(fn):
    return lambda ctx, ins, attrs: fn(ins[0])


def _binary(fn):
    return lambda ctx, ins, attrs: fn(ins[0], ins[1])


def _selu(ctx, ins, attrs):
    x = ins[0]
    alpha, gamma = attrs.get("alpha", 1.67326319217681884765625), attrs.get("gamma", 1.05070102214813232421875)
    neg = tensor.multiply(_c(ctx, x, alpha), tensor.subtract(tensor.exp(x), _c(ctx, x, 1.0)))
    return tensor.multiply(_c(ctx, x, gamma), tensor.where(tensor.greater(x, _c(ctx, x, 0.0)), x, neg))


def _celu(ctx, ins, attrs):
    x = ins[0]
    alpha = attrs.get("alpha", 1.0)
    neg = tensor.multiply(_c(ctx, x, alpha), tensor.subtract(tensor.exp(tensor.divide(x, _c(ctx, x, alpha))),
                                                             _c(ctx, x, 1.0)))
    return tensor.add(tensor.maximum(x, _c(ctx, x, 0.0)), tensor.minimum(neg, _c(ctx, x, 0.0)))


def _thresholded_relu(ctx, ins, attrs):
    x = ins[0]
    return tensor.where(tensor.greater(x, _c(ctx, x, attrs.get("alpha", 1.0))), x, _c(ctx, x, 0.0))


def _softplus(ctx, x):
    # log(1 + e^x) without overflow: max(x, 0) + log(1 + e^-|x|)
    return tensor.add(tensor.maximum(x, _c(ctx, x, 0.0)),
                      tensor.log(tensor.add(_c(ctx, x, 1.0), tensor.exp(tensor.negative(tensor.abs(x))))))


def _mish(ctx, ins, attrs):
    # tanh(softplus(x)) = n (n + 2) / (n (n + 2) + 2) with n = e^x: one exp, no log or tanh (the
    # nested form makes a fused kernel whose expression takes minutes to compile); x is capped
    # at 20, where the ratio is 1 in float, so e^x does not overflow to inf / inf
    x = ins[0]
    n = tensor.exp(tensor.minimum(x, _c(ctx, x, 20.0)))
    m = tensor.multiply(n, tensor.add(n, _c(ctx, x, 2.0)))
    return tensor.multiply(x, tensor.divide(m, tensor.add(m, _c(ctx, x, 2.0))))


def _swish(ctx, ins, attrs):
    x = ins[0]
    return tensor.multiply(x, tensor.sigmoid(tensor.multiply(x, _c(ctx, x, attrs.get("alpha", 1.0)))))


def _softsign(ctx, ins, attrs):
    x = ins[0]
    return tensor.divide(x, tensor.add(_c(ctx, x, 1.0), tensor.abs(x)))


def _shrink(ctx, ins, attrs):
    x = ins[0]
    lambd, bias = attrs.get("lambd", 0.5), attrs.get("bias", 0.0)
    zero = _c(ctx, x, 0)
    low = tensor.where(tensor.less(x, _c(ctx, x, -lambd)), tensor.add(x, _c(ctx, x, bias)), zero)
    return tensor.where(tensor.greater(x, _c(ctx, x, lambd)), tensor.subtract(x, _c(ctx, x, bias)), low)


def _asinh(ctx, ins, attrs):
    x = ins[0]
    return tensor.log(tensor.add(x, tensor.sqrt(tensor.add(tensor.multiply(x, x), _c(ctx, x, 1.0)))))


def _acosh(ctx, ins, attrs):
    x = ins[0]
    return tensor.log(tensor.add(x, tensor.sqrt(tensor.subtract(tensor.multiply(x, x), _c(ctx, x, 1.0)))))


def _atanh(ctx, ins, attrs):
    x = ins[0]
    one = _c(ctx, x, 1.0)
    return tensor.multiply(_c(ctx, x, 0.5), tensor.log(tensor.divide(tensor.add(one, x), tensor.subtract(one, x))))


def _isinf(ctx, ins, attrs):
    x = ins[0]
    inf = math_ops.isinf(x)
    neg, pos = attrs.get("detect_negative", 1), attrs.get("detect_positive", 1)
    if neg and pos:
        return inf
    sign = tensor.greater(x, _c(ctx, x, 0)) if pos else tensor.less(x, _c(ctx, x, 0))
    return tensor.logical_and(inf, sign) if (neg or pos) else tensor.logical_and(inf, tensor.logical_not(inf))


def _bit_shift(ctx, ins, attrs):
    direction = attrs.get("direction", "")
    if direction not in ("LEFT", "RIGHT"):
        ctx.fail(f"attribute direction={direction!r} must be 'LEFT' or 'RIGHT'")
    return (math_ops.left_shift if direction == "LEFT" else math_ops.right_shift)(ins[0], ins[1])


def _one_hot_max(ctx, x, axis):
    shape = ctx.shape_of(x)
    first = reduce.argmax(x, axis=[axis], keepdims=True)  # the first maximum, as ONNX asks
    positions = np.arange(shape[axis], dtype="int32").reshape([-1 if a == axis else 1 for a in range(len(shape))])
    hit = tensor.equal(tf.cast(first, "int32"), const(positions))
    return tf.cast(hit, ctx.type_of(x).dtype)


def _hardmax_any(ctx, ins, attrs):
    x = ins[0]
    shape = ctx.shape_of(x)
    if ctx.opset >= 13:
        return _one_hot_max(ctx, x, attrs.get("axis", -1) % len(shape))
    axis = attrs.get("axis", 1) % max(len(shape), 1)
    flat = tf.reshape(x, (int(np.prod(shape[:axis])), -1))
    return tf.reshape(_one_hot_max(ctx, flat, 1), shape)


def _lp_norm(ctx, x, p, axes, keepdims=True):
    if p == 1:
        return reduce.sum(tensor.abs(x), axes, keepdims=keepdims)
    if p == 2:
        return tensor.sqrt(reduce.sum(tensor.multiply(x, x), axes, keepdims=keepdims))
    ctx.fail(f"attribute p={p} must be 1 or 2")


def _lp_normalization(ctx, ins, attrs):
    x = ins[0]
    axis = attrs.get("axis", -1) % len(ctx.shape_of(x))
    norm = _lp_norm(ctx, x, attrs.get("p", 2), [axis])
    # an all-zero vector stays zero (0 / 0 would be NaN)
    safe = tensor.where(tensor.equal(norm, _c(ctx, x, 0.0)), _c(ctx, x, 1.0), norm)
    return tensor.divide(x, safe)


def _lp_pool(ctx, ins, attrs):
    from .nn import CONVERTERS as NN
    x = ins[0]
    p = attrs.get("p", 2)
    kernel = attrs["kernel_shape"]
    powered = tensor.power(tensor.abs(x), _c(ctx, x, float(p)))
    avg_attrs = {k: v for k, v in attrs.items() if k != "p"}
    avg = NN["AveragePool"](ctx, [powered], {**avg_attrs, "count_include_pad": 1})
    total = tensor.multiply(avg, _c(ctx, x, float(np.prod(kernel))))
    return tensor.power(total, _c(ctx, x, 1.0 / p))


def _lrn(ctx, ins, attrs):
    x = ins[0]
    n, c = ctx.shape_of(x)[:2]
    rest = int(np.prod(ctx.shape_of(x)[2:]))
    size = attrs["size"]
    alpha, beta, bias = attrs.get("alpha", 1e-4), attrs.get("beta", 0.75), attrs.get("bias", 1.0)
    sq = tf.reshape(tensor.multiply(x, x), (n, 1, c, rest))
    lo, hi = (size - 1) // 2, (size - 1) - (size - 1) // 2
    window_sum = tensor.multiply(
        nn_pool.avg_pool2d(sq, (size, 1), (1, 1), (1, 1), (lo, 0, hi, 0), count_include_pad=True),
        _c(ctx, x, float(size)))
    scale = tensor.add(_c(ctx, x, bias), tensor.multiply(_c(ctx, x, alpha / size), window_sum))
    return tensor.divide(x, tf.reshape(tensor.power(scale, _c(ctx, x, beta)), ctx.shape_of(x)))


def _mvn(ctx, ins, attrs):
    x = ins[0]
    axes = list(attrs.get("axes", [0, 2, 3]))
    mean = reduce.mean(x, axes, keepdims=True)
    centered = tensor.subtract(x, mean)
    var = reduce.mean(tensor.multiply(centered, centered), axes, keepdims=True)
    return tensor.divide(centered, tensor.add(tensor.sqrt(var), _c(ctx, x, 1e-9)))


CONVERTERS = {
    "Selu": _selu, "Celu": _celu, "ThresholdedRelu": _thresholded_relu, "Mish": _mish, "Swish": _swish,
    "Softsign": _softsign, "Shrink": _shrink,
    "Tan": _unary(math_ops.tan), "Asin": _unary(math_ops.asin), "Acos": _unary(math_ops.acos),
    "Atan": _unary(math_ops.atan), "Sinh": _unary(math_ops.sinh), "Cosh": _unary(math_ops.cosh),
    "Asinh": _asinh, "Acosh": _acosh, "Atanh": _atanh, "IsInf": _isinf,
    "BitwiseNot": _unary(math_ops.bitwise_not), "BitwiseAnd": _binary(math_ops.bitwise_and),
    "BitwiseOr": _binary(math_ops.bitwise_or), "BitwiseXor": _binary(math_ops.bitwise_xor), "BitShift": _bit_shift,
    "Hardmax": _hardmax_any, "LpNormalization": _lp_normalization, "LpPool": _lp_pool, "LRN": _lrn,
    "MeanVarianceNormalization": _mvn,
}
