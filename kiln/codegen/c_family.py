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
from dataclasses import dataclass, field

from ..errors import CompileError
from ..ir import expr as E
from ..ir.dtype import DType
from ..ir.stmt import ForKind
from ..tir.simplify import Analyzer
from .c_family_expr import ExprPrinter, _contiguous, _is_zero, _multiple_of


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


class CStylePrinter(ExprPrinter):
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
                params.append(self.buffer_param(buf))
                self.aligned[id(p)] = 1 << 30  # a buffer argument's base is aligned for any vector
            else:
                if not (p.dtype.is_int or p.dtype.is_uint or p.dtype.is_float):
                    raise CompileError(f"{self.func_name}: kernel parameter {p.name} of type {p.dtype} cannot be passed")
                params.append(f"{self.type(p.dtype)} {self.name(p)}")
                if p.dtype.is_int:
                    dim = isinstance(p, E.SizeVar) or p in func.attrs.get("shape_vars", frozenset())
                    self.analyzer.bind_bounds(p, 0 if dim else -math.inf, math.inf)
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

    def buffer_param(self, buf) -> str:
        """A buffer parameter's declaration (a texture printer makes some of them images)."""
        return self.lang.buffer_param.format(type=self.storage_type(buf.dtype), name=self.name(buf.data))

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
