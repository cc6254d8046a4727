"""Pooling: pool2d (max/avg with padding, dilation, ceil_mode), global_pool, adaptive_pool."""

from __future__ import annotations

from kiln import te, tir
from kiln.errors import ShapeError
from kiln.ir.expr import const

from ..utils import as_pair, check_ndim, const_shape
from .pad import pad


# max as a Select: one vmaxps per tap, where te.max's NaN-propagating maximum is several
# instructions. (A NaN in the window may be dropped, as in most CPU pooling kernels.)
select_max = te.comm_reducer(lambda a, b: tir.Select(a < b, b, a, a.dtype), lambda t: tir.min_value(t), name="max")


def _hw_axes(layout: str, op: str) -> tuple[int, int]:
    """Positions of the primal H and W axes. Any layout whose H and W are unsplit works (NCHW,
    NHWC, NCHW16c, ...); the other axes, blocked or not, are carried through untouched."""
    if layout == "NCHW":
        return 2, 3
    if layout == "NHWC":
        return 1, 2
    from ..layout import parse_layout

    axes = parse_layout(layout)
    if any(f and a in "HW" for a, f in axes) or ("H", 0) not in axes or ("W", 0) not in axes:
        raise ShapeError(f"{op}: layout {layout!r} must have unsplit H and W axes (e.g. 'NCHW', 'NHWC', 'NCHW16c')")
    return axes.index(("H", 0)), axes.index(("W", 0))


def _check_layout(op: str, data, layout: str) -> tuple[int, int]:
    from ..layout import parse_layout

    ndim = 4 if layout in ("NCHW", "NHWC") else len(parse_layout(layout))
    check_ndim(op, "data", data, ndim, layout)
    return _hw_axes(layout, op)


