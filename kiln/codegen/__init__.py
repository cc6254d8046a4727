"""Code generators: one module per target kind, chosen from the BACKENDS table.

``build(mod, target)`` compiles an IRModule of lowered PrimFuncs and returns a runtime
Module. llvm, opencl and cuda generate code; the other kinds parse as targets and say so.
"""

from __future__ import annotations

import importlib

from ..errors import TargetError

BACKENDS = {
    "llvm": "kiln.codegen.llvm",
    "c": "kiln.codegen.c",
    "cuda": "kiln.codegen.cuda",
    "opencl": "kiln.codegen.opencl",
    "ext_dev": "kiln.codegen.ext_dev",  # the VTA-class accelerator (kiln/vta)
}


def build(mod, target):
    """Compile mod for target (a Target or a target string)."""
    from ..target import Target

    target = target if isinstance(target, Target) else Target(target)
    kind = target.kind.name
    if kind not in BACKENDS:
        raise TargetError(f"no code generator for target kind {kind!r}; known: {', '.join(BACKENDS)}")
    module = BACKENDS[kind]
    if module is None:
        raise TargetError(f"target {kind!r} is not built yet in this version of kiln; use 'llvm' "
                          f"(backends with code generation: "
                          f"{', '.join(k for k, v in BACKENDS.items() if v)})")
    return importlib.import_module(module).build(mod, target)


def lowered_functions(mod, kind: str) -> list:
    """[(symbol, PrimFunc)] of a module (or one PrimFunc) a ``kind`` backend builds; an error
    naming what is not lowered TIR."""
    from ..errors import CompileError
    from ..ir.stmt import PrimFunc

    items = mod.items() if hasattr(mod, "items") else [("main", mod)]
    funcs = []
    for key, func in items:
        if not isinstance(func, PrimFunc):
            raise CompileError(f"function {key!r} is a {type(func).__name__}, not a lowered PrimFunc; "
                               f"lower it (tvm.lower) before building for {kind}")
        funcs.append((func.attrs.get("global_symbol", key), func))
    if not funcs:
        raise CompileError("the module has no functions to build")
    return funcs
