"""Constant padding: ``topi.nn.pad(data, pad_before, pad_after, pad_value)``."""

from __future__ import annotations

from kiln import te, tir
from kiln.errors import ShapeError
from kiln.ir.expr import const

from kiln.tir.simplify import simplify

from ..utils import const_int


def pad(data, pad_before, pad_after=None, pad_value=0.0, name="PadInput"):
    """data with pad_before[i] / pad_after[i] elements of pad_value around dimension i.

    Example: ``topi.nn.pad(x, (0, 0, 1, 1), (0, 0, 1, 1))`` pads H and W of an NCHW tensor.
    """
    n = len(data.shape)
    pad_after = pad_before if pad_after is None else pad_after
    before = [const_int(p, "pad: pad_before") for p in pad_before]
    after = [const_int(p, "pad: pad_after") for p in pad_after]
    if len(before) != n or len(after) != n:
        raise ShapeError(f"pad: input 'data' has {n} dims but pad_before/pad_after have {len(before)}/{len(after)} entries")
    if any(p < 0 for p in before + after):
        raise ShapeError(f"pad: negative padding {before} / {after}; use strided_slice to crop")
    if not any(before) and not any(after):
        return data
    out_shape = tuple(simplify(data.shape[i] + before[i] + after[i]) for i in range(n))
    value = const(pad_value, data.dtype)

    def fcompute(*idx):
        conds, src = [], []
        for i, x in enumerate(idx):
            if before[i]:
                conds.append(x >= before[i])
            if after[i]:
                conds.append(x < data.shape[i] + before[i])
            src.append(x - before[i] if before[i] else x)
        if not conds:
            return data(*src)
        return tir.if_then_else(tir.all(*conds), data(*src), value)

    return te.compute(out_shape, fcompute, name=name, tag="injective,pad")


def mirror_pad(data, pad_before, pad_after=None, mode="REFLECT", name="MirrorPadInput"):
    """Reflect (``REFLECT``: edge not repeated) or symmetric (``SYMMETRIC``) padding."""
    n = len(data.shape)
    pad_after = pad_before if pad_after is None else pad_after
    before = [const_int(p, "mirror_pad: pad_before") for p in pad_before]
    after = [const_int(p, "mirror_pad: pad_after") for p in pad_after]
    if mode not in ("REFLECT", "SYMMETRIC"):
        raise ShapeError(f"mirror_pad: mode {mode!r} must be 'REFLECT' or 'SYMMETRIC'")
    shift = 1 if mode == "REFLECT" else 0
    out_shape = tuple(simplify(data.shape[i] + before[i] + after[i]) for i in range(n))

    def fcompute(*idx):
        src = []
        for i, x in enumerate(idx):
            size = data.shape[i]
            j = x - before[i]
            # Below 0: reflect around 0 (or -0.5 for symmetric); above size-1: around size-1.
            j = tir.if_then_else(j < 0, -j - 1 + shift, j)
            j = tir.if_then_else(j >= size, 2 * size - 1 - j - shift, j)
            src.append(j)
        return data(*src)

    return te.compute(out_shape, fcompute, name=name, tag="injective,pad")
