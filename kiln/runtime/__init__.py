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
           "ProfileResult", "convert", "const"]

# Names from the compiler are resolved on first use, so importing the runtime never loads it.
_LAZY = {
    "convert": ("kiln.ir", "convert"),
    "const": ("kiln.ir", "const"),
    "LibraryModule": ("kiln.runtime.library", "LibraryModule"),
    "CompiledModule": ("kiln.runtime.compiled", "CompiledModule"),
    "PackedFunc": ("kiln.runtime.function", "PackedFunc"),
    "ProfileResult": ("kiln.runtime.evaluator", "ProfileResult"),
}


def __getattr__(name: str):
    if name == "executor":  # tvm.runtime.executor.aot_executor.AotModule (wrappers only, no compiler)
        return importlib.import_module("kiln.runtime.executor")
    if name not in _LAZY:
        raise AttributeError(f"module 'kiln.runtime' has no attribute {name!r}")
    module, attr = _LAZY[name]
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value
