"""tir.LowerBlocks: blocks become the loops kiln lowered them to before blocks were kept."""

import numpy as np

import kiln as tvm
from kiln import tir
from kiln.script import ir as I, tir as T
from kiln.tir.transform.lower_blocks import lower_blocks


@T.prim_func
def reduction(A: T.Buffer((16, 8), "float32"), D: T.Buffer((16,), "float32")):
    for i, k in T.grid(16, 8):
        with T.block("D"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                D[vi] = T.float32(0)
            D[vi] = D[vi] + A[vi, vk]


@T.prim_func
def reduction_lowered(A: T.Buffer((16, 8), "float32"), D: T.Buffer((16,), "float32")):
    for i in T.serial(16):
        D[i] = T.float32(0)
        for k in T.serial(8):
            D[i] = D[i] + A[i, k]


def test_init_is_hoisted_above_the_reduction_loops():
    tvm.ir.assert_structural_equal(lower_blocks(reduction), reduction_lowered)


@T.prim_func
def reduction_outside(A: T.Buffer((16, 8), "float32"), D: T.Buffer((16,), "float32")):
    for k, i in T.grid(8, 16):
        with T.block("D"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                D[vi] = T.float32(0)
            D[vi] = D[vi] + A[vi, vk]


@T.prim_func
def reduction_outside_lowered(A: T.Buffer((16, 8), "float32"), D: T.Buffer((16,), "float32")):
    for k, i in T.grid(8, 16):
        if k == 0:
            D[i] = T.float32(0)
        D[i] = D[i] + A[i, k]


def test_init_under_a_spatial_loop_inside_the_reduction_is_guarded():
    tvm.ir.assert_structural_equal(lower_blocks(reduction_outside), reduction_outside_lowered)
    a = np.random.default_rng(0).standard_normal((16, 8)).astype("float32")
    f = tvm.build(tvm.IRModule({"main": reduction_outside.with_attr("global_symbol", "main")}), target="llvm")
    d = tvm.nd.array(np.full(16, 7, "float32"))
    f["main"](tvm.nd.array(a), d)
    np.testing.assert_allclose(d.numpy(), a.sum(axis=1), rtol=1e-5, atol=1e-5)


@T.prim_func
def predicated(A: T.Buffer((10,), "float32")):
    for i_0, i_1 in T.grid(3, 4):
        with T.block("A"):
            vi = T.axis.spatial(10, i_0 * 4 + i_1)
            T.where(i_0 * 4 + i_1 < 10)
            scratch = T.alloc_buffer((1,), "float32")
            scratch[0] = A[vi] * T.float32(2)
            A[vi] = scratch[0]


@T.prim_func
def predicated_lowered(A: T.Buffer((10,), "float32")):
    for i_0, i_1 in T.grid(3, 4):
        scratch = T.allocate([1], "float32", "global")
        if i_0 * 4 + i_1 < 10:
            scratch[0] = A[i_0 * 4 + i_1] * T.float32(2)
            A[i_0 * 4 + i_1] = scratch[0]


def test_predicate_and_block_scratch_buffers():
    tvm.ir.assert_structural_equal(lower_blocks(predicated), predicated_lowered)
    assert lower_blocks(predicated_lowered) is predicated_lowered  # nothing to do without blocks


def test_lower_blocks_runs_first_in_the_pipeline_and_as_a_module_pass():
    from kiln.tir.transform import PIPELINE

    assert PIPELINE[0] == ("tir.LowerBlocks", lower_blocks)
    mod = tir.transform.LowerBlocks()(tvm.IRModule({"main": reduction}))
    tvm.ir.assert_structural_equal(mod["main"], reduction_lowered)
