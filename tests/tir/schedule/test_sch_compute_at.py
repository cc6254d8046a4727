"""tvm.tir.Schedule compute_at / reverse_compute_at."""

import pytest

from helpers.tir_schedule import (
    Matmul, TwoStage, check_schedule, matmul_args, matmul_atol, matmul_ref, two_stage_args, two_stage_ref,
)
from kiln import tir
from kiln.errors import ScheduleError
from kiln.script import ir as I, tir as T


@I.ir_module
class ProducerAt:
    @T.prim_func
    def main(A: T.Buffer((64, 64), "float32"), C: T.Buffer((64, 64), "float32")):
        T.func_attr({"global_symbol": "main"})
        B = T.alloc_buffer((64, 64), "float32")
        for i_0 in T.serial(8):
            for ax0, ax1 in T.grid(8, 64):
                with T.block("B"):
                    vi = T.axis.spatial(64, i_0 * 8 + ax0)
                    vj = T.axis.spatial(64, ax1)
                    T.reads(A[vi, vj])
                    T.writes(B[vi, vj])
                    B[vi, vj] = A[vi, vj] * T.float32(2)
            for i_1, j in T.grid(8, 64):
                with T.block("C"):
                    vi = T.axis.spatial(64, i_0 * 8 + i_1)
                    vj = T.axis.spatial(64, j)
                    T.reads(B[vi, vj])
                    T.writes(C[vi, vj])
                    C[vi, vj] = B[vi, vj] + T.float32(1)


def test_compute_at_computes_the_rows_one_outer_iteration_reads():
    sch = tir.Schedule(TwoStage)
    i, _ = sch.get_loops(sch.get_block("C"))
    i0, _ = sch.split(i, factors=[None, 8])
    sch.compute_at(sch.get_block("B"), i0)
    check_schedule(sch, TwoStage, ProducerAt, two_stage_args(), two_stage_ref)


@I.ir_module
class ConsumerAt:
    @T.prim_func
    def main(A: T.Buffer((64, 64), "float32"), C: T.Buffer((64, 64), "float32")):
        T.func_attr({"global_symbol": "main"})
        B = T.alloc_buffer((64, 64), "float32")
        for i, j_0 in T.grid(64, 4):
            for j_1 in T.serial(16):
                with T.block("B"):
                    vi = T.axis.spatial(64, i)
                    vj = T.axis.spatial(64, j_0 * 16 + j_1)
                    T.reads(A[vi, vj])
                    T.writes(B[vi, vj])
                    B[vi, vj] = A[vi, vj] * T.float32(2)
            for ax0 in T.serial(16):
                with T.block("C"):
                    vi = T.axis.spatial(64, i)
                    vj = T.axis.spatial(64, j_0 * 16 + ax0)
                    T.reads(B[vi, vj])
                    T.writes(C[vi, vj])
                    C[vi, vj] = B[vi, vj] + T.float32(1)


def test_reverse_compute_at_consumes_the_tile_one_producer_iteration_wrote():
    sch = tir.Schedule(TwoStage)
    _, j = sch.get_loops(sch.get_block("B"))
    j0, _ = sch.split(j, factors=[None, 16])
    sch.reverse_compute_at(sch.get_block("C"), j0)
    check_schedule(sch, TwoStage, ConsumerAt, two_stage_args(), two_stage_ref)


@I.ir_module
class TiledCached:
    @T.prim_func
    def main(A: T.Buffer((64, 64), "float32"), B: T.Buffer((64, 64), "float32"), C: T.Buffer((64, 64), "float32")):
        T.func_attr({"global_symbol": "main"})
        A_shared = T.alloc_buffer((64, 64), "float32", scope="shared")
        C_local = T.alloc_buffer((64, 64), "float32", scope="local")
        for i_0, j_0 in T.grid(4, 4):
            for k in T.serial(64):
                for ax0 in T.serial(16):
                    with T.block("A_shared"):
                        v0 = T.axis.spatial(64, i_0 * 16 + ax0)
                        v1 = T.axis.spatial(64, k)
                        T.reads(A[v0, v1])
                        T.writes(A_shared[v0, v1])
                        A_shared[v0, v1] = A[v0, v1]
                for i_1, j_1 in T.grid(16, 16):
                    with T.block("C"):
                        vi = T.axis.spatial(64, i_0 * 16 + i_1)
                        vj = T.axis.spatial(64, j_0 * 16 + j_1)
                        vk = T.axis.reduce(64, k)
                        T.reads(A_shared[vi, vk], B[vk, vj])
                        T.writes(C_local[vi, vj])
                        with T.init():
                            C_local[vi, vj] = T.float32(0)
                        C_local[vi, vj] = C_local[vi, vj] + A_shared[vi, vk] * B[vk, vj]
            for ax0, ax1 in T.grid(16, 16):
                with T.block("C_local"):
                    v0 = T.axis.spatial(64, i_0 * 16 + ax0)
                    v1 = T.axis.spatial(64, j_0 * 16 + ax1)
                    T.reads(C_local[v0, v1])
                    T.writes(C[v0, v1])
                    C[v0, v1] = C_local[v0, v1]


def test_tiled_matmul_with_caches_moved_into_the_tiles():
    """The course's pattern: tile, cache the input per reduction step, write back per output tile.
    The reduction loop k is outside the tile loops, so the lowered init runs only at k == 0."""
    sch = tir.Schedule(Matmul)
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    i0, i1 = sch.split(i, factors=[None, 16])
    j0, j1 = sch.split(j, factors=[None, 16])
    sch.reorder(i0, j0, k, i1, j1)
    a_shared = sch.cache_read(c, 0, "shared")
    sch.compute_at(a_shared, k)
    c_local = sch.cache_write(c, 0, "local")
    sch.reverse_compute_at(c_local, j0)
    args = matmul_args()
    check_schedule(sch, Matmul, TiledCached, args, matmul_ref, atol=matmul_atol(args))


def test_compute_at_under_a_loop_without_consumers_is_refused():
    sch = tir.Schedule(TwoStage)
    i, _ = sch.get_loops(sch.get_block("B"))
    with pytest.raises(ScheduleError, match=r"compute_at: loop i is one of block 'B''s own loops"):
        sch.compute_at(sch.get_block("B"), i)


def test_compute_at_of_a_block_whose_output_the_loop_does_not_read():
    sch = tir.Schedule(TwoStage)
    i, _ = sch.get_loops(sch.get_block("C"))
    with pytest.raises(ScheduleError, match=r"compute_at: block 'C' writes C, which no block under loop i reads"):
        sch.compute_at(sch.get_block("C"), sch.get_loops(sch.get_block("B"))[0])
