"""Hopper's warpgroup tensor cores (``wgmma``), mbarriers and bulk copies in CUDA kernels (sm_90a).

Tensor intrinsics (kiln/topi/cuda/wgmma.py) lower to these calls; the CUDA printer prints each as a
small ``__device__`` helper over inline PTX, emitted only when a kernel uses it:

    tir.kiln_wgmma_fill(acc, index, n)                      accumulator tile index (64 x n) = 0
    tir.kiln_wgmma_mma(acc, index, n, a, a_lbo, b, b_lbo, k_steps, lag)
        acc[index] += A (64 x 16 k_steps) . B (n x 16 k_steps)^T, both K-major in shared memory in
        the no-swizzle core-matrix layout: element (row, k) at ((k / 8) * rows + row) * 8 + k % 8,
        so an 8 x 8 core matrix is 128 contiguous bytes; a_lbo / b_lbo: bytes between core
        matrices adjacent in K (rows * 16), 128 between those adjacent in M / N
    tir.kiln_wgmma_store(acc, index, n, dst, ld)            the 64 x n tile to memory, row-major
    tir.kiln_wgmma_mma(..., lag, 128)                       the same over tiles in the 128-byte swizzled
        layout the bulk tensor copy writes: rows of 64 halves (128 bytes), 16-byte chunk c of row r
        at chunk c ^ (r % 8), 8-row groups 1024 bytes apart, the tile 1024-byte aligned
    tir.kiln_tma_load(dst, src, x, y, width, height, row_bytes, box_w, box_h, elem_bytes, swizzle,
                      bars, slot)
        one thread copies the box_h x box_w tile at column x, row y of the 2-D tensor src (a kernel
        parameter, as its tvm_access_ptr; height x width elements, rows row_bytes apart) to shared dst with the copy
        engine (``cp.async.bulk.tensor.2d``), completing on mbarrier bars[slot]. The tensor map
        it reads is a ``__grid_constant__`` kernel parameter appended after the others; the kernel
        entry's ``tensor_maps`` tells the runtime how to encode it from the buffer's address
        (kiln/runtime/devices/cuda.py)
    tir.kiln_tma_init(bars, n) / tir.kiln_tma_arrive(bars, slot, bytes) / tir.kiln_tma_wait(bars, slot, phase)
        the pipeline's mbarriers (kiln/tir/transform/double_buffer.py): one thread initializes n
        of them (count 1) and arms one with the bytes its copies bring; every thread waits for a
        phase
    tir.kiln_mbarrier_init(bar, count) / tir.kiln_mbarrier_expect_tx(bar, bytes) /
    tir.kiln_mbarrier_wait(bar, phase) / tir.kiln_bulk_copy(dst, src, bytes, bar)
        a shared-memory mbarrier, and a bulk copy (the copy engine, ``cp.async.bulk``) of
        ``bytes`` (a multiple of 16) from global to shared memory that completes on it

A ``wgmma.accumulator`` buffer is an array of tiles, one struct of n / 2 floats per thread each
(the warpgroup's 128 threads hold a 64 x n float32 tile: thread t of warp w has rows
16 w + t / 4 and 16 w + 8 + t / 4, columns 8 i + 2 (t % 4) and + 1 for i < n / 8, in that order,
which is what the store writes out). The warpgroup is 128 consecutive threads, threadIdx.x, so
its four warps start at a warp index divisible by 4.

Each ``kiln_wgmma_mma`` is ``wgmma.fence``, its k steps as ``wgmma.mma_async`` (descriptors
advanced by two core matrices per k16 step), ``wgmma.commit_group`` and ``wgmma.wait_group lag``:
with lag 1 a call's products still run while the next tile is fetched and the next call issued
(the tile pipeline keeps their slots, kiln/tir/transform/double_buffer.py); the store waits for
all.
Shared tiles written by ``cp.async`` are made visible to the tensor cores' (async) proxy by a
``fence.proxy.async.shared::cta`` after each ``cp.async.wait_group`` of such a kernel, before
the barrier (kiln/codegen/cuda.py).
"""

