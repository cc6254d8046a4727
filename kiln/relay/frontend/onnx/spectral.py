"""ONNX DFT (and STFT, framed then DFT) as dense products with constant cosine/sine matrices along the signal axis (a DFT of
length n costs n^2 multiply-adds per signal: fine for the short transforms models carry).
Forward, inverse (1/n), one-sided forward (n//2 + 1 bins) and one-sided inverse (a real signal
from the half spectrum, as numpy's irfft)."""

from __future__ import annotations

import numpy as np

from ...expr import const
from ...op import nn, tensor
from ...op import transform as tf


def _scalar(ctx, expr, what):
    value = np.asarray(ctx.value(expr, what))
    if value.size != 1:
        ctx.fail(f"{what} must hold one value, got shape {list(value.shape)}")
    return int(value.reshape(()))


def _along_last(x, rank, axis):
    perm = [a for a in range(rank) if a != axis] + [axis]
    return tf.transpose(x, perm), perm


def _matmul_last(ctx, x, matrix):
    """x (..., L) times matrix (K, L) over its last axis -> (..., K)."""
    shape = ctx.shape_of(x)
    rows = tf.reshape(x, (-1, shape[-1]))
    out = nn.dense(rows, const(matrix))
    return tf.reshape(out, tuple(shape[:-1]) + (matrix.shape[0],))


