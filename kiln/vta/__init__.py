"""A VTA-class int8 accelerator: configuration, ISA, C simulators, compiler path, schedule search.

``from kiln import vta``; ``env = vta.get_env()``; schedule with env's scopes, pragmas and
``env.gemm``; ``vta.build(s, args, tvm.target.Target("ext_dev", host=env.target_host))``; run on
``tvm.ext_dev(0)`` locally or ``remote.ext_dev(0)`` through RPC. docs/vta.md is the guide.
Loaded lazily: importing kiln.vta loads nothing of the compiler.
"""

from __future__ import annotations

import importlib

_ATTRS = {
    "Environment": ("kiln.vta.environment", "Environment"),
    "get_env": ("kiln.vta.environment", "get_env"),
    "from_file": ("kiln.vta.environment", "from_file"),
    "VTAConfigError": ("kiln.vta.environment", "VTAConfigError"),
    "build": ("kiln.vta.compiler", "build"),
    "lower": ("kiln.vta.compiler", "lower"),
    "build_config": ("kiln.vta.compiler", "build_config"),
    "VTAModule": ("kiln.vta.module", "VTAModule"),
}
_SUBMODULES = {"isa", "simulator", "environment", "module", "device", "compiler", "emit", "deps", "intrin",
               "top", "cost_model", "search", "graph", "testing"}


def __getattr__(name: str):
    if name in _ATTRS:
        module, attr = _ATTRS[name]
        value = getattr(importlib.import_module(module), attr)
    elif name in _SUBMODULES:
        value = importlib.import_module(f"kiln.vta.{name}")
    else:
        raise AttributeError(f"module 'kiln.vta' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | _SUBMODULES | set(_ATTRS))
