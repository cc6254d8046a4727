"""The C backend: lowered PrimFuncs -> one portable C99 translation unit (docs/microtvm.md).

The third table of the C-family printer (c_family.py; OpenCL and CUDA are the others). Each
PrimFunc becomes two C functions:

    int32_t name_unpacked(float* restrict A, float* restrict B, int32_t n);   /* the loops */
    int32_t name(const KilnValue* args, const int32_t* type_codes, int32_t num_args);

``name`` is the packed entry of docs/abi.md (DLTensor arguments), so the Python runtime and the
C runtime call a C module as they call an LLVM one; ``name_unpacked`` is what the AOT executor
calls with raw pointers. Kernels never call malloc: scratch up to STACK_BYTES lives on the
stack, larger scratch comes from ``KilnBackendAllocWorkspace``, which the runtime provides (the
module carries a weak default: a LIFO arena of ``KILN_WORKSPACE_BYTES`` static bytes, by default
the most scratch any of its functions holds at once). Parallel
loops run serially (microcontrollers have one core); vector stores become loops over lanes
(tir/transform/scalarize.py, run by C_PIPELINE). ``build`` also compiles the source with the system cc, so the module runs here
like any other; cross-compiling for a board is the micro project's job (kiln/micro/).
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
import subprocess
import tempfile

from ..errors import CompileError, KilnError
from ..ir import expr as E
from ..ir.stmt import ForKind, PrimFunc
from ..tir.math_expand import expand
from . import lowered_functions, packed
from .c_family import CStylePrinter, Lang, _const_size

_DL_CODE = {"int": 0, "uint": 1, "float": 2, "bool": 1}
STACK_BYTES = 1024  # scratch up to this size is a local array: MCU stacks are a few KiB
WORKSPACE_ALIGN = 16
DEFAULT_WORKSPACE = 64 * 1024  # the default arena when some scratch size is symbolic

_TYPES = {("float", 32): "float", ("float", 64): "double",
          ("int", 8): "int8_t", ("int", 16): "int16_t", ("int", 32): "int32_t", ("int", 64): "int64_t",
          ("uint", 8): "uint8_t", ("uint", 16): "uint16_t", ("uint", 32): "uint32_t", ("uint", 64): "uint64_t",
          ("bool", 1): "bool", ("handle", 64): "void*"}

C99 = Lang(
    kernel_prefix="",
    buffer_param="{type}* restrict {name}",
    global_qual="",
    shared_decl="",
    barrier="",
    thread_index={},
    types=_TYPES,
    vector_type="",  # no vectors: C_PIPELINE's tir.Scalarize removes them before printing
    unroll_pragma="",
    align=" __attribute__((aligned({n})))",
    int64_suffix="LL",
)

PRELUDE = r"""#include <stdint.h>
#include <stddef.h>
#include <stdbool.h>
#include <string.h>
#include <math.h>

#ifndef KILN_ABI_TYPES_DEFINED
#define KILN_ABI_TYPES_DEFINED
typedef union { int64_t v_int64; double v_float64; void* v_handle; } KilnValue;
typedef struct { int32_t device_type; int32_t device_id; } DLDevice;
typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } DLDataType;
typedef struct {
  void* data; DLDevice device; int32_t ndim; DLDataType dtype;
  int64_t* shape; int64_t* strides; uint64_t byte_offset;
} DLTensor;
#endif

#ifndef KILN_WORKSPACE_BYTES
#define KILN_WORKSPACE_BYTES @WORKSPACE@  /* the most scratch any function here holds at once */
#endif

void* KilnBackendAllocWorkspace(int32_t device_type, int32_t device_id, uint64_t nbytes,
                                int32_t dtype_code_hint, int32_t dtype_bits_hint);
int32_t KilnBackendFreeWorkspace(int32_t device_type, int32_t device_id, void* ptr);

/* The default workspace: a LIFO arena in static memory (scratch is freed in reverse order of
   allocation). A runtime that links its own KilnBackendAllocWorkspace replaces it. */
