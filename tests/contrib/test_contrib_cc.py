import os
import subprocess

import pytest

from kiln.contrib import cc
from kiln.errors import KilnError


def _objects(c_kernels, tmp_path):
    paths = []
    for i, data in enumerate(c_kernels.objects):
        paths.append(str(tmp_path / f"lib{i}.o"))
        with open(paths[-1], "wb") as f:
            f.write(data)
    return paths


def _defined_symbols(path):
    out = subprocess.run(["nm", "-D", "--defined-only", path], capture_output=True, text=True, check=True)
    return {line.split()[-1] for line in out.stdout.splitlines() if line.strip()}


def test_create_shared(c_kernels, tmp_path):
    out = str(tmp_path / "lib.so")
    cc.create_shared(out, _objects(c_kernels, tmp_path))
    assert {"add_one", "__kiln_metadata", "__kiln_num_threads", "__kiln_last_error"} <= _defined_symbols(out)


def test_create_shared_reports_linker_errors(tmp_path):
    bad = tmp_path / "bad.o"
    bad.write_bytes(b"garbage")
    with pytest.raises(KilnError, match=r"linking failed \(exit 1\): \S*(cc|gcc|clang)\S* -shared"):
        cc.create_shared(str(tmp_path / "x.so"), [str(bad)])
    with pytest.raises(KilnError, match="linker 'no-such-cc' not found: install a C compiler"):
        cc.create_shared(str(tmp_path / "x.so"), [str(bad)], cc="no-such-cc")


def test_cross_compiler_with_path_and_options(c_kernels, tmp_path):
    fcompile = cc.cross_compiler("cc", options=["-Wl,-soname,custom.so"])
    assert fcompile.output_format == "so"
    out = str(tmp_path / "lib.so")
    fcompile(out, _objects(c_kernels, tmp_path))
    dyn = subprocess.run(["readelf", "-d", out], capture_output=True, text=True, check=True).stdout
    assert "custom.so" in dyn


def test_cross_compiler_wraps_function(tmp_path):
    calls = []

    def inner(output, objects, options=None):
        calls.append((output, objects, options))
    f = cc.cross_compiler(inner, options=["-a"], add_files=["extra.o"])
    f("out.so", ["x.o"], options=["-b"])
    assert calls == [("out.so", ["x.o", "extra.o"], ["-a", "-b"])]


def test_lld_missing_names_package(monkeypatch, tmp_path):
    monkeypatch.setattr(cc, "find_lld", lambda: None)
    with pytest.raises(KilnError, match=r"needs ld.lld, which is not installed: install the Debian package 'lld'"):
        cc.lld_link(str(tmp_path / "x.so"), [], "aarch64-linux-gnu")


@pytest.mark.skipif(cc.find_lld() is None, reason="needs ld.lld (apt-get install -y lld)")
def test_lld_link_host_objects(c_kernels, tmp_path):
    out = str(tmp_path / "lib.so")
    cc.lld_link(out, _objects(c_kernels, tmp_path), c_kernels.triple)
    assert "add_one" in _defined_symbols(out)
    assert os.path.getsize(out) > 0
