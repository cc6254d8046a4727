"""The CUDA backend: CUDA C's spellings, its printer, and a one-line build.

``build`` is the shared GPU driver (gpu.py: GPU_PIPELINE, with warp shuffles and asynchronous
copies, which CUDA has), then the shared C-family printer with
CUDA's spellings (``extern "C" __global__``, ``__launch_bounds__``, ``__shared__``,
``__syncthreads()``). Where CUDA C differs in structure rather than in words:

- Vector types (float4, ...) are plain structs with no arithmetic, so vector expressions are
  printed lane by lane; a stride-1 load or store whose start is provably aligned still moves
  the whole vector at once (one 16-byte access), other vector accesses go lane by lane.
- Shared memory above 48 KiB cannot be declared statically: such a kernel takes all its shared
  arrays from one dynamic ``extern __shared__`` buffer, sized by the kernel entry's
  ``shared_bytes`` (the runtime raises the function's dynamic shared-memory limit for it).
- ``half`` comes from a small header of our own (below): NVRTC's pip wheel carries no
  ``cuda_fp16.h``. Arithmetic on halves is done in float and rounded when stored, except a
  ``float16x2`` update of registers (a local buffer; the half2 depthwise conv,
  kiln/topi/gpu/depthwise_conv2d.py): that is half2 arithmetic (``fma.rn.f16x2``, ``add`` /
  ``sub`` / ``mul.rn.f16x2``) on the two lanes packed in one 32-bit register (sm_53+).

The kernels are compiled with NVRTC (``cuda.bindings.nvrtc``, no GPU needed) to PTX for the
target's arch; the PTX travels in the module's metadata beside the source. The runtime
(kiln/runtime/devices/cuda.py) loads a carried cubin made for the device's arch, else compiles
the source for the exact device when NVRTC is there (runtime/devices/nvrtc.py), else the PTX.
"""

from __future__ import annotations

import base64
import functools

import numpy as np

from ..errors import CompileError
from ..ir import expr as E
from ..ir.dtype import DType
from ..runtime.devices.nvrtc import (DEFAULT_ARCH, arch_number, compile_source, have_nvrtc,  # noqa: F401
                                     normalize_arch, nvrtc, ptx_of, source_of)  # NVRTC is the runtime's
from ..tir.lanes import lane
from ..tir.transform.double_buffer import ASYNC, WAIT_OP
from ..tir.transform.warp_reduction import SHFL_OP
from . import gpu
from .c_family import ALIGN, CStylePrinter, Lang, _const_size
from .c_family_expr import _contiguous
from .gpu import KernelLanguage
from .cuda_wgmma import CALLS as WGMMA_CALLS, SCOPE as WGMMA_SCOPE, SWIZZLE_ALIGN, WgmmaPrinter
from .cuda_wmma import OPS as WMMA_OPS, STRUCTS as WMMA_STRUCTS, WmmaPrinter, access_ptr

STATIC_SHARED_LIMIT = 48 * 1024  # larger shared memory must be dynamic

_TYPES = {("float", 16): "half", ("bfloat", 16): "kiln_bf16", ("float", 32): "float", ("float", 64): "double",
          ("int", 8): "signed char", ("int", 16): "short", ("int", 32): "int", ("int", 64): "long long",
          ("uint", 8): "unsigned char", ("uint", 16): "unsigned short", ("uint", 32): "unsigned int",
          ("uint", 64): "unsigned long long", ("bool", 1): "bool"}
# CUDA's built-in vector structs: (kind, bits) -> name stem; lanes 2..4.
_VECTOR = {("float", 32): "float", ("float", 64): "double", ("int", 8): "char", ("int", 16): "short",
           ("int", 32): "int", ("int", 64): "longlong", ("uint", 8): "uchar", ("uint", 16): "ushort",
           ("uint", 32): "uint", ("uint", 64): "ulonglong"}

