"""Expressions of the loop IR as LLVM instructions (scalars and vectors alike).

Semantics follow kiln/ir/expr.py: Div/Mod on integers truncate like C, FloorDiv/FloorMod
round toward minus infinity, float comparisons are ordered except !=, Min/Max propagate NaN
like numpy.minimum/maximum. Signed int32/int64 add/sub/mul carry `nsw` (C's rule, and what
lets LLVM widen 32-bit index arithmetic into addressing modes); narrower types wrap.
"""

from __future__ import annotations

from ...errors import CompileError, InternalError
from ...ir import expr as E
from ...ir.dtype import DType
from .ir import float_literal, llvm_type, mangle, scalar_type


def int_literal(value: int, dt: DType) -> str:
    if dt.is_bool:
        return "true" if value else "false"
    bits = dt.bits
    value &= (1 << bits) - 1
    if value >= 1 << (bits - 1):
        value -= 1 << bits
    return str(value)


class ExprCodegen:
    """Mixin: needs self.fw (FunctionWriter), self.mw (ModuleWriter), self.vars, self.func_name."""

    _ICMP = {"EQ": ("eq", "eq"), "NE": ("ne", "ne"), "LT": ("slt", "ult"), "LE": ("sle", "ule"),
             "GT": ("sgt", "ugt"), "GE": ("sge", "uge")}
    _FCMP = {"EQ": "oeq", "NE": "une", "LT": "olt", "LE": "ole", "GT": "ogt", "GE": "oge"}

    def expr(self, e) -> str:
        method = self._expr_table.get(type(e))
        if method is None:
            method = getattr(type(self), "expr_" + type(e).__name__, None)
            if method is None:
                raise CompileError(f"{self.func_name}: the LLVM backend cannot compile "
                                   f"{type(e).__name__} expressions ({e}); lower it first")
            self._expr_table[type(e)] = method
        return method(self, e)

    # Leaves -------------------------------------------------------------------------------------
    def expr_IntImm(self, e) -> str:
        return int_literal(e.value, e.dtype)

    def expr_FloatImm(self, e) -> str:
        return float_literal(e.value, e.dtype)

    def expr_Var(self, e) -> str:
        value = self.vars.get(e)
        if value is None:
            raise CompileError(f"{self.func_name}: variable {e.name!r} ({e.dtype}) is used but never "
                               "defined (not a parameter, loop variable, let or buffer shape)")
        return value

    expr_SizeVar = expr_Var

    def expr_StringImm(self, e) -> str:
        return self.mw.string(e.value)

    # Vectors ------------------------------------------------------------------------------------
    def splat(self, value: str, dt: DType) -> str:
        """A vector of dt.lanes copies of the scalar operand value."""
        ty, elem = llvm_type(dt), scalar_type(dt)
        one = self.fw.emit(f"insertelement <{dt.lanes} x {elem}> poison, {elem} {value}, i32 0")
        return self.fw.emit(f"shufflevector {ty} {one}, {ty} poison, <{dt.lanes} x i32> zeroinitializer")

    def const_vector(self, values: list, dt: DType) -> str:
        elem = scalar_type(dt)
        return "<" + ", ".join(f"{elem} {v}" for v in values) + ">"

    def expr_Broadcast(self, e) -> str:
        return self.splat(self.expr(e.value), e.dtype)

    def expr_Ramp(self, e) -> str:
        dt = e.dtype
        base = self.splat(self.expr(e.base), dt)
        if isinstance(e.stride, E.IntImm):
            steps = self.const_vector([int_literal(i * e.stride.value, dt) for i in range(e.lanes)], dt)
        else:
            iota = self.const_vector([str(i) for i in range(e.lanes)], dt)
            steps = self.fw.emit(f"mul {llvm_type(dt)} {self.splat(self.expr(e.stride), dt)}, {iota}")
        return self.fw.emit(f"add {llvm_type(dt)} {base}, {steps}")

    def extract(self, vec: str, dt: DType, lane: int) -> str:
        return self.fw.emit(f"extractelement {llvm_type(dt)} {vec}, i32 {lane}")

    def insert(self, vec: str, dt: DType, value: str, lane: int) -> str:
        return self.fw.emit(f"insertelement {llvm_type(dt)} {vec}, {scalar_type(dt)} {value}, i32 {lane}")

    # Operators ----------------------------------------------------------------------------------
    def binary(self, op: str, a: str, b: str, dt: DType, flags: str = "") -> str:
        return self.fw.emit(f"{op}{' ' + flags if flags else ''} {llvm_type(dt)} {a}, {b}")

    def _arith(self, e, int_op: str, float_op: str) -> str:
        a, b, dt = self.expr(e.a), self.expr(e.b), e.dtype
        if dt.is_float:
            # `contract` lets LLVM fuse a*b+c into one FMA (single rounding, as BLAS does); it
            # never reassociates, so reductions keep their order.
            return self.binary(float_op, a, b, dt, "contract")
        flags = "nsw" if dt.is_int and dt.bits >= 32 and int_op != "sdiv" else ""
        return self.binary(int_op, a, b, dt, flags)

    def expr_Add(self, e) -> str:
        return self._arith(e, "add", "fadd")

    def expr_Sub(self, e) -> str:
        return self._arith(e, "sub", "fsub")

    def expr_Mul(self, e) -> str:
        return self._arith(e, "mul", "fmul")

    def expr_Div(self, e) -> str:
        a, b, dt = self.expr(e.a), self.expr(e.b), e.dtype
        if dt.is_float:
            return self.binary("fdiv", a, b, dt)
        return self.binary("sdiv" if dt.is_int else "udiv", a, b, dt)

    def expr_Mod(self, e) -> str:
        a, b, dt = self.expr(e.a), self.expr(e.b), e.dtype
        if dt.is_float:
            return self.binary("frem", a, b, dt)
        return self.binary("srem" if dt.is_int else "urem", a, b, dt)

    def _positive_const(self, e) -> int | None:
        b = e.b.value if isinstance(e.b, E.Broadcast) else e.b
        return b.value if isinstance(b, E.IntImm) and b.value > 0 else None

    def expr_FloorDiv(self, e) -> str:
        dt = e.dtype
        if dt.is_float:
            q = self.binary("fdiv", self.expr(e.a), self.expr(e.b), dt)
            return self.call_intrinsic("llvm.floor", dt, [q])
        if not dt.is_int:
            return self.binary("udiv", self.expr(e.a), self.expr(e.b), dt)
        a, ty = self.expr(e.a), llvm_type(dt)
        k = self._positive_const(e)
        if k is not None and k & (k - 1) == 0:
            # Arithmetic shift rounds toward minus infinity: exactly floor division by 2^n.
            return self.binary("ashr", a, self._const(k.bit_length() - 1, dt), dt)
        b = self.expr(e.b)
        q = self.binary("sdiv", a, b, dt)
        r = self.binary("srem", a, b, dt)
        return self.binary("sub", q, self.fw.emit(f"zext {self._bool_ty(dt)} {self._floor_adjust(r, b, dt, k)} to {ty}"), dt)

    def expr_FloorMod(self, e) -> str:
        dt = e.dtype
        if dt.is_float:
            a, b = self.expr(e.a), self.expr(e.b)
            q = self.call_intrinsic("llvm.floor", dt, [self.binary("fdiv", a, b, dt)])
            return self.binary("fsub", a, self.binary("fmul", q, b, dt), dt)
        if not dt.is_int:
            return self.binary("urem", self.expr(e.a), self.expr(e.b), dt)
        a = self.expr(e.a)
        k = self._positive_const(e)
        if k is not None and k & (k - 1) == 0:
            return self.binary("and", a, self._const(k - 1, dt), dt)
        b = self.expr(e.b)
        r = self.binary("srem", a, b, dt)
        adjust = self._floor_adjust(r, b, dt, k)
        ty = llvm_type(dt)
        add = self.fw.emit(f"select {self._bool_ty(dt)} {adjust}, {ty} {b}, {ty} {self._const(0, dt)}")
        return self.binary("add", r, add, dt)

    def _floor_adjust(self, r: str, b: str, dt: DType, k: int | None) -> str:
        """i1: the truncating quotient must drop by one (nonzero remainder, signs differ)."""
        ty, zero = llvm_type(dt), self._const(0, dt)
        if k is not None:  # b > 0: signs differ exactly when r < 0
            return self.fw.emit(f"icmp slt {ty} {r}, {zero}")
        nonzero = self.fw.emit(f"icmp ne {ty} {r}, {zero}")
        differ = self.fw.emit(f"icmp slt {ty} {self.binary('xor', r, b, dt)}, {zero}")
        return self.binary("and", nonzero, differ, DType("bool", 1, dt.lanes))

    def _bool_ty(self, dt: DType) -> str:
        return "i1" if dt.lanes == 1 else f"<{dt.lanes} x i1>"

    def _const(self, value: int, dt: DType) -> str:
        lit = int_literal(value, dt)
        if dt.lanes == 1:
            return lit
        return self.const_vector([lit] * dt.lanes, dt)

    def expr_Min(self, e) -> str:
        return self._minmax(e, "minimum", "smin", "umin")

    def expr_Max(self, e) -> str:
        return self._minmax(e, "maximum", "smax", "umax")

    def _minmax(self, e, fname: str, sname: str, uname: str) -> str:
        dt = e.dtype
        name = fname if dt.is_float else sname if dt.is_int else uname
        return self.call_intrinsic(f"llvm.{name}", dt, [self.expr(e.a), self.expr(e.b)])

    def _compare(self, e) -> str:
        a, b, dt = self.expr(e.a), self.expr(e.b), e.a.dtype
        kind = type(e).__name__
        if dt.is_float:
            return self.fw.emit(f"fcmp {self._FCMP[kind]} {llvm_type(dt)} {a}, {b}")
        signed, unsigned = self._ICMP[kind]
        pred = signed if dt.is_int else unsigned
        return self.fw.emit(f"icmp {pred} {llvm_type(dt)} {a}, {b}")

    expr_EQ = expr_NE = expr_LT = expr_LE = expr_GT = expr_GE = _compare

    def expr_And(self, e) -> str:
        return self.binary("and", self.expr(e.a), self.expr(e.b), e.dtype)

    def expr_Or(self, e) -> str:
        return self.binary("or", self.expr(e.a), self.expr(e.b), e.dtype)

    def expr_Not(self, e) -> str:
        return self.binary("xor", self.expr(e.a), self._const(1, e.dtype), e.dtype)

    def expr_Select(self, e) -> str:
        c, a, b = self.expr(e.condition), self.expr(e.true_value), self.expr(e.false_value)
        ty = llvm_type(e.dtype)
        cond = e.condition.dtype
        if cond.lanes == 1 and e.dtype.lanes > 1:
            c = self.splat(c, cond.with_lanes(e.dtype.lanes))
            cond = cond.with_lanes(e.dtype.lanes)
        return self.fw.emit(f"select {llvm_type(cond)} {c}, {ty} {a}, {ty} {b}")

    def expr_Let(self, e) -> str:
        old = self.vars.get(e.var)
        self.vars[e.var] = self.expr(e.value)
        try:
            return self.expr(e.body)
        finally:
            if old is None:
                del self.vars[e.var]
            else:
                self.vars[e.var] = old

    # Casts --------------------------------------------------------------------------------------
    def expr_Cast(self, e) -> str:
        from .intrin import rounded_to_int32

        v = rounded_to_int32(self, e)
        return v if v is not None else self.cast(self.expr(e.value), e.value.dtype, e.dtype)

    def cast(self, v: str, src: DType, dst: DType) -> str:
        if src.lanes != dst.lanes:
            if src.lanes == 1:
                return self.splat(self.cast(v, src, dst.element_of()), dst)
            raise CompileError(f"{self.func_name}: cannot cast {src} to {dst}: lane counts differ")
        if src == dst:
            return v
        if (src.kind == "bfloat") != (dst.kind == "bfloat"):
            return self._cast_bfloat16(v, src, dst)
        st, dt_ = llvm_type(src), llvm_type(dst)
        if dst.is_bool:
            if src.is_float:
                return self.fw.emit(f"fcmp une {st} {v}, {self._zero(src)}")
            return self.fw.emit(f"icmp ne {st} {v}, {self._zero(src)}")
        if src.is_float and dst.is_float:
            op = "fpext" if dst.bits > src.bits else "fptrunc"
            return self.fw.emit(f"{op} {st} {v} to {dt_}")
        if src.is_float:
            return self.fw.emit(f"{'fptosi' if dst.is_int else 'fptoui'} {st} {v} to {dt_}")
        if dst.is_float:
            return self.fw.emit(f"{'sitofp' if src.is_int else 'uitofp'} {st} {v} to {dt_}")
        if src.is_handle or dst.is_handle:
            op = "ptrtoint" if src.is_handle else "inttoptr"
            return self.fw.emit(f"{op} {st} {v} to {dt_}")
        if dst.bits == src.bits:
            return v
        if dst.bits < src.bits:
            return self.fw.emit(f"trunc {st} {v} to {dt_}")
        return self.fw.emit(f"{'sext' if src.is_int else 'zext'} {st} {v} to {dt_}")

    def _cast_bfloat16(self, v: str, src: DType, dst: DType) -> str:
        """To or from bfloat16, through float32 (bf16.py: LLVM's own rounding is a libcall)."""
        from .bf16 import round_to_bfloat16, widen_bfloat16

        wide = DType("float", 32, src.lanes)
        if src.kind == "bfloat":
            return self.cast(widen_bfloat16(self, v, src), wide, dst)
        return round_to_bfloat16(self, self.cast(v, src, wide), wide)

    def _zero(self, dt: DType) -> str:
        if dt.is_float:
            lit = float_literal(0.0, dt)
            return lit if dt.lanes == 1 else self.const_vector([lit] * dt.lanes, dt)
        return self._const(0, dt)

    # Calls --------------------------------------------------------------------------------------
    def call_intrinsic(self, name: str, dt: DType, args: list[str], arg_types: list[DType] | None = None) -> str:
        """Call an overloaded LLVM intrinsic such as llvm.exp on dt (all args of type dt)."""
        full = f"{name}.{mangle(dt)}"
        ty = llvm_type(dt)
        types = [llvm_type(t) for t in arg_types] if arg_types else [ty] * len(args)
        self.mw.declare(full, f"declare {ty} @{full}({', '.join(types)})")
        return self.fw.emit(f"call {ty} @{full}({', '.join(f'{t} {a}' for t, a in zip(types, args))})")

    def expr_Call(self, e) -> str:
        from .intrin import emit_call

        return emit_call(self, e)

    def expr_BufferLoad(self, e) -> str:
        return self.load(e)

    def expr_ProducerLoad(self, e) -> str:
        raise InternalError(f"{self.func_name}: a TE tensor access {e} reached code generation; "
                            "lowering should have turned it into a buffer access")

    def expr_Reduce(self, e) -> str:
        raise InternalError(f"{self.func_name}: a Reduce expression reached code generation; "
                            "lowering should have turned it into loops")
