"""Kernels written directly in TVMScript: they parse, build for CPU (and OpenCL), run and match numpy."""

import numpy as np
import pytest

import kiln as tvm
from kiln.script import ir as I, tir as T


def _run(mod, arrays, target="llvm", name="main"):
    dev = tvm.cpu() if target == "llvm" else tvm.device(target)
    nds = [tvm.nd.array(a, dev) for a in arrays]
    f = tvm.build(mod, target=target)
    f[name](*nds)
    return [x.numpy() for x in nds]


def _roundtrips(mod):
    back = tvm.script.from_source(mod.script())
    assert tvm.ir.structural_equal(back, mod)
    assert tvm.ir.structural_equal(tvm.lower(back), tvm.lower(mod))


@I.ir_module
class Elementwise:
    @T.prim_func
    def main(A: T.Buffer((64, 16), "float32"), B: T.Buffer((64, 16), "float32"), C: T.Buffer((64,), "int32")):
        T.func_attr({"global_symbol": "main"})
        for i in T.parallel(64):
            for j in T.vectorized(16):
                B[i, j] = T.max(A[i, j], T.float32(0)) + T.exp(T.min(A[i, j], T.float32(0)))
        for i in T.serial(64):
            if i < 10:
                C[i] = T.Cast("int32", A[i, 0] * T.float32(10))
            else:
                if i % 2 == 0:
                    C[i] = T.if_then_else(A[i, 1] > T.float32(0), 1, -1)
                else:
                    C[i] = 0
                    for k in T.unroll(4):
                        C[i] = C[i] + T.int32(A[i, k] > 0.5)


def test_elementwise_loops_ifs_intrinsics_and_casts():
    a = np.random.default_rng(1).standard_normal((64, 16)).astype("float32")
    _, b, c = _run(Elementwise, [a, np.zeros((64, 16), "float32"), np.zeros(64, "int32")])
    np.testing.assert_allclose(b, np.maximum(a, 0) + np.exp(np.minimum(a, 0)), rtol=1e-5)
    want = np.where(np.arange(64) % 2 == 0, np.where(a[:, 1] > 0, 1, -1), (a[:, :4] > 0.5).sum(axis=1))
    want[:10] = (a[:10, 0] * 10).astype("int32")
    np.testing.assert_array_equal(c, want)
    _roundtrips(Elementwise)


@T.prim_func
def scratch_and_vectors(a: T.handle, b: T.handle):
    T.func_attr({"global_symbol": "scratch_and_vectors"})
    A = T.match_buffer(a, (32,), "float32")
    B = T.match_buffer(b, (32,), "float32")
    for o in T.serial(4):
        acc = T.allocate([8], "float32", "local")
        acc[T.Ramp(0, 1, 8)] = T.Broadcast(T.float32(1), 8)
        base: T.int32 = o * 8
        acc[T.Ramp(0, 1, 8)] = acc[T.Ramp(0, 1, 8)] + A[T.Ramp(base, 1, 8)]
        for i in T.serial(2, 8):
            B[base + i] = acc[i] * T.float32(2)
        for i in range(2):
            B[base + i] = T.float32(i)


def test_allocate_ramp_broadcast_let_and_loop_bounds():
    a = np.arange(32, dtype="float32")
    _, b = _run(scratch_and_vectors, [a, np.full(32, -1, "float32")], name="scratch_and_vectors")
    want = (a + 1) * 2
    want[0::8], want[1::8] = 0, 1
    np.testing.assert_allclose(b, want)
    back = tvm.script.from_source(scratch_and_vectors.script())
    assert tvm.ir.structural_equal(back, scratch_and_vectors)


@T.prim_func
def extern_and_symbolic(a: T.handle, b: T.handle):
    n = T.int32()
    A = T.match_buffer(a, (n,), "float32")
    B = T.match_buffer(b, (n,), "float32")
    for i in T.serial(n):
        B[i] = T.call_extern("float32", "sqrtf", A[i]) + T.float32(n)
    T.evaluate(0)


def test_call_extern_and_a_symbolic_shape():
    a = np.linspace(0, 9, 13).astype("float32")
    _, b = _run(tvm.IRModule({"main": extern_and_symbolic.with_attr("global_symbol", "main")}),
                [a, np.zeros(13, "float32")])
    np.testing.assert_allclose(b, np.sqrt(a) + 13, rtol=1e-6)
    back = tvm.script.from_source(extern_and_symbolic.script())
    assert tvm.ir.structural_equal(back, extern_and_symbolic)


@I.ir_module
class TwoBlocks:
    @T.prim_func
    def main(A: T.Buffer((16, 8), "float32"), D: T.Buffer((16,), "float32")):
        T.func_attr({"global_symbol": "main"})
        Bsq = T.alloc_buffer((16, 8), "float32")
        for i, j in T.grid(16, 8):
            with T.block("Bsq"):
                vi = T.axis.spatial(16, i)
                vj = T.axis.spatial(8, j)
                Bsq[vi, vj] = A[vi, vj] * A[vi, vj]
        for i in T.serial(16):
            for k in T.serial(8):
                with T.block("D"):
                    vi, vk = T.axis.remap("SR", [i, k])
                    with T.init():
                        D[vi] = T.float32(0)
                    D[vi] = D[vi] + Bsq[vi, vk]


def test_two_blocks_with_an_intermediate_buffer():
    a = np.random.default_rng(2).standard_normal((16, 8)).astype("float32")
    _, d = _run(TwoBlocks, [a, np.zeros(16, "float32")])
    np.testing.assert_allclose(d, (a * a).sum(axis=1), rtol=1e-5)
    _roundtrips(TwoBlocks)


@I.ir_module
class GpuAdd:
    @T.prim_func
    def main(A: T.Buffer((256,), "float32"), B: T.Buffer((256,), "float32")):
        T.func_attr({"global_symbol": "main"})
        for bx in T.thread_binding(4, thread="blockIdx.x"):
            for tx in T.thread_binding(64, thread="threadIdx.x"):
                B[bx * 64 + tx] = A[bx * 64 + tx] + T.float32(1)


@pytest.mark.opencl
def test_thread_bindings_build_for_opencl_and_run():
    a = np.arange(256, dtype="float32")
    _, b = _run(GpuAdd, [a, np.zeros(256, "float32")], target="opencl")
    np.testing.assert_allclose(b, a + 1)
    _roundtrips(GpuAdd)


def test_printed_kernel_edited_and_rebuilt():
    """The docs/tvmscript.md workflow: print a lowered kernel, edit the text, parse and build it."""
    from kiln import te

    A = te.placeholder((1024,), name="A")
    B = te.compute((1024,), lambda i: A[i] * 2.0, name="B")
    s = te.create_schedule(B.op)
    xo, xi = s[B].split(B.op.axis[0], factor=8)
    s[B].parallel(xo)
    s[B].vectorize(xi)
    text = tvm.lower(s, [A, B], name="main").script()
    old = "A[T.Ramp(i_outer * 8, 1, 8)] * T.Broadcast(T.float32(2.0), 8)"
    assert old in text
    edited = text.replace(old, "T.max(A[T.Ramp(i_outer * 8, 1, 8)], T.Broadcast(T.float32(0.0), 8))")
    a = np.random.default_rng(3).standard_normal(1024).astype("float32")
    _, b = _run(tvm.script.from_source(edited), [a, np.zeros(1024, "float32")])
    np.testing.assert_array_equal(b, np.maximum(a, 0))
