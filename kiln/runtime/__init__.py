"""The runtime: devices, arrays, modules. Imports only the standard library, numpy and ctypes,
so a device without the compiler can run modules (and the RPC server) with it alone.
"""

from __future__ import annotations

import importlib

from . import ndarray
from .device import Device, cl, cpu, cuda, device, gpu, opencl
from .module import Module, load_module
from .ndarray import NDArray

__all__ = ["Device", "device", "cpu", "cuda", "gpu", "cl", "opencl", "NDArray", "ndarray",
           "Module", "load_module", "LibraryModule", "CompiledModule", "PackedFunc",
           "ProfileResult"]

# Heavier parts of the runtime are resolved on first use.
_LAZY = {
    "LibraryModule": ("kiln.runtime.library", "LibraryModule"),
    "CompiledModule": ("kiln.runtime.compiled", "CompiledModule"),
    "PackedFunc": ("kiln.runtime.function", "PackedFunc"),
    "ProfileResult": ("kiln.runtime.evaluator", "ProfileResult"),
}


def __getattr__(name: str):
    if name == "executor":  # tvm.runtime.executor.aot_executor.AotModule (wrappers only, no compiler)
        return importlib.import_module("kiln.runtime.executor")
    if name in ("convert", "const"):  # IR constructors: the compiler's, not the runtime's
        raise AttributeError(f"kiln.runtime has no {name}: it makes compiler IR; use kiln.{name} (tvm.{name}) "
                             "or kiln.tir.const where the compiler is installed")
    if name not in _LAZY:
        raise AttributeError(f"module 'kiln.runtime' has no attribute {name!r}")
    module, attr = _LAZY[name]
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value
