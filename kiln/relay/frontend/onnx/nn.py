"""ONNX ops with weights or windows: Conv, ConvTranspose, Gemm, MatMul, BatchNormalization,
pooling, Softmax/LogSoftmax, LayerNormalization, Flatten, Dropout."""

from __future__ import annotations

import math

import numpy as np

from kiln.errors import ShapeError

from ...expr import Constant, const
from ...op import nn, nn_norm, nn_pool, reduce, tensor
from ...op import transform as tf


def _check_window(in_sizes, kernel, strides, dilations, pads) -> None:
    """The window attributes a file gives: one value per spatial axis (pads two), all positive."""
    n = len(in_sizes)
    for name, values, want in (("kernel_shape", kernel, n), ("strides", strides, n), ("dilations", dilations, n),
                               ("pads", pads, 2 * n)):
        values = list(values) if values is not None else None
        if values is not None and len(values) != want:
            raise ShapeError(f"{name} has {len(values)} values; a {n}-d window needs {want}")
        if values is not None and name != "pads" and any(int(v) < 1 for v in values):
            raise ShapeError(f"{name} {values} must be positive")
        if values is not None and name == "pads" and any(int(v) < 0 for v in values):
            raise ShapeError(f"pads {values} must not be negative")


def _pads_nd(attrs, in_sizes, kernel, strides, dilations):
    """(begins, ends) per spatial axis from ``pads`` or ``auto_pad``."""
    _check_window(in_sizes, kernel, strides, dilations, attrs.get("pads"))
    auto = attrs.get("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        lo, hi = [], []
        for size, k, s, d in zip(in_sizes, kernel, strides, dilations):
            total = max((math.ceil(size / s) - 1) * s + (k - 1) * d + 1 - size, 0)
            small, big = total // 2, total - total // 2
            lo.append(small if auto == "SAME_UPPER" else big)
            hi.append(big if auto == "SAME_UPPER" else small)
        return lo, hi
    n = len(in_sizes)
    if auto == "VALID":
        return [0] * n, [0] * n
    pads = [int(p) for p in attrs.get("pads", [0] * 2 * n)]
    return pads[:n], pads[n:]


def _pads(ctx, attrs, in_hw, kernel, strides, dilations):
    """(top, left, bottom, right) from ``pads`` or ``auto_pad``."""
    lo, hi = _pads_nd(attrs, in_hw, kernel, strides, dilations)
    return (lo[0], lo[1], hi[0], hi[1])


def _check_2d(ctx, x, what="input"):
    if len(ctx.shape_of(x)) != 4:
        ctx.fail(f"only 1-D and 2-D spatial {what}s (3-d NCW or 4-d NCHW tensors; 3-D pooling too) are supported; "
                 f"got shape {ctx.shape_of(x)}")


# Attributes that hold one value per spatial axis, and pads' two-per-axis layout.
_PER_AXIS = {"kernel_shape": 1, "strides": 1, "dilations": 1, "output_padding": 0, "output_shape": 1}


def _lift_1d(fn):
    """Run a 2-D converter on a 1-D (NCW) op: W becomes (1, W), with one-pixel H everywhere."""
    def convert(ctx, ins, attrs):
        if len(ctx.shape_of(ins[0])) != 3:
            return fn(ctx, ins, attrs)
        lifted = [x if x is None or i > 1 or len(ctx.shape_of(x)) != 3 else tf.expand_dims(x, 2)
                  for i, x in enumerate(ins)]
        attrs = dict(attrs)
        for key, unit in _PER_AXIS.items():
            if key in attrs:
                attrs[key] = [unit] + list(attrs[key])
        if "pads" in attrs:
            attrs["pads"] = [0, attrs["pads"][0], 0, attrs["pads"][1]]
        return tf.squeeze(fn(ctx, lifted, attrs), [2])
    return convert


def _conv(ctx, ins, attrs):
    x, w = ins[0], ins[1]
    _check_2d(ctx, x)
    wshape = ctx.shape_of(w)
    kernel = attrs.get("kernel_shape", wshape[2:])
    strides = attrs.get("strides", [1, 1])
    dil = attrs.get("dilations", [1, 1])
    out = nn.conv2d(x, w, strides=strides, padding=_pads(ctx, attrs, ctx.shape_of(x)[2:], kernel, strides, dil),
                    dilation=dil, groups=attrs.get("group", 1), channels=wshape[0], kernel_size=kernel)
    return nn.bias_add(out, ins[2]) if len(ins) > 2 and ins[2] is not None else out


def _conv_transpose_pads(ctx, attrs, in_hw, kernel, strides, dil, out_pad):
    """(pads, output_padding) for the requested output_shape / auto_pad, as onnx's reference
    computes them: SAME_* splits the total padding, output_shape alone trims or extends the end."""
    auto = attrs.get("auto_pad", "NOTSET")
    if "output_shape" not in attrs and auto not in ("SAME_UPPER", "SAME_LOWER"):
        return tuple(attrs.get("pads", [0] * 4)), out_pad
    target = attrs.get("output_shape", [n * s for n, s in zip(in_hw, strides)])[-2:]
    begin, end, extra = [], [], []
    for n, k, s, d, op, want in zip(in_hw, kernel, strides, dil, out_pad, target):
        total = s * (n - 1) + op + (k - 1) * d + 1 - want
        if auto == "SAME_UPPER":
            lo, hi = total // 2, total - total // 2
        elif auto == "SAME_LOWER":
            lo, hi = total - total // 2, total // 2
        else:
            lo, hi = 0, total
        if lo < 0:
            ctx.fail(f"output_shape {list(target)} needs negative leading padding")
        begin.append(lo)
        end.append(max(hi, 0))
        extra.append(op + max(-hi, 0))  # a larger output than the default: grow the end
    return (begin[0], begin[1], end[0], end[1]), extra


def _conv_transpose(ctx, ins, attrs):
    x, w = ins[0], ins[1]
    _check_2d(ctx, x)
    strides = attrs.get("strides", [1, 1])
    dil = attrs.get("dilations", [1, 1])
    kernel = attrs.get("kernel_shape", ctx.shape_of(w)[2:])
    pads, out_pad = _conv_transpose_pads(ctx, attrs, ctx.shape_of(x)[2:], kernel, strides, dil,
                                         attrs.get("output_padding", [0, 0]))
    out = nn.conv2d_transpose(x, w, strides=strides, padding=pads, dilation=dil, groups=attrs.get("group", 1),
                              output_padding=out_pad)
    return nn.bias_add(out, ins[2]) if len(ins) > 2 and ins[2] is not None else out


def _transpose_2d(w):
    if isinstance(w, Constant):
        return const(np.ascontiguousarray(w.data.T))
    return tf.transpose(w, (1, 0))


def _gemm(ctx, ins, attrs):
    a, b = ins[0], ins[1]
    if attrs.get("transA", 0):
        a = _transpose_2d(a)
    weight = b if attrs.get("transB", 0) else _transpose_2d(b)
    out = nn.dense(a, weight)
    dtype = ctx.type_of(out).dtype
    alpha, beta = attrs.get("alpha", 1.0), attrs.get("beta", 1.0)
    if alpha != 1.0:
        out = tensor.multiply(out, const(alpha, dtype))
    if len(ins) > 2 and ins[2] is not None:
        c = ins[2] if beta == 1.0 else tensor.multiply(ins[2], const(beta, dtype))
        out = tensor.add(out, c)
    return out


def _matmul(ctx, ins, attrs):
    a, b = ins
    sa, sb = ctx.shape_of(a), ctx.shape_of(b)
    if not sa or not sb:
        ctx.fail(f"inputs of shapes {list(sa)} and {list(sb)}: MatMul needs at least one dimension in each")
    squeeze = []
    if len(sa) == 1:
        a, sa, squeeze = tf.expand_dims(a, 0), (1,) + sa, squeeze + [-2]
    if len(sb) == 1:
        b, sb, squeeze = tf.expand_dims(b, 1), sb + (1,), squeeze + [-1]
    m, k, n = sa[-2], sa[-1], sb[-1]
    if len(sb) == 2:  # weights: one dense over the flattened rows
        rows = a if len(sa) == 2 else tf.reshape(a, (-1, k))
        out = nn.dense(rows, _transpose_2d(b))
        out = out if len(sa) == 2 else tf.reshape(out, sa[:-1] + (n,))
    else:
        batch = np.broadcast_shapes(sa[:-2], sb[:-2])
        nb = int(np.prod(batch))
        x = tf.reshape(tf.broadcast_to(a, batch + (m, k)) if sa[:-2] != batch else a, (nb, m, k))
        y = tf.reshape(tf.broadcast_to(b, batch + (k, n)) if sb[:-2] != batch else b, (nb, k, n))
        out = tf.reshape(nn.batch_matmul(x, y, transpose_b=False), batch + (m, n))
    if squeeze:
        nd = len(ctx.shape_of(out))
        out = tf.squeeze(out, [s % nd for s in squeeze])
    return out


def _batch_norm(ctx, ins, attrs):
    if attrs.get("training_mode", 0):
        return _batch_norm_training(ctx, ins, attrs)
    if len([o for o in ctx.node.output if o]) > 1:
        ctx.fail("running mean/var outputs need training_mode=1")
    return nn_norm.batch_norm(*ins[:5], axis=1, epsilon=attrs.get("epsilon", 1e-5))[0]


def _batch_norm_training(ctx, ins, attrs):
    """Normalize with the batch's own statistics; the running mean/var outputs blend them into
    the given ones with ``momentum``."""
    x, scale, bias, mean, var = ins[:5]
    shape, dtype = ctx.shape_of(x), ctx.type_of(x).dtype
    axes = tuple(a for a in range(len(shape)) if a != 1)
    per_channel = (-1,) + (1,) * (len(shape) - 2)
    batch_mean = reduce.mean(x, axes, keepdims=True)
    centered = tensor.subtract(x, batch_mean)
    batch_var = reduce.mean(tensor.multiply(centered, centered), axes, keepdims=True)
    inv_std = tensor.rsqrt(tensor.add(batch_var, const(attrs.get("epsilon", 1e-5), dtype)))
    y = tensor.add(tensor.multiply(tensor.multiply(centered, inv_std), tf.reshape(scale, per_channel)),
                   tf.reshape(bias, per_channel))
    m = attrs.get("momentum", 0.9)

    def blend(running, batch):
        return tensor.add(tensor.multiply(running, const(m, dtype)),
                          tensor.multiply(tf.reshape(batch, (-1,)), const(1 - m, dtype)))
    return [y, blend(mean, batch_mean), blend(var, batch_var)]


def _max_pool_with_indices(ctx, x, kernel, strides, dil, pads, ceil: bool, storage_order: int):
    """MaxPool and its Indices output: every window gathered from the padded input by a constant
    index map (padding at -inf never wins), max and first argmax along it, and the winner's flat
    index into the input (NCHW row-major; storage_order 1: H and W column-major)."""
    n, c, h, w = (int(d) for d in ctx.shape_of(x))
    top, left, bottom, right = pads
    span = []
    for size, k, s, d, lo, hi in zip((h, w), kernel, strides, dil, (top, left), (bottom, right)):
        extent = size + lo + hi - d * (k - 1) - 1
        span.append((-(-extent // s) if ceil else extent // s) + 1)
    oh, ow = span
    # enough padding below/right for ceil_mode's last windows
    hp = max(h + top + bottom, (oh - 1) * strides[0] + dil[0] * (kernel[0] - 1) + 1)
    wp = max(w + left + right, (ow - 1) * strides[1] + dil[1] * (kernel[1] - 1) + 1)
    ctx.allocation((n * c, oh * ow, kernel[0] * kernel[1]), ctx.type_of(x).dtype, "window gather")
    lowest = float(np.finfo(np.dtype(str(ctx.type_of(x).dtype))).min)
    padded = nn.pad(x, [(0, 0), (0, 0), (top, hp - h - top), (left, wp - w - left)], pad_value=lowest)
    ky, kx = np.meshgrid(np.arange(kernel[0]) * dil[0], np.arange(kernel[1]) * dil[1], indexing="ij")
    oy, ox = np.meshgrid(np.arange(oh) * strides[0], np.arange(ow) * strides[1], indexing="ij")
    rows = oy.reshape(-1, 1) + ky.reshape(1, -1)                       # [windows, taps] in padded coords
    cols = ox.reshape(-1, 1) + kx.reshape(1, -1)
    patches = tf.take(tf.reshape(padded, (n * c, hp * wp)), const((rows * wp + cols).astype(np.int64)), axis=1)
    y = tf.reshape(reduce.max(patches, axis=2), (n, c, oh, ow))
    tap = reduce.argmax(patches, axis=2)                               # [n*c, windows], first maximum
    ih, iw = rows - top, cols - left                                   # input coords (padding never wins)
    place = iw * h + ih if storage_order == 1 else ih * w + iw
    within = tf.take(const(place.reshape(-1).astype(np.int64)),
                     tensor.add(tf.cast(tap, "int64"), const((np.arange(oh * ow) * rows.shape[1]).reshape(1, -1)
                                                              .astype(np.int64))), axis=0, mode="clip")
    base = const((np.arange(n * c) * h * w).reshape(-1, 1).astype(np.int64))
    return [y, tf.reshape(tensor.add(within, base), (n, c, oh, ow))]


def _pool(kind):
    def convert(ctx, ins, attrs):
        x = ins[0]
        _check_2d(ctx, x)
        kernel = attrs["kernel_shape"]
        strides = attrs.get("strides", [1, 1])
        dil = attrs.get("dilations", [1, 1])
        pads = _pads(ctx, attrs, ctx.shape_of(x)[2:], kernel, strides, dil)
        ceil = bool(attrs.get("ceil_mode", 0))
        if kind == "max":
            if len(ctx.node.output) > 1 and ctx.node.output[1]:
                return _max_pool_with_indices(ctx, x, kernel, strides, dil, pads, ceil,
                                              int(attrs.get("storage_order", 0)))
            return nn_pool.max_pool2d(x, kernel, strides, dil, pads, ceil_mode=ceil)
        return nn_pool.avg_pool2d(x, kernel, strides, dil, pads, ceil_mode=ceil,
                                  count_include_pad=bool(attrs.get("count_include_pad", 0)))
    return convert


def _pool_3d(fn):
    """Run a 2-D pooling converter on a 3-D (NCDHW) op. Box windows are separable: pool H and W
    of every depth slice, then pool D (as a (kD, 1) window over the flattened H*W). Max is exact;
    average is too, because the count of a box window is the product of its per-axis counts."""
    def convert(ctx, ins, attrs):
        x = ins[0]
        shape = ctx.shape_of(x)
        if len(shape) != 5:
            return fn(ctx, ins, attrs)
        if len(ctx.node.output) > 1 and ctx.node.output[1]:
            ctx.fail("the Indices output of MaxPool is not supported")
        n, c, depth, h, w = shape
        kernel = list(attrs["kernel_shape"])
        strides = list(attrs.get("strides", [1] * 3))
        dil = list(attrs.get("dilations", [1] * 3))
        lo, hi = _pads_nd(attrs, shape[2:], kernel, strides, dil)
        common = {k: v for k, v in attrs.items() if k in ("ceil_mode", "count_include_pad")}
        hw = fn(ctx, [tf.reshape(x, (n, c * depth, h, w))],
                {**common, "kernel_shape": kernel[1:], "strides": strides[1:], "dilations": dil[1:],
                 "pads": [lo[1], lo[2], hi[1], hi[2]]})
        oh, ow = ctx.shape_of(hw)[2:]
        d = fn(ctx, [tf.reshape(hw, (n, c, depth, oh * ow))],
               {**common, "kernel_shape": [kernel[0], 1], "strides": [strides[0], 1], "dilations": [dil[0], 1],
                "pads": [lo[0], 0, hi[0], 0]})
        return tf.reshape(d, (n, c, ctx.shape_of(d)[2], oh, ow))
    return convert


def _global_pool(fn, reduce_fn):
    def convert(ctx, ins, attrs):
        rank = len(ctx.shape_of(ins[0]))
        if rank != 4 and rank >= 3:  # 1-D and 3-D (video: AdaptiveAvgPool3d(1)) as a reduction
            return reduce_fn(ins[0], axis=tuple(range(2, rank)), keepdims=True)
        _check_2d(ctx, ins[0])
        return fn(ins[0])
    return convert


def _softmax(fn):
    def convert(ctx, ins, attrs):
        x = ins[0]
        shape = ctx.shape_of(x)
        if ctx.opset >= 13:
            return fn(x, attrs.get("axis", -1))
        axis = attrs.get("axis", 1) % max(len(shape), 1)  # old opsets: softmax over the flattened tail
        flat = tf.reshape(x, (int(np.prod(shape[:axis])), -1))
        return tf.reshape(fn(flat, 1), shape)
    return convert


def _layer_norm(ctx, ins, attrs):
    x, scale = ins[0], ins[1]
    bias = ins[2] if len(ins) > 2 and ins[2] is not None else None
    shape = ctx.shape_of(x)
    axis = attrs.get("axis", -1) % len(shape)
    eps = attrs.get("epsilon", 1e-5)
    dtype = ctx.type_of(x).dtype
    stats_wanted = len([o for o in ctx.node.output if o]) > 1
    if axis == len(shape) - 1 and len(ctx.shape_of(scale)) == 1 and not stats_wanted:
        beta = bias if bias is not None and len(ctx.shape_of(bias)) == 1 else const(np.zeros(shape[-1], dtype))
        out = nn_norm.layer_norm(x, scale, beta, axis=-1, epsilon=eps)
        return tensor.add(out, bias) if bias is not None and beta is not bias else out
    axes = tuple(range(axis, len(shape)))
    mean = reduce.mean(x, axes, keepdims=True)
    centered = tensor.subtract(x, mean)
    var = reduce.mean(tensor.multiply(centered, centered), axes, keepdims=True)
    inv_std = tensor.rsqrt(tensor.add(var, const(eps, dtype)))
    out = tensor.multiply(tensor.multiply(centered, inv_std), scale)
    out = tensor.add(out, bias) if bias is not None else out
    return [out, mean, inv_std] if stats_wanted else out


def _flatten(ctx, ins, attrs):
    shape = ctx.shape_of(ins[0])
    axis = attrs.get("axis", 1)
    axis = axis + len(shape) if axis < 0 else axis  # Flatten's axis ranges over [-r, r]
    return tf.reshape(ins[0], (int(np.prod(shape[:axis])), int(np.prod(shape[axis:]))))


def _dropout(ctx, ins, attrs):
    x = ins[0]
    mode = ins[2] if len(ins) > 2 else None
    if mode is not None and _known(ctx, mode) and bool(np.asarray(ctx.value(mode)).item()):
        ratio = ins[1] if len(ins) > 1 else None
        r = float(np.asarray(ctx.value(ratio)).item()) if ratio is not None and _known(ctx, ratio) else 0.5
        if not 0 <= r < 1:  # NaN or negative: not an identity either
            ctx.fail(f"training_mode is true with ratio {r:g}, outside [0, 1); the file is damaged")
        if r > 0:  # a training-mode export (torch.onnx.export of a module left in train())
            ctx.fail(f"runs in training mode (training_mode is true, ratio {r:g}): its output is random; "
                     "export the model after model.eval()")
    if len(ctx.node.output) > 1 and ctx.node.output[1]:
        return [x, const(np.ones(ctx.shape_of(x), dtype=bool))]
    return x


def _known(ctx, expr) -> bool:
    """The input is a constant or an initializer (its value is known at import)."""
    from ...expr import Var

    return isinstance(expr, Constant) or (isinstance(expr, Var) and expr.name_hint in ctx.importer.initializers)


CONVERTERS = {
    "Conv": _lift_1d(_conv), "ConvTranspose": _lift_1d(_conv_transpose), "Gemm": _gemm, "MatMul": _matmul,
    "BatchNormalization": _batch_norm, "MaxPool": _lift_1d(_pool_3d(_pool("max"))),
    "AveragePool": _lift_1d(_pool_3d(_pool("avg"))),
    "GlobalAveragePool": _global_pool(nn_pool.global_avg_pool2d, reduce.mean),
    "GlobalMaxPool": _global_pool(nn_pool.global_max_pool2d, reduce.max),
    "Softmax": _softmax(nn_norm.softmax), "LogSoftmax": _softmax(nn_norm.log_softmax),
    "LayerNormalization": _layer_norm, "Flatten": _flatten, "Dropout": _dropout,
}
