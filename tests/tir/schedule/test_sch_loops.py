"""tvm.tir.Schedule loop primitives: split, fuse, reorder, parallel, vectorize, unroll, bind."""

import numpy as np
import pytest

import kiln as tvm
from helpers.tir_schedule import check_schedule
from kiln import tir
from kiln.script import ir as I, tir as T


@I.ir_module
class Add:
    @T.prim_func
    def main(A: T.Buffer((100, 64), "float32"), B: T.Buffer((100, 64), "float32")):
        T.func_attr({"global_symbol": "main"})
        for i, j in T.grid(100, 64):
            with T.block("B"):
                vi, vj = T.axis.remap("SS", [i, j])
                B[vi, vj] = A[vi, vj] + T.float32(1)


def _args():
    return [np.random.default_rng(0).standard_normal((100, 64)).astype("float32"), np.zeros((100, 64), "float32")]


def _ref(a, b):
    return [a + 1]


@I.ir_module
class SplitNotDivisible:
    @T.prim_func
    def main(A: T.Buffer((100, 64), "float32"), B: T.Buffer((100, 64), "float32")):
        T.func_attr({"global_symbol": "main"})
        for i_0, i_1, j in T.grid(4, 32, 64):
            with T.block("B"):
                vi = T.axis.spatial(100, i_0 * 32 + i_1)
                vj = T.axis.spatial(64, j)
                T.where(i_0 * 32 + i_1 < 100)
                T.reads(A[vi, vj])
                T.writes(B[vi, vj])
                B[vi, vj] = A[vi, vj] + T.float32(1)


def test_split_with_an_inferred_factor_adds_the_bound_predicate():
    sch = tir.Schedule(Add)
    i, _ = sch.get_loops(sch.get_block("B"))
    i0, i1 = sch.split(i, factors=[None, 32])
    assert [sch.get(x).extent.value for x in (i0, i1)] == [4, 32]
    check_schedule(sch, Add, SplitNotDivisible, _args(), _ref)


@I.ir_module
class FusedParallelVector:
    @T.prim_func
    def main(A: T.Buffer((100, 64), "float32"), B: T.Buffer((100, 64), "float32")):
        T.func_attr({"global_symbol": "main"})
        for i_j_fused_0 in T.parallel(400):
            for i_j_fused_1 in T.vectorized(16):
                with T.block("B"):
                    vi = T.axis.spatial(100, (i_j_fused_0 * 16 + i_j_fused_1) // 64)
                    vj = T.axis.spatial(64, (i_j_fused_0 * 16 + i_j_fused_1) % 64)
                    T.reads(A[vi, vj])
                    T.writes(B[vi, vj])
                    B[vi, vj] = A[vi, vj] + T.float32(1)


def test_fuse_split_parallel_vectorize():
    sch = tir.Schedule(Add)
    i, j = sch.get_loops(sch.get_block("B"))
    fused = sch.fuse(i, j)
    assert sch.get(fused).extent.value == 6400
    outer, inner = sch.split(fused, factors=[None, 16])
    sch.parallel(outer)
    sch.vectorize(inner)
    check_schedule(sch, Add, FusedParallelVector, _args(), _ref)


@I.ir_module
class ReorderedUnrolled:
    @T.prim_func
    def main(A: T.Buffer((100, 64), "float32"), B: T.Buffer((100, 64), "float32")):
        T.func_attr({"global_symbol": "main"})
        for j_0 in T.serial(4):
            for i in T.serial(100):
                for j_1 in T.unroll(16):
                    with T.block("B"):
                        vi = T.axis.spatial(100, i)
                        vj = T.axis.spatial(64, j_0 * 16 + j_1)
                        T.reads(A[vi, vj])
                        T.writes(B[vi, vj])
                        B[vi, vj] = A[vi, vj] + T.float32(1)


def test_split_with_given_factors_reorder_unroll():
    sch = tir.Schedule(Add)
    i, j = sch.get_loops(sch.get_block("B"))
    j0, j1 = sch.split(j, factors=[4, 16])
    sch.reorder(j0, i, j1)
    sch.unroll(j1)
    assert [lp.var.name for lp in sch.get_loops(sch.get_block("B"))] == ["j_0", "i", "j_1"]
    check_schedule(sch, Add, ReorderedUnrolled, _args(), _ref)


@I.ir_module
class Bound:
    @T.prim_func
    def main(A: T.Buffer((100, 64), "float32"), B: T.Buffer((100, 64), "float32")):
        T.func_attr({"global_symbol": "main"})
        for i in T.thread_binding(100, thread="blockIdx.x"):
            for j in T.thread_binding(64, thread="threadIdx.x"):
                with T.block("B"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    T.reads(A[vi, vj])
                    T.writes(B[vi, vj])
                    B[vi, vj] = A[vi, vj] + T.float32(1)


def test_bind_marks_thread_loops():
    sch = tir.Schedule(Add)
    i, j = sch.get_loops(sch.get_block("B"))
    sch.bind(i, "blockIdx.x")
    sch.bind(j, "threadIdx.x")
    check_schedule(sch, Add, Bound)


@pytest.mark.opencl
def test_bound_schedule_builds_for_opencl_and_runs():
    sch = tir.Schedule(Add)
    i, j = sch.get_loops(sch.get_block("B"))
    sch.bind(i, "blockIdx.x")
    sch.bind(j, "threadIdx.x")
    f = tvm.build(sch.mod, target="opencl")
    dev = tvm.cl(0)
    a, b = _args()
    A, B = tvm.nd.array(a, dev), tvm.nd.array(b, dev)
    f["main"](A, B)
    np.testing.assert_allclose(B.numpy(), a + 1, rtol=1e-6)


def test_schedule_of_a_prim_func_and_the_original_is_untouched():
    sch = tir.Schedule(Add["main"])
    i, _ = sch.get_loops(sch.get_block("B"))
    sch.split(i, factors=[None, 32])
    tvm.ir.assert_structural_equal(sch.mod["main"], SplitNotDivisible["main"])
    assert not tvm.ir.structural_equal(Add, sch.mod)


def test_split_of_a_symbolic_loop_from_te_create_prim_func():
    from kiln import te

    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0, name="B")
    func = te.create_prim_func([A, B, n])
    sch = tir.Schedule(func)
    (i,) = sch.get_loops(sch.get_block("B"))
    i0, i1 = sch.split(i, factors=[None, 8])
    loop = sch.get(i0)
    assert "(n + 7) // 8" in str(loop.extent)
    assert "T.where(i_0 * 8 + i_1 < n)" in sch.mod.script()
    check_schedule(sch, tvm.IRModule({"main": func}))
    f = tvm.build(sch.mod, target="llvm")
    for size in (13, 16):
        a = np.arange(size, dtype="float32")
        b = tvm.nd.array(np.zeros(size, "float32"))
        f["main"](tvm.nd.array(a), b, size)
        np.testing.assert_array_equal(b.numpy(), a * 2)
