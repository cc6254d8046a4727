"""ext_dev: the VTA-class accelerator (kiln/vta). ``tvm.build(s, args, "ext_dev")`` compiles each
lowered function to the accelerator's instruction stream and micro-ops, as ``vta.build`` does,
for the configuration of ``vta.get_env()``."""

from __future__ import annotations

from dataclasses import replace


def build(mod, target):
    del target  # the accelerator's configuration is vta.get_env()'s, not the target string's
    from ..vta.compiler import _Retag, compile_func
    from ..vta.environment import get_env
    from ..vta.module import VTAModule
    from . import lowered_functions

    env = get_env()
    funcs = {name: compile_func(replace(f, body=_Retag().visit(f.body)), env, name)
             for name, f in lowered_functions(mod, "ext_dev")}
    return VTAModule(funcs, env.export())
