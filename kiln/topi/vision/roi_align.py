"""ONNX RoiAlign as one ``te.extern`` kernel.

For every output cell (roi, channel, ph, pw): the roi's bin is sampled on a grid of
``sampling_ratio`` x ``sampling_ratio`` points (when 0: ceil(roi size / output size) per axis,
so the loop extents come from the data), each point bilinear-interpolated from the four pixels
around it; ``avg`` averages the samples, ``max`` keeps the largest weighted corner of any
sample (the rule of onnxruntime, which the ONNX reference follows). Points more than one pixel
outside the image count as zero. ``half_pixel`` shifts the roi by half a pixel (opset 16's
default); ``output_half_pixel`` (the older behaviour) keeps it and makes the roi at least 1x1.
"""

from __future__ import annotations

from kiln import te, tir
from kiln.ir import expr as E


def roi_align(data, rois, batch_indices, output_size: tuple, spatial_scale: float, sampling_ratio: int,
              mode: str = "avg", half_pixel: bool = True):
    """[num_rois, C, out_h, out_w] from data [N, C, H, W], rois [num_rois, 4] (x1, y1, x2, y2)."""
    _, C, H, W = (int(d) for d in data.shape)
    R = int(rois.shape[0])
    oh, ow = (int(v) for v in output_size)
    dtype = data.dtype

    def body(ins, outs):
        ib = tir.ir_builder.create()
        x, box, bidx = (ib.buffer_ptr(b) for b in ins)
        out = ib.buffer_ptr(outs[0])
        acc = ib.allocate(dtype, (1,), name="acc", scope="local")
        c = lambda v: E.const(v, dtype)  # noqa: E731
        with ib.for_range(0, R, name="r") as r:
            b = ib.let("b", bidx[r].astype("int32"))
            offset = c(0.5 if half_pixel else 0.0)
            y0 = ib.let("y0", box[r, 1] * c(spatial_scale) - offset)
            x0 = ib.let("x0", box[r, 0] * c(spatial_scale) - offset)
            rh = box[r, 3] * c(spatial_scale) - offset - y0
            rw = box[r, 2] * c(spatial_scale) - offset - x0
            if not half_pixel:
                rh, rw = tir.max(rh, c(1.0)), tir.max(rw, c(1.0))
            bin_h, bin_w = ib.let("bin_h", rh / c(oh)), ib.let("bin_w", rw / c(ow))
            if sampling_ratio > 0:
                gh = gw = E.const(int(sampling_ratio), "int32")
            else:
                gh = ib.let("gh", tir.ceil(rh / c(oh)).astype("int32"))
                gw = ib.let("gw", tir.ceil(rw / c(ow)).astype("int32"))
            count = ib.let("count", tir.max(gh * gw, E.const(1, "int32")).astype(dtype))
            with ib.for_range(0, C, name="ch") as ch:
                with ib.for_range(0, oh, name="ph") as ph:
                    with ib.for_range(0, ow, name="pw") as pw:
                        acc[0] = c(0.0) if mode == "avg" else tir.min_value(dtype)
                        with ib.for_range(0, gh, name="iy") as iy:
                            yy = ib.let("yy", y0 + ph.astype(dtype) * bin_h
                                        + (iy.astype(dtype) + c(0.5)) * bin_h / gh.astype(dtype))
                            with ib.for_range(0, gw, name="ix") as ix:
                                xx = ib.let("xx", x0 + pw.astype(dtype) * bin_w
                                            + (ix.astype(dtype) + c(0.5)) * bin_w / gw.astype(dtype))
                                _sample(ib, x, acc, b, ch, yy, xx, H, W, mode, c)
                        out[r, ch, ph, pw] = acc[0] / count if mode == "avg" else acc[0]
        return ib.get()

    return te.extern((R, C, oh, ow), [data, rois, batch_indices], body, name="roi_align", dtype=dtype,
                     tag="roi_align")


def _sample(ib, x, acc, b, ch, yy, xx, H: int, W: int, mode: str, c) -> None:
    """Add (avg) or fold in (max) the bilinear sample at (yy, xx)."""
    outside = tir.any(yy < c(-1.0), yy > c(float(H)), xx < c(-1.0), xx > c(float(W)))
    with ib.if_scope(outside):
        if mode == "max":  # four zero-weighted corners
            acc[0] = tir.max(acc[0], c(0.0))
    with ib.else_scope():
        y = ib.let("y", tir.max(yy, c(0.0)))
        xv = ib.let("xv", tir.max(xx, c(0.0)))
        ylo0, xlo0 = y.astype("int32"), xv.astype("int32")
        y_edge, x_edge = ylo0 >= H - 1, xlo0 >= W - 1
        ylo = ib.let("ylo", tir.if_then_else(y_edge, E.const(H - 1, "int32"), ylo0))
        xlo = ib.let("xlo", tir.if_then_else(x_edge, E.const(W - 1, "int32"), xlo0))
        yhi = ib.let("yhi", tir.if_then_else(y_edge, E.const(H - 1, "int32"), ylo0 + 1))
        xhi = ib.let("xhi", tir.if_then_else(x_edge, E.const(W - 1, "int32"), xlo0 + 1))
        ly = ib.let("ly", tir.if_then_else(y_edge, c(0.0), y - ylo.astype(y.dtype)))
        lx = ib.let("lx", tir.if_then_else(x_edge, c(0.0), xv - xlo.astype(xv.dtype)))
        hy, hx = c(1.0) - ly, c(1.0) - lx
        terms = [hy * hx * x[b, ch, ylo, xlo], hy * lx * x[b, ch, ylo, xhi],
                 ly * hx * x[b, ch, yhi, xlo], ly * lx * x[b, ch, yhi, xhi]]
        if mode == "avg":
            acc[0] = acc[0] + terms[0] + terms[1] + terms[2] + terms[3]
        else:
            acc[0] = tir.max(acc[0], tir.max(tir.max(terms[0], terms[1]), tir.max(terms[2], terms[3])))