def _dft(ctx, ins, attrs):
    x = ins[0]
    shape = ctx.shape_of(x)
    rank = len(shape)
    dtype = ctx.type_of(x).dtype
    if ctx.opset >= 20:
        axis = _scalar(ctx, ins[2], "input 'axis'") if len(ins) > 2 and ins[2] is not None else -2
    else:
        axis = attrs.get("axis", 1)
    axis %= rank
    if axis == rank - 1 or shape[-1] not in (1, 2):
        ctx.fail(f"input of shape {list(shape)}: the last axis must be 1 (real) or 2 (complex) and the "
                 f"signal axis ({axis}) another one")
    inverse, onesided = bool(attrs.get("inverse", 0)), bool(attrs.get("onesided", 0))
    length = shape[axis]
    if len(ins) > 1 and ins[1] is not None:
        n = _scalar(ctx, ins[1], "input 'dft_length'")
    else:
        n = 2 * (length - 1) if inverse and onesided else length
    re = tf.squeeze(tf.strided_slice(x, [0], [1], axes=[rank - 1]), [rank - 1])
    im = tf.squeeze(tf.strided_slice(x, [1], [2], axes=[rank - 1]), [rank - 1]) if shape[-1] == 2 else None
    re, perm = _along_last(re, rank - 1, axis)
    im = _along_last(im, rank - 1, axis)[0] if im is not None else None
    if inverse and onesided:
        used = min(length, n // 2 + 1)
        k = np.arange(used)
        weight = np.where((k == 0) | ((n % 2 == 0) & (k == n // 2)), 1.0, 2.0)
        angle = 2 * np.pi * np.outer(np.arange(n), k) / n
        cos, sin = (weight * np.cos(angle) / n).astype(dtype), (weight * np.sin(angle) / n).astype(dtype)
        re = tf.strided_slice(re, [0], [used], axes=[rank - 2])
        out_re = _matmul_last(ctx, re, cos)
        if im is not None:
            out_re = tensor.subtract(out_re, _matmul_last(ctx, tf.strided_slice(im, [0], [used], axes=[rank - 2]), sin))
        out = tf.expand_dims(out_re, rank - 1)
    else:
        used = min(length, n)
        bins = n // 2 + 1 if onesided and not inverse else n
        sign = 1.0 if inverse else -1.0
        angle = sign * 2 * np.pi * np.outer(np.arange(bins), np.arange(used)) / n
        scale = 1.0 / n if inverse else 1.0
        cos, sin = (np.cos(angle) * scale).astype(dtype), (np.sin(angle) * scale).astype(dtype)
        re = tf.strided_slice(re, [0], [used], axes=[rank - 2])
        out_re, out_im = _matmul_last(ctx, re, cos), _matmul_last(ctx, re, sin)
        if im is not None:
            im = tf.strided_slice(im, [0], [used], axes=[rank - 2])
            out_re = tensor.subtract(out_re, _matmul_last(ctx, im, sin))
            out_im = tensor.add(out_im, _matmul_last(ctx, im, cos))
        out = tf.stack([out_re, out_im], rank - 1)
    inv = np.argsort(perm).tolist() + [rank - 1]
    return tf.transpose(out, inv)


def _stft(ctx, ins, attrs):
    """Frames of the signal (a take with a constant index table), times the window, then DFT."""
    signal = ins[0]
    step = _scalar(ctx, ins[1], "input 'frame_step'")
    window = ins[2] if len(ins) > 2 else None
    if len(ins) > 3 and ins[3] is not None:
        length = _scalar(ctx, ins[3], "input 'frame_length'")
    elif window is not None:
        length = ctx.shape_of(window)[0]
    else:
        ctx.fail("needs a window or a frame_length to know the frame size")
    b, total, comps = ctx.shape_of(signal)
    frames = 1 + (total - length) // step
    if frames < 1:
        ctx.fail(f"a signal of {total} samples holds no frame of {length}")
    table = (np.arange(frames)[:, None] * step + np.arange(length)[None, :]).astype("int64")
    framed = tf.take(signal, const(table), axis=1)  # (B, frames, length, comps)
    if window is not None:
        framed = tensor.multiply(framed, tf.reshape(window, (1, 1, length, 1)))
    return _dft(ctx, [framed, const(np.array(length, "int64")), const(np.array(2, "int64"))],
                {"axis": 2, "onesided": attrs.get("onesided", 1)})


def _mel_weight_matrix(ctx, ins, attrs):
    """The ONNX triangle filters, [dft_length // 2 + 1, num_mel_bins], computed at import (every
    input must be a constant). Band edges follow the operator's reference: the mel range split
    into num_mel_bins + 2 steps, bins truncated to integers."""
    num_mel, dft_length, rate = (int(np.asarray(ctx.value(e, n)).reshape(())) for e, n in
                                 zip(ins[:3], ("num_mel_bins", "dft_length", "sample_rate")))
    low_hz, high_hz = (float(np.asarray(ctx.value(e, n)).reshape(())) for e, n in
                       zip(ins[3:5], ("lower_edge_hertz", "upper_edge_hertz")))
    if num_mel <= 0 or dft_length <= 0 or rate <= 0:
        ctx.fail(f"num_mel_bins {num_mel}, dft_length {dft_length} and sample_rate {rate} must be positive")
    ctx.allocation((dft_length // 2 + 1, num_mel), "float64")
    mel = lambda hz: 2595.0 * np.log10(1.0 + hz / 700.0)  # noqa: E731
    points = np.arange(num_mel + 2) * ((mel(high_hz) - mel(low_hz)) / (num_mel + 2)) + mel(low_hz)
    hz = 700.0 * (np.power(10.0, points / 2595.0) - 1.0)
    bins = (((dft_length + 1) * hz) // rate).astype(np.int64)
    out = np.zeros((dft_length // 2 + 1, num_mel))
    for i in range(num_mel):
        lo, mid, hi = bins[i], bins[i + 1], bins[i + 2]
        if mid == lo:
            out[mid, i] = 1.0
        else:
            out[lo:mid + 1, i] = (np.arange(lo, mid + 1) - lo) / (mid - lo)
        if hi > mid:
            out[mid:hi, i] = (hi - np.arange(mid, hi)) / (hi - mid)
    from onnx import helper
    dtype = helper.tensor_dtype_to_np_dtype(attrs.get("output_datatype", 1))
    return const(out.astype(dtype))


CONVERTERS = {"DFT": _dft, "STFT": _stft, "MelWeightMatrix": _mel_weight_matrix}
