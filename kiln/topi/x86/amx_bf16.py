"""bfloat16 conv2d on Intel AMX (``tdpbf16ps``): tiles of 16 pixels x 16 channels in tile registers.

AMX multiplies tile registers: ``tdpbf16ps C, A, B`` adds to C (M rows x 16 float32) the product
of A (M rows x K bfloat16) and B, stored as K/2 rows of 16 *pairs* (the channel-pair layout
``conv2d_bf16.prepack_kernel_nchwc_bf16`` gives the weight: ``(O/bn, C/ib, KH, KW, ib/2, bn, 2)``,
so B is one tile load with a row stride of ``bn`` pairs). With NCHW16c data one pixel's 16
input channels are one 32-byte A row, M output pixels of a row are M A rows (stride: the conv's
stride in pixels), and C's rows are the output pixels' 16-channel pieces of the NCHW{bn}c output.

One task per (image, output block, output row): for each run of M pixels (the widest divisor
of the row <= 16) and each pair of 16-channel pieces of the block, two C tiles (32 channels)
accumulate over (C/16, KH, KW), each A load shared by both B tiles; float32 results are stored straight into the output and the fused
epilogue runs over it afterwards. Each task loads the tile configuration (a per-thread state)
and releases it; the kernel asks Linux for the AMX state on entry (kiln/runtime/amx.py explains
why; one system call per kernel call).

Tile registers: C0, C1 = 0, 1; A = 2; B0, B1 = 3, 4.
"""

from __future__ import annotations

import dataclasses

from kiln import te, tir

from ..nn.pad import pad
from ..utils import const_int
from .amx_tiles import conv_tiles, row_tile

TAG = "conv2d_NCHWc_amx_bf16"


def applies(data_dtype, kernel_dtype, ib: int, bn: int, target=None) -> bool:
    """bfloat16 NCHW16c or NCHW32c data (an A row: 16 or 32 channels, 64 bytes at most), output
    blocks of 16k channels, and a CPU LLVM gives AMX-BF16."""
    from kiln.target.cpu_facts import cpu_facts

    return (str(data_dtype) == "bfloat16" and str(kernel_dtype) == "bfloat16" and ib in (16, 32)
            and bn % 16 == 0 and "amx-bf16" in cpu_facts(target).features)


