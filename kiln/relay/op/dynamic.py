"""Ops whose output size depends on the data: NonMaxSuppression, NonZero, Unique.

kiln compiles static shapes, so each of these ops returns its output in a buffer of the largest
size it can take (the *bound*: every box kept, every element non-zero, every slice distinct),
plus an int64 tensor of shape (1,) holding the *length*: how many entries along one axis (the
*dynamic axis*) are valid. The valid entries come first along that axis; the rest are padding
(zeros, so that indices read from the padding are still in range). ``dyn.with_length(data,
length, axis)`` marks a graph output as such a tensor: the graph executor returns only its valid
part (docs/frontends.md, "Ops with data-dependent output shapes").
"""

from __future__ import annotations

import numpy as np

from ..expr import Call, TupleWrapper
from ..ty import TensorType, TupleType
from .registry import OpDef, OpPattern, RelCtx

LENGTH = TensorType((1,), "int64")


# -- NonMaxSuppression (ONNX semantics) -----------------------------------------------------------

def nms_bound(num_batches: int, num_classes: int, num_boxes: int, max_per_class: int) -> int:
    return num_batches * num_classes * min(max(int(max_per_class), 0), num_boxes)


def _nms_rel(ctx: RelCtx):
    boxes, scores = ctx.ndim(0, 3, "[batch, boxes, 4]"), ctx.ndim(1, 3, "[batch, classes, boxes]")
    b, n, four = (int(d) for d in boxes.shape)
    if four != 4 or int(scores.shape[0]) != b or int(scores.shape[2]) != n:
        ctx.fail(f"boxes {boxes.shape} and scores {scores.shape} must be [batch, boxes, 4] and [batch, classes, boxes]")
    for i in (2, 3):
        t = ctx.tensor(i)
        if int(np.prod(t.shape, dtype=np.int64)) != 1:
            ctx.fail(f"input {ctx.op.inputs[i]!r} must hold one value, got shape {t.shape}")
    bound = nms_bound(b, int(scores.shape[1]), n, ctx.attrs.max_output_boxes_per_class)
    return TupleType([TensorType((bound, 3), "int64"), LENGTH])


def _corners(box, center: bool):
    """(y_min, x_min, y_max, x_max) of one box in either ONNX box format."""
    if center:  # in the boxes' element type, as the kernel computes
        x, y, w, h = box
        two = box.dtype.type(2)
        return y - h / two, x - w / two, y + h / two, x + w / two
    y1, x1, y2, x2 = box
    return min(y1, y2), min(x1, x2), max(y1, y2), max(x1, x2)


def _overlaps(a, b, center: bool, threshold: float) -> bool:
    ay0, ax0, ay1, ax1 = _corners(a, center)
    by0, bx0, by1, bx1 = _corners(b, center)
    ih, iw = min(ay1, by1) - max(ay0, by0), min(ax1, bx1) - max(ax0, bx0)
    if not (ih > 0 and iw > 0):
        return False
    inter = ih * iw
    area_a, area_b = (ay1 - ay0) * (ax1 - ax0), (by1 - by0) * (bx1 - bx0)
    union = area_a + area_b - inter
    if area_a <= 0 or area_b <= 0 or union <= 0:
        return False
    return inter / union > threshold


def _nms_ref(a, boxes, scores, iou_threshold, score_threshold):
    b, c, n = scores.shape
    k = min(max(int(a.max_output_boxes_per_class), 0), n)
    iou = np.ravel(iou_threshold)[0].astype(boxes.dtype)
    floor = np.ravel(score_threshold)[0].astype(scores.dtype)
    rows = []
    for bi in range(b):
        for ci in range(c):
            s = scores[bi, ci]
            order = sorted(range(n), key=lambda i: (-s[i], i))
            kept: list[int] = []
            for i in order:
                if len(kept) >= k:
                    break
                if a.has_score_threshold and not s[i] > floor:
                    break
                if not any(_overlaps(boxes[bi, j], boxes[bi, i], a.center_point_box, iou) for j in kept):
                    kept.append(i)
            rows += [(bi, ci, i) for i in kept]
    out = np.zeros((nms_bound(b, c, n, a.max_output_boxes_per_class), 3), np.int64)
    out[:len(rows)] = np.asarray(rows, np.int64).reshape(-1, 3)
    return out, np.array([len(rows)], np.int64)


NMS = OpDef("vision.non_max_suppression", ("boxes", "scores", "iou_threshold", "score_threshold"),
            {"max_output_boxes_per_class": 0, "center_point_box": False, "has_score_threshold": False},
            _nms_rel, OpPattern.OPAQUE, _nms_ref, num_outputs=2,
            doc="ONNX NonMaxSuppression: ([bound, 3] selected (batch, class, box) rows, valid row count)")