__attribute__((weak, aligned(16))) uint8_t kiln_workspace_arena[KILN_WORKSPACE_BYTES];
__attribute__((weak)) size_t kiln_workspace_top = 0;

__attribute__((weak)) void* KilnBackendAllocWorkspace(int32_t device_type, int32_t device_id, uint64_t nbytes,
                                                      int32_t dtype_code_hint, int32_t dtype_bits_hint) {
  (void)device_type; (void)device_id; (void)dtype_code_hint; (void)dtype_bits_hint;
  size_t start = (kiln_workspace_top + 15u) & ~(size_t)15u;
  if (nbytes > (uint64_t)(KILN_WORKSPACE_BYTES - start)) return NULL;
  kiln_workspace_top = start + (size_t)nbytes;
  return kiln_workspace_arena + start;
}

__attribute__((weak)) int32_t KilnBackendFreeWorkspace(int32_t device_type, int32_t device_id, void* ptr) {
  (void)device_type; (void)device_id;
  kiln_workspace_top = (size_t)((uint8_t*)ptr - kiln_workspace_arena);
  return 0;
}

static inline int32_t kiln_min_i32(int32_t a, int32_t b) { return a < b ? a : b; }
static inline int32_t kiln_max_i32(int32_t a, int32_t b) { return a > b ? a : b; }
static inline int64_t kiln_min_i64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t kiln_max_i64(int64_t a, int64_t b) { return a > b ? a : b; }
static inline uint64_t kiln_min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }
static inline uint64_t kiln_max_u64(uint64_t a, uint64_t b) { return a > b ? a : b; }
"""

# Cortex-M intrinsics (kiln/topi/cortex_m/intrin.py), included only where a function calls them.
# Off the core (the host's cc builds every c module) the same integers come from portable C.
ACLE_PRELUDE = r"""
static inline uint32_t kiln_ror32(uint32_t x, uint32_t r) { r &= 31u; return r ? (x >> r) | (x << (32u - r)) : x; }
#if defined(__ARM_FEATURE_DSP)
#include <arm_acle.h>
#else
static inline int32_t __sxtb16(uint32_t x) {
  return (int32_t)(((uint32_t)(int16_t)(int8_t)(x & 0xffu) & 0xffffu) | ((uint32_t)(int16_t)(int8_t)((x >> 16) & 0xffu) << 16));
}
static inline int32_t __smlad(uint32_t x, uint32_t y, int32_t acc) {
  return (int32_t)((uint32_t)acc + (uint32_t)((int32_t)(int16_t)x * (int16_t)y)
                   + (uint32_t)((int32_t)(int16_t)(x >> 16) * (int16_t)(y >> 16)));
}
#endif
"""
MVE_PRELUDE = r"""
#if defined(__ARM_FEATURE_MVE)
#include <arm_mve.h>
#else
#define vldrbq_s8(p) ((const int8_t*)(p))
static inline int32_t vmladavaq_s8(int32_t acc, const int8_t* a, const int8_t* b) {
  for (int i = 0; i < 16; ++i) acc += (int32_t)a[i] * b[i];
  return acc;
}
#endif
"""
# MVE int32 lanes (dw_row_mve_intrin, kiln/topi/cortex_m/intrin.py): widening byte loads, vector x
# scalar multiply-accumulates, tail predication; portable definitions elsewhere (a predicate is
# the count of active lanes, as vctp32q's argument).
MVE_I32_PRELUDE = r"""
#if defined(__ARM_FEATURE_MVE)
#include <arm_mve.h>
#else
typedef struct { int32_t v[4]; } kiln_i32x4;
static inline int32_t vctp32q(int32_t n) { return n; }
static inline kiln_i32x4 vldrbq_z_s32(const int8_t* p, int32_t n) {
  kiln_i32x4 r; for (int i = 0; i < 4; ++i) r.v[i] = i < n ? p[i] : 0; return r;
}
static inline kiln_i32x4 vldrbq_s32(const int8_t* p) { return vldrbq_z_s32(p, 4); }
static inline kiln_i32x4 vldrwq_z_s32(const int32_t* p, int32_t n) {
  kiln_i32x4 r; for (int i = 0; i < 4; ++i) r.v[i] = i < n ? p[i] : 0; return r;
}
static inline kiln_i32x4 vldrwq_s32(const int32_t* p) { return vldrwq_z_s32(p, 4); }
static inline kiln_i32x4 vmlaq_n_s32(kiln_i32x4 a, kiln_i32x4 b, int32_t w) {
  for (int i = 0; i < 4; ++i) a.v[i] = (int32_t)((uint32_t)a.v[i] + (uint32_t)b.v[i] * (uint32_t)w); return a;
}
static inline kiln_i32x4 vmulq_n_s32(kiln_i32x4 b, int32_t w) {
  for (int i = 0; i < 4; ++i) b.v[i] = (int32_t)((uint32_t)b.v[i] * (uint32_t)w); return b;
}
static inline void vstrwq_p_s32(int32_t* p, kiln_i32x4 a, int32_t n) { for (int i = 0; i < n; ++i) p[i] = a.v[i]; }
static inline void vstrwq_s32(int32_t* p, kiln_i32x4 a) { vstrwq_p_s32(p, a, 4); }
#endif
"""
# float32 round-half-even: a Cortex-M4F's FPv4 has no VRINT, and newlib's rintf is a software
# routine (~30 instructions, a call per requantized value of onnxruntime-rounded int8 models):
# there |x| + 2**23 - 2**23 rounds |x| < 2**23 to an integer half to even in the FPU (larger
# floats are integers already); the sign is put back (-0.4 -> -0.0, as rintf). Exact.
RINTF_PRELUDE = r"""
#if defined(__arm__) && defined(__ARM_FP) && (__ARM_FP == 4) && (__ARM_ARCH == 7)
static inline float kiln_rintf(float x) {
  float a = __builtin_fabsf(x);
  if (!(a < 8388608.0f)) return x;
  return __builtin_copysignf((a + 8388608.0f) - 8388608.0f, x);
}
#else
#define kiln_rintf rintf
#endif
"""
# min(max(x, -2**(n-1)), 2**(n-1) - 1) of int32 (requantize's clamp): one SSAT on Arm cores
# (ACLE __ssat), where the helpers' compares take five or six instructions.
SSAT_PRELUDE = r"""
#if defined(__ARM_FEATURE_SAT)
#include <arm_acle.h>
#define kiln_ssat(x, n) __ssat((x), (n))
#else
#define kiln_ssat(x, n) kiln_min_i32(kiln_max_i32((x), -(1 << ((n) - 1))), (1 << ((n) - 1)) - 1)
#endif
"""
# (v + 1.5 * 2**23) - 1.5 * 2**23 in float32 (NarrowRequantize's round half to even of a value
# a clamp follows): each operation rounded, as LLVM computes it. The empty asm keeps v a rounded
# float32 in a register, so GCC's default -ffp-contract=fast cannot fuse the product that made v
# into the add (a Cortex-M4F has VFMA): the fused sum rounds the exact product, not float32's.
RNE22_PRELUDE = r"""
static inline float kiln_rne22(float v) {
#if defined(__GNUC__) && defined(__arm__) && defined(__ARM_FP)
  __asm__("" : "+t"(v));
#elif defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  __asm__("" : "+x"(v));
#elif defined(__GNUC__)
  __asm__("" : "+r"(v));
#endif
  return (v + 12582912.0f) - 12582912.0f;
}
"""
# An aligned 8-byte load as one LDRD (kiln/topi/cortex_m/intrin.py's dot16_intrin: two int16 pairs
# a step): GCC tuned for the Cortex-M4 splits 64-bit loads into two LDR. The "m" operand (of a
# may_alias type) tells GCC the bytes read, so stores before it stay before it; GCC's DImode
# addresses are LDRD's (base + a multiple of 4 up to 1020). volatile keeps the loads in program
# order (each consumed by the dual MACs after it): without it GCC expands one accumulator's whole
# chain first and spills the other loads. Two 32-bit outputs rather than one 64-bit: a 64-bit
# value wants a consecutive register pair, and GCC moved halves through the stack to get one
# (the tuning template's 2 x 2 tiles: 372 k -> 303 k instructions for DS-CNN's stem).
# kiln_base hides a tile's address from GCC's
# induction-variable pass, which would otherwise keep one pointer per unrolled word, spilled.
LD64_PRELUDE = r"""
typedef int64_t kiln_i64_alias __attribute__((may_alias, aligned(4)));
#if defined(__GNUC__) && defined(__arm__) && defined(__thumb2__)
static inline int64_t kiln_ld64(const void* p, int32_t off) {
  uint32_t lo, hi;
  __asm__ volatile("ldrd %0, %1, %2" : "=r"(lo), "=r"(hi) : "m"(*(const kiln_i64_alias*)((const char*)p + off)));
  return (int64_t)(((uint64_t)hi << 32) | lo);
}
static inline void* kiln_base(const void* p) { __asm__("" : "+r"(p)); return (void*)p; }
#else
static inline int64_t kiln_ld64(const void* p, int32_t off) { int64_t v; memcpy(&v, (const char*)p + off, 8); return v; }
static inline void* kiln_base(const void* p) { return (void*)p; }
#endif
static inline int32_t kiln_lo32(int64_t v) { return (int32_t)(uint32_t)(uint64_t)v; }
static inline int32_t kiln_hi32(int64_t v) { return (int32_t)(uint32_t)((uint64_t)v >> 32); }
"""
# kiln_ssat(kiln_rne22(v) + c, n) in fewer steps: the float sum v + 1.5*2**23 holds round(v) in its
# bits (bits - 0x4B400000) while |v| < 2**22, so the integer comes from one move and one
# saturating subtract (QSUB) that also adds c, instead of subtracting the magic in float and
# converting. Out of that range the n-bit clamp after it (n <= 16, |c| <= 2**16) saturates both
# forms alike: v >= 2**22 gives bits - 0x4B400000 >= 2**22; v <= -2**22 a non-positive sum (bits
# below 0x4B000000, or a negative int32 that QSUB saturates instead of wrapping).
RNE22_ADD_PRELUDE = r"""
#if defined(__ARM_FEATURE_DSP)
#include <arm_acle.h>
#endif
static inline int32_t kiln_rne22_add(float v, int32_t c) {
#if defined(__GNUC__) && defined(__arm__) && defined(__ARM_FP)
  __asm__("" : "+t"(v));
#elif defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  __asm__("" : "+x"(v));
#elif defined(__GNUC__)
  __asm__("" : "+r"(v));
#endif
  float r = v + 12582912.0f;
  int32_t bits;
  memcpy(&bits, &r, 4);
#if defined(__ARM_FEATURE_DSP)
  return __qsub(bits, 0x4B400000 - c);
#else
  int64_t d = (int64_t)bits - (int64_t)(0x4B400000 - c);
  return d < INT32_MIN ? INT32_MIN : (int32_t)d;
#endif
}
"""
# 16 x 16 + 32 multiply-accumulates of one half of each operand (the depthwise row intrinsic:
# a tap's weight in the bottom or top half of a pair), portable off the DSP.
SMLAXY_PRELUDE = r"""
#if defined(__ARM_FEATURE_DSP)
#include <arm_acle.h>
#else
static inline int32_t __smlabb(int32_t x, int32_t y, int32_t acc) {
  return (int32_t)((uint32_t)acc + (uint32_t)((int32_t)(int16_t)x * (int16_t)y));
}
static inline int32_t __smlabt(int32_t x, int32_t y, int32_t acc) {
  return (int32_t)((uint32_t)acc + (uint32_t)((int32_t)(int16_t)x * (int16_t)((uint32_t)y >> 16)));
}
#endif
"""
ARM_PRELUDES = (("__smlad", ACLE_PRELUDE), ("__smlabb(", SMLAXY_PRELUDE), ("kiln_rne22_add(", RNE22_ADD_PRELUDE), ("kiln_ld64(", LD64_PRELUDE), ("vmladavaq_s8", MVE_PRELUDE), ("q_n_s32(", MVE_I32_PRELUDE), ("kiln_rintf(", RINTF_PRELUDE),
                ("kiln_ssat(", SSAT_PRELUDE), ("kiln_rne22(", RNE22_PRELUDE),
                ("kiln_read_s32", "static inline int32_t kiln_read_s32(const void* p) "
                                  "{ int32_t v; memcpy(&v, p, 4); return v; }  /* unaligned word */"))

ERROR_DEFS = r"""
char __kiln_last_error[512];
int32_t __kiln_num_threads = 1;

