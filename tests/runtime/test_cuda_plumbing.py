"""The CUDA runtime's Python side against a stand-in driver (no GPU needed): device memory is host
memory, and launches are recorded with their decoded arguments instead of run. Checks what kiln
sends the driver: allocations and copies, kernel arguments (device pointers, int and float
scalars), launch extents, dynamic shared memory, device workspace, event timing. The kernels
themselves run in tests/runtime/test_cuda_device.py on a GPU."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import kiln as tvm
from kiln import te
from kiln.codegen import cuda as cg
from kiln.runtime.devices import cuda as rt

pytestmark = pytest.mark.skipif(not cg.have_nvrtc(), reason="needs NVRTC: pip install -e '.[cuda]'")


class FakeDriver:
    """cuda.bindings.driver's calls kiln makes, over host memory."""

    def __init__(self):
        from cuda.bindings import driver as real
        self.CUdevice_attribute = real.CUdevice_attribute
        self.CUfunction_attribute = real.CUfunction_attribute
        self.CUpointer_attribute = real.CUpointer_attribute
        self.CUstreamCaptureMode = real.CUstreamCaptureMode
        self.mem: dict[int, ctypes.Array] = {}
        self.launches: list = []
        self.capturing: dict = {}
        self.replays: list = []
        self.graphs: list = []
        self.func_attrs: list = []
        self.next = 1 << 20
        self.attrs = {"MAX_THREADS_PER_BLOCK": 1024, "MAX_SHARED_MEMORY_PER_BLOCK": 49152,
                      "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN": 232448, "WARP_SIZE": 32, "MAX_BLOCK_DIM_X": 1024,
                      "MAX_BLOCK_DIM_Y": 1024, "MAX_BLOCK_DIM_Z": 64, "MULTIPROCESSOR_COUNT": 132,
                      "COMPUTE_CAPABILITY_MAJOR": 9, "COMPUTE_CAPABILITY_MINOR": 0, "CLOCK_RATE": 1980000}

    def _host(self, ptr: int) -> int:
        for base, buf in self.mem.items():
            if base <= ptr < base + len(buf):
                return ctypes.addressof(buf) + ptr - base
        raise AssertionError(f"{ptr:#x} is not device memory")

    cuInit = staticmethod(lambda flags: (0,))
    cuDeviceGetCount = staticmethod(lambda: (0, 1))
    cuDeviceGet = staticmethod(lambda i: (0, i))
    cuDevicePrimaryCtxRetain = staticmethod(lambda dev: (0, "ctx"))
    cuCtxSetCurrent = staticmethod(lambda ctx: (0,))
    cuCtxSynchronize = staticmethod(lambda: (0,))
    cuGetErrorString = staticmethod(lambda err: (0, b"fake error"))

    def cuDeviceGetAttribute(self, attr, dev):
        return 0, self.attrs[attr.name.replace("CU_DEVICE_ATTRIBUTE_", "")]

    def cuDeviceGetName(self, n, dev):
        return 0, b"Fake GPU".ljust(n, b"\0")

    def cuMemAlloc(self, n):
        ptr, self.next = self.next, self.next + (n + 511) // 512 * 512 + 512
        self.mem[ptr] = (ctypes.c_char * n)()
        return 0, ptr

    def cuMemFree(self, ptr):
        del self.mem[int(ptr)]
        return (0,)

    def cuMemcpyHtoD(self, dst, src, n):
        ctypes.memmove(self._host(int(dst)), src, n)
        return (0,)

    def cuMemcpyDtoH(self, dst, src, n):
        ctypes.memmove(dst, self._host(int(src)), n)
        return (0,)

    def cuMemcpyDtoD(self, dst, src, n):
        ctypes.memmove(self._host(int(dst)), self._host(int(src)), n)
        return (0,)

    def cuPointerGetAttribute(self, attr, ptr):
        self._host(int(ptr))
        return 0, 0

    def cuModuleLoadData(self, image):
        assert bytes(image[:4]) == b"\x7fELF"  # a cubin NVRTC compiled for the device's arch
        return 0, "module"

    def cuModuleGetFunction(self, module, name):
        return 0, name.decode()

    def cuFuncSetAttribute(self, func, attr, value):
        self.func_attrs.append((func, attr.name, value))
        return (0,)

    def cuLaunchKernel(self, func, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        launch = (func, (gx, gy, gz), (bx, by, bz), shared, params)
        if stream in self.capturing:  # recorded into the stream's graph, not run
            self.capturing[stream].append((launch, _arg(params, 0, ctypes.c_uint64)))
        elif self.capturing:
            return (901,)  # CUDA_ERROR_STREAM_CAPTURE_IMPLICIT: another stream while one records
        else:
            self.launches.append(launch)
        return (0,)

    # stream capture: a graph is the list of its launches (with their first argument as recorded)
    capturing: dict
    streams = 0

    def cuStreamCreate(self, flags):
        self.streams += 1
        return 0, 1000 + self.streams

    def cuStreamBeginCapture(self, stream, mode):
        assert mode.name == "CU_STREAM_CAPTURE_MODE_RELAXED"  # workspace is allocated meanwhile
        self.capturing[stream] = []
        return (0,)

    def cuStreamEndCapture(self, stream):
        return 0, self.capturing.pop(stream)

    cuGraphGetNodes = staticmethod(lambda graph, n: (0, None, len(graph)))
    def cuGraphInstantiate(self, graph, flags):
        self.graphs.append(graph)
        return 0, ("exec", graph)

    def cuGraphLaunch(self, executable, stream):
        self.replays.append(stream)
        self.launches.extend(launch for launch, _ in executable[1])
        return (0,)

    cuStreamSynchronize = staticmethod(lambda stream: (0,))
    cuGraphExecDestroy = cuGraphDestroy = cuStreamDestroy = staticmethod(lambda x: (0,))

    cuEventCreate = staticmethod(lambda flags: (0, object()))
    cuEventRecord = staticmethod(lambda ev, stream: (0,))
    cuEventSynchronize = staticmethod(lambda ev: (0,))
    cuEventElapsedTime = staticmethod(lambda a, b: (0, 1.5))
    cuEventDestroy = staticmethod(lambda ev: (0,))


@pytest.fixture
def fake(monkeypatch):
    drv = FakeDriver()
    monkeypatch.setattr(rt, "_drv", lambda: drv)
    monkeypatch.setattr(rt, "API", rt.CUDADeviceAPI())
    monkeypatch.setattr(tvm.runtime.devices, "_loaded", {})
    cg.default_arch.cache_clear()
    yield drv
    cg.default_arch.cache_clear()


def _arg(params: int, i: int, ctype):
    slot = (ctypes.c_void_p * (i + 1)).from_address(params)[i]
    return ctype.from_address(slot).value


def _two_kernels():
    n = te.var("n")
    alpha = te.var("alpha", dtype="float32")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * alpha, name="B")
    C = te.compute((n,), lambda i: B[n - 1 - i] + 1.0, name="C")
    s = te.create_schedule(C.op)
    for X in (B, C):
        xo, xi = s[X].split(X.op.axis[0], factor=64)
        s[X].bind(xo, te.thread_axis("blockIdx.x"))
        s[X].bind(xi, te.thread_axis("threadIdx.x"))
    return tvm.build(s, [A, C, alpha], target="cuda", name="two")


