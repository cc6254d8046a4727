"""The GPU build driver: lowered PrimFuncs -> an LLVM host module carrying kernels in one language.

Every GPU backend builds the same way; a backend is only its ``KernelLanguage``:

1. ``GPU_PIPELINE`` (kiln/tir/transform) with the device's capabilities (``GPUCaps``, from the
   target's limits and what the language can express): thread binding checks, virtual threads,
   double buffering, texture layouts, the host/kernel split, half storage, barriers, the
   target's limits, warp shuffles, device workspace. The same pass list for every language.
2. The language prints the kernels (``print_kernels``) and may add what its devices need to the
   device code (``finish``: CUDA's arch and PTX).
3. The host functions are compiled by the LLVM backend for ``target.host`` (default "llvm"), with
   the device code in the module's metadata (docs/abi.md "GPU modules"); the module's device
   module is made from that metadata, by the runtime (kiln/runtime/device_code.py), as a loaded
   ``.so``'s would be.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from ..ir.module import IRModule
from ..ir.stmt import PrimFunc


@dataclasses.dataclass(frozen=True)
class KernelLanguage:
    """A GPU kernel language: its device module kind, how to print kernels, what it can express."""

    type_key: str  # the device module's kind ("cuda", "opencl"), as the runtime reads it
    source_format: str  # the host module's get_source key for the kernels ("cu", "cl")
    print_kernels: Callable  # (kernels, target) -> (source, [extra entry fields, one dict per kernel])
    warp_shuffle: bool = False  # warp-synchronous shuffles
    async_copy: bool = False  # asynchronous global -> shared copies
    fp16_arith: bool = True  # half arithmetic (else halves are stored and computed in float)
    finish: Callable | None = None  # (device_code, target) -> None: more fields the device needs


def capabilities(target, lang: KernelLanguage):
    """What the GPU pipeline may use on this target with this language."""
    from ..tir.transform import GPUCaps

    return GPUCaps(target=target,
                   warp_shuffle=lang.warp_shuffle and target.thread_warp_size > 1,
                   async_copy=lang.async_copy,
                   fp16_arith=lang.fp16_arith)


def lower(mod, target, lang: KernelLanguage) -> tuple[IRModule, list[PrimFunc]]:
    """(host IRModule, kernels in kernel-id order) after the GPU pipeline."""
    from ..tir.transform import GPU_PIPELINE, is_kernel

    lowered = GPU_PIPELINE(mod, capabilities(target, lang))
    hosts = IRModule({key: f for key, f in lowered.items() if not is_kernel(f)})
    kernels = sorted((f for _, f in lowered.items() if is_kernel(f)), key=lambda k: k.attrs["kernel_id"])
    return hosts, kernels


def build(mod, target, lang: KernelLanguage):
    """Host CompiledModule (LLVM) whose metadata carries the kernels printed in ``lang``."""
    from ..target import Target
    from .llvm import build_host

    target = target if isinstance(target, Target) else Target(target)
    hosts, kernels = lower(mod, target, lang)
    source, extras = lang.print_kernels(kernels, target)
    device_code = {"type_key": lang.type_key, "source": source,
                   "kernels": [{**kernel_entry(k), **x} for k, x in zip(kernels, extras)]}
    if lang.finish is not None:
        lang.finish(device_code, target)
    host_target = target.host if target.host is not None else Target("llvm")
    module = build_host(hosts, host_target, target, device_code)
    module.sources[lang.source_format] = source
    return module


def kernel_entry(kernel: PrimFunc) -> dict:
    """The kernels entry of the device code (docs/abi.md "GPU modules")."""
    params, images = [], kernel.attrs.get("texture", {})
    for p in kernel.params:
        buf = kernel.buffer_map.get(p)
        if buf is not None:
            params.append({"name": buf.name, "kind": "buffer", "dtype": str(buf.dtype)})
            if p in images:  # an image2d_t of this size: runtimes check what they are given
                params[-1]["image"] = [images[p].width, images[p].height]
        else:
            params.append({"name": p.name, "kind": "scalar", "dtype": str(p.dtype)})
    return {"name": kernel.attrs["global_symbol"], "params": params, "thread_tags": list(kernel.attrs["thread_tags"])}
