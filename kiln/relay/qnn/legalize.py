"""Legalize: per target, give qnn.conv2d / qnn.dense the operand signedness the CPU multiplies.

- x86 with AVX2 (``vpmaddubsw``) or AVX-VNNI / AVX-512 VNNI (``vpdpbusd``): the instructions
  multiply unsigned 8-bit data by signed 8-bit weights, so int8 data becomes uint8
  (``x + 128``, zero point + 128) and a constant uint8 kernel becomes int8 (``w - 128``).
- AArch64 with the dot-product extension (``sdot``): signed by signed, so uint8 data becomes
  int8 (``x - 128``, zero point - 128).
- Other targets (GPUs, CPUs without those instructions): unchanged.

The real values are unchanged (data and zero point move together), so the result is the same
integer; only the operands the kernels see change. Features come from LLVM (target/cpu_facts).
"""

from __future__ import annotations

from ..expr import Constant, const
from ..op import tensor as ft
from ..op import transform as ftf
from ..transform.infer_type import infer
from ..visitor import ExprMutator, ExprVisitor
from .op import nn as qnn_nn


def wanted_signedness(target) -> tuple[str, str] | None:
    """(data dtype, weight dtype) the target's 8-bit dot product takes, or None to leave ops as they are."""
    if target is None or target.kind.name not in ("llvm", "c"):
        return None
    from kiln.target.cpu_facts import cpu_facts

    from ..backend.family import target_family
    facts = cpu_facts(target)
    family = target_family(target)
    llvm_features = facts.llvm_features or ""
    if family == "x86" and ("avx2" in facts.features or "+avxvnni" in llvm_features
                            or "+avx512vnni" in llvm_features):
        return "uint8", "int8"
    if family == "arm_cpu" and facts.arch.startswith("aarch64") and "+dotprod" in llvm_features:
        return "int8", "int8"
    return None


def _shift(x, zp, by: int, dtype: str):
    """(x + by) as ``dtype`` and its zero point + by: the same real values."""
    shifted = ftf.cast(ft.add(ftf.cast(x, "int32"), const(by, "int32")), dtype)
    if isinstance(zp, Constant):
        new_zp = const(zp.data.astype("int64") + by, "int32")
    else:
        new_zp = ft.add(ftf.cast(zp, "int32"), const(by, "int32"))
    return shifted, new_zp


class _Legalize(ExprMutator):
    def __init__(self, want):
        super().__init__()
        self.data_dtype, self.weight_dtype = want

    def visit_Function(self, f):
        if f.attrs.get("Primitive"):
            return f
        return super().visit_Function(f)

    def visit_Call(self, call):
        call = super().visit_Call(call)
        if call.op not in (qnn_nn.CONV2D, qnn_nn.DENSE):
            return call
        x, w, zx, zw, sx, sw = call.args
        dx, dw = infer(x).checked_type.dtype, infer(w).checked_type.dtype
        if {dx, dw} - {"int8", "uint8"} or (dx, dw) == (self.data_dtype, self.weight_dtype):
            return call
        if dx != self.data_dtype:
            x, zx = _shift(x, zx, 128 if self.data_dtype == "uint8" else -128, self.data_dtype)
        # a computed kernel stays: shifting it would cost a pass over it on every run
        if dw != self.weight_dtype and isinstance(w, Constant):
            w, zw = _shift(w, zw, -128 if self.weight_dtype == "int8" else 128, self.weight_dtype)
        return call.op(x, w, zx, zw, sx, sw, **dict(call.attrs.items()))


def _has_matmul(func) -> bool:
    found = []

    class V(ExprVisitor):
        def visit_Call(self, call):
            super().visit_Call(call)
            if call.op in (qnn_nn.CONV2D, qnn_nn.DENSE):
                found.append(call)
    V().visit(func)
    return bool(found)


def legalize(func, target):
    """``func`` with qnn.conv2d / qnn.dense operands in the signedness ``target`` multiplies best."""
    if not _has_matmul(func):  # float models: nothing to ask LLVM about
        return func
    want = wanted_signedness(target)
    if want is None:
        return func
    return _Legalize(want).visit(infer(func))
