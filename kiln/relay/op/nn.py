"""Neural-network ops with weights: conv2d, conv2d_transpose, dense, batch_matmul, bias_add,
plus activations, pad and batch_flatten. Pooling is in nn_pool.py, normalization in nn_norm.py.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..ty import TensorType
from . import layout
from .registry import OpDef, OpPattern, RelCtx, as_tuple, conv_padding, identity_rel

OEF = OpPattern.OUT_ELEMWISE_FUSABLE


def _acc(x: np.ndarray) -> np.ndarray:
    """The reference accumulates float32 in float64 so it is a better oracle than the kernels, and
    integers in int64 (numpy would multiply uint8 by int8 in int16 and wrap)."""
    return x.astype(np.float64) if x.dtype == np.float32 else x.astype(np.int64) if x.dtype.kind in "iu" else x


def _out_dtype(attrs, fallback: str) -> str:
    return attrs.out_dtype or fallback


# -- conv2d ---------------------------------------------------------------------------------------

def conv_out_size(size, k, stride, pad_lo, pad_hi, dilation):
    return (size + pad_lo + pad_hi - (k - 1) * dilation - 1) // stride + 1


def conv2d_nchw_ref(x, w, strides, padding, dilation, groups):
    """Grouped, dilated, strided conv2d on NCHW data and OIHW weights (numpy, float64 accumulate)."""
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    pt, pl, pb, pr = padding
    sh, sw = strides
    dh, dw = dilation
    xp = np.pad(_acc(x), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    oh = conv_out_size(h, kh, sh, pt, pb, dh)
    ow = conv_out_size(wd, kw, sw, pl, pr, dw)
    win = sliding_window_view(xp, ((kh - 1) * dh + 1, (kw - 1) * dw + 1), axis=(2, 3))
    win = win[:, :, ::sh, ::sw, ::dh, ::dw][:, :, :oh, :ow]
    win = win.reshape(n, groups, c // groups, oh, ow, kh, kw)
    wg = _acc(w).reshape(groups, o // groups, cg, kh, kw)
    out = np.einsum("ngchwij,gocij->ngohw", win, wg, optimize=True)
    return out.reshape(n, o, oh, ow)


_KERNEL_FOR = {"NCHW": "OIHW", "NHWC": "HWIO"}


def _conv2d_dims(ctx: RelCtx):
    """Data, weight and their dims by letter. The data may be channel-blocked (NCHW16c: the
    x86 layout AlterOpLayout chooses), then its C is the blocked axis times the block."""
    a = ctx.attrs
    try:
        plain = layout.primal(a.data_layout)
        block = layout.channel_block(a.data_layout)
    except ValueError as e:
        ctx.fail(str(e))
    data = ctx.ndim(0, 4 + bool(block), a.data_layout)
    weight = ctx.ndim(1, 4, a.kernel_layout)
    if sorted(plain) != sorted("NCHW") or sorted(a.kernel_layout) != sorted("OIHW") or \
            (block and a.data_layout != f"NCHW{block}c"):
        ctx.fail(f"unsupported layouts data_layout={a.data_layout!r}, kernel_layout={a.kernel_layout!r}")
    d = {c: data.shape[plain.index(c)] for c in "NCHW"}
    d["C"] *= max(block, 1)
    k = {c: weight.shape[a.kernel_layout.index(c)] for c in "OIHW"}
    return data, weight, d, k


def _conv2d_rel(ctx: RelCtx):
    a = ctx.attrs
    data, weight, d, k = _conv2d_dims(ctx)
    if d["C"] % a.groups or k["O"] % a.groups:
        ctx.fail(f"channels ({d['C']} in, {k['O']} out) are not divisible by groups={a.groups}")
    if k["I"] * a.groups != d["C"]:
        ctx.fail(f"input 'weight' has {k['I']} input channels per group; with groups={a.groups} "
                 f"the data's {d['C']} channels need {d['C'] // a.groups} (weight {weight.shape}, "
                 f"kernel_layout={a.kernel_layout})")
    if a.channels is not None and a.channels != k["O"]:
        ctx.fail(f"channels={a.channels} but 'weight' has {k['O']} output channels")
    if a.kernel_size is not None and tuple(a.kernel_size) != (k["H"], k["W"]):
        ctx.fail(f"kernel_size={tuple(a.kernel_size)} but 'weight' is {k['H']}x{k['W']}")
    pt, pl, pb, pr = a.padding
    oh = conv_out_size(d["H"], k["H"], a.strides[0], pt, pb, a.dilation[0])
    ow = conv_out_size(d["W"], k["W"], a.strides[1], pl, pr, a.dilation[1])
    if oh <= 0 or ow <= 0:
        ctx.fail(f"the {k['H']}x{k['W']} kernel does not fit the {d['H']}x{d['W']} input with padding {a.padding}")
    out_layout = a.out_layout or a.data_layout
    try:
        shape = layout.blocked_shape((d["N"], k["O"], oh, ow), "NCHW", out_layout)
    except ValueError as e:
        ctx.fail(f"out_layout {out_layout!r}: {e}")
    return TensorType(shape, _out_dtype(a, data.dtype))


def _to(x, src, dst):
    return np.transpose(x, [src.index(c) for c in dst])


def _conv2d_ref(a, x, w):
    out = conv2d_nchw_ref(layout.transform(x, a.data_layout, "NCHW"), _to(w, a.kernel_layout, "OIHW"),
                          a.strides, a.padding, a.dilation, a.groups)
    out = layout.transform(out, "NCHW", a.out_layout or a.data_layout)
    return np.ascontiguousarray(out).astype(_out_dtype(a, x.dtype.name))


_CONV_ATTRS = {"strides": (1, 1), "padding": (0, 0, 0, 0), "dilation": (1, 1), "groups": 1, "channels": None,
               "kernel_size": None, "data_layout": "NCHW", "kernel_layout": "OIHW", "out_layout": "",
               "out_dtype": ""}
CONV2D = OpDef("nn.conv2d", ("data", "weight"), dict(_CONV_ATTRS), _conv2d_rel, OEF, _conv2d_ref,
               doc="2-D convolution (cross-correlation), grouped and dilated")


# -- conv2d_transpose (weight IOHW: in_channels, out_channels/groups, kh, kw) ----------------------

def _convt_rel(ctx: RelCtx):
    a = ctx.attrs
    data = ctx.ndim(0, 4, "NCHW")
    weight = ctx.ndim(1, 4, "IOHW")
    if a.data_layout != "NCHW" or a.kernel_layout not in ("IOHW", "OIHW"):
        ctx.fail(f"supports data_layout='NCHW' with kernel_layout 'IOHW'; got {a.data_layout}/{a.kernel_layout}")
    n, c, h, w = data.shape
    ci, cog, kh, kw = weight.shape if a.kernel_layout == "IOHW" else (weight.shape[1], weight.shape[0]) + weight.shape[2:]
    if ci != c:
        ctx.fail(f"input 'weight' expects {ci} input channels but 'data' has {c}")
    pt, pl, pb, pr = a.padding
    oh = (h - 1) * a.strides[0] - pt - pb + a.dilation[0] * (kh - 1) + a.output_padding[0] + 1
    ow = (w - 1) * a.strides[1] - pl - pr + a.dilation[1] * (kw - 1) + a.output_padding[1] + 1
    return TensorType((n, cog * a.groups, oh, ow), _out_dtype(a, data.dtype))


def _convt_ref(a, x, w):
    if a.kernel_layout == "OIHW":
        w = np.transpose(w, (1, 0, 2, 3))
    n, c, h, wd = x.shape
    _, cog, kh, kw = w.shape
    g = a.groups
    sh, sw = a.strides
    dh, dw = a.dilation
    full_h = (h - 1) * sh + dh * (kh - 1) + 1 + a.output_padding[0]
    full_w = (wd - 1) * sw + dw * (kw - 1) + 1 + a.output_padding[1]
    out = np.zeros((n, g, cog, full_h, full_w))
    xg = _acc(x).reshape(n, g, c // g, h, wd)
    wg = _acc(w).reshape(g, c // g, cog, kh, kw)
    for i in range(kh):
        for j in range(kw):
            contrib = np.einsum("ngchw,gco->ngohw", xg, wg[:, :, :, i, j])
            out[:, :, :, i * dh:i * dh + (h - 1) * sh + 1:sh, j * dw:j * dw + (wd - 1) * sw + 1:sw] += contrib
    pt, pl, pb, pr = a.padding
    out = out.reshape(n, g * cog, full_h, full_w)[:, :, pt:full_h - pb, pl:full_w - pr]
    return np.ascontiguousarray(out).astype(_out_dtype(a, x.dtype.name))


CONV2D_TRANSPOSE = OpDef(
    "nn.conv2d_transpose", ("data", "weight"),
    {**_CONV_ATTRS, "kernel_layout": "IOHW", "output_padding": (0, 0)}, _convt_rel, OEF, _convt_ref,
    doc="transposed 2-D convolution (gradient of conv2d wrt its input)")


# -- dense / batch_matmul -------------------------------------------------------------------------

def _dense_rel(ctx: RelCtx):
    data, weight = ctx.tensor(0), ctx.ndim(1, 2, "units, in_features")
    if data.ndim < 1 or data.shape[-1] != weight.shape[1]:
        ctx.fail(f"input 'data' {data.shape} has {data.shape[-1] if data.ndim else 0} features but "
                 f"'weight' {weight.shape} expects {weight.shape[1]} (weight is [units, in_features])")
    if ctx.attrs.units is not None and ctx.attrs.units != weight.shape[0]:
        ctx.fail(f"units={ctx.attrs.units} but 'weight' has {weight.shape[0]} rows")
    return TensorType(data.shape[:-1] + (weight.shape[0],), _out_dtype(ctx.attrs, data.dtype))


DENSE = OpDef("nn.dense", ("data", "weight"), {"units": None, "out_dtype": ""}, _dense_rel, OEF,
              lambda a, x, w: (_acc(x) @ _acc(w).T).astype(_out_dtype(a, x.dtype.name)),
              doc="data @ weight.T")


def _bmm_rel(ctx: RelCtx):
    x, y = ctx.ndim(0, 3, "batch, M, K"), ctx.ndim(1, 3, "batch, N, K" if ctx.attrs.transpose_b else "batch, K, N")
    m, kx = (x.shape[2], x.shape[1]) if ctx.attrs.transpose_a else (x.shape[1], x.shape[2])
    n, ky = (y.shape[1], y.shape[2]) if ctx.attrs.transpose_b else (y.shape[2], y.shape[1])
    if kx != ky:
        ctx.fail(f"reduction sizes differ: 'x' {x.shape} gives K={kx}, 'y' {y.shape} gives K={ky}")
    if x.shape[0] != y.shape[0] and 1 not in (x.shape[0], y.shape[0]):
        ctx.fail(f"batch sizes {x.shape[0]} and {y.shape[0]} differ")
    return TensorType((max(x.shape[0], y.shape[0]), m, n), _out_dtype(ctx.attrs, x.dtype))


def _bmm_ref(a, x, y):
    x = np.swapaxes(x, 1, 2) if a.transpose_a else x
    y = np.swapaxes(y, 1, 2) if a.transpose_b else y
    return np.matmul(_acc(x), _acc(y)).astype(_out_dtype(a, x.dtype.name))


BATCH_MATMUL = OpDef("nn.batch_matmul", ("x", "y"), {"out_dtype": "", "transpose_a": False, "transpose_b": True},
                     _bmm_rel, OEF, _bmm_ref, doc="batched matmul; y is [batch, N, K] by default")


# -- bias_add, activations, pad, flatten ----------------------------------------------------------

def _bias_rel(ctx: RelCtx):
    data, bias = ctx.tensor(0), ctx.ndim(1, 1, "channels")
    axis = ctx.axis(ctx.attrs.axis, data.ndim)
    if bias.shape[0] != data.shape[axis]:
        ctx.fail(f"input 'bias' has {bias.shape[0]} values but 'data' {data.shape} has {data.shape[axis]} on axis {axis}")
    return data


def _bias_ref(a, x, b):
    axis = a.axis % x.ndim
    return x + b.reshape((-1,) + (1,) * (x.ndim - axis - 1))


BIAS_ADD = OpDef("nn.bias_add", ("data", "bias"), {"axis": 1}, _bias_rel, OpPattern.BROADCAST, _bias_ref,
                 doc="add a per-channel bias along axis")
RELU = OpDef("nn.relu", ("data",), {}, identity_rel, OpPattern.ELEMWISE,
             lambda a, x: np.maximum(x, 0).astype(x.dtype), doc="max(x, 0)")
LEAKY_RELU = OpDef("nn.leaky_relu", ("data",), {"alpha": 0.01}, identity_rel, OpPattern.ELEMWISE,
                   lambda a, x: np.where(x > 0, x, x * a.alpha).astype(x.dtype), doc="x if x > 0 else alpha * x")


def _prelu_rel(ctx: RelCtx):
    data, alpha = ctx.tensor(0), ctx.ndim(1, 1, "channels")
    axis = ctx.axis(ctx.attrs.axis, data.ndim)
    if alpha.shape[0] not in (1, data.shape[axis]):
        ctx.fail(f"input 'alpha' has {alpha.shape[0]} values for {data.shape[axis]} channels")
    return data


PRELU = OpDef("nn.prelu", ("data", "alpha"), {"axis": 1}, _prelu_rel, OpPattern.BROADCAST,
              lambda a, x, al: np.where(x > 0, x, _bias_ref(a, np.zeros_like(x), al) * x).astype(x.dtype),
              doc="leaky relu with a learned slope per channel")


def _pad_rel(ctx: RelCtx):
    data = ctx.tensor(0)
    pw = ctx.attrs.pad_width
    if len(pw) != data.ndim:
        ctx.fail(f"pad_width has {len(pw)} entries for a {data.ndim}-d input")
    if ctx.attrs.pad_mode not in ("constant", "edge", "reflect"):
        ctx.fail(f"pad_mode must be constant, edge or reflect, got {ctx.attrs.pad_mode!r}")
    return TensorType(tuple(d + lo + hi for d, (lo, hi) in zip(data.shape, pw)), data.dtype)


def _pad_ref(a, x):
    pw = [tuple(p) for p in a.pad_width]
    if a.pad_mode == "constant":
        return np.pad(x, pw, constant_values=np.asarray(a.pad_value).astype(x.dtype))
    return np.pad(x, pw, mode=a.pad_mode)


PAD = OpDef("nn.pad", ("data",), {"pad_width": (), "pad_value": 0.0, "pad_mode": "constant"}, _pad_rel,
            OpPattern.INJECTIVE, _pad_ref, doc="pad each axis by (before, after)")


def _flatten_rel(ctx: RelCtx):
    data = ctx.tensor(0)
    if data.ndim < 1:
        ctx.fail("input 'data' must have at least 1 dim")
    rest = int(np.prod(data.shape[1:]))
    return TensorType((data.shape[0], rest), data.dtype)


BATCH_FLATTEN = OpDef("nn.batch_flatten", ("data",), {}, _flatten_rel, OpPattern.INJECTIVE,
                      lambda a, x: x.reshape(x.shape[0], -1), doc="flatten all but the batch axis")

OPS = [CONV2D, CONV2D_TRANSPOSE, DENSE, BATCH_MATMUL, BIAS_ADD, RELU, LEAKY_RELU, PRELU, PAD, BATCH_FLATTEN]


# -- constructors ---------------------------------------------------------------------------------

def conv2d(data, weight, strides=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1, channels=None,
           kernel_size=None, data_layout="NCHW", kernel_layout="", out_layout="", out_dtype=""):
    """2-D convolution. ``padding`` is an int, (pad_h, pad_w) or (top, left, bottom, right)."""
    return CONV2D(data, weight, strides=as_tuple(strides, 2, "strides"), padding=conv_padding(padding),
                  dilation=as_tuple(dilation, 2, "dilation"), groups=int(groups),
                  channels=None if channels is None else int(channels),
                  kernel_size=None if kernel_size is None else as_tuple(kernel_size, 2, "kernel_size"),
                  data_layout=data_layout, kernel_layout=kernel_layout or _KERNEL_FOR.get(data_layout, "OIHW"),
                  out_layout=out_layout, out_dtype=out_dtype)


def conv2d_transpose(data, weight, strides=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1, channels=None,
                     kernel_size=None, data_layout="NCHW", kernel_layout="IOHW", out_layout="",
                     output_padding=(0, 0), out_dtype=""):
    return CONV2D_TRANSPOSE(
        data, weight, strides=as_tuple(strides, 2, "strides"), padding=conv_padding(padding),
        dilation=as_tuple(dilation, 2, "dilation"), groups=int(groups),
        channels=None if channels is None else int(channels),
        kernel_size=None if kernel_size is None else as_tuple(kernel_size, 2, "kernel_size"),
        data_layout=data_layout, kernel_layout=kernel_layout, out_layout=out_layout,
        output_padding=as_tuple(output_padding, 2, "output_padding"), out_dtype=out_dtype)


def dense(data, weight, units=None, out_dtype=""):
    return DENSE(data, weight, units=None if units is None else int(units), out_dtype=out_dtype)


def batch_matmul(x, y, out_dtype="", transpose_a=False, transpose_b=True):
    return BATCH_MATMUL(x, y, out_dtype=out_dtype, transpose_a=bool(transpose_a), transpose_b=bool(transpose_b))


def bias_add(data, bias, axis=1):
    return BIAS_ADD(data, bias, axis=int(axis))


def relu(data):
    return RELU(data)


def leaky_relu(data, alpha=0.01):
    return LEAKY_RELU(data, alpha=float(alpha))


def prelu(data, alpha, axis=1):
    return PRELU(data, alpha, axis=int(axis))


def pad(data, pad_width, pad_value=0.0, pad_mode="constant"):
    pw = tuple((int(lo), int(hi)) for lo, hi in pad_width)
    return PAD(data, pad_width=pw, pad_value=float(pad_value), pad_mode=pad_mode)


def batch_flatten(data):
    return BATCH_FLATTEN(data)
