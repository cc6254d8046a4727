"""The C runtime's checks of a shared object before dlopen (src/runtime/elf_integrity.c, elf.c):
kiln_run on packages whose mod.so is truncated or has flipped bits gets one line and exit 2 (it
died of SIGBUS/SIGSEGV inside dlopen); a 32-bit ELF for x86_64 is not called "this device"."""

from __future__ import annotations

import io
import os
import subprocess
import tarfile

import numpy as np
import pytest

import kiln as tvm
from kiln import relay
from kiln.driver.tvmc.compiler import export_package
from kiln.runtime.integrity import SEAL_BYTES

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("integrity-host"))
    result = subprocess.run(["make", "-s", "-j2", "-C", os.path.join(ROOT, "src", "runtime"), f"OUT={out}", "run"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    return out


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    x = relay.var("x", shape=(4,), dtype="float32")
    lib = relay.build(tvm.IRModule.from_expr(relay.Function([x], relay.add(x, relay.const(1.0)))), target="llvm")
    path = tmp_path_factory.mktemp("integrity-pkg") / "good.tar"
    export_package(lib, str(path))
    with tarfile.open(path) as tar:
        return path, {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def _with_library(files, data, path):
    with tarfile.open(path, "w") as tar:
        for name, content in {**files, "mod.so": data}.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    return path


def _kiln_run(build, package):
    return subprocess.run([os.path.join(build, "kiln_run"), "--package", str(package)], capture_output=True, text=True)


def test_damaged_libraries_get_one_line(build, package, tmp_path):
    good, files = package
    assert _kiln_run(build, good).returncode == 0
    lib = files["mod.so"]
    assert lib[-SEAL_BYTES:].startswith(b"KILNSEAL")
    rng = np.random.default_rng(3)
    cases = {f"cut{n}": lib[:n] for n in (0, 30, 64, 500, len(lib) // 3, len(lib) // 2, len(lib) - SEAL_BYTES,
                                           len(lib) - 1)}
    for pos in sorted(set(rng.integers(0, len(lib), 60).tolist()) | {4, 5, 16, 18, 40, 60}):
        b = bytearray(lib)
        b[pos] ^= 1 << int(rng.integers(0, 8))
        cases[f"flip{pos}"] = bytes(b)
    for name, data in cases.items():
        result = _kiln_run(build, _with_library(files, data, tmp_path / f"{name}.tar"))
        assert result.returncode == 2, (name, result.returncode, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("kiln_run: error: "), (name, result.stderr)
        assert "mod.so" in lines[0], (name, lines[0])


def test_a_32_bit_elf_for_x86_64_is_named_as_such(build, package, tmp_path):
    if os.uname().machine != "x86_64":
        pytest.skip("the message compares with an x86_64 device")
    _, files = package
    b = bytearray(files["mod.so"])
    b[4] = 1
    result = _kiln_run(build, _with_library(files, bytes(b), tmp_path / "x32.tar"))
    assert result.returncode == 2
    assert "built for x86_64 (32-bit ELF); this device is x86_64" in result.stderr, result.stderr