static int32_t kiln_fail(const char* msg) {
  size_t i = 0;
  for (; msg[i] != 0 && i < sizeof(__kiln_last_error) - 1; ++i) __kiln_last_error[i] = msg[i];
  __kiln_last_error[i] = 0;
  return -1;
}
"""


def _saturation_bits(e, outer=E.Min, inner=E.Max) -> int:
    """n when ``e`` is ``min(max(x, -2**(n-1)), 2**(n-1) - 1)`` (or ``max(min(x, hi), lo)``) of int32
    with 2 <= n <= 16, else 0."""
    if not (isinstance(e, outer) and e.dtype.is_int and e.dtype.bits == 32 and isinstance(e.a, inner)
            and isinstance(e.b, E.IntImm) and isinstance(e.a.b, E.IntImm)):
        return 0
    hi, lo = (e.b.value, e.a.b.value) if outer is E.Min else (e.a.b.value, e.b.value)
    n = (hi + 1).bit_length()
    return n if 2 <= n <= 16 and hi + 1 == 1 << (n - 1) and lo == -(hi + 1) else 0


def _rne22_plus(x):
    """(v, c) when int32 ``x`` is ``int32((v + 1.5*2**23) - 1.5*2**23) + c`` (or ``- c``, or no c) of
    float32 ``v`` with |c| <= 2**16, else None."""
    c = 0
    if isinstance(x, (E.Add, E.Sub)) and isinstance(x.b, E.IntImm):
        c = x.b.value if isinstance(x, E.Add) else -x.b.value
        x = x.a
    magic = 12582912.0
    if not (isinstance(x, E.Cast) and x.dtype.is_int and x.dtype.bits == 32 and abs(c) <= 1 << 16):
        return None
    f = x.value
    if not (isinstance(f, E.Sub) and f.dtype.is_float and f.dtype.bits == 32 and isinstance(f.b, E.FloatImm)
            and f.b.value == magic and isinstance(f.a, E.Add) and isinstance(f.a.b, E.FloatImm)
            and f.a.b.value == magic):
        return None
    return f.a.a, c


class CPrinter(CStylePrinter):
    """One PrimFunc as its unpacked C function and its packed entry."""

    def __init__(self):
        super().__init__(C99)
        self.thread_vars = {}
        self.ws_now = self.ws_peak = 0  # bytes of workspace held at this point / at most
        self.ws_symbolic = False

    # Functions ------------------------------------------------------------------------------
    def print_function(self, symbol: str, func: PrimFunc) -> dict:
        self.func_name = symbol
        params, unpack, call = [], [], []
        shape_vars: list = []  # (Var, C expression of its value) of the dims and strides tensors define
        for arg in packed.arguments(func, symbol):  # the packed convention, spelled in C
            i = arg.index
            if isinstance(arg, packed.TensorArg):
                buf = arg.buffer
                t = self.storage_type(buf.dtype)
                name = self.name(buf.data)
                params.append(f"{t}* restrict {name}")
                call.append(name)
                unpack.append(f"  DLTensor* t{i} = (DLTensor*)args[{i}].v_handle;")
                unpack.append(f"  {t}* {name} = ({t}*)((char*)t{i}->data + t{i}->byte_offset);")
                for k, dim in arg.dims:
                    shape_vars.append((dim, f"t{i}->shape[{k}]"))
                    self.name(dim)
                for k, s in arg.strides:  # compact row-major: the product of the extents after k
                    inner = [self.expr(d) for d in buf.shape[k + 1:]]
                    self.name(s)
                    shape_vars.append((s, " * ".join(f"(int64_t){x}" for x in inner) or "1"))
            elif isinstance(arg, packed.HandleArg):
                name = self.name(arg.var)
                params.append(f"void* {name}")
                call.append(name)
                unpack.append(f"  void* {name} = args[{i}].v_handle;")
            else:
                p = arg.var
                name = self.name(p)
                t = self.type(p.dtype)
                params.append(f"{t} {name}")
                call.append(name)
                if p.dtype.is_float:
                    unpack.append(f"  {t} {name} = ({t})(type_codes[{i}] == {arg.other_code} ? (double)args[{i}].v_int64 : args[{i}].v_float64);")
                else:
                    unpack.append(f"  {t} {name} = ({t})(type_codes[{i}] == {arg.other_code} ? (int64_t)args[{i}].v_float64 : args[{i}].v_int64);")
        for v, src in shape_vars:
            t = self.type(v.dtype)
            name = self.names[id(v)]
            params.append(f"{t} {name}")
            call.append(name)
            unpack.append(f"  {t} {name} = ({t}){src};")
        self.lines = []
        self.indent = 1
        self.stmt(func.body)
        proto = f"int32_t {symbol}_unpacked({', '.join(params) or 'void'})"
        body = "\n".join([proto + " {", *self.lines, "  return 0;", "}"])
        entry = "\n".join([
            f"int32_t {symbol}(const KilnValue* args, const int32_t* type_codes, int32_t num_args) {{",
            "  (void)args; (void)type_codes; (void)num_args;",
            *unpack,
            f"  return {symbol}_unpacked({', '.join(call)});",
            "}"])
        return {"proto": proto, "body": body, "entry": entry}

    # Statements -----------------------------------------------------------------------------
    def stmt_For(self, s) -> None:
        if s.kind == ForKind.THREAD_BINDING:
            raise CompileError(f"{self.func_name}: loop {s.loop_var.name} is bound to a GPU thread axis; "
                               "the C target runs on one CPU core. Remove the bind()")
        if s.kind in (ForKind.PARALLEL, ForKind.VECTORIZED):
            s = replace(s, kind=ForKind.SERIAL)  # one core: parallel loops run in order
        super().stmt_For(s)

    def stmt_AttrStmt(self, s) -> None:
        if s.attr_key in ("thread_extent", "virtual_thread"):
            raise CompileError(f"{self.func_name}: loop bound to a GPU thread axis cannot run on the C target; "
                               "remove the bind()")
        self.stmt(s.body)

    def stmt_AssertStmt(self, s) -> None:
        msg = s.message.value if isinstance(s.message, E.StringImm) else str(s.message)
        self.emit(f"if (!{self.expr(s.condition)}) return kiln_fail({json.dumps(msg[:500])});")
        self.stmt(s.body)

    def stmt_Allocate(self, s) -> None:
        buf = s.buffer
        t = self.storage_type(buf.dtype)
        elem = max(buf.dtype.bits // 8, 1) * buf.dtype.lanes
        const = all(isinstance(x, E.IntImm) for x in s.extents)
        name, old = self.declare(buf.data)
        if const and _const_size(s, self.func_name) * elem <= STACK_BYTES:
            self.emit(f"{t} {name}[{max(_const_size(s, self.func_name), 1)}]{self.lang.align.format(n=WORKSPACE_ALIGN)};")
            self.stmt(s.body)
        else:
            count = " * ".join(f"(uint64_t){self.expr(x)}" for x in s.extents) or "1"
            self.emit(f"{t}* {name} = ({t}*)KilnBackendAllocWorkspace(1, 0, {count} * {elem}u, "
                      f"{_DL_CODE.get(buf.dtype.kind, 1)}, {buf.dtype.bits});")
            self.emit(f"if ({name} == NULL) return kiln_fail(\"{self.func_name}: workspace exhausted allocating "
                      f"{buf.name}; link a larger KilnBackendAllocWorkspace arena (-DKILN_WORKSPACE_BYTES=...)\");")
            nbytes = None
            if const:
                nbytes = (_const_size(s, self.func_name) * elem + WORKSPACE_ALIGN - 1) // WORKSPACE_ALIGN * WORKSPACE_ALIGN
                self.ws_now += nbytes
                self.ws_peak = max(self.ws_peak, self.ws_now)
            else:
                self.ws_symbolic = True
            self.stmt(s.body)
            self.ws_now -= nbytes or 0
            self.emit(f"KilnBackendFreeWorkspace(1, 0, {name});")
        self.aligned[id(buf.data)] = WORKSPACE_ALIGN
        self.restore(buf.data, old)

    # Expressions ----------------------------------------------------------------------------
    def _minmax(self, e, which: str) -> str:
        a, b = self.expr(e.a), self.expr(e.b)
        dt = e.dtype
        if dt.is_float:
            return f"{'f' + which}{'f' if dt.bits == 32 else ''}({a}, {b})"
        fn = {(True, 64): "i64", (False, 64): "u64"}.get((dt.is_int, dt.bits), "i32")
        if dt.is_uint and dt.bits == 32:
            fn = "i64"
        return f"(({self.type(dt)})kiln_{which}_{fn}({a}, {b}))"

    def expr_Sub(self, e):
        magic = 12582912.0
        if e.dtype.is_float and e.dtype.bits == 32 and isinstance(e.a, E.Add) and isinstance(e.b, E.FloatImm) \
                and e.b.value == magic and isinstance(e.a.b, E.FloatImm) and e.a.b.value == magic:
            return f"kiln_rne22({self.expr(e.a.a)})"
        return super().expr_Sub(e)

    def _ssat(self, x, n: int) -> str:
        got = _rne22_plus(x)
        if got is not None:  # round-to-int32 + c then the clamp: kiln_rne22_add (see its prelude)
            return f"((int32_t)kiln_ssat(kiln_rne22_add({self.expr(got[0])}, {got[1]}), {n}))"
        return f"((int32_t)kiln_ssat({self.expr(x)}, {n}))"

    def expr_Min(self, e):
        n = _saturation_bits(e)
        if n:
            return self._ssat(e.a.a, n)
        return self._minmax(e, "min")

    def expr_Max(self, e):
        n = _saturation_bits(e, E.Max, E.Min)
        if n:
            return self._ssat(e.a.a, n)
        return self._minmax(e, "max")

    def expr_FloorDiv(self, e):
        if e.dtype.is_float:
            return f"floor{'f' if e.dtype.bits == 32 else ''}({self.expr(e.a)} / {self.expr(e.b)})"
        return super().expr_FloorDiv(e)

    def expr_FloorMod(self, e):
        if e.dtype.is_float:
            a, b = self.expr(e.a), self.expr(e.b)
            return f"({a} - floor{'f' if e.dtype.bits == 32 else ''}({a} / {b}) * {b})"
        return super().expr_FloorMod(e)

    def expr_Mod(self, e):
        if e.dtype.is_float:
            return f"fmod{'f' if e.dtype.bits == 32 else ''}({self.expr(e.a)}, {self.expr(e.b)})"
        return super().expr_Mod(e)

    def expr_Call(self, e):
        name = e.op[4:] if e.op.startswith("tir.") else e.op
        f = "f" if e.dtype.is_float and e.dtype.bits == 32 else ""
        if name in ("abs", "fabs") and e.dtype.is_float:
            return f"fabs{f}({self.expr(e.args[0])})"
        if name in ("abs", "fabs"):
            x = self.expr(e.args[0])
            return f"(({x}) < 0 ? -({x}) : ({x}))"
        expanded = expand(e, ("sigmoid", "rsqrt", "exp10"))  # C99 has none of them
        if expanded is not None and e.dtype.is_float:
            return self.expr(expanded)
        if name in ("nearbyint", "rint", "round"):
            return f"{'kiln_rintf' if f else 'rint'}({self.expr(e.args[0])})"
        if name == "popcount":
            return f"__builtin_popcountll((uint64_t){self.expr(e.args[0])})"
        if name == "clz":
            return f"__builtin_clzll((uint64_t){self.expr(e.args[0])})"
        if name == "reinterpret":
            src = e.args[0]
            return f"({{ {self.type(src.dtype)} kiln_r_ = {self.expr(src)}; {self.type(e.dtype)} kiln_o_; " \
                   f"memcpy(&kiln_o_, &kiln_r_, sizeof kiln_o_); kiln_o_; }})"
        if name == "address_of":  # &buf[i]: Cortex-M intrinsics take pointers (kiln/topi/cortex_m)
            return f"(&{self.expr(e.args[0])})"
        from .c_family_expr import _FLOAT_MATH
        if name in _FLOAT_MATH and e.dtype.is_float:
            return f"{name}{f}({', '.join(self.expr(a) for a in e.args)})"
        return super().expr_Call(e)


def generate_source(mod, target, with_metadata: bool = True) -> tuple[str, list[dict], dict]:
    """(C source, [{name, proto, ...}], metadata) of every PrimFunc in mod."""
    from .metadata import module_metadata

    from ..ir.module import IRModule
    from ..tir.transform import C_PIPELINE

    funcs = lowered_functions(mod, "c")
    lowered = C_PIPELINE(IRModule(dict(funcs)))  # vectors as loops over lanes (tir/transform/scalarize.py)
    funcs = [(symbol, lowered[symbol]) for symbol, _ in funcs]
    printed, peak, symbolic = [], 0, False
    for symbol, func in funcs:
        if not symbol.isidentifier() or symbol.startswith("__kiln") or symbol.startswith("kiln_"):
            raise CompileError(f"function name {symbol!r} is not usable as a C symbol; rename the function")
        p = CPrinter()
        printed.append({"name": symbol, **p.print_function(symbol, func)})
        peak, symbolic = max(peak, p.ws_peak), symbolic or p.ws_symbolic
    # Symbolic scratch sizes are unknown here: give the default arena room (a runtime may replace it).
    workspace = max(peak, DEFAULT_WORKSPACE) if symbolic else max(peak, WORKSPACE_ALIGN)
    meta = module_metadata(funcs, target, _host_triple())
    parts = [f"/* generated by kiln for target {target} */", PRELUDE.replace("@WORKSPACE@", str(workspace)), ERROR_DEFS]
    parts += [text for word, text in ARM_PRELUDES if any(word in p["body"] for p in printed)]
    parts += [p["body"] + "\n" for p in printed]
    parts += [p["entry"] + "\n" for p in printed]
    if with_metadata:
        blob = json.dumps(meta, separators=(",", ":"))
        parts.append(f"const char __kiln_metadata[] = {json.dumps(blob)};\n")
    return "\n".join(parts), printed, meta


def _host_triple() -> str:
    import llvmlite.binding as llvm

    return llvm.get_process_triple()


def compile_object(source: str, options=None, cc: str | None = None) -> bytes:
    """An ELF object of the C source, compiled by the system cc (position independent)."""
    from ..contrib.cc import default_cc

    cc = cc or default_cc()
    with tempfile.TemporaryDirectory(prefix="kiln-c-") as work:
        src, obj = os.path.join(work, "module.c"), os.path.join(work, "module.o")
        with open(src, "w") as f:
            f.write(source)
        cmd = [cc, "-std=gnu99", "-O2", "-fPIC", "-c", src, "-o", obj, *(options or [])]
        try:
            out = subprocess.run(cmd, capture_output=True, text=True)
        except FileNotFoundError:
            raise KilnError(f"C compiler {cc!r} not found; install gcc (apt-get install gcc) or set CC") from None
        if out.returncode != 0:
            raise CompileError(f"cc rejected the generated C ({' '.join(cmd)}):\n{out.stderr[-2000:]}")
        with open(obj, "rb") as f:
            return f.read()


def build(mod, target):
    """A CompiledModule whose C source is ``get_source()``; compiled here by cc so it runs here."""
    from ..runtime.compiled import CompiledModule
    from ..target import Target

    target = target if isinstance(target, Target) else Target(target)
    source, _, meta = generate_source(mod, target)
    obj = compile_object(source)
    return CompiledModule([obj], meta, {"c": source}, triple=meta["triple"], type_key="c")
