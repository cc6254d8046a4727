"""remote.cl() served by the C runtime's kiln_rpc (no Python on the device): arrays on the
server's OpenCL device, GPU modules (.so and .tar) launched through the C launch hook, device
timing, attributes; and a server whose machine has no OpenCL answering cl(0).exist == False."""

import os
import sys
import tempfile

import numpy as np
import pytest

import kiln as tvm
from kiln import rpc
from kiln.errors import KilnError, RPCError

HERE = os.path.dirname(__file__)
sys.path.insert(0, os.path.join(HERE, "..", "runtime"))
sys.path.insert(0, os.path.join(HERE, "..", "crossdev"))
import boards  # noqa: E402
import opencl_fixture  # noqa: E402
import rpc_services as svc  # noqa: E402


@pytest.fixture(scope="module")
def kiln_rpc_binary(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("c-runtime-opencl"))
    return os.path.join(boards.build_runtime(out, "", ("KALLOC_ALIGNMENT=32",)), "kiln_rpc")


def _start(binary, env=None):
    return boards.Board(binary, None, "--host", svc.HOST, "--port", str(svc.free_port()), env=env)


def _connect(port):
    def attempt():
        try:
            return rpc.connect(svc.HOST, port)
        except RPCError as e:
            if "busy" not in str(e):
                raise
            return None
    return svc.wait_until(attempt, what="server free")


@pytest.fixture(scope="module")
def c_server(kiln_rpc_binary):
    board = _start(kiln_rpc_binary)
    yield board
    board.stop()


@pytest.mark.opencl
def test_c_server_arrays_and_attributes(c_server):
    remote = _connect(c_server.port)
    dev = remote.cl()
    assert dev.exist and not remote.cl(64).exist
    local = tvm.cl(0)  # the same machine: the C runtime must see the same device
    assert dev.max_threads_per_block == local.max_threads_per_block
    assert dev.max_shared_memory_per_block == local.max_shared_memory_per_block
    assert dev.max_thread_dimensions == local.max_thread_dimensions
    assert dev.multi_processor_count == local.multi_processor_count
    assert dev.device_name == local.device_name and dev.compute_version == local.compute_version
    assert dev.warp_size == 1
    assert remote.cl(64).max_threads_per_block is None
    x = np.random.default_rng(3).integers(-1000, 1000, size=(17, 9)).astype("int32")
    a = tvm.nd.array(x, dev)
    np.testing.assert_array_equal(a.numpy(), x)
    b = tvm.nd.empty((17, 9), "int32", dev)
    b.copyfrom(a)
    np.testing.assert_array_equal(b.numpy(), x)
    big = np.random.default_rng(4).uniform(size=(5 << 20,)).astype("float32")  # > one 16 MiB chunk
    c = tvm.nd.array(big, dev)
    np.testing.assert_array_equal(c.numpy(), big)
    dev.sync()
    remote.close()


@pytest.mark.opencl
@pytest.mark.parametrize("ext", ["so", "tar"])
def test_c_server_runs_gpu_modules(c_server, ext, tmp_path):
    path = str(tmp_path / f"lib_cl.{ext}")
    opencl_fixture.module().export_library(path)
    remote = _connect(c_server.port)
    remote.upload(path)
    func = remote.load_module(f"lib_cl.{ext}")
    dev = remote.cl()
    n = 1000
    x = np.random.uniform(size=n).astype("float32")
    a = tvm.nd.array(x, dev)
    b = tvm.nd.array(np.zeros(n, dtype="float32"), dev)
    func(a, b)
    np.testing.assert_allclose(b.numpy(), x + 1, rtol=1e-6)
    func["scale"](a, b, 3)  # an int for a float32 scalar, converted by the C runtime
    np.testing.assert_allclose(b.numpy(), x * 3, rtol=1e-6)
    res = func.time_evaluator(func.entry_name, dev, number=5, repeat=2)(a, b)
    assert len(res.results) == 2 and all(0 < r < 1 for r in res.results)
    with pytest.raises(Exception, match=r"argument 'A' is on device type 1, expected 4"):
        func(tvm.nd.array(x, remote.cpu()), b)
    remote.close()


