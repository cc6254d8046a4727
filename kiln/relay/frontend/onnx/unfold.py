"""ONNX ops that put values back where they came from, written with existing relay ops:
Col2Im (a transposed convolution with a one-hot kernel sums the overlapping blocks), MaxUnpool
(a scatter into zeros at MaxPool's flat indices), and Det of small matrices (Leibniz' sum over
permutations, n <= 4)."""

from __future__ import annotations

import itertools

import numpy as np

from ...expr import const
from ...op import nn, scatter, tensor
from ...op import transform as tf


def _ints(ctx, expr, what):
    return [int(v) for v in np.asarray(ctx.value(expr, what)).reshape(-1)]


def _col2im(ctx, ins, attrs):
    x = ins[0]
    image = _ints(ctx, ins[1], "input 'image_shape'")
    block = _ints(ctx, ins[2], "input 'block_shape'")
    if len(image) != 2:
        return _col2im_nd(ctx, x, image, block, attrs)
    n, ckk, length = ctx.shape_of(x)
    kh, kw = block
    c = ckk // (kh * kw)
    dil = list(attrs.get("dilations", [1, 1]))
    strides = list(attrs.get("strides", [1, 1]))
    pads = list(attrs.get("pads", [0, 0, 0, 0]))
    span = [(image[a] + pads[a] + pads[a + 2] - dil[a] * (block[a] - 1) - 1) // strides[a] + 1 for a in range(2)]
    if span[0] * span[1] != length:
        ctx.fail(f"input has {length} blocks; image_shape {image}, block_shape {block} and the attributes "
                 f"give {span[0]} x {span[1]}")
    weight = np.zeros((ckk, c, kh, kw), ctx.type_of(x).dtype)
    for ch, i, j in itertools.product(range(c), range(kh), range(kw)):
        weight[(ch * kh + i) * kw + j, ch, i, j] = 1
    cols = tf.reshape(x, (n, ckk, span[0], span[1]))
    return nn.conv2d_transpose(cols, const(weight), strides=strides, padding=(pads[0], pads[1], pads[2], pads[3]),
                               dilation=dil, channels=c, kernel_size=(kh, kw))


def _col2im_nd(ctx, x, image, block, attrs):
    """Col2Im of any rank: every column entry added at its place in the padded image (a constant
    index map, one scatter-add), then the padding cut off."""
    d = len(image)
    n, ckk, length = (int(v) for v in ctx.shape_of(x))
    kvol = int(np.prod(block))
    c = ckk // kvol
    dil = list(attrs.get("dilations", [1] * d))
    strides = list(attrs.get("strides", [1] * d))
    pads = list(attrs.get("pads", [0] * 2 * d))
    padded = [image[a] + pads[a] + pads[a + d] for a in range(d)]
    span = [(padded[a] - dil[a] * (block[a] - 1) - 1) // strides[a] + 1 for a in range(d)]
    if c * kvol != ckk or int(np.prod(span)) != length:
        ctx.fail(f"input [{n}, {ckk}, {length}] does not hold the blocks of image_shape {image}, block_shape {block} "
                 f"and the attributes ({c} x {kvol} rows of {int(np.prod(span))} blocks)")
    ctx.allocation((n, c * int(np.prod(padded))), ctx.type_of(x).dtype)
    k = np.indices(block).reshape(d, -1)          # offsets inside a block, row-major
    s = np.indices(span).reshape(d, -1)           # block positions, row-major
    coords = s[:, None, :] * np.array(strides)[:, None, None] + k[:, :, None] * np.array(dil)[:, None, None]
    place = np.ravel_multi_index(tuple(coords), padded)                     # [kvol, length]
    index = (np.arange(c)[:, None, None] * int(np.prod(padded)) + place[None]).reshape(1, -1)
    zeros = const(np.zeros((n, c * int(np.prod(padded))), ctx.type_of(x).dtype))
    flat = scatter.scatter_elements(zeros, const(np.repeat(index, n, 0).astype(np.int64)),
                                    tf.reshape(x, (n, ckk * length)), axis=1, reduction="add")
    y = tf.reshape(flat, (n, c, *padded))
    if any(pads):
        y = tf.strided_slice(y, [pads[a] for a in range(d)], [pads[a] + image[a] for a in range(d)],
                             axes=list(range(2, 2 + d)))
    return y


def _max_unpool(ctx, ins, attrs):
    """Scatter into the shape the pooling parameters give; an ``output_shape`` input pads that
    with zeros at the end of each axis (the ONNX reference's reading: indices stay those of
    the inferred shape)."""
    x, idx = ins[0], ins[1]
    shape = ctx.shape_of(x)
    kernel = attrs["kernel_shape"]
    strides = attrs.get("strides", [1] * len(kernel))
    pads = attrs.get("pads", [0] * 2 * len(kernel))
    out = list(shape[:2]) + [(shape[2 + a] - 1) * strides[a] - pads[a] - pads[a + len(kernel)] + kernel[a]
                             for a in range(len(kernel))]
    total = int(np.prod(out))
    zeros = const(np.zeros(total, ctx.type_of(x).dtype))
    flat = scatter.scatter_elements(zeros, tf.reshape(tf.cast(idx, "int64"), (-1,)), tf.reshape(x, (-1,)))
    y = tf.reshape(flat, tuple(out))
    if len(ins) > 2 and ins[2] is not None:
        given = _ints(ctx, ins[2], "input 'output_shape'")
        if len(given) != len(out) or any(g < o for g, o in zip(given, out)):
            ctx.fail(f"output_shape {given} is smaller than the unpooled shape {out}")
        if given != out:
            y = nn.pad(y, [(0, g - o) for g, o in zip(given, out)])
    return y


def _det(ctx, ins, attrs):
    x = ins[0]
    shape = ctx.shape_of(x)
    n = shape[-1]
    if len(shape) < 2 or shape[-2] != n or not 1 <= n <= 4:
        ctx.fail(f"input of shape {list(shape)}: kiln computes Det of square matrices up to 4 x 4")
    rank = len(shape)
    entries = {(i, j): tf.squeeze(tf.strided_slice(x, [i, j], [i + 1, j + 1], axes=[rank - 2, rank - 1]),
                                  [rank - 2, rank - 1]) for i in range(n) for j in range(n)}
    total = None
    for perm in itertools.permutations(range(n)):
        term = entries[(0, perm[0])]
        for i in range(1, n):
            term = tensor.multiply(term, entries[(i, perm[i])])
        inversions = sum(1 for a in range(n) for b in range(a + 1, n) if perm[a] > perm[b])
        if total is None:
            total = term
        else:
            total = (tensor.subtract if inversions % 2 else tensor.add)(total, term)
    return total


CONVERTERS = {"Col2Im": _col2im, "MaxUnpool": _max_unpool, "Det": _det}
