"""sch.trace: printed as the Python calls that made the schedule, replayable on the original module;
sch.mod.show(); tir.Schedule of te.create_prim_func."""

import numpy as np

import kiln as tvm
from helpers.tir_schedule import Matmul, check_schedule, matmul_args, matmul_atol, matmul_ref, run_and_compare
from kiln import te, tir


def _schedule(sch):
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    i0, i1 = sch.split(i, factors=[None, 16])
    sch.reorder(i0, j, k, i1)
    sch.parallel(i0)
    sch.decompose_reduction(c, k)
    return sch


def test_trace_prints_the_calls_as_python():
    sch = _schedule(tir.Schedule(Matmul))
    assert str(sch.trace).splitlines() == [
        "# from tvm import tir",
        "def apply_trace(sch: tir.Schedule) -> None:",
        '  b0 = sch.get_block(name="C", func_name="main")',
        "  l1, l2, l3 = sch.get_loops(block=b0)",
        "  l4, l5 = sch.split(loop=l1, factors=[None, 16], preserve_unit_iters=True)",
        "  sch.reorder(l4, l2, l3, l5)",
        "  sch.parallel(loop=l4)",
        "  b6 = sch.decompose_reduction(block=b0, loop=l3)",
    ]


def test_trace_replays_to_a_structurally_equal_module(capsys):
    sch = _schedule(tir.Schedule(Matmul))
    new = tir.Schedule(Matmul)
    sch.trace.apply_to_schedule(new, remove_postproc=False)
    assert tvm.ir.structural_equal(new.mod, sch.mod)
    assert not tvm.ir.structural_equal(new.mod, Matmul)
    sch.trace.show()
    sch.mod.show()
    out = capsys.readouterr().out
    assert "def apply_trace(sch: tir.Schedule) -> None:" in out and 'with T.block("C_init"):' in out
    args = matmul_args(5)
    check_schedule(sch, Matmul, None, args, matmul_ref, atol=matmul_atol(args))


def test_a_one_loop_get_loops_prints_as_an_unpacking():
    from kiln.script import ir as I, tir as T

    @I.ir_module
    class One:
        @T.prim_func
        def main(A: T.Buffer((16,), "float32")):
            for i in T.serial(16):
                with T.block("A"):
                    vi = T.axis.spatial(16, i)
                    A[vi] = A[vi] + T.float32(1)

    sch = tir.Schedule(One)
    (i,) = sch.get_loops(sch.get_block("A"))
    sch.vectorize(i)
    assert "  l1, = sch.get_loops(block=b0)" in str(sch.trace).splitlines()
    check_schedule(sch, One, None, [np.arange(16, dtype="float32")], lambda a: [np.arange(16, dtype="float32") + 1])


def test_schedule_of_te_create_prim_func():
    """TVM 0.13's path from TE: tir.Schedule(te.create_prim_func([A, B, C]))."""
    A = te.placeholder((64, 64), name="A")
    B = te.placeholder((64, 64), name="B")
    k = te.reduce_axis((0, 64), name="k")
    C = te.compute((64, 64), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    func = te.create_prim_func([A, B, C])
    assert tvm.ir.structural_equal(tvm.IRModule({"main": func}), Matmul)
    sch = _schedule(tir.Schedule(func))
    assert [lp.var.name for lp in sch.get_loops(sch.get_block("C"))] == ["i_0", "j", "k", "i_1"]
    args = matmul_args(6)
    run_and_compare(sch.mod, args, matmul_ref, atol=matmul_atol(args))
