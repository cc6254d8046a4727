"""Detection ops with static output shapes: ``vision.roi_align`` (ONNX RoiAlign) and
``vision.deform_conv2d`` (ONNX DeformConv)."""

from __future__ import annotations

import math

import numpy as np

from ..expr import Call
from ..ty import TensorType
from .registry import OpDef, OpPattern, RelCtx


def _roi_align_rel(ctx: RelCtx):
    data, rois, idx = ctx.ndim(0, 4, "NCHW"), ctx.ndim(1, 2, "[rois, 4]"), ctx.ndim(2, 1, "[rois]")
    if int(rois.shape[1]) != 4 or int(idx.shape[0]) != int(rois.shape[0]):
        ctx.fail(f"rois {rois.shape} must be [num_rois, 4] and batch_indices {idx.shape} [num_rois]")
    if ctx.attrs.mode not in ("avg", "max"):
        ctx.fail(f"mode={ctx.attrs.mode!r} must be 'avg' or 'max'")
    oh, ow = (int(v) for v in ctx.attrs.output_size)
    return TensorType((int(rois.shape[0]), int(data.shape[1]), oh, ow), data.dtype)


def _bilinear(img, y, x):
    """The four (weight, value) corners of the sample at (y, x), ONNX RoiAlign's rules; [] outside."""
    h, w = img.shape
    if y < -1.0 or y > h or x < -1.0 or x > w:
        return [(0.0, 0.0)] * 4
    y, x = max(y, 0.0), max(x, 0.0)
    ylo, xlo = int(y), int(x)
    yhi, xhi = ylo + 1, xlo + 1
    if ylo >= h - 1:
        ylo = yhi = h - 1
        y = float(ylo)
    if xlo >= w - 1:
        xlo = xhi = w - 1
        x = float(xlo)
    ly, lx = y - ylo, x - xlo
    return [((1 - ly) * (1 - lx), img[ylo, xlo]), ((1 - ly) * lx, img[ylo, xhi]),
            (ly * (1 - lx), img[yhi, xlo]), (ly * lx, img[yhi, xhi])]


def _roi_align_ref(a, data, rois, idx):
    oh, ow = (int(v) for v in a.output_size)
    out = np.zeros((rois.shape[0], data.shape[1], oh, ow), data.dtype)
    off = 0.5 if a.half_pixel else 0.0
    for r, (x1, y1, x2, y2) in enumerate(rois.astype(np.float64)):
        x0, y0 = x1 * a.spatial_scale - off, y1 * a.spatial_scale - off
        rw, rh = x2 * a.spatial_scale - off - x0, y2 * a.spatial_scale - off - y0
        if not a.half_pixel:
            rw, rh = max(rw, 1.0), max(rh, 1.0)
        gh = a.sampling_ratio if a.sampling_ratio > 0 else int(math.ceil(rh / oh))
        gw = a.sampling_ratio if a.sampling_ratio > 0 else int(math.ceil(rw / ow))
        for ch in range(data.shape[1]):
            img = data[int(idx[r]), ch].astype(np.float64)
            for ph in range(oh):
                for pw in range(ow):
                    vals = []
                    for iy in range(gh):
                        for ix in range(gw):
                            corners = _bilinear(img, y0 + ph * rh / oh + (iy + 0.5) * rh / oh / gh,
                                                x0 + pw * rw / ow + (ix + 0.5) * rw / ow / gw)
                            terms = [wt * v for wt, v in corners]
                            vals.append(sum(terms) if a.mode == "avg" else max(terms))
                    if vals:
                        out[r, ch, ph, pw] = sum(vals) / max(gh * gw, 1) if a.mode == "avg" else max(vals)
    return out


ROI_ALIGN = OpDef("vision.roi_align", ("data", "rois", "batch_indices"),
                  {"output_size": (1, 1), "spatial_scale": 1.0, "sampling_ratio": 0, "mode": "avg",
                   "half_pixel": True}, _roi_align_rel, OpPattern.OPAQUE, _roi_align_ref,
                  doc="ONNX RoiAlign: bilinear samples of each roi's bins, averaged or max-pooled")

