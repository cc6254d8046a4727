"""Checks every tvm.tir.Schedule test makes: the structure, the trace replayed two ways, the
TVMScript round trip, and the built function against numpy."""

import numpy as np

import kiln as tvm
from kiln import tir
from kiln.script import ir as I, tir as T


def check_schedule(sch, original, expected=None, args=None, reference=None, rtol=1e-5, atol=None):
    """expected: the module sch.mod must equal; args: numpy inputs and outputs in parameter order
    (outputs zero-filled); reference(*args) returns the expected outputs in the same order."""
    if expected is not None:
        tvm.ir.assert_structural_equal(sch.mod, expected)
    again = tir.Schedule(original)
    sch.trace.apply_to_schedule(again, remove_postproc=False)
    tvm.ir.assert_structural_equal(again.mod, sch.mod)
    namespace = {"tir": tir}  # the trace says "# from tvm import tir"
    exec(compile(str(sch.trace), "<trace>", "exec"), namespace)  # the printed trace is Python
    third = tir.Schedule(original)
    namespace["apply_trace"](third)
    tvm.ir.assert_structural_equal(third.mod, sch.mod)
    tvm.ir.assert_structural_equal(tvm.script.from_source(sch.mod.script()), sch.mod)
    if args is not None:
        run_and_compare(sch.mod, args, reference, rtol, atol)


def run_and_compare(mod, args, reference, rtol=1e-5, atol=None):
    f = tvm.build(mod, target="llvm")
    dev = tvm.cpu()
    nds = [tvm.nd.array(a, dev) for a in args]
    f["main"](*nds)
    want = reference(*args)
    got = [x.numpy() for x in nds[len(args) - len(want):]]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol if atol is None else atol)


# Modules the tests start from ------------------------------------------------------------
@I.ir_module
class Matmul:
    @T.prim_func
    def main(A: T.Buffer((64, 64), "float32"), B: T.Buffer((64, 64), "float32"), C: T.Buffer((64, 64), "float32")):
        T.func_attr({"global_symbol": "main"})
        for i, j, k in T.grid(64, 64, 64):
            with T.block("C"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                T.reads(A[vi, vk], B[vk, vj])
                T.writes(C[vi, vj])
                with T.init():
                    C[vi, vj] = T.float32(0)
                C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]


@I.ir_module
class TwoStage:
    @T.prim_func
    def main(A: T.Buffer((64, 64), "float32"), C: T.Buffer((64, 64), "float32")):
        T.func_attr({"global_symbol": "main"})
        B = T.alloc_buffer((64, 64), "float32")
        for i, j in T.grid(64, 64):
            with T.block("B"):
                vi, vj = T.axis.remap("SS", [i, j])
                B[vi, vj] = A[vi, vj] * T.float32(2)
        for i, j in T.grid(64, 64):
            with T.block("C"):
                vi, vj = T.axis.remap("SS", [i, j])
                C[vi, vj] = B[vi, vj] + T.float32(1)


def matmul_args(seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((64, 64)).astype("float32"), rng.standard_normal((64, 64)).astype("float32"),
            np.zeros((64, 64), "float32")]


def matmul_ref(a, b, c):
    return [a @ b]


def matmul_atol(args) -> float:
    """A float32 sum of 64 products differs from another order's by at most 2 * 64 * u * (|A| @ |B|)."""
    a, b = args[0], args[1]
    return float(2 * 64 * 2.0 ** -24 * (np.abs(a) @ np.abs(b)).max())


def two_stage_args(seed=1):
    return [np.random.default_rng(seed).standard_normal((64, 64)).astype("float32"), np.zeros((64, 64), "float32")]


def two_stage_ref(a, c):
    return [a * 2 + 1]
