"""The host CPU: 64-byte aligned memory from numpy, copies with memmove."""

from __future__ import annotations

import ctypes
import os

import numpy as np

ALIGNMENT = 64  # cache line and AVX-512 vector width; kernels may rely on it for our arrays


class CPUDeviceAPI:
    def exist(self, device_id: int) -> bool:
        return 0 <= device_id < (os.cpu_count() or 1)

    def alloc(self, nbytes: int, device_id: int = 0) -> tuple[int, np.ndarray]:
        # Over-allocate and slice so the start is aligned; the slice keeps the base alive.
        raw = np.empty(max(nbytes, 1) + ALIGNMENT, dtype=np.uint8)
        start = -raw.ctypes.data % ALIGNMENT
        buf = raw[start:start + nbytes]
        return raw.ctypes.data + start, buf

    def copy_from_host(self, dst: int, src: np.ndarray, device_id: int = 0) -> None:
        ctypes.memmove(dst, src.ctypes.data, src.nbytes)

    def copy_to_host(self, dst: np.ndarray, src: int, device_id: int = 0) -> None:
        ctypes.memmove(dst.ctypes.data, src, dst.nbytes)

    def sync(self, device_id: int = 0) -> None:
        """CPU kernels run synchronously: nothing to wait for."""


API = CPUDeviceAPI()
