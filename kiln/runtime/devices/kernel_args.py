"""What every device module checks before a launch, written once (OpenCL and CUDA use it).

A kernel entry of the device code (docs/abi.md "GPU modules") lists its params; a buffer is
passed as the device's handle for it, a scalar as a value of its dtype, converted by the
device's own type table (numpy types for pyopencl, ctypes for the CUDA driver).
"""

from __future__ import annotations

from ...errors import KilnError


def scalar_casts(kernel: dict, table: dict, device: str) -> list:
    """Per param of ``kernel``: None for a buffer, else the type its scalar is passed as."""
    casts = []
    for param in kernel.get("params", []):
        if param.get("kind") == "buffer":
            casts.append(None)
            continue
        dtype = param.get("dtype", "")
        if dtype not in table:
            raise KilnError(f"{kernel.get('name')}: parameter {param.get('name')!r} has dtype {dtype!r}, "
                            f"which the {device} runtime cannot pass")
        casts.append(table[dtype])
    return casts


def check_launch(device: str, kernels: list, casts: list, kernel_id: int, values) -> None:
    """The host code asks for a kernel this module has, with as many arguments as it takes."""
    if not 0 <= kernel_id < len(kernels):
        raise KilnError(f"{device} module has {len(kernels)} kernels; kernel id {kernel_id} "
                        "is out of range (host and device code do not match: rebuild)")
    want = len(casts[kernel_id])
    if len(values) != want:
        raise KilnError(f"{kernels[kernel_id]['name']} takes {want} arguments, the host code passed "
                        f"{len(values)}: rebuild the module")


def launch_device(api, casts: list, values) -> int:
    """The device the first buffer argument lives on (device 0 when there is none)."""
    return next((d for c, v in zip(casts, values) if c is None and (d := api.device_of(int(v))) is not None), 0)