def test_c_server_without_opencl_says_so(kiln_rpc_binary):
    # An ICD loader with an empty vendor list is a machine without OpenCL.
    with tempfile.TemporaryDirectory() as empty:
        board = _start(kiln_rpc_binary, env={"OCL_ICD_VENDORS": empty, "OPENCL_VENDOR_PATH": empty,
                                                   "OCL_ICD_FILENAMES": ""})
        try:
            remote = _connect(board.port)
            assert remote.cpu().exist
            assert not remote.cl(0).exist
            assert remote.cl(0).max_threads_per_block is None
            with pytest.raises((KilnError, RPCError, Exception), match=r"opencl\(0\) does not exist"):
                tvm.nd.empty((4,), "float32", remote.cl(0))
            remote.close()
        finally:
            board.stop()


@pytest.mark.qemu
def test_aarch64_board_without_opencl_starts_and_says_so(tmp_path):
    """The cross-built server dlopens libOpenCL at run time: a board lacking it still serves."""
    arch = boards.ARCHES["aarch64"]
    missing = arch.missing()
    if missing:
        pytest.skip(f"aarch64 board {missing}")
    binary = os.path.join(boards.build_runtime(str(tmp_path / "aarch64"), arch.cross), "kiln_rpc")
    # Document 000's OpenCL module, host code for the board: it loads there (the kernels are
    # parsed and the launch hook installed without touching OpenCL); arrays on cl(0) cannot exist.
    lib_so, lib_tar = str(tmp_path / "lib_cl.so"), str(tmp_path / "lib_cl.tar")
    host = "llvm -mtriple=aarch64-linux-gnu"
    cl_module = opencl_fixture.built_two_kernels(host=host)
    cl_module.export_library(lib_so)
    cl_module.export_library(lib_tar)
    board = boards.start_board(binary, arch)
    try:
        remote = _connect(board.port)
        assert remote.cpu().exist and not remote.cl(0).exist
        for path in (lib_so, lib_tar):
            remote.upload(path)
            func = remote.load_module(os.path.basename(path))
            assert func.entry_name == "two"
        with pytest.raises(Exception, match=r"opencl\(0\) does not exist: this machine has 0 OpenCL"):
            tvm.nd.empty((4,), "float32", remote.cl(0))
        remote.close()
    finally:
        board.stop()


@pytest.mark.opencl
@pytest.mark.parametrize("ext", ["so", "tar"])
def test_c_server_runs_built_modules(c_server, tmp_path, ext):
    """tvm.build output (two kernels, device workspace, symbolic size, float scalar) on kiln_rpc."""
    path = str(tmp_path / f"two.{ext}")
    opencl_fixture.built_two_kernels().export_library(path)
    remote = _connect(c_server.port)
    remote.upload(path)
    func = remote.load_module(f"two.{ext}")
    dev = remote.cl()
    for n in (1000, 65, 1):
        x = np.random.uniform(size=n).astype("float32")
        c = tvm.nd.empty((n,), "float32", dev)
        for _ in range(3):  # the workspace is allocated and released on every call
            func(tvm.nd.array(x, dev), c, -0.5)
        np.testing.assert_allclose(c.numpy(), opencl_fixture.two_kernels_reference(x, -0.5), rtol=1e-6)
    a = tvm.nd.array(np.ones(4096, "float32"), dev)
    c = tvm.nd.empty((4096,), "float32", dev)
    res = func.time_evaluator("two", dev, number=3, repeat=2)(a, c, 2.0)
    assert len(res.results) == 2 and all(0 < r < 1 for r in res.results)
    np.testing.assert_array_equal(c.numpy(), np.full(4096, 3, "float32"))
    remote.close()
