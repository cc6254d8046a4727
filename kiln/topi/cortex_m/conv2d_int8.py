"""int8 1x1 conv2d (NCHW data, the constant kernel pre-shaped to (O, C)) on Cortex-M cores as the
tensorized dense of kiln/topi/cortex_m/dense_int8.py: the data is transposed once to pixels x
channels (the reduction contiguous in both operands), ``acc[p, o] = sum_c x[p, c] w[o, c]`` with
the DSP/MVE dot intrinsic, then the NCHW result, into which a fused epilogue (requantize) inlines.

Chosen by kiln/relay/backend/op_impl.py for int8 x int8 convs with a 1x1 kernel, stride 1, no
padding, groups 1 on a target whose ``-mcpu`` has a tier (``applies``).
"""

from __future__ import annotations

from kiln import te

from .intrin import WIDTH, dot16_intrin, dot_intrin, isa_tier

TAG = "cortex_m_conv2d_1x1_int8"
IM2COL_MAX_K = 1024  # the longest im2col row (C * KH * KW) the kernel copies per pixel


def applies(target, data_dtype, kernel_dtype, kernel_shape, strides, padding, dilation, groups) -> str | None:
    """The tier when the 1x1 kernel applies, else None."""
    tier = isa_tier(target)
    if tier is None or (str(data_dtype), str(kernel_dtype)) != ("int8", "int8") or groups != 1:
        return None
    o, c, kh, kw = (int(d) for d in kernel_shape)
    if (kh, kw) != (1, 1) or tuple(strides) != (1, 1) or any(padding) or tuple(dilation) != (1, 1):
        return None
    return tier if c % WIDTH[tier] == 0 else None


def conv_kind(target, data_dtype, kernel_dtype, kernel_shape, in_channels, strides, padding, dilation,
              groups) -> tuple | None:
    """For an int8 NCHW/OIHW conv on a Cortex-M core other than the 1x1 of ``applies``:
    ``("depthwise", None)`` (groups = channels, one filter per channel), ``("im2col", tier)``
    (groups 1, a KHxKW kernel: windows copied to rows, then the 1x1 conv's dot product) or None
    (topi's generic schedule)."""
    tier = isa_tier(target)
    if tier is None or (str(data_dtype), str(kernel_dtype)) != ("int8", "int8") or tuple(dilation) != (1, 1):
        return None
    o, c, kh, kw = (int(d) for d in kernel_shape)
    if groups > 1 and groups == in_channels == o and c == 1:
        # the DSP's SMLABB row intrinsic (its int16 tap prepack), or on MVE cores with stride 1 the
        # MVE row intrinsic over 4 output pixels (conv2d_direct.mve_default; the same prepack)
        return ("depthwise", "dsp")
    if groups == 1 and (kh, kw) != (1, 1) and c * kh * kw <= IM2COL_MAX_K:
        return ("im2col", tier)
    return None


def compute_other(kind, data, kernel, strides, padding, kernel_hw, rows: int = 2, cols: int = 2,
                  unroll: bool = True):
    """The int32 result of ``conv_kind``'s kernel: the depthwise conv (OIHW kernel,
    kiln/topi/cortex_m/conv2d_direct.py) or the im2col conv (kernel pre-shaped by ``prepack_im2col``)."""
    from .conv2d_direct import depthwise_int8
    if kind[0] == "depthwise":
        return depthwise_int8(data, kernel, strides, padding, unroll, kind[1], kernel_hw)
    return im2col_int8(data, kernel, strides, padding, kernel_hw, kind[1], rows, cols, unroll)


def schedule_any(outs):
    """The schedule of whichever Cortex-M int8 conv ``outs`` computes, or None."""
    from .conv2d_direct import DW_TAG, schedule_depthwise_int8
    first = outs[0] if isinstance(outs, (list, tuple)) else outs
    if _find(first) is not None:
        return schedule_conv2d_1x1_int8(outs)
    acc = _find(first, DW_TAG)
    return schedule_depthwise_int8(outs, acc) if acc is not None else None


def operand_dtype(tier: str) -> str:
    """The dtype the dot product reads its operands in: int16 for the DSP (weights widened at
    build time, data in the pixel copy: ``dot16_intrin``), int8 for MVE."""
    return "int16" if tier == "dsp" else "int8"


