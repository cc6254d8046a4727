"""``I``: the IRModule namespace of TVMScript (``from kiln.script import ir as I``)."""

from __future__ import annotations

from kiln.ir.module import IRModule
from kiln.ir.stmt import PrimFunc


def ir_module(cls):
    """An IRModule of the @T.prim_func methods of a class (each already parsed by T.prim_func)."""
    if not isinstance(cls, type):
        raise TypeError(f"@I.ir_module decorates a class, got {type(cls).__name__}")
    funcs = {name: value for name, value in vars(cls).items() if isinstance(value, PrimFunc)}
    if not funcs:
        raise TypeError(f"@I.ir_module class {cls.__name__} has no @T.prim_func methods")
    return IRModule(funcs)
