"""Conversions between layouts such as "NCHW", "NHWC" and "NCHW16c" (parsed by kiln.layout)."""

from __future__ import annotations

from kiln import te, tir
from kiln.errors import ShapeError
from kiln.layout import parse_layout
from kiln.ir.expr import const

from .utils import const_int


def layout_transform(data, src_layout: str, dst_layout: str):
    src, dst = parse_layout(src_layout), parse_layout(dst_layout)
    if len(src) != len(data.shape):
        raise ShapeError(f"layout_transform: input 'data' has {len(data.shape)} dims but layout {src_layout!r} has {len(src)}")
    if {a for a, f in src if not f} != {a for a, f in dst if not f}:
        raise ShapeError(f"layout_transform: {src_layout!r} and {dst_layout!r} have different axes")
    shape = [const_int(s, "layout_transform: data shape") for s in data.shape]
    full = {}
    for (axis, factor), size in zip(src, shape):
        full[axis] = full.get(axis, 1) * size
    sub_of = {a: f for a, f in dst if f}
    out_shape = [(-(-full[a] // sub_of[a]) if a in sub_of else full[a]) if not f else f for a, f in dst]
    src_sub = {a: f for a, f in src if f}

    def fcompute(*o):
        value = {}
        for (axis, factor), i in zip(dst, o):
            if factor:
                value[axis] = value.get(axis, 0) + i
            else:
                value[axis] = value.get(axis, 0) + i * sub_of.get(axis, 1)
        idx, inside = [], []
        for axis, factor in src:
            v = value[axis]
            if factor:
                idx.append(v % factor)
            elif axis in src_sub:
                idx.append(v // src_sub[axis])
            else:
                idx.append(v)
                if axis in sub_of and full[axis] % sub_of[axis]:
                    inside.append(v < full[axis])
        if not inside:
            return data(*idx)
        # Blocks past the end of an axis (C=24 into 16c) are zero-filled.
        load = data(*[tir.min(i, s - 1) for i, s in zip(idx, shape)])
        return tir.if_then_else(tir.all(*inside), load, const(0, data.dtype))

    return te.compute(tuple(out_shape), fcompute, name="T_layout_trans", tag="injective")
