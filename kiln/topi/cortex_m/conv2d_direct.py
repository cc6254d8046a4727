"""int8 NCHW depthwise and direct (groups 1, KxK) convolutions on Cortex-M cores, with the fused
epilogue (requantize, clamp) inlined into the output's store.

- ``depthwise_int8``: channel-major loops (``c, y, x``), the KHxKW window summed in a register
  (unrolled), so the C compiler keeps a channel's weights in registers across its plane. In
  NCHW the window's taps are not a dot product along a contiguous axis (adjacent bytes are
  adjacent pixels), so this is plain multiply-accumulates: 2 instructions per MAC on any core.
- ``direct_int8``: a conv whose kernel rows are a multiple of the DSP width (4 bytes: the
  DS-CNN stem's 10x4 kernel on one channel): ``acc[o] += sum_k x[y*sh+ry, x*sw+rx+k] w[o, ci, ry, rx+k]``
  is the dot intrinsic of intrin.py (``rows`` output channels per data word) tensorized over
  (output channels, 4 taps of a kernel row); the M55 also has the DSP extension, so it takes
  ``__smlad`` here too (its MVE width, 16, exceeds such rows).

Chosen by kiln/relay/backend/op_impl.py through ``conv_kind`` (kiln/topi/cortex_m/conv2d_int8.py).
"""

from __future__ import annotations

from kiln import te

from ..nn.pad import pad as _pad
from .intrin import WIDTH, dot_intrin

DW_TAG = "cortex_m_depthwise_int8"
DIRECT_TAG = "cortex_m_conv2d_direct_int8"


def _padded(data, padding):
    pt, pl, pb, pr = (int(p) for p in padding)
    if not (pt or pl or pb or pr):
        return data
    return _pad(data, (0, 0, pt, pl), (0, 0, pb, pr), name="data_pad")


def _out_hw(data, kh, kw, strides, padding):
    h, w = int(data.shape[2]), int(data.shape[3])
    pt, pl, pb, pr = (int(p) for p in padding)
    return (h + pt + pb - kh) // int(strides[0]) + 1, (w + pl + pr - kw) // int(strides[1]) + 1


def depthwise_int8(data, kernel, strides, padding, unroll: bool = True):
    """int32 depthwise conv of int8 NCHW ``data`` and the (C, 1, KH, KW) int8 ``kernel``."""
    n, c = int(data.shape[0]), int(data.shape[1])
    kh, kw = int(kernel.shape[2]), int(kernel.shape[3])
    oh, ow = _out_hw(data, kh, kw, strides, padding)
    sh, sw = int(strides[0]), int(strides[1])
    src = _padded(data, padding)
    ry, rx = te.reduce_axis((0, kh), name="ry"), te.reduce_axis((0, kw), name="rx")
    acc = te.compute((n, c, oh, ow), lambda b, ch, y, x: te.sum(
        src[b, ch, y * sh + ry, x * sw + rx].astype("int32") * kernel[ch, 0, ry, rx].astype("int32"), axis=[ry, rx]),
        name="dw_acc", tag=DW_TAG, attrs={"unroll": int(bool(unroll))})
    return _result(acc)


def _result(acc):
    """The conv's result as a stage after the sums, into which a fused epilogue inlines (the sums
    stay in registers at the output's loop)."""
    return te.compute(acc.shape, lambda *i: acc(*i), name="conv2d_nchw", tag="injective")


def prepack_direct(w):
    """The OIHW kernel as (I, KH, O, KW): a kernel row of ``rows`` output channels is the
    intrinsic's (rows, width) operand with the row stride KW."""
    import numpy as np
    return np.ascontiguousarray(np.asarray(w).transpose(1, 2, 0, 3))


