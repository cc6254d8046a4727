"""CUDA backend, compile side: schedules bound to GPU threads built for 'cuda', the CUDA C they
print, and NVRTC compiling every kernel to PTX (no GPU needed). Running them is
tests/runtime/test_cuda.py (marked gpu)."""

from __future__ import annotations

import re

import pytest

import kiln as tvm
from kiln import te
from kiln.codegen import cuda as cg
from kiln.errors import CompileError

pytestmark = pytest.mark.skipif(not cg.have_nvrtc(),
                                reason="needs NVRTC: pip install -e '.[cuda]' (cuda-bindings, nvidia-cuda-nvrtc)")


def kernels(f):
    """(CUDA source, PTX) of a built module's device code."""
    dev = [m for m in f.imported_modules if m.type_key == "cuda"]
    assert len(dev) == 1
    return dev[0].get_source(), dev[0].get_source("ptx")


def add_one(n, factor=64, dtype="float32"):
    A = te.placeholder((n,), name="A", dtype=dtype)
    B = te.compute(A.shape, lambda i: A[i] + tvm.tir.const(1, dtype), name="B")
    s = te.create_schedule(B.op)
    xo, xi = s[B].split(B.op.axis[0], factor=factor)
    s[B].bind(xo, te.thread_axis("blockIdx.x"))
    s[B].bind(xi, te.thread_axis("threadIdx.x"))
    return s, A, B


def test_add_one_kernel_signature_and_ptx():
    s, A, B = add_one(te.var("n"))
    f = tvm.build(s, [A, B], target="cuda -arch=sm_90", name="add_one")
    src, ptx = kernels(f)
    assert ('extern "C" __global__ void __launch_bounds__(64) add_one_kernel0(float* __restrict__ A, '
            'float* __restrict__ B, int n)') in src
    assert "blockIdx.x" in src and "threadIdx.x" in src
    assert ".entry add_one_kernel0(" in ptx and ".target sm_90" in ptx
    assert ".maxntid 64, 1, 1" in ptx  # __launch_bounds__ reached the compiler
    meta = f.metadata
    assert meta["device_type"] == 2
    code = meta["device_code"]
    assert code["type_key"] == "cuda" and code["arch"] == "sm_90" and code["ptx"] == ptx
    assert code["kernels"] == [{"name": "add_one_kernel0",
                                "params": [{"name": "A", "kind": "buffer", "dtype": "float32"},
                                           {"name": "B", "kind": "buffer", "dtype": "float32"},
                                           {"name": "n", "kind": "scalar", "dtype": "int32"}],
                                "thread_tags": ["blockIdx.x", "threadIdx.x"]}]
    assert f.get_source("cu") == src


def test_target_cuda_arch_keys_and_default():
    t = tvm.target.Target("cuda -arch=sm_90")
    assert t.arch == "sm_90" and t.keys == ("cuda", "gpu") and t.get_target_device_type() == 2
    assert tvm.target.Target("cuda").max_num_threads == 1024
    assert tvm.target.Target("cuda").thread_warp_size == 32
    s, A, B = add_one(100)
    f = tvm.build(s, [A, B], target="cuda", name="add_one")
    want = cg.default_arch()  # device 0's arch, or the stated default without a GPU
    assert f.metadata["device_code"]["arch"] == want
    if not tvm.cuda(0).exist:
        assert want == cg.DEFAULT_ARCH == "sm_80"


def test_named_arch_carries_its_cubin():
    """cuda -arch=sm_90: the device code carries that chip's cubin (an ELF image) beside the PTX;
    a default-arch build carries the PTX only (its device's arch is not known at build time)."""
    import base64

    s, A, B = add_one(100)
    code = tvm.build(s, [A, B], target="cuda -arch=sm_90", name="add_one").metadata["device_code"]
    assert code["cubin_arch"] == "sm_90" and base64.b64decode(code["cubin"])[:4] == b"\x7fELF"
    assert ".entry add_one_kernel" in code["ptx"]
    code = tvm.build(s, [A, B], target="cuda", name="add_one").metadata["device_code"]
    assert "cubin" not in code and "ptx" in code


