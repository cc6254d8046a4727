"""conv2d_transpose (a.k.a. deconvolution): a conv2d over the stride-dilated, re-padded input
with the kernel flipped and its in/out channels swapped."""

from __future__ import annotations

from kiln import te, tir
from kiln.errors import ShapeError
from kiln.ir.expr import const

from ..utils import as_pair, check_ndim, const_shape, pad_tuple


def dilate(data, strides, name="DilatedInput"):
    """Insert (stride - 1) zeros between elements along each axis."""
    shape = const_shape(data, "dilate data")
    out = tuple((d - 1) * s + 1 for d, s in zip(shape, strides))

    def fcompute(*i):
        conds = [i[a] % s == 0 for a, s in enumerate(strides) if s > 1]
        src = [i[a] // s if s > 1 else i[a] for a, s in enumerate(strides)]
        return tir.if_then_else(tir.all(*conds), data(*src), const(0, data.dtype)) if conds else data(*src)

    return te.compute(out, fcompute, name=name, tag="injective,dilate")


def transpose_prepare(data, kernel, strides, padding, output_padding, groups, dilation, op="conv2d_transpose"):
    """(padded dilated input, equivalent OIHW conv kernel) for a transposed convolution."""
    check_ndim(op, "data", data, 4, "NCHW")
    check_ndim(op, "kernel", kernel, 4, "IOHW: in_channels, out_channels/groups, KH, KW")
    n, c, h, w = const_shape(data, f"{op} data")
    kc, og, kh, kw = const_shape(kernel, f"{op} kernel")
    if kc != c or c % groups:
        raise ShapeError(f"{op}: 'kernel' has {kc} input channels but 'data' has {c} (groups={groups}); "
                         "expected kernel (in_channels, out_channels/groups, KH, KW)")
    sh, sw = as_pair(strides, op, "strides")
    dh, dw = as_pair(dilation, op, "dilation")
    oph, opw = as_pair(output_padding, op, "output_padding")
    pt, pl, pb, pr = pad_tuple(padding, (kh, kw), op)
    ekh, ekw = (kh - 1) * dh + 1, (kw - 1) * dw + 1
    if min(ekh - 1 - pt, ekh - 1 - pb + oph, ekw - 1 - pl, ekw - 1 - pr + opw) < 0:
        raise ShapeError(f"{op}: padding {(pt, pl, pb, pr)} is larger than the dilated kernel extent minus one")
    dilated = dilate(data, (1, 1, sh, sw)) if sh > 1 or sw > 1 else data
    before = (0, 0, ekh - 1 - pt, ekw - 1 - pl)
    after = (0, 0, ekh - 1 - pb + oph, ekw - 1 - pr + opw)
    from .pad import pad

    padded = pad(dilated, before, after, name="data_pad")
    cg = c // groups

    def fkernel(o, i, y, x):
        g = o // og
        return kernel[g * cg + i, o % og, kh - 1 - y, kw - 1 - x]

    conv_kernel = te.compute((groups * og, cg, kh, kw), fkernel, name="kernel_flip", tag="injective,kernel_flip")
    return padded, conv_kernel, (dh, dw)


def conv2d_transpose_nchw(Input, Filter, strides, padding, out_dtype=None, output_padding=(0, 0), groups=1,  # noqa: N803
                          dilation=(1, 1)):
    """Input (N, C, H, W), Filter (C, O/groups, KH, KW) -> (N, O, (H-1)*s - pads + dilated K + output_padding, ...)."""
    from .conv2d import conv2d_nchw

    padded, kernel, dil = transpose_prepare(Input, Filter, strides, padding, output_padding, groups, dilation)
    return conv2d_nchw(padded, kernel, 1, 0, dil, out_dtype, groups)
