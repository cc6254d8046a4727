"""Acceptance: the blitz-course matmul as TVMScript (block form) and from te.create_prim_func."""

import numpy as np

import kiln as tvm
from kiln import te
from kiln.script import ir as I, tir as T


@I.ir_module
class MatmulModule:
    @T.prim_func
    def main(a: T.handle, b: T.handle, c: T.handle):
        T.func_attr({"global_symbol": "main"})
        A = T.match_buffer(a, (128, 128), "float32")
        B = T.match_buffer(b, (128, 128), "float32")
        C = T.match_buffer(c, (128, 128), "float32")
        for i, j, k in T.grid(128, 128, 128):
            with T.block("C"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                T.reads(A[vi, vk], B[vk, vj])
                T.writes(C[vi, vj])
                with T.init():
                    C[vi, vj] = T.float32(0)
                C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]


def _te_module():
    A = te.placeholder((128, 128), name="A")
    B = te.placeholder((128, 128), name="B")
    k = te.reduce_axis((0, 128), name="k")
    C = te.compute((128, 128), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return tvm.IRModule({"main": te.create_prim_func([A, B, C])})


def _run(mod):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((128, 128)).astype("float32")
    b = rng.standard_normal((128, 128)).astype("float32")
    f = tvm.build(mod, target="llvm")
    dev = tvm.cpu()
    c = tvm.nd.array(np.zeros((128, 128), "float32"), dev)
    f["main"](tvm.nd.array(a, dev), tvm.nd.array(b, dev), c)
    np.testing.assert_allclose(c.numpy(), a @ b, rtol=1e-4, atol=1e-4)


def test_script_and_te_matmul_build_and_match_numpy():
    _run(MatmulModule)
    _run(_te_module())


def test_script_and_te_matmul_are_structurally_equal_before_and_after_lowering():
    te_mod = _te_module()
    assert tvm.ir.structural_equal(MatmulModule, te_mod)
    assert tvm.ir.structural_equal(tvm.lower(MatmulModule), tvm.lower(te_mod))


def test_a_different_computation_is_not_equal():
    A = te.placeholder((128, 128), name="A")
    B = te.placeholder((128, 128), name="B")
    k = te.reduce_axis((0, 128), name="k")
    C = te.compute((128, 128), lambda i, j: te.sum(A[i, k] * B[j, k], axis=k), name="C")  # B transposed
    other = tvm.IRModule({"main": te.create_prim_func([A, B, C])})
    assert not tvm.ir.structural_equal(MatmulModule, other)
    assert not tvm.ir.structural_equal(tvm.lower(MatmulModule), tvm.lower(other))


def test_tvm_script_is_reachable_from_kiln():
    assert tvm.script.tir is T and tvm.script.ir is I
    again = tvm.script.from_source(MatmulModule.script())
    assert tvm.ir.structural_equal(again, MatmulModule)
