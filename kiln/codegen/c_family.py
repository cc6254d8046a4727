"""Kernel PrimFuncs as C-like source: one tree walk, per-language spellings in a table.

OpenCL C, CUDA C and plain C differ in a few words (address-space qualifiers, thread
indices, barriers, vector types and literals, math function names), not in structure, so a
printer is ``CStylePrinter(LANG)`` with a ``Lang`` naming those words (the idea of tinygrad's
renderer/cstyle.py). Input: a kernel from split_host_device (flattened buffers, thread
indices bound by LetStmt to Vars named "blockIdx.x" ...). Expressions are printed fully
parenthesized; every Var gets a unique C identifier.
"""

from __future__ import annotations

import math
import re
import struct
from dataclasses import dataclass, field

from ..errors import CompileError
from ..ir import expr as E
from ..ir.dtype import DType
from ..ir.stmt import ForKind
from ..tir.simplify import Analyzer


@dataclass
class Lang:
    kernel_prefix: str  # before "void name(...)"
    buffer_param: str  # "{qual}{type}* restrict {name}" style format with {type} {name}
    global_qual: str  # address space of global pointers in casts ("__global ")
    shared_decl: str  # declaration prefix of shared arrays ("__local ")
    barrier: str
    thread_index: dict  # tag -> expression text
    types: dict  # (kind, bits) -> scalar type name
    vector_type: str = "{t}{n}"  # float4
    vector_literal: str = "(({vt})({args}))"  # OpenCL: (float4)(a, b, c, d)
    vector_cast: str = "convert_{vt}({x})"
    vload: str = "vload{n}(0, {ptr})"  # unaligned vector load of n elements at ptr
    vstore: str = "vstore{n}({v}, 0, {ptr})"
    lane: str = "({x}).s{k:x}"  # lane k of a vector value
    math: dict = field(default_factory=dict)  # tir name -> function name (per float bits)
    infinity: str = "INFINITY"
    nan: str = "NAN"
    float_suffix: dict = field(default_factory=lambda: {16: "h", 32: "f", 64: ""})
    int64_suffix: str = "L"
    unroll_pragma: str = "#pragma unroll"
    align: str = " __attribute__((aligned({n})))"  # after an array declarator
    reinterpret: str = "as_{t}({x})"  # same bits seen as another type
    preamble: str = ""
    extensions: dict = field(default_factory=dict)  # (kind, bits) -> pragma needed to use the type


ALIGN = 64  # bytes: shared and private arrays are declared so aligned (any vector up to float16)
_FLOAT_MATH = ("exp", "exp2", "exp10", "log", "log2", "log10", "sqrt", "rsqrt", "sin", "cos", "tan",
               "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "floor", "ceil",
               "trunc", "round", "fabs", "erf", "erfc", "log1p", "expm1", "cbrt", "pow", "atan2",
               "fmod", "hypot", "copysign", "fma", "lgamma", "tgamma", "nextafter", "fdim")


_RESERVED = set("""auto break case char const continue default do double else enum extern float for goto if
inline int long register restrict return short signed sizeof static struct switch typedef union unsigned
void volatile while bool half uchar ushort uint ulong kernel global local constant private read_only
write_only read_write image2d_t image3d_t sampler_t event_t true false select min max exp log sqrt
fabs fmin fmax pow floor ceil mad dot cross vload vstore barrier get_group_id get_local_id
get_global_id threadIdx blockIdx blockDim gridDim __shared__ __device__ __global__""".split())


def _ident(name: str) -> str:
    out = re.sub(r"[^0-9A-Za-z_]", "_", name) or "v"
    if out[0].isdigit():
        out = "v_" + out
    if out in _RESERVED or out.startswith("__") or re.fullmatch(r"(float|int|char|short|long|uchar|ushort|uint|ulong|double|half)\d+", out):
        out += "_"
    return out


