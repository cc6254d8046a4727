"""aten ops with weights or windows: convolution, batch/layer norm, pooling, linear/matmul,
softmax, dropout."""

from __future__ import annotations

import numpy as np

from ...expr import Constant, const
from ...op import nn, nn_norm, nn_pool, reduce, tensor
from ...op import transform as tf


def _pair(v):
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return tuple(int(x) for x in (v * 2 if len(v) == 1 else v))


def _conv(ctx, x, w, b, stride, padding, dilation, transposed, output_padding, groups):
    rank = len(ctx.shape_of(x))
    if rank not in (3, 4):
        ctx.fail(f"only 1-D and 2-D convolutions (3-d NCL or 4-d NCHW input) are supported; got shape "
                 f"{ctx.shape_of(x)}")
    if isinstance(padding, str):
        ctx.fail(f"padding={padding!r} is not supported; trace the model with explicit padding numbers")
    if rank == 3:  # a 1-D conv (Whisper's stem) is a 2-D one over a height of 1
        (s,), (p,), (d,), (op,) = ([_pair(v)[0]] for v in (stride, padding, dilation, output_padding))
        out = _conv(ctx, tf.expand_dims(x, 2), tf.expand_dims(w, 2), None, (1, s), (0, p), (1, d), transposed,
                    (0, op), groups)
        out = tf.squeeze(out, [2])
        return out if b is None else nn.bias_add(out, b)
    ph, pw = _pair(padding)
    if transposed:
        out = nn.conv2d_transpose(x, w, strides=_pair(stride), padding=(ph, pw, ph, pw), dilation=_pair(dilation),
                                  groups=groups, output_padding=_pair(output_padding))
    else:
        out = nn.conv2d(x, w, strides=_pair(stride), padding=(ph, pw, ph, pw), dilation=_pair(dilation),
                        groups=groups, channels=ctx.shape_of(w)[0], kernel_size=ctx.shape_of(w)[2:])
    return out if b is None else nn.bias_add(out, b)


def _convolution(ctx, ins):
    x, w, b, stride, padding, dilation, transposed, output_padding, groups = ins[:9]
    return _conv(ctx, x, w, b, stride, padding, dilation, transposed, output_padding, groups)


def _conv2d(ctx, ins):
    x, w, b, stride, padding, dilation, groups = ins
    return _conv(ctx, x, w, b, stride, padding, dilation, False, (0, 0), groups)


def _batch_norm(ctx, ins):
    x, gamma, beta, mean, var, training, _momentum, eps = ins[:8]
    if training:
        ctx.fail("batch_norm in training mode; trace the model after model.eval()")
    c = ctx.shape_of(x)[1]
    dtype = ctx.dtype_of(x)
    gamma = gamma if gamma is not None else const(np.ones(c, dtype))
    beta = beta if beta is not None else const(np.zeros(c, dtype))
    return nn_norm.batch_norm(x, gamma, beta, mean, var, axis=1, epsilon=float(eps))[0]


def _layer_norm(ctx, ins):
    x, normalized_shape, gamma, beta, eps = ins[:5]
    shape = ctx.shape_of(x)
    dtype = ctx.dtype_of(x)
    k = len(normalized_shape)
    if k == 1:
        gamma = gamma if gamma is not None else const(np.ones(shape[-1], dtype))
        beta = beta if beta is not None else const(np.zeros(shape[-1], dtype))
        return nn_norm.layer_norm(x, gamma, beta, axis=-1, epsilon=float(eps))
    axes = tuple(range(len(shape) - k, len(shape)))
    mean = reduce.mean(x, axes, keepdims=True)
    centered = tensor.subtract(x, mean)
    var = reduce.mean(tensor.multiply(centered, centered), axes, keepdims=True)
    out = tensor.multiply(centered, tensor.rsqrt(tensor.add(var, const(float(eps), dtype))))
    out = out if gamma is None else tensor.multiply(out, gamma)
    return out if beta is None else tensor.add(out, beta)


def _max_pool2d(ctx, ins):
    x, kernel, stride, padding, dilation, ceil_mode = ins
    ph, pw = _pair(padding)
    return nn_pool.max_pool2d(x, _pair(kernel), _pair(stride or kernel), _pair(dilation), (ph, pw, ph, pw),
                              ceil_mode=bool(ceil_mode))


