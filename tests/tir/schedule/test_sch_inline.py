"""tvm.tir.Schedule compute_inline."""

import pytest

from helpers.tir_schedule import Matmul, TwoStage, check_schedule, two_stage_args, two_stage_ref
from kiln import tir
from kiln.errors import ScheduleError
from kiln.script import ir as I, tir as T


@I.ir_module
class Inlined:
    @T.prim_func
    def main(A: T.Buffer((64, 64), "float32"), C: T.Buffer((64, 64), "float32")):
        T.func_attr({"global_symbol": "main"})
        for i, j in T.grid(64, 64):
            with T.block("C"):
                vi, vj = T.axis.remap("SS", [i, j])
                T.reads(A[vi, vj])
                T.writes(C[vi, vj])
                C[vi, vj] = A[vi, vj] * T.float32(2) + T.float32(1)


def test_compute_inline_substitutes_the_producer_and_drops_its_buffer():
    sch = tir.Schedule(TwoStage)
    sch.compute_inline(sch.get_block("B"))
    check_schedule(sch, TwoStage, Inlined, two_stage_args(), two_stage_ref)


def test_compute_inline_of_an_output_or_a_reduction_is_refused():
    sch = tir.Schedule(TwoStage)
    with pytest.raises(ScheduleError, match=r"compute_inline: block 'C' writes C, a parameter of the function"):
        sch.compute_inline(sch.get_block("C"))
    sch = tir.Schedule(Matmul)
    with pytest.raises(ScheduleError, match=r"compute_inline: block 'C' must be a single store without init"):
        sch.compute_inline(sch.get_block("C"))
