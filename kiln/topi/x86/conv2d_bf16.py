"""bfloat16 conv2d on channel-blocked data for x86: pairs of input channels, float32 sums.

A bfloat16 multiply-add instruction works on *pairs*: AVX512-BF16's ``vdpbf16ps`` adds to each
float32 lane ``a[2l] * b[2l] + a[2l+1] * b[2l+1]`` (products exact in float32, sums rounded like
float32 FMAs). So the weight is regrouped with two consecutive input channels next to each other
for every output channel of the block:

    kernel (O/bn, C/ib, KH, KW, ib/2, bn, 2)        (``prepack_kernel_nchwc_bf16``, at build time)

and one pixel's pair of input channels (one 32-bit value) is broadcast to every lane. The
register tile is ``tile_ow`` pixels x ``bn`` output channels of float32 accumulators, as in
``x86.conv2d_NCHWc``; the reduction walks (C/ib, KH, KW, ib/2) outside it.

Tiers (``bf16_tier``, from LLVM's view of the target, kiln/target/cpu_facts.py):
``avx512bf16`` (``vdpbf16ps`` zmm, 16 lanes; ymm, 8 lanes, for 8-channel blocks) through a
tensor intrinsic; elsewhere the same compute vectorized over the block, bfloat16 widened to
float32 in registers (a shift: bfloat16 is float32's upper half) once per loaded vector and used
for the whole tile row.
"""

from __future__ import annotations

import numpy as np

from kiln import te, tir
from kiln.ir import expr as E
from kiln.ir.dtype import dtype as _dt
from kiln.ir.stmt import decl_buffer

from ..nn.pad import pad
from ..utils import const_int

TAG = "conv2d_NCHWc_bf16"
_DPBF16 = {16: "llvm.x86.avx512bf16.dpbf16ps.512", 8: "llvm.x86.avx512bf16.dpbf16ps.256"}
ACCUMULATORS = 28  # of AVX-512's 32 vector registers: the rest hold weights and a broadcast


def bf16_tier(target=None) -> str | None:
    """"avx512bf16" where LLVM compiles ``vdpbf16ps`` for the target (default: the current one)."""
    from kiln.target.cpu_facts import cpu_facts

    facts = cpu_facts(target)
    return "avx512bf16" if "avx512bf16" in facts.features else None


def pairs_apply(data_dtype, kernel_dtype, ib: int) -> bool:
    """Whether a blocked conv runs on channel pairs: bfloat16 data and weight, even input block."""
    return str(data_dtype) == "bfloat16" and str(kernel_dtype) == "bfloat16" and ib >= 2 and ib % 2 == 0


