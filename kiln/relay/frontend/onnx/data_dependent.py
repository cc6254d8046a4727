"""ONNX ops whose output size depends on the data: NonMaxSuppression, NonZero, Unique.

Each converter returns ``Bounded`` values: a tensor of the op's largest output size, the axis
along which only a prefix is valid, and the int64 (1,) tensor holding that prefix's length
(relay/op/dynamic.py). The importer follows such a tensor through the ops that keep its entries
apart along that axis (``follow``: elementwise ops, Cast, Gather, Squeeze/Unsqueeze/Transpose/
Slice of other axes, Concat and reductions over other axes); at a graph output it becomes
``dyn.with_length``, which the graph executor cuts to the valid part. Any other consumer is an
import error naming the op, since it would mix the padding into real results.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...expr import const
from ...op import dynamic

DOC = "docs/frontends.md, 'Ops with data-dependent output shapes'"


@dataclass
class Bounded:
    """A converter's output whose entries along ``axis`` are valid up to ``length`` (run time)."""

    data: object
    axis: int
    length: object
    origin: str  # the op type that made it, for error messages


def _scalar(ctx, expr, what, default):
    if expr is None:
        return default
    value = np.asarray(ctx.value(expr, what)).reshape(-1)
    if value.size != 1:
        ctx.fail(f"{what} must hold one value, got {value.size}")
    return value[0]


def _nms(ctx, ins, attrs):
    boxes, scores = ins[0], ins[1]
    ins = list(ins) + [None] * (5 - len(ins))
    max_out = int(_scalar(ctx, ins[2], "max_output_boxes_per_class", 0))
    dtype = str(ctx.type_of(boxes).dtype)
    iou = ins[3] if ins[3] is not None else const(np.zeros(1, dtype))
    has_floor = ins[4] is not None
    floor = ins[4] if has_floor else const(np.zeros(1, dtype))
    out = dynamic.non_max_suppression(boxes, scores, iou, floor, max_out, attrs.get("center_point_box", 0),
                                      has_floor)
    return Bounded(out[0], 0, out[1], "NonMaxSuppression")


def _nonzero(ctx, ins, attrs):
    if not ctx.shape_of(ins[0]):
        ctx.fail("NonZero of a 0-d tensor is not supported; reshape it to (1,) first")
    out = dynamic.nonzero(ins[0])
    return Bounded(out[0], 1, out[1], "NonZero")


def _unique(ctx, ins, attrs):
    axis = attrs.get("axis")
    if axis is not None:
        rank = len(ctx.shape_of(ins[0]))
        if not isinstance(axis, int) or not -rank <= axis < rank:
            ctx.fail(f"attribute axis={axis} is outside the input's {rank} dimensions")
        axis = int(axis) % rank
    out = dynamic.unique(ins[0], axis, bool(attrs.get("sorted", 1)))
    n = out[4]
    return [Bounded(out[0], axis or 0, n, "Unique"), Bounded(out[1], 0, n, "Unique"), out[2],
            Bounded(out[3], 0, n, "Unique")]


def _roi_align(ctx, ins, attrs):
    """RoiAlign (a static shape, but the other half of a detection head): opset 16 added
    ``coordinate_transformation_mode``, whose default ``half_pixel`` differs from before."""
    from ...op import transform as tf
    from ...op.vision import roi_align

    mode = attrs.get("coordinate_transformation_mode", "half_pixel" if ctx.opset >= 16 else "output_half_pixel")
    if mode not in ("half_pixel", "output_half_pixel"):
        ctx.fail(f"coordinate_transformation_mode {mode!r} must be 'half_pixel' or 'output_half_pixel'")
    x, rois, idx = ins[:3]
    dtype = str(ctx.type_of(x).dtype)
    if str(ctx.type_of(rois).dtype) != dtype:
        rois = tf.cast(rois, dtype)
    return roi_align(x, rois, idx, (attrs.get("output_height", 1), attrs.get("output_width", 1)),
                     attrs.get("spatial_scale", 1.0), attrs.get("sampling_ratio", 0), attrs.get("mode", "avg"),
                     mode == "half_pixel")


def _deform_conv(ctx, ins, attrs):
    """DeformConv (2-D); a missing mask is ones, a missing bias zeros."""
    from ...op.vision import deform_conv2d

    ins = list(ins) + [None] * (5 - len(ins))
    x, w, offset, bias, mask = ins[:5]
    shape, dtype = ctx.shape_of(x), str(ctx.type_of(x).dtype)
    if len(shape) != 4:
        ctx.fail(f"input of shape {list(shape)}: kiln converts 2-D DeformConv (NCHW)")
    og = int(attrs.get("offset_group", 1))
    kh, kw = (int(d) for d in ctx.shape_of(w)[2:])
    oh, ow = (int(d) for d in ctx.shape_of(offset)[2:])
    if mask is None:
        mask = const(np.ones((shape[0], og * kh * kw, oh, ow), dtype))
    if bias is None:
        bias = const(np.zeros(ctx.shape_of(w)[0], dtype))
    pads = attrs.get("pads", [0, 0, 0, 0])
    return deform_conv2d(x, w, offset, mask, bias, attrs.get("strides", [1, 1]), pads[:2],
                         attrs.get("dilations", [1, 1]), attrs.get("group", 1), og)


