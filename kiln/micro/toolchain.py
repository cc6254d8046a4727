"""The bare-metal tools microTVM needs: arm-none-eabi-gcc with a C library, qemu-system-arm."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile

APT_HINT = "apt-get install gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm (or make setup as root)"


@functools.lru_cache(maxsize=None)
def missing_arm_gcc() -> str | None:
    """None when arm-none-eabi-gcc can compile and link against newlib, else why not."""
    gcc = shutil.which("arm-none-eabi-gcc")
    if gcc is None:
        return f"arm-none-eabi-gcc not found: {APT_HINT}"
    with tempfile.TemporaryDirectory() as work:
        src = os.path.join(work, "probe.c")
        with open(src, "w") as f:
            f.write("#include <string.h>\n#include <math.h>\nint probe(float* x) { *x = expf(*x); return (int)strlen(\"a\"); }\n")
        out = subprocess.run([gcc, "-mcpu=cortex-m3", "-mthumb", "-c", src, "-o", os.path.join(work, "probe.o")],
                             capture_output=True, text=True)
    if out.returncode != 0:
        return f"arm-none-eabi-gcc has no C library (newlib): {APT_HINT}"
    return None


@functools.lru_cache(maxsize=None)
def missing_qemu() -> str | None:
    """None when qemu-system-arm is installed, else why not."""
    if shutil.which("qemu-system-arm") is None:
        return f"qemu-system-arm not found: {APT_HINT}"
    return None
