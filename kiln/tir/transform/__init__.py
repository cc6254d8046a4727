"""The TIR pipelines: each pass is a function PrimFunc -> PrimFunc; the lists below run in order
(pipeline.py runs them: PassContext, instruments, KILN_DEBUG=2).

Seed names (``tvm.tir.transform.Simplify`` ...) are module passes built from these functions.
"""

from __future__ import annotations

from kiln.ir.module import IRModule
from kiln.ir.stmt import PrimFunc
from kiln.transform import ModulePass, Pass, PassInfo

from .device_workspace import device_workspace
from .double_buffer import inject_double_buffer
from .flatten import flatten_buffers
from .half_storage import store_half
from .inject_virtual_thread import inject_virtual_threads
from .loop_partition import partition_loops
from .lower_blocks import lower_blocks
from .pipeline import GPUCaps, Pipeline, Step, is_kernel  # noqa: F401
from .scalarize import scalarize
from .simplify_stmt import simplify_func
from .split_host_device import split_host_device, split_module
from .texture import note_textures, plan_textures
from .thread_sync import insert_barriers
from .unroll import unroll_loops
from .vectorize import vectorize_loops
from .verify_gpu import check_kernel_limits, verify_thread_binding
from .warp_reduction import warp_reductions

PIPELINE = Pipeline("tir.Pipeline", [
    Step("tir.LowerBlocks", lower_blocks),  # T.block / tir.Schedule blocks to plain loops
    Step("tir.NoteTextures", note_textures),  # texture tensors' shapes, for the OpenCL texture printer
    Step("tir.StorageFlatten", flatten_buffers, essential=True),
    Step("tir.Simplify", simplify_func),
    Step("tir.LoopPartition", partition_loops),
    Step("tir.Simplify", simplify_func),
    Step("tir.VectorizeLoop", vectorize_loops),
    # Vector loops that stayed scalar (split tails) are serial now: partition their guards too.
    Step("tir.LoopPartition", partition_loops),
    Step("tir.UnrollLoop", unroll_loops),
    Step("tir.Simplify", simplify_func),
])

# After PIPELINE, every GPU build (kiln/codegen/gpu.py) runs this one, whatever the kernel language;
# steps are gated by what the device can do (GPUCaps), not by the target's kind.
GPU_PIPELINE = Pipeline("tir.GPUPipeline", [
    # every global write under blockIdx/threadIdx loops
    Step("tir.VerifyThreadBinding", verify_thread_binding),
    # vthread loops pushed down: shared work once, private tiles per vthread
    Step("tir.InjectVirtualThread", inject_virtual_threads),
    # double-buffered shared tiles, prefetched asynchronously (cp.async on sm_80+)
    Step("tir.InjectDoubleBuffer", inject_double_buffer, when=lambda caps: caps.async_copy),
    # image layouts of texture-scoped tensors, for the printer and the workspace
    Step("tir.TextureLayouts", plan_textures, takes_caps=True),
    # host PrimFunc launching kernel PrimFuncs (attrs in split_host_device.py's docstring)
    Step("tir.SplitHostDevice", split_module, on="module", essential=True),
    # float16 stored as half, computed in float, where the language has no half arithmetic
    Step("tir.HalfStorage", store_half, on="kernel", when=lambda caps: not caps.fp16_arith),
    # barriers where threads share memory
    Step("tir.ThreadSync", insert_barriers, on="kernel", essential=True),
    # threads per block, shared bytes against the target's limits
    Step("tir.VerifyGPULimits", lambda k, caps: check_kernel_limits(k, caps.target), on="kernel", takes_caps=True),
    # the last levels of cross-thread reductions as warp shuffles
    Step("tir.WarpReduction", warp_reductions, on="kernel", when=lambda caps: caps.warp_shuffle),
    # tensors between kernels allocated on the device
    Step("tir.DeviceWorkspace", device_workspace, on="host", essential=True),
])

# After PIPELINE, the C target (kiln/codegen/c.py) runs this: plain C99 has no vector types.
C_PIPELINE = Pipeline("tir.CPipeline", [
    Step("tir.Scalarize", scalarize, essential=True),
])


class PrimFuncPass(Pass):
    """A pass over every PrimFunc of an IRModule: ``mod = tvm.tir.transform.Simplify()(mod)``.
    A ``kiln.transform.Pass``, so PassContext, instruments and KILN_DEBUG=2 treat it as any pass."""

    def __init__(self, fn, name: str):
        super().__init__(fn, PassInfo(0, name))

    def _transform(self, mod: IRModule, ctx) -> IRModule:
        return mod.with_functions({key: self._fn(func) if isinstance(func, PrimFunc) else func
                                   for key, func in mod.items()})


def prim_func_pass(fn, name: str):
    def make():
        return PrimFuncPass(fn, name)

    make.__name__ = name.split(".")[-1]
    return make


StorageFlatten = prim_func_pass(flatten_buffers, "tir.StorageFlatten")
Simplify = prim_func_pass(simplify_func, "tir.Simplify")
LoopPartition = prim_func_pass(partition_loops, "tir.LoopPartition")
VectorizeLoop = prim_func_pass(vectorize_loops, "tir.VectorizeLoop")
UnrollLoop = prim_func_pass(unroll_loops, "tir.UnrollLoop")
LowerBlocks = prim_func_pass(lower_blocks, "tir.LowerBlocks")

VerifyThreadBinding = prim_func_pass(verify_thread_binding, "tir.VerifyThreadBinding")
ThreadSync = prim_func_pass(insert_barriers, "tir.ThreadSync")


def SplitHostDevice():  # noqa: N802 - the seed's name
    """A module pass: each function becomes its host function plus its kernels (by symbol)."""

    def run(mod: IRModule, ctx) -> IRModule:
        out, count = {}, 0
        for key, func in mod.items():
            if not isinstance(func, PrimFunc):
                out[key] = func
                continue
            host, kernels = split_host_device(func, count)
            count += len(kernels)
            out[key] = host
            for k in kernels:
                out[k.attrs["global_symbol"]] = k
        return mod.with_functions(out)

    return ModulePass(run, PassInfo(0, "tir.SplitHostDevice"))