@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "90", "compute_90", "9.0"])
def test_arch_spellings(arch):
    assert cg.normalize_arch(arch) in ("sm_80", "sm_90")


def test_bad_arch_is_an_error():
    for bad in ("hopper", "sm_a", "sm_9", "sm_90x"):
        with pytest.raises(CompileError, match="not like 'sm_90'"):
            cg.normalize_arch(bad)


@pytest.mark.parametrize("arch, number", [("sm_90a", 90), ("compute_90a", 90), ("sm_100f", 100), ("8.6", 86)])
def test_arch_specific_spellings(arch, number):
    assert cg.arch_number(arch) == number
    assert cg.normalize_arch(arch).endswith(arch[-1] if arch[-1] in "af" else "86")


def test_sm_90a_builds_with_cp_async_and_its_own_cubin():
    """-arch=sm_90a (Hopper's own instructions: wgmma, setmaxnreg) was a ValueError in the
    printer; it builds, its PTX targets sm_90a, its cubin is for that chip, and the features of
    sm_80+ (cp.async prefetches) stay on."""
    import base64

    s, A, B = add_one(256)
    f = tvm.build(s, [A, B], target="cuda -arch=sm_90a", name="add_one")
    code = f.metadata["device_code"]
    assert code["arch"] == "sm_90a" and code["cubin_arch"] == "sm_90a"
    assert re.search(r"^\.target sm_90a$", code["ptx"], re.M)
    assert base64.b64decode(code["cubin"])[:4] == b"\x7fELF"
    assert cg.CUDAPrinter("sm_90a").async_copies and not cg.CUDAPrinter("sm_75").async_copies


def test_sm_90a_module_refuses_another_chip(monkeypatch):
    """Code built for sm_90a runs on compute capability 9.0 only: elsewhere a one-line error
    says which arch to rebuild for, before anything is loaded."""
    from kiln.runtime.devices import cuda as rt

    s, A, B = add_one(256)
    code = tvm.build(s, [A, B], target="cuda -arch=sm_90a", name="add_one").metadata["device_code"]
    monkeypatch.setattr(rt.API, "attribute", lambda dev, name: "8.0")
    with pytest.raises(tvm.errors.KilnError, match="built for sm_90a.*rebuild with -arch=sm_80"):
        rt.CUDAModule(dict(code)).image_for(0)
    monkeypatch.setattr(rt.API, "attribute", lambda dev, name: "9.0")
    assert rt.CUDAModule(dict(code)).image_for(0) == base64_cubin(code)


def base64_cubin(code):
    import base64

    return base64.b64decode(code["cubin"])


def _vector_fma(dtype, lanes=4, n=1024):
    A = te.placeholder((n,), name="A", dtype=dtype)
    B = te.placeholder((n,), name="B", dtype=dtype)
    C = te.compute((n,), lambda i: A[i] * B[i] + A[i], name="C")
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=lanes)
    bx, tx = s[C].split(xo, factor=64)
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    s[C].vectorize(xi)
    return tvm.build(s, [A, B, C], target="cuda -arch=sm_90", name="fma")


def test_aligned_vectors_are_128_bit_accesses():
    src, ptx = kernels(_vector_fma("float32"))
    assert "*((float4*)(C + " in src and "make_float4(" in src and "((const float4*)(A + " in src
    assert re.search(r"ld\.global(\.nc)?\.v4\.f32", ptx)
    assert "st.global.v4.f32" in ptx


def test_unaligned_vectors_go_lane_by_lane():
    n = 1027
    A = te.placeholder((n,), name="A")
    B = te.compute((n - 3,), lambda i: A[i + 3] * 2.0, name="B")
    s = te.create_schedule(B.op)
    xo, xi = s[B].split(B.op.axis[0], factor=4)
    s[B].bind(xo, te.thread_axis("threadIdx.x"))
    s[B].vectorize(xi)
    src, ptx = kernels(tvm.build(s, [A, B], target="cuda", name="shifted"))
    assert "const float4*)(A" not in src  # A + 3 + 4i is not 16-byte aligned


