"""int8 batch_matmul of two run-time tensors on x86 with VNNI: ``vpdpbusd`` over a packed operand.

qnn.batch_matmul multiplies two activations (attention's Q K^T and P V), so nothing is packed at
build time: the kernel packs ``y`` itself, in one parallel pass, into the dense kernel's layout
``(B, N/L, K4/4, L, 4)`` of s8 (a u8 ``y`` shifted by -128: ``vpdpbusd`` multiplies u8 x s8; the
caller corrects with the shifted zero point), zero-padding K to a multiple of 4. ``x`` (u8) is
read as it is, four bytes of a row broadcast to the L lanes; the register tile is ``tile_m`` rows
x L columns, as nn.contrib_dense_int8's. The result is the raw int32 ``sum_k x y'``; the
zero-point terms are relay ops around it (relay/qnn/cpu_int8.py).
"""

from __future__ import annotations

from kiln import te, tir

from .conv2d_int8 import epilogue_schedule, tile_width
from .int8_intrin import dot_intrin

TAG = "batch_matmul_int8_acc"


def pack_rhs(y, transpose_b: bool, lanes: int, shift: int):
    """``y`` (B, K, N) or (B, N, K) as s8 (B, N/L, K4/4, L, 4), minus ``shift``; K padded with 0."""
    b, d1, d2 = (int(d) for d in y.shape)
    k, n = (d2, d1) if transpose_b else (d1, d2)
    k4 = -(-k // 4) * 4

    def f(bi, nb, kq, l, r):
        kk = kq * 4 + r
        nn = nb * lanes + l
        v = y[bi, nn, kk] if transpose_b else y[bi, kk, nn]
        value = (v.astype("int32") - tir.const(shift, "int32")).astype("int8")
        return tir.if_then_else(kk < k, value, tir.const(0, "int8"))
    return te.compute((b, n // lanes, k4 // 4, lanes, 4), f, name="bmm_pack_int8", tag="int8_pack_rhs")


def batch_matmul_int8_acc(x, packed, tile_m=None):
    """int32 (B, M, N) = x (B, M, K) u8 . packed (the rhs of ``pack_rhs``) over K; ``tile_m``: rows
    per register tile (a tuning knob; default the widest divisor of M up to 4)."""
    b, m, kx = (int(d) for d in x.shape)
    _, nb, kq, lanes, _ = (int(d) for d in packed.shape)
    if kq * 4 != kx:
        src = x
        x = te.compute((b, m, kq * 4), lambda bi, i, j: tir.if_then_else(j < kx, src[bi, i, j], tir.const(0, src.dtype)),
                       name="bmm_pad_int8", tag="int8_pad")
    rq = te.reduce_axis((0, kq), name="rq")
    r4 = te.reduce_axis((0, 4), name="r4")
    acc = te.compute((b, m, nb, lanes),
                     lambda bi, i, o, l: te.sum(x[bi, i, rq * 4 + r4].astype("int32")
                                                * packed[bi, o, rq, l, r4].astype("int32"), axis=[rq, r4]),
                     name="batch_matmul_int8", tag=TAG, attrs={"lanes": lanes, "tile": int(tile_m or tile_width(m, 4))})
    return te.compute((b, m, nb * lanes), lambda bi, i, j: acc[bi, i, j // lanes, j % lanes],
                      name="batch_matmul_int8_out", tag="int8_unblock")


def schedule_batch_matmul_int8(outs, cfg=None):
    """(batch, row tile, lane block) parallel; tile rows x L lanes of int32 in registers over K."""
    del cfg
    s, out, acc = epilogue_schedule(outs, TAG)
    lanes, tile = acc.op.attrs["lanes"], acc.op.attrs["tile"]
    bi, i, j = s[out].op.axis
    jo, jl = s[out].split(j, factor=lanes)
    io, ii = s[out].split(i, factor=tile)
    s[out].reorder(bi, io, jo, ii, jl)
    s[out].vectorize(jl)
    s[out].unroll(ii)
    s[out].parallel(s[out].fuse(bi, io, jo))
    s[acc].compute_at(s[out], s[out].leaf_iter_vars[0])
    ab, ai, ao, al = s[acc].op.axis
    rq, r4 = s[acc].op.reduce_axis
    s[acc].reorder(ab, ao, rq, ai, al, r4)
    s[acc].unroll(ai)
    s[acc].tensorize(al, dot_intrin("vnni", lanes))
    for t in acc.op.input_tensors:
        tag = getattr(t.op, "tag", "")
        if tag == "int8_pack_rhs":
            pb, pn, pk, pl, pr = s[t].op.axis
            s[t].parallel(s[t].fuse(pb, pn))
            s[t].vectorize(pr)
        elif tag == "int8_pad":  # a pass of its own: the dot product reads plain bytes
            pb, pm, _ = s[t].op.axis
            s[t].parallel(s[t].fuse(pb, pm))
    return s


__all__ = ["pack_rhs", "batch_matmul_int8_acc", "schedule_batch_matmul_int8"]
