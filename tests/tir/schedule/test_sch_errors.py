"""tir.Schedule primitives whose preconditions fail raise ScheduleError naming the block or loop
and the reason; the schedule is left as it was."""

import pytest

import kiln as tvm
from helpers.tir_schedule import Matmul, TwoStage
from kiln import tir
from kiln.errors import ScheduleError


def test_get_block_of_an_unknown_name_lists_the_blocks():
    sch = tir.Schedule(TwoStage)
    with pytest.raises(ScheduleError, match=r"get_block: no block named 'D' in function main; its blocks are \['B', 'C'\]"):
        sch.get_block("D")


def test_parallel_or_vectorize_of_a_reduction_loop_names_the_block():
    sch = tir.Schedule(Matmul)
    _, _, k = sch.get_loops(sch.get_block("C"))
    with pytest.raises(ScheduleError, match=r"parallel: block 'C': loop k feeds its reduction axis vk"):
        sch.parallel(k)
    with pytest.raises(ScheduleError, match=r"vectorize: block 'C': loop k feeds its reduction axis vk"):
        sch.vectorize(k)
    assert tvm.ir.structural_equal(sch.mod, Matmul)
    assert len(sch.trace.insts) == 2  # get_block, get_loops: failed calls are not recorded


def test_split_factors():
    sch = tir.Schedule(Matmul)
    i, _, _ = sch.get_loops(sch.get_block("C"))
    with pytest.raises(ScheduleError, match=r"split: loop i: give the factors as a list with at most one None"):
        sch.split(i, factors=[None, None])
    with pytest.raises(ScheduleError, match=r"split: loop i: the factors multiply to 32, less than its extent 64"):
        sch.split(i, factors=[4, 8])
    with pytest.raises(ScheduleError, match=r"split: loop i: factor 0 must be positive"):
        sch.split(i, factors=[None, 0])


def test_fuse_and_reorder_need_nested_loops():
    sch = tir.Schedule(TwoStage)
    bi, _ = sch.get_loops(sch.get_block("B"))
    ci, cj = sch.get_loops(sch.get_block("C"))
    with pytest.raises(ScheduleError, match=r"fuse: loop j is not directly inside loop i"):
        sch.fuse(bi, cj)
    with pytest.raises(ScheduleError, match=r"reorder: loops j and i are not nested in one another"):
        sch.reorder(cj, bi)
    with pytest.raises(ScheduleError, match=r"fuse: loop i is not directly inside loop j \(only perfectly nested "
                                            r"loops, outermost first, can be fused\)"):
        sch.fuse(cj, ci)


def test_bind_to_an_unknown_thread():
    sch = tir.Schedule(TwoStage)
    i, _ = sch.get_loops(sch.get_block("B"))
    with pytest.raises(ScheduleError, match=r"bind: loop i: thread 'threadIdx.w' is not blockIdx.x/y/z"):
        sch.bind(i, "threadIdx.w")


def test_a_loop_handle_after_split_is_stale():
    sch = tir.Schedule(TwoStage)
    i, _ = sch.get_loops(sch.get_block("B"))
    sch.split(i, factors=[None, 8])
    with pytest.raises(ScheduleError, match=r"parallel: loop i is no longer in the function"):
        sch.parallel(i)


def test_reverse_compute_at_of_a_block_that_reads_nothing_written_there():
    sch = tir.Schedule(TwoStage)
    c = sch.get_block("C")
    ci, _ = sch.get_loops(c)
    with pytest.raises(ScheduleError, match=r"reverse_compute_at: block 'B' reads 0 buffers that blocks under loop i "
                                            r"write; it must read exactly one"):
        sch.reverse_compute_at(sch.get_block("B"), ci)


def test_schedule_needs_a_module_or_prim_func():
    with pytest.raises(TypeError, match=r"tir.Schedule: expected an IRModule or a PrimFunc, got int"):
        tir.Schedule(3)


def test_reorder_across_a_statement_between_the_loops():
    sch = tir.Schedule(TwoStage)
    c = sch.get_block("C")
    i, j = sch.get_loops(c)
    sch.compute_at(sch.get_block("B"), i)
    with pytest.raises(ScheduleError, match=r"reorder: loops j, i are not one chain of perfectly nested loops \(loop "
                                            r"i holds more than the next loop\)"):
        sch.reorder(j, i)
