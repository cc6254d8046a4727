"""``tvm.nd``: arrays on devices (see kiln.runtime.ndarray)."""

from .runtime.device import cl, cpu, cuda, device, gpu, opencl
from .runtime.ndarray import NDArray, array, empty, from_dlpack

__all__ = ["NDArray", "array", "empty", "from_dlpack", "cpu", "cuda", "gpu", "cl", "opencl", "device"]
