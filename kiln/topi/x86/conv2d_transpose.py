"""conv2d_transpose for x86: the blocked conv2d over the dilated, padded input (the dilation and
the kernel flip are inlined into the input padding and the kernel regrouping passes)."""

from __future__ import annotations

from ..nn.conv2d_transpose import transpose_prepare
from .conv2d import conv2d_nchw, schedule_conv2d_nchw


def conv2d_transpose_nchw(Input, Filter, strides, padding, out_dtype=None, output_padding=(0, 0), groups=1,  # noqa: N803
                          dilation=(1, 1), cfg=None):
    """Same result as topi.nn.conv2d_transpose_nchw (Filter (C, O/groups, KH, KW))."""
    padded, kernel, dil = transpose_prepare(Input, Filter, strides, padding, output_padding, groups, dilation)
    return conv2d_nchw(padded, kernel, 1, 0, dil, out_dtype, groups, cfg)


def schedule_conv2d_transpose_nchw(outs, cfg=None):
    return schedule_conv2d_nchw(outs, cfg)
