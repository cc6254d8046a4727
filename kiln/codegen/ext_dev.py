"""ext_dev: the VTA-class accelerator (kiln/vta). ``tvm.build(s, args, "ext_dev")`` compiles each
lowered function to the accelerator's instruction stream and micro-ops, as ``vta.build`` does,
for the configuration of ``vta.get_env()``."""

from __future__ import annotations


def build(mod, target):
    del target  # the accelerator's configuration is vta.get_env()'s, not the target string's
    from ..vta.compiler import compile_lowered

    return compile_lowered(mod)
