"""AArch64 8-bit dot-product tensor intrinsics for the int8 conv/dense kernels.

With the dot-product extension (``+dotprod``, Armv8.2+; cpu_facts says "dotprod") ``sdot``
(s8 x s8, what qnn.Legalize gives these targets) or ``udot`` (u8 x u8) adds to each of 4 int32
lanes the dot product of 4 bytes: the same tile as x86's ``vpdpbusd`` (kiln/topi/x86/
int8_intrin.py) with 4 lanes: the data's 4 bytes broadcast as one 32-bit value, the weights one
16-byte vector packed by kiln/topi/int8_pack.py. Without it the kernels take the ``neon`` tier:
no intrinsic, the int32 lanes vectorized by LLVM (``smull``/``smlal`` on widened bytes).
"""

from __future__ import annotations

from kiln import te, tir
from kiln.ir import expr as E
from kiln.ir.dtype import dtype as _dt
from kiln.ir.stmt import decl_buffer

LANES = 4
_DOT = {("int8", "int8"): "llvm.aarch64.neon.sdot.v4i32.v16i8", ("uint8", "uint8"): "llvm.aarch64.neon.udot.v4i32.v16i8"}


def dot_intrin(data_dtype: str = "int8", weight_dtype: str = "int8"):
    """``c[4] += sum_k4 a[k] * b[l, k]`` with one sdot/udot."""
    name = _DOT.get((data_dtype, weight_dtype))
    if name is None:
        raise ValueError(f"aarch64 dot product: no instruction for {data_dtype} x {weight_dtype}; sdot takes "
                         "int8 x int8, udot uint8 x uint8")
    a = te.placeholder((4,), data_dtype, name="a")
    b = te.placeholder((LANES, 4), weight_dtype, name="b")
    k = te.reduce_axis((0, 4), name="k")
    c = te.compute((LANES,), lambda i: te.sum(a[k].astype("int32") * b[i, k].astype("int32"), axis=k), name="c")
    binds = {t: decl_buffer(t.shape, t.dtype, name=t.name.upper(), offset_factor=1) for t in (a, b, c)}
    acc = "int32x4"
    vec = "int8x16" if data_dtype == "int8" else "uint8x16"

    def fintrin(ins, outs):
        A, B = ins
        (C,) = outs
        zero = E.Broadcast(E.const(0, "int32"), LANES, _dt(acc))
        quad = tir.reinterpret("int32", A.vload((0,), f"{data_dtype}x4"))
        data = tir.reinterpret(vec, E.Broadcast(quad, LANES, _dt(acc)))
        weights = B.vload((0, 0), f"{weight_dtype}x16")

        def dot(c0):
            return E.Call(_dt(acc), "tir.call_llvm_pure_intrin", (E.StringImm(name), c0, data, weights))
        return C.vstore((0,), dot(zero)), C.vstore((0,), zero), C.vstore((0,), dot(C.vload((0,), acc)))

    return te.decl_tensor_intrin(c.op, fintrin, name=f"aarch64_{name.split('.')[3]}", binds=binds)


def int8_tier(target=None):
    """("sdot", 4) with the dot-product extension (AArch64), ("neon", 4) with NEON (AArch64, or
    32-bit ARMv7-A with ``+neon``: LLVM widens and multiplies the bytes, ``vmull``/``vmlal``),
    else None."""
    from kiln.target.cpu_facts import cpu_facts

    facts = cpu_facts(target)
    if facts.arch not in ("aarch64", "arm") or "neon" not in facts.features:
        return None
    return ("sdot", LANES) if "dotprod" in facts.features and facts.arch == "aarch64" else ("neon", LANES)


__all__ = ["dot_intrin", "int8_tier", "LANES"]
