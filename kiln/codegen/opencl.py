"""The OpenCL backend: lowered GPU PrimFuncs -> an LLVM host module carrying OpenCL C kernels.

``build(mod, target)`` checks thread binding, splits each function into host code and kernels
(kiln/tir/transform/split_host_device.py), inserts barriers, checks the kernels against the
target's limits, prints them as OpenCL C, and compiles the host functions with the LLVM
backend for ``target.host`` (default "llvm"). The kernels travel in the host module's metadata
(``device_code``, docs/abi.md "GPU modules"), so exported .so/.tar files carry them; the host
calls ``__kiln_device_launch`` for every kernel launch. pyopencl is never imported here.
"""

from __future__ import annotations

from dataclasses import replace

from ..errors import CompileError
from ..ir.module import IRModule
from ..ir.stmt import PrimFunc
from ..runtime.module import Module
from .c_family import CStylePrinter, Lang

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


def kernel_source(kernels: list[PrimFunc]) -> str:
    """OpenCL C of the kernels, one translation unit."""
    from .opencl_texture import TexturePrinter

    parts, needs = [], set()
    for k in kernels:
        # Kernels touching texture-scoped tensors (attr "texture") take images for them.
        p = TexturePrinter() if k.attrs.get("texture") or k.attrs.get("half_storage") else OpenCLPrinter()
        parts.append(p.print_kernel(k))
        needs |= p.needs
    head = "".join(n + "\n" for n in sorted(needs))
    return head + ("\n" if head else "") + "\n".join(parts)


def kernel_entry(kernel: PrimFunc) -> dict:
    """The kernels entry of the device code (docs/abi.md "GPU modules")."""
    params, images = [], kernel.attrs.get("texture", {})
    for p in kernel.params:
        buf = kernel.buffer_map.get(p)
        if buf is not None:
            params.append({"name": buf.name, "kind": "buffer", "dtype": str(buf.dtype)})
            if id(p) in images:  # an image2d_t of this size: runtimes check what they are given
                params[-1]["image"] = [images[id(p)].width, images[id(p)].height]
        else:
            params.append({"name": p.name, "kind": "scalar", "dtype": str(p.dtype)})
    return {"name": kernel.attrs["global_symbol"], "params": params, "thread_tags": list(kernel.attrs["thread_tags"])}


def lower_device(mod, target) -> tuple[IRModule, list[PrimFunc]]:
    """(host IRModule, kernels) of a lowered module for a GPU target: the GPU passes in order."""
    from ..tir.transform.device_workspace import device_workspace
    from ..tir.transform.inject_virtual_thread import inject_virtual_threads
    from ..tir.transform.split_host_device import split_host_device
    from ..tir.transform.texture import DEFAULT_LIMIT, texture_layouts
    from ..tir.transform.thread_sync import insert_barriers
    from ..tir.transform.verify_gpu import check_kernel_limits, verify_thread_binding

    hosts, kernels = {}, []
    for key, func in mod.items():
        if not isinstance(func, PrimFunc):
            raise CompileError(f"function {key!r} is a {type(func).__name__}, not a lowered PrimFunc")
        func = inject_virtual_threads(verify_thread_binding(func))
        if target.kind == "cuda":  # double-buffered shared tiles (cp.async on sm_80+)
            from ..tir.transform.double_buffer import inject_double_buffer
            func = inject_double_buffer(func)
        textures = texture_layouts(func, target.attrs.get("texture_spatial_limit") or DEFAULT_LIMIT)
        host, ks = split_host_device(func, len(kernels))
        if textures:  # image layouts of texture-scoped tensors, for the printer and the workspace
            ks = [_with_textures(k, textures) for k in ks]
            host = replace(host, attrs={**host.attrs, "texture": textures})
        if target.kind == "opencl":  # float16 computed in float: no cl_khr_fp16 needed (codegen/opencl_half.py)
            ks = [replace(k, attrs={**k.attrs, "half_storage": True}) for k in ks]
        for k in ks:
            kernels.append(check_kernel_limits(insert_barriers(k), target))
        hosts[key] = device_workspace(host)
    return IRModule(hosts), kernels


def _with_textures(kernel: PrimFunc, textures: dict) -> PrimFunc:
    mine = {key: t for key, t in textures.items() if any(id(p) == key for p in kernel.params)}
    return replace(kernel, attrs={**kernel.attrs, "texture": mine}) if mine else kernel


def build(mod, target):
    """Host CompiledModule (LLVM, for target.host or 'llvm') importing an OpenCL source module."""
    from ..target import Target
    from .llvm import build_host

    target = target if isinstance(target, Target) else Target(target)
    host_mod, kernels = lower_device(mod, target)
    source = kernel_source(kernels)
    device_code = {"type_key": "opencl", "source": source, "kernels": [kernel_entry(k) for k in kernels]}
    host_target = target.host if target.host is not None else Target("llvm")
    module = build_host(host_mod, host_target, target, device_code)
    module.sources["cl"] = source
    module.imported_modules = [device_module(device_code)]
    return module


def device_module(device_code: dict) -> Module:
    """The runtime's OpenCLModule when it exists, else a source-only module (no pyopencl needed)."""
    try:
        from ..runtime.devices.opencl import OpenCLModule
    except ImportError:
        return OpenCLSourceModule(device_code["source"], device_code["kernels"])
    return OpenCLModule(device_code["source"], device_code["kernels"])


class OpenCLSourceModule(Module):
    """OpenCL C kernels as text: ``get_source()``; running them is the runtime's OpenCLModule's job."""

    type_key = "opencl"

    def __init__(self, source: str, kernels: list):
        super().__init__()
        self.source = source
        self.kernels = list(kernels)

    def function_names(self) -> list[str]:
        return [k["name"] for k in self.kernels]

    def get_source(self, fmt: str = "") -> str:
        if fmt not in ("", "cl", "opencl"):
            raise CompileError(f"an opencl module has its source as 'cl', not {fmt!r}")
        return self.source

    def __repr__(self) -> str:
        return f"OpenCLSourceModule({', '.join(self.function_names())})"
