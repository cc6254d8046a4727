"""Keras core layers: Dense, Activation, ReLU, Softmax, merges (Add, Concatenate, ...),
Flatten, Reshape, Dropout; and the ``activation=`` argument every layer may carry."""

from __future__ import annotations

import math

import numpy as np

from ...expr import const
from ...op import nn, nn_norm, tensor
from ...op import transform as tf


def _c(ctx, x, value):
    return const(value, ctx.dtype_of(x))


def _relu(ctx, x, max_value=None, negative_slope=0.0, threshold=0.0):
    if negative_slope == 0.0 and threshold == 0.0:
        return nn.relu(x) if max_value is None else tensor.clip(x, 0.0, float(max_value))
    # f(x) = x for x >= threshold, negative_slope * (x - threshold) below it, capped at max_value
    below = tensor.multiply(_c(ctx, x, float(negative_slope)), tensor.subtract(x, _c(ctx, x, float(threshold))))
    out = tensor.where(tensor.greater_equal(x, _c(ctx, x, float(threshold))), x, below)
    return out if max_value is None else tensor.minimum(out, _c(ctx, x, float(max_value)))


def _gelu(ctx, x):
    inner = tensor.erf(tensor.multiply(x, _c(ctx, x, 1 / math.sqrt(2))))
    return tensor.multiply(tensor.multiply(x, _c(ctx, x, 0.5)), tensor.add(_c(ctx, x, 1.0), inner))


def _hard_sigmoid(ctx, x):
    # clip(a x + 0.5, 0, 1): a = 0.2 in Keras 2, 1/6 in Keras 3
    slope = 1 / 6 if ctx.version >= 3 else 0.2
    return tensor.clip(tensor.add(tensor.multiply(x, _c(ctx, x, slope)), _c(ctx, x, 0.5)), 0.0, 1.0)


def _elu(ctx, x):
    neg = tensor.subtract(tensor.exp(x), _c(ctx, x, 1.0))
    return tensor.where(tensor.greater(x, _c(ctx, x, 0.0)), x, neg)


_ACTIVATIONS = {
    "linear": lambda ctx, x: x, None: lambda ctx, x: x,
    "relu": lambda ctx, x: nn.relu(x), "relu6": lambda ctx, x: tensor.clip(x, 0.0, 6.0),
    "sigmoid": lambda ctx, x: tensor.sigmoid(x), "tanh": lambda ctx, x: tensor.tanh(x),
    "softmax": lambda ctx, x: nn_norm.softmax(x, -1), "swish": lambda ctx, x: tensor.multiply(x, tensor.sigmoid(x)),
    "silu": lambda ctx, x: tensor.multiply(x, tensor.sigmoid(x)), "gelu": _gelu, "elu": _elu,
    "hard_sigmoid": _hard_sigmoid, "exponential": lambda ctx, x: tensor.exp(x),
}


def activation(ctx, x, name=None):
    """Apply the layer's ``activation`` (its config's by default)."""
    name = ctx.config.get("activation", "linear") if name is None else name
    if isinstance(name, dict):  # a serialized activation object
        name = name.get("config", {}).get("name") or name.get("class_name")
    if name not in _ACTIVATIONS:
        ctx.fail(f"activation {name!r} is not supported; supported: {sorted(k for k in _ACTIVATIONS if k)}")
    return _ACTIVATIONS[name](ctx, x)


def _dense(ctx, ins):
    x = ins[0]
    kernel = ctx.weight("kernel")  # (in, out)
    shape = ctx.shape_of(x)
    rows = x if len(shape) == 2 else tf.reshape(x, (-1, shape[-1]))
    out = nn.dense(rows, const(np.ascontiguousarray(kernel.T)))
    if ctx.config.get("use_bias", True):
        out = nn.bias_add(out, const(ctx.weight("bias")), axis=1)
    if len(shape) != 2:
        out = tf.reshape(out, shape[:-1] + (kernel.shape[1],))
    return activation(ctx, out)


def _activation(ctx, ins):
    return activation(ctx, ins[0])


def _relu_layer(ctx, ins):
    cfg = ctx.config
    return _relu(ctx, ins[0], cfg.get("max_value"), float(cfg.get("negative_slope", 0.0) or 0.0),
                 float(cfg.get("threshold", 0.0) or 0.0))


def _leaky_relu(ctx, ins):
    return nn.leaky_relu(ins[0], float(ctx.config.get("alpha", ctx.config.get("negative_slope", 0.3))))


def _softmax(ctx, ins):
    axis = ctx.config.get("axis", -1)
    if isinstance(axis, (list, tuple)):
        if len(axis) != 1:
            ctx.fail(f"softmax over several axes {axis} is not supported")
        axis = axis[0]
    return nn_norm.softmax(ins[0], int(axis))


def _merge(fn, mean=False):
    def convert(ctx, ins):
        out = ins[0]
        for x in ins[1:]:
            out = fn(out, x)
        return tensor.divide(out, _c(ctx, out, float(len(ins)))) if mean else out
    return convert


def _concatenate(ctx, ins):
    return tf.concatenate(list(ins), int(ctx.config.get("axis", -1)))


def _flatten(ctx, ins):
    ctx.channels_last()
    shape = ctx.shape_of(ins[0])
    return tf.reshape(ins[0], (shape[0], int(np.prod(shape[1:]))))


def _reshape(ctx, ins):
    target = [int(d) for d in ctx.config["target_shape"]]
    return tf.reshape(ins[0], [ctx.shape_of(ins[0])[0]] + target)


def _identity(ctx, ins):
    return ins[0]


CONVERTERS = {
    "Dense": _dense, "Activation": _activation, "ReLU": _relu_layer, "LeakyReLU": _leaky_relu, "Softmax": _softmax,
    "Add": _merge(tensor.add), "Subtract": _merge(tensor.subtract), "Multiply": _merge(tensor.multiply),
    "Maximum": _merge(tensor.maximum), "Minimum": _merge(tensor.minimum), "Average": _merge(tensor.add, mean=True),
    "Concatenate": _concatenate, "Flatten": _flatten, "Reshape": _reshape, "Dropout": _identity,
    "SpatialDropout2D": _identity, "GaussianNoise": _identity, "GaussianDropout": _identity,
}
