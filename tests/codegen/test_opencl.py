"""OpenCL backend end to end: schedules bound to GPU threads, built for 'opencl', run on the
machine's OpenCL device (PoCL in CI) through tvm.cl(0) arrays, compared with numpy."""

from __future__ import annotations

import numpy as np
import pytest

import kiln as tvm
from kiln import te
from kiln.errors import CompileError
from kiln.contrib import cc

pytestmark = pytest.mark.opencl


def _dev():
    return tvm.cl(0)


def _add_one(n, factor=64):
    A = te.placeholder((n,), name="A")
    B = te.compute(A.shape, lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    xo, xi = s[B].split(B.op.axis[0], factor=factor)
    s[B].bind(xo, te.thread_axis("blockIdx.x"))
    s[B].bind(xi, te.thread_axis("threadIdx.x"))
    return s, A, B


def _run(f, arrays, out_shape, out_dtype="float32"):
    dev = _dev()
    args = [tvm.nd.array(a, dev) for a in arrays]
    out = tvm.nd.empty(out_shape, out_dtype, dev)
    f(*args, out)
    return out.numpy()


@pytest.mark.parametrize("n", [1, 64, 1000, 1025])
def test_add_one_blocks_and_threads(n):
    s, A, B = _add_one(n)
    f = tvm.build(s, [A, B], target="opencl", name="add_one")
    a = np.random.rand(n).astype("float32")
    np.testing.assert_array_equal(_run(f, [a], (n,)), a + 1)


def test_add_one_symbolic_n_runs_every_size():
    s, A, B = _add_one(te.var("n"))
    f = tvm.build(s, [A, B], target="opencl", name="add_one")
    src = f.imported_modules[0].get_source()
    assert "__kernel void add_one_kernel0(__global float* restrict A, __global float* restrict B, int n)" in src
    assert "get_group_id(0)" in src and "get_local_id(0)" in src
    for n in (0, 1, 63, 64, 200):
        a = np.random.rand(n).astype("float32")
        np.testing.assert_array_equal(_run(f, [a], (n,)), a + 1)


def test_device_module_and_metadata():
    s, A, B = _add_one(100)
    f = tvm.build(s, [A, B], target=tvm.target.Target("opencl", host="llvm"), name="add_one")
    dev_mods = [m for m in f.imported_modules if m.type_key == "opencl"]
    assert len(dev_mods) == 1
    meta = f.metadata
    assert meta["device_type"] == 4
    code = meta["device_code"]
    assert code["type_key"] == "opencl" and code["source"] == dev_mods[0].get_source()
    assert code["kernels"] == [{"name": "add_one_kernel0", "thread_tags": ["blockIdx.x", "threadIdx.x"],
                                "params": [{"name": "A", "kind": "buffer", "dtype": "float32"},
                                           {"name": "B", "kind": "buffer", "dtype": "float32"}]}]
    assert "__kiln_device_launch" in f.get_source("ll")


def _matmul_schedule(M, N, K, tile=32, th=8, kt=8):
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    AA = s.cache_read(A, "shared", [C])
    BB = s.cache_read(B, "shared", [C])
    CL = s.cache_write(C, "local")
    bx, by = te.thread_axis("blockIdx.x"), te.thread_axis("blockIdx.y")
    tx, ty = te.thread_axis("threadIdx.x"), te.thread_axis("threadIdx.y")
    i, j = s[C].op.axis
    io, ii = s[C].split(i, factor=tile)
    jo, ji = s[C].split(j, factor=tile)
    tyo, ii = s[C].split(ii, nparts=th)
    txo, ji = s[C].split(ji, nparts=th)
    s[C].reorder(io, jo, tyo, txo, ii, ji)
    s[C].bind(io, by)
    s[C].bind(jo, bx)
    s[C].bind(tyo, ty)
    s[C].bind(txo, tx)
    s[CL].compute_at(s[C], txo)
    ko, ki = s[CL].split(CL.op.reduce_axis[0], factor=kt)
    ci, cj = s[CL].op.axis
    s[CL].reorder(ko, ki, ci, cj)
    s[CL].unroll(ci)
    s[CL].vectorize(cj)
    for X in (AA, BB):
        s[X].compute_at(s[CL], ko)
        fused = s[X].fuse(*s[X].op.axis)
        _, fi = s[X].split(fused, factor=th * th)
        t1, t2 = s[X].split(fi, factor=th)
        s[X].bind(t1, ty)
        s[X].bind(t2, tx)
    return s, [A, B, C]


@pytest.mark.parametrize("shape", [(128, 128, 128), (100, 70, 45)])
def test_matmul_shared_memory_tiling(shape):
    M, N, K = shape
    s, args = _matmul_schedule(M, N, K)
    f = tvm.build(s, args, target="opencl", name="mm")
    src = f.imported_modules[0].get_source()
    assert "__local float A_shared[256] __attribute__((aligned(64)));" in src and "__local float B_shared[256]" in src
    assert src.count("barrier(CLK_LOCAL_MEM_FENCE);") == 2
    assert "float C_local[16] __attribute__((aligned(64)));" in src  # cache_write("local"): private registers
    a = np.random.rand(M, K).astype("float32")
    b = np.random.rand(K, N).astype("float32")
    np.testing.assert_allclose(_run(f, [a, b], (M, N)), a @ b, rtol=1e-5)


def test_storage_align_pads_shared_rows():
    M = N = K = 64
    s, args = _matmul_schedule(M, N, K)
    AA = [st for st in s.stages if st.name == "A.shared"][0]
    AA.storage_align(AA.op.axis[0], 32, 1)  # rows of 8 floats padded to a stride of 33
    f = tvm.build(s, args, target="opencl", name="mm")
    assert "__local float A_shared[1056]" in f.imported_modules[0].get_source()
    a = np.random.rand(M, K).astype("float32")
    b = np.random.rand(K, N).astype("float32")
    np.testing.assert_allclose(_run(f, [a, b], (M, N)), a @ b, rtol=1e-5)


@pytest.mark.parametrize("m,threads", [(300, 64), (1000, 128), (50, 24)])
def test_row_sum_cross_thread_reduction(m, threads):
    n = 37
    A = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, m), name="k")
    B = te.compute((n,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    _, ki = s[B].split(k, factor=threads)
    s[B].bind(B.op.axis[0], te.thread_axis("blockIdx.x"))
    s[B].bind(ki, te.thread_axis("threadIdx.x"))
    f = tvm.build(s, [A, B], target="opencl", name="rowsum")
    assert "__local float B_red_shared" in f.imported_modules[0].get_source()
    a = np.random.rand(n, m).astype("float32")
    np.testing.assert_allclose(_run(f, [a], (n,)), a.sum(1), rtol=1e-5)


def test_row_max_several_rows_per_block():
    n, m = 30, 200
    A = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, m), name="k")
    B = te.compute((n,), lambda i: te.max(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    io, ii = s[B].split(B.op.axis[0], factor=4)
    _, ki = s[B].split(k, factor=32)
    s[B].bind(io, te.thread_axis("blockIdx.x"))
    s[B].bind(ii, te.thread_axis("threadIdx.y"))
    s[B].bind(ki, te.thread_axis("threadIdx.x"))
    f = tvm.build(s, [A, B], target="opencl", name="rowmax")
    a = np.random.randn(n, m).astype("float32")
    np.testing.assert_array_equal(_run(f, [a], (n,)), a.max(1))


def test_softmax_one_kernel():
    n, m = 10, 1000
    A = te.placeholder((n, m), name="A")
    k1, k2 = te.reduce_axis((0, m), name="k1"), te.reduce_axis((0, m), name="k2")
    mx = te.compute((n,), lambda i: te.max(A[i, k1], axis=k1), name="mx")
    es = te.compute((n,), lambda i: te.sum(te.exp(A[i, k2] - mx[i]), axis=k2), name="es")
    out = te.compute((n, m), lambda i, j: te.exp(A[i, j] - mx[i]) / es[i], name="out")
    s = te.create_schedule(out.op)
    tx = te.thread_axis("threadIdx.x")
    i, j = out.op.axis
    s[out].bind(i, te.thread_axis("blockIdx.x"))
    _, ji = s[out].split(j, factor=128)
    s[out].bind(ji, tx)
    for X in (mx, es):
        s[X].compute_at(s[out], i)  # under blockIdx only: the row's max and sum live in shared memory
        _, ki = s[X].split(X.op.reduce_axis[0], factor=128)
        s[X].bind(ki, tx)
    f = tvm.build(s, [A, out], target="opencl", name="softmax")
    src = f.imported_modules[0].get_source()
    assert src.count("__kernel") == 1 and "__local float mx[1]" in src
    a = np.random.randn(n, m).astype("float32")
    e = np.exp(a - a.max(1, keepdims=True))
    np.testing.assert_allclose(_run(f, [a], (n, m)), e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_vectorized_float4_loads_and_stores():
    n = 1024
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0 + 1.0, name="B")
    s = te.create_schedule(B.op)
    xo, xi = s[B].split(B.op.axis[0], factor=4)
    bo, ti = s[B].split(xo, factor=64)
    s[B].bind(bo, te.thread_axis("blockIdx.x"))
    s[B].bind(ti, te.thread_axis("threadIdx.x"))
    s[B].vectorize(xi)
    f = tvm.build(s, [A, B], target="opencl", name="scale")
    src = f.imported_modules[0].get_source()
    # Offsets are multiples of 4 floats of an argument buffer: aligned float4 accesses.
    assert "(__global float4*)(A + " in src and "(__global float4*)(B + " in src
    a = np.random.rand(n).astype("float32")
    np.testing.assert_allclose(_run(f, [a], (n,)), a * 2 + 1, rtol=1e-6)


def test_unaligned_vector_access_uses_vload():
    n = 1024
    A = te.placeholder((n + 1,), name="A")
    B = te.compute((n,), lambda i: A[i + 1], name="B")
    s = te.create_schedule(B.op)
    xo, xi = s[B].split(B.op.axis[0], factor=4)
    bo, ti = s[B].split(xo, factor=64)
    s[B].bind(bo, te.thread_axis("blockIdx.x"))
    s[B].bind(ti, te.thread_axis("threadIdx.x"))
    s[B].vectorize(xi)
    f = tvm.build(s, [A, B], target="opencl", name="shift")
    src = f.imported_modules[0].get_source()
    assert "vload4(0, A + " in src  # offset 4k + 1: no float4 alignment
    a = np.random.rand(n + 1).astype("float32")
    np.testing.assert_array_equal(_run(f, [a], (n,)), a[1:])


def test_unroll_pragmas():
    n = 4096
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    for explicit, expect in ((True, "#pragma unroll"), (False, "#pragma unroll")):
        s = te.create_schedule(B.op)
        xo, xi = s[B].split(B.op.axis[0], factor=8)
        bo, ti = s[B].split(xo, factor=64)
        s[B].bind(bo, te.thread_axis("blockIdx.x"))
        s[B].bind(ti, te.thread_axis("threadIdx.x"))
        s[B].pragma(bo, "auto_unroll_max_step", 16)
        s[B].pragma(bo, "unroll_explicit", explicit)
        f = tvm.build(s, [A, B], target="opencl", name="inc")
        src = f.imported_modules[0].get_source()
        assert (expect in src) != explicit  # explicit: unrolled in TIR; else left to the OpenCL compiler
        assert ("for (int i_inner" in src) != explicit
        a = np.random.rand(n).astype("float32")
        np.testing.assert_array_equal(_run(f, [a], (n,)), a + 1)


def test_export_so_and_tar_carry_the_kernels(tmp_path):
    s, A, B = _add_one(te.var("n"))
    f = tvm.build(s, [A, B], target="opencl", name="add_one")
    a = np.random.rand(77).astype("float32")
    for name in ("lib.so", "lib.tar"):
        path = str(tmp_path / name)
        f.export_library(path)
        g = tvm.runtime.load_module(path)
        assert [m.type_key for m in g.imported_modules] == ["opencl"]
        assert "add_one_kernel0" in g.imported_modules[0].get_source()
        np.testing.assert_array_equal(_run(g, [a], (77,)), a + 1)


@pytest.mark.skipif(cc.find_lld() is None,
                    reason="needs ld.lld (apt-get install -y lld) to link the aarch64 host code")
def test_cross_host_exports_carry_the_kernels(tmp_path):
    import json
    import tarfile

    s, A, B = _add_one(1000)
    f = tvm.build(s, [A, B], target=tvm.target.Target("opencl -device=mali", host="llvm -mtriple=aarch64-linux-gnu"),
                  name="add_one")
    assert f.triple.startswith("aarch64")
    assert "get_group_id(0)" in f.imported_modules[0].get_source()
    f.export_library(str(tmp_path / "lib.so"))  # linked by ld.lld for the board
    head = (tmp_path / "lib.so").read_bytes()
    assert b"add_one_kernel0" in head and b"__kiln_device_launch" in head
    f.export_library(str(tmp_path / "lib.tar"))
    with tarfile.open(tmp_path / "lib.tar") as tar:
        meta = json.load(tar.extractfile("metadata.json"))
    assert meta["device_type"] == 4 and meta["target"] == "opencl -device=mali"
    assert meta["device_code"]["source"] == f.imported_modules[0].get_source()


# Errors ------------------------------------------------------------------------------------


def test_unbound_loop_is_an_error():
    A = te.placeholder((100,), name="A")
    B = te.compute(A.shape, lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    with pytest.raises(CompileError, match=r"stage B: loop axes i write global memory but are not bound to "
                                           r"GPU threads. Did you forget to bind\?"):
        tvm.build(s, [A, B], target="opencl")


def test_too_many_threads_per_block():
    s, A, B = _add_one(4096, factor=512)
    with pytest.raises(CompileError, match=r"512 threads per block \(threadIdx.x=512\) exceed the target's limit "
                                           r"of 256.*-max_num_threads"):
        tvm.build(s, [A, B], target="opencl", name="add_one")
    f = tvm.build(s, [A, B], target="opencl -max_num_threads=512", name="add_one")
    assert "reqd_work_group_size(512, 1, 1)" in f.imported_modules[0].get_source()


def test_too_much_shared_memory():
    s, args = _matmul_schedule(512, 512, 512, tile=64, th=8, kt=128)
    with pytest.raises(CompileError, match=r"65536 bytes of shared memory exceed the target's 49152 bytes per block"):
        tvm.build(s, args, target="opencl", name="mm")
    s, args = _matmul_schedule(512, 512, 512, tile=64, th=8, kt=64)  # 32 KiB: fits a desktop GPU
    tvm.build(s, args, target="opencl", name="mm")
    s, args = _matmul_schedule(512, 512, 512, tile=64, th=8, kt=96)  # 48 KiB: too much for Mali's 32 KiB
    with pytest.raises(CompileError, match=r"49152 bytes of shared memory exceed the target's 32768 bytes"):
        tvm.build(s, args, target="opencl -device=mali", name="mm")


def test_shared_stage_outside_kernel_is_an_error():
    A = te.placeholder((64,), name="A")
    B = te.compute((64,), lambda i: A[i] * 2.0, name="B")
    s = te.create_schedule(B.op)
    s.cache_read(A, "shared", [B])
    xo, xi = s[B].split(B.op.axis[0], factor=32)
    s[B].bind(xo, te.thread_axis("blockIdx.x"))
    s[B].bind(xi, te.thread_axis("threadIdx.x"))
    with pytest.raises(CompileError, match="stage A.shared lives in shared memory but is computed outside every GPU kernel"):
        tvm.build(s, [A, B], target="opencl")


def test_two_kernels_share_a_device_workspace():
    n = 1000
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((n,), lambda i: B[n - 1 - i] + 1.0, name="C")  # reads another block's B: two kernels
    s = te.create_schedule(C.op)
    for X in (B, C):
        xo, xi = s[X].split(X.op.axis[0], factor=64)
        s[X].bind(xo, te.thread_axis("blockIdx.x"))
        s[X].bind(xi, te.thread_axis("threadIdx.x"))
    f = tvm.build(s, [A, C], target="opencl", name="two")
    assert [k["name"] for k in f.metadata["device_code"]["kernels"]] == ["two_kernel0", "two_kernel1"]
    a = np.random.rand(n).astype("float32")
    for _ in range(3):  # the workspace is made and released on every call
        np.testing.assert_allclose(_run(f, [a], (n,)), (a * 2)[::-1] + 1, rtol=1e-6)


def test_huge_buffer_indices_are_computed_in_long():
    # 2**31 + 64 bytes: int32 index arithmetic would overflow; the source must use long (not run).
    n = 2 ** 31 + 64
    A = te.placeholder((n,), name="A", dtype="int8")
    B = te.compute((n,), lambda i: A[i] + tvm.tir.const(1, "int8"), name="B")
    s = te.create_schedule(B.op)
    xo, xi = s[B].split(B.op.axis[0], factor=64)
    s[B].bind(xo, te.thread_axis("blockIdx.x"))
    s[B].bind(xi, te.thread_axis("threadIdx.x"))
    src = tvm.build(s, [A, B], target="opencl", name="big").imported_modules[0].get_source()
    assert "long i_outer = ((long)((int)get_group_id(0)));" in src
    assert "B[((i_outer * 64L) + i_inner)]" in src
    assert "if" not in src.split("{", 1)[1]  # the launch covers the 2**25 + 1 blocks exactly: no guard


def _elementwise(fcompute, shapes_dtypes, out_dtype, n=256):
    ins = [te.placeholder((n,), name=f"x{k}", dtype=dt) for k, dt in enumerate(shapes_dtypes)]
    out = te.compute((n,), lambda i: fcompute(*[x[i] for x in ins]), name="out")
    s = te.create_schedule(out.op)
    xo, xi = s[out].split(out.op.axis[0], factor=64)
    s[out].bind(xo, te.thread_axis("blockIdx.x"))
    s[out].bind(xi, te.thread_axis("threadIdx.x"))
    return tvm.build(s, ins + [out], target="opencl", name="ew")


def test_float_math_matches_numpy():
    rng = np.random.default_rng(0)
    x = rng.uniform(0.1, 4, 256).astype("float32")
    y = rng.uniform(-3, 3, 256).astype("float32")
    cases = [
        (lambda a, b: te.exp(b) + te.log(a) * te.sqrt(a), lambda a, b: np.exp(b) + np.log(a) * np.sqrt(a)),
        (lambda a, b: te.tanh(b) - te.sigmoid(b), lambda a, b: np.tanh(b) - 1 / (1 + np.exp(-b))),
        (lambda a, b: te.power(a, b) + te.abs(b), lambda a, b: a ** b + np.abs(b)),
        (lambda a, b: te.round(b * 2) + te.floor(b) + te.ceil(b), lambda a, b: np.round(b * 2) + np.floor(b) + np.ceil(b)),
        (lambda a, b: te.max(a, b) - te.min(a, b), lambda a, b: np.maximum(a, b) - np.minimum(a, b)),
        (lambda a, b: te.if_then_else(b > 0, a, -a), lambda a, b: np.where(b > 0, a, -a)),
        (lambda a, b: te.rsqrt(a) + te.erf(b), None),
    ]
    from math import erf
    for fc, ref in cases:
        f = _elementwise(fc, ["float32", "float32"], "float32")
        got = _run(f, [x, y], (256,))
        want = ref(x, y) if ref else 1 / np.sqrt(x) + np.array([erf(v) for v in y], "float32")
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)


def test_integer_division_and_casts_match_numpy():
    rng = np.random.default_rng(1)
    a = rng.integers(-1000, 1000, 256).astype("int32")
    b = rng.integers(1, 7, 256).astype("int32") * rng.choice([-1, 1], 256).astype("int32")
    for fc, ref in [
        (lambda p, q: te.floordiv(p, q) * 100 + te.floormod(p, q), lambda p, q: (p // q) * 100 + p % q),
        (lambda p, q: te.truncdiv(p, q) * 100 + te.truncmod(p, q),
         lambda p, q: np.trunc(p / q).astype("int32") * 100 + np.fmod(p, q)),
    ]:
        f = _elementwise(fc, ["int32", "int32"], "int32")
        np.testing.assert_array_equal(_run(f, [a, b], (256,), "int32"), ref(a, b))
    f = _elementwise(lambda p, q: (p.astype("int64") * 3000000).astype("int64") + q.astype("int64"),
                     ["int32", "int32"], "int64")
    np.testing.assert_array_equal(_run(f, [a, b], (256,), "int64"), a.astype("int64") * 3000000 + b)
    f = _elementwise(lambda p, q: tvm.tir.reinterpret("int32", p.astype("float32")), ["int32", "int32"], "int32")
    np.testing.assert_array_equal(_run(f, [a, b], (256,), "int32"), a.astype("float32").view("int32"))


def test_thread_axis_with_a_domain_fixes_the_block():
    n = 1000
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 3.0, name="B")
    s = te.create_schedule(B.op)
    xo, xi = s[B].split(B.op.axis[0], factor=50)
    s[B].bind(xo, te.thread_axis("blockIdx.x"))
    s[B].bind(xi, te.thread_axis((0, 64), "threadIdx.x"))  # 64 work-items, 50 of them busy
    f = tvm.build(s, [A, B], target="opencl", name="scale")
    assert "reqd_work_group_size(64, 1, 1)" in f.imported_modules[0].get_source()
    a = np.random.rand(n).astype("float32")
    np.testing.assert_allclose(_run(f, [a], (n,)), a * 3, rtol=1e-6)


def test_virtual_threads_share_the_fetch_and_own_their_tiles():
    M = 128
    A = te.placeholder((M, M), name="A")
    B = te.placeholder((M, M), name="B")
    k = te.reduce_axis((0, M), name="k")
    C = te.compute((M, M), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    AA, BB = s.cache_read(A, "shared", [C]), s.cache_read(B, "shared", [C])
    CL = s.cache_write(C, "local")
    bi, ii = s[C].split(C.op.axis[0], factor=64)
    bj, jj = s[C].split(C.op.axis[1], factor=64)
    vi, ii = s[C].split(ii, nparts=2)
    vj, jj = s[C].split(jj, nparts=2)
    ti, ii = s[C].split(ii, nparts=8)
    tj, jj = s[C].split(jj, nparts=8)
    s[C].reorder(bi, bj, vi, vj, ti, tj, ii, jj)
    s[C].bind(bi, te.thread_axis("blockIdx.y"))
    s[C].bind(bj, te.thread_axis("blockIdx.x"))
    s[C].bind(vi, te.thread_axis("vthread"))
    s[C].bind(vj, te.thread_axis("vthread"))
    s[C].bind(ti, te.thread_axis("threadIdx.y"))
    s[C].bind(tj, te.thread_axis("threadIdx.x"))
    s[CL].compute_at(s[C], tj)
    ko, _ = s[CL].split(CL.op.reduce_axis[0], factor=8)
    s[CL].reorder(ko, *[iv for iv in s[CL].leaf_iter_vars if iv is not ko])
    for X in (AA, BB):
        s[X].compute_at(s[CL], ko)
        fused = s[X].fuse(*s[X].op.axis)
        _, fi = s[X].split(fused, factor=64)
        t1, t2 = s[X].split(fi, factor=8)
        s[X].bind(t1, te.thread_axis("threadIdx.y"))
        s[X].bind(t2, te.thread_axis("threadIdx.x"))
    f = tvm.build(s, [A, B, C], target="opencl", name="vmm")
    src = f.imported_modules[0].get_source()
    # 2x2 virtual threads: one 64x8 fetch of each tile per k step, four 4x4 register tiles per thread
    assert "__local float A_shared[512]" in src and "float C_local[64]" in src
    assert src.count("A_shared[(((i0_i1_fused_outer * 64)") == 1
    a = np.random.rand(M, M).astype("float32")
    b = np.random.rand(M, M).astype("float32")
    np.testing.assert_allclose(_run(f, [a, b], (M, M)), a @ b, rtol=1e-5)


def test_vthread_elementwise_and_bool_output():
    n = 1000
    A = te.placeholder((n, 3), name="A")
    C = te.compute((n,), lambda i: (A[i, 0] + A[i, 1] * 2.0) > A[i, 2], name="C")
    s = te.create_schedule(C.op)
    bo, rest = s[C].split(C.op.axis[0], factor=128)
    vt, tx = s[C].split(rest, nparts=2)
    s[C].bind(bo, te.thread_axis("blockIdx.x"))
    s[C].bind(vt, te.thread_axis("vthread"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    f = tvm.build(s, [A, C], target="opencl", name="vt")
    assert "__global uchar* restrict C" in f.imported_modules[0].get_source()
    a = np.random.rand(n, 3).astype("float32")
    np.testing.assert_array_equal(_run(f, [a], (n,), "bool"), (a[:, 0] + a[:, 1] * 2) > a[:, 2])


def test_matmul_with_local_caches_of_shared_tiles():
    # The classic schedule: A -> A.shared (per block, at ko) -> A.shared.local (per thread, at ki).
    M = 128
    A = te.placeholder((M, M), name="A")
    B = te.placeholder((M, M), name="B")
    k = te.reduce_axis((0, M), name="k")
    C = te.compute((M, M), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    CL = s.cache_write(C, "local")
    AA, BB = s.cache_read(A, "shared", [CL]), s.cache_read(B, "shared", [CL])
    AL, BL = s.cache_read(AA, "local", [CL]), s.cache_read(BB, "local", [CL])
    tx, ty = te.thread_axis("threadIdx.x"), te.thread_axis("threadIdx.y")
    io, ii = s[C].split(C.op.axis[0], factor=32)
    jo, ji = s[C].split(C.op.axis[1], factor=32)
    tyo, ii = s[C].split(ii, nparts=8)
    txo, ji = s[C].split(ji, nparts=8)
    s[C].reorder(io, jo, tyo, txo, ii, ji)
    s[C].bind(io, te.thread_axis("blockIdx.y"))
    s[C].bind(jo, te.thread_axis("blockIdx.x"))
    s[C].bind(tyo, ty)
    s[C].bind(txo, tx)
    s[CL].compute_at(s[C], txo)
    ko, ki = s[CL].split(CL.op.reduce_axis[0], factor=8)
    s[CL].reorder(ko, ki, *s[CL].op.axis)
    s[AL].compute_at(s[CL], ki)
    s[BL].compute_at(s[CL], ki)
    for X in (AA, BB):
        s[X].compute_at(s[CL], ko)
        fused = s[X].fuse(*s[X].op.axis)
        _, fi = s[X].split(fused, factor=64)
        t1, t2 = s[X].split(fi, factor=8)
        s[X].bind(t1, ty)
        s[X].bind(t2, tx)
    s[CL].pragma(ko, "auto_unroll_max_step", 512)  # the fetch copies share one C scope
    f = tvm.build(s, [A, B, C], target="opencl", name="mm")
    src = f.imported_modules[0].get_source()
    assert "__local float A_shared[256]" in src and "float A_shared_local[4]" in src
    a = np.random.rand(M, M).astype("float32")
    b = np.random.rand(M, M).astype("float32")
    np.testing.assert_allclose(_run(f, [a, b], (M, M)), a @ b, rtol=1e-5)


def test_many_functions_in_one_module():
    from kiln.ir.module import IRModule

    funcs = {}
    for name, scale in (("double", 2.0), ("triple", 3.0)):
        A = te.placeholder((100,), name="A")
        B = te.compute((100,), lambda i: A[i] * scale, name="B")
        s = te.create_schedule(B.op)
        xo, xi = s[B].split(B.op.axis[0], factor=32)
        s[B].bind(xo, te.thread_axis("blockIdx.x"))
        s[B].bind(xi, te.thread_axis("threadIdx.x"))
        funcs.update(tvm.lower(s, [A, B], name=name).items())
    f = tvm.codegen.build(IRModule(funcs), tvm.target.Target("opencl", host="llvm"))
    assert sorted(f.function_names()) == ["double", "triple"]
    assert [k["name"] for k in f.metadata["device_code"]["kernels"]] == ["double_kernel0", "triple_kernel0"]
    a = np.random.rand(100).astype("float32")
    dev = _dev()
    for name, scale in (("double", 2), ("triple", 3)):
        out = tvm.nd.empty((100,), "float32", dev)
        f[name](tvm.nd.array(a, dev), out)
        np.testing.assert_allclose(out.numpy(), a * scale, rtol=1e-6)


def test_reduction_computed_per_thread_in_private_memory():
    n, m = 300, 20
    A = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, m), name="k")
    R = te.compute((n,), lambda i: te.sum(A[i, k] * A[i, k], axis=k), name="R")
    B = te.compute((n,), lambda i: te.sqrt(R[i]), name="B")
    s = te.create_schedule(B.op)
    xo, xi = s[B].split(B.op.axis[0], factor=64)
    s[B].bind(xo, te.thread_axis("blockIdx.x"))
    s[B].bind(xi, te.thread_axis("threadIdx.x"))
    s[R].compute_at(s[B], xi)  # under threadIdx: a private accumulator
    f = tvm.build(s, [A, B], target="opencl", name="norm")
    assert "float R[1]" in f.imported_modules[0].get_source()
    a = np.random.rand(n, m).astype("float32")
    np.testing.assert_allclose(_run(f, [a], (n,)), np.sqrt((a * a).sum(1)), rtol=1e-5)


def test_vectorized_comparisons_cast_to_one_and_zero():
    # OpenCL's vector comparisons give -1 for true: a cast to float must still give 1.0.
    n = 1024
    A = te.placeholder((n,), name="A")
    C = te.compute((n,), lambda i: (A[i] > 0.5).astype("float32") * 2.0 + te.max(A[i], 0.0), name="C")
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=4)
    bo, ti = s[C].split(xo, factor=64)
    s[C].bind(bo, te.thread_axis("blockIdx.x"))
    s[C].bind(ti, te.thread_axis("threadIdx.x"))
    s[C].vectorize(xi)
    f = tvm.build(s, [A, C], target="opencl", name="cond")
    assert "convert_float4(" in f.imported_modules[0].get_source()
    a = np.random.randn(n).astype("float32")
    np.testing.assert_allclose(_run(f, [a], (n,)), (a > 0.5) * 2.0 + np.maximum(a, 0), rtol=1e-6)


def test_scalar_arguments_reach_the_kernel():
    n = te.var("n")
    alpha = te.var("alpha", "float32")
    shift = te.var("shift", "int64")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * alpha + shift.astype("float32"), name="B")
    s = te.create_schedule(B.op)
    xo, xi = s[B].split(B.op.axis[0], factor=32)
    s[B].bind(xo, te.thread_axis("blockIdx.x"))
    s[B].bind(xi, te.thread_axis("threadIdx.x"))
    f = tvm.build(s, [A, alpha, shift, B], target="opencl", name="axpb")
    assert "float alpha, long shift" in f.imported_modules[0].get_source()
    dev = _dev()
    a = np.random.rand(70).astype("float32")
    out = tvm.nd.empty((70,), "float32", dev)
    f(tvm.nd.array(a, dev), 1.5, 3, out)
    np.testing.assert_allclose(out.numpy(), a * 1.5 + 3, rtol=1e-6)


def test_too_many_threads_in_z():
    # 128 work-items in z fit PoCL but not CUDA or NVIDIA's OpenCL (64): refused at build time
    n = 256
    A = te.placeholder((2, n), name="A")
    B = te.compute((2, n), lambda i, j: A[i, j] + 1.0, name="B")
    s = te.create_schedule(B.op)
    jo, ji = s[B].split(B.op.axis[1], factor=128)
    s[B].bind(B.op.axis[0], te.thread_axis("blockIdx.x"))
    s[B].bind(jo, te.thread_axis("blockIdx.y"))
    s[B].bind(ji, te.thread_axis("threadIdx.z"))
    with pytest.raises(CompileError, match=r"threadIdx.z has 128 threads; GPUs allow at most 64"):
        tvm.build(s, [A, B], target="opencl", name="add_one_z")
