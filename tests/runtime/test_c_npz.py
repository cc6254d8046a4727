"""kiln_run --input against hostile .npz files (src/runtime/npz.c, inflate.c): files shorter than
the zip64 records they point to, DEFLATE bombs and declared sizes far beyond the model's inputs
are refused with one line before anything is allocated; peak RSS stays near the model's size.
KILN_LOAD_LIMIT also bounds the buffers a package's graph declares (src/runtime/graph.c)."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import zlib

import numpy as np
import pytest

import kiln as tvm
from kiln import relay
from kiln.driver.tvmc.compiler import export_package

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
INPUT_SHAPE = (1, 4, 8, 8)  # float32: 1 KiB


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("npz-host"))
    result = subprocess.run(["make", "-s", "-j2", "-C", os.path.join(ROOT, "src", "runtime"), f"OUT={out}", "run"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    return out


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    x = relay.var("x", shape=INPUT_SHAPE, dtype="float32")
    mod = tvm.IRModule.from_expr(relay.Function([x], relay.add(x, relay.const(1.0))))
    path = str(tmp_path_factory.mktemp("npz-pkg") / "add.tar")
    export_package(relay.build(mod, target="llvm"), path)
    return path


def run(build, package, npz, env=None):
    """kiln_run in a fresh Python whose only child it is: (result, the child's peak RSS in KiB)."""
    probe = ("import resource, subprocess, sys\n"
             "r = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
             "sys.stderr.write(r.stderr); sys.stdout.write(r.stdout)\n"
             "print('maxrss', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
             "sys.exit(r.returncode)")
    result = subprocess.run([sys.executable, "-c", probe, os.path.join(build, "kiln_run"), "--package", package,
                             "--input", str(npz)], capture_output=True, text=True, env={**os.environ, **(env or {})})
    rss = int(result.stdout.rsplit("maxrss", 1)[1])
    return result, rss


def one_line_error(result, *needles):
    assert "Sanitizer" not in result.stderr and "runtime error" not in result.stderr, result.stderr
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kiln_run: error: "), result.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def npy_header(shape, descr="<f4") -> bytes:
    text = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {tuple(shape)}, }}"
    text += " " * (-(10 + len(text) + 1) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text.encode()


def bomb(path, shape, chunk=16 << 20):
    """An .npz whose x.npy inflates to a float32 array of ``shape``, all zeros: tiny on disk."""
    header = npy_header(shape)
    size = len(header) + int(np.prod(shape)) * 4
    comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    crc = zlib.crc32(header)
    data = [comp.compress(header)]
    zeros = bytes(chunk)
    left = size - len(header)
    while left:
        n = min(left, chunk)
        crc = zlib.crc32(zeros[:n], crc)
        data.append(comp.compress(zeros[:n]))
        left -= n
    data.append(comp.flush())
    member = b"".join(data)
    # Written by hand: zipfile cannot store a member compressed elsewhere.
    name = b"x.npy"
    local = struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 8, 0, 0, crc, len(member), size, len(name), 0) + name
    central = struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 8, 0, 0, crc, len(member), size, len(name),
                          0, 0, 0, 0, 0, 0) + name
    eocd = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 1, 1, len(central), len(local) + len(member), 0)
    with open(path, "wb") as f:
        f.write(local + member + central + eocd)
    return size


def test_a_good_input_runs_and_sets_the_rss_baseline(build, package, tmp_path):
    x = np.random.default_rng(0).standard_normal(INPUT_SHAPE).astype("float32")
    np.savez_compressed(tmp_path / "in.npz", x=x)
    result, rss = run(build, package, tmp_path / "in.npz")
    assert result.returncode == 0, result.stderr
    assert rss < 64 << 10, rss


