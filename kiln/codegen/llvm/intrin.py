"""Intrinsic calls (``Call(op="tir.exp", ...)``) and calls of external C functions.

Math uses an LLVM intrinsic where LLVM has one (it picks an instruction, a vector libcall or
scalar libm calls per target) and libm otherwise, scalarized for vectors. float16 math is
computed in float32 and rounded back, which is what numpy does for most float16 functions.
``round`` rounds half to even, like numpy. ``tir.if_then_else`` evaluates only the chosen
branch, because the other one often holds a load that would be out of bounds (padding).
"""

from __future__ import annotations

import dataclasses

from ...errors import CompileError
from ...ir import expr as E
from ...ir.dtype import DType
from ...ir.functor import Mutator
from .ir import float_literal, llvm_type, mangle, scalar_type

F32 = DType("float", 32)

# tir name -> LLVM intrinsic over floats.
_LLVM_UNARY = {
    "exp": "llvm.exp", "exp2": "llvm.exp2", "exp10": "llvm.exp10", "log": "llvm.log",
    "log2": "llvm.log2", "log10": "llvm.log10", "sqrt": "llvm.sqrt", "fabs": "llvm.fabs",
    "floor": "llvm.floor", "ceil": "llvm.ceil", "trunc": "llvm.trunc", "round": "llvm.roundeven",
    "nearbyint": "llvm.roundeven", "rint": "llvm.roundeven", "sin": "llvm.sin", "cos": "llvm.cos",
    "tan": "llvm.tan", "asin": "llvm.asin", "acos": "llvm.acos", "atan": "llvm.atan",
    "sinh": "llvm.sinh", "cosh": "llvm.cosh", "tanh": "llvm.tanh",
}
_LLVM_BINARY = {"pow": "llvm.pow", "copysign": "llvm.copysign", "atan2": "llvm.atan2"}
# Functions only libm has (float versions end in "f").
_LIBM_UNARY = {"log1p", "expm1", "erf", "erfc", "cbrt", "asinh", "acosh", "atanh", "lgamma", "tgamma"}
_LIBM_BINARY = {"hypot", "nextafter", "fdim"}


def emit_call(cg, e: E.Call) -> str:
    op = e.op
    name = op[4:] if op.startswith("tir.") else op
    handler = _SPECIAL.get(name)
    if handler is not None:
        return handler(cg, e)
    if name in _LLVM_UNARY or name in _LLVM_BINARY or name in _LIBM_UNARY or name in _LIBM_BINARY:
        return _float_math(cg, name, e)
    if name in ("call_extern", "call_pure_extern", "call_llvm_intrin", "call_llvm_pure_intrin"):
        if not e.args or not isinstance(e.args[0], E.StringImm):
            raise CompileError(f"{cg.func_name}: {op} needs the function name as its first argument")
        return _extern(cg, e.args[0].value, e.args[1:], e.dtype)
    if op.startswith("tir."):
        known = sorted({*_SPECIAL, *_LLVM_UNARY, *_LLVM_BINARY, *_LIBM_UNARY, *_LIBM_BINARY})
        raise CompileError(f"{cg.func_name}: the LLVM backend has no intrinsic {op!r}; known: "
                           f"{', '.join('tir.' + k for k in known)}; other names call a C function")
    return _extern(cg, op, e.args, e.dtype)


def _float_math(cg, name: str, e: E.Call) -> str:
    dt = e.dtype
    if not dt.is_float:
        raise CompileError(f"{cg.func_name}: tir.{name} needs float arguments, got {dt} in {e}")
    if dt.bits == 16:
        wide = F32.with_lanes(dt.lanes)
        args = [cg.cast(cg.expr(a), a.dtype, wide) for a in e.args]
        return cg.cast(_math_values(cg, name, args, wide), wide, dt)
    return _math_values(cg, name, [cg.expr(a) for a in e.args], dt)


def _math_values(cg, name: str, args: list[str], dt: DType) -> str:
    if name in _LLVM_UNARY:
        return cg.call_intrinsic(_LLVM_UNARY[name], dt, args[:1])
    if name in _LLVM_BINARY:
        return cg.call_intrinsic(_LLVM_BINARY[name], dt, args[:2])
    return _libm(cg, name, args, dt)


