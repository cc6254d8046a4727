"""CUDA runtime on an NVIDIA GPU: tvm.cuda arrays, kernels built for 'cuda' launched through the
driver API, dynamic shared memory above 48 KiB, device workspace, time_evaluator (CUDA events),
.so/.tar export, and zero-copy DLPack with torch and cupy. Everything is checked against numpy.
Skips without a GPU ("needs an NVIDIA GPU (cuda driver)"); the compile side runs everywhere
in tests/codegen/test_cuda.py."""

from __future__ import annotations

import numpy as np
import pytest

import kiln as tvm
from kiln import te
from kiln.errors import KilnError

pytestmark = pytest.mark.gpu


def _dev():
    return tvm.cuda(0)


def _bind_1d(s, X, factor=64):
    xo, xi = s[X].split(X.op.axis[0], factor=factor)
    s[X].bind(xo, te.thread_axis("blockIdx.x"))
    s[X].bind(xi, te.thread_axis("threadIdx.x"))


def _add_one(n, dtype="float32"):
    A = te.placeholder((n,), name="A", dtype=dtype)
    B = te.compute(A.shape, lambda i: A[i] + tvm.tir.const(1, dtype), name="B")
    s = te.create_schedule(B.op)
    _bind_1d(s, B)
    return tvm.build(s, [A, B], target="cuda", name="add_one")


def test_device_attributes():
    dev = _dev()
    assert dev.exist and not tvm.cuda(64).exist
    assert dev.warp_size == 32 and dev.max_threads_per_block == 1024
    assert dev.max_shared_memory_per_block == 48 * 1024
    assert dev.multi_processor_count > 0 and dev.device_name
    major, minor = dev.compute_version.split(".")
    assert int(major) >= 5 and minor.isdigit()
    assert tvm.device("cuda", 0) == dev and str(dev) == "cuda(0)"


def test_arrays_copies_and_empty():
    dev = _dev()
    x = np.random.default_rng(0).standard_normal((33, 17)).astype("float32")
    a = tvm.nd.array(x, dev)
    assert a.device == dev and a.shape == (33, 17)
    np.testing.assert_array_equal(a.numpy(), x)
    b = tvm.nd.empty((33, 17), "float32", dev)
    b.copyfrom(a)  # device to device
    np.testing.assert_array_equal(b.numpy(), x)
    np.testing.assert_array_equal(a.copyto(tvm.cpu()).numpy(), x)
    assert tvm.nd.empty((0,), "float32", dev).numpy().shape == (0,)


def test_add_one_symbolic_sizes():
    f = _add_one(te.var("n"))
    dev = _dev()
    for n in (0, 1, 63, 64, 1000, 100_003):
        x = np.random.rand(n).astype("float32")
        b = tvm.nd.empty((n,), "float32", dev)
        f(tvm.nd.array(x, dev), b)
        np.testing.assert_array_equal(b.numpy(), x + 1)


def test_half_add():
    f = _add_one(1000, "float16")
    x = (np.random.rand(1000) * 8).astype("float16")
    b = tvm.nd.empty((1000,), "float16", _dev())
    f(tvm.nd.array(x, _dev()), b)
    np.testing.assert_array_equal(b.numpy(), x + np.float16(1))


def test_float4_vectors():
    n = 4096
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute((n,), lambda i: A[i] * B[i] + A[i], name="C")
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=4)
    bx, tx = s[C].split(xo, factor=64)
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    s[C].vectorize(xi)
    f = tvm.build(s, [A, B, C], target="cuda", name="fma4")
    assert "float4" in f.imported_modules[0].get_source()
    a, b = np.random.rand(n).astype("float32"), np.random.rand(n).astype("float32")
    c = tvm.nd.empty((n,), "float32", _dev())
    f(tvm.nd.array(a, _dev()), tvm.nd.array(b, _dev()), c)
    np.testing.assert_allclose(c.numpy(), a * b + a, rtol=1e-6)