class CStylePrinter:
    """Prints one kernel PrimFunc; ``print_kernel(func)`` returns its source text."""

    def __init__(self, lang: Lang):
        self.lang = lang
        self.names: dict = {}
        self.used: set = set()
        self.lines: list[str] = []
        self.indent = 1
        self.analyzer = Analyzer()
        self.needs: set = set()  # helper functions / extensions used
        self.aligned: dict = {}  # id(buffer data) -> alignment in elements known for its base
        self.promote = False  # print int32 index arithmetic in 64 bits (huge buffers)
        self.declared: set = set()  # ids of Vars declared so far in the kernel

    # Names and types -------------------------------------------------------------------------
    def name(self, v: E.Var) -> str:
        got = self.names.get(id(v))
        if got is None:
            base = _ident(v.name)
            got, k = base, 0
            while got in self.used:
                k += 1
                got = f"{base}_{k}"
            self.used.add(got)
            self.names[id(v)] = got
        return got

    def scalar_type(self, dt: DType) -> str:
        key = (dt.kind, dt.bits)
        t = self.lang.types.get(key)
        if t is None:
            raise CompileError(f"{self.func_name}: type {dt} has no {self.lang.kernel_prefix.split()[0]} spelling")
        if key in self.lang.extensions:
            self.needs.add(self.lang.extensions[key])
        return t

    def storage_type(self, dt: DType) -> str:
        """Element type of a buffer in memory: bools are bytes (kernels may not point to bool)."""
        return self.scalar_type(DType("uint", 8)) if dt.is_bool else self.scalar_type(dt)

    def type(self, dt: DType) -> str:
        if dt.lanes > 1 and dt.is_bool:
            dt = DType("int", 32, dt.lanes)  # what vector comparisons of 32-bit values give
        t = self.scalar_type(dt.element_of() if dt.lanes > 1 else dt)
        if dt.lanes == 1:
            return t
        if dt.lanes not in (2, 3, 4, 8, 16):
            raise CompileError(f"{self.func_name}: vectors of {dt.lanes} lanes have no type in this language; "
                               "vectorize by 2, 4, 8 or 16")
        return self.lang.vector_type.format(t=t, n=dt.lanes)

    def emit(self, line: str) -> None:
        self.lines.append("  " * self.indent + line)

    # Kernels -----------------------------------------------------------------------------------
    def print_kernel(self, func) -> str:
        self.func_name = func.attrs["global_symbol"]
        self.thread_vars = {}
        for tag, v in func.attrs.get("thread_vars", {}).items():
            ext = func.attrs["thread_extent"][tag]
            self.thread_vars[id(v)] = self.lang.thread_index[tag]
            self.analyzer.bind_bounds(v, 0, ext.value - 1 if isinstance(ext, E.IntImm) else math.inf)
        params = []
        for p in func.params:
            buf = func.buffer_map.get(p)
            if buf is not None:
                params.append(self.lang.buffer_param.format(type=self.storage_type(buf.dtype), name=self.name(p)))
                self.aligned[id(p)] = 1 << 30  # a buffer argument's base is aligned for any vector
            else:
                if not (p.dtype.is_int or p.dtype.is_uint or p.dtype.is_float):
                    raise CompileError(f"{self.func_name}: kernel parameter {p.name} of type {p.dtype} cannot be passed")
                params.append(f"{self.type(p.dtype)} {self.name(p)}")
                if p.dtype.is_int:
                    self.analyzer.bind_bounds(p, 0 if isinstance(p, E.SizeVar) else -math.inf, math.inf)
        shared = self._hoist_shared(func.body)
        body_start = len(self.lines)
        for buf, n in shared:
            self.emit(f"{self.lang.shared_decl}{self.storage_type(buf.dtype)} {self.name(buf.data)}[{n}]{self.lang.align.format(n=ALIGN)};")
            self.aligned[id(buf.data)] = ALIGN
        self.stmt(func.body)
        body = self.lines[body_start:]
        sig = f"{self.lang.kernel_prefix} void {self.func_name}({', '.join(params)})"
        attrs = self._kernel_attrs(func)
        return "\n".join([f"{attrs}{sig} {{", *body, "}"]) + "\n"

    def _kernel_attrs(self, func) -> str:
        return ""

    def _hoist_shared(self, body) -> list:
        from ..ir.functor import Visitor

        found = []

        class _Find(Visitor):
            def visit_Allocate(self, op):
                if op.buffer.scope == "shared":
                    found.append(op)
                self.generic_visit(op)

        _Find().visit(body)
        out, seen = [], set()
        for op in found:  # an unrolled loop holds copies of one allocation: declare it once
            if id(op.buffer.data) not in seen:
                seen.add(id(op.buffer.data))
                out.append((op.buffer, _const_size(op, self.func_name)))
        return out

    # Statements ---------------------------------------------------------------------------------
    def stmt(self, s) -> None:
        method = getattr(self, "stmt_" + type(s).__name__, None)
        if method is None:
            raise CompileError(f"{self.func_name}: cannot print {type(s).__name__} in a GPU kernel")
        method(s)

    def stmt_SeqStmt(self, s) -> None:
        for part in s.seq:
            self.stmt(part)

    def stmt_Evaluate(self, s) -> None:
        v = s.value
        if isinstance(v, E.Call) and v.op == "tir.tvm_storage_sync":
            self.emit(self.lang.barrier)
            return
        if isinstance(v, (E.IntImm, E.FloatImm, E.StringImm)):
            return
        self.emit(self.expr(v) + ";")

    def declare(self, v) -> tuple:
        """A C name for a declaration of v. Unrolling copies statements with their Vars, so one
        Var may be declared again in the same C scope: each later declaration gets a fresh name
        for its extent (restore() puts the old one back)."""
        old = self.names.get(id(v))
        if id(v) in self.declared:
            del self.names[id(v)]
        self.declared.add(id(v))
        return self.name(v), old

    def restore(self, v, old) -> None:
        if old is not None:
            self.names[id(v)] = old

    def stmt_LetStmt(self, s) -> None:
        value = self.expr(s.value)
        name, old = self.declare(s.var)
        self.emit(f"{self.type(s.var.dtype)} {name} = {value};")
        if s.var.dtype.is_int:
            lo, hi = self.analyzer.const_bound(s.value)
            self.analyzer.bind_bounds(s.var, lo, hi)
        self.stmt(s.body)
        self.restore(s.var, old)

    def stmt_AttrStmt(self, s) -> None:
        self.stmt(s.body)

    def stmt_AssertStmt(self, s) -> None:
        self.stmt(s.body)  # kernels cannot report; the host checked what it could

    def stmt_IfThenElse(self, s) -> None:
        self.emit(f"if {_parens(self.expr(s.condition))} {{")
        self._block(s.then_case)
        if s.else_case is not None:
            self.emit("} else {")
            self._block(s.else_case)
        self.emit("}")

    def _block(self, s) -> None:
        self.indent += 1
        self.stmt(s)
        self.indent -= 1

    def stmt_For(self, s) -> None:
        if s.kind == ForKind.PARALLEL:
            raise CompileError(f"{self.func_name}: loop {s.loop_var.name} is parallel() inside a GPU kernel; "
                               "bind it to a thread axis instead")
        if s.kind == ForKind.UNROLLED and self.lang.unroll_pragma:
            self.emit(self.lang.unroll_pragma)
        v = self.name(s.loop_var)
        t = self.type(s.loop_var.dtype)
        lo, ext = self.expr(s.min), s.extent
        end = self.expr(E.Add(s.min, ext, s.min.dtype)) if not _is_zero(s.min) else self.expr(ext)
        lo_b = self.analyzer.const_bound(s.min)
        hi_b = self.analyzer.const_bound(E.Add(s.min, ext, s.min.dtype))
        self.analyzer.bind_bounds(s.loop_var, lo_b[0], hi_b[1] - 1)
        self.emit(f"for ({t} {v} = {lo}; {v} < {end}; ++{v}) {{")
        self._block(s.body)
        self.emit("}")

    def stmt_While(self, s) -> None:
        self.emit(f"while ({self.expr(s.condition)}) {{")
        self._block(s.body)
        self.emit("}")

    def stmt_Allocate(self, s) -> None:
        scope = s.buffer.scope
        if scope == "shared":
            self.stmt(s.body)  # declared at the top of the kernel
            return
        if scope != "local":
            raise CompileError(f"{self.func_name}: buffer {s.buffer.name} of scope {scope} cannot be allocated "
                               "inside a kernel; give the stage scope 'local' or 'shared'")
        n = _const_size(s, self.func_name)
        name, old = self.declare(s.buffer.data)
        self.emit(f"{self.storage_type(s.buffer.dtype)} {name}[{n}]{self.lang.align.format(n=ALIGN)};")
        self.aligned[id(s.buffer.data)] = ALIGN
        self.stmt(s.body)
        self.restore(s.buffer.data, old)

    def stmt_BufferStore(self, s) -> None:
        buf, idx = s.buffer, s.indices[0]
        if len(s.indices) != 1:
            raise CompileError(f"{self.func_name}: store to {buf.name} is not flattened")
        lanes = s.value.dtype.lanes
        ptr = self.name(buf.data)
        if lanes == 1:
            value = self.expr(s.value)
            if buf.dtype.is_bool:
                value = f"(({self.storage_type(buf.dtype)}){value})"
            self.emit(f"{ptr}[{self.index(idx, buf)}] = {value};")
            return
        if buf.dtype.is_bool:
            raise CompileError(f"{self.func_name}: vector stores of bool buffer {buf.name} are not supported; "
                               "do not vectorize this loop")
        base = _contiguous(idx)
        if base is not None:
            if self._aligned(buf, base, lanes):
                vt = self.type(s.value.dtype)
                self.emit(f"*(({self._qual(buf)}{vt}*)({ptr} + {self.index(base, buf)})) = {self.expr(s.value)};")
            else:
                self.emit(self.lang.vstore.format(n=lanes, v=self.expr(s.value), ptr=f"{ptr} + {self.index(base, buf)}") + ";")
            return
        v = self.fresh_value(s.value)
        for k in range(lanes):
            self.emit(f"{ptr}[{self.lane_of(idx, k)}] = {self.lang.lane.format(x=v, k=k)};")

    def fresh_value(self, e) -> str:
        tmp = self.name(E.Var("vec", e.dtype))
        self.emit(f"{self.type(e.dtype)} {tmp} = {self.expr(e)};")
        return tmp

    def _qual(self, buf) -> str:
        return self.lang.shared_decl if buf.scope == "shared" else ("" if buf.scope == "local" else self.lang.global_qual)

    def _aligned(self, buf, base, lanes: int) -> bool:
        """Whether base (elements) is a multiple of lanes and the buffer's start is vector aligned."""
        if self.aligned.get(id(buf.data), 1) < lanes * buf.dtype.bits // 8:
            return False
        return _multiple_of(base, lanes, self.analyzer)

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
        if isinstance(e, E.Ramp):
            return self.expr(E.Add(e.base, E.Mul(e.stride, E.const(k, e.stride.dtype), e.stride.dtype), e.base.dtype))
        if isinstance(e, E.Broadcast):
            return self.expr(e.value)
        return self.lang.lane.format(x=self.expr(e), k=k)

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
        if name == "sigmoid":
            x = self.expr(args[0])
            one = self.expr(E.const(1.0, e.dtype.element_of()) if e.dtype.lanes == 1 else
                            E.Broadcast(E.const(1.0, e.dtype.element_of()), e.dtype.lanes, e.dtype))
            return f"({one} / ({one} + exp(-{x})))"
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


def _parens(text: str) -> str:
    """text in exactly one pair of parentheses (compilers warn about `if ((a == b))`)."""
    if text.startswith("(") and text.endswith(")"):
        depth = 0
        for k, c in enumerate(text):
            depth += c == "("
            depth -= c == ")"
            if depth == 0 and k < len(text) - 1:
                return f"({text})"
        return text
    return f"({text})"


def _const_size(op, func_name: str) -> int:
    n = 1
    for x in op.extents:
        if not isinstance(x, E.IntImm):
            raise CompileError(f"{func_name}: {op.buffer.scope} buffer {op.buffer.name} has symbolic size {x}; "
                               "GPU shared and local memory need constant sizes")
        n *= x.value
    return n


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