def _out_size(size, pa, pb, ek, s, ceil_mode):
    span = size + pa + pb - ek
    if span < 0:
        raise ShapeError(f"pool2d: window {ek} is larger than the padded input {size + pa + pb}")
    if not ceil_mode:
        return span // s + 1
    o = -(-span // s) + 1
    if (o - 1) * s >= size + pa:  # the last window must start inside the input or left padding
        o -= 1
    return o


def pool2d(data, kernel, stride, dilation=(1, 1), padding=(0, 0, 0, 0), pool_type="max", ceil_mode=False,
           layout="NCHW", count_include_pad=True, split_width_phases=False, clamp_window=False):
    """Max or average pooling over the H and W axes; padding is (top, left, bottom, right).

    ``split_width_phases`` (NCHW, width stride > 1; used by ``topi.x86``) stores the padded input
    as [.., row, x % stride, x // stride] so each tap reads a contiguous run of a row.
    ``clamp_window`` (used by ``topi.x86`` for blocked layouts such as NCHW16c) reads the input
    directly, with no padded copy: each tap loads a clamped (always valid) pixel and selects the
    padding value where the tap lies outside; the condition is the same along the other axes,
    so the loads stay contiguous vectors along the block axis.
    """
    if pool_type not in ("max", "avg"):
        raise ShapeError(f"pool2d: pool_type {pool_type!r} must be 'max' or 'avg'")
    ha, wa = _check_layout("pool2d", data, layout)
    shape = const_shape(data, "pool2d data")
    kh, kw = as_pair(kernel, "pool2d", "kernel")
    sh, sw = as_pair(stride, "pool2d", "stride")
    dh, dw = as_pair(dilation, "pool2d", "dilation")
    pads = list(padding) if len(padding) == 4 else [padding[0], padding[1], padding[0], padding[1]]
    pt, pl, pb, pr = (int(p) for p in pads)
    h, w = shape[ha], shape[wa]
    ekh, ekw = (kh - 1) * dh + 1, (kw - 1) * dw + 1
    oh, ow = _out_size(h, pt, pb, ekh, sh, ceil_mode), _out_size(w, pl, pr, ekw, sw, ceil_mode)
    # ceil_mode windows may run past the bottom/right padding: pad a little more (never counted).
    eb = max(pb, (oh - 1) * sh + ekh - h - pt)
    er = max(pr, (ow - 1) * sw + ekw - w - pl)
    before, after = [0] * len(shape), [0] * len(shape)
    before[ha], before[wa], after[ha], after[wa] = pt, pl, eb, er
    fill = tir.min_value(data.dtype) if pool_type == "max" else const(0, data.dtype)
    padded = pad(data, before, after, pad_value=fill.value if hasattr(fill, "value") else 0, name="pad_temp")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    out_shape = list(shape)
    out_shape[ha], out_shape[wa] = oh, ow

    def window(i):
        src = list(i)
        src[ha] = i[ha] * sh + ry * dh
        src[wa] = i[wa] * sw + rx * dw
        return padded(*src)

    if split_width_phases and layout == "NCHW" and sw > 1:
        wp = w + pl + er

        def fphase(b, c, y, ph, xs):
            x = xs * sw + ph
            if pool_type == "max" and dh == 1 and dw == 1:
                # Max is idempotent: repeating the nearest edge pixel equals padding with -inf
                # when every window that reaches past an edge also holds that edge pixel, and
                # clamped loads need no branch. That holds only for contiguous windows: a dilated
                # window can step over the edge pixel, so dilated pools read the -inf padding.
                return data[b, c, tir.min(tir.max(y - pt, 0), h - 1), tir.min(tir.max(x - pl, 0), w - 1)]
            return padded[b, c, y, tir.min(x, wp - 1)]

        phased = te.compute((shape[0], shape[1], h + pt + eb, sw, -(-wp // sw)), fphase,
                            name="pad_phased", tag="pad,phase_split")

        def window(i):  # noqa: F811 - the phase-split reader replaces the plain one
            tap = rx.var * dw
            return phased(i[0], i[1], i[2] * sh + ry.var * dh, tap % sw, i[3] + tap // sw)

    if clamp_window and not (split_width_phases and layout == "NCHW" and sw > 1):
        def window(i):  # noqa: F811 - the clamped reader replaces the padded one
            y = i[ha] * sh + ry.var * dh - pt
            x = i[wa] * sw + rx.var * dw - pl
            src = list(i)
            src[ha] = tir.min(tir.max(y, 0), h - 1)
            src[wa] = tir.min(tir.max(x, 0), w - 1)
            if pool_type == "max" and dh == 1 and dw == 1:
                return data(*src)  # contiguous windows: the nearest edge pixel stands in for -inf
            inside = tir.all(y >= 0, y < h, x >= 0, x < w)
            return tir.Select(inside, data(*src), fill, data.dtype)

    attrs = {"layout": layout, "pool_type": pool_type}
    if pool_type == "max":
        return te.compute(tuple(out_shape), lambda *i: select_max(window(i), axis=[ry, rx]), name="pool_max",
                          tag="pool_max", attrs=attrs)
    total = te.compute(tuple(out_shape), lambda *i: te.sum(window(i), axis=[ry, rx]), name="pool_sum", tag="pool_sum",
                       attrs=attrs)

    def count(y, x):
        def span(o, s, lo_limit, hi_limit, k, d):
            # Taps of window o that fall in [lo_limit, hi_limit) (coordinates of the unpadded input).
            lo = tir.max(o * s, lo_limit) - o * s
            hi = tir.min(o * s + (k - 1) * d + 1, hi_limit) - o * s
            return tir.max((hi - 1) // d - (lo + d - 1) // d + 1, const(0, "int32"))

        if count_include_pad:
            cy = span(y, sh, 0, h + pt + pb, kh, dh)
            cx = span(x, sw, 0, w + pl + pr, kw, dw)
        else:
            cy = span(y, sh, pt, pt + h, kh, dh)
            cx = span(x, sw, pl, pl + w, kw, dw)
        return tir.max(cy * cx, const(1, "int32"))

    return te.compute(tuple(out_shape), lambda *i: total(*i) / count(i[ha], i[wa]).astype(data.dtype),
                      name="pool_avg", tag="elemwise,pool_avg")


def global_pool(data, pool_type="avg", layout="NCHW"):
    """Max or average over all of H and W, keeping them as size 1 (any layout with unsplit H, W)."""
    ha, wa = _check_layout("global_pool", data, layout)
    ry = te.reduce_axis((0, data.shape[ha]), name="ry")
    rx = te.reduce_axis((0, data.shape[wa]), name="rx")
    out_shape = list(data.shape)
    out_shape[ha] = out_shape[wa] = 1

    def window(i):
        src = list(i)
        src[ha], src[wa] = ry.var, rx.var
        return data(*src)

    if pool_type == "max":
        return te.compute(tuple(out_shape), lambda *i: select_max(window(i), axis=[ry, rx]), name="global_pool_max",
                          tag="global_pool")
    total = te.compute(tuple(out_shape), lambda *i: te.sum(window(i), axis=[ry, rx]), name="global_pool_sum",
                       tag="global_pool")
    inv = const(1.0, data.dtype) / tir.cast(data.shape[ha] * data.shape[wa], data.dtype)
    return te.compute(tuple(out_shape), lambda *i: total(*i) * inv, name="global_pool_avg", tag="elemwise")


def adaptive_pool(data, output_size, pool_type="avg", layout="NCHW"):
    """Pool into a fixed output size; window i covers [floor(i*H/oh), ceil((i+1)*H/oh))."""
    ha, wa = _check_layout("adaptive_pool", data, layout)
    shape = const_shape(data, "adaptive_pool data")
    oh, ow = as_pair(output_size, "adaptive_pool", "output_size")
    h, w = shape[ha], shape[wa]
    if oh == 1 and ow == 1:
        return global_pool(data, pool_type, layout)
    # The largest window bounds the reduction; taps past a smaller window are masked out.
    kh = max(-(-((i + 1) * h) // oh) - (i * h) // oh for i in range(oh))
    kw = max(-(-((j + 1) * w) // ow) - (j * w) // ow for j in range(ow))
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    out_shape = list(shape)
    out_shape[ha], out_shape[wa] = oh, ow

    def bounds(i, size, out):
        return (i * size) // out, ((i + 1) * size + out - 1) // out

    def fcompute(*i):
        y0, y1 = bounds(i[ha], h, oh)
        x0, x1 = bounds(i[wa], w, ow)
        inside = tir.all(y0 + ry < y1, x0 + rx < x1)
        src = list(i)
        src[ha], src[wa] = tir.min(y0 + ry, h - 1), tir.min(x0 + rx, w - 1)
        if pool_type == "max":
            return te.max(tir.if_then_else(inside, data(*src), tir.min_value(data.dtype)), axis=[ry, rx])
        return te.sum(tir.if_then_else(inside, data(*src), const(0, data.dtype)), axis=[ry, rx])

    red = te.compute(tuple(out_shape), fcompute, name="adaptive_pool_red", tag="adaptive_pool")
    if pool_type == "max":
        return red

    def favg(*i):
        y0, y1 = bounds(i[ha], h, oh)
        x0, x1 = bounds(i[wa], w, ow)
        return red(*i) / ((y1 - y0) * (x1 - x0)).astype(data.dtype)

    return te.compute(tuple(out_shape), favg, name="adaptive_pool_avg", tag="elemwise")


def max_pool2d(data, pool_size, strides, padding, layout="NCHW", ceil_mode=False, dilation=(1, 1)):
    return pool2d(data, pool_size, strides, dilation, padding, "max", ceil_mode, layout)


def avg_pool2d(data, pool_size, strides, padding, layout="NCHW", ceil_mode=False, count_include_pad=False,
               dilation=(1, 1)):
    return pool2d(data, pool_size, strides, dilation, padding, "avg", ceil_mode, layout, count_include_pad)
