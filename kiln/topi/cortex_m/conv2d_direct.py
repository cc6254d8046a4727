"""int8 NCHW depthwise convolutions on Cortex-M cores, with the fused epilogue (requantize,
clamp) inlined into the output's store; and the Cortex-M injective schedule (the pads).

- ``depthwise_int8``: channel-major loops (``c, y, x``), the KHxKW window summed in a register
  (unrolled) and a row of outputs unrolled (up to 8), so the C compiler keeps a channel's
  weights in registers and reuses the window's loads along the row. In NCHW the window's taps
  are not a dot product along a contiguous axis (adjacent bytes are adjacent pixels), so this
  is plain multiply-accumulates on any core; with ``tier="dsp"`` each output row is one
  ``dw_row_intrin`` (SMLABB/SMLABT per tap), and on MVE cores (stride 1) one
  ``dw_row_mve_intrin``, vectorized over the adjacent output pixels instead of the taps.

(KxK convs with groups 1 are im2col + the 1x1 conv's dot product: kiln/topi/cortex_m/conv2d_int8.py.)
Chosen by kiln/relay/backend/op_impl.py through ``conv_kind`` (kiln/topi/cortex_m/conv2d_int8.py).
"""

from __future__ import annotations

from kiln import te

from ..nn.pad import pad as _pad

DW_TAG = "cortex_m_depthwise_int8"


def _padded(data, padding):
    pt, pl, pb, pr = (int(p) for p in padding)
    if not (pt or pl or pb or pr):
        return data
    return _pad(data, (0, 0, pt, pl), (0, 0, pb, pr), name="data_pad")


def _out_hw(data, kh, kw, strides, padding):
    h, w = int(data.shape[2]), int(data.shape[3])
    pt, pl, pb, pr = (int(p) for p in padding)
    return (h + pt + pb - kh) // int(strides[0]) + 1, (w + pl + pr - kw) // int(strides[1]) + 1


def prepack_depthwise(w):
    """The (C, 1, KH, KW) int8 kernel as (C, KH*KW rounded up to even) int16 rows: tap ``t`` of a
    channel is half ``t % 2`` of its word ``t // 2`` (``dw_row_intrin``)."""
    import numpy as np
    w = np.asarray(w)
    c, taps = w.shape[0], w.shape[2] * w.shape[3]
    out = np.zeros((c, taps + taps % 2), "int16")
    out[:, :taps] = w.reshape(c, taps)
    return out


def mve_default(strides) -> bool:
    """Whether relay's build (no tuning log) computes a depthwise conv with ``dw_row_mve_intrin``:
    on an MVE core (the current target's ``-mcpu``), stride 1 along the row."""
    from kiln.target import Target

    from .intrin import isa_tier
    return isa_tier(Target.current(allow_none=True)) == "mve" and int(strides[1]) == 1


