"""int8 conv2d on Intel AMX (``tdpbusd``): u8 x s8 -> s32 tiles of up to 16 pixels x 16 channels.

``tdpbusd C, A, B`` adds to C (M rows x 16 int32) the product of A (M rows x K bytes of u8) and
B (K/4 rows of 16 groups of 4 s8). The weights are already in that layout: int8_pack's
``(O/bn, C/ib, KH, KW, ib/4, bn, 4)`` holds, for each tap and input block, ib/4 rows of bn groups
of 4, so the B tile of output channels 16j..16j+15 is one load at byte offset 64j with a row
stride of 4 bn bytes. One pixel's ib input channels (NCHW[ib]c data) are one A row; M output pixels
of a row are M A rows (stride: the conv's stride times ib bytes).

A task is (image, output block, a group of run pairs); a run is M pixels of an output row (the
widest divisor of the row <= 16). Each step (C/ib, KH, KW) loads two runs' A tiles and two
16-channel pieces' B tiles into four C tiles, each load feeding two products
(kiln/topi/x86/amx_tiles.py); each group's C tiles are stored into a 4 KB buffer of the task
and requantized from there (``conv2d_int8.requantize_value``), so the kernel writes only the
requantized output. Ops fused after the requantize (onnxruntime's residual add) run over that
output as the kernel's second pass. Each task loads the tile configuration (per-thread state)
once; the kernel asks Linux for the AMX state on entry (kiln/runtime/amx.py explains why).

Tile registers: C = 0-3 (run t, piece j: 2t + j); A = 4, 5; B = 6, 7.
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


def schedule_conv2d_int8_amx(outs, cfg=None):
    """The AMX kernel at root (requantizing), the padding a parallel pass, what is fused after the
    requantize one parallel pass vectorized over the channel block."""
    s, out, acc = epilogue_schedule(outs, TAG)
    schedule_pad(s, acc)
    if out.op is acc.op:  # the kernel's requantized output, nothing fused after it
        return s
    n, c, y, x, b = s[out].op.axis
    s[out].parallel(s[out].fuse(n, c, y))
    s[out].vectorize(b)
    return s


__all__ = ["conv2d_int8_amx", "schedule_conv2d_int8_amx", "applies", "row_tile"]
