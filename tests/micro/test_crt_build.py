"""src/crt compiles warning-free for Cortex-M3, M4F and M55 and for the host."""

import os
import subprocess

import pytest

from kiln.micro.project import CRT_DIR
from kiln.micro.toolchain import missing_arm_gcc

FILES = ["page_allocator.c", "framing.c", "rpc_server.c"]


@pytest.mark.parametrize("flags", [["-mcpu=cortex-m3"], ["-mcpu=cortex-m4", "-mfloat-abi=hard", "-mfpu=fpv4-sp-d16"],
                                   ["-mcpu=cortex-m55"]], ids=["m3", "m4f", "m55"])
def test_crt_builds_for_cortex_m(flags, tmp_path):
    if missing_arm_gcc():
        pytest.skip(missing_arm_gcc())
    for f in FILES:
        out = subprocess.run(["arm-none-eabi-gcc", *flags, "-mthumb", "-std=c99", "-Os", "-Wall", "-Wextra", "-Werror",
                              "-I", CRT_DIR, "-c", os.path.join(CRT_DIR, f), "-o", str(tmp_path / (f + ".o"))],
                             capture_output=True, text=True)
        assert out.returncode == 0, out.stderr


def test_crt_builds_for_the_host(tmp_path):
    for f in FILES:
        out = subprocess.run(["cc", "-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-I", CRT_DIR, "-c",
                              os.path.join(CRT_DIR, f), "-o", str(tmp_path / (f + ".o"))], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
