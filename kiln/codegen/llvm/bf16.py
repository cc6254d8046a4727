"""bfloat16 in the LLVM backend: its bits (LLVM ``i16``) in memory and registers, arithmetic in float32.

LLVM has a ``bfloat`` type, but on CPUs without AVX512-BF16 its ``fptrunc`` to bfloat is a call
of compiler-rt's ``__truncsfbf2``, and so is every bfloat arithmetic operation, ``select`` and
``phi`` (LLVM promotes them to float and rounds back). So kiln never hands LLVM bfloat values:
they are i16 bit patterns, widened to float32 by a shift (bfloat16 is float32's top half) and

- ``promote_bfloat16`` rewrites a PrimFunc so that every operation on bfloat16 values
  (arithmetic, min/max, comparisons, math calls) runs on float32 conversions of its operands,
  with one rounding to bfloat16 of the result, which is the result bfloat16 arithmetic defines;
- ``widen_bfloat16`` is that shift; ``round_to_bfloat16`` emits float32 -> bfloat16 as integer
  instructions, round to nearest
  even, as numpy's ml_dtypes and ``vcvtneps2bf16`` round (unlike that instruction, subnormals
  are kept, so every CPU computes the same bits), NaN stays a (quiet) NaN of the same sign.

Kernels that multiply bfloat16 pairs into float32 sums (``vdpbf16ps``, AMX ``tdpbf16ps``) call
those instructions through ``call_llvm_pure_intrin`` with bfloat16 vector operands, which the
call bitcasts to LLVM's ``bfloat`` vectors (kiln/codegen/llvm/intrin.py); the pass leaves
intrinsic calls alone.
"""

from __future__ import annotations

import dataclasses
import struct

from ...ir import expr as E
from ...ir.dtype import DType
from ...ir.functor import Mutator, Visitor

F32 = DType("float", 32)
BF16 = DType("bfloat", 16)

_ARITH = (E.Add, E.Sub, E.Mul, E.Div, E.Mod, E.FloorDiv, E.FloorMod, E.Min, E.Max)
_COMPARE = (E.EQ, E.NE, E.LT, E.LE, E.GT, E.GE)
# tir calls computed on float values (kiln/codegen/llvm/intrin.py): promoted like arithmetic.
_MATH = {"exp", "exp2", "exp10", "log", "log2", "log10", "sqrt", "rsqrt", "fabs", "abs", "floor",
         "ceil", "trunc", "round", "nearbyint", "rint", "sin", "cos", "tan", "asin", "acos", "atan",
         "sinh", "cosh", "tanh", "pow", "copysign", "atan2", "log1p", "expm1", "erf", "erfc", "cbrt",
         "asinh", "acosh", "atanh", "lgamma", "tgamma", "hypot", "nextafter", "fdim", "sigmoid",
         "fmod", "fma", "isnan", "isinf", "isfinite"}


def bfloat16_bits(value: float) -> int:
    """The bfloat16 nearest ``value`` (ties to even), as its 16 bits."""
    (bits,) = struct.unpack("<I", struct.pack("<f", value))
    if value != value:
        return (bits >> 16) | 0x40
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF


def bfloat16_value(value: float) -> float:
    """``value`` rounded to bfloat16, as a Python float."""
    return struct.unpack("<f", struct.pack("<I", bfloat16_bits(value) << 16))[0]


class _Find(Visitor):
    """Stops at the first bfloat16 dtype (an exception ends the walk early)."""

    class Found(Exception):
        pass

    def generic_visit(self, node):
        dt = getattr(node, "dtype", None)
        if isinstance(dt, DType) and dt.kind == "bfloat":
            raise self.Found
        super().generic_visit(node)


def uses_bfloat16(node) -> bool:
    try:
        _Find().visit(node)
    except _Find.Found:
        return True
    return False


def _wide(dt: DType) -> DType:
    return F32.with_lanes(dt.lanes)


def _to_f32(e):
    if e.dtype.kind != "bfloat":
        return e
    if isinstance(e, E.FloatImm):
        return E.FloatImm(F32, bfloat16_value(e.value))
    return E.Cast(_wide(e.dtype), e)  # also cast(f32, cast(bf16, x)): the rounding stays


class _Promote(Mutator):
    def generic_visit(self, node):
        node = super().generic_visit(node)
        if isinstance(node, _ARITH) and node.dtype.kind == "bfloat":
            wide = dataclasses.replace(node, a=_to_f32(node.a), b=_to_f32(node.b), dtype=_wide(node.dtype))
            return E.Cast(node.dtype, wide)
        if isinstance(node, _COMPARE) and node.a.dtype.kind == "bfloat":
            return dataclasses.replace(node, a=_to_f32(node.a), b=_to_f32(node.b))
        if isinstance(node, E.Call) and _is_math(node.op) and any(a.dtype.kind == "bfloat" for a in node.args):
            args = tuple(_to_f32(a) for a in node.args)
            if node.dtype.kind != "bfloat":
                return dataclasses.replace(node, args=args)
            return E.Cast(node.dtype, dataclasses.replace(node, args=args, dtype=_wide(node.dtype)))
        return node


def _is_math(op: str) -> bool:
    return (op[4:] if op.startswith("tir.") else op) in _MATH


def promote_bfloat16(func):
    """``func`` (a PrimFunc) with its bfloat16 operations computed in float32 (module doc)."""
    if not uses_bfloat16(func.body):
        return func
    return dataclasses.replace(func, body=_Promote().visit(func.body))


def round_to_bfloat16(cg, value: str, src: DType) -> str:
    """LLVM instructions: float32 (scalar or vector) ``value`` -> bfloat16, nearest even."""
    n = src.lanes
    i32 = "i32" if n == 1 else f"<{n} x i32>"
    i16 = "i16" if n == 1 else f"<{n} x i16>"
    ty = "float" if n == 1 else f"<{n} x float>"

    def c(v: int, t: str = i32) -> str:
        return str(v) if n == 1 else f"splat ({t.split(' x ')[1][:-1]} {v})"

    fw = cg.fw
    bits = fw.emit(f"bitcast {ty} {value} to {i32}")
    odd = fw.emit(f"and {i32} {fw.emit(f'lshr {i32} {bits}, {c(16)}')}, {c(1)}")
    sum_ = fw.emit(f"add {i32} {bits}, {fw.emit(f'add {i32} {odd}, {c(0x7FFF)}')}")
    high = fw.emit(f"lshr {i32} {sum_}, {c(16)}")
    quiet = fw.emit(f"or {i32} {fw.emit(f'lshr {i32} {bits}, {c(16)}')}, {c(0x40)}")
    nan = fw.emit(f"fcmp uno {ty} {value}, {value}")
    picked = fw.emit(f"select {'i1' if n == 1 else f'<{n} x i1>'} {nan}, {i32} {quiet}, {i32} {high}")
    return fw.emit(f"trunc {i32} {picked} to {i16}")


def widen_bfloat16(cg, value: str, src: DType) -> str:
    """LLVM instructions: bfloat16 bits (i16, scalar or vector) -> float32, exactly."""
    n = src.lanes
    i32 = "i32" if n == 1 else f"<{n} x i32>"
    i16 = "i16" if n == 1 else f"<{n} x i16>"
    sixteen = "16" if n == 1 else "splat (i32 16)"
    fw = cg.fw
    wide = fw.emit(f"shl {i32} {fw.emit(f'zext {i16} {value} to {i32}')}, {sixteen}")
    return fw.emit(f"bitcast {i32} {wide} to {'float' if n == 1 else f'<{n} x float>'}")