def _libm(cg, name: str, args: list[str], dt: DType) -> str:
    fname = name + ("f" if dt.bits == 32 else "")
    elem = scalar_type(dt)
    cg.mw.declare(fname, f"declare {elem} @{fname}({', '.join([elem] * len(args))})")
    if dt.lanes == 1:
        return cg.fw.emit(f"call {elem} @{fname}({', '.join(f'{elem} {a}' for a in args)})")
    vec = "poison"
    for lane in range(dt.lanes):
        lanes = [cg.extract(a, dt, lane) for a in args]
        r = cg.fw.emit(f"call {elem} @{fname}({', '.join(f'{elem} {a}' for a in lanes)})")
        vec = cg.insert(vec, dt, r, lane)
    return vec


# LLVM intrinsics that return nothing, called for their effect (Evaluate): AMX tile configuration,
# loads, stores and dot products on tile registers named by immediates (x86 AMX, kiln/runtime/amx.py).
VOID_INTRINSICS = {"llvm.x86.ldtilecfg", "llvm.x86.sttilecfg", "llvm.x86.tilerelease", "llvm.x86.tilezero",
                   "llvm.x86.tileloadd64", "llvm.x86.tileloaddt164", "llvm.x86.tilestored64",
                   "llvm.x86.tdpbf16ps", "llvm.x86.tdpfp16ps", "llvm.x86.tdpbssd", "llvm.x86.tdpbsud",
                   "llvm.x86.tdpbusd", "llvm.x86.tdpbuud"}


def _extern(cg, fname: str, args, ret: DType) -> str:
    if fname in VOID_INTRINSICS:
        values = [cg.expr(a) for a in args]
        types = [llvm_type(a.dtype) for a in args]
        cg.mw.declare(fname, f"declare void @{fname}({', '.join(types)})")
        cg.fw.emit_void(f"call void @{fname}({', '.join(f'{t} {v}' for t, v in zip(types, values))})")
        return "0"
    values = [cg.expr(a) for a in args]
    types = [llvm_type(a.dtype) for a in args]
    for k, a in enumerate(args):  # bfloat16 bits travel as i16; intrinsics take LLVM bfloat
        if a.dtype.kind == "bfloat" and fname.startswith("llvm."):
            n = a.dtype.lanes
            bf = "bfloat" if n == 1 else f"<{n} x bfloat>"
            values[k], types[k] = cg.fw.emit(f"bitcast {types[k]} {values[k]} to {bf}"), bf
    rty = llvm_type(ret)
    cg.mw.declare(fname, f"declare {rty} @{fname}({', '.join(types)})")
    return cg.fw.emit(f"call {rty} @{fname}({', '.join(f'{t} {v}' for t, v in zip(types, values))})")


def rounded_to_int32(cg, e: E.Cast) -> str | None:
    """``int32(round(x))`` (x float32/float64, ``tir.round``/``rint``/``nearbyint``: half to even)
    as one ``llvm.lrint`` on x86 (``cvtps2dq``/``cvtpd2dq``: 1 uop where ``roundps`` + ``cvttps2dq``
    are 3 on Intel); None elsewhere (other architectures keep ``roundeven`` + ``fptosi``).
    Exact: lrint rounds in the current mode, round to nearest even (the x86 ABI's MXCSR default,
    which nothing in kiln changes), so every x whose rounded value fits int32 gives the same
    integer; outside int32 fptosi is poison and lrint an unspecified value (int8 epilogues clamp
    first, so they never reach it). Only with AVX: without it LLVM folds the operand's load into
    legacy-SSE ``cvtps2dq mem``, which faults where the address is not 16-byte aligned (any
    a[i + 1], also where its loop vectorizer widens a scalar lrint), while fptosi's
    ``cvttps2dq`` is only given aligned loads."""
    x = e.value
    if not (isinstance(x, E.Call) and x.op.removeprefix("tir.") in ("round", "rint", "nearbyint") and len(x.args) == 1
            and x.dtype.is_float and x.dtype.bits in (32, 64) and e.dtype.is_int and e.dtype.bits == 32
            and cg.target_info.arch in ("x86_64", "i386", "i686") and _has_avx(cg.target_info)):
        return None
    src, dst = x.dtype, e.dtype
    full = f"llvm.lrint.{mangle(dst)}.{mangle(src)}"
    st, dt_ = llvm_type(src), llvm_type(dst)
    cg.mw.declare(full, f"declare {dt_} @{full}({st})")
    return cg.fw.emit(f"call {dt_} @{full}({st} {cg.expr(x.args[0])})")