PREAMBLE = r"""// kiln CUDA kernels
struct __align__(2) half {
  unsigned short x;
  __device__ __forceinline__ half() {}
  __device__ __forceinline__ half(float f) { asm("cvt.rn.f16.f32 %0, %1;" : "=h"(x) : "f"(f)); }
  __device__ __forceinline__ half(double f) : half((float)f) {}
  __device__ __forceinline__ half(int v) : half((float)v) {}
  __device__ __forceinline__ half(unsigned int v) : half((float)v) {}
  __device__ __forceinline__ half(long long v) : half((float)v) {}
  __device__ __forceinline__ half(unsigned long long v) : half((float)v) {}
  __device__ __forceinline__ operator float() const { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x)); return f; }
};
struct __align__(4) half2 { half x, y; };
struct __align__(2) kiln_bf16 {  // bfloat16: float32's top 16 bits, rounded to nearest even
  unsigned short x;
  __device__ __forceinline__ kiln_bf16() {}
  __device__ __forceinline__ kiln_bf16(float f) {
    unsigned u = __float_as_uint(f);
    x = (u & 0x7fffffffu) > 0x7f800000u ? (unsigned short)((u >> 16) | 0x40u)
                                        : (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
  __device__ __forceinline__ kiln_bf16(double f) : kiln_bf16((float)f) {}
  __device__ __forceinline__ kiln_bf16(int v) : kiln_bf16((float)v) {}
  __device__ __forceinline__ kiln_bf16(half v) : kiln_bf16((float)v) {}
  __device__ __forceinline__ operator float() const { return __uint_as_float(((unsigned)x) << 16); }
};
template <class T, class F> __device__ __forceinline__ T kiln_bitcast(F f) {
  static_assert(sizeof(T) == sizeof(F), "reinterpret needs equal sizes");
  T t; memcpy(&t, &f, sizeof(T)); return t;
}
"""

# half2 arithmetic (float16x2 register updates): two halves packed in a 32-bit register, low lane first
HALF2 = r"""__device__ __forceinline__ unsigned kiln_h2(half a, half b) { return (unsigned)a.x | ((unsigned)b.x << 16); }
__device__ __forceinline__ half kiln_h2_lane(unsigned v, int k) { half h; h.x = (unsigned short)(v >> (16 * k)); return h; }
__device__ __forceinline__ unsigned kiln_hfma2(unsigned a, unsigned b, unsigned c) {
  unsigned d; asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c)); return d;
}
__device__ __forceinline__ unsigned kiln_hadd2(unsigned a, unsigned b) {
  unsigned d; asm("add.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b)); return d;
}
__device__ __forceinline__ unsigned kiln_hsub2(unsigned a, unsigned b) {
  unsigned d; asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b)); return d;
}
__device__ __forceinline__ unsigned kiln_hmul2(unsigned a, unsigned b) {
  unsigned d; asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b)); return d;
}
"""

CUDA = Lang(
    kernel_prefix='extern "C" __global__',
    buffer_param="{type}* __restrict__ {name}",
    global_qual="",
    shared_decl="__shared__ ",
    barrier="__syncthreads();",
    thread_index={**{f"blockIdx.{d}": f"((int)blockIdx.{d})" for d in "xyz"},
                  **{f"threadIdx.{d}": f"((int)threadIdx.{d})" for d in "xyz"}},
    types=_TYPES,
    vector_type="{t}{n}",
    vector_literal="make_{vt}({args})",
    lane="({x}).{k}",
    math={"fabs": "fabs"},
    infinity="__int_as_float(0x7f800000)",
    nan="__int_as_float(0x7fc00000)",
    float_suffix={16: "f", 32: "f", 64: ""},
    int64_suffix="LL",
    reinterpret="kiln_bitcast<{t}>({x})",
)

_LANE_OP = "kiln.cuda_vector_lane"  # lane k of an aligned vector load (printed as a struct member)