CONVERTERS = {"NonMaxSuppression": _nms, "NonZero": _nonzero, "Unique": _unique, "RoiAlign": _roi_align,
              "DeformConv": _deform_conv}


# -- following a bounded tensor through its consumers ---------------------------------------------

ELEMENTWISE = frozenset("""
    Identity Cast CastLike Neg Abs Relu Sigmoid Exp Log Sqrt Floor Ceil Round Not Tanh Sign Reciprocal IsNaN IsInf
    Clip Erf Softplus LeakyRelu HardSigmoid
    Add Sub Mul Div Pow Mod Equal Greater Less GreaterOrEqual LessOrEqual And Or Xor Where Max Min Sum Mean
    BitShift BitwiseAnd BitwiseOr BitwiseXor BitwiseNot""".split())
REDUCTIONS = frozenset("""ReduceSum ReduceMean ReduceMax ReduceMin ReduceProd ReduceL1 ReduceL2 ReduceSumSquare
    ReduceLogSum ReduceLogSumExp ArgMax ArgMin""".split())


def follow(ctx, ins, info: list, attrs: dict, outs: list) -> list:
    """For each output of a node that reads bounded tensors (``info[i]``: (axis, length, origin) or
    None per input), its (axis, length, origin), or None where the output is fully valid."""
    op = ctx.node.op_type
    known = [(i, b) for i, b in enumerate(info) if b is not None]
    _, (axis, length, origin) = known[0]
    name = ctx.node.input[known[0][0]]

    def refuse(why: str):
        ctx.fail(f"reads {name!r}, whose axis {axis} holds only as many entries as {origin} found at run time; "
                 f"{why}. kiln follows such a tensor through elementwise ops, Cast, Gather, Squeeze/Unsqueeze/"
                 f"Transpose/Slice of other axes, Concat and reductions over other axes ({DOC})")

    def shape(i):
        return tuple(int(d) for d in ctx.shape_of(ins[i]))

    if any(b[1] is not length for _, b in known[1:]):
        refuse("it is combined with a tensor whose length comes from another op")
    if op in ELEMENTWISE:
        rank = len(ctx.shape_of(outs[0]))
        axes = {b[0] + rank - len(shape(i)) for i, b in known}
        if len(axes) != 1:
            refuse("its inputs have their run-time axes in different places")
        return [(axes.pop(), length, origin)]
    if op == "Gather":
        g = int(attrs.get("axis", 0)) % len(shape(0))
        if info[0] is not None and info[1] is not None:
            refuse("both the data and the indices of Gather have run-time lengths")
        if info[0] is not None:
            if g == axis:
                refuse("Gather selects along that axis")
            return [(axis if axis < g else axis + len(shape(1)) - 1, length, origin)]
        return [(g + axis, length, origin)]
    if op == "Transpose":
        perm = list(attrs.get("perm") or reversed(range(len(shape(0)))))
        return [(perm.index(axis), length, origin)]
    if op in ("Squeeze", "Unsqueeze"):
        rank_in, rank_out = len(shape(0)), len(ctx.shape_of(outs[0]))
        axes = ins[1] if len(ins) > 1 and ins[1] is not None else None
        axes = [int(a) for a in np.asarray(ctx.value(axes, "axes")).reshape(-1)] if axes is not None else \
            attrs.get("axes")
        if op == "Squeeze":
            axes = [a % rank_in for a in axes] if axes is not None else [k for k, d in enumerate(shape(0)) if d == 1]
            if axis in axes:
                refuse("Squeeze removes that axis")
            return [(axis - sum(a < axis for a in axes), length, origin)]
        inserted = sorted(a % rank_out for a in axes)
        kept = [k for k in range(rank_out) if k not in inserted]
        return [(kept[axis], length, origin)]
    if op == "Slice":
        before, after = shape(0), tuple(int(d) for d in ctx.shape_of(outs[0]))
        if before[axis] != after[axis]:
            refuse("Slice cuts that axis")
        return [(axis, length, origin)]
    if op == "Concat":
        c = int(attrs["axis"]) % len(shape(0))
        if c == axis or len(known) != len([i for i in ins if i is not None]):
            refuse("Concat joins it with fully valid tensors" if c != axis else "Concat joins along that axis")
        return [(axis, length, origin)]
    if op in REDUCTIONS:
        rank = len(shape(0))
        if op in ("ArgMax", "ArgMin"):
            axes = [int(attrs.get("axis", 0)) % rank]
        else:
            given = ins[1] if len(ins) > 1 and ins[1] is not None else None
            axes = [int(a) % rank for a in np.asarray(ctx.value(given, "axes")).reshape(-1)] if given is not None \
                else [int(a) % rank for a in attrs.get("axes", range(rank))]
        if axis in axes:
            refuse(f"{op} reduces over that axis")
        keep = bool(attrs.get("keepdims", 1))
        return [(axis if keep else axis - sum(a < axis for a in axes), length, origin)]
    refuse(f"{op} is not among the ops that keep the valid entries apart")
    return []