def test_device_and_arrays(fake):
    dev = tvm.cuda(0)
    assert dev.exist and dev.device_name == "Fake GPU" and dev.compute_version == "9.0"
    assert dev.max_thread_dimensions == (1024, 1024, 64) and dev.warp_size == 32
    x = np.random.rand(7, 9).astype("float32")
    a = tvm.nd.array(x, dev)
    b = tvm.nd.empty((7, 9), "float32", dev)
    b.copyfrom(a)
    np.testing.assert_array_equal(b.numpy(), x)
    assert len(fake.mem) == 2
    del a, b
    assert not fake.mem  # freed with their arrays


def test_launch_arguments_workspace_and_timing(fake):
    f = _two_kernels()
    assert f.metadata["device_code"]["arch"] == "sm_90"  # device 0's arch
    dev = tvm.cuda(0)
    a, c = tvm.nd.array(np.ones(1000, "float32"), dev), tvm.nd.empty((1000,), "float32", dev)
    f(a, c, 1.5)
    (k0, grid0, block0, shared0, p0), (k1, grid1, block1, _, p1) = fake.launches
    assert (k0, k1) == ("two_kernel0", "two_kernel1")
    assert grid0 == grid1 == (16, 1, 1) and block0 == block1 == (64, 1, 1) and shared0 == 0
    params = [p["name"] for p in f.metadata["device_code"]["kernels"][0]["params"]]
    got = {name: _arg(p0, i, ctypes.c_uint64) for i, name in enumerate(params)}
    assert got["A"] == a._address()
    workspace = got["B"]
    assert workspace not in (a._address(), c._address())
    assert _arg(p0, params.index("n"), ctypes.c_int32) == 1000
    assert _arg(p0, params.index("alpha"), ctypes.c_float) == 1.5
    assert len(fake.mem) == 2  # the workspace was freed after the call
    fake.launches.clear()
    res = f.time_evaluator(f.entry_name, dev, number=3, repeat=2)(a, c, 1.5)
    assert res.results == pytest.approx([0.5e-3, 0.5e-3])  # 1.5 ms between the events, over 3 calls
    assert len(fake.launches) == 2 * (1 + 3 * 2)  # warm-up, then 2 repeats of 3 calls