def _matmul(n=256, tile=16):
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    AA = s.cache_read(A, "shared", [C])
    BB = s.cache_read(B, "shared", [C])
    i, j = s[C].op.axis
    bi, ti = s[C].split(i, factor=tile)
    bj, tj = s[C].split(j, factor=tile)
    s[C].reorder(bi, bj, ti, tj)
    s[C].bind(bi, te.thread_axis("blockIdx.y"))
    s[C].bind(bj, te.thread_axis("blockIdx.x"))
    s[C].bind(ti, te.thread_axis("threadIdx.y"))
    s[C].bind(tj, te.thread_axis("threadIdx.x"))
    ko, ki = s[C].split(s[C].op.reduce_axis[0], factor=tile)
    s[C].reorder(ko, ki)
    for X in (AA, BB):
        s[X].compute_at(s[C], ko)
        a, b = s[X].op.axis
        s[X].bind(a, te.thread_axis("threadIdx.y"))
        s[X].bind(b, te.thread_axis("threadIdx.x"))
    return tvm.build(s, [A, B, C], target="cuda", name="mm")


def test_shared_memory_matmul():
    n = 256
    f = _matmul(n)
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)
    c = tvm.nd.empty((n, n), "float32", _dev())
    f(tvm.nd.array(a, _dev()), tvm.nd.array(b, _dev()), c)
    np.testing.assert_allclose(c.numpy(), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def test_dynamic_shared_memory_above_48k():
    n, rows, threads = 16384, 4, 256  # a 64 KiB shared copy of A per block
    A = te.placeholder((n,), name="A")
    B = te.compute((rows, n), lambda r, i: A[n - 1 - i] * (r + 1).astype("float32"), name="B")
    s = te.create_schedule(B.op)
    AA = s.cache_read(A, "shared", [B])
    r, i = s[B].op.axis
    io, ti = s[B].split(i, factor=threads)
    s[B].bind(r, te.thread_axis("blockIdx.x"))
    s[B].bind(ti, te.thread_axis("threadIdx.x"))
    s[AA].compute_at(s[B], r)
    ao, ai = s[AA].split(s[AA].op.axis[0], factor=threads)
    s[AA].bind(ai, te.thread_axis("threadIdx.x"))
    optin = _dev()._attribute("max_shared_memory_per_block_optin")
    assert optin > 64 * 1024
    t = tvm.target.Target(f"cuda -max_shared_memory_per_block={optin}")
    f = tvm.build(s, [A, B], target=t, name="rev")
    assert f.metadata["device_code"]["kernels"][0]["shared_bytes"] == 64 * 1024
    x = np.random.rand(n).astype("float32")
    out = tvm.nd.empty((rows, n), "float32", _dev())
    f(tvm.nd.array(x, _dev()), out)
    np.testing.assert_array_equal(out.numpy(), np.stack([x[::-1] * (r + 1) for r in range(rows)]))


@pytest.mark.parametrize("combine", ["sum", "max"])
@pytest.mark.parametrize("threads, rows", [(64, 1), (32, 1), (128, 1), (8, 4), (4, 2), (48, 1), (256, 1)])
def test_cross_thread_reductions(threads, rows, combine):
    """Shared-memory tree, warp shuffles (one warp, several groups per warp, a partial warp) and both."""
    n, m = 64, 1000
    A = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, m), name="k")
    reducer = te.sum if combine == "sum" else te.max
    B = te.compute((n,), lambda i: reducer(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=threads)
    if rows > 1:
        bo, bi = s[B].split(B.op.axis[0], factor=rows)
        s[B].bind(bo, te.thread_axis("blockIdx.x"))
        s[B].bind(bi, te.thread_axis("threadIdx.y"))
    else:
        s[B].bind(B.op.axis[0], te.thread_axis("blockIdx.x"))
    s[B].bind(ki, te.thread_axis("threadIdx.x"))
    f = tvm.build(s, [A, B], target="cuda", name="rowsum")
    a = np.random.default_rng(threads).standard_normal((n, m)).astype("float32")
    b = tvm.nd.empty((n,), "float32", _dev())
    f(tvm.nd.array(a, _dev()), b)
    want = a.sum(axis=1, dtype=np.float64) if combine == "sum" else a.max(axis=1)
    np.testing.assert_allclose(b.numpy(), want, rtol=1e-5, atol=1e-4)


def _two_kernels():
    """Two kernels with a device workspace between them and a float scalar."""
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    alpha = te.var("alpha", dtype="float32")
    B = te.compute((n,), lambda i: A[i] * alpha, name="B")
    C = te.compute((n,), lambda i: B[n - 1 - i] + 1.0, name="C")  # another block's B: two kernels
    s = te.create_schedule(C.op)
    for X in (B, C):
        _bind_1d(s, X)
    return tvm.build(s, [A, C, alpha], target="cuda", name="two")


def test_two_kernels_share_a_device_workspace():
    f = _two_kernels()
    assert [k["name"] for k in f.metadata["device_code"]["kernels"]] == ["two_kernel0", "two_kernel1"]
    for n in (1000, 65, 1000):
        x = np.random.rand(n).astype("float32")
        c = tvm.nd.empty((n,), "float32", _dev())
        f(tvm.nd.array(x, _dev()), c, 1.5)
        np.testing.assert_allclose(c.numpy(), (x * np.float32(1.5))[::-1] + 1, rtol=1e-6)


def test_time_evaluator_uses_the_device():
    f = _matmul(256)
    dev = _dev()
    args = [tvm.nd.array(np.ones((256, 256), "float32"), dev) for _ in range(2)]
    c = tvm.nd.empty((256, 256), "float32", dev)
    res = f.time_evaluator(f.entry_name, dev, number=5, repeat=3)(*args, c)
    assert len(res.results) == 3 and all(0 < r < 0.1 for r in res.results)
    np.testing.assert_array_equal(c.numpy(), np.full((256, 256), 256, "float32"))


def test_wrong_device_argument():
    f = _add_one(100)
    with pytest.raises(Exception, match=r"argument 'A' is on cpu\(0\).*tvm.cuda\(0\)"):
        f(tvm.nd.array(np.ones(100, "float32")), tvm.nd.empty((100,), "float32", _dev()))


@pytest.mark.parametrize("ext", ["so", "tar"])
def test_export_and_load(tmp_path, ext):
    path = str(tmp_path / f"two.{ext}")
    _two_kernels().export_library(path)
    f = tvm.runtime.load_module(path)
    dev_mods = [m for m in f.imported_modules if m.type_key == "cuda"]
    assert len(dev_mods) == 1 and "__global__" in dev_mods[0].get_source()
    assert ".entry two_kernel0" in dev_mods[0].get_source("ptx")
    x = np.random.rand(500).astype("float32")
    c = tvm.nd.empty((500,), "float32", _dev())
    f(tvm.nd.array(x, _dev()), c, 2.0)
    np.testing.assert_allclose(c.numpy(), (x * 2)[::-1] + 1, rtol=1e-6)


def test_dlpack_with_torch():
    torch = pytest.importorskip("torch")
    f = _add_one(te.var("n"))
    # torch -> kiln without a copy: the kernel writes into torch's memory.
    t_in = torch.arange(1000, dtype=torch.float32, device="cuda")
    t_out = torch.zeros(1000, dtype=torch.float32, device="cuda")
    a, b = tvm.nd.from_dlpack(t_in), tvm.nd.from_dlpack(t_out)
    assert a.device == tvm.cuda(0) and a.shape == (1000,)
    f(a, b)
    torch.testing.assert_close(t_out, t_in + 1)
    # kiln -> torch without a copy: torch sees kiln's writes and kiln sees torch's.
    x = np.random.rand(64).astype("float32")
    k = tvm.nd.array(x, _dev())
    t = torch.from_dlpack(k)
    assert t.device.type == "cuda" and t.data_ptr() == k._address()
    np.testing.assert_array_equal(t.cpu().numpy(), x)
    t.mul_(2)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(k.numpy(), x * 2)


def test_dlpack_with_cupy():
    cp = pytest.importorskip("cupy")
    f = _add_one(te.var("n"))
    c_in = cp.arange(300, dtype=cp.float32)
    c_out = cp.zeros(300, dtype=cp.float32)
    f(tvm.nd.from_dlpack(c_in), tvm.nd.from_dlpack(c_out))
    np.testing.assert_array_equal(cp.asnumpy(c_out), np.arange(300, dtype=np.float32) + 1)
    k = tvm.nd.array(np.arange(10, dtype=np.float32), _dev())
    view = cp.from_dlpack(k)
    assert int(view.data.ptr) == k._address()
    np.testing.assert_array_equal(cp.asnumpy(view), np.arange(10, dtype=np.float32))


def test_absent_device_is_an_error():
    with pytest.raises(KilnError, match=r"cuda\(64\) does not exist"):
        tvm.nd.empty((4,), "float32", tvm.cuda(64))
