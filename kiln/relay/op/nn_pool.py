"""Pooling ops: max_pool2d, avg_pool2d, global_avg_pool2d, global_max_pool2d, adaptive_avg_pool2d."""

from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..ty import TensorType
from . import layout
from .registry import OpDef, OpPattern, RelCtx, as_tuple, conv_padding


def pool_out_size(size, k, stride, lo, hi, dilation, ceil_mode) -> int:
    span = size + lo + hi - (k - 1) * dilation - 1
    out = (math.ceil(span / stride) if ceil_mode else span // stride) + 1
    if ceil_mode and (out - 1) * stride >= size + lo:
        out -= 1  # the last window must start inside the input or its leading padding
    return out


def _hw(ctx: RelCtx, layout_name: str):
    """The data type and the positions of H and W; the layout may be channel-blocked (NCHW16c)."""
    try:
        items = layout.parse(layout_name)
    except ValueError as e:
        ctx.fail(str(e))
    data = ctx.ndim(0, len(items), layout_name)
    if sorted(layout.primal(layout_name)) != sorted("NCHW") or any(f and a != "C" for a, f in items):
        ctx.fail(f"unsupported layout {layout_name!r}; use NCHW, NHWC or a channel-blocked NCHW16c")
    if any(f and data.shape[i] != f for i, (a, f) in enumerate(items)):
        ctx.fail(f"input 'data' {data.shape} does not match layout {layout_name!r}")
    return data, items.index(("H", 0)), items.index(("W", 0))


def _pool_rel(ctx: RelCtx):
    a = ctx.attrs
    data, hi, wi = _hw(ctx, a.layout)
    pt, pl, pb, pr = a.padding
    oh = pool_out_size(data.shape[hi], a.pool_size[0], a.strides[0], pt, pb, a.dilation[0], a.ceil_mode)
    ow = pool_out_size(data.shape[wi], a.pool_size[1], a.strides[1], pl, pr, a.dilation[1], a.ceil_mode)
    if oh <= 0 or ow <= 0:
        ctx.fail(f"pool_size {a.pool_size} does not fit the input {data.shape}")
    shape = list(data.shape)
    shape[hi], shape[wi] = oh, ow
    return TensorType(tuple(shape), data.dtype)


def _pool_ref(kind, in_order: bool = False):
    """numpy reference of a pool; ``in_order``: an average's window summed tap by tap in the
    input's dtype and divided in it (float32 step for step, as the compiled kernel and
    onnxruntime sum), not in float64."""
    def run(a, x):
        xc = layout.transform(x, a.layout, "NCHW").astype(x.dtype if in_order else np.float64)
        n, c, h, w = xc.shape
        kh, kw = a.pool_size
        sh, sw = a.strides
        dh, dw = a.dilation
        pt, pl, pb, pr = a.padding
        oh = pool_out_size(h, kh, sh, pt, pb, dh, a.ceil_mode)
        ow = pool_out_size(w, kw, sw, pl, pr, dw, a.ceil_mode)
        # pad enough on the far side for ceil_mode windows that run past the edge
        eh = max(0, (oh - 1) * sh + (kh - 1) * dh + 1 - (h + pt + pb))
        ew = max(0, (ow - 1) * sw + (kw - 1) * dw + 1 - (w + pl + pr))
        fill = -np.inf if kind == "max" else 0.0
        pads = ((0, 0), (0, 0), (pt, pb + eh), (pl, pr + ew))
        xp = np.pad(xc, pads, constant_values=fill)
        span = ((kh - 1) * dh + 1, (kw - 1) * dw + 1)
        win = sliding_window_view(xp, span, axis=(2, 3))[:, :, ::sh, ::sw, ::dh, ::dw][:, :, :oh, :ow]
        if kind == "max":
            out = win.max(axis=(-1, -2))
        else:
            if in_order:
                total = np.zeros(win.shape[:-2], xc.dtype)
                for i in range(win.shape[-2]):
                    for j in range(win.shape[-1]):
                        total = total + win[..., i, j]
            else:
                total = win.sum(axis=(-1, -2))
            if a.count_include_pad:
                inside = np.pad(np.ones((h, w)), ((pt, pb), (pl, pr)), constant_values=1.0)
                inside = np.pad(inside, ((0, eh), (0, ew)))  # ceil-mode overhang never counts
            else:
                inside = np.pad(np.ones((h, w)), ((pt, pb + eh), (pl, pr + ew)))
            cnt = sliding_window_view(inside, span)[::sh, ::sw, ::dh, ::dw][:oh, :ow].sum(axis=(-1, -2))
            out = total / np.maximum(cnt, 1).astype(xc.dtype)
        return layout.transform(out, "NCHW", a.layout).astype(x.dtype)
    return run


_POOL_ATTRS = {"pool_size": (1, 1), "strides": (1, 1), "dilation": (1, 1), "padding": (0, 0, 0, 0),
               "layout": "NCHW", "out_layout": "", "ceil_mode": False}
MAX_POOL2D = OpDef("nn.max_pool2d", ("data",), dict(_POOL_ATTRS), _pool_rel, OpPattern.OUT_ELEMWISE_FUSABLE,
                   _pool_ref("max"), doc="2-D max pooling")
AVG_POOL2D = OpDef("nn.avg_pool2d", ("data",), {**_POOL_ATTRS, "count_include_pad": False}, _pool_rel,
                   OpPattern.OUT_ELEMWISE_FUSABLE, _pool_ref("avg"), doc="2-D average pooling")
avg_pool2d_in_order = _pool_ref("avg", in_order=True)  # qnn.avg_pool2d's reference (float32 step for step)


def _global_rel(ctx: RelCtx):
    data, hi, wi = _hw(ctx, ctx.attrs.layout)
    shape = list(data.shape)
    shape[hi] = shape[wi] = 1
    return TensorType(tuple(shape), data.dtype)


def _global_ref(fn):
    def run(a, x):
        items = layout.parse(a.layout)
        axes = (items.index(("H", 0)), items.index(("W", 0)))
        return fn(x.astype(np.float64), axis=axes, keepdims=True).astype(x.dtype)
    return run


GLOBAL_AVG_POOL2D = OpDef("nn.global_avg_pool2d", ("data",), {"layout": "NCHW", "out_layout": ""}, _global_rel,
                          OpPattern.OUT_ELEMWISE_FUSABLE, _global_ref(np.mean), doc="mean over H and W")
GLOBAL_MAX_POOL2D = OpDef("nn.global_max_pool2d", ("data",), {"layout": "NCHW", "out_layout": ""}, _global_rel,
                          OpPattern.OUT_ELEMWISE_FUSABLE, _global_ref(np.max), doc="max over H and W")


def _adaptive_rel(ctx: RelCtx):
    data, hi, wi = _hw(ctx, ctx.attrs.layout)
    shape = list(data.shape)
    shape[hi], shape[wi] = ctx.attrs.output_size
    return TensorType(tuple(shape), data.dtype)


def _adaptive_ref(a, x):
    hi, wi = a.layout.index("H"), a.layout.index("W")
    oh, ow = a.output_size
    h, w = x.shape[hi], x.shape[wi]
    xm = np.moveaxis(x.astype(np.float64), (hi, wi), (-2, -1))
    out = np.empty(xm.shape[:-2] + (oh, ow))
    for i in range(oh):
        for j in range(ow):
            h0, h1 = (i * h) // oh, -((-(i + 1) * h) // oh)
            w0, w1 = (j * w) // ow, -((-(j + 1) * w) // ow)
            out[..., i, j] = xm[..., h0:h1, w0:w1].mean(axis=(-1, -2))
    return np.ascontiguousarray(np.moveaxis(out, (-2, -1), (hi, wi))).astype(x.dtype)


ADAPTIVE_AVG_POOL2D = OpDef("nn.adaptive_avg_pool2d", ("data",), {"output_size": (1, 1), "layout": "NCHW",
                                                                   "out_layout": ""},
                            _adaptive_rel, OpPattern.OUT_ELEMWISE_FUSABLE, _adaptive_ref,
                            doc="average pooling to a fixed output size")

OPS = [MAX_POOL2D, AVG_POOL2D, GLOBAL_AVG_POOL2D, GLOBAL_MAX_POOL2D, ADAPTIVE_AVG_POOL2D]


def _pool_kwargs(pool_size, strides, dilation, padding, layout, out_layout, ceil_mode):
    return dict(pool_size=as_tuple(pool_size, 2, "pool_size"), strides=as_tuple(strides, 2, "strides"),
                dilation=as_tuple(dilation, 2, "dilation"), padding=conv_padding(padding), layout=layout,
                out_layout=out_layout, ceil_mode=bool(ceil_mode))


def max_pool2d(data, pool_size=(1, 1), strides=(1, 1), dilation=(1, 1), padding=(0, 0), layout="NCHW",
               out_layout="", ceil_mode=False):
    return MAX_POOL2D(data, **_pool_kwargs(pool_size, strides, dilation, padding, layout, out_layout, ceil_mode))


def avg_pool2d(data, pool_size=(1, 1), strides=(1, 1), dilation=(1, 1), padding=(0, 0), layout="NCHW",
               out_layout="", ceil_mode=False, count_include_pad=False):
    return AVG_POOL2D(data, **_pool_kwargs(pool_size, strides, dilation, padding, layout, out_layout, ceil_mode),
                      count_include_pad=bool(count_include_pad))


def global_avg_pool2d(data, layout="NCHW", out_layout=""):
    return GLOBAL_AVG_POOL2D(data, layout=layout, out_layout=out_layout)


def global_max_pool2d(data, layout="NCHW", out_layout=""):
    return GLOBAL_MAX_POOL2D(data, layout=layout, out_layout=out_layout)


def adaptive_avg_pool2d(data, output_size=(1, 1), layout="NCHW", out_layout=""):
    return ADAPTIVE_AVG_POOL2D(data, output_size=as_tuple(output_size, 2, "output_size"), layout=layout,
                               out_layout=out_layout)
