"""The AMX tile loop both AMX convolutions share (amx_bf16.py, amx_int8.py).

A kernel asks Linux for the AMX state on entry (kiln/runtime/amx.py explains why), then runs one
parallel task per (image, output block, output row). Each task loads its tile configuration
(per-thread state): C0, C1 = 0, 1 (M rows x 64 bytes of 32-bit sums), A = 2 (M pixels x one
input row), B0, B1 = 3, 4 (the packed weights of 16 output channels, 4 bytes per K step). For
each run of M pixels and each pair of 16-channel pieces of the output block, the two C tiles
accumulate over (input blocks, KH, KW), each A load shared by both B tiles, and are stored
straight into the NCHW{bn}c output. Only the element type differs: bfloat16 (2 bytes,
``tdpbf16ps``) or u8 x s8 (1 byte, ``tdpbusd``).
"""

from __future__ import annotations

from kiln import tir
from kiln.ir import expr as E
from kiln.ir.dtype import dtype as _dt
from kiln.ir.stmt import Evaluate
from kiln.runtime.amx import ARCH_REQ_XCOMP_PERM, SYS_ARCH_PRCTL, XFEATURE_XTILEDATA


def _i8(v: int):
    return E.const(v, "int8")


def _amx(name: str, *args):
    return Evaluate(E.Call(_dt("int32"), "tir.call_llvm_intrin", (E.StringImm(f"llvm.x86.{name}"), *args)))


def _addr(load):
    return E.Call(_dt("handle"), "tir.address_of", (load,))


def row_tile(width: int) -> int:
    """Pixels per A tile: the widest divisor of the row that is at most 16 (tile rows)."""
    return next(m for m in range(min(16, width), 0, -1) if width % m == 0)


def conv_tiles(x, w, y, *, n, chunks, hp, wp, ib, k_row, ocb, oh, ow, kh, kw, bn, strides, dilation,
               elem_bytes: int, product: str):
    """The kernel body: padded data ``x`` (N, chunks, HP, WP, ib), packed weights ``w`` with
    ``k_row`` elements of one A row per (output block, input block, tap), output ``y``."""
    sh, sw = strides
    dh, dw = dilation
    m = row_tile(ow)
    pieces = bn // 16
    nc = min(2, pieces)  # C tiles at a time
    ib_ = tir.ir_builder.create()
    ib_.emit(Evaluate(tir.call_extern("int64", "syscall", E.const(SYS_ARCH_PRCTL, "int64"),
                                      E.const(ARCH_REQ_XCOMP_PERM, "int64"), E.const(XFEATURE_XTILEDATA, "int64"))))
    xv, wv, yv = ib_.buffer_ptr(x), ib_.buffer_ptr(w), ib_.buffer_ptr(y)
    with ib_.for_range(0, n * ocb * oh, name="task", kind="parallel") as task:
        cfg = ib_.allocate("uint8", (64,), name="tilecfg", scope="local")
        for i in range(64):
            cfg[i] = E.const(0, "uint8")
        cfg[0] = E.const(1, "uint8")  # palette 1
        row_bytes = k_row * elem_bytes
        tiles = [(m, 64)] * nc + [(m, row_bytes)] + [(row_bytes // 4, 64)] * nc  # (rows, bytes per row)
        for t, (rows, colsb) in enumerate(tiles):
            cfg[16 + 2 * t] = E.const(colsb & 255, "uint8")
            cfg[17 + 2 * t] = E.const(colsb >> 8, "uint8")
            cfg[48 + t] = E.const(rows, "uint8")
        ib_.emit(_amx("ldtilecfg", _addr(cfg[0])))
        b = task // (ocb * oh)
        oc = task // oh % ocb
        r = task % oh
        with ib_.for_range(0, ow // m, name="xt") as xt:
            for g in range(0, pieces, nc):  # C tiles for channels 16g .. 16(g + nc)
                for j in range(nc):
                    ib_.emit(_amx("tilezero", _i8(j)))
                with ib_.for_range(0, chunks, name="rco") as rco:
                    with ib_.for_range(0, kh, name="ry") as ry:
                        with ib_.for_range(0, kw, name="rx") as rx:
                            yy = r * sh + ry * dh
                            xx = xt * (m * sw) + rx * dw
                            a_off = (((b * chunks + rco) * hp + yy) * wp + xx) * ib
                            ib_.emit(_amx("tileloadd64", _i8(nc), _addr(xv[a_off]),
                                          E.const(sw * ib * elem_bytes, "int64")))
                            w_off = (((oc * chunks + rco) * kh + ry) * kw + rx) * (k_row * bn)
                            for j in range(nc):  # 16 channels x 4 bytes per B row
                                ib_.emit(_amx("tileloadd64", _i8(nc + 1 + j),
                                              _addr(wv[w_off + 64 // elem_bytes * (g + j)]), E.const(bn * 4, "int64")))
                            for j in range(nc):
                                ib_.emit(_amx(product, _i8(j), _i8(nc), _i8(nc + 1 + j)))
                y_off = (((b * ocb + oc) * oh + r) * ow + xt * m) * bn
                for j in range(nc):
                    ib_.emit(_amx("tilestored64", _i8(j), _addr(yv[y_off + 16 * (g + j)]), E.const(bn * 4, "int64")))
        ib_.emit(_amx("tilerelease"))
    return ib_.get()