def test_half_kernels_compile_and_convert():
    src, ptx = kernels(_vector_fma("float16", lanes=2))
    assert "half* __restrict__ A" in src and "struct __align__(2) half" in src
    assert "cvt.f32.f16" in ptx and "cvt.rn.f16.f32" in ptx
    s, A, B = add_one(256, dtype="float16")
    kernels(tvm.build(s, [A, B], target="cuda", name="add_half"))


def _matmul(n=128, tile=16, k_tile=16):
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
    ko, ki = s[C].split(s[C].op.reduce_axis[0], factor=k_tile)
    s[C].reorder(ko, ki)
    for X in (AA, BB):
        s[X].compute_at(s[C], ko)
        a, b = s[X].op.axis
        s[X].bind(a, te.thread_axis("threadIdx.y"))
        s[X].bind(b, te.thread_axis("threadIdx.x"))
    return s, A, B, C


def test_shared_memory_tiles_and_barriers():
    s, A, B, C = _matmul()
    src, ptx = kernels(tvm.build(s, [A, B, C], target="cuda", name="mm"))
    assert "__shared__ float A_shared[256]" in src and "__syncthreads();" in src
    assert "bar.sync" in ptx and ".shared" in ptx
    assert "extern __shared__" not in src


def test_shared_memory_above_48k_is_dynamic():
    # 2 x 128 x 64 floats = 64 KiB of shared tiles: more than a static declaration may hold.
    s, A, B, C = _matmul(n=256, tile=128, k_tile=64)
    # The block is 128 x 128 threads here; only the shared-memory path matters, so lift the limits.
    t = tvm.target.Target("cuda -arch=sm_90 -max_num_threads=16384 -max_shared_memory_per_block=232448")
    f = tvm.build(s, [A, B, C], target=t, name="mm_big")
    src, ptx = kernels(f)
    assert "extern __shared__ __align__(64) unsigned char kiln_dyn_shared[];" in src
    assert "float* A_shared = (float*)(kiln_dyn_shared + 0);" in src
    assert f.metadata["device_code"]["kernels"][0]["shared_bytes"] == 2 * 128 * 64 * 4
    assert "__shared__ float A_shared[" not in src


