"""The OpenCL backend: OpenCL C's spellings, its printer, and a one-line build.

``build`` is the shared GPU driver (gpu.py: GPU_PIPELINE, then the printer below, then the
LLVM host module whose metadata carries the kernels, docs/abi.md "GPU modules"). Kernels
touching texture-scoped tensors print through opencl_texture.py, halves through opencl_half.py.
pyopencl is never imported here.
"""

from __future__ import annotations

from ..ir.stmt import PrimFunc
from . import gpu
from .c_family import CStylePrinter, Lang
from .gpu import KernelLanguage
from .opencl_texture import TextureImages

_TYPES = {("float", 16): "half", ("float", 32): "float", ("float", 64): "double",
          ("int", 8): "char", ("int", 16): "short", ("int", 32): "int", ("int", 64): "long",
          ("uint", 8): "uchar", ("uint", 16): "ushort", ("uint", 32): "uint", ("uint", 64): "ulong",
          ("bool", 1): "bool"}

OPENCL = Lang(
    kernel_prefix="__kernel",
    buffer_param="__global {type}* restrict {name}",
    global_qual="__global ",
    shared_decl="__local ",
    barrier="barrier(CLK_LOCAL_MEM_FENCE);",
    thread_index={**{f"blockIdx.{d}": f"((int)get_group_id({k}))" for k, d in enumerate("xyz")},
                  **{f"threadIdx.{d}": f"((int)get_local_id({k}))" for k, d in enumerate("xyz")}},
    types=_TYPES,
    math={"fabs": "fabs"},
    extensions={("float", 64): "#pragma OPENCL EXTENSION cl_khr_fp64 : enable",
                ("float", 16): "#pragma OPENCL EXTENSION cl_khr_fp16 : enable"},
)


class OpenCLPrinter(CStylePrinter):
    def __init__(self):
        super().__init__(OPENCL)

    def _kernel_attrs(self, func) -> str:
        # The work-group size is fixed at compile time, which lets the OpenCL compiler size registers.
        ext = func.attrs.get("thread_extent", {})
        dims = [ext.get(f"threadIdx.{d}") for d in "xyz"]
        if all(d is None or hasattr(d, "value") for d in dims):
            x, y, z = (d.value if d is not None else 1 for d in dims)
            return f"__attribute__((reqd_work_group_size({x}, {y}, {z})))\n"
        return ""

    def index(self, e, buf) -> str:
        # int32 index arithmetic overflows in buffers of 2**31 elements or more: compute it in long.
        n = buf.shape[0] if buf.shape else None
        big = n is not None and (n.value >= 2 ** 31 if hasattr(n, "value") else n.dtype.bits == 64)
        if not big or e.dtype.bits != 32 or self.promote:
            return self.expr(e)
        self.promote = True
        try:
            return self.expr(e)
        finally:
            self.promote = False


class TexturePrinter(TextureImages, OpenCLPrinter):
    """OpenCLPrinter with images for texture-scoped buffers and half storage (opencl_texture.py)."""


def kernel_source(kernels: list[PrimFunc]) -> str:
    """OpenCL C of the kernels, one translation unit."""
    parts, needs = [], set()
    for k in kernels:
        # Kernels touching texture-scoped tensors (attr "texture") take images for them.
        p = TexturePrinter() if k.attrs.get("texture") or k.attrs.get("half_storage") else OpenCLPrinter()
        parts.append(p.print_kernel(k))
        needs |= p.needs
    head = "".join(n + "\n" for n in sorted(needs))
    return head + ("\n" if head else "") + "\n".join(parts)


def print_kernels(kernels: list[PrimFunc], target) -> tuple[str, list[dict]]:
    return kernel_source(kernels), [{} for _ in kernels]


# OpenCL C has no warp shuffles kiln uses, and half arithmetic only with cl_khr_fp16: halves are
# stored as halves and computed in float (opencl_half.py), so no extension is needed.
LANGUAGE = KernelLanguage("opencl", "cl", print_kernels, fp16_arith=False)


def build(mod, target):
    """Host CompiledModule (LLVM, for target.host or 'llvm') carrying OpenCL C kernels."""
    return gpu.build(mod, target, LANGUAGE)
