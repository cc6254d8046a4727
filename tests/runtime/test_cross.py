"""Modules for another architecture: clear errors here, links with ld.lld, runs under qemu."""

import os
import shutil
import struct
import subprocess

import pytest

import kiln as tvm
from kiln.contrib import cc
from kiln.errors import KilnError
from kiln.runtime.elf import describe, elf_arch, host_arch

HERE = describe(host_arch())

needs_lld = pytest.mark.skipif(cc.find_lld() is None, reason="needs ld.lld (apt-get install -y lld)")


def _fake_elf(path, machine: int, elf_class: int = 2):
    header = b"\x7fELF" + bytes([elf_class, 1, 1]) + bytes(9) + struct.pack("<HH", 3, machine)
    path.write_bytes(header + bytes(64))


@pytest.mark.skipif(host_arch()[0] == "aarch64", reason="the fake file must be foreign to this machine")
def test_foreign_so_gets_clear_message(tmp_path):
    _fake_elf(tmp_path / "lib.so", machine=183)  # EM_AARCH64
    here = host_arch()[0]
    with pytest.raises(KilnError, match=rf"^lib.so was built for aarch64; this machine is {here}. "
                                        rf"Rebuild with target 'llvm -mtriple={here}-linux-gnu' or "
                                        "load it on a matching device"):
        tvm.runtime.load_module(str(tmp_path / "lib.so"))


def test_armv7_elf_is_named_arm(tmp_path):
    _fake_elf(tmp_path / "arm.so", machine=40, elf_class=1)
    assert elf_arch(str(tmp_path / "arm.so")) == ("arm", 32)


def test_foreign_compiled_module_cannot_run_here(c_kernels_aarch64):
    mod = c_kernels_aarch64.module()
    with pytest.raises(KilnError, match=rf"built for aarch64-linux-gnu; this machine is {HERE}. "
                                        r"export_library it and run it on the device through RPC"):
        mod(tvm.nd.empty((2,)), tvm.nd.empty((2,)))


def test_foreign_tar_cannot_load_here(c_kernels_aarch64, tmp_path):
    path = str(tmp_path / "lib.tar")
    c_kernels_aarch64.module().export_library(path)
    with pytest.raises(KilnError, match=rf"lib.tar was built for aarch64-linux-gnu; this machine is {HERE}"):
        tvm.runtime.load_module(path)


@needs_lld
def test_export_aarch64_links_with_lld(c_kernels_aarch64, tmp_path):
    path = tmp_path / "lib.so"
    c_kernels_aarch64.module().export_library(str(path))
    assert elf_arch(str(path)) == ("aarch64", 64)
    assert [p.name for p in tmp_path.iterdir()] == ["lib.so"]
    with pytest.raises(KilnError, match=rf"lib.so was built for aarch64; this machine is {HERE}"):
        tvm.runtime.load_module(str(path))


@needs_lld
def test_lld_rejects_objects_for_another_triple(c_kernels, tmp_path):
    objs = []
    for i, data in enumerate(c_kernels.objects):
        objs.append(str(tmp_path / f"lib{i}.o"))
        with open(objs[-1], "wb") as f:
            f.write(data)
    with pytest.raises(KilnError, match=rf"the objects are for {HERE} but the target triple is aarch64-linux-gnu"):
        cc.lld_link(str(tmp_path / "x.so"), objs, "aarch64-linux-gnu")


QEMU_SYSROOT = "/usr/aarch64-linux-gnu"
_DRIVER = r"""
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
typedef union { int64_t v_int64; double v_float64; void* v_handle; } KilnValue;
typedef struct { void* data; int32_t dt, di; int32_t ndim; uint8_t code, bits; uint16_t lanes;
                 int64_t* shape; int64_t* strides; uint64_t byte_offset; } DLTensor;
int main(int argc, char** argv) {
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) { printf("dlopen: %s\n", dlerror()); return 1; }
  int32_t (*f)(const KilnValue*, const int32_t*, int32_t) = dlsym(lib, "add_one");
  float a[4] = {1, 2, 3, 4}, b[4]; int64_t n = 4;
  DLTensor ta = {a, 1, 0, 1, 2, 32, 1, &n, 0, 0}, tb = {b, 1, 0, 1, 2, 32, 1, &n, 0, 0};
  KilnValue args[2]; args[0].v_handle = &ta; args[1].v_handle = &tb;
  int32_t codes[2] = {7, 7};
  int rc = f(args, codes, 2);
  printf("%d %s %g %g %g %g\n", rc, (char*)dlsym(lib, "__kiln_metadata") ? "meta" : "-", b[0], b[1], b[2], b[3]);
  return 0;
}
"""


@needs_lld
@pytest.mark.qemu
@pytest.mark.skipif(shutil.which("qemu-aarch64") is None or not os.path.isdir(QEMU_SYSROOT),
                    reason="needs qemu-aarch64 and the aarch64 sysroot (apt-get install -y qemu-user "
                           "gcc-aarch64-linux-gnu)")
def test_lld_linked_library_runs_on_aarch64(c_kernels_aarch64, tmp_path):
    lib = tmp_path / "lib.so"
    c_kernels_aarch64.module().export_library(str(lib))
    (tmp_path / "driver.c").write_text(_DRIVER)
    subprocess.run(["aarch64-linux-gnu-gcc", "-o", str(tmp_path / "driver"), str(tmp_path / "driver.c"),
                    "-ldl"], check=True)
    out = subprocess.run(["qemu-aarch64", "-L", QEMU_SYSROOT, str(tmp_path / "driver"), str(lib)],
                         capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["0", "meta", "2", "3", "4", "5"], out.stdout + out.stderr


def test_dnnl_for_a_triple_without_a_shim_is_one_error_at_build(tmp_path):
    """A library offloading to oneDNN for another triple needs that triple's prebuilt shim
    (KILN_DNNL_SHIMS); without one the build is one line saying what to do, never a library that
    fails on the device. A listed shim of the wrong architecture does not count. Needs no oneDNN
    here: the refusal comes before anything of oneDNN is looked for."""
    import sys

    import numpy as np
    import onnx

    from test_c_graph import convnet_onnx

    model, _ = convnet_onnx(image=12)
    onnx.save(model, tmp_path / "m.onnx")
    host_elf = (getattr(np, "_core", None) or np.core)._multiarray_umath.__file__  # an ELF .so of this machine
    made = subprocess.run([sys.executable, "-m", "kiln.driver.tvmc", "compile", str(tmp_path / "m.onnx"), "-o",
                           str(tmp_path / "d.tar"), "--target", "dnnl, llvm", "--target-llvm-mtriple",
                           "aarch64-linux-gnu"], capture_output=True, text=True,
                          env=dict(os.environ, KILN_DNNL_SHIMS=host_elf))
    lines = made.stderr.strip().splitlines()
    assert made.returncode != 0 and len(lines) == 1, made.stdout + made.stderr
    assert "cannot build oneDNN (dnnl) subgraphs for aarch64" in lines[0] and "KILN_DNNL_SHIMS lists none for aarch64" \
        in lines[0] and host_elf in lines[0]
    assert not (tmp_path / "d.tar").exists()