def conv2d_1x1_int8(data, kernel2d, tier: str, rows: int = 4, cols: int = 1, unroll: bool = False):
    """int32 NCHW result of int8 NCHW ``data`` and the (O, C) ``kernel2d`` (int8, or int16 for the
    DSP: ``prepack``); the sums are computed in tiles of ``cols`` pixels x ``rows`` channels (the
    pixels x channels copy of the data has ``cols - 1`` extra zero rows, so the last tile of an odd
    pixel count stays whole)."""
    n, c, h, w = (int(d) for d in data.shape)
    total = n * h * w
    od = operand_dtype(tier)
    pixels = te.compute((total + cols - 1, c), lambda p, k: te.if_then_else(
        p < total, data[p // (h * w) % n, k, p // w % h, p % w].astype(od), te.const(0, od)) if cols > 1 else
        data[p // (h * w), k, p // w % h, p % w].astype(od), name="data_pc")
    return _gemm(pixels, kernel2d, (n, h, w), tier, rows, cols, unroll)


def im2col_k(c: int, kh: int, kw: int, tier: str) -> int:
    """The length of an im2col row: C * KH * KW zero-padded to the tier's width."""
    k = c * kh * kw
    return -(-k // WIDTH[tier]) * WIDTH[tier]


def prepack_im2col(w, tier: str):
    """The OIHW kernel as (O, C*KH*KW) rows zero-padded to ``im2col_k``, in ``operand_dtype``."""
    import numpy as np
    w = np.asarray(w)
    o, c, kh, kw = w.shape
    out = np.zeros((o, im2col_k(c, kh, kw, tier)), operand_dtype(tier))
    out[:, :c * kh * kw] = w.reshape(o, -1)
    return out


def prepack_1x1(w, tier: str):
    """The OIHW 1x1 kernel as (O, C) rows in ``operand_dtype``."""
    import numpy as np
    w = np.asarray(w)
    return np.ascontiguousarray(w.reshape(w.shape[:2]).astype(operand_dtype(tier)))


def im2col_int8(data, kernel2d, strides, padding, kernel_hw, tier: str, rows: int = 2, cols: int = 2,
                unroll: bool = True):
    """int32 conv (groups 1, any KHxKW) of int8 NCHW ``data`` and the (O, K) int8 ``kernel2d``
    (``prepack_im2col``): each output pixel's window copied once to a row of K bytes (zero
    padding included; the tail past C*KH*KW zero), then the 1x1 conv's tiles of the DSP/MVE dot
    product over the rows (DS-CNN's 10x4 stem: 40 taps a pixel)."""
    from ..nn.pad import pad as _pad
    n, c, h, w = (int(d) for d in data.shape)
    kh, kw = (int(d) for d in kernel_hw)
    pt, pl, pb, pr = (int(p) for p in padding)
    sh, sw = (int(d) for d in strides)
    oh, ow = (h + pt + pb - kh) // sh + 1, (w + pl + pr - kw) // sw + 1
    src = data if not (pt or pl or pb or pr) else _pad(data, (0, 0, pt, pl), (0, 0, pb, pr), name="data_pad")
    k_real, k_all = c * kh * kw, int(kernel2d.shape[1])
    total = n * oh * ow

    def window(p, k):
        b, y, x = p // (oh * ow) % n, p // ow % oh, p % ow
        ci, ry, rx = k // (kh * kw) % c, k // kw % kh, k % kw
        return src[b, ci, y * sh + ry, x * sw + rx]

    od = operand_dtype(tier)
    pixels = te.compute((total + cols - 1, k_all), lambda p, k: te.if_then_else(
        te.all(p < total, k < k_real), window(p, k).astype(od), te.const(0, od)), name="data_pc")
    return _gemm(pixels, kernel2d, (n, oh, ow), tier, rows, cols, unroll)


def _gemm(pixels, kernel2d, nhw, tier, rows, cols, unroll):
    n, h, w = nhw
    o, c = (int(d) for d in kernel2d.shape)
    if kernel2d.dtype != pixels.dtype:  # a kernel not pre-widened (no params at build): widened per call
        k8 = kernel2d
        kernel2d = te.compute(k8.shape, lambda j, k: k8[j, k].astype(pixels.dtype), name="kernel_oc")
    r = te.reduce_axis((0, c), name="rc")
    acc = te.compute(tuple(int(d) for d in pixels.shape[:1]) + (o,), lambda p, j: te.sum(
        pixels[p, r].astype("int32") * kernel2d[j, r].astype("int32"), axis=r), name="acc", tag=TAG,
        attrs={"tier": tier, "rows": max(x for x in (1, 2, 4, 8) if x <= rows and o % x == 0),
               "cols": cols, "unroll": int(bool(unroll))})
    return te.compute((n, o, h, w), lambda b, j, y, x: acc[(b * h + y) * w + x, j], name="conv2d_nchw",
                      tag="injective")


def schedule_conv2d_1x1_int8(outs):
    """The fused group of ``conv2d_1x1_int8``: elementwise stages after it inline into the output."""
    outs = [outs] if isinstance(outs, te.Tensor) else list(outs)
    s = te.create_schedule([t.op for t in outs])
    acc = _find(outs[0])
    for stage in list(s.stages):
        op = stage.op
        if op in [t.op for t in outs] or op is acc.op or not isinstance(op, te.ComputeOp) or op.reduce_axis:
            continue
        if op.name in ("data_pc", "kernel_oc"):  # buffers the intrinsic reads (kernel_oc: the tuning template's)
            continue
        stage.compute_inline()
    tier, rows = acc.op.attrs["tier"], int(acc.op.attrs["rows"])
    cols = int(acc.op.attrs.get("cols", 1))
    if int(acc.op.attrs.get("unroll", 0)):
        _unroll_copy(s, acc)
    # the sums of `cols` pixels x `rows` channels at a time, in registers, stored through the epilogue
    out = outs[0]
    b, j, y, x = s[out].op.axis
    jo, ji = s[out].split(j, factor=rows)
    if cols > 1:
        pix = s[out].fuse(y, x)
        po, pi = s[out].split(pix, factor=cols)
        s[out].reorder(b, po, jo, pi, ji)
        s[out].unroll(pi)
    else:
        s[out].reorder(b, y, x, jo, ji)
    s[out].unroll(ji)
    s[acc].set_scope("local")
    s[acc].compute_at(s[out], jo)
    p, lj = s[acc].op.axis
    (r,) = s[acc].op.reduce_axis
    ljo, lji = s[acc].split(lj, factor=rows)
    if operand_dtype(tier) == "int16":  # the whole reduction of the tile in one intrinsic (LDRD + SMLAD)
        s[acc].reorder(ljo, p, lji, r)
        s[acc].tensorize(p, dot16_intrin(rows, cols, int(r.dom.extent.value), bool(int(acc.op.attrs.get("unroll", 0)))))
        return s
    ro, ri = s[acc].split(r, factor=WIDTH[tier])
    if cols > 1:
        s[acc].reorder(ljo, ro, p, lji, ri)
        s[acc].tensorize(p, dot_intrin(tier, rows, cols))
        if int(acc.op.attrs.get("unroll", 0)):  # straight-line sums: no loop counter, immediate offsets
            s[acc].unroll(ro)
    else:
        s[acc].reorder(p, ljo, ro, lji, ri)
        s[acc].tensorize(lji, dot_intrin(tier, rows))
    return s


def _unroll_copy(s, acc):
    """The pixel copy (``data_pc``: NCHW -> pixels x channels, or im2col windows) with its row
    unrolled (up to 64; else by 16): constant offsets for the strided loads, the window's index
    arithmetic folded (im2col), no loop counter per element."""
    for t in acc.op.input_tensors:
        if t.op.name != "data_pc":
            continue
        k = s[t].op.axis[-1]
        if int(k.dom.extent.value) <= 64:
            s[t].unroll(k)
        elif int(k.dom.extent.value) % 16 == 0:
            s[t].unroll(s[t].split(k, factor=16)[1])


def _find(t, tag=TAG):
    if t.op.tag == tag:
        return t
    for u in getattr(t.op, "input_tensors", []):
        found = _find(u, tag)
        if found is not None:
            return found
    return None


__all__ = ["TAG", "applies", "conv_kind", "compute_other", "schedule_any", "im2col_int8", "prepack_im2col",
           "prepack_1x1", "operand_dtype", "im2col_k", "conv2d_1x1_int8", "schedule_conv2d_1x1_int8"]
