"""``relay.qnn.transform``: the qnn passes as Pass objects (printed with KILN_DEBUG=2)."""

from __future__ import annotations

from kiln.transform import FunctionPass, PassInfo

from ..transform.infer_type import infer
from .canonicalize import canonicalize
from .cpu_int8 import use_int8_kernels
from .legalize import legalize


def Legalize():  # noqa: N802 - seed names follow TVM
    """Per target (the enclosing ``with Target``; relay.build sets it): qnn.conv2d / qnn.dense
    operands in the signedness the CPU's 8-bit dot product takes (legalize.py)."""
    def run(func, mod, ctx):
        from kiln.target import Target
        return infer(legalize(infer(func), Target.current(allow_none=True)))
    return FunctionPass(run, PassInfo(0, "qnn.Legalize"))


def CanonicalizeOps():  # noqa: N802
    """Every qnn op to integer relay ops (canonicalize.py); on CPUs with an 8-bit dot product
    (the enclosing ``with Target``), conv/dense + requantize chains first become the int8
    kernels' ops (cpu_int8.py)."""
    def run(func, mod, ctx):
        from kiln.target import Target
        return infer(canonicalize(use_int8_kernels(infer(func), Target.current(allow_none=True))))
    return FunctionPass(run, PassInfo(0, "qnn.CanonicalizeOps"))


__all__ = ["Legalize", "CanonicalizeOps", "legalize", "canonicalize"]