def _has_avx(info) -> bool:
    """Whether the target's code has AVX (VEX encodings: memory operands at any alignment)."""
    from ...target.cpu_facts import _probe

    return "avx" in _probe(info.triple, info.cpu, info.features).features


# Special cases -----------------------------------------------------------------------------------


def _fsplat(cg, value: float, dt: DType) -> str:
    lit = float_literal(value, dt)
    return lit if dt.lanes == 1 else cg.const_vector([lit] * dt.lanes, dt)


def _rsqrt(cg, e) -> str:
    dt = e.dtype
    root = _float_math(cg, "sqrt", e)
    return cg.binary("fdiv", _fsplat(cg, 1.0, dt), root, dt)


def _sigmoid(cg, e) -> str:
    dt = e.dtype
    x = cg.expr(e.args[0])
    neg = cg.fw.emit(f"fneg {llvm_type(dt)} {x}")
    ex = _math_values(cg, "exp", [neg], dt) if dt.bits != 16 else \
        cg.cast(_math_values(cg, "exp", [cg.cast(neg, dt, F32.with_lanes(dt.lanes))], F32.with_lanes(dt.lanes)),
                F32.with_lanes(dt.lanes), dt)
    one = _fsplat(cg, 1.0, dt)
    return cg.binary("fdiv", one, cg.binary("fadd", one, ex, dt), dt)


def _abs(cg, e) -> str:
    dt, x = e.dtype, cg.expr(e.args[0])
    if dt.is_float:
        return cg.call_intrinsic("llvm.fabs", dt, [x])
    if dt.is_int:
        return cg.call_intrinsic("llvm.abs", dt, [x, "false"], [dt, DType("bool", 1)])
    return x


def _fclass(kind: str):
    def emit(cg, e) -> str:
        a = e.args[0]
        dt, x = a.dtype, cg.expr(a)
        if not dt.is_float:
            return cg._const(1 if kind == "isfinite" else 0, e.dtype)
        ty = llvm_type(dt)
        if kind == "isnan":
            return cg.fw.emit(f"fcmp uno {ty} {x}, {x}")
        mag = cg.call_intrinsic("llvm.fabs", dt, [x])
        inf = _fsplat(cg, float("inf"), dt)
        pred = "oeq" if kind == "isinf" else "olt"
        return cg.fw.emit(f"fcmp {pred} {ty} {mag}, {inf}")
    return emit


def _fmod(cg, e) -> str:
    return cg.binary("frem", cg.expr(e.args[0]), cg.expr(e.args[1]), e.dtype)


def _bitwise(op: str):
    def emit(cg, e) -> str:
        return cg.binary(op, cg.expr(e.args[0]), cg.expr(e.args[1]), e.dtype)
    return emit


def _bitwise_not(cg, e) -> str:
    return cg.binary("xor", cg.expr(e.args[0]), cg._const(-1, e.dtype), e.dtype)


def _shift_right(cg, e) -> str:
    op = "ashr" if e.dtype.is_int else "lshr"
    return cg.binary(op, cg.expr(e.args[0]), cg.expr(e.args[1]), e.dtype)


def _popcount(cg, e) -> str:
    return cg.call_intrinsic("llvm.ctpop", e.dtype, [cg.expr(e.args[0])])


def _clz(cg, e) -> str:
    dt = e.dtype
    return cg.call_intrinsic("llvm.ctlz", dt, [cg.expr(e.args[0]), "false"], [dt, DType("bool", 1)])


def _fma(cg, e) -> str:
    return cg.call_intrinsic("llvm.fma", e.dtype, [cg.expr(a) for a in e.args])


def _reinterpret(cg, e) -> str:
    a = e.args[0]
    src, dst = a.dtype, e.dtype
    if src.bits * src.lanes != dst.bits * dst.lanes:
        raise CompileError(f"{cg.func_name}: reinterpret {src} as {dst}: sizes differ")
    return cg.fw.emit(f"bitcast {llvm_type(src)} {cg.expr(a)} to {llvm_type(dst)}")


def _address_of(cg, e) -> str:
    """tir.address_of(buffer[i]): a pointer to that element (AMX tile loads take addresses)."""
    load = e.args[0] if e.args else None
    if not isinstance(load, E.BufferLoad):
        raise CompileError(f"{cg.func_name}: tir.address_of takes a buffer element (buf[i]), got {load}")
    return cg._address(load.buffer, cg._index(load))