def prepack_kernel_nchwc_bf16(weight: np.ndarray, ib: int, bn: int) -> np.ndarray:
    """numpy: OIHW weight -> (O/bn, C/ib, KH, KW, ib/2, bn, 2), the layout the compute reads."""
    o, c, kh, kw = weight.shape
    w = weight.reshape(o // bn, bn, c // ib, ib // 2, 2, kh, kw)
    return np.ascontiguousarray(w.transpose(0, 2, 5, 6, 3, 1, 4))


def pack_kernel_nchwc_bf16(kernel, ib: int, bn: int):
    """The same regrouping as a TE stage (a kernel that is not a constant)."""
    o, c, kh, kw = (const_int(d) for d in kernel.shape)
    return te.compute((o // bn, c // ib, kh, kw, ib // 2, bn, 2),
                      lambda oc, ic, y, x, i, b, k: kernel[oc * bn + b, ic * ib + i * 2 + k, y, x],
                      name="kernel_vec_bf16", tag="injective,kernel_pack")


def conv2d_nchwc_bf16(data, kernel, p, bn: int, tile_ow: int, plain_output: bool = False):
    """float32 NCHW{bn}c conv of bfloat16 NCHW{ib}c ``data`` and a pair-packed ``kernel`` (7 dims)
    or an OIHW one; ``p`` is the workload (kiln/topi/nn/conv2d.Conv2DShape)."""
    n, chunks, _, _, ib = (const_int(d) for d in data.shape)
    kernel_vec = kernel if len(kernel.shape) == 7 else pack_kernel_nchwc_bf16(kernel, ib, bn)
    padded = pad(data, (0, 0, p.pad_top, p.pad_left, 0), (0, 0, p.pad_bottom, p.pad_right, 0), name="data_pad")
    if not bf16_tier():  # float32 FMAs: the input converted once, in the packing pass
        from .conv2d_nchwc import widened
        padded = widened(padded, "float32")
    rco = te.reduce_axis((0, chunks), name="rco")
    ry = te.reduce_axis((0, p.kernel_h), name="ry")
    rx = te.reduce_axis((0, p.kernel_w), name="rx")
    rcp = te.reduce_axis((0, ib // 2), name="rcp")
    rk = te.reduce_axis((0, 2), name="rk")

    def fconv(b, occ, y, x, ocb):
        a = padded[b, rco, y * p.stride_h + ry * p.dilation_h, x * p.stride_w + rx * p.dilation_w, rcp * 2 + rk]
        w = kernel_vec[occ, rco, ry, rx, rcp, ocb, rk]
        return te.sum(a.astype("float32") * w.astype("float32"), axis=[rco, ry, rx, rcp, rk])

    conv = te.compute((n, p.out_channel // bn, p.out_height, p.out_width, bn), fconv, name="conv2d_NCHWc_bf16_tile",
                      tag=TAG, attrs={"workload": p, "config": {"oc_bn": bn, "tile_ow": tile_ow}})
    if plain_output:
        return te.compute((n, p.out_channel, p.out_height, p.out_width),
                          lambda b, c, y, x: conv[b, c // bn, y, x, c % bn], name="conv2d_nchw",
                          tag="injective,conv2d_store")
    return te.compute(conv.shape, lambda *i: conv(*i), name="conv2d_NCHWc", tag="injective,conv2d_store")


def default_tile_ow(width: int, bn: int, lanes: int = 16) -> int:
    """Pixels per register tile: the widest divisor of the row whose accumulators
    (pixels x bn / lanes vectors) fit ``ACCUMULATORS`` registers."""
    most = max(1, ACCUMULATORS // max(1, bn // lanes))
    return next(t for t in range(min(most, width), 0, -1) if width % t == 0)


def dot_bf16_intrin(lanes: int):
    """``c[l] += a[0] * b[l, 0] + a[1] * b[l, 1]`` (bfloat16 -> float32) as one ``vdpbf16ps``."""
    a = te.placeholder((2,), "bfloat16", name="a")
    b = te.placeholder((lanes, 2), "bfloat16", name="b")
    k = te.reduce_axis((0, 2), name="k")
    c = te.compute((lanes,), lambda i: te.sum(a[k].astype("float32") * b[i, k].astype("float32"), axis=k), name="c")
    binds = {t: decl_buffer(t.shape, t.dtype, name=t.name.upper(), offset_factor=1) for t in (a, b, c)}
    acc, halves = f"float32x{lanes}", f"bfloat16x{2 * lanes}"

    def fintrin(ins, outs):
        A, B = ins
        (C,) = outs
        pair = tir.reinterpret("int32", A.vload((0,), "bfloat16x2"))
        data = tir.reinterpret(halves, E.Broadcast(pair, lanes, _dt(f"int32x{lanes}")))
        weights = B.vload((0, 0), halves)
        zero = E.Broadcast(E.FloatImm(_dt("float32"), 0.0), lanes, _dt(acc))

        def dot(c0):
            return E.Call(_dt(acc), "tir.call_llvm_pure_intrin", (E.StringImm(_DPBF16[lanes]), c0, data, weights))
        return C.vstore((0,), dot(zero)), C.vstore((0,), zero), C.vstore((0,), dot(C.vload((0,), acc)))

    return te.decl_tensor_intrin(c.op, fintrin, name=f"x86_bf16_dot_{lanes}", binds=binds)


def schedule_conv2d_nchwc_bf16(s, conv, out):
    """The register tile of ``conv`` (tagged TAG) inside the loops of ``out`` (its NCHW{bn}c
    output, any epilogue inlined), or at root with its own loops when ``out`` is plain NCHW."""
    conf = conv.op.attrs["config"]
    bn, tile = conf["oc_bn"], conf["tile_ow"]
    tier = bf16_tier()
    lanes = 16 if bn % 16 == 0 else 8 if bn % 8 == 0 else 0
    if len(out.shape) == 5:
        n, c, y, x, b = s[out].op.axis
        xo, xi = s[out].split(x, factor=tile)
        s[out].reorder(n, c, y, xo, xi, b)
        s[out].vectorize(b)
        s[out].unroll(xi)
        s[out].parallel(s[out].fuse(n, c, y))
        s[conv].compute_at(s[out], xo)
        _, _, _, cx, cb = s[conv].op.axis
        lead = []
    else:  # plain NCHW output: the tile loops of its own, then the unpack with the epilogue
        from ..generic.default import schedule_stage

        cn, cc, cy, cx, cb = s[conv].op.axis
        cxo, cx = s[conv].split(cx, factor=tile)
        lead = [s[conv].fuse(cn, cc, cy), cxo]
        s[conv].parallel(lead[0])
        schedule_stage(s, out)
    rco, ry, rx, rcp, rk = s[conv].op.reduce_axis
    if tier and lanes:
        bo, bi = s[conv].split(cb, factor=lanes)
        s[conv].reorder(*lead, rco, ry, rx, rcp, cx, bo, bi, rk)
        s[conv].unroll(cx)
        s[conv].unroll(bo)
        s[conv].tensorize(bi, dot_bf16_intrin(lanes))
    else:
        s[conv].reorder(*lead, rco, ry, rx, rcp, rk, cx, cb)
        s[conv].unroll(rk)
        s[conv].unroll(cx)
        s[conv].vectorize(cb)
    for t in conv.op.input_tensors:
        if "pad" in t.op.tag or "kernel_pack" in t.op.tag:
            axes = s[t].op.axis
            s[t].parallel(s[t].fuse(axes[0], axes[1]))
            s[t].vectorize(axes[-1])

