"""numpy references for dense, batch_matmul, pooling, softmax and layer norm."""

from __future__ import annotations

import numpy as np


def dense_python(x, w, bias=None, out_dtype=None):
    """x (M, K) @ w (N, K).T (+ bias)."""
    acc = np.float64 if x.dtype.kind == "f" else np.int64
    out = x.astype(acc) @ w.astype(acc).T
    if bias is not None:
        out = out + bias.astype(acc)
    return out.astype(out_dtype or x.dtype)


def batch_matmul_python(x, y, transpose_a=False, transpose_b=True, out_dtype=None):
    """x (B, M, K) @ y (B, N, K).T with numpy broadcasting over a batch of 1."""
    acc = np.float64 if x.dtype.kind == "f" else np.int64
    a = x.astype(acc).swapaxes(1, 2) if transpose_a else x.astype(acc)
    b = y.astype(acc).swapaxes(1, 2) if transpose_b else y.astype(acc)
    return np.matmul(a, b).astype(out_dtype or x.dtype)


def softmax_python(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return (e / e.sum(axis=axis, keepdims=True)).astype(x.dtype)


def log_softmax_python(x, axis=-1):
    m = x - x.max(axis=axis, keepdims=True)
    return (m - np.log(np.exp(m).sum(axis=axis, keepdims=True))).astype(x.dtype)


def layer_norm_python(x, gamma, beta, axis=-1, epsilon=1e-5):
    axes = tuple(a % x.ndim for a in (axis if isinstance(axis, (list, tuple)) else [axis]))
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    out = (x - mean) / np.sqrt(var + epsilon)
    if gamma is not None:
        out = out * gamma
    if beta is not None:
        out = out + beta
    return out.astype(x.dtype)


def pool2d_python(x, kernel, stride, padding, pool_type, dilation=(1, 1), ceil_mode=False,
                  count_include_pad=True, layout="NCHW"):
    """max / avg pooling of NCHW (or NHWC) x; padding (top, left, bottom, right)."""
    if layout == "NHWC":
        return pool2d_python(x.transpose(0, 3, 1, 2), kernel, stride, padding, pool_type, dilation,
                             ceil_mode, count_include_pad).transpose(0, 2, 3, 1)
    n, c, h, w = x.shape
    kh, kw = kernel
    sh, sw = stride
    dh, dw = dilation
    pt, pl, pb, pr = padding
    ekh, ekw = (kh - 1) * dh + 1, (kw - 1) * dw + 1

    def out_size(size, pa, pb_, ek, s):
        span = size + pa + pb_ - ek
        o = (span + s - 1) // s + 1 if ceil_mode else span // s + 1
        if ceil_mode and (o - 1) * s >= size + pa:  # the last window must start inside the input
            o -= 1
        return o

    oh, ow = out_size(h, pt, pb, ekh, sh), out_size(w, pl, pr, ekw, sw)
    out = np.zeros((n, c, oh, ow), dtype=x.dtype)
    for i in range(oh):
        for j in range(ow):
            ys = [i * sh - pt + a * dh for a in range(kh)]
            xs = [j * sw - pl + b * dw for b in range(kw)]
            vy = [y for y in ys if 0 <= y < h]
            vx = [v for v in xs if 0 <= v < w]
            win = x[:, :, vy][:, :, :, vx]
            if pool_type == "max":
                out[:, :, i, j] = win.max(axis=(2, 3))
            else:
                if count_include_pad:
                    # Padded cells count, but not the ones past the bottom/right pad (ceil_mode).
                    cy = len([y for y in ys if y < h + pb])
                    cx = len([v for v in xs if v < w + pr])
                    denom = cy * cx
                else:
                    denom = len(vy) * len(vx)
                out[:, :, i, j] = win.sum(axis=(2, 3)) / max(denom, 1)
    return out


def adaptive_pool_python(x, out_size, pool_type, layout="NCHW"):
    """Adaptive avg / max pooling (window i covers [floor(i*H/oh), ceil((i+1)*H/oh)))."""
    if layout == "NHWC":
        return adaptive_pool_python(x.transpose(0, 3, 1, 2), out_size, pool_type).transpose(0, 2, 3, 1)
    n, c, h, w = x.shape
    oh, ow = out_size
    out = np.zeros((n, c, oh, ow), dtype=x.dtype)
    for i in range(oh):
        y0, y1 = (i * h) // oh, -((-(i + 1) * h) // oh)
        for j in range(ow):
            x0, x1 = (j * w) // ow, -((-(j + 1) * w) // ow)
            win = x[:, :, y0:y1, x0:x1]
            out[:, :, i, j] = win.max(axis=(2, 3)) if pool_type == "max" else win.mean(axis=(2, 3))
    return out
