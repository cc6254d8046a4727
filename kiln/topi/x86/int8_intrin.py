"""x86 8-bit dot-product tensor intrinsics: ``out[L] += sum_k4 a[k] * w[l, k]`` (u8 x s8 -> s32).

One intrinsic per tier, all over the same tile (4 input channels x L output lanes), so one
compute and one schedule serve every tier:

- ``vnni``: AVX-512 VNNI / AVX-VNNI ``vpdpbusd`` (L = 16: zmm, 8: ymm, 4: xmm): one instruction.
- ``pmaddubsw``: AVX2 / AVX-512BW without VNNI: ``vpmaddubsw`` (u8 x s8 pairs summed to s16,
  saturating), ``vpmaddwd`` with ones (pairs of s16 summed to s32), ``vpaddd``. Exact only where
  no pair ``|w0| + |w1|`` exceeds 128 (255 * 128 < 2**15): the caller checks the constant weights.
- ``pmaddwd``: the exact fallback for full-range weights: the weights are packed as int16 in pair
  order (``w[l, k]`` for k in (0, 1), then (2, 3)), the data widened to int16 by the padding
  stage, so a pair is one broadcast load; two ``vpmaddwd`` and two adds.

The data's 4 bytes are one 32-bit scalar broadcast to every lane; the weights are one vector
load of the tile (packed that way at build time, kiln/topi/int8_pack.py).
"""

from __future__ import annotations

from kiln import te, tir
from kiln.ir import expr as E
from kiln.ir.dtype import dtype
from kiln.ir.stmt import decl_buffer

# (tier, lanes) -> LLVM intrinsics. vpdpbusd takes (acc, u8 data, s8 weights) as i32 vectors.
_VNNI = {16: "llvm.x86.avx512.vpdpbusd.512", 8: "llvm.x86.avx512.vpdpbusd.256",
         4: "llvm.x86.avx512.vpdpbusd.128"}
_PMADDUBSW = {16: "llvm.x86.avx512.pmaddubs.w.512", 8: "llvm.x86.avx2.pmadd.ub.sw",
              4: "llvm.x86.ssse3.pmadd.ub.sw.128"}
_PMADDWD = {16: "llvm.x86.avx512.pmaddw.d.512", 8: "llvm.x86.avx2.pmadd.wd", 4: "llvm.x86.sse2.pmadd.wd"}

TIERS = ("vnni", "pmaddubsw", "pmaddwd")


def _call(dtype: str, name: str, *args):
    return E.Call(_dt(dtype), "tir.call_llvm_pure_intrin", (E.StringImm(name), *args))


def weight_dtype(tier: str) -> str:
    return "int16" if tier == "pmaddwd" else "int8"


def dot_intrin(tier: str, lanes: int):
    """The tensor intrinsic of ``tier`` over ``lanes`` output lanes (see the module doc)."""
    if tier not in TIERS or lanes not in _VNNI:
        raise ValueError(f"int8 dot intrinsic: no tier {tier!r} with {lanes} lanes; tiers {TIERS}, lanes 4/8/16")
    wdt = weight_dtype(tier)
    a = te.placeholder((4,), "int16" if tier == "pmaddwd" else "uint8", name="a")
    b = te.placeholder((lanes, 4), wdt, name="b") if tier != "pmaddwd" else \
        te.placeholder((2, lanes, 2), wdt, name="b")
    if tier != "pmaddwd":
        k = te.reduce_axis((0, 4), name="k")
        c = te.compute((lanes,), lambda i: te.sum(a[k].astype("int32") * b[i, k].astype("int32"), axis=k), name="c")
    else:
        kp = te.reduce_axis((0, 2), name="kp")
        k2 = te.reduce_axis((0, 2), name="k2")
        c = te.compute((lanes,), lambda i: te.sum(a[kp * 2 + k2].astype("int32") * b[kp, i, k2].astype("int32"),
                                                  axis=[kp, k2]), name="c")
    binds = {t: decl_buffer(t.shape, t.dtype, name=t.name.upper(), offset_factor=1) for t in (a, b, c)}
    acc = f"int32x{lanes}"

    def fintrin(ins, outs):
        A, B = ins
        (C,) = outs
        zero = E.Broadcast(E.const(0, "int32"), lanes, _dt(acc))
        if tier == "pmaddwd":
            dot = _pmaddwd_dot(A, B, lanes)
        else:
            quad = tir.reinterpret("int32", A.vload((0,), "uint8x4"))
            data = tir.reinterpret(f"int8x{4 * lanes}", E.Broadcast(quad, lanes, _dt(acc)))
            weights = B.vload((0, 0), f"int8x{4 * lanes}")
            if tier == "vnni":
                dot = lambda c0: _call(acc, _VNNI[lanes], c0, tir.reinterpret(acc, data),  # noqa: E731
                                       tir.reinterpret(acc, weights))
            else:
                pairs = _call(f"int16x{2 * lanes}", _PMADDUBSW[lanes], data, weights)
                ones = E.Broadcast(E.const(1, "int16"), 2 * lanes, _dt(f"int16x{2 * lanes}"))
                quads = _call(acc, _PMADDWD[lanes], pairs, ones)
                dot = lambda c0: c0 + quads  # noqa: E731
        init = C.vstore((0,), zero)
        update = C.vstore((0,), dot(C.vload((0,), acc)))
        body = C.vstore((0,), dot(zero))
        return body, init, update

    return te.decl_tensor_intrin(c.op, fintrin, name=f"x86_int8_{tier}_{lanes}", binds=binds)


def _dt(text: str):
    return dtype(text)


def _pmaddwd_dot(A, B, lanes: int):
    """Exact s16 x s16 dot of 4: the data already widened to int16 (the padding stage does it),
    so each pair is one 32-bit broadcast load."""
    acc = f"int32x{lanes}"
    halves = f"int16x{2 * lanes}"

    def pair(k):
        return tir.reinterpret(halves, E.Broadcast(tir.reinterpret("int32", A.vload((k,), "int16x2")), lanes,
                                                   _dt(acc)))

    w0 = B.vload((0, 0, 0), halves)
    w1 = B.vload((1, 0, 0), halves)

    def dot(c0):
        return c0 + _call(acc, _PMADDWD[lanes], pair(0), w0) + _call(acc, _PMADDWD[lanes], pair(2), w1)
    return dot


__all__ = ["dot_intrin", "TIERS", "weight_dtype"]