def _prefetch(cg, e) -> str:
    """tir.prefetch(tir.address_of(buf[i])): ask for that cache line ahead of its use (into L2:
    llvm.prefetch read, locality 2, data). Never faults, whatever the address."""
    ptr = cg.expr(e.args[0])
    cg.mw.declare("llvm.prefetch.p0", "declare void @llvm.prefetch.p0(ptr, i32, i32, i32)")
    cg.fw.emit_void(f"call void @llvm.prefetch.p0(ptr {ptr}, i32 0, i32 2, i32 1)")
    return "0"


def _likely(cg, e) -> str:
    return cg.expr(e.args[0])


def _if_then_else(cg, e) -> str:
    cond, then, other = e.args
    if isinstance(cond, E.IntImm):
        return cg.expr(then if cond.value else other)
    if cond.dtype.lanes > 1:
        return _if_then_else_lanes(cg, e)
    c = cg.expr(cond)
    fw = cg.fw
    then_l, else_l, end_l = fw.label("ite.then"), fw.label("ite.else"), fw.label("ite.end")
    fw.cond_br(c, then_l, else_l)
    fw.start_block(then_l)
    tv = cg.cast(cg.expr(then), then.dtype, e.dtype)
    then_end = fw.block
    fw.br(end_l)
    fw.start_block(else_l)
    fv = cg.cast(cg.expr(other), other.dtype, e.dtype)
    else_end = fw.block
    fw.br(end_l)
    fw.start_block(end_l)
    return fw.emit(f"phi {llvm_type(e.dtype)} [ {tv}, %{then_end} ], [ {fv}, %{else_end} ]")


def _if_then_else_lanes(cg, e) -> str:
    """A vector condition: decide lane by lane, so no lane loads what its condition excludes."""
    dt = e.dtype
    vec = "poison"
    for lane in range(dt.lanes):
        scalar = _Lane(cg, lane).visit(e)
        vec = cg.insert(vec, dt, cg.expr(scalar), lane)
    return vec


class _Lane(Mutator):
    """Lane k of a vector expression as a scalar expression."""

    def __init__(self, cg, lane: int):
        super().__init__()
        self.cg, self.lane = cg, lane

    def visit_Ramp(self, r):
        base = self.visit(r.base)
        return base + self.visit(r.stride) * self.lane if self.lane else base

    def visit_Broadcast(self, b):
        return self.visit(b.value)

    def visit_Var(self, v):
        if v.dtype.lanes == 1:
            return v
        scalar = E.Var(f"{v.name}.l{self.lane}", v.dtype.element_of())
        self.cg.vars[scalar] = self.cg.extract(self.cg.vars[v], v.dtype, self.lane)
        return scalar

    visit_SizeVar = visit_Var

    def visit_BufferLoad(self, load):
        (index,) = load.indices
        if index.dtype.lanes == 1 and load.dtype.lanes > 1:  # vload: contiguous from index
            index = index + self.lane if self.lane else index
        else:
            index = self.visit(index)
        return E.BufferLoad(load.buffer, (index,), load.dtype.element_of())

    def generic_visit(self, node):
        node = super().generic_visit(node)
        dt = getattr(node, "dtype", None)
        if isinstance(node, E.PrimExpr) and isinstance(dt, DType) and dt.lanes > 1:
            node = dataclasses.replace(node, dtype=dt.element_of())
        return node


_SPECIAL = {
    "rsqrt": _rsqrt, "sigmoid": _sigmoid, "abs": _abs, "isnan": _fclass("isnan"),
    "isinf": _fclass("isinf"), "isfinite": _fclass("isfinite"), "fmod": _fmod,
    "bitwise_and": _bitwise("and"), "bitwise_or": _bitwise("or"), "bitwise_xor": _bitwise("xor"),
    "bitwise_not": _bitwise_not, "shift_left": _bitwise("shl"), "shift_right": _shift_right,
    "popcount": _popcount, "clz": _clz, "fma": _fma, "reinterpret": _reinterpret,
    "likely": _likely, "prefetch": _prefetch, "if_then_else": _if_then_else, "fabs": _abs, "address_of": _address_of,
    "kiln_launch": lambda cg, e: _launch("emit_launch", cg, e),
    "kiln_device_alloc": lambda cg, e: _launch("emit_alloc", cg, e),
    "kiln_device_free": lambda cg, e: _launch("emit_free", cg, e),
    "kiln_device_alloc_texture": lambda cg, e: _launch("emit_alloc_texture", cg, e),
}


def _launch(name, cg, e):
    from . import launch

    return getattr(launch, name)(cg, e)

