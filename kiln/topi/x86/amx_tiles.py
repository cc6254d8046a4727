"""The AMX tile loop of the int8 convolution (amx_int8.py) and the helpers the bfloat16 one
(amx_bf16.py) shares.

A kernel asks Linux for the AMX state on entry (kiln/runtime/amx.py explains why). A run is M
pixels of one output row (the widest divisor of the row <= 16: tile rows); runs are numbered
row by row and taken two at a time. Each step (input block, KH, KW) loads the two runs' A tiles
(M pixels x one input row) and two 16-channel pieces' B tiles (the packed weights, 4 bytes per
K step) into four C tiles (M rows x 64 bytes of 32-bit sums), so each tile load feeds two
products; the C tiles are requantized from a buffer in L1 into the NCHW{bn}c output. A task is
(image, output block, a group of run pairs) and loads the tile configuration (per-thread state)
once (a load and release, timed alone here, cost about as much as four tdpbusd). An odd number
of runs repeats the last one in the last pair (the same outputs written to the same place).

Tile registers: C = 0-3 (run t, piece j: 2t + j); A = 4, 5; B = 6, 7.
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


TASK_PRODUCTS = 64  # tile products per task at least (one tile configuration each) ...
TASKS = 64  # ... where the tasks stay this many


def conv_tiles(x, w, bias, mult, shift, y, *, n, chunks, hp, wp, ib, k_row, ocb, oh, ow, kh, kw, bn, strides,
               dilation, elem_bytes: int, product: str, requant: dict):
    """The kernel body: padded data ``x`` (N, chunks, HP, WP, ib), packed weights ``w`` with
    ``k_row`` elements of one A row per (output block, input block, tap), the per-channel bias,
    multiplier and shift, and the output ``y``, requantized (``requant``:
    ``conv2d_int8.requantize_value``'s keywords): the four C tiles of a step group are stored into
    a 4 KB buffer of the task (L1) and requantized from there, so the sums never reach memory (a
    128->512 1x1 conv at 28x28 stored and read back 1.6 MB of them)."""
    sh, sw = strides
    dh, dw = dilation
    m = row_tile(ow)
    per_row = ow // m
    runs = oh * per_row
    pairs = -(-runs // 2)
    pieces = bn // 16
    nb = min(2, pieces)  # B tiles (16-channel pieces) per step
    steps = chunks * kh * kw
    per_task = max(1, -(-TASK_PRODUCTS // (2 * pieces * steps)))  # run pairs per task
    per_task = min(per_task, max(1, pairs * n * ocb // TASKS), pairs)
    groups = -(-pairs // per_task)
    ib_ = tir.ir_builder.create()
    ib_.emit(Evaluate(tir.call_extern("int64", "syscall", E.const(SYS_ARCH_PRCTL, "int64"),
                                      E.const(ARCH_REQ_XCOMP_PERM, "int64"), E.const(XFEATURE_XTILEDATA, "int64"))))
    xv, wv, yv = ib_.buffer_ptr(x), ib_.buffer_ptr(w), ib_.buffer_ptr(y)
    from .conv2d_int8 import requantize_value
    bv, qv, sv = (ib_.buffer_ptr(t) for t in (bias, mult, shift))
    row_bytes = k_row * elem_bytes
    with ib_.for_range(0, n * ocb * groups, name="task", kind="parallel") as task:
        cfg = ib_.allocate("uint8", (64,), name="tilecfg", scope="local")
        for i in range(64):
            cfg[i] = E.const(0, "uint8")
        cfg[0] = E.const(1, "uint8")  # palette 1
        tiles = [(m, 64)] * 4 + [(m, row_bytes)] * 2 + [(row_bytes // 4, 64)] * 2  # (rows, bytes per row)
        for t, (rows, colsb) in enumerate(tiles):
            cfg[16 + 2 * t] = E.const(colsb & 255, "uint8")
            cfg[17 + 2 * t] = E.const(colsb >> 8, "uint8")
            cfg[48 + t] = E.const(rows, "uint8")
        ib_.emit(_amx("ldtilecfg", _addr(cfg[0])))
        sums = ib_.allocate("int32", (2 * nb * m * 16,), name="sums", scope="local")
        b = task // (ocb * groups)
        oc = task // groups % ocb
        grp = task % groups
        with ib_.for_range(0, per_task, name="pi") as pi:
            pair = grp * per_task + pi
            with ib_.if_scope(pair < pairs):
                run = [pair * 2, tir.min(pair * 2 + 1, runs - 1)]  # an odd count repeats the last run
                row = [q // per_row for q in run]
                col = [q % per_row * m for q in run]
                for g in range(0, pieces, nb):  # C tiles for channels 16g .. 16(g + nb)
                    for t in range(2):
                        for j in range(nb):
                            ib_.emit(_amx("tilezero", _i8(2 * t + j)))
                    with ib_.for_range(0, chunks, name="rco") as rco:
                        with ib_.for_range(0, kh, name="ry") as ry:
                            with ib_.for_range(0, kw, name="rx") as rx:
                                for t in range(2):
                                    a_off = (((b * chunks + rco) * hp + row[t] * sh + ry * dh) * wp
                                             + col[t] * sw + rx * dw) * ib
                                    ib_.emit(_amx("tileloadd64", _i8(4 + t), _addr(xv[a_off]),
                                                  E.const(sw * ib * elem_bytes, "int64")))
                                w_off = (((oc * chunks + rco) * kh + ry) * kw + rx) * (k_row * bn)
                                for j in range(nb):  # 16 channels x 4 bytes per B row
                                    b_at = _addr(wv[w_off + 64 // elem_bytes * (g + j)])
                                    ib_.emit(_amx("tileloadd64", _i8(6 + j), b_at, E.const(bn * 4, "int64")))
                                for t in range(2):
                                    for j in range(nb):
                                        ib_.emit(_amx(product, _i8(2 * t + j), _i8(4 + t), _i8(6 + j)))
                    for t in range(2):
                        for j in range(nb):
                            ib_.emit(_amx("tilestored64", _i8(2 * t + j), _addr(sums[(t * nb + j) * m * 16]),
                                          E.const(64, "int64")))
                    for t in range(2):
                        with ib_.for_range(0, m, name="px") as px:
                            y_off = (((b * ocb + oc) * oh + row[t]) * ow + col[t] + px) * bn
                            for j in range(nb):
                                with ib_.for_range(0, 16, name="lane", kind="vectorize") as lane:
                                    ch = oc * bn + 16 * (g + j) + lane
                                    yv[y_off + 16 * (g + j) + lane] = requantize_value(
                                        sums[((t * nb + j) * m + px) * 16 + lane], bv[ch], qv[ch], sv[ch], **requant)
        ib_.emit(_amx("tilerelease"))
    return ib_.get()