def _avg_pool2d(ctx, ins):
    x, kernel, stride, padding, ceil_mode, count_include_pad, divisor = ins
    if divisor is not None:
        ctx.fail("divisor_override is not supported")
    ph, pw = _pair(padding)
    return nn_pool.avg_pool2d(x, _pair(kernel), _pair(stride or kernel), (1, 1), (ph, pw, ph, pw),
                              ceil_mode=bool(ceil_mode), count_include_pad=bool(count_include_pad))


def _adaptive_avg_pool2d(ctx, ins):
    x, size = ins
    size = _pair(size)
    if size == (1, 1):
        return nn_pool.global_avg_pool2d(x)
    return nn_pool.adaptive_avg_pool2d(x, size)


def _linear(ctx, ins):
    x, w, b = ins
    shape = ctx.shape_of(x)
    rows = x if len(shape) == 2 else tf.reshape(x, (-1, shape[-1]))
    out = nn.dense(rows, w)
    if b is not None:
        out = nn.bias_add(out, b, axis=1)
    return out if len(shape) == 2 else tf.reshape(out, shape[:-1] + (ctx.shape_of(w)[0],))


def _transposed(w):
    if isinstance(w, Constant):
        return const(np.ascontiguousarray(w.data.T))
    return tf.transpose(w, (1, 0))


def matmul(ctx, a, b):
    """numpy/torch matmul semantics: 1-d operands are promoted, batch dims broadcast."""
    sa, sb = ctx.shape_of(a), ctx.shape_of(b)
    squeeze = []
    if len(sa) == 1:
        a, sa, squeeze = tf.expand_dims(a, 0), (1,) + sa, squeeze + [-2]
    if len(sb) == 1:
        b, sb, squeeze = tf.expand_dims(b, 1), sb + (1,), squeeze + [-1]
    m, k, n = sa[-2], sa[-1], sb[-1]
    if len(sb) == 2:
        rows = a if len(sa) == 2 else tf.reshape(a, (-1, k))
        out = nn.dense(rows, _transposed(b))
        out = out if len(sa) == 2 else tf.reshape(out, sa[:-1] + (n,))
    else:
        batch = tuple(np.broadcast_shapes(sa[:-2], sb[:-2]))
        nb = int(np.prod(batch))
        x = tf.reshape(tf.broadcast_to(a, batch + (m, k)) if sa[:-2] != batch else a, (nb, m, k))
        y = tf.reshape(tf.broadcast_to(b, batch + (k, n)) if sb[:-2] != batch else b, (nb, k, n))
        out = tf.reshape(nn.batch_matmul(x, y, transpose_b=False), batch + (m, n))
    if squeeze:
        nd = len(ctx.shape_of(out))
        out = tf.squeeze(out, [s % nd for s in squeeze])
    return out


def _matmul(ctx, ins):
    return matmul(ctx, ins[0], ins[1])


def _addmm(ctx, ins):
    bias, a, b, beta, alpha = ins
    out = matmul(ctx, a, b)
    dtype = ctx.dtype_of(out)
    if alpha != 1:
        out = tensor.multiply(out, const(float(alpha), dtype))
    bias = ctx.tensor(bias, out)
    if beta != 1:
        bias = tensor.multiply(bias, const(float(beta), dtype))
    return tensor.add(out, bias)


def _softmax(fn):
    def convert(ctx, ins):
        x, dim = ins[0], ins[1]
        return fn(x, int(dim))
    return convert


def _dropout(ctx, ins):
    if ins[2]:
        ctx.fail("dropout in training mode; trace the model after model.eval()")
    return ins[0]


CONVERTERS = {
    "aten::_convolution": _convolution, "aten::conv2d": _conv2d, "aten::conv1d": _conv2d,
    "aten::batch_norm": _batch_norm,
    "aten::layer_norm": _layer_norm, "aten::max_pool2d": _max_pool2d, "aten::avg_pool2d": _avg_pool2d,
    "aten::adaptive_avg_pool2d": _adaptive_avg_pool2d, "aten::linear": _linear, "aten::matmul": _matmul,
    "aten::mm": _matmul, "aten::bmm": _matmul, "aten::addmm": _addmm,
    "aten::softmax": _softmax(nn_norm.softmax), "aten::log_softmax": _softmax(nn_norm.log_softmax),
    "aten::dropout": _dropout, "aten::feature_dropout": _dropout,
}
