"""The TIR pipeline: each pass is a function PrimFunc -> PrimFunc; the list below runs in order.

Seed names (``tvm.tir.transform.Simplify`` ...) are module passes built from these functions.
"""

from __future__ import annotations

from dataclasses import replace

from kiln import config
from kiln.ir.module import IRModule
from kiln.ir.stmt import PrimFunc

from .flatten import flatten_buffers
from .loop_partition import partition_loops
from .simplify_stmt import simplify_func
from .unroll import unroll_loops
from .vectorize import vectorize_loops

PIPELINE = [
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

_ = replace
