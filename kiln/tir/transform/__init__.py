"""The TIR pipeline: each pass is a function PrimFunc -> PrimFunc; the list below runs in order.

Seed names (``tvm.tir.transform.Simplify`` ...) are module passes built from these functions.
"""

from __future__ import annotations

from dataclasses import replace

from kiln import config
from kiln.ir.module import IRModule
from kiln.ir.stmt import PrimFunc

from .flatten import flatten_buffers
from .split_host_device import split_host_device
from .thread_sync import insert_barriers
from .verify_gpu import verify_thread_binding
from .loop_partition import partition_loops
from .lower_blocks import lower_blocks
from .simplify_stmt import simplify_func
from .texture import note_textures
from .unroll import unroll_loops
from .vectorize import vectorize_loops

PIPELINE = [
    ("tir.LowerBlocks", lower_blocks),  # T.block / tir.Schedule blocks to plain loops
    ("tir.NoteTextures", note_textures),  # texture tensors' shapes, for the OpenCL texture printer
    ("tir.StorageFlatten", flatten_buffers),
    ("tir.Simplify", simplify_func),
    ("tir.LoopPartition", partition_loops),
    ("tir.Simplify", simplify_func),
    ("tir.VectorizeLoop", vectorize_loops),
    # Vector loops that stayed scalar (split tails) are serial now: partition their guards too.
    ("tir.LoopPartition", partition_loops),
    ("tir.UnrollLoop", unroll_loops),
    ("tir.Simplify", simplify_func),
]


# After PIPELINE, a GPU target's build (kiln/codegen/opencl.py lower_device) runs these, in order:
#   verify_thread_binding (every global write under blockIdx/threadIdx loops)
#   inject_virtual_threads (vthread loops pushed down: shared work once, private tiles per vthread)
#   split_host_device     (host PrimFunc launching kernel PrimFuncs; attrs in its docstring)
#   insert_barriers       (each kernel: barriers where threads share memory)
#   check_kernel_limits   (each kernel: threads per block, shared bytes against the target)
#   device_workspace      (host: tensors between kernels allocated on the device)
GPU_PIPELINE = ["tir.VerifyThreadBinding", "tir.InjectVirtualThread", "tir.SplitHostDevice", "tir.ThreadSync", "tir.VerifyGPULimits",
                "tir.DeviceWorkspace"]


def run_pipeline(func: PrimFunc) -> PrimFunc:
    debug = config.get().debug
    for name, fn in PIPELINE:
        func = fn(func)
        if debug >= 2:
            print(f"# after {name}\n{func}\n")
    return func


class ModulePass:
    """A pass over every PrimFunc of an IRModule: ``mod = tvm.tir.transform.Simplify()(mod)``."""

    def __init__(self, fn, name: str):
        self.fn = fn
        self.name = name

    def __call__(self, mod: IRModule) -> IRModule:
        out = {}
        for key, func in mod.items():
            out[key] = self.fn(func) if isinstance(func, PrimFunc) else func
        return mod.with_functions(out)

    def __repr__(self) -> str:
        return f"Pass({self.name})"


def prim_func_pass(fn, name: str):
    def make():
        return ModulePass(fn, name)

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

    def run(mod: IRModule) -> IRModule:
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

    return _FnPass(run, "tir.SplitHostDevice")


class _FnPass:
    def __init__(self, fn, name):
        self.fn, self.name = fn, name

    def __call__(self, mod):
        return self.fn(mod)

    def __repr__(self) -> str:
        return f"Pass({self.name})"


_ = replace