def test_a_file_shorter_than_its_zip64_record_is_refused(build, package, tmp_path):
    """A 42-byte file: a zip64 locator pointing far away and an end record asking for it. The check
    `z <= len - 56` wrapped for files under 56 bytes and the reader followed the offset (SEGV)."""
    locator = struct.pack("<IIQI", 0x07064B50, 0, 0x4141414141, 1)
    eocd = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFF, 0xFFFF, 0, 0xFFFFFFFF, 0)
    for n, data in enumerate([locator + eocd, b"\0" * 8 + locator + eocd, locator[:4] + eocd]):
        (tmp_path / f"short{n}.npz").write_bytes(data)
        assert len(data) < 56
        result, _ = run(build, package, tmp_path / f"short{n}.npz")
        one_line_error(result, f"short{n}.npz")


def test_a_deflate_bomb_is_refused_before_it_is_inflated(build, package, tmp_path):
    """A 256 MiB array in 0.25 MB: refused from its .npy header (the model takes float32[1, 4, 8, 8])
    with peak RSS near the good input's, instead of inflating it all and copying it."""
    size = bomb(tmp_path / "bomb.npz", (16384, 4096))
    assert os.path.getsize(tmp_path / "bomb.npz") < size // 500
    result, rss = run(build, package, tmp_path / "bomb.npz")
    one_line_error(result, "float32[16384, 4096]", "float32[1, 4, 8, 8]")
    assert rss < 64 << 10, f"peak RSS {rss} KiB for a refused {size >> 20} MiB bomb"


def test_a_bomb_with_the_models_shape_in_its_header_is_refused(build, package, tmp_path):
    """The header says float32[1, 4, 8, 8] but the zip directory declares ~4 GiB of data: the sizes
    disagree, so nothing is allocated (malloc was asked for 4 GiB from the declared size)."""
    path = tmp_path / "liar.npz"
    header = npy_header(INPUT_SHAPE)
    member = zlib.compress(header + bytes(1024), 9)[2:-4]
    name = b"x.npy"
    usize = 0xFFFFFFF0
    local = struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 8, 0, 0, 0, len(member), usize, len(name), 0) + name
    central = struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 8, 0, 0, 0, len(member), usize,
                          len(name), 0, 0, 0, 0, 0, 0) + name
    eocd = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 1, 1, len(central), len(local) + len(member), 0)
    path.write_bytes(local + member + central + eocd)
    result, rss = run(build, package, path)
    one_line_error(result, "liar.npz", "array 'x'", "its header says 1024")
    assert rss < 64 << 10, rss


def test_kiln_load_limit_caps_one_array(build, package, tmp_path):
    """With a 4 KiB limit (the model's buffers take 2 KiB), a 10 KiB array is refused by the limit
    before its shape is compared or its data read; a 1 KiB one runs."""
    np.savez(tmp_path / "big.npz", x=np.ones((1, 4, 8, 80), "float32"))
    result, _ = run(build, package, tmp_path / "big.npz", env={"KILN_LOAD_LIMIT": "4K"})
    one_line_error(result, "KILN_LOAD_LIMIT", "10240 bytes")
    np.savez(tmp_path / "in.npz", x=np.ones(INPUT_SHAPE, "float32"))
    result, _ = run(build, package, tmp_path / "in.npz", env={"KILN_LOAD_LIMIT": "4K"})
    assert result.returncode == 0, result.stderr


def test_kiln_load_limit_caps_the_graphs_buffers(build, package, tmp_path):
    """A graph whose entries declare 16 GiB is refused from its JSON, before any buffer exists; the
    same cap (KILN_LOAD_LIMIT) applies to a genuine package when set below its 2 KiB of buffers."""
    import io
    import json
    import tarfile
    with tarfile.open(package) as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    graph = json.loads(files["mod.json"])
    graph["attrs"]["shape"][1][-1] = [1 << 32, 4]
    files["mod.json"] = json.dumps(graph).encode()
    with tarfile.open(tmp_path / "huge.tar", "w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    x = tmp_path / "in.npz"
    np.savez(x, x=np.ones(INPUT_SHAPE, "float32"))
    result, rss = run(build, str(tmp_path / "huge.tar"), x)
    one_line_error(result, "graph JSON", "KILN_LOAD_LIMIT")
    assert rss < 64 << 10, rss
    result, _ = run(build, package, x, env={"KILN_LOAD_LIMIT": "1K"})
    one_line_error(result, "graph JSON", "KILN_LOAD_LIMIT")