from __future__ import annotations

from ..errors import CompileError
from ..ir import expr as E
from . import cuda_mma
from ..ir.functor import Visitor

TMA_CALLS = ("kiln_tma_load", "kiln_tma_init", "kiln_tma_arrive", "kiln_tma_wait")
CALLS = ("kiln_wgmma_fill", "kiln_wgmma_mma", "kiln_wgmma_store", "kiln_mbarrier_init", "kiln_mbarrier_expect_tx",
         "kiln_mbarrier_wait", "kiln_bulk_copy") + TMA_CALLS
SWIZZLE_ALIGN = 1024  # bytes: a 128-byte-swizzled tile starts on a whole swizzle pattern
SCOPE = "wgmma.accumulator"
N_SIZES = (8, 16, 32, 64, 96, 128, 192, 256)

DESC = r"""__device__ __forceinline__ unsigned long long kiln_wgmma_desc(const void* p, unsigned lbo, unsigned sbo,
                                                                 unsigned long long layout = 0) {
  // layout (bits 62-63): 0 no swizzle, 1 128-byte swizzle; base offset 0 (swizzled tiles are
  // 1024-byte aligned); addresses and strides in 16-byte units, 14 bits each
  unsigned a = (unsigned)__cvta_generic_to_shared(p);
  return (unsigned long long)((a & 0x3FFFF) >> 4) | ((unsigned long long)((lbo & 0x3FFFF) >> 4) << 16)
       | ((unsigned long long)((sbo & 0x3FFFF) >> 4) << 32) | (layout << 62);
}
"""

MBARRIER = r"""__device__ __forceinline__ void kiln_mbarrier_init(unsigned long long* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"((unsigned)__cvta_generic_to_shared(bar)), "r"(count) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
__device__ __forceinline__ void kiln_mbarrier_expect_tx(unsigned long long* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
               :: "r"((unsigned)__cvta_generic_to_shared(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void kiln_mbarrier_wait(unsigned long long* bar, unsigned phase) {
  asm volatile("{\n .reg .pred done;\n waitloop:\n"
               " mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
               " @!done bra waitloop;\n}\n" :: "r"((unsigned)__cvta_generic_to_shared(bar)), "r"(phase) : "memory");
}
__device__ __forceinline__ void kiln_bulk_copy(void* dst, const void* src, unsigned bytes, unsigned long long* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               :: "r"((unsigned)__cvta_generic_to_shared(dst)), "l"(src), "r"(bytes),
                  "r"((unsigned)__cvta_generic_to_shared(bar)) : "memory");
}
"""


TMA = r"""struct __align__(64) kiln_tmap { unsigned long long x[16]; };  // CUtensorMap, encoded by the runtime
__device__ __forceinline__ bool kiln_elected() { return threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0; }
__device__ __forceinline__ void kiln_tma_init(unsigned long long* bars, int n) {
  if (kiln_elected()) {
    for (int i = 0; i < n; ++i)
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"((unsigned)__cvta_generic_to_shared(bars + i)) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
}
__device__ __forceinline__ void kiln_tma_arrive(unsigned long long* bars, int slot, unsigned bytes) {
  if (kiln_elected())
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                 :: "r"((unsigned)__cvta_generic_to_shared(bars + slot)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void kiln_tma_wait(unsigned long long* bars, int slot, int phase) {
  asm volatile("{\n .reg .pred done;\n kiln_tma_waitloop:\n"
               " mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
               " @!done bra kiln_tma_waitloop;\n}\n"
               :: "r"((unsigned)__cvta_generic_to_shared(bars + slot)), "r"(phase) : "memory");
}
__device__ __forceinline__ void kiln_tma_load(void* dst, const kiln_tmap* map, int x, int y,
                                              unsigned long long* bars, int slot) {
  if (kiln_elected())
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
                 :: "r"((unsigned)__cvta_generic_to_shared(dst)), "l"((unsigned long long)map), "r"(x), "r"(y),
                    "r"((unsigned)__cvta_generic_to_shared(bars + slot)) : "memory");
}
"""


