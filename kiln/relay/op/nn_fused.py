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

``nn.contrib_conv2d_bias_NCHWc`` / ``nn.contrib_conv2d_bias_residual_NCHWc``: a bfloat16 conv2d
summed in float32, plus its bias, plus (the second op) a residual, then relu if ``relu``, rounded
to bfloat16 once (the FuseConvEpilogue pass makes them on CPUs with AMX-BF16 from
ToMixedPrecision's conv + cast + add [+ add] [+ relu], which round three times;
topi.x86.amx_bf16 computes them with the epilogue applied to the AMX tiles in cache). Inputs:

    data      (N, C/ib, H, W, ib), or a plain (N, C, H, W) image of at most 4 channels
    weight    (O/b, C/ib, KH, KW, ib/2, b, 2) (channel pairs), or (O/b, C, KH, KW, 1, b) for plain data
    bias      (1, O/b, 1, 1, b)
    residual  (N, O/b, OH, OW, b)

Output (N, O/b, OH, OW, b), bfloat16.
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

def _conv_bias_rel(ctx: RelCtx):
    a = ctx.attrs
    data = ctx.args[0]
    if len(data.shape) not in (4, 5):
        ctx.fail(f"input 'data' has {len(data.shape)} dims; expected (N, C/ib, H, W, ib) or a plain (N, C, H, W)")
    weight = ctx.ndim(1, 7 if len(data.shape) == 5 else 6, "the packed conv weight")
    bias = ctx.ndim(2, 5, "1, O/b, 1, 1, b")
    ctx.same_dtype(0, 1, 2)
    if str(data.dtype) != "bfloat16":
        ctx.fail(f"input 'data' is {data.dtype}; this op computes bfloat16 convolutions")
    n, _, h, w = data.shape[:4]
    chunks, b, kh, kw = weight.shape[0], weight.shape[5], weight.shape[2], weight.shape[3]
    if tuple(bias.shape) != (1, chunks, 1, 1, b):
        ctx.fail(f"input 'bias' has shape {bias.shape}; expected (1, {chunks}, 1, 1, {b})")
    pt, pl, pb, pr = a.padding
    oh = conv_out_size(h, kh, a.strides[0], pt, pb, a.dilation[0])
    ow = conv_out_size(w, kw, a.strides[1], pl, pr, a.dilation[1])
    if oh <= 0 or ow <= 0:
        ctx.fail(f"the {kh}x{kw} kernel does not fit the {h}x{w} input with padding {a.padding}")
    out = (n, chunks, oh, ow, b)
    if len(ctx.args) > 3 and tuple(ctx.args[3].shape) != out:
        ctx.fail(f"input 'residual' has shape {ctx.args[3].shape}; expected the output's {out}")
    if len(ctx.args) > 3:
        ctx.same_dtype(0, 3)
    return TensorType(out, data.dtype)


def unpack_conv_weight(weight: np.ndarray) -> np.ndarray:
    """OIHW of the packed weights of ``nn.contrib_conv2d_bias_NCHWc`` (7 dims: channel pairs;
    6: plain data's (O/b, C, KH, KW, 1, b))."""
    if weight.ndim == 7:
        ob, cb, kh, kw, half, b, _ = weight.shape
        return weight.transpose(0, 5, 1, 4, 6, 2, 3).reshape(ob * b, cb * half * 2, kh, kw)
    ob, c, kh, kw, _, b = weight.shape
    return weight[:, :, :, :, 0, :].transpose(0, 4, 1, 2, 3).reshape(ob * b, c, kh, kw)


def _conv_bias_ref(a, x, weight, bias, residual=None):
    import ml_dtypes

    bf16 = ml_dtypes.bfloat16
    plain = x.ndim == 4
    xs = x.astype(np.float64) if plain else _unblock(x.astype(np.float64))
    sums = conv2d_nchw_ref(xs, unpack_conv_weight(weight).astype(np.float64), a.strides, a.padding, a.dilation, 1)
    n, c, oh, ow = sums.shape
    b = weight.shape[5]
    out = sums.reshape(n, c // b, b, oh, ow).transpose(0, 1, 3, 4, 2) + bias.astype(np.float64)
    if residual is not None:
        out = out + residual.astype(np.float64)
    if a.relu:
        out = np.maximum(out, 0.0)
    return np.ascontiguousarray(out.astype(np.float32).astype(bf16))


_CONV_ATTRS = {"strides": (1, 1), "padding": (0, 0, 0, 0), "dilation": (1, 1), "relu": False}
CONV_BIAS = OpDef("nn.contrib_conv2d_bias_NCHWc", ("data", "weight", "bias"), dict(_CONV_ATTRS),
                  _conv_bias_rel, OpPattern.OPAQUE, _conv_bias_ref,
                  doc="bfloat16 conv2d + bias [+ relu] in float32, rounded once, as one kernel (packed weights)")
CONV_BIAS_RESIDUAL = OpDef("nn.contrib_conv2d_bias_residual_NCHWc", ("data", "weight", "bias", "residual"),
                           dict(_CONV_ATTRS), _conv_bias_rel, OpPattern.OPAQUE, _conv_bias_ref,
                           doc="bfloat16 conv2d + bias + residual [+ relu] in float32, rounded once, as one kernel")

OPS = [EXPAND_DEPTHWISE, CONV_BIAS, CONV_BIAS_RESIDUAL]


def _conv_attrs(strides, padding, dilation, relu) -> dict:
    return dict(strides=as_tuple(strides, 2, "strides"), padding=conv_padding(padding),
                dilation=as_tuple(dilation, 2, "dilation"), relu=bool(relu))


def contrib_conv2d_bias_NCHWc(data, weight, bias, strides=(1, 1), padding=(0, 0), dilation=(1, 1),  # noqa: N802
                              relu=False):
    """The fused bfloat16 conv + bias [+ relu] op (module docstring); ``padding`` as for conv2d."""
    return CONV_BIAS(data, weight, bias, **_conv_attrs(strides, padding, dilation, relu))


def contrib_conv2d_bias_residual_NCHWc(data, weight, bias, residual, strides=(1, 1), padding=(0, 0),  # noqa: N802
                                       dilation=(1, 1), relu=False):
    """The fused bfloat16 conv + bias + residual [+ relu] op (module docstring)."""
    return CONV_BIAS_RESIDUAL(data, weight, bias, residual, **_conv_attrs(strides, padding, dilation, relu))


def contrib_expand_depthwise_NCHWc(data, expand_weight, expand_bias, depthwise_weight, strides=(1, 1),  # noqa: N802
                                   padding=(1, 1), act_min=None, act_max=None):
    """The fused expand + depthwise op (module docstring); ``padding`` as for conv2d."""
    return EXPAND_DEPTHWISE(data, expand_weight, expand_bias, depthwise_weight,
                            strides=as_tuple(strides, 2, "strides"), padding=conv_padding(padding),
                            act_min=None if act_min is None else float(act_min),
                            act_max=None if act_max is None else float(act_max))
