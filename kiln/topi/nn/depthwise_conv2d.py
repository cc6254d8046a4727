"""Depthwise conv2d: each input channel convolved with its own filters (channel multiplier M)."""

from __future__ import annotations

from kiln import te

from ..utils import as_pair, check_ndim, const_shape, pad_tuple
from .pad import pad


def _out(size, k, s, d, pa, pb):
    return (size + pa + pb - (k - 1) * d - 1) // s + 1


def depthwise_conv2d_nchw(Input, Filter, stride, padding, dilation, out_dtype=None):  # noqa: N803 - TVM names
    """Input (N, C, H, W), Filter (C, M, KH, KW) -> (N, C*M, OH, OW); output channel c*M + m reads channel c.

    Relay's conv2d with groups=C stores the same weights as (C*M, 1, KH, KW); pass
    ``Filter.reshape(C, M, KH, KW)`` (same memory order) or use ``topi.nn.conv2d_nchw(..., groups=C)``.
    """
    check_ndim("depthwise_conv2d", "Input", Input, 4, "NCHW")
    check_ndim("depthwise_conv2d", "Filter", Filter, 4, "C, M, KH, KW")
    out_dtype = out_dtype or str(Input.dtype)
    n, c, h, w = const_shape(Input, "depthwise_conv2d Input")
    fc, m, kh, kw = const_shape(Filter, "depthwise_conv2d Filter")
    if fc != c:
        from kiln.errors import ShapeError

        raise ShapeError(f"depthwise_conv2d: 'Filter' has {fc} channels but 'Input' has {c}; expected Filter (C, M, KH, KW)")
    sh, sw = as_pair(stride, "depthwise_conv2d", "stride")
    dh, dw = as_pair(dilation, "depthwise_conv2d", "dilation")
    pt, pl, pb, pr = pad_tuple(padding, ((kh - 1) * dh + 1, (kw - 1) * dw + 1), "depthwise_conv2d")
    oh, ow = _out(h, kh, sh, dh, pt, pb), _out(w, kw, sw, dw, pl, pr)
    padded = pad(Input, (0, 0, pt, pl), (0, 0, pb, pr), name="data_pad")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")

    def fcompute(b, f, y, x):
        ch = f // m
        return te.sum(padded[b, ch, y * sh + ry * dh, x * sw + rx * dw].astype(out_dtype)
                      * Filter[ch, f % m, ry, rx].astype(out_dtype), axis=[ry, rx])

    return te.compute((n, c * m, oh, ow), fcompute, name="depthwise_conv2d_nchw", tag="depthwise_conv2d_nchw",
                      attrs={"stride": (sh, sw), "dilation": (dh, dw)})


def depthwise_conv2d_nhwc(Input, Filter, stride, padding, dilation, out_dtype=None):  # noqa: N803
    """Input (N, H, W, C), Filter (KH, KW, C, M) -> (N, OH, OW, C*M)."""
    check_ndim("depthwise_conv2d", "Input", Input, 4, "NHWC")
    check_ndim("depthwise_conv2d", "Filter", Filter, 4, "KH, KW, C, M")
    out_dtype = out_dtype or str(Input.dtype)
    n, h, w, c = const_shape(Input, "depthwise_conv2d Input")
    kh, kw, _fc, m = const_shape(Filter, "depthwise_conv2d Filter")
    sh, sw = as_pair(stride, "depthwise_conv2d", "stride")
    dh, dw = as_pair(dilation, "depthwise_conv2d", "dilation")
    pt, pl, pb, pr = pad_tuple(padding, ((kh - 1) * dh + 1, (kw - 1) * dw + 1), "depthwise_conv2d")
    oh, ow = _out(h, kh, sh, dh, pt, pb), _out(w, kw, sw, dw, pl, pr)
    padded = pad(Input, (0, pt, pl, 0), (0, pb, pr, 0), name="data_pad")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")

    def fcompute(b, y, x, f):
        ch = f // m
        return te.sum(padded[b, y * sh + ry * dh, x * sw + rx * dw, ch].astype(out_dtype)
                      * Filter[ry, rx, ch, f % m].astype(out_dtype), axis=[ry, rx])

    return te.compute((n, oh, ow, c * m), fcompute, name="depthwise_conv2d_nhwc", tag="depthwise_conv2d_nhwc")
