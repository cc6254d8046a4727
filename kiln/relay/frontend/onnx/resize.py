"""ONNX Resize (opset 11+).

Output sizes, scales and regions are import-time constants, so where each output pixel samples
the input is known at import. Two lowerings:

- ``image.resize2d`` (a fused gather kernel) when the op is a plain 2-D nearest/linear resize of
  an NCHW tensor whose sampling relay's op reproduces exactly;
- otherwise one step per resized axis, with the sampling precomputed here in numpy: nearest is
  a ``take`` of precomputed indices, linear/cubic (also antialiased, cropped, or with the
  half_pixel_symmetric / tf_crop_and_resize coordinates) multiply by a (out, in) interpolation
  matrix with ``dense``. Resize is separable per axis, so this is exact up to float rounding.
"""

from __future__ import annotations

import numpy as np

from ...expr import const
from ...op import image, nn, tensor
from ...op import transform as tf

_RELAY_COORDS = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric")


def _const_input(ctx, ins, i, what):
    if len(ins) <= i or ins[i] is None:
        return None
    value = np.asarray(ctx.value(ins[i], what)).reshape(-1)
    return value if value.size else None


def _plan(ctx, ins, attrs, shape):
    """Per axis: (output size, scale used by the coordinate transform, (roi start, roi end))."""
    rank = len(shape)
    axes = [a % rank for a in attrs.get("axes", range(rank))]
    roi, scales, sizes = (_const_input(ctx, ins, i, w) for i, w in ((1, "roi"), (2, "scales"), (3, "sizes")))
    if (scales is None) == (sizes is None):
        ctx.fail("exactly one of the scales and sizes inputs must be given")
    given = scales if scales is not None else sizes
    if len(given) != len(axes):
        ctx.fail(f"{'scales' if sizes is None else 'sizes'} has {len(given)} values for {len(axes)} axes")
    out, scale = list(shape), [1.0] * rank
    if scales is not None:
        for a, s in zip(axes, scales):
            out[a], scale[a] = int(np.floor(shape[a] * float(s))), float(s)
    else:
        policy = attrs.get("keep_aspect_ratio_policy", "stretch")
        ratios = [int(n) / shape[a] for a, n in zip(axes, sizes)]
        if policy == "stretch":
            for a, n, r in zip(axes, sizes, ratios):
                out[a], scale[a] = int(n), r
        elif policy in ("not_larger", "not_smaller"):
            r = min(ratios) if policy == "not_larger" else max(ratios)
            for a in axes:
                out[a], scale[a] = int(np.floor(r * shape[a] + 0.5)), r
        else:
            ctx.fail(f"keep_aspect_ratio_policy={policy!r} is not one of stretch, not_larger, not_smaller")
    box = [(0.0, 1.0)] * rank
    if roi is not None:
        if len(roi) != 2 * len(axes):
            ctx.fail(f"roi has {len(roi)} values; expected {2 * len(axes)} (starts then ends)")
        for k, a in enumerate(axes):
            box[a] = (float(roi[k]), float(roi[k + len(axes)]))
    return out, scale, box


def _source(mode, n_out, n_in, scale, box):
    """Where output pixels 0..n_out-1 sample the input axis (float coordinates), and for
    tf_crop_and_resize which of them fall outside it."""
    x = np.arange(n_out, dtype=np.float64)
    width = scale * n_in  # the un-rounded output size; ONNX's coordinates use it, not n_out
    outside = None
    if mode == "half_pixel":
        src = (x + 0.5) / scale - 0.5
    elif mode == "half_pixel_symmetric":
        src = n_in / 2 * (1 - n_out / width) + (x + 0.5) / scale - 0.5
    elif mode == "pytorch_half_pixel":
        src = (x + 0.5) / scale - 0.5 if width != 1 else np.full(n_out, -0.5)
    elif mode == "align_corners":
        src = x * (n_in - 1) / (width - 1) if width != 1 else np.zeros(n_out)
    elif mode == "asymmetric":
        src = x / scale
    elif mode == "tf_half_pixel_for_nn":
        src = (x + 0.5) / scale
    elif mode == "tf_crop_and_resize":
        lo, hi = box
        step = (hi - lo) * (n_in - 1)
        src = lo * (n_in - 1) + (x * step / (width - 1) if width != 1 else np.full(n_out, step / 2))
        outside = (src < 0) | (src > n_in - 1)
    else:
        raise ValueError(f"coordinate_transformation_mode={mode!r} is not an ONNX mode")
    return src, outside


def _nearest(src, n_in, rounding):
    if rounding == "round_prefer_floor":
        idx = np.ceil(src - 0.5)
    elif rounding == "round_prefer_ceil":
        idx = np.floor(src + 0.5)
    elif rounding == "floor":
        idx = np.floor(src)
    elif rounding == "ceil":
        idx = np.ceil(src)
    else:
        raise ValueError(f"nearest_mode={rounding!r} is not an ONNX mode")
    return np.clip(idx, 0, n_in - 1).astype(np.int64)


def _cubic(t, a):
    """The cubic convolution kernel with coefficient ``a`` at distances ``t``."""
    t = np.abs(t)
    near = ((a + 2) * t - (a + 3)) * t * t + 1
    far = ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
    return np.where(t <= 1, near, np.where(t < 2, far, 0.0))


