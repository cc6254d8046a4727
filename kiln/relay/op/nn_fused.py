"""Ops that stand for several relay ops run as one kernel, made by graph passes.

``nn.contrib_expand_depthwise_NCHWc``: a 1x1 conv2d, its bias add and clip, then a depthwise
conv2d, on channel-blocked data with packed constant weights (the FuseExpandDepthwise pass
makes it on x86; topi.x86.expand_depthwise_NCHWc computes it). Inputs:

    data              (N, C/ib, H, W, ib)
    expand_weight     (O/b, C/ib, 1, 1, ib, b)
    expand_bias       (1, O/b, 1, 1, b)
    depthwise_weight  (O/b, KH, KW, b)

Output (N, O/b, OH, OW, b): the depthwise conv of ``clip(conv1x1 + bias, act_min, act_max)``
zero-padded by ``padding`` (top, left, bottom, right), with ``strides``.
"""

from __future__ import annotations

import numpy as np

from ..ty import TensorType
from .nn import conv2d_nchw_ref, conv_out_size
from .registry import OpDef, OpPattern, RelCtx, as_tuple, conv_padding

_NAME = "nn.contrib_expand_depthwise_NCHWc"


def _expand_depthwise_rel(ctx: RelCtx):
    a = ctx.attrs
    data = ctx.ndim(0, 5, "N, C/ib, H, W, ib")
    ew = ctx.ndim(1, 6, "O/b, C/ib, 1, 1, ib, b")
    eb = ctx.ndim(2, 5, "1, O/b, 1, 1, b")
    dw = ctx.ndim(3, 4, "O/b, KH, KW, b")
    ctx.same_dtype(0, 1, 2, 3)
    n, chunks_in, h, w, ib = data.shape
    chunks, _, _, _, _, b = ew.shape
    if tuple(ew.shape[1:5]) != (chunks_in, 1, 1, ib):
        ctx.fail(f"input 'expand_weight' {ew.shape} must be ({chunks}, {chunks_in}, 1, 1, {ib}, {b}) "
                 f"for 'data' {data.shape}")
    if tuple(eb.shape) != (1, chunks, 1, 1, b):
        ctx.fail(f"input 'expand_bias' has shape {eb.shape}; expected (1, {chunks}, 1, 1, {b})")
    if (dw.shape[0], dw.shape[3]) != (chunks, b):
        ctx.fail(f"input 'depthwise_weight' {dw.shape} must be ({chunks}, KH, KW, {b})")
    pt, pl, pb, pr = a.padding
    oh = conv_out_size(h, dw.shape[1], a.strides[0], pt, pb, 1)
    ow = conv_out_size(w, dw.shape[2], a.strides[1], pl, pr, 1)
    if oh <= 0 or ow <= 0:
        ctx.fail(f"the {dw.shape[1]}x{dw.shape[2]} depthwise kernel does not fit the {h}x{w} input "
                 f"with padding {a.padding}")
    return TensorType((n, chunks, oh, ow, b), data.dtype)


def _unblock(x):
    n, c, h, w, b = x.shape
    return x.transpose(0, 1, 4, 2, 3).reshape(n, c * b, h, w)


def _expand_depthwise_ref(a, x, ew, eb, dw):
    chunks, chunks_in, _, _, ib, b = ew.shape
    w1 = ew.transpose(0, 5, 1, 4, 2, 3).reshape(chunks * b, chunks_in * ib, 1, 1)
    expanded = conv2d_nchw_ref(_unblock(x), w1, (1, 1), (0, 0, 0, 0), (1, 1), 1) + _unblock(eb)
    expanded = np.clip(expanded, a.act_min, a.act_max) if (a.act_min, a.act_max) != (None, None) else expanded
    kh, kw = dw.shape[1:3]
    w2 = dw.transpose(0, 3, 1, 2).reshape(chunks * b, 1, kh, kw)
    out = conv2d_nchw_ref(expanded, w2, a.strides, a.padding, (1, 1), chunks * b)
    n, c, oh, ow = out.shape
    blocked = out.reshape(n, chunks, b, oh, ow).transpose(0, 1, 3, 4, 2)
    return np.ascontiguousarray(blocked).astype(x.dtype)


EXPAND_DEPTHWISE = OpDef(
    _NAME, ("data", "expand_weight", "expand_bias", "depthwise_weight"),
    {"strides": (1, 1), "padding": (1, 1, 1, 1), "act_min": None, "act_max": None},
    _expand_depthwise_rel, OpPattern.OUT_ELEMWISE_FUSABLE, _expand_depthwise_ref,
    doc="1x1 conv2d + bias + clip, then a depthwise conv2d, as one kernel (blocked layout, packed weights)")

OPS = [EXPAND_DEPTHWISE]


def contrib_expand_depthwise_NCHWc(data, expand_weight, expand_bias, depthwise_weight, strides=(1, 1),  # noqa: N802
                                   padding=(1, 1), act_min=None, act_max=None):
    """The fused expand + depthwise op (module docstring); ``padding`` as for conv2d."""
    return EXPAND_DEPTHWISE(data, expand_weight, expand_bias, depthwise_weight,
                            strides=as_tuple(strides, 2, "strides"), padding=conv_padding(padding),
                            act_min=None if act_min is None else float(act_min),
                            act_max=None if act_max is None else float(act_max))