def _rowsum(threads, rows_per_block=1, n=64, m=1000, combine="sum"):
    A = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, m), name="k")
    reducer = te.sum if combine == "sum" else te.max
    B = te.compute((n,), lambda i: reducer(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=threads)
    if rows_per_block > 1:
        bo, bi = s[B].split(B.op.axis[0], factor=rows_per_block)
        s[B].bind(bo, te.thread_axis("blockIdx.x"))
        s[B].bind(bi, te.thread_axis("threadIdx.y"))
    else:
        s[B].bind(B.op.axis[0], te.thread_axis("blockIdx.x"))
    s[B].bind(ki, te.thread_axis("threadIdx.x"))
    return tvm.build(s, [A, B], target="cuda", name="rowsum")


@pytest.mark.parametrize("threads, rows, shuffles", [
    (32, 1, ["16, 32)", "1, 32)"]),          # one warp: no shared-memory level left
    (128, 1, ["16, 32)", "1, 32)"]),         # tree for strides 64 and 32, then one warp
    (8, 4, ["4, 8)", "1, 8)"]),              # four groups of 8 lanes in one warp
    (4, 2, ["0xffu", "2, 4)"]),              # an 8-thread block: a partial warp, masked
    (48, 1, []),                             # not a power of two: the tree only
])
def test_cross_thread_reductions_end_in_warp_shuffles(threads, rows, shuffles):
    src, ptx = kernels(_rowsum(threads, rows))
    body = src.split("rowsum_kernel0", 1)[1]
    for text in shuffles:
        assert text in body
    assert ("__shfl_down_sync(" in body) == bool(shuffles)
    assert ("shfl.sync.down" in ptx) == bool(shuffles)
    if threads == 128:
        assert "(k_inner + 64)" in body and "(k_inner + 32)" in body and "(k_inner + 16)" not in body


def test_max_reduction_shuffles():
    src, _ = kernels(_rowsum(64, combine="max"))
    assert "fmax(" in src and "__shfl_down_sync(" in src


def test_cross_thread_reduction_compiles():
    n, m = 64, 256
    A = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, m), name="k")
    B = te.compute((n,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=32)
    s[B].bind(B.op.axis[0], te.thread_axis("blockIdx.x"))
    s[B].bind(ki, te.thread_axis("threadIdx.x"))
    src, ptx = kernels(tvm.build(s, [A, B], target="cuda", name="rowsum"))
    assert "__syncthreads();" in src and "B_red_shared" in src


def test_math_and_integer_spellings_compile():
    n = 256
    A = te.placeholder((n,), name="A")
    I = te.placeholder((n,), name="I", dtype="int32")
    B = te.compute((n,), lambda i: te.exp(A[i]) + te.tanh(A[i]) + te.sigmoid(A[i]) + te.sqrt(te.abs(A[i]))
                   + te.floor(A[i]) + tvm.tir.reinterpret("float32", I[i]) + te.log(A[i] + 2.0)
                   + te.max(A[i], 0.5) + te.power(A[i], 2.0) + tvm.tir.if_then_else(A[i] > 0, 1.0, -1.0)
                   + te.floordiv(I[i], 3).astype("float32") + te.floormod(I[i], 5).astype("float32")
                   + te.isnan(A[i]).astype("float32") + tvm.tir.const(float("inf"), "float32") * 0.0,
                   name="B")
    s = te.create_schedule(B.op)
    xo, xi = s[B].split(B.op.axis[0], factor=64)
    s[B].bind(xo, te.thread_axis("blockIdx.x"))
    s[B].bind(xi, te.thread_axis("threadIdx.x"))
    src, ptx = kernels(tvm.build(s, [A, I, B], target="cuda", name="maths"))
    assert "kiln_bitcast<float>(" in src and "__int_as_float(0x7f" in src  # inf * 0 folds to NaN


def test_nvrtc_errors_carry_the_log():
    with pytest.raises(CompileError, match="NVRTC could not compile") as err:
        cg.compile_source('extern "C" __global__ void k(float* a) { a[0] = nope; }', "sm_80")
    assert "nope" in str(err.value) and "undefined" in str(err.value)


def test_cubin_for_one_chip():
    s, A, B = add_one(100)
    src, _ = kernels(tvm.build(s, [A, B], target="cuda", name="add_one"))
    cubin = cg.compile_source(src, "sm_90", "cubin")
    assert cubin[:4] == b"\x7fELF"


def test_thread_limit_of_the_target():
    s, A, B = add_one(4096, factor=2048)
    with pytest.raises(CompileError, match="1024"):
        tvm.build(s, [A, B], target="cuda", name="too_wide")


def test_topi_gpu_matmul_moves_shared_tiles_in_128_bit_pieces():
    from kiln import topi
    n = 2048  # 128 x 128 blocks of 8 x 8 per thread (smaller products get smaller tiles on CUDA: topi/cuda/busy.py)
    a, b = te.placeholder((n, n), name="A"), te.placeholder((n, n), name="B")
    target = tvm.target.Target("cuda -arch=sm_90", host="llvm")
    with target:
        c = topi.gpu.matmul(a, b)
        s = topi.gpu.schedule_matmul([c])
    src, ptx = kernels(tvm.build(s, [a, b, c], target=target, name="mm"))
    assert "((const float4*)(B_shared + " in src  # the float8 register-tile rows, as two float4
    assert "float4*)(T_matmul_local" not in src  # registers stay scalar
    assert re.search(r"ld\.shared\.v4\.f32", ptx) and re.search(r"ld\.global(\.nc)?\.v4\.f32", ptx)
    assert ".local" not in ptx  # no register tile spilled to the stack