def direct_int8(data, kernel_ihow, strides, padding, tier: str, rows: int = 4, unroll: bool = True):
    """int32 conv (groups 1) of int8 NCHW ``data`` and the int8 kernel pre-shaped (I, KH, O, KW)
    (``prepack_direct``; KW a multiple of the tier's width); ``rows`` output channels share each
    data word. The sums are laid out (N, OH, OW, O) so that the tile of one pixel x ``rows``
    channels is the intrinsic's trailing axis."""
    n = int(data.shape[0])
    ci, kh, o, kw = (int(d) for d in kernel_ihow.shape)
    oh, ow = _out_hw(data, kh, kw, strides, padding)
    sh, sw = int(strides[0]), int(strides[1])
    src = _padded(data, padding)
    rc = te.reduce_axis((0, ci), name="rc")
    ry, rx = te.reduce_axis((0, kh), name="ry"), te.reduce_axis((0, kw), name="rx")
    rows = max(r for r in (1, 2, 4, 8) if r <= rows and o % r == 0)
    acc = te.compute((n, oh, ow, o), lambda b, y, x, j: te.sum(
        src[b, rc, y * sh + ry, x * sw + rx].astype("int32") * kernel_ihow[rc, ry, j, rx].astype("int32"),
        axis=[rc, ry, rx]), name="direct_acc", tag=DIRECT_TAG,
        attrs={"tier": tier, "rows": rows, "unroll": int(bool(unroll) and kh <= 16)})
    return te.compute((n, o, oh, ow), lambda b, j, y, x: acc[b, y, x, j], name="conv2d_nchw", tag="injective")


def _inline_rest(s, outs, keep):
    """Inline every elementwise stage except the outputs, ``keep`` and the pad of a tensorized conv."""
    for stage in list(s.stages):
        op = stage.op
        if op in [t.op for t in outs] or op in keep or not isinstance(op, te.ComputeOp) or op.reduce_axis:
            continue
        stage.compute_inline()


def schedule_depthwise_int8(outs, acc):
    outs = [outs] if isinstance(outs, te.Tensor) else list(outs)
    s = te.create_schedule([t.op for t in outs])
    _inline_rest(s, outs, [acc.op])
    out = outs[0]
    x = s[out].op.axis[3]
    s[acc].set_scope("local")
    s[acc].compute_at(s[out], x)
    ry, rx = s[acc].op.reduce_axis
    s[acc].unroll(ry)
    s[acc].unroll(rx)
    if int(acc.op.attrs.get("unroll", 0)) and int(x.dom.extent.value) <= 8:
        s[out].unroll(x)  # a row of outputs in straight code: the C compiler reuses the window's loads
    return s


def schedule_direct_int8(outs, acc):
    outs = [outs] if isinstance(outs, te.Tensor) else list(outs)
    s = te.create_schedule([t.op for t in outs])
    # the pad and a reshaped kernel (the tuning template's) are real buffers the intrinsic reads
    keep = [acc.op] + [t.op for t in acc.op.input_tensors if isinstance(t.op, te.ComputeOp)]
    _inline_rest(s, outs, keep)
    tier, rows = acc.op.attrs["tier"], int(acc.op.attrs["rows"])
    b, j, y, x = s[outs[0]].op.axis
    jo, ji = s[outs[0]].split(j, factor=rows)
    s[outs[0]].reorder(b, y, x, jo, ji)
    s[outs[0]].unroll(ji)
    s[acc].set_scope("local")
    s[acc].compute_at(s[outs[0]], jo)
    ab, ay, ax, aj = s[acc].op.axis
    rc, ry, rx = s[acc].op.reduce_axis
    rxo, rxi = s[acc].split(rx, factor=WIDTH[tier])
    s[acc].reorder(ab, ay, ax, rc, ry, rxo, aj, rxi)
    s[acc].tensorize(aj, dot_intrin(tier, rows))
    if int(acc.op.attrs.get("unroll", 0)):  # the kernel rows unrolled: immediate offsets, no counter
        s[acc].unroll(ry)
    return s


__all__ = ["DW_TAG", "DIRECT_TAG", "depthwise_int8", "direct_int8", "schedule_depthwise_int8",
           "schedule_direct_int8", "prepack_direct"]


def schedule_injective(outs):
    """Elementwise and data-movement ops (the pads between DS-CNN's layers) on a Cortex-M core:
    everything inlined into the output, whose innermost axis is unrolled when short (<= 16), so
    the C compiler folds the per-column conditions of a pad (its border) and the indexing."""
    outs = [outs] if isinstance(outs, te.Tensor) else list(outs)
    s = te.create_schedule([t.op for t in outs])
    _inline_rest(s, outs, [])
    for out in outs:
        axes = s[out].op.axis
        if axes and isinstance(axes[-1].dom.extent.value if hasattr(axes[-1].dom.extent, "value") else None, int) \
                and axes[-1].dom.extent.value <= 16:
            s[out].unroll(axes[-1])
    return s