def _weights(src, n_in, scale, mode, attrs):
    """(n_out, n_in) interpolation matrix for linear or cubic sampling at ``src``."""
    radius = 1 if mode == "linear" else 2
    stretch = min(scale, 1.0) if attrs.get("antialias", 0) else 1.0  # antialias widens the filter when shrinking
    # Taps sit left of src and right of it, ``radius / stretch`` pixels each way; an integer
    # src counts as ratio 1 from the pixel before it, as ONNX's reference does.
    base = np.floor(src)
    ratio = src - base
    base = np.where(ratio == 0, base - 1, base)
    ratio = np.where(ratio == 0, 1.0, ratio)
    first = int(np.floor(-radius / stretch) + 1)
    offsets = np.arange(first, 2 - first)  # linear: [0, 1], cubic: [-1, 2], wider when antialiased
    dist = (offsets[None, :] - ratio[:, None]) * stretch
    taps = np.maximum(1 - np.abs(dist), 0) if mode == "linear" else _cubic(dist, attrs.get("cubic_coeff_a", -0.75))
    if attrs.get("antialias", 0):
        taps = taps / taps.sum(axis=1, keepdims=True)
    idx = base[:, None].astype(np.int64) + offsets[None, :]
    if attrs.get("exclude_outside", 0):
        taps = np.where((idx < 0) | (idx >= n_in), 0.0, taps)
        taps = taps / np.where(taps.sum(axis=1, keepdims=True) == 0, 1, taps.sum(axis=1, keepdims=True))
    w = np.zeros((len(src), n_in))
    rows = np.repeat(np.arange(len(src)), idx.shape[1])
    np.add.at(w, (rows, np.clip(idx, 0, n_in - 1).reshape(-1)), taps.reshape(-1))  # clipping = edge padding
    return w


def _along(x, axis, rank, step):
    """Apply ``step`` (which works on the last axis) to ``axis`` of ``x``."""
    if axis == rank - 1:
        return step(x)
    perm = list(range(rank))
    perm[axis], perm[-1] = perm[-1], perm[axis]
    return tf.transpose(step(tf.transpose(x, perm)), perm)


def _matmul_last(ctx, x, w):
    shape = ctx.shape_of(x)
    rows = tf.reshape(x, (-1, shape[-1]))
    out = nn.dense(rows, const(w.astype(ctx.type_of(x).dtype)))
    return tf.reshape(out, shape[:-1] + (w.shape[0],))


def _general(ctx, x, shape, out, scale, box, attrs):
    mode = attrs.get("mode", "nearest")
    coord = attrs.get("coordinate_transformation_mode", "half_pixel")
    dtype = ctx.type_of(x).dtype
    if mode != "nearest" and not dtype.startswith("float"):
        ctx.fail(f"{mode} resize of a {dtype} tensor is not supported (float tensors only)")
    rank = len(shape)
    outside = np.zeros(out, dtype=bool)
    for a in range(rank):
        if out[a] == shape[a] and scale[a] == 1.0 and box[a] == (0.0, 1.0):
            continue
        src, out_of_box = _source(coord, out[a], shape[a], scale[a], box[a])
        if mode == "nearest":
            idx = const(_nearest(src, shape[a], attrs.get("nearest_mode", "round_prefer_floor")))
            x = tf.take(x, idx, axis=a)
        else:
            w = _weights(src, shape[a], scale[a], mode, attrs)
            x = _along(x, a, rank, lambda t, w=w: _matmul_last(ctx, t, w))
        if out_of_box is not None:
            outside |= out_of_box.reshape((1,) * a + (-1,) + (1,) * (rank - a - 1))
    if outside.any():
        x = tensor.where(const(outside), const(attrs.get("extrapolation_value", 0.0), dtype), x)
    return x


def _relay_resize2d_fits(shape, out, scale, attrs) -> bool:
    """Whether image.resize2d (which derives its coordinates from the in/out size ratio) samples
    exactly where ONNX does."""
    return (len(shape) == 4 and tuple(out[:2]) == tuple(shape[:2])
            and attrs.get("mode", "nearest") in ("nearest", "linear") and not attrs.get("antialias", 0)
            and attrs.get("coordinate_transformation_mode", "half_pixel") in _RELAY_COORDS
            and all(out[a] / shape[a] == scale[a] for a in (2, 3)))


def convert_resize(ctx, ins, attrs):
    x = ins[0]
    if ctx.opset < 11:
        ctx.fail("Resize before opset 11 (scales as the second input) is not supported")
    mode = attrs.get("mode", "nearest")
    if mode not in ("nearest", "linear", "cubic"):
        ctx.fail(f"mode={mode!r} is not an ONNX Resize mode (nearest, linear, cubic)")
    shape = ctx.shape_of(x)
    out, scale, box = _plan(ctx, ins, attrs, shape)
    if list(out) == list(shape) and all(s == 1.0 for s in scale) and all(b == (0.0, 1.0) for b in box):
        return x
    if _relay_resize2d_fits(shape, out, scale, attrs):
        method = "nearest_neighbor" if mode == "nearest" else "linear"
        rounding = attrs.get("nearest_mode", "round_prefer_floor") if mode == "nearest" else ""
        return image.resize2d(x, out[2:], layout="NCHW", method=method,
                              coordinate_transformation_mode=attrs.get("coordinate_transformation_mode",
                                                                       "half_pixel"),
                              rounding_method=rounding)
    return _general(ctx, x, shape, out, scale, box, attrs)


def convert_upsample(ctx, ins, attrs):
    """Upsample (opset 7-9, deprecated): Resize with asymmetric coordinates, nearest rounding down."""
    scales = ins[1] if len(ins) > 1 else const(np.asarray(attrs["scales"], dtype="float32"))
    ctx.opset = max(ctx.opset, 11)  # read as the Resize that replaced it
    mode = attrs.get("mode", "nearest")
    return convert_resize(ctx, [ins[0], None, scales], {"mode": mode, "coordinate_transformation_mode": "asymmetric",
                                                        "nearest_mode": "floor"})


CONVERTERS = {"Resize": convert_resize, "Upsample": convert_upsample}
