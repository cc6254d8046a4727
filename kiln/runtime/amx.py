"""Permission to use Intel AMX tile registers (Linux), asked once per process.

Linux keeps the AMX tile data state (8 KiB per thread) off until a process asks for it with
``arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)``; the first tile instruction of a process
that did not ask dies with SIGILL. Every kernel kiln compiles with AMX instructions asks for it
itself at its entry (one cheap system call, so a module loaded by the C runtime or any other host
works too: see kiln/topi/x86/amx_bf16.py); this module is the same request for Python code that
wants to know beforehand whether the OS grants it (tests, benchmarks, the int8 kernels):

    >>> from kiln.runtime import amx
    >>> amx.request_permission()      # True on an AMX CPU with Linux >= 5.16, else False

numpy and ctypes only, like the rest of the runtime.
"""

from __future__ import annotations

import ctypes
import functools
import platform

SYS_ARCH_PRCTL = 158          # x86-64 system call number
ARCH_GET_XCOMP_PERM = 0x1022
ARCH_REQ_XCOMP_PERM = 0x1023
XFEATURE_XTILEDATA = 18


@functools.lru_cache(maxsize=1)
def request_permission() -> bool:
    """Ask Linux for the AMX tile data state for this process; True when it is granted (already
    or now), False on other systems or CPUs without AMX."""
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return False
    libc.syscall.restype = ctypes.c_long
    if libc.syscall(ctypes.c_long(SYS_ARCH_PRCTL), ctypes.c_long(ARCH_REQ_XCOMP_PERM),
                    ctypes.c_ulong(XFEATURE_XTILEDATA)) != 0:
        return False
    return granted()


def granted() -> bool:
    """Whether this process may use the AMX tile data state now."""
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    mask = ctypes.c_ulong(0)
    if libc.syscall(ctypes.c_long(SYS_ARCH_PRCTL), ctypes.c_long(ARCH_GET_XCOMP_PERM), ctypes.byref(mask)) != 0:
        return False
    return bool(mask.value & (1 << XFEATURE_XTILEDATA))
