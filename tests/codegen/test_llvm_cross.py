"""Cross triples: objects carry the right ELF machine, link with ld.lld and run under qemu."""

import os
import shutil
import struct
import subprocess

import pytest

from kiln.ir import ForKind, var
from tirkit import buffer, build, func, loop, store

TRIPLES = {  # triple -> (e_machine, ELF class, gcc, qemu, sysroot)
    "aarch64-linux-gnu": (183, 2, "aarch64-linux-gnu-gcc", "qemu-aarch64", "/usr/aarch64-linux-gnu"),
    "armv7l-linux-gnueabihf": (40, 1, "arm-linux-gnueabihf-gcc", "qemu-arm", "/usr/arm-linux-gnueabihf"),
    "aarch64-linux-android": (183, 2, None, None, None),
}


def fill_func():
    n = var("n")
    A = buffer("A", (n,), "int32")
    i = var("i")
    return func("fill", [A], loop(i, n, store(A, i, i * 3), ForKind.PARALLEL))


@pytest.mark.parametrize("triple", list(TRIPLES))
def test_cross_object_machine(triple):
    machine, cls, *_ = TRIPLES[triple]
    m = build(fill_func(), f"llvm -mtriple={triple} -mattr=+neon")
    obj = m.objects[0]
    assert obj[:4] == b"\x7fELF" and obj[4] == cls
    assert struct.unpack("<H", obj[18:20])[0] == machine
    assert m.metadata["triple"].startswith(triple.split("-")[0])


def test_armv7_hard_float_abi():
    m = build(fill_func(), "llvm -mtriple=armv7l-linux-gnueabihf -mattr=+neon")
    # Tag_ABI_VFP_args = VFP registers: the linker then marks the .so hard-float, as glibc requires.
    assert ".eabi_attribute\t28, 1" in m.get_source("asm")


@pytest.mark.qemu
@pytest.mark.parametrize("triple", ["aarch64-linux-gnu", "armv7l-linux-gnueabihf"])
def test_cross_runs_under_qemu(triple, tmp_path):
    _, _, gcc, qemu, sysroot = TRIPLES[triple]
    missing = [t for t in (gcc, qemu, "ld.lld") if shutil.which(t) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (apt-get install -y qemu-user lld gcc-aarch64-linux-gnu "
                    "gcc-arm-linux-gnueabihf)")
    m = build(fill_func(), f"llvm -mtriple={triple} -mattr=+neon")
    so = tmp_path / "fill.so"
    m.export_library(str(so))
    driver = tmp_path / "driver"
    here = os.path.dirname(__file__)
    subprocess.check_call([gcc, "-O1", "-o", str(driver), os.path.join(here, "abi_driver.c"), "-ldl"])
    out = subprocess.run([qemu, "-L", sysroot, str(driver), str(so)], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "ok", out.stdout + out.stderr
