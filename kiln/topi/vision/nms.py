"""ONNX NonMaxSuppression as one ``te.extern`` kernel.

Per (batch, class): the boxes are ordered by score (descending, ties in index order) by counting
ranks, then taken greedily: a box is kept when its score passes the threshold and its IoU with
every box kept so far in that class is at most ``iou_threshold``, until ``max_per_class`` are kept.
The rows ``(batch, class, box)`` are written one after another into a buffer of the largest count
possible (``relay/op/dynamic.py``: the bound), the rest zeroed; the second output holds the count.

The comparison is done in the boxes' element type, the rules (flipped corners, empty boxes never
overlap, strict ``>`` for both thresholds) those of the ONNX operator. It is sequential per
class: fine for the few thousand boxes of a detection head. On GPU targets it runs as one thread.
"""

from __future__ import annotations

from kiln import te, tir
from kiln.ir import expr as E


def non_max_suppression(boxes, scores, iou_threshold, score_threshold, max_per_class: int, bound: int,
                        center_point_box: bool = False, has_score_threshold: bool = True, gpu: bool = False):
    """(selected [bound, 3] int64, count [1] int64)."""
    B, N, _ = (int(d) for d in boxes.shape)
    C = int(scores.shape[1])
    K = min(max(int(max_per_class), 0), N)
    dtype = boxes.dtype

    def body(ins, outs):
        ib = tir.ir_builder.create()
        bx, sc = ib.buffer_ptr(ins[0]), ib.buffer_ptr(ins[1])
        iou_t, score_t = ib.buffer_ptr(ins[2], shape=(1,)), ib.buffer_ptr(ins[3], shape=(1,))
        sel, count = ib.buffer_ptr(outs[0]), ib.buffer_ptr(outs[1])
        scope = "global"
        if gpu:
            ib.scope_attr(te.thread_axis("blockIdx.x"), "thread_extent", 1)
            ib.scope_attr(te.thread_axis("threadIdx.x"), "thread_extent", 1)
            scope = "local"
        order = ib.allocate("int32", (max(N, 1),), name="order", scope=scope)
        kept = ib.allocate("int32", (max(K, 1),), name="kept", scope=scope)
        state = ib.allocate("int64", (3,), name="state", scope=scope)  # total, kept in class, suppressed
        rank = ib.allocate("int32", (1,), name="rank", scope=scope)
        zero64, one64 = E.const(0, "int64"), E.const(1, "int64")
        state[0] = zero64
        with ib.for_range(0, B, name="b") as b:
            with ib.for_range(0, C, name="c") as c:
                _rank_order(ib, sc, order, rank, b, c, N)
                state[1] = zero64
                with ib.for_range(0, N, name="r") as r:
                    i = ib.let("i", order[r])
                    s = ib.let("s", sc[b, c, i])
                    go = state[1] < E.const(K, "int64")
                    if has_score_threshold:
                        go = tir.all(go, s > score_t[0].astype(s.dtype))
                    with ib.if_scope(go):
                        state[2] = zero64
                        with ib.for_range(0, max(K, 1), name="q") as q:
                            with ib.if_scope(tir.all(q.astype("int64") < state[1], state[2] == zero64)):
                                over = _overlaps(ib, bx, b, kept[q], i, center_point_box, iou_t[0].astype(dtype))
                                with ib.if_scope(over):
                                    state[2] = one64
                        with ib.if_scope(state[2] == zero64):
                            kept[state[1]] = i
                            sel[state[0], 0] = b.astype("int64")
                            sel[state[0], 1] = c.astype("int64")
                            sel[state[0], 2] = i.astype("int64")
                            state[0] = state[0] + one64
                            state[1] = state[1] + one64
        with ib.for_range(0, max(bound, 1), name="p") as p:
            with ib.if_scope(tir.all(p < bound, p.astype("int64") >= state[0])):
                for k in range(3):
                    sel[p, k] = zero64
        count[0] = state[0]
        return ib.get()

    return te.extern([(bound, 3), (1,)], [boxes, scores, iou_threshold, score_threshold], body,
                     name="non_max_suppression", dtype=["int64", "int64"], tag="non_max_suppression")


def _rank_order(ib, sc, order, rank, b, c, N: int) -> None:
    """order[rank] = box: descending scores, ties in index order."""
    with ib.for_range(0, N, name="i0") as i:
        rank[0] = E.const(0, "int32")
        with ib.for_range(0, N, name="j0") as j:
            sj, si = sc[b, c, j], sc[b, c, i]
            with ib.if_scope(tir.any(sj > si, tir.all(sj == si, j < i))):
                rank[0] = rank[0] + E.const(1, "int32")
        order[rank[0]] = i.astype("int32")


def _overlaps(ib, bx, b, j, i, center: bool, threshold):
    """IoU(box j, box i) > threshold, as a boolean expression over lets."""
    def corners(k, tag):
        v = [ib.let(f"{tag}{n}", bx[b, k, n]) for n in range(4)]
        if center:
            two = E.const(2.0, v[0].dtype)
            x, y, w, h = v
            return y - h / two, x - w / two, y + h / two, x + w / two
        return tir.min(v[0], v[2]), tir.min(v[1], v[3]), tir.max(v[0], v[2]), tir.max(v[1], v[3])

    ay0, ax0, ay1, ax1 = (ib.let(f"a_{n}", e) for n, e in enumerate(corners(j, "a")))
    by0, bx0, by1, bx1 = (ib.let(f"b_{n}", e) for n, e in enumerate(corners(i, "b")))
    ih = ib.let("ih", tir.min(ay1, by1) - tir.max(ay0, by0))
    iw = ib.let("iw", tir.min(ax1, bx1) - tir.max(ax0, bx0))
    zero = E.const(0.0, ih.dtype)
    inter = ib.let("inter", ih * iw)
    area_a = ib.let("area_a", (ay1 - ay0) * (ax1 - ax0))
    area_b = ib.let("area_b", (by1 - by0) * (bx1 - bx0))
    union = ib.let("union", area_a + area_b - inter)
    valid = tir.all(ih > zero, iw > zero, inter > zero, area_a > zero, area_b > zero, union > zero)
    # the division only where union > 0 (tir.Select evaluates both sides)
    return tir.all(valid, tir.if_then_else(valid, inter / union, zero) > threshold)
