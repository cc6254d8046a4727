"""GPU pipeline step tir.HalfStorage, for kernel languages without half arithmetic
(GPUCaps.fp16_arith false: OpenCL without cl_khr_fp16): mark each kernel ``half_storage``, so
the printer stores float16 tensors as halves and computes on them in float (vload_half /
vstore_half, kiln/codegen/opencl_half.py)."""

from __future__ import annotations

from dataclasses import replace

from kiln.ir.stmt import PrimFunc


def store_half(kernel: PrimFunc) -> PrimFunc:
    return replace(kernel, attrs={**kernel.attrs, "half_storage": True})
