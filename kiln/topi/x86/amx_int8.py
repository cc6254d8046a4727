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

from kiln import te, tir
from kiln.ir import expr as E
from kiln.ir.dtype import dtype as _dt
from kiln.ir.stmt import Evaluate

TAG = "conv2d_int8_amx"
SYS_ARCH_PRCTL, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA = 158, 0x1023, 18


def _i8(v: int):
    return E.const(v, "int8")


def _amx(name: str, *args):
    return Evaluate(E.Call(_dt("int32"), "tir.call_llvm_intrin", (E.StringImm(f"llvm.x86.{name}"), *args)))


def _addr(load):
    return E.Call(_dt("handle"), "tir.address_of", (load,))


def row_tile(width: int) -> int:
    """Pixels per A tile: the widest divisor of the row that is at most 16 (tile rows)."""
    return next(m for m in range(min(16, width), 0, -1) if width % m == 0)


def applies(ib: int, bn: int, target=None) -> bool:
    """A rows of 16..64 input channels, output blocks of 16k channels, and LLVM gives AMX-INT8."""
    from kiln.target.cpu_facts import cpu_facts

    return 16 <= ib <= 64 and ib % 4 == 0 and bn % 16 == 0 and "amx-int8" in cpu_facts(target).features


def conv2d_int8_amx_acc(padded, kernel, out_hw, strides, dilation):
    """int32 NCHW[bn]c accumulators of padded u8 NCHW[ib]c data and the packed s8 kernel."""
    n, chunks, hp, wp, ib = (int(d) for d in padded.shape)
    ocb, kchunks, kh, kw, icq, bn, _ = (int(d) for d in kernel.shape)
    assert kchunks == chunks and icq * 4 == ib, (padded.shape, kernel.shape)
    oh, ow = out_hw
    sh, sw = strides
    dh, dw = dilation
    m = row_tile(ow)
    pieces = bn // 16
    nc = min(2, pieces)

    def body(ins, outs):
        x, w = ins
        (y,) = outs
        ib_ = tir.ir_builder.create()
        ib_.emit(Evaluate(tir.call_extern("int64", "syscall", E.const(SYS_ARCH_PRCTL, "int64"),
                                          E.const(ARCH_REQ_XCOMP_PERM, "int64"), E.const(XFEATURE_XTILEDATA, "int64"))))
        xv, wv, yv = ib_.buffer_ptr(x), ib_.buffer_ptr(w), ib_.buffer_ptr(y)
        with ib_.for_range(0, n * ocb * oh, name="task", kind="parallel") as task:
            cfg = ib_.allocate("uint8", (64,), name="tilecfg", scope="local")
            for i in range(64):
                cfg[i] = E.const(0, "uint8")
            cfg[0] = E.const(1, "uint8")  # palette 1
            tiles = [(m, 64)] * nc + [(m, ib)] + [(ib // 4, 64)] * nc  # (rows, bytes per row)
            for t, (rows, colsb) in enumerate(tiles):
                cfg[16 + 2 * t] = E.const(colsb & 255, "uint8")
                cfg[17 + 2 * t] = E.const(colsb >> 8, "uint8")
                cfg[48 + t] = E.const(rows, "uint8")
            ib_.emit(_amx("ldtilecfg", _addr(cfg[0])))
            b = task // (ocb * oh)
            oc = task // oh % ocb
            r = task % oh
            with ib_.for_range(0, ow // m, name="xt") as xt:
                for g in range(0, pieces, nc):
                    for j in range(nc):
                        ib_.emit(_amx("tilezero", _i8(j)))
                    with ib_.for_range(0, chunks, name="rco") as rco:
                        with ib_.for_range(0, kh, name="ry") as ry:
                            with ib_.for_range(0, kw, name="rx") as rx:
                                yy = r * sh + ry * dh
                                xx = xt * (m * sw) + rx * dw
                                a_off = (((b * chunks + rco) * hp + yy) * wp + xx) * ib
                                ib_.emit(_amx("tileloadd64", _i8(nc), _addr(xv[a_off]), E.const(sw * ib, "int64")))
                                w_off = (((oc * chunks + rco) * kh + ry) * kw + rx) * (ib * bn)
                                for j in range(nc):
                                    ib_.emit(_amx("tileloadd64", _i8(nc + 1 + j), _addr(wv[w_off + 64 * (g + j)]),
                                                  E.const(bn * 4, "int64")))
                                for j in range(nc):
                                    ib_.emit(_amx("tdpbusd", _i8(j), _i8(nc), _i8(nc + 1 + j)))
                    y_off = (((b * ocb + oc) * oh + r) * ow + xt * m) * bn
                    for j in range(nc):
                        ib_.emit(_amx("tilestored64", _i8(j), _addr(yv[y_off + 16 * (g + j)]), E.const(bn * 4, "int64")))
            ib_.emit(_amx("tilerelease"))
        return ib_.get()

    return te.extern((n, ocb, oh, ow, bn), [padded, kernel], body, name="conv2d_int8_amx", dtype="int32",
                     tag=TAG, attrs={"tile_ow": m})


def schedule_conv2d_int8_amx(outs, cfg=None):
    """The AMX kernel at root, the padding a parallel pass, the requantize epilogue (and what is
    fused after it) one parallel pass vectorized over the channel block."""
    from .conv2d_int8 import _find, _inline_between, _schedule_pad

    outs = [outs] if isinstance(outs, te.Tensor) else list(outs)
    s = te.create_schedule([o.op for o in outs])
    out = outs[0]
    acc = _find_extern(out)
    _inline_between(s, out, acc)
    _schedule_pad(s, acc)
    n, c, y, x, b = s[out].op.axis
    s[out].parallel(s[out].fuse(n, c, y))
    s[out].vectorize(b)
    del _find
    return s


def _find_extern(out):
    stack, seen = [out], set()
    while stack:
        t = stack.pop()
        if id(t.op) in seen:
            continue
        seen.add(id(t.op))
        if getattr(t.op, "tag", "") == TAG:
            return t
        stack.extend(t.op.input_tensors)
    raise ValueError(f"schedule_conv2d_int8_amx: no {TAG} stage under {out.name}")


__all__ = ["conv2d_int8_amx_acc", "schedule_conv2d_int8_amx", "applies", "row_tile"]