def _name(call) -> str:
    return call.op[4:] if call.op.startswith("tir.") else call.op


def _int(e, what: str) -> int:
    if not isinstance(e, E.IntImm):
        raise CompileError(f"{what} must be a constant, got {e}")
    return e.value


def uses(kernel, calls=CALLS) -> bool:
    """Whether the kernel calls any of ``calls`` or has wgmma accumulators (with the default calls)."""
    found = []

    class _Find(Visitor):
        def visit_Call(self, op):
            if _name(op) in calls:
                found.append(op)
            self.generic_visit(op)

        def visit_Allocate(self, op):
            if op.buffer.scope == SCOPE and calls is CALLS:
                found.append(op)
            self.generic_visit(op)

    _Find().visit(kernel.body)
    return bool(found)


def _target(ptr):
    """The data Var a tvm_access_ptr (or a plain pointer) points into."""
    return ptr.args[1] if isinstance(ptr, E.Call) and ptr.op == "tir.tvm_access_ptr" else ptr


def staging(kernel) -> set:
    """The shared buffers (their data Vars) that wgmma tiles are stored to: a block's staging tile
    for an epilogue, written only after all its products (the store waits for them and barriers the
    block) and after every bulk copy landed (each was waited for by the loop that read it), so the
    printer lays it over the slabs instead of beside them."""
    shared, stores = set(), []

    class _Find(Visitor):
        def visit_Allocate(self, op):
            if op.buffer.scope == "shared":
                shared.add(op.buffer.data)
            self.generic_visit(op)

        def visit_Call(self, op):
            if _name(op) == "kiln_wgmma_store":
                stores.append(_target(op.args[3]))
            self.generic_visit(op)

    _Find().visit(kernel.body)
    return {v for v in stores if v in shared}


def struct(n: int) -> str:
    return f"kiln_wgacc{n}"


def fill_helper(n: int) -> tuple[str, str]:
    name = f"kiln_wgmma_fill{n}"
    return name, (f"struct {struct(n)} {{ float x[{n // 2}]; }};\n"
                  f"__device__ __forceinline__ void {name}({struct(n)}& d) {{\n"
                  f"#pragma unroll\n  for (int i = 0; i < {n // 2}; ++i) d.x[i] = 0.0f;\n}}\n")


def mma_helper(n: int, lag: int = 0, swizzle: int = 0) -> tuple[str, str]:
    """fence, k_steps x wgmma m64n{n}k16 (f32 += f16 x f16, both K-major), commit, and wait until
    at most ``lag`` groups (the earlier calls') are running. swizzle 128: the tiles are in the
    128-byte swizzled layout (rows of 64 halves; a k16 step is 32 bytes along the row)."""
    regs = n // 2
    name = f"kiln_wgmma_m64n{n}k16_lag{lag}" + (f"_sw{swizzle}" if swizzle else "")
    if swizzle:
        da, db = "kiln_wgmma_desc(a + 16 * k, 16, 1024, 1)", "kiln_wgmma_desc(b + 16 * k, 16, 1024, 1)"
    else:  # one k16 step is two core matrices along K: 2 * lbo bytes, lbo halves
        da, db = "kiln_wgmma_desc(a + k * a_lbo, a_lbo, 128)", "kiln_wgmma_desc(b + k * b_lbo, b_lbo, 128)"
    outs = ", ".join(f'"+f"(d.x[{i}])' for i in range(regs))
    dlist = ",".join(f"%{i}" for i in range(regs))
    text = (f"__device__ __forceinline__ void {name}({struct(n)}& d, const half* a, unsigned a_lbo, const half* b, "
            f"unsigned b_lbo, int k_steps) {{\n"
            f'  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");\n'
            f"#pragma unroll\n  for (int k = 0; k < k_steps; ++k) {{\n"
            f"    unsigned long long da = {da};\n"
            f"    unsigned long long db = {db};\n"
            f'    asm volatile("{{\\n .reg .pred p;\\n setp.ne.b32 p, 1, 0;\\n"\n'
            f'                 " wgmma.mma_async.sync.aligned.m64n{n}k16.f32.f16.f16 {{{dlist}}}, %{regs}, %{regs + 1}, '
            f'p, 1, 1, 0, 0;\\n}}\\n"\n'
            f'                 : {outs} : "l"(da), "l"(db) : "memory");\n'
            f"  }}\n"
            f'  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");\n'
            f'  asm volatile("wgmma.wait_group.sync.aligned {lag};" ::: "memory");\n'
            f"}}\n")
    return name, text


