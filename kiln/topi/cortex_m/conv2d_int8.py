"""int8 1x1 conv2d (NCHW data, the constant kernel pre-shaped to (O, C)) on Cortex-M cores as the
tensorized dense of kiln/topi/cortex_m/dense_int8.py: the data is transposed once to pixels x
channels (the reduction contiguous in both operands), ``acc[p, o] = sum_c x[p, c] w[o, c]`` with
the DSP/MVE dot intrinsic, then the NCHW result, into which a fused epilogue (requantize) inlines.

Chosen by kiln/relay/backend/op_impl.py for int8 x int8 convs with a 1x1 kernel, stride 1, no
padding, groups 1 on a target whose ``-mcpu`` has a tier (``applies``).
"""

from __future__ import annotations

from kiln import te

from .intrin import WIDTH, dot_intrin, isa_tier

TAG = "cortex_m_conv2d_1x1_int8"


def applies(target, data_dtype, kernel_dtype, kernel_shape, strides, padding, dilation, groups) -> str | None:
    """The tier when the 1x1 kernel applies, else None."""
    tier = isa_tier(target)
    if tier is None or (str(data_dtype), str(kernel_dtype)) != ("int8", "int8") or groups != 1:
        return None
    o, c, kh, kw = (int(d) for d in kernel_shape)
    if (kh, kw) != (1, 1) or tuple(strides) != (1, 1) or any(padding) or tuple(dilation) != (1, 1):
        return None
    return tier if c % WIDTH[tier] == 0 else None


def conv2d_1x1_int8(data, kernel2d, tier: str, rows: int = 4):
    """int32 NCHW result of int8 NCHW ``data`` and the (O, C) int8 ``kernel2d``."""
    n, c, h, w = (int(d) for d in data.shape)
    o = int(kernel2d.shape[0])
    pixels = te.compute((n * h * w, c), lambda p, k: data[p // (h * w), k, p // w % h, p % w], name="data_pc")
    r = te.reduce_axis((0, c), name="rc")
    acc = te.compute((n * h * w, o), lambda p, j: te.sum(pixels[p, r].astype("int32") * kernel2d[j, r].astype("int32"),
                                                          axis=r), name="acc", tag=TAG,
                     attrs={"tier": tier, "rows": max(x for x in (1, 2, 4, 8) if x <= rows and o % x == 0)})
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
        if op.name == "data_pc":
            continue
        stage.compute_inline()
    tier, rows = acc.op.attrs["tier"], int(acc.op.attrs["rows"])
    # the sums of one pixel x `rows` channels at a time, in registers, stored through the epilogue
    out = outs[0]
    b, j, y, x = s[out].op.axis
    jo, ji = s[out].split(j, factor=rows)
    s[out].reorder(b, y, x, jo, ji)
    s[out].unroll(ji)
    s[acc].set_scope("local")
    s[acc].compute_at(s[out], jo)
    p, lj = s[acc].op.axis
    (r,) = s[acc].op.reduce_axis
    ro, ri = s[acc].split(r, factor=WIDTH[tier])
    ljo, lji = s[acc].split(lj, factor=rows)
    s[acc].reorder(p, ljo, ro, lji, ri)
    s[acc].tensorize(lji, dot_intrin(tier, rows))
    return s


def _find(t):
    if t.op.tag == TAG:
        return t
    for u in getattr(t.op, "input_tensors", []):
        found = _find(u)
        if found is not None:
            return found
    return None


__all__ = ["TAG", "applies", "conv2d_1x1_int8", "schedule_conv2d_1x1_int8"]