class CUDAPrinter(CStylePrinter):
    def __init__(self, arch: str | None = None):
        super().__init__(CUDA)
        # cp.async (sm_80+) for the prefetches of double-buffered tiles (tir/transform/double_buffer.py)
        self.arch = normalize_arch(arch) if arch is not None else None
        self.async_copies = arch is not None and arch_number(arch) >= 80
        self.in_async = False
        self.vector_lanes: dict = {}  # id(vector Var) -> its lane Vars
        self.shared_bytes = 0  # dynamic shared memory the kernel needs at launch
        self.wmma = None  # WmmaPrinter of a kernel with tensor-core fragments (cuda_wmma.py)
        self.wgmma = None  # WgmmaPrinter (cuda_wgmma.py)
        self.half2 = arch is None or arch_number(arch) >= 53  # f16x2 instructions
        self.half2_used = False

    # Kernels ----------------------------------------------------------------------------------
    def print_kernel(self, func) -> str:
        self.dyn_decls: list[str] = []
        self.wmma = WmmaPrinter(self, func)
        self.wgmma = WgmmaPrinter(self, func)  # Hopper's warpgroup MMA, mbarriers, bulk copies (sm_90a)
        text = super().print_kernel(func)
        if self.wgmma.tensor_maps:  # bulk tensor copies' maps: by-value parameters after the others
            head, _, rest = text.partition(") {\n")
            text = head + ", " + ", ".join(self.wgmma.signature_params()) + ") {\n" + rest
        if self.dyn_decls:  # after the opening line of the kernel body
            head, _, rest = text.partition(" {\n")
            text = head + " {\n" + "".join(f"  {d}\n" for d in self.dyn_decls) + rest
        ext = func.attrs.get("thread_extent", {})
        dims = [ext.get(f"threadIdx.{d}") for d in "xyz"]
        if all(d is None or isinstance(d, E.IntImm) for d in dims):
            n = 1
            for d in dims:
                n *= d.value if d is not None else 1
            # The block size is fixed: the compiler may then use more registers per thread.
            text = text.replace(f" void {self.func_name}(", f" void __launch_bounds__({n}) {self.func_name}(", 1)
        return text

    def _hoist_shared(self, body) -> list:
        shared = super()._hoist_shared(body)
        total = sum(_padded(n * self.storage_bits(b.dtype) // 8) for b, n in shared)
        tma = self.wgmma is not None and self.wgmma.tma
        if total <= STATIC_SHARED_LIMIT and not tma:
            return shared
        # Too big for static declarations (or tiles of bulk tensor copies, 1024-byte aligned):
        # carve every shared array out of the dynamic buffer.
        align = SWIZZLE_ALIGN if tma else ALIGN
        self.dyn_decls.append(f"extern __shared__ __align__({ALIGN}) unsigned char kiln_dyn_shared[];")
        base = "kiln_dyn_shared"
        if tma:  # the buffer's start is only 16-byte aligned for sure: round it up, in the slack asked for
            base = "kiln_dyn_aligned"
            self.dyn_decls.append(f"unsigned char* {base} = kiln_dyn_shared + ((({align}u - ((unsigned)"
                                  f"__cvta_generic_to_shared(kiln_dyn_shared) % {align}u)) % {align}u));")
        offset = 0
        staging = self.wgmma.staging if tma else set()  # laid over the slabs (cuda_wgmma.staging)
        # the mbarriers (64-bit words) first; a staging tile then starts where they end, over the slabs
        order = sorted(shared, key=lambda bs: (bs[0].data in staging, bs[0].dtype.bits != 64)) if staging else shared
        end, start = 0, None
        for buf, n in order:
            t = self.storage_type(buf.dtype)
            if start is None and buf.dtype.bits != 64:
                start = offset
            at = start if buf.data in staging else offset
            size = _padded(n * self.storage_bits(buf.dtype) // 8, align)
            self.dyn_decls.append(f"{t}* {self.name(buf.data)} = ({t}*)({base} + {at});")
            self.aligned[id(buf.data)] = ALIGN
            if buf.data not in staging:
                offset += size
            end = max(end, at + size)
        self.shared_bytes = end + (align if tma else 0)
        return []

    def storage_bits(self, dt: DType) -> int:
        return 8 if dt.is_bool else dt.bits

    # Vectors: lane by lane, whole-vector memory accesses where aligned --------------------------
    def vector_type(self, dt: DType) -> str | None:
        stem = _VECTOR.get((dt.kind, dt.bits))
        if stem is None or dt.lanes not in (2, 3, 4) or dt.lanes * dt.bits > 128:
            return None
        return f"{stem}{dt.lanes}"

    def chunk(self, dt: DType) -> tuple[int, str] | None:
        """(lanes, struct) of the pieces an aligned vector of dt is moved in: float8 is two float4."""
        for c in (dt.lanes, 4, 2):
            if dt.lanes % c == 0 and (vt := self.vector_type(DType(dt.kind, dt.bits, c))):
                return c, vt
        return None

    def expr(self, e) -> str:
        if e.dtype.lanes > 1:
            raise CompileError(f"{self.func_name}: a vector value ({e.dtype}) is used where CUDA needs "
                               "a scalar; do not vectorize this loop")
        return super().expr(e)

    def select(self, c, t, f) -> str:
        if t.dtype.is_float and t.dtype.bits == 16:
            # half arithmetic is float: `c ? half : float` would convert either way (ambiguous)
            ty = self.type(t.dtype)
            return f"({self.expr(c)} ? (({ty})({self.expr(t)})) : (({ty})({self.expr(f)})))"
        return super().select(c, t, f)

    def lane(self, e, k: int):
        """Lane k of vector expression e, as a scalar expression (kiln/tir/lanes.py)."""
        return lane(e, k, self._lane_leaf, what=self.func_name)

    def _lane_leaf(self, e, k: int):
        if isinstance(e, E.Var):
            lanes = self.vector_lanes.get(id(e))
            if lanes is None:
                raise CompileError(f"{self.func_name}: vector variable {e.name} is used but not defined")
            return lanes[k]
        base = _contiguous(e.indices[0])
        # Registers (local arrays) stay scalar: a struct access could push them to the stack.
        if base is not None and e.buffer.scope != "local" and self.chunk(e.dtype) and \
                self._aligned(e.buffer, base, e.dtype.lanes):
            return E.Call(e.dtype.element_of(), _LANE_OP, (e, E.const(k)))
        return None

    def stmt_AttrStmt(self, s) -> None:
        if s.attr_key != ASYNC or not self.async_copies:
            return super().stmt_AttrStmt(s)
        self.in_async = True
        self.stmt(s.body)
        self.in_async = False
        if not self.wgmma.tma:  # bulk tensor copies complete on mbarriers instead
            self.emit('asm volatile("cp.async.commit_group;" ::: "memory");')

    def stmt_Evaluate(self, s) -> None:
        if isinstance(s.value, E.Call) and s.value.op == WAIT_OP:
            if self.async_copies:
                self.emit(f'asm volatile("cp.async.wait_group {s.value.args[0].value};" ::: "memory");')
                if self.wgmma.used:  # the tiles are read next by wgmma, through the async proxy
                    self.emit('asm volatile("fence.proxy.async.shared::cta;" ::: "memory");')
            return
        super().stmt_Evaluate(s)

    def stmt_Allocate(self, s) -> None:
        if s.buffer.scope.startswith("wmma."):
            return self.wmma.declare(s)
        if s.buffer.scope == WGMMA_SCOPE:
            return self.wgmma.declare(s)
        return super().stmt_Allocate(s)

    def expr_Call(self, e):
        if (e.op[4:] if e.op.startswith("tir.") else e.op) in WMMA_OPS:
            return self.wmma.call(e)
        if (e.op[4:] if e.op.startswith("tir.") else e.op) in WGMMA_CALLS:
            return self.wgmma.call(e)
        if e.op == "tir.tvm_access_ptr":
            return access_ptr(self, e)
        if e.op == SHFL_OP:
            v, delta, width, mask = e.args
            return f"__shfl_down_sync({mask.value:#x}u, {self.expr(v)}, {delta.value}, {width.value})"
        if e.op == _LANE_OP:
            load, k = e.args
            c, vt = self.chunk(load.dtype)
            ptr = f"({self.name(load.buffer.data)} + {self.index(_offset(_contiguous(load.indices[0]), k.value // c * c), load.buffer)})"
            return f"((const {vt}*){ptr})->{'xyzw'[k.value % c]}"
        name = e.op[4:] if e.op.startswith("tir.") else e.op
        if name == "clz":
            return f"{'__clzll' if e.args[0].dtype.bits == 64 else '__clz'}({self.expr(e.args[0])})"
        if name == "popcount":
            return f"{'__popcll' if e.args[0].dtype.bits == 64 else '__popc'}({self.expr(e.args[0])})"
        if name in ("isnan", "isinf", "isfinite") and e.args[0].dtype.bits == 16:
            return f"{name}((float){self.expr(e.args[0])})"
        return super().expr_Call(e)

    def stmt_LetStmt(self, s) -> None:
        if s.var.dtype.lanes == 1:
            return super().stmt_LetStmt(s)
        el = s.var.dtype.element_of()
        lanes = [E.Var(f"{s.var.name}_{k}", el) for k in range(s.var.dtype.lanes)]
        values = [self.expr(self.lane(s.value, k)) for k in range(len(lanes))]
        for v, text in zip(lanes, values):
            self.emit(f"{self.type(el)} {self.name(v)} = {text};")
        self.vector_lanes[id(s.var)] = lanes
        self.stmt(s.body)

    def stmt_BufferStore(self, s) -> None:
        lanes = s.value.dtype.lanes
        if lanes == 1:
            return super().stmt_BufferStore(s)
        buf, idx = s.buffer, s.indices[0]
        if lanes == 2 and s.value.dtype.kind == "float" and s.value.dtype.bits == 16 and buf.scope == "local" \
                and self.half2:  # float16x2 only: bfloat16 is no half (its sums stay float)
            return self._half2_store(s)
        if buf.dtype.is_bool:
            raise CompileError(f"{self.func_name}: vector stores of bool buffer {buf.name} are not supported; "
                               "do not vectorize this loop")
        if self._copy(s):
            return
        values = [self.expr(self.lane(s.value, k)) for k in range(lanes)]
        ptr = self.name(buf.data)
        base = _contiguous(idx)
        chunk = self.chunk(s.value.dtype)
        if base is not None and chunk and buf.scope != "local" and self._aligned(buf, base, lanes):
            c, vt = chunk
            for off in range(0, lanes, c):
                at = self.index(_offset(base, off), buf)
                self.emit(f"*(({vt}*)({ptr} + {at})) = make_{vt}({', '.join(values[off:off + c])});")
            return
        for k, v in enumerate(values):
            self.emit(f"{ptr}[{self.index(self.lane(idx, k), buf)}] = {v};")


    def _half2_store(self, s) -> None:
        """A float16x2 register update as half2 arithmetic: ``{ unsigned v = kiln_hfma2(...);
        r[i] = lane 0; r[j] = lane 1; }``."""
        self.half2_used = True
        value = self._h2(s.value)
        ptr, idx = self.name(s.buffer.data), s.indices[0]
        stores = " ".join(f"{ptr}[{self.index(self.lane(idx, k), s.buffer)}] = kiln_h2_lane(kiln_v2, {k});"
                          for k in range(2))
        self.emit(f"{{ unsigned kiln_v2 = {value}; {stores} }}")

    def _h2(self, e) -> str:
        """A float16x2 expression as a packed 32-bit half2 value (C expression of type unsigned)."""
        if isinstance(e, E.Add):
            for prod, other in ((e.a, e.b), (e.b, e.a)):
                if isinstance(prod, E.Mul):  # contracted, as the CUDA compiler does for float
                    return f"kiln_hfma2({self._h2(prod.a)}, {self._h2(prod.b)}, {self._h2(other)})"
            return f"kiln_hadd2({self._h2(e.a)}, {self._h2(e.b)})"
        if isinstance(e, (E.Sub, E.Mul)):
            return f"kiln_h{'sub' if isinstance(e, E.Sub) else 'mul'}2({self._h2(e.a)}, {self._h2(e.b)})"
        if isinstance(e, E.Call) and e.op in ("tir.if_then_else", "if_then_else") and e.args[0].dtype.lanes == 1:
            c, t, f = e.args
            return f"({self.expr(c)} ? {self._h2(t)} : {self._h2(f)})"
        lanes = [e.value] * 2 if isinstance(e, E.Broadcast) else [self.lane(e, k) for k in range(2)]
        if all(isinstance(v, E.FloatImm) for v in lanes):  # a constant: its bits (no conversion at run time)
            bits = [int(np.float16(v.value).view(np.uint16)) for v in lanes]
            return f"{bits[0] | bits[1] << 16:#x}u"
        return f"kiln_h2((half)({self.expr(lanes[0])}), (half)({self.expr(lanes[1])}))"

    def _copy(self, s) -> bool:
        """A copy of 8- or 16-bit vectors (any vector in a prefetch) between aligned contiguous
        memory, moved as raw 4/8/16-byte words: half vectors have no struct here, and tensor-core
        tile fetches need wide loads."""
        v, buf = s.value, s.buffer
        word = _WORDS.get(v.dtype.lanes * v.dtype.bits // 8)
        if not (isinstance(v, E.BufferLoad) and word and v.buffer.dtype == buf.dtype
                and (buf.dtype.bits < 32 or self.in_async) and "local" not in (buf.scope, v.buffer.scope)):
            return False
        dst, src = _contiguous(s.indices[0]), _contiguous(v.indices[0])
        lanes = v.dtype.lanes
        if dst is None or src is None or not (self._aligned(buf, dst, lanes) and self._aligned(v.buffer, src, lanes)):
            return False
        to = f"({self.name(buf.data)} + {self.index(dst, buf)})"
        frm = f"({self.name(v.buffer.data)} + {self.index(src, v.buffer)})"
        nbytes = lanes * v.dtype.bits // 8
        if self.in_async and buf.scope == "shared" and v.buffer.scope == "global" and nbytes in (4, 8, 16):
            # An asynchronous copy: the thread goes on; the wait before the next barrier completes it.
            kind = "cg" if nbytes == 16 else "ca"
            self.emit(f'asm volatile("cp.async.{kind}.shared.global [%0], [%1], {nbytes};" :: '
                      f'"r"((unsigned)__cvta_generic_to_shared({to})), "l"({frm}) : "memory");')
            return True
        self.emit(f"*(({word}*){to}) = *((const {word}*){frm});")
        return True


_WORDS = {4: "unsigned int", 8: "uint2", 16: "uint4"}


def _offset(base, off: int):
    return E.Add(base, E.const(off, base.dtype), base.dtype) if off else base


def _padded(nbytes: int, align: int = ALIGN) -> int:
    return (nbytes + align - 1) // align * align


def kernel_source(kernels, arch: str | None = None) -> tuple[str, list[int]]:
    """(CUDA C of the kernels, each kernel's entry extras: dynamic shared bytes, tensor maps); arch
    enables what it has (cp.async)."""
    parts, shared, helpers, hopper, half2 = [], [], {}, {}, False
    for k in kernels:
        p = CUDAPrinter(arch)
        parts.append(p.print_kernel(k))
        half2 |= p.half2_used
        extra = {"shared_bytes": p.shared_bytes} if p.shared_bytes else {}
        if p.wgmma.tensor_maps:
            extra["tensor_maps"] = p.wgmma.tensor_maps
        shared.append(extra)
        helpers.update(p.wmma.helpers)
        hopper.update(p.wgmma.helpers)
    wmma = WMMA_STRUCTS + "".join(helpers.values()) if helpers else ""
    return PREAMBLE + (HALF2 if half2 else "") + wmma + "".join(hopper.values()) + "\n" + "\n".join(parts), shared


@functools.lru_cache(maxsize=1)  # also spares forked build workers a driver call
def default_arch() -> str:
    """The arch of CUDA device 0 when this machine has one, else DEFAULT_ARCH."""
    try:
        from ..runtime.devices.cuda import API
        if API.exist(0):
            return "sm_" + API.attribute(0, "compute_version").replace(".", "")
    except Exception:  # noqa: BLE001 - no driver, no cuda-python: build for the default
        pass
    return DEFAULT_ARCH


# Build -----------------------------------------------------------------------------------------

def print_kernels(kernels, target) -> tuple[str, list[dict]]:
    return kernel_source(kernels, _arch(target))


def finish(device_code: dict, target) -> None:
    """The arch, and the PTX where NVRTC is here: compile errors show at build time, and the
    device runs the module without NVRTC (the driver JIT-compiles the PTX). A target naming its
    arch (``cuda -arch=sm_90``) also gets that chip's cubin, which a device of that arch loads
    as is (no JIT at load)."""
    device_code["arch"] = _arch(target)
    if have_nvrtc():
        ptx_of(device_code)
        if target.arch:
            cubin = compile_source(device_code["source"], device_code["arch"], "cubin")
            device_code["cubin"] = base64.b64encode(cubin).decode()
            device_code["cubin_arch"] = device_code["arch"]


def _arch(target) -> str:
    return normalize_arch(target.arch) if target.arch else default_arch()


LANGUAGE = KernelLanguage("cuda", "cu", print_kernels, warp_shuffle=True, async_copy=True, finish=finish)


def build(mod, target):
    """Host CompiledModule (LLVM, for target.host or 'llvm') carrying CUDA C kernels and their PTX."""
    return gpu.build(mod, target, LANGUAGE)
