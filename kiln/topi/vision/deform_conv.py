"""ONNX DeformConv (2-D): a convolution whose every tap reads the input at its own learned
offset, bilinear-interpolated (zero outside the image), times an optional mask.

    out[n, o, y, x] = B[o] + sum_{c, i, j} W[o, c, i, j] * mask[n, g, i, j, y, x]
                               * bilinear(X[n, c'], y*sh - ph + i*dh + dy, x*sw - pw + j*dw + dx)

with (dy, dx) = offset[n, g, i, j, :, y, x] of the channel's offset group g. One reduction over
(channel, tap), each term gathering its four corners; a plain loop nest (no tuned schedule).
"""

from __future__ import annotations

from kiln import te, tir
from kiln.ir import expr as E


def deform_conv2d(data, weight, offset, mask, bias, strides, pads, dilations, groups: int, offset_groups: int):
    """data [N, C, H, W], weight [O, C/groups, KH, KW], offset [N, og*2*KH*KW, OH, OW], mask
    [N, og*KH*KW, OH, OW] (or None), bias [O] (or None) -> [N, O, OH, OW]."""
    N, C, H, W = (int(d) for d in data.shape)
    O, cpg, KH, KW = (int(d) for d in weight.shape)
    OH, OW = (int(d) for d in offset.shape[2:])
    opg, cpo = O // groups, C // offset_groups
    dtype = data.dtype
    rc = te.reduce_axis((0, cpg), name="rc")
    ri = te.reduce_axis((0, KH), name="ri")
    rj = te.reduce_axis((0, KW), name="rj")
    zero, one = E.const(0.0, dtype), E.const(1.0, dtype)

    def pixel(n, c, yy, xx):
        inside = tir.all(yy >= 0, yy < H, xx >= 0, xx < W)
        return tir.if_then_else(inside, data[n, c, tir.min(tir.max(yy, 0), H - 1), tir.min(tir.max(xx, 0), W - 1)],
                                zero)

    def term(n, o, y, x):
        c = o // opg * cpg + rc
        g = c // cpo
        tap = (g * KH + ri) * KW + rj
        py = (y * strides[0] - pads[0] + ri * dilations[0]).astype(dtype) + offset[n, tap * 2, y, x]
        px = (x * strides[1] - pads[1] + rj * dilations[1]).astype(dtype) + offset[n, tap * 2 + 1, y, x]
        y0f, x0f = tir.floor(py), tir.floor(px)
        y0, x0 = y0f.astype("int32"), x0f.astype("int32")
        ly, lx = py - y0f, px - x0f
        value = ((one - ly) * ((one - lx) * pixel(n, c, y0, x0) + lx * pixel(n, c, y0, x0 + 1))
                 + ly * ((one - lx) * pixel(n, c, y0 + 1, x0) + lx * pixel(n, c, y0 + 1, x0 + 1)))
        value = value * weight[o, rc, ri, rj]
        return value * mask[n, tap, y, x] if mask is not None else value

    out = te.compute((N, O, OH, OW), lambda n, o, y, x: te.sum(term(n, o, y, x), axis=[rc, ri, rj]),
                     name="T_deform_conv2d", tag="deform_conv2d")
    if bias is None:
        return out
    return te.compute(out.shape, lambda n, o, y, x: out[n, o, y, x] + bias[o], name="T_deform_bias", tag="elemwise")
