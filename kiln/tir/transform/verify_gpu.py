"""Checks of GPU functions: every global write runs on GPU threads, and kernels fit the device.

``verify_thread_binding`` runs before the host/device split: a store to global memory that no
blockIdx/threadIdx loop encloses would run on the host, serially, on memory the host cannot
touch; the error names the stage (the buffer) and its unbound loops. ``check_kernel_limits``
runs on each kernel: threads per block, each thread axis's extent, and shared memory against
the target's ``max_num_threads`` / ``max_shared_memory_per_block``.
"""

from __future__ import annotations

from kiln.errors import CompileError
from kiln.ir import expr as E
from kiln.ir.functor import Visitor
from kiln.ir.stmt import ForKind, PrimFunc


class _Unbound(Visitor):
    def __init__(self, symbol: str):
        super().__init__()
        self.symbol = symbol
        self.loops: list = []  # enclosing unbound loop vars (outside every thread loop)
        self.in_kernel = 0

    def visit_For(self, op):
        if op.kind == ForKind.THREAD_BINDING:
            self.in_kernel += 1
            self.visit(op.body)
            self.in_kernel -= 1
            return
        if not self.in_kernel:
            self.loops.append(op.loop_var)
            self.visit(op.body)
            self.loops.pop()
            return
        self.visit(op.body)

    def visit_Allocate(self, op):
        if not self.in_kernel and op.buffer.scope in ("shared", "local"):
            raise CompileError(f"{self.symbol}: stage {op.buffer.name} lives in {op.buffer.scope} memory but is "
                               "computed outside every GPU kernel; compute_at it under the loops bound to "
                               "blockIdx/threadIdx of the stage that reads it")
        if self.in_kernel and op.buffer.scope == "global":
            raise CompileError(f"{self.symbol}: stage {op.buffer.name} is a global-memory tensor computed inside "
                               "a GPU kernel; give it a scope (s.cache_read/cache_write or s[X].set_scope('local')) "
                               "or compute_inline it")
        self.generic_visit(op)

    def visit_BufferStore(self, op):
        if not self.in_kernel and op.buffer.scope == "global":
            if self.loops:
                axes = ", ".join(v.name for v in self.loops)
                raise CompileError(f"{self.symbol}: stage {op.buffer.name}: loop axes {axes} write global memory "
                                   "but are not bound to GPU threads. Did you forget to bind? e.g. "
                                   "xo, xi = s[B].split(B.op.axis[0], factor=64); "
                                   "s[B].bind(xo, te.thread_axis('blockIdx.x')); s[B].bind(xi, te.thread_axis('threadIdx.x'))")
            raise CompileError(f"{self.symbol}: stage {op.buffer.name} writes global memory outside any GPU kernel "
                               "(it has no loop to bind). Did you forget to bind? Give it an axis bound to "
                               "blockIdx.x/threadIdx.x")
        self.generic_visit(op)


def verify_thread_binding(func: PrimFunc) -> PrimFunc:
    _Unbound(func.attrs.get("global_symbol", "main")).visit(func.body)
    return func


class _Shared(Visitor):
    def __init__(self):
        super().__init__()
        self.allocs: list = []

    def visit_Allocate(self, op):
        self.allocs.append(op)
        self.generic_visit(op)


def shared_bytes(kernel: PrimFunc) -> int:
    """Static shared memory of a kernel, in bytes; symbolic sizes are an error."""
    from kiln.codegen.cuda_wgmma import staging

    v = _Shared()
    v.visit(kernel.body)
    staged = staging(kernel)  # a wgmma epilogue's staging tile lies over the slabs (codegen/cuda_wgmma.py)
    total, over, words = 0, 0, 0
    for op in v.allocs:
        if op.buffer.scope not in ("shared", "local"):
            continue
        n = 1
        for e in op.extents:
            if not isinstance(e, E.IntImm):
                raise CompileError(f"{kernel.attrs['global_symbol']}: {op.buffer.scope} buffer {op.buffer.name} has "
                                   f"symbolic size {e}; GPU {op.buffer.scope} memory needs a constant size "
                                   "(split the axes it covers by constant factors)")
            n *= e.value
        if op.buffer.scope == "shared":
            size = n * op.buffer.dtype.bits * op.buffer.dtype.lanes // 8
            if op.buffer.data in staged:
                over = max(over, size)
            else:
                total += size
                words += size if op.buffer.dtype.bits == 64 else 0  # mbarriers: beside the staging tile
    return max(total, words + over) if staged else total


# Per-dimension work-group limits that CUDA fixes and NVIDIA's OpenCL reports (x, y, z).
MAX_THREAD_DIMENSIONS = (1024, 1024, 64)


def check_kernel_limits(kernel: PrimFunc, target) -> PrimFunc:
    name = kernel.attrs["global_symbol"]
    extents = kernel.attrs["thread_extent"]
    max_threads = int(target.attrs.get("max_num_threads", 256))
    threads, desc = 1, []
    for tag, ext in extents.items():
        if not tag.startswith("threadIdx"):
            continue
        if not isinstance(ext, E.IntImm):
            raise CompileError(f"{name}: {tag} has symbolic extent {ext}; threads per block must be constant "
                               "(split the axis by a constant factor before binding it)")
        threads *= ext.value
        desc.append(f"{tag}={ext.value}")
        dim_limit = MAX_THREAD_DIMENSIONS["xyz".index(tag[-1])]
        if ext.value > dim_limit:
            raise CompileError(f"{name}: {tag} has {ext.value} threads; GPUs allow at most {dim_limit} in that "
                               f"dimension (CUDA and NVIDIA OpenCL: x 1024, y 1024, z 64): bind the larger "
                               "axis to threadIdx.x or use a smaller split factor")
    if threads > max_threads:
        raise CompileError(f"{name}: {threads} threads per block ({', '.join(desc)}) exceed the target's limit "
                           f"of {max_threads}; bind smaller thread tiles (a smaller split factor) or raise the "
                           f"limit with '-max_num_threads=N' in the target if the device allows it")
    limit = int(target.attrs.get("max_shared_memory_per_block", 48 * 1024))
    used = shared_bytes(kernel)
    if used > limit:
        raise CompileError(f"{name}: {used} bytes of shared memory exceed the target's {limit} bytes per block; "
                           "use smaller tiles for the cache_read('shared') stages or raise "
                           "'-max_shared_memory_per_block=N' in the target if the device allows it")
    return kernel