def conv2d_nchwc_amx(data, kernel, p, bn: int, plain_output: bool = False, row: int | None = None):
    """float32 NCHW{bn}c conv of bfloat16 NCHW16c ``data`` and a pair-packed 7-dim ``kernel``.

    ``row``: elements of an A row when it spans more than one pixel's ``ib`` (the plain-input
    path's overlapping rows); the kernel's pair dimension is then ``row / 2``."""
    n, chunks, _, _, ib = (const_int(d) for d in data.shape)
    k_row = row or ib
    padded = data if row else pad(data, (0, 0, p.pad_top, p.pad_left, 0), (0, 0, p.pad_bottom, p.pad_right, 0),
                                  name="data_pad")
    hp, wp = const_int(padded.shape[2]), const_int(padded.shape[3])
    oh, ow, kh, kw = p.out_height, p.out_width, p.kernel_h, p.kernel_w
    ocb = p.out_channel // bn
    m = row_tile(ow)

    def body(ins, outs):
        return conv_tiles(*ins, *outs, n=n, chunks=chunks, hp=hp, wp=wp, ib=ib, k_row=k_row, ocb=ocb, oh=oh,
                          ow=ow, kh=kh, kw=kw, bn=bn, strides=(p.stride_h, p.stride_w),
                          dilation=(p.dilation_h, p.dilation_w), elem_bytes=2, product="tdpbf16ps")

    conv = te.extern((n, ocb, oh, ow, bn), [padded, kernel], body, name="conv2d_NCHWc_amx", dtype="float32",
                     tag=TAG, attrs={"workload": p, "config": {"oc_bn": bn, "tile_ow": m}})
    if plain_output:
        return te.compute((n, p.out_channel, oh, ow), lambda b_, c, y_, x_: conv[b_, c // bn, y_, x_, c % bn],
                          name="conv2d_nchw", tag="injective,conv2d_store")
    return te.compute(conv.shape, lambda *i: conv(*i), name="conv2d_NCHWc", tag="injective,conv2d_store")


def schedule_conv2d_nchwc_amx(s, conv, out):
    """The AMX kernel at root; the padding a parallel pass; ``out`` (the store with any fused
    epilogue inlined) parallel over its outer axes, vectorized over the channel block."""
    from ..generic.default import schedule_stage

    padded, kernel = conv.op.input_tensors
    if "pad" in padded.op.tag:  # zero padding (and im2col rows): one parallel pass
        _inline_upstream(s, padded)
        axes = s[padded].op.axis
        s[padded].parallel(s[padded].fuse(axes[0], axes[1], axes[2]))
        s[padded].vectorize(axes[-1])
    if "kernel_pack" in getattr(kernel.op, "tag", ""):
        _inline_upstream(s, kernel)
        axes = s[kernel].op.axis
        s[kernel].parallel(s[kernel].fuse(axes[0], axes[1], axes[2]))
    schedule_stage(s, out)


def _inline_upstream(s, t):
    """Inline the elementwise stages that feed ``t`` (padding, layout views) into it."""
    for u in t.op.input_tensors:
        if isinstance(u.op, te.ComputeOp) and "injective" in u.op.tag or "pad" in getattr(u.op, "tag", ""):
            _inline_upstream(s, u)
            s[u].compute_inline()


# -- few input channels (an RGB image): rows of (kernel column, channel) -----------------------

def plain_applies(data_dtype, kernel_dtype, channels: int, kernel_w: int, dilation_w: int, bn: int,
                  target=None) -> bool:
    """A plain NCHW bfloat16 input of at most 4 channels whose kernel row (4 x KW elements) fits
    one 32-element A row."""
    return (applies(data_dtype, kernel_dtype, 32, bn, target) and channels <= 4 and 4 * kernel_w <= 32
            and dilation_w == 1)


def conv2d_plain_amx(data, kernel_vec, p, bn: int, plain_output: bool = False):
    """float32 NCHW{bn}c conv of a plain NCHW bfloat16 ``data`` with few channels (C <= 4,
    4 x KW <= 32: an RGB image's 7x7 conv).

    A row of 16 channels would be mostly zeros for 3 channels. Instead the input is stored as
    padded NHWC4 (4 channels per pixel, zero-filled) and an output pixel's A row is the 32
    elements from its first input pixel on: the KW pixels x 4 channels its kernel row reads
    (and zeros times zero weights beyond). Rows of neighbouring pixels overlap: the tile load's
    row stride is the conv's stride x 4 elements. The conv is then the AMX kernel's with a KH x 1
    kernel over "channels" (kernel column, channel); ``kernel_vec`` (O/bn, C, KH, KW, 1, bn; or
    OIHW) is regrouped so, zero in the fill.
    """
    from ..nn.conv2d import conv2d_shape

    n, c, h, w = (const_int(d) for d in data.shape)
    kh, kw = p.kernel_h, p.kernel_w
    hp, wp = h + p.pad_top + p.pad_bottom, w + p.pad_left + p.pad_right
    wp += max(0, (p.out_width - 1) * p.stride_w + 8 - wp)  # the last row's 32 elements stay inside
    zero = tir.const(0.0, "bfloat16")

    def fpix(b, _, y, x, ch):
        inside = tir.all(ch < c, y >= p.pad_top, y < p.pad_top + h, x >= p.pad_left, x < p.pad_left + w)
        return tir.if_then_else(inside, data[b, tir.min(ch, c - 1), y - p.pad_top, x - p.pad_left], zero)

    pixels = te.compute((n, 1, hp, wp, 4), fpix, name="data_nhwc4", tag="injective,pad")
    if len(kernel_vec.shape) == 6:
        def fk(o, _, ry, __, kp, b, t):
            k = kp * 2 + t
            ok = tir.all(k % 4 < c, k // 4 < kw)
            return tir.if_then_else(ok, kernel_vec[o, tir.min(k % 4, c - 1), ry, tir.min(k // 4, kw - 1), 0, b], zero)
    else:  # OIHW
        def fk(o, _, ry, __, kp, b, t):
            k = kp * 2 + t
            ok = tir.all(k % 4 < c, k // 4 < kw)
            return tir.if_then_else(ok, kernel_vec[o * bn + b, tir.min(k % 4, c - 1), ry, tir.min(k // 4, kw - 1)], zero)
    kernel = te.compute((p.out_channel // bn, 1, kh, 1, 16, bn, 2), fk, name="kernel_rows", tag="injective,kernel_pack")
    rows = conv2d_shape("conv2d_NCHWc_amx", (n, 4, hp, wp), (p.out_channel, 4, kh, 1),
                        (p.stride_h, p.stride_w), 0, (p.dilation_h, 1), 1)
    rows = dataclasses.replace(rows, out_width=p.out_width)
    return conv2d_nchwc_amx(pixels, kernel, rows, bn, plain_output, row=32)