def depthwise_int8(data, kernel, strides, padding, unroll: bool = True, tier: str | None = None,
                   kernel_hw=None, mve: bool | None = None):
    """int32 depthwise conv of int8 NCHW ``data`` and the (C, 1, KH, KW) int8 ``kernel``; with
    ``tier="dsp"`` the kernel may be ``prepack_depthwise``'s (C, T) int16 pairs (``kernel_hw``
    then gives KH, KW), and each output row is ``dw_row_intrin`` (SMLABB/SMLABT per tap), or
    with ``mve`` (stride 1; None: ``mve_default``) ``dw_row_mve_intrin`` (4 output pixels a
    vector, VLDRB.S32 + VMLA.S32 per tap; the same int16 taps)."""
    n, c = int(data.shape[0]), int(data.shape[1])
    kh, kw = (int(d) for d in (kernel_hw if len(kernel.shape) == 2 else kernel.shape[2:]))
    oh, ow = _out_hw(data, kh, kw, strides, padding)
    sh, sw = int(strides[0]), int(strides[1])
    src = _padded(data, padding)
    ry, rx = te.reduce_axis((0, kh), name="ry"), te.reduce_axis((0, kw), name="rx")
    if tier == "dsp":
        if mve is None:
            mve = mve_default(strides)
        if mve and sw != 1:
            raise ValueError(f"cortex-m depthwise: the MVE row kernel takes stride 1 along the row, not {sw}; "
                             "use the DSP row kernel (mve=False)")
        taps = kh * kw
        k16 = kernel if len(kernel.shape) == 2 else te.compute(
            (c, taps + taps % 2), lambda ch, t: te.if_then_else(
                t < taps, kernel[ch, 0, t // kw % kh, t % kw].astype("int16"), te.const(0, "int16")), name="kernel_dw")
        acc = te.compute((n, c, oh, ow), lambda b, ch, y, x: te.sum(
            src[b, ch, y * sh + ry, x * sw + rx].astype("int32") * k16[ch, ry * kw + rx].astype("int32"),
            axis=[ry, rx]), name="dw_acc", tag=DW_TAG,
            attrs={"unroll": int(bool(unroll)), "tier": "mve" if mve else "dsp", "kh": kh, "kw": kw, "sw": sw})
        return _result(acc)
    acc = te.compute((n, c, oh, ow), lambda b, ch, y, x: te.sum(
        src[b, ch, y * sh + ry, x * sw + rx].astype("int32") * kernel[ch, 0, ry, rx].astype("int32"), axis=[ry, rx]),
        name="dw_acc", tag=DW_TAG, attrs={"unroll": int(bool(unroll))})
    return _result(acc)


def _result(acc):
    """The conv's result as a stage after the sums, into which a fused epilogue inlines (the sums
    stay in registers at the output's loop)."""
    return te.compute(acc.shape, lambda *i: acc(*i), name="conv2d_nchw", tag="injective")


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
    if acc.op.attrs.get("tier") in ("dsp", "mve"):
        return _schedule_dw_dsp(s, outs, acc)
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


def _schedule_dw_dsp(s, outs, acc):
    """Each output row (one channel, one y) by ``dw_row_intrin``, its sums in registers, the fused
    epilogue inlined into the row's unrolled stores; the kernel's pairs and a padded input (when
    the conv pads) stay buffers the intrinsic reads."""
    from .intrin import dw_row_intrin, dw_row_mve_intrin
    keep = [acc.op] + [t.op for t in acc.op.input_tensors if t.op.name in ("kernel_dw", "data_pad")]
    _inline_rest(s, outs, keep)
    out = outs[0]
    y, x = s[out].op.axis[2:4]
    s[acc].set_scope("local")
    s[acc].compute_at(s[out], y)
    unroll = bool(int(acc.op.attrs.get("unroll", 0)))
    ow = int(x.dom.extent.value)
    kh, kw = int(acc.op.attrs["kh"]), int(acc.op.attrs["kw"])
    if acc.op.attrs.get("tier") == "mve":  # 4 output pixels a vector (stride 1)
        s[acc].tensorize(s[acc].op.axis[3], dw_row_mve_intrin(ow, kh, kw, "int16"))
    else:
        s[acc].tensorize(s[acc].op.axis[3], dw_row_intrin(ow, kh, kw, int(acc.op.attrs["sw"]), unroll))
    if unroll and ow <= 8:
        s[out].unroll(x)
    return s


def schedule_injective(outs):
    """Elementwise and data-movement ops (the pads between DS-CNN's layers) on a Cortex-M core:
    everything inlined into the output, whose innermost axis is unrolled when short (<= 16), so
    the C compiler folds the per-column conditions of a pad (its border) and the indexing."""
    outs = [outs] if isinstance(outs, te.Tensor) else list(outs)
    s = te.create_schedule([t.op for t in outs])
    _inline_rest(s, outs, [])
    for out in outs:
        axes = s[out].op.axis
        extent = getattr(axes[-1].dom.extent, "value", None) if axes else None
        if isinstance(extent, int) and extent <= 16:
            s[out].unroll(axes[-1])
    return s


__all__ = ["DW_TAG", "depthwise_int8", "prepack_depthwise", "schedule_depthwise_int8", "schedule_injective"]
