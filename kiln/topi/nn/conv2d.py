"""Generic conv2d computes (NCHW and NHWC; groups, dilation, strides) and shape helpers.

These are the reference definitions: direct loops over the padded input, scheduled by
``topi.generic``. The fast CPU versions live in ``topi/x86/conv2d*.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

from kiln import te
from kiln.errors import ShapeError

from ..utils import as_pair, check_ndim, const_int, const_shape, pad_tuple
from .pad import pad


@dataclass(frozen=True)
class Conv2DShape:
    """Every size a conv2d schedule needs, as ints; built by ``conv2d_shape``."""

    batch: int
    in_channel: int
    in_height: int
    in_width: int
    out_channel: int
    groups: int
    kernel_h: int
    kernel_w: int
    stride_h: int
    stride_w: int
    dilation_h: int
    dilation_w: int
    pad_top: int
    pad_left: int
    pad_bottom: int
    pad_right: int
    out_height: int
    out_width: int

    @property
    def channels_per_group(self) -> int:
        return self.in_channel // self.groups

    @property
    def flops(self) -> int:
        return 2 * self.batch * self.out_channel * self.out_height * self.out_width * \
            self.channels_per_group * self.kernel_h * self.kernel_w


def conv2d_shape(op: str, data_shape, kernel_shape, strides, padding, dilation, groups: int,
                 layout: str = "NCHW", kernel_layout: str | None = None) -> Conv2DShape:
    """Checks shapes and derives the output size. Kernel: OIHW for NCHW, HWIO for NHWC."""
    if layout == "NCHW":
        n, c, h, w = data_shape
    elif layout == "NHWC":
        n, h, w, c = data_shape
    else:
        raise ShapeError(f"{op}: layout {layout!r} is not supported; use 'NCHW' or 'NHWC'")
    kernel_layout = kernel_layout or ("OIHW" if layout == "NCHW" else "HWIO")
    if kernel_layout == "OIHW":
        oc, icg, kh, kw = kernel_shape
    elif kernel_layout == "HWIO":
        kh, kw, icg, oc = kernel_shape
    elif kernel_layout == "HWOI":  # depthwise NHWC weights are sometimes stored this way
        kh, kw, oc, icg = kernel_shape
    else:
        raise ShapeError(f"{op}: kernel layout {kernel_layout!r} is not supported; use OIHW or HWIO")
    if groups < 1 or c % groups or oc % groups:
        raise ShapeError(f"{op}: groups={groups} must divide input channels ({c}) and output channels ({oc})")
    if icg * groups != c:
        raise ShapeError(
            f"{op}: input 'kernel' has {icg} input channels per group but 'data' has {c} channels "
            f"and groups={groups} (expected {c // groups})")
    sh, sw = as_pair(strides, op, "strides")
    dh, dw = as_pair(dilation, op, "dilation")
    if min(sh, sw, dh, dw) < 1:
        raise ShapeError(f"{op}: strides {(sh, sw)} and dilation {(dh, dw)} must be positive")
    pt, pl, pb, pr = pad_tuple(padding, ((kh - 1) * dh + 1, (kw - 1) * dw + 1), op)
    oh = (h + pt + pb - (kh - 1) * dh - 1) // sh + 1
    ow = (w + pl + pr - (kw - 1) * dw - 1) // sw + 1
    if oh < 1 or ow < 1:
        raise ShapeError(f"{op}: the kernel ({kh}x{kw}, dilation {dh}x{dw}) is larger than the padded input "
                         f"({h + pt + pb}x{w + pl + pr})")
    return Conv2DShape(n, c, h, w, oc, groups, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr, oh, ow)


def _out_dtype(data, out_dtype):
    return str(data.dtype) if out_dtype in (None, "") else out_dtype


def conv2d_nchw(data, kernel, strides=1, padding=0, dilation=1, out_dtype=None, groups=1):
    """2-D convolution of NCHW data with an OIHW kernel (O, I/groups, KH, KW).

    Example: ``topi.nn.conv2d_nchw(x, w, strides=(1, 1), padding=(1, 1), dilation=(1, 1), out_dtype="float32")``.
    """
    check_ndim("conv2d", "data", data, 4, "NCHW")
    check_ndim("conv2d", "kernel", kernel, 4, "OIHW")
    out_dtype = _out_dtype(data, out_dtype)
    p = conv2d_shape("conv2d", const_shape(data, "conv2d data"), const_shape(kernel, "conv2d kernel"),
                     strides, padding, dilation, const_int(groups, "conv2d: groups"))
    padded = pad(data, (0, 0, p.pad_top, p.pad_left), (0, 0, p.pad_bottom, p.pad_right), name="data_pad")
    icg, ocg = p.channels_per_group, p.out_channel // p.groups
    rc = te.reduce_axis((0, icg), name="rc")
    ry = te.reduce_axis((0, p.kernel_h), name="ry")
    rx = te.reduce_axis((0, p.kernel_w), name="rx")

    def fcompute(n, f, y, x):
        c = rc if p.groups == 1 else (f // ocg) * icg + rc
        a = padded[n, c, y * p.stride_h + ry * p.dilation_h, x * p.stride_w + rx * p.dilation_w]
        return te.sum(a.astype(out_dtype) * kernel[f, rc, ry, rx].astype(out_dtype), axis=[rc, ry, rx])

    return te.compute((p.batch, p.out_channel, p.out_height, p.out_width), fcompute,
                      name="conv2d_nchw", tag="conv2d_nchw", attrs={"workload": p})


def conv2d_nhwc(data, kernel, strides=1, padding=0, dilation=1, out_dtype=None, groups=1):
    """2-D convolution of NHWC data with an HWIO kernel (KH, KW, I/groups, O)."""
    check_ndim("conv2d", "data", data, 4, "NHWC")
    check_ndim("conv2d", "kernel", kernel, 4, "HWIO")
    out_dtype = _out_dtype(data, out_dtype)
    p = conv2d_shape("conv2d", const_shape(data, "conv2d data"), const_shape(kernel, "conv2d kernel"),
                     strides, padding, dilation, const_int(groups, "conv2d: groups"), layout="NHWC")
    padded = pad(data, (0, p.pad_top, p.pad_left, 0), (0, p.pad_bottom, p.pad_right, 0), name="data_pad")
    icg, ocg = p.channels_per_group, p.out_channel // p.groups
    rc = te.reduce_axis((0, icg), name="rc")
    ry = te.reduce_axis((0, p.kernel_h), name="ry")
    rx = te.reduce_axis((0, p.kernel_w), name="rx")

    def fcompute(n, y, x, f):
        c = rc if p.groups == 1 else (f // ocg) * icg + rc
        a = padded[n, y * p.stride_h + ry * p.dilation_h, x * p.stride_w + rx * p.dilation_w, c]
        return te.sum(a.astype(out_dtype) * kernel[ry, rx, rc, f].astype(out_dtype), axis=[rc, ry, rx])

    return te.compute((p.batch, p.out_height, p.out_width, p.out_channel), fcompute,
                      name="conv2d_nhwc", tag="conv2d_nhwc", attrs={"workload": p})


def conv2d(data, kernel, strides=1, padding=0, dilation=1, layout="NCHW", out_dtype=None, groups=1):
    """conv2d in the given data layout (NCHW with OIHW kernel, NHWC with HWIO kernel)."""
    if layout == "NCHW":
        return conv2d_nchw(data, kernel, strides, padding, dilation, out_dtype, groups)
    if layout == "NHWC":
        return conv2d_nhwc(data, kernel, strides, padding, dilation, out_dtype, groups)
    raise ShapeError(f"conv2d: layout {layout!r} is not supported; use 'NCHW' or 'NHWC'")


def group_conv2d_nchw(data, kernel, stride, padding, dilation, groups, out_dtype=None):
    """Grouped conv2d, NCHW (TVM's name for conv2d_nchw with groups > 1)."""
    return conv2d_nchw(data, kernel, stride, padding, dilation, out_dtype, groups)