def store_helper(n: int, ctype: str, staging: bool = False) -> tuple[str, str]:
    """The 64 x n tile to row-major memory. staging: to the block's shared staging tile, which lies
    over the slabs: every warpgroup's products must be done (the block barrier) before any stores."""
    name = f"kiln_wgmma_store{n}_{ctype.replace(' ', '_')}" + ("_staging" if staging else "")
    # each warp w holds rows 16 w .. 16 w + 15 in mma.sync's accumulator layout (cuda_mma.py)
    text = (f"__device__ __forceinline__ void {name}({ctype}* p, const {struct(n)}& f, int ld) {{\n"
            f'  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");  // products left running\n'
            + ("  __syncthreads();  // the other warpgroups' products still read the slabs\n" if staging else "") +
            f"  int l = threadIdx.x % 32, g = l / 4, t = l % 4;\n"
            f"  p += 16 * ((threadIdx.x % 128) / 32) * ld;\n" + cuda_mma.float_rows(n // 8, ctype) + "}\n")
    return name, text


class WgmmaPrinter:
    """The CUDA printer's wgmma / mbarrier part: accumulator declarations and the calls."""

    def __init__(self, printer, kernel):
        self.p = printer
        self.used = uses(kernel)
        self.tma = uses(kernel, TMA_CALLS)  # shared tiles 1024-byte aligned (cuda.py)
        self.staging = staging(kernel) if self.tma else set()  # laid over the slabs (cuda.py)
        # a buffer parameter's data Var (the body's handle) -> its position
        self.params = [kernel.buffer_map[v].data if v in kernel.buffer_map else v for v in kernel.params]
        self.tensor_maps: list[dict] = []  # the kernel entry's tensor_maps: one extra parameter each
        self.helpers: dict[str, str] = {}
        self.sizes: dict[int, int] = {}  # id(accumulator data Var) -> n
        if self.used and not (printer.arch or "").endswith("a"):
            raise CompileError(f"{kernel.attrs.get('global_symbol', 'a kernel')}: wgmma and mbarrier calls need "
                               "Hopper's own instructions: "
                               f"build with -arch=sm_90a (this target is {printer.arch or 'of no named arch'})")

    def _n(self, e) -> int:
        n = _int(e, "the wgmma tile width n")
        if n not in N_SIZES:
            raise CompileError(f"wgmma m64n{n}k16 does not exist; n is one of {N_SIZES}")
        return n

    def declare(self, s) -> None:
        """An accumulator buffer: n / 2 floats per thread for each 64 x n tile (n from its calls)."""
        n = self.sizes.get(id(s.buffer.data))
        if n is None:
            n = self._scan(s)
        total = 1
        for x in s.extents:
            total *= _int(x, "a wgmma accumulator's size")
        name, old = self.p.declare(s.buffer.data)
        fn, text = fill_helper(n)
        self.helpers.setdefault(fn, text)
        self.p.emit(f"{struct(n)} {name}[{max(1, total // (64 * n))}];")
        self.p.stmt(s.body)
        self.p.restore(s.buffer.data, old)

    def _scan(self, s) -> int:
        found = []

        class _Calls(Visitor):
            def visit_Call(self, op):
                if _name(op) in ("kiln_wgmma_fill", "kiln_wgmma_mma", "kiln_wgmma_store") and op.args[0] is s.buffer.data:
                    found.append(op.args[2])
                self.generic_visit(op)

        _Calls().visit(s.body)
        if not found:
            raise CompileError(f"wgmma accumulator {s.buffer.name} is never filled, multiplied or stored")
        n = self._n(found[0])
        self.sizes[id(s.buffer.data)] = n
        return n

    def call(self, e) -> str:
        name, a = _name(e), e.args
        p = self.p
        if name == "kiln_wgmma_fill":
            n = self._n(a[2])
            fn, text = fill_helper(n)
            self.helpers.setdefault(fn, text)
            return f"{fn}({p.name(a[0])}[{p.expr(a[1])}])"
        if name == "kiln_wgmma_mma":
            n = self._n(a[2])
            self.helpers.setdefault("kiln_wgmma_desc", DESC)
            lag = _int(a[8], "the wgmma lag") if len(a) > 8 else 0
            swizzle = _int(a[9], "the wgmma tiles' swizzle") if len(a) > 9 else 0
            if swizzle not in (0, 128):
                raise CompileError(f"wgmma tiles are read unswizzled (0) or 128-byte swizzled, not {swizzle}")
            fn, text = mma_helper(n, lag, swizzle)
            self.helpers[fn] = text
            return (f"{fn}({p.name(a[0])}[{p.expr(a[1])}], {p.expr(a[3])}, {p.expr(a[4])}, {p.expr(a[5])}, "
                    f"{p.expr(a[6])}, {p.expr(a[7])})")
        if name == "kiln_wgmma_store":
            n = self._n(a[2])
            dst = a[3]
            ctype = p.type(dst.dtype) if not isinstance(dst, E.Call) else p.type(dst.args[0].dtype)
            fn, text = store_helper(n, ctype, _target(dst) in self.staging)
            self.helpers[fn] = text
            return f"{fn}({p.expr(a[3])}, {p.name(a[0])}[{p.expr(a[1])}], {p.expr(a[4])})"
        if name in TMA_CALLS:
            self.helpers.setdefault("kiln_tma", TMA)
            if name == "kiln_tma_load":
                return self._tma_load(e)
            return f"{name}({', '.join(p.expr(x) for x in a)})"
        self.helpers.setdefault("kiln_mbarrier", MBARRIER)
        args = ", ".join(p.expr(x) for x in a)
        return f"{name}({args})"

    def _tma_load(self, e) -> str:
        if len(e.args) != 13:
            raise CompileError(f"{self.p.func_name}: a bulk tensor copy outside a pipelined loop (double_buffer "
                               "with at least 2 stages over at least 2 steps) has no mbarrier to complete on")
        dst, src, x, y, *shape, bars, slot = e.args
        width, height, row_bytes, box_w, box_h, elem_bytes, swizzle = (_int(v, "a bulk tensor copy's shape")
                                                                        for v in shape)
        if isinstance(src, E.Call) and src.op == "tir.tvm_access_ptr":  # the tensor's pointer: its data Var
            src = src.args[1]
        index = next((i for i, v in enumerate(self.params) if v is src), None)
        if index is None:
            raise CompileError(f"{self.p.func_name}: a bulk tensor copy reads {src}, which is not a buffer "
                               "parameter of the kernel (its tensor map is made from the argument's address)")
        if box_w * elem_bytes > swizzle or box_w > 256 or box_h > 256 or row_bytes % 16:
            raise CompileError(f"{self.p.func_name}: a {box_h} x {box_w} box of {elem_bytes}-byte elements cannot be "
                               f"copied with a {swizzle}-byte swizzle (rows of at most {swizzle} bytes, boxes of "
                               "at most 256 x 256, rows 16-byte aligned)")
        spec = {"param": index, "elem_bytes": elem_bytes, "dims": [width, height], "row_bytes": row_bytes,
                "box": [box_w, box_h], "swizzle": swizzle}
        if spec not in self.tensor_maps:
            self.tensor_maps.append(spec)
        m = self.tensor_maps.index(spec)
        p = self.p
        return (f"kiln_tma_load({p.expr(dst)}, &kiln_tmap{m}, {p.expr(x)}, {p.expr(y)}, {p.expr(bars)}, "
                f"{p.expr(slot)})")

    def signature_params(self) -> list[str]:
        return [f"const __grid_constant__ kiln_tmap kiln_tmap{m}" for m in range(len(self.tensor_maps))]