# -- NonZero --------------------------------------------------------------------------------------

def _nonzero_rel(ctx: RelCtx):
    t = ctx.tensor(0)
    return TupleType([TensorType((max(t.ndim, 1), int(np.prod(t.shape, dtype=np.int64))), "int64"), LENGTH])


def _nonzero_ref(a, x):
    idx = np.array(np.nonzero(x if x.ndim else x.reshape(1)), np.int64)
    out = np.zeros((max(x.ndim, 1), x.size), np.int64)
    out[:, :idx.shape[1]] = idx
    return out, np.array([idx.shape[1]], np.int64)


NONZERO = OpDef("nonzero", ("data",), {}, _nonzero_rel, OpPattern.OPAQUE, _nonzero_ref, num_outputs=2,
                doc="coordinates of the non-zero elements, [ndim, size] (columns valid up to the count)")


# -- Unique ---------------------------------------------------------------------------------------

def _unique_rel(ctx: RelCtx):
    t = ctx.tensor(0)
    if ctx.attrs.axis is None:
        n = int(np.prod(t.shape, dtype=np.int64))
        values = TensorType((n,), t.dtype)
    else:
        axis = ctx.axis(int(ctx.attrs.axis), t.ndim)
        n = int(t.shape[axis])
        values = t
    vec = TensorType((n,), "int64")
    return TupleType([values, vec, vec, vec, LENGTH])


def _unique_ref(a, x):
    flat = a.axis is None
    axis = 0 if flat else a.axis % x.ndim
    src = x.reshape(-1) if flat else x
    n = src.shape[axis]
    # + 0 makes -0.0 the key of 0.0: they are equal, as the kernel's comparison (and numpy's) says
    keys = [(np.take(src, k, axis=axis) + (0.0 if src.dtype.kind == "f" else 0)).tobytes() for k in range(n)]
    first = {}
    for k, key in enumerate(keys):
        first.setdefault(key, k)
    reps = sorted(set(first.values()))
    if a.sorted:
        reps.sort(key=lambda k: tuple(np.take(src, k, axis=axis).reshape(-1).tolist()))
    pos = {keys[k]: p for p, k in enumerate(reps)}
    m = len(reps)
    values = np.zeros_like(src)
    index = [slice(None)] * src.ndim
    for p, k in enumerate(reps):
        index[axis] = p
        values[tuple(index)] = np.take(src, k, axis=axis)
    first_index, counts = np.zeros(n, np.int64), np.zeros(n, np.int64)
    first_index[:m] = reps
    inverse = np.array([pos[key] for key in keys], np.int64)
    np.add.at(counts, inverse, 1)
    return values, first_index, inverse, counts, np.array([m], np.int64)


UNIQUE = OpDef("unique", ("data",), {"axis": None, "sorted": True}, _unique_rel, OpPattern.OPAQUE, _unique_ref,
               num_outputs=5, doc="ONNX Unique: (values, first indices, inverse indices, counts, count)")


# -- the graph-output marker ----------------------------------------------------------------------

def _with_length_rel(ctx: RelCtx):
    t = ctx.tensor(0)
    ctx.axis(int(ctx.attrs.axis), t.ndim)
    if ctx.tensor(1).shape != (1,) or ctx.tensor(1).dtype != "int64":
        ctx.fail(f"length must be an int64 tensor of shape (1,), got {ctx.tensor(1)}")
    return t


def _with_length_ref(a, x, length):
    return np.take(x, np.arange(int(length[0])), axis=a.axis % x.ndim)


WITH_LENGTH = OpDef("dyn.with_length", ("data", "length"), {"axis": 0}, _with_length_rel, OpPattern.OPAQUE,
                    _with_length_ref, doc="data whose valid part is its first length[0] entries along axis "
                                          "(a graph output of data-dependent size)")

OPS = [NMS, NONZERO, UNIQUE, WITH_LENGTH]


def non_max_suppression(boxes, scores, iou_threshold, score_threshold, max_output_boxes_per_class: int,
                        center_point_box: bool = False, has_score_threshold: bool = True) -> TupleWrapper:
    return NMS(boxes, scores, iou_threshold, score_threshold,
               max_output_boxes_per_class=int(max_output_boxes_per_class), center_point_box=bool(center_point_box),
               has_score_threshold=bool(has_score_threshold))


def nonzero(data) -> TupleWrapper:
    return NONZERO(data)


def unique(data, axis=None, sorted: bool = True) -> TupleWrapper:  # noqa: A002 - ONNX's attribute name
    return UNIQUE(data, axis=None if axis is None else int(axis), sorted=bool(sorted))


def with_length(data, length, axis: int = 0) -> Call:
    return WITH_LENGTH(data, length, axis=int(axis))
