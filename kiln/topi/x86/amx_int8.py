"""int8 conv2d on Intel AMX (``tdpbusd``): u8 x s8 -> s32 tiles of up to 16 pixels x 16 channels.

``tdpbusd C, A, B`` adds to C (M rows x 16 int32) the product of A (M rows x K bytes of u8) and
B (K/4 rows of 16 groups of 4 s8). The weights are already in that layout: int8_pack's
``(O/bn, C/ib, KH, KW, ib/4, bn, 4)`` holds, for each tap and input block, ib/4 rows of bn groups
of 4, so the B tile of output channels 16j..16j+15 is one load at byte offset 64j with a row
stride of 4 bn bytes. One pixel's ib input channels (NCHW[ib]c data) are one A row; M output pixels
of a row are M A rows (stride: the conv's stride times ib bytes).

One task per (image, output block, output row): for each run of M pixels (the widest divisor of
the row <= 16) and each pair of 16-channel pieces of the block, two C tiles accumulate over
(C/ib, KH, KW), each A load shared by both B tiles; the int32 tiles are stored into the
accumulator tensor and the requantize epilogue (kiln/topi/x86/conv2d_int8.py) runs over it in the
same kernel. Each task loads the tile configuration (per-thread state) and releases it; the
kernel asks Linux for the AMX state on entry (kiln/runtime/amx.py explains why).

Tile registers: C0, C1 = 0, 1; A = 2; B0, B1 = 3, 4.
"""

from __future__ import annotations

from kiln import te

from .amx_tiles import conv_tiles, row_tile
from .conv2d_int8 import epilogue_schedule, schedule_pad

TAG = "conv2d_int8_amx"


def applies(ib: int, bn: int, target=None) -> bool:
    """A rows of 16..64 input channels, output blocks of 16k channels, and LLVM gives AMX-INT8."""
    from kiln.target.cpu_facts import cpu_facts

    return 16 <= ib <= 64 and ib % 4 == 0 and bn % 16 == 0 and "amx-int8" in cpu_facts(target).features


def conv2d_int8_amx(padded, kernel, bias, mult, shift, out_hw, strides, dilation, requant: dict):
    """The requantized NCHW[bn]c output of padded u8 NCHW[ib]c data and the packed s8 kernel: the
    sums of each tile group requantized in the kernel (``amx_tiles.conv_tiles``' ``requant``:
    ``conv2d_int8.requantize_value``'s keywords out_zp, lo, hi, out_dtype, rounding, float_clamp)."""
    n, chunks, hp, wp, ib = (int(d) for d in padded.shape)
    ocb, kchunks, kh, kw, icq, bn, _ = (int(d) for d in kernel.shape)
    assert kchunks == chunks and icq * 4 == ib, (padded.shape, kernel.shape)
    oh, ow = out_hw
    m = row_tile(ow)

    def body(ins, outs):
        return conv_tiles(*ins, *outs, n=n, chunks=chunks, hp=hp, wp=wp, ib=ib, k_row=ib, ocb=ocb, oh=oh, ow=ow,
                          kh=kh, kw=kw, bn=bn, strides=strides, dilation=dilation, elem_bytes=1, product="tdpbusd",
                          requant=requant)

    return te.extern((n, ocb, oh, ow, bn), [padded, kernel, bias, mult, shift], body, name="conv2d_int8_amx",
                     dtype=requant["out_dtype"], tag=TAG, attrs={"tile_ow": m})


def conv2d_int8_amx_acc(padded, kernel, out_hw, strides, dilation):
    """int32 NCHW[bn]c accumulators of padded u8 NCHW[ib]c data and the packed s8 kernel."""
    n, chunks, hp, wp, ib = (int(d) for d in padded.shape)
    ocb, kchunks, kh, kw, icq, bn, _ = (int(d) for d in kernel.shape)
    assert kchunks == chunks and icq * 4 == ib, (padded.shape, kernel.shape)
    oh, ow = out_hw
    m = row_tile(ow)

    def body(ins, outs):
        return conv_tiles(*ins, *outs, n=n, chunks=chunks, hp=hp, wp=wp, ib=ib, k_row=ib, ocb=ocb, oh=oh, ow=ow,
                          kh=kh, kw=kw, bn=bn, strides=strides, dilation=dilation, elem_bytes=1, product="tdpbusd")

    return te.extern((n, ocb, oh, ow, bn), [padded, kernel], body, name="conv2d_int8_amx", dtype="int32",
                     tag=TAG, attrs={"tile_ow": m})


def schedule_conv2d_int8_amx(outs, cfg=None):
    """The AMX kernel at root, the padding a parallel pass, the requantize epilogue (and what is
    fused after it) one parallel pass vectorized over the channel block."""
    s, out, acc = epilogue_schedule(outs, TAG)
    schedule_pad(s, acc)
    if out.op is acc.op:  # the kernel's requantized output, nothing fused after it
        return s
    n, c, y, x, b = s[out].op.axis
    s[out].parallel(s[out].fuse(n, c, y))
    s[out].vectorize(b)
    return s


__all__ = ["conv2d_int8_amx", "conv2d_int8_amx_acc", "schedule_conv2d_int8_amx", "applies", "row_tile"]
