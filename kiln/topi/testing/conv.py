"""numpy references for convolutions (direct loops over the kernel window, im2col-free)."""

from __future__ import annotations

import numpy as np

from ..utils import as_pair, pad_tuple


def _window_conv(x, w, stride, dilation, out_hw):
    """x: (N, C, Hp, Wp) padded; w: (O, C, KH, KW). Sum over kernel taps of strided slices."""
    n, c = x.shape[:2]
    o, _, kh, kw = w.shape
    sh, sw = stride
    dh, dw = dilation
    oh, ow = out_hw
    acc_dtype = np.float64 if x.dtype.kind == "f" else np.int64
    out = np.zeros((n, o, oh, ow), dtype=acc_dtype)
    for ky in range(kh):
        for kx in range(kw):
            patch = x[:, :, ky * dh: ky * dh + sh * (oh - 1) + 1: sh, kx * dw: kx * dw + sw * (ow - 1) + 1: sw]
            out += np.einsum("nchw,oc->nohw", patch.astype(acc_dtype), w[:, :, ky, kx].astype(acc_dtype))
    return out


def conv2d_nchw_python(a_np, w_np, stride, padding, dilation=1, groups=1, out_dtype=None):
    """Reference conv2d: a (N, C, H, W), w (O, C/groups, KH, KW); padding int, pair, quad or SAME/VALID."""
    sh, sw = as_pair(stride, "conv2d_nchw_python", "stride")
    dh, dw = as_pair(dilation, "conv2d_nchw_python", "dilation")
    kh, kw = w_np.shape[2:]
    pt, pl, pb, pr = pad_tuple(padding, ((kh - 1) * dh + 1, (kw - 1) * dw + 1))
    x = np.pad(a_np, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    oh = (x.shape[2] - (kh - 1) * dh - 1) // sh + 1
    ow = (x.shape[3] - (kw - 1) * dw - 1) // sw + 1
    c, o = a_np.shape[1], w_np.shape[0]
    cg, og = c // groups, o // groups
    parts = [_window_conv(x[:, g * cg:(g + 1) * cg], w_np[g * og:(g + 1) * og], (sh, sw), (dh, dw), (oh, ow))
             for g in range(groups)]
    out = np.concatenate(parts, axis=1)
    return out.astype(out_dtype or a_np.dtype)


def conv2d_nhwc_python(a_np, w_np, stride, padding, dilation=1, groups=1, out_dtype=None):
    """Reference conv2d: a (N, H, W, C), w (KH, KW, C/groups, O)."""
    out = conv2d_nchw_python(a_np.transpose(0, 3, 1, 2), w_np.transpose(3, 2, 0, 1), stride, padding,
                             dilation, groups, out_dtype)
    return out.transpose(0, 2, 3, 1)


def depthwise_conv2d_nchw_python(a_np, w_np, stride, padding, dilation=1, out_dtype=None):
    """a (N, C, H, W), w (C*M, 1, KH, KW) (ONNX/relay form) or (C, M, KH, KW) (TVM's form)."""
    c = a_np.shape[1]
    if w_np.shape[1] != 1 or w_np.shape[0] % c:
        w_np = w_np.reshape(-1, 1, *w_np.shape[2:])
    return conv2d_nchw_python(a_np, w_np, stride, padding, dilation, groups=c, out_dtype=out_dtype)


def depthwise_conv2d_nhwc_python(a_np, w_np, stride, padding, dilation=1, out_dtype=None):
    """a (N, H, W, C), w (KH, KW, C, M)."""
    kh, kw, c, m = w_np.shape
    w = w_np.transpose(2, 3, 0, 1).reshape(c * m, 1, kh, kw)
    out = conv2d_nchw_python(a_np.transpose(0, 3, 1, 2), w, stride, padding, dilation, groups=c, out_dtype=out_dtype)
    return out.transpose(0, 2, 3, 1)


def dilate_python(x, strides, dilation_value=0.0):
    """Insert (stride - 1) copies of dilation_value between elements along each axis."""
    shape = tuple((d - 1) * s + 1 for d, s in zip(x.shape, strides))
    out = np.full(shape, dilation_value, dtype=x.dtype)
    out[tuple(slice(None, None, s) for s in strides)] = x
    return out


def conv2d_transpose_nchw_python(a_np, w_np, stride, padding, output_padding=0, groups=1, dilation=1):
    """Transposed conv: a (N, C, H, W), w (C, O/groups, KH, KW) (the ONNX/PyTorch layout)."""
    sh, sw = as_pair(stride, "conv2d_transpose", "stride")
    dh, dw = as_pair(dilation, "conv2d_transpose", "dilation")
    oph, opw = as_pair(output_padding, "conv2d_transpose", "output_padding")
    c, og, kh, kw = w_np.shape
    pt, pl, pb, pr = pad_tuple(padding, (kh, kw))
    x = dilate_python(a_np, (1, 1, sh, sw))
    ekh, ekw = (kh - 1) * dh + 1, (kw - 1) * dw + 1
    x = np.pad(x, ((0, 0), (0, 0), (ekh - 1 - pt, ekh - 1 - pb + oph), (ekw - 1 - pl, ekw - 1 - pr + opw)))
    cg = c // groups
    # Flip the kernel and swap in/out channels per group: (C, O/g, KH, KW) -> (O, C/g, KH, KW).
    w = w_np.reshape(groups, cg, og, kh, kw).transpose(0, 2, 1, 3, 4).reshape(groups * og, cg, kh, kw)
    w = w[:, :, ::-1, ::-1]
    return conv2d_nchw_python(x, w, 1, 0, (dh, dw), groups=groups)
