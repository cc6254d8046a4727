"""Expressions of kernel PrimFuncs as C-like source (the expression half of c_family.py).

``ExprPrinter`` is a mixin of CStylePrinter: it needs ``self.lang`` (the spellings),
``self.names``/``self.thread_vars`` (Var -> C text), ``self.analyzer`` (loop-variable bounds,
for sign-dependent division) and ``self.aligned`` (what each buffer's start is aligned to).
"""

from __future__ import annotations

import math
import struct

from ..errors import CompileError
from ..ir import expr as E
from ..tir.lanes import index_lane
from ..tir.math_expand import expand

_FLOAT_MATH = ("exp", "exp2", "exp10", "log", "log2", "log10", "sqrt", "rsqrt", "sin", "cos", "tan",
               "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "floor", "ceil",
               "trunc", "round", "fabs", "erf", "erfc", "log1p", "expm1", "cbrt", "pow", "atan2",
               "fmod", "hypot", "copysign", "fma", "lgamma", "tgamma", "nextafter", "fdim")


class ExprPrinter:
    # Expressions --------------------------------------------------------------------------------
    def index(self, e, buf) -> str:
        return self.expr(e)

    def expr(self, e) -> str:
        method = getattr(self, "expr_" + type(e).__name__, None)
        if method is None:
            raise CompileError(f"{self.func_name}: cannot print {type(e).__name__} ({e}) in a GPU kernel")
        return method(e)

    def expr_Var(self, e) -> str:
        if id(e) in self.thread_vars:
            return f"((long){self.thread_vars[id(e)]})" if self.promote else self.thread_vars[id(e)]
        if id(e) not in self.names:
            raise CompileError(f"{self.func_name}: variable {e.name} is used but not defined in the kernel")
        if self.promote and e.dtype.is_int and e.dtype.bits == 32:
            return f"((long){self.names[id(e)]})"
        return self.names[id(e)]

    expr_SizeVar = expr_Var

    def expr_IntImm(self, e) -> str:
        if e.dtype.is_bool:
            return "1" if e.value else "0"
        if e.dtype.bits == 64 or (self.promote and e.dtype.is_int and e.dtype.bits == 32):
            return f"{e.value}{self.lang.int64_suffix}"
        if e.dtype.is_uint:
            return f"{e.value}u"
        if e.dtype.bits < 32:
            return f"(({self.type(e.dtype)}){e.value})"
        if e.value == -2 ** 31:
            return "(-2147483647 - 1)"
        return str(e.value)

    def expr_FloatImm(self, e) -> str:
        v = e.value
        if math.isnan(v):
            return f"(({self.type(e.dtype)}){self.lang.nan})"
        if math.isinf(v):
            return f"(({self.type(e.dtype)}){'-' if v < 0 else ''}{self.lang.infinity})"
        if e.dtype.bits == 32:
            v = struct.unpack("<f", struct.pack("<f", v))[0]
        text = repr(float(v))
        if "e" not in text and "." not in text:
            text += ".0"
        if e.dtype.bits == 16:
            return f"((half){text}f)"
        return text + self.lang.float_suffix.get(e.dtype.bits, "")

    def expr_StringImm(self, e) -> str:
        raise CompileError(f"{self.func_name}: strings cannot appear in GPU kernels ({e.value!r})")

    def expr_Cast(self, e) -> str:
        src, dst = e.value.dtype, e.dtype
        if dst.lanes > 1:
            if src.lanes == 1:
                return self.lang.vector_literal.format(vt=self.type(dst), args=self.expr(E.cast(e.value, dst.element_of())))
            if src.is_bool:  # -1/0 lanes -> 1/0
                return self.lang.vector_cast.format(vt=self.type(dst), x=f"(-{self.expr(e.value)})")
            if dst.is_bool:
                return f"({self.expr(e.value)} != {self.lang.vector_literal.format(vt=self.type(src), args='0')})"
            return self.lang.vector_cast.format(vt=self.type(dst), x=self.expr(e.value))
        return f"(({self.type(dst)}){self.expr(e.value)})"

    def _binary(self, op: str, e) -> str:
        return f"({self.expr(e.a)} {op} {self.expr(e.b)})"

    def expr_Add(self, e):
        return self._binary("+", e)

    def expr_Sub(self, e):
        return self._binary("-", e)

    def expr_Mul(self, e):
        return self._binary("*", e)

    def expr_Div(self, e):
        return self._binary("/", e)

    def expr_Mod(self, e):
        if e.dtype.is_float:
            return f"fmod({self.expr(e.a)}, {self.expr(e.b)})"
        return self._binary("%", e)

    def _nonneg(self, e) -> bool:
        return self.analyzer.const_bound(e)[0] >= 0

    def expr_FloorDiv(self, e):
        if e.dtype.is_float:
            return f"floor({self.expr(e.a)} / {self.expr(e.b)})"
        if e.dtype.lanes == 1 and self._nonneg(e.a) and self._nonneg(e.b):
            return self._binary("/", e)
        a, b = self.expr(e.a), self.expr(e.b)
        # Rounds toward -inf: subtract one when the remainder is non-zero and the signs differ.
        return f"(({a} / {b}) - ((({a} % {b}) != 0) && ((({a} % {b}) < 0) != ({b} < 0))))"

    def expr_FloorMod(self, e):
        if e.dtype.is_float:
            a, b = self.expr(e.a), self.expr(e.b)
            return f"({a} - floor({a} / {b}) * {b})"
        if e.dtype.lanes == 1 and self._nonneg(e.a) and self._nonneg(e.b):
            return self._binary("%", e)
        a, b = self.expr(e.a), self.expr(e.b)
        return f"((({a} % {b}) + {b}) % {b})"

    def expr_Min(self, e):
        return f"{'fmin' if e.dtype.is_float else 'min'}({self.expr(e.a)}, {self.expr(e.b)})"

    def expr_Max(self, e):
        return f"{'fmax' if e.dtype.is_float else 'max'}({self.expr(e.a)}, {self.expr(e.b)})"

    def expr_EQ(self, e):
        return self._binary("==", e)

    def expr_NE(self, e):
        return self._binary("!=", e)

    def expr_LT(self, e):
        return self._binary("<", e)

    def expr_LE(self, e):
        return self._binary("<=", e)

    def expr_GT(self, e):
        return self._binary(">", e)

    def expr_GE(self, e):
        return self._binary(">=", e)

    def expr_And(self, e):
        return self._binary("&&", e)

    def expr_Or(self, e):
        return self._binary("||", e)

    def expr_Not(self, e):
        return f"(!{self.expr(e.a)})"

    def expr_Select(self, e):
        return self.select(e.condition, e.true_value, e.false_value)

    def select(self, c, t, f) -> str:
        lanes = t.dtype.lanes
        if lanes > 1 and c.dtype.lanes > 1:
            # Vector conditions are OpenCL's -1/0 integer vectors of the compared type's width:
            # select() needs them as wide as the values; otherwise choose lane by lane.
            if t.dtype.bits == 32 and not isinstance(c, E.Broadcast):
                return f"select({self.expr(f)}, {self.expr(t)}, {self.expr(c)})"
            tv, fv, cv = self.expr(t), self.expr(f), self.expr(c)
            lane = self.lang.lane
            parts = ", ".join(f"({lane.format(x=cv, k=k)} ? {lane.format(x=tv, k=k)} : {lane.format(x=fv, k=k)})"
                              for k in range(lanes))
            return self.lang.vector_literal.format(vt=self.type(t.dtype), args=parts)
        return f"({self.expr(c)} ? {self.expr(t)} : {self.expr(f)})"  # a scalar condition picks whole vectors

    def expr_Ramp(self, e):
        base = self.expr(e.base)
        vt = self.type(e.dtype)
        offs = ", ".join(self.expr(E.Mul(e.stride, E.const(k, e.stride.dtype), e.stride.dtype)) if k else
                         self.expr(E.const(0, e.stride.dtype)) for k in range(e.lanes))
        return f"({self.lang.vector_literal.format(vt=vt, args=base)} + {self.lang.vector_literal.format(vt=vt, args=offs)})"

    def expr_Broadcast(self, e):
        if e.dtype.is_bool:  # true is -1 in every lane, as vector comparisons give it
            return f"(-{self.lang.vector_literal.format(vt=self.type(e.dtype), args=self.expr(e.value))})"
        return self.lang.vector_literal.format(vt=self.type(e.dtype), args=self.expr(e.value))

    def expr_Let(self, e):
        from ..ir.functor import substitute

        return self.expr(substitute(e.body, {e.var: e.value}))

    def lane_of(self, e, k: int) -> str:
        """Lane k of an integer vector expression (index vectors of gathers and scatters)."""
        scalar = index_lane(e, k)
        return self.expr(scalar) if scalar is not None else self.lang.lane.format(x=self.expr(e), k=k)

    def expr_BufferLoad(self, e):
        buf, idx = e.buffer, e.indices[0]
        ptr = self.name(buf.data)
        lanes = e.dtype.lanes
        if lanes == 1:
            if buf.dtype.is_bool:
                return f"({ptr}[{self.index(idx, buf)}] != 0)"
            return f"{ptr}[{self.index(idx, buf)}]"
        if buf.dtype.is_bool:
            raise CompileError(f"{self.func_name}: vector loads of bool buffer {buf.name} are not supported; "
                               "do not vectorize this loop")
        base = _contiguous(idx)
        if base is not None:
            if self._aligned(buf, base, lanes):
                return f"(*(({self._qual(buf)}{self.type(e.dtype)}*)({ptr} + {self.index(base, buf)})))"
            return self.lang.vload.format(n=lanes, ptr=f"{ptr} + {self.index(base, buf)}")
        if isinstance(idx, E.Broadcast):
            return self.lang.vector_literal.format(vt=self.type(e.dtype), args=f"{ptr}[{self.expr(idx.value)}]")
        parts = ", ".join(f"{ptr}[{self.lane_of(idx, k)}]" for k in range(lanes))
        return self.lang.vector_literal.format(vt=self.type(e.dtype), args=parts)

    def expr_Call(self, e):
        name = e.op[4:] if e.op.startswith("tir.") else e.op
        args = e.args
        if name == "likely":
            return self.expr(args[0])
        if name == "if_then_else":
            return self.select(*args)
        if name in ("abs", "fabs"):
            return f"{'fabs' if e.dtype.is_float else 'abs'}({self.expr(args[0])})"
        if name == "sigmoid":  # no GPU language has it
            return self.expr(expand(e))
        if name in ("isnan", "isinf", "isfinite"):
            return f"{name}({self.expr(args[0])})"
        if name in ("nearbyint", "rint", "round"):
            return f"rint({self.expr(args[0])})"  # TIR rounds half to even, as rint does
        if name == "reinterpret":
            src, dst = args[0].dtype, e.dtype
            if src.bits * src.lanes != dst.bits * dst.lanes:
                raise CompileError(f"{self.func_name}: reinterpret {src} as {dst}: sizes differ")
            return self.lang.reinterpret.format(t=self.type(dst), x=self.expr(args[0]))
        if name == "clz":
            return f"clz({self.expr(args[0])})"

        if name in ("bitwise_and", "bitwise_or", "bitwise_xor", "shift_left", "shift_right"):
            op = {"bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^", "shift_left": "<<", "shift_right": ">>"}[name]
            return f"({self.expr(args[0])} {op} {self.expr(args[1])})"
        if name == "bitwise_not":
            return f"(~{self.expr(args[0])})"
        if name == "popcount":
            return f"popcount({self.expr(args[0])})"
        if name in _FLOAT_MATH:
            if not e.dtype.is_float:
                raise CompileError(f"{self.func_name}: tir.{name} needs float arguments, got {e.dtype}")
            fn = self.lang.math.get(name, name)
            if callable(fn):
                fn = fn(e.dtype)
            return f"{fn}({', '.join(self.expr(a) for a in args)})"
        if name in ("call_extern", "call_pure_extern") and args and isinstance(args[0], E.StringImm):
            return f"{args[0].value}({', '.join(self.expr(a) for a in args[1:])})"
        raise CompileError(f"{self.func_name}: no GPU spelling for call {e.op!r}")


def _contiguous(idx):
    """The base of a stride-1 Ramp index, else None."""
    if isinstance(idx, E.Ramp) and isinstance(idx.stride, E.IntImm) and idx.stride.value == 1:
        return idx.base
    return None


def _multiple_of(e, k: int, analyzer) -> bool:
    """Whether the integer expression e is provably a multiple of k."""
    if isinstance(e, E.IntImm):
        return e.value % k == 0
    if isinstance(e, E.Mul):
        return any(isinstance(x, E.IntImm) and x.value % k == 0 for x in (e.a, e.b)) or \
            _multiple_of(e.a, k, analyzer) or _multiple_of(e.b, k, analyzer)
    if isinstance(e, (E.Add, E.Sub)):
        return _multiple_of(e.a, k, analyzer) and _multiple_of(e.b, k, analyzer)
    if isinstance(e, E.FloorMod) and isinstance(e.b, E.IntImm) and e.b.value % k == 0:
        return _multiple_of(e.a, k, analyzer)
    return False


def _is_zero(e) -> bool:
    return isinstance(e, E.IntImm) and e.value == 0
