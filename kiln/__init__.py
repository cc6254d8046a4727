"""kiln: a deep-learning compiler stack. Use it as ``import kiln as tvm``.

Submodules load on first use (PEP 562), so ``import kiln`` stays cheap and a device that has
only numpy can import the runtime and the RPC server.
"""

from __future__ import annotations

import importlib

from .errors import KilnError, TVMError

__version__ = "0.1.0"

_SUBMODULES = {
    "ir", "te", "tir", "target", "codegen", "runtime", "contrib", "rpc", "exec", "relay",
    "topi", "autotvm", "driver", "micro", "transform", "testing", "nd", "errors", "config", "script", "vta",
}

# name -> (module, attribute)
_ATTRS = {
    "build": ("kiln.build_module", "build"),
    "lower": ("kiln.build_module", "lower"),
    "IRModule": ("kiln.ir.module", "IRModule"),
    "convert": ("kiln.ir", "convert"),
    "const": ("kiln.ir", "const"),
    "device": ("kiln.runtime.device", "device"),
    "cpu": ("kiln.runtime.device", "cpu"),
    "cuda": ("kiln.runtime.device", "cuda"),
    "gpu": ("kiln.runtime.device", "cuda"),
    "cl": ("kiln.runtime.device", "cl"),
    "ext_dev": ("kiln.runtime.device", "ext_dev"),
    "opencl": ("kiln.runtime.device", "cl"),
    "Device": ("kiln.runtime.device", "Device"),
    "load_module": ("kiln.runtime.module", "load_module"),
}


def __getattr__(name: str):
    if name in _ATTRS:
        module, attr = _ATTRS[name]
        value = getattr(importlib.import_module(module), attr)
    elif name in _SUBMODULES:
        value = importlib.import_module(f"kiln.{name}")
    else:
        raise AttributeError(f"module 'kiln' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | _SUBMODULES | set(_ATTRS))