def _deform_rel(ctx: RelCtx):
    data, weight, offset = ctx.ndim(0, 4, "NCHW"), ctx.ndim(1, 4, "OIHW"), ctx.ndim(2, 4, "[N, og*2*KH*KW, OH, OW]")
    mask, bias = ctx.ndim(3, 4, "[N, og*KH*KW, OH, OW]"), ctx.ndim(4, 1, "[O]")
    n, c = (int(d) for d in data.shape[:2])
    o, cpg, kh, kw = (int(d) for d in weight.shape)
    g, og = int(ctx.attrs.groups), int(ctx.attrs.offset_groups)
    oh, ow = (int(d) for d in offset.shape[2:])
    if cpg * g != c or o % g or c % og:
        ctx.fail(f"data {data.shape} and weight {weight.shape} do not match groups={g}, offset_groups={og}")
    if tuple(int(d) for d in offset.shape[:2]) != (n, og * 2 * kh * kw):
        ctx.fail(f"offset {offset.shape} must be [{n}, {og * 2 * kh * kw}, OH, OW]")
    if tuple(int(d) for d in mask.shape) != (n, og * kh * kw, oh, ow) or int(bias.shape[0]) != o:
        ctx.fail(f"mask {mask.shape} / bias {bias.shape} must be [{n}, {og * kh * kw}, {oh}, {ow}] / [{o}]")
    return TensorType((n, o, oh, ow), data.dtype)


def _bilinear_zero(img, y, x):
    """Bilinear samples of img at arrays (y, x), zero outside (align_corners pixel coordinates)."""
    h, w = img.shape
    y0, x0 = np.floor(y).astype(np.int64), np.floor(x).astype(np.int64)
    out = np.zeros(y.shape)
    for dy, dx in ((0, 0), (0, 1), (1, 0), (1, 1)):
        yy, xx = y0 + dy, x0 + dx
        wt = (1 - np.abs(y - yy)) * (1 - np.abs(x - xx))
        inside = (yy >= 0) & (yy < h) & (xx >= 0) & (xx < w)
        out += np.where(inside, wt * img[np.clip(yy, 0, h - 1), np.clip(xx, 0, w - 1)], 0.0)
    return out


def _deform_ref(a, x, w, offset, mask, bias):
    n, c, _, _ = x.shape
    o, cpg, kh, kw = w.shape
    oh, ow = offset.shape[2:]
    og = a.offset_groups
    off = offset.reshape(n, og, kh, kw, 2, oh, ow).astype(np.float64)
    msk = mask.reshape(n, og, kh, kw, oh, ow).astype(np.float64)
    base_y = (np.arange(oh) * a.strides[0] - a.pads[0])[:, None]
    base_x = (np.arange(ow) * a.strides[1] - a.pads[1])[None, :]
    out = np.zeros((n, o, oh, ow)) + bias.reshape(1, -1, 1, 1)
    for b in range(n):
        for ch in range(c):
            g = ch // (c // og)
            for i in range(kh):
                for j in range(kw):
                    s = _bilinear_zero(x[b, ch].astype(np.float64), base_y + i * a.dilations[0] + off[b, g, i, j, 0],
                                       base_x + j * a.dilations[1] + off[b, g, i, j, 1]) * msk[b, g, i, j]
                    grp = ch // cpg
                    for oc in range(grp * (o // a.groups), (grp + 1) * (o // a.groups)):
                        out[b, oc] += w[oc, ch % cpg, i, j] * s
    return out.astype(x.dtype)


DEFORM_CONV2D = OpDef("vision.deform_conv2d", ("data", "weight", "offset", "mask", "bias"),
                      {"strides": (1, 1), "pads": (0, 0), "dilations": (1, 1), "groups": 1, "offset_groups": 1},
                      _deform_rel, OpPattern.OPAQUE, _deform_ref,
                      doc="ONNX DeformConv: each tap bilinear-sampled at its offset, times the mask")

OPS = [ROI_ALIGN, DEFORM_CONV2D]


def deform_conv2d(data, weight, offset, mask, bias, strides=(1, 1), pads=(0, 0), dilations=(1, 1), groups=1,
                  offset_groups=1) -> Call:
    return DEFORM_CONV2D(data, weight, offset, mask, bias, strides=tuple(int(v) for v in strides),
                         pads=tuple(int(v) for v in pads), dilations=tuple(int(v) for v in dilations),
                         groups=int(groups), offset_groups=int(offset_groups))


def roi_align(data, rois, batch_indices, output_size, spatial_scale=1.0, sampling_ratio=0, mode="avg",
              half_pixel=True) -> Call:
    return ROI_ALIGN(data, rois, batch_indices, output_size=tuple(int(v) for v in output_size),
                     spatial_scale=float(spatial_scale), sampling_ratio=int(sampling_ratio), mode=str(mode),
                     half_pixel=bool(half_pixel))
