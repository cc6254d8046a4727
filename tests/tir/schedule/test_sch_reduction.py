"""tvm.tir.Schedule decompose_reduction."""

import pytest

from helpers.tir_schedule import Matmul, TwoStage, check_schedule, matmul_args, matmul_atol, matmul_ref
from kiln import tir
from kiln.errors import ScheduleError
from kiln.script import ir as I, tir as T


@I.ir_module
class Decomposed:
    @T.prim_func
    def main(A: T.Buffer((64, 64), "float32"), B: T.Buffer((64, 64), "float32"), C: T.Buffer((64, 64), "float32")):
        T.func_attr({"global_symbol": "main"})
        for i in T.serial(64):
            for j_init in T.serial(64):
                with T.block("C_init"):
                    vi_init, vj_init = T.axis.remap("SS", [i, j_init])
                    T.reads()
                    T.writes(C[vi_init, vj_init])
                    C[vi_init, vj_init] = T.float32(0)
            for j, k in T.grid(64, 64):
                with T.block("C"):
                    vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                    T.reads(A[vi, vk], B[vk, vj])
                    T.writes(C[vi, vj])
                    C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]


def test_decompose_reduction_moves_the_init_into_its_own_block_before_the_loop():
    sch = tir.Schedule(Matmul)
    c = sch.get_block("C")
    _, j, _ = sch.get_loops(c)
    init = sch.decompose_reduction(c, j)
    assert sch.get(init).name_hint == "C_init" and sch.get(c).init is None
    args = matmul_args()
    check_schedule(sch, Matmul, Decomposed, args, matmul_ref, atol=matmul_atol(args))


def test_decompose_after_moving_the_reduction_loop_outside():
    """k outermost: the init block runs over the whole output before the k loop."""
    sch = tir.Schedule(Matmul)
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    sch.reorder(k, i, j)
    sch.decompose_reduction(c, k)
    loops = [lp.var.name for lp in sch.get_loops(sch.get_block("C_init"))]
    assert loops == ["i_init", "j_init"]
    args = matmul_args(3)
    check_schedule(sch, Matmul, None, args, matmul_ref, atol=matmul_atol(args))


def test_decompose_reduction_of_a_block_without_init_names_it():
    sch = tir.Schedule(TwoStage)
    b = sch.get_block("B")
    with pytest.raises(ScheduleError, match=r"decompose_reduction: block 'B' has no T.init\(\)"):
        sch.decompose_reduction(b, sch.get_loops(b)[0])


def test_decompose_reduction_at_a_replaced_loop_says_so():
    sch = tir.Schedule(Matmul)
    c = sch.get_block("C")
    i, _, _ = sch.get_loops(c)
    sch.split(i, factors=[None, 8])
    with pytest.raises(ScheduleError, match=r"decompose_reduction: loop i is no longer in the function \(a split, "
                                            r"fuse or tensorize replaced it\)"):
        sch.decompose_reduction(c, i)