def test_dynamic_shared_memory_is_raised_and_passed(fake):
    n, threads = 16384, 256
    A = te.placeholder((n,), name="A")
    B = te.compute((2, n), lambda r, i: A[n - 1 - i] * 2.0, name="B")
    s = te.create_schedule(B.op)
    AA = s.cache_read(A, "shared", [B])
    r, i = s[B].op.axis
    io, ti = s[B].split(i, factor=threads)
    s[B].bind(r, te.thread_axis("blockIdx.x"))
    s[B].bind(ti, te.thread_axis("threadIdx.x"))
    s[AA].compute_at(s[B], r)
    ao, ai = s[AA].split(s[AA].op.axis[0], factor=threads)
    s[AA].bind(ai, te.thread_axis("threadIdx.x"))
    f = tvm.build(s, [A, B], target="cuda -max_shared_memory_per_block=232448", name="rev")
    dev = tvm.cuda(0)
    f(tvm.nd.array(np.ones(n, "float32"), dev), tvm.nd.empty((2, n), "float32", dev))
    assert fake.func_attrs == [("rev_kernel0", "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES", 65536)]
    assert [(g, b, sh) for _, g, b, sh, _ in fake.launches] == [((2, 1, 1), (256, 1, 1), 65536)]


def test_dlpack_export_is_the_device_pointer(fake):
    from kiln.runtime.dlpack import import_capsule
    a = tvm.nd.array(np.arange(4, dtype="float32"), tvm.cuda(0))
    assert a.__dlpack_device__() == (2, 0)
    t = import_capsule(a.__dlpack__(max_version=(1, 0))).tensor
    assert (t.device.device_type, t.data) == (2, a._address())
    with pytest.raises(BufferError):
        a.__dlpack__(dl_device=(1, 0), copy=False)


def test_wrong_device_and_types_module(fake):
    f = _two_kernels()
    assert [m.type_key for m in f.imported_modules] == ["cuda"]
    with pytest.raises(Exception, match=r"argument 'A' is on cpu\(0\).*tvm.cuda\(0\)"):
        f(tvm.nd.array(np.ones(10, "float32")), tvm.nd.empty((10,), "float32", tvm.cuda(0)), 1.0)


def _relay_two_ops():
    """A relay model whose fused op launches two kernels with device workspace between them
    (a batch-1 float16 7 x 7 conv on tensor cores with its reduction split across blocks, then
    the kernel summing the slices with the relu epilogue), built for the fake device (sm_90)."""
    from kiln import relay

    x = relay.var("x", shape=(1, 256, 7, 7), dtype="float16")
    w = relay.var("w", shape=(256, 256, 3, 3), dtype="float16")
    b = relay.var("b", shape=(256,), dtype="float16")
    y = relay.nn.relu(relay.nn.bias_add(relay.nn.conv2d(x, w, padding=(1, 1)), b))
    mod = tvm.IRModule.from_expr(relay.Function([x, w, b], y))
    with tvm.transform.PassContext(opt_level=3):
        return relay.build(mod, target=tvm.target.Target("cuda", host="llvm"))


def _inputs(ex):
    for name, shape in (("x", (1, 256, 7, 7)), ("w", (256, 256, 3, 3)), ("b", (256,))):
        ex["set_input"](name, np.random.rand(*shape).astype("float16"))


def test_graph_executor_replays_one_cuda_graph(fake, monkeypatch):
    """The first run launches kernel by kernel and records the same launches (same kernels,
    extents, arguments) on a blocking stream of its own; later runs are one cuGraphLaunch each.
    Workspace freed while recording stays allocated until the graph goes."""
    monkeypatch.delenv("KILN_CUDA_GRAPHS", raising=False)
    lib = _relay_two_ops()
    ex = lib["default"](tvm.cuda(0))
    _inputs(ex)
    held = len(fake.mem)
    ex["run"]()
    first = list(fake.launches)
    assert len(first) == 2 and ex.cuda_graph_failure is None and fake.replays == []
    assert len(fake.mem) == held + 1  # the recorded graph keeps the workspace its launches use
    fake.launches.clear()
    ex["run"]()
    ex["run"]()
    assert fake.replays == [1001, 1001]  # one stream, one launch per run
    (graph,) = fake.graphs  # recorded with the first run's arguments: the workspace is the same memory
    assert [a for _, a in graph] == [_arg(p, 0, ctypes.c_uint64) for *_, p in first]
    key = [(f, g, b, sh) for f, g, b, sh, _ in first]
    assert [(f, g, b, sh) for f, g, b, sh, _ in fake.launches] == key * 2
    del ex
    import gc

    gc.collect()
    assert not fake.mem  # the graph's workspace went with it, the executor's buffers with the executor


@pytest.mark.parametrize("how", ["env", "call"])
def test_cuda_graphs_can_be_turned_off(fake, monkeypatch, how):
    lib = _relay_two_ops()
    if how == "env":
        monkeypatch.setenv("KILN_CUDA_GRAPHS", "0")
    ex = lib["default"](tvm.cuda(0))
    if how == "call":
        ex["use_cuda_graph"](False)
    _inputs(ex)
    ex["run"]()
    n = len(fake.launches)
    ex["run"]()
    assert fake.replays == [] and len(fake.launches) == 2 * n and not fake.capturing
