"""TFLite data-movement operators: RESHAPE, SQUEEZE, CONCATENATION, PAD/PADV2, TRANSPOSE."""

from __future__ import annotations

import numpy as np

from ...op import nn
from ...op import transform as tf
from .elementwise import fused


def _reshape(ctx, ins):
    """The output tensor's shape is static in the flatbuffer; it is the most reliable source."""
    return tf.reshape(ins[0], ctx.out_info(0).shape)


def _concatenation(ctx, ins):
    import tflite
    opts = ctx.options(tflite.ConcatenationOptions)
    out = tf.concatenate([x for x in ins if x is not None], int(opts.Axis()))
    return fused(ctx, out, opts.FusedActivationFunction())


def _pad(ctx, ins):
    pads = np.asarray(ctx.constant(1, "paddings")).reshape(-1, 2)
    value = 0.0
    if len(ins) > 2 and ins[2] is not None:  # PADV2: the (real) constant value
        value = float(np.asarray(ins[2].data).reshape(-1)[0])
    return nn.pad(ins[0], [(int(lo), int(hi)) for lo, hi in pads], value)


def _transpose(ctx, ins):
    return tf.transpose(ins[0], [int(a) for a in np.asarray(ctx.constant(1, "perm")).reshape(-1)])


CONVERTERS = {
    "RESHAPE": _reshape, "SQUEEZE": _reshape, "CONCATENATION": _concatenation, "PAD": _pad, "PADV2": _pad,
    "TRANSPOSE": _transpose,
}
