"""tvm.tir.Schedule cache_read / cache_write."""

import pytest

from helpers.tir_schedule import Matmul, check_schedule, matmul_args, matmul_atol, matmul_ref
from kiln import tir
from kiln.errors import ScheduleError
from kiln.script import ir as I, tir as T


@I.ir_module
class ReadCached:
    @T.prim_func
    def main(A: T.Buffer((64, 64), "float32"), B: T.Buffer((64, 64), "float32"), C: T.Buffer((64, 64), "float32")):
        T.func_attr({"global_symbol": "main"})
        B_local = T.alloc_buffer((64, 64), "float32", scope="local")
        for ax0, ax1 in T.grid(64, 64):
            with T.block("B_local"):
                v0, v1 = T.axis.remap("SS", [ax0, ax1])
                T.reads(B[v0, v1])
                T.writes(B_local[v0, v1])
                B_local[v0, v1] = B[v0, v1]
        for i, j, k in T.grid(64, 64, 64):
            with T.block("C"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                T.reads(A[vi, vk], B_local[vk, vj])
                T.writes(C[vi, vj])
                with T.init():
                    C[vi, vj] = T.float32(0)
                C[vi, vj] = C[vi, vj] + A[vi, vk] * B_local[vk, vj]


def test_cache_read_adds_a_copy_block_and_the_consumer_reads_the_cache():
    sch = tir.Schedule(Matmul)
    block = sch.get_block("C")
    cached = sch.cache_read(block, 1, "local")
    assert sch.get(cached).name_hint == "B_local"
    args = matmul_args()
    check_schedule(sch, Matmul, ReadCached, args, matmul_ref, atol=matmul_atol(args))


@I.ir_module
class WriteCached:
    @T.prim_func
    def main(A: T.Buffer((64, 64), "float32"), B: T.Buffer((64, 64), "float32"), C: T.Buffer((64, 64), "float32")):
        T.func_attr({"global_symbol": "main"})
        C_local = T.alloc_buffer((64, 64), "float32", scope="local")
        for i, j, k in T.grid(64, 64, 64):
            with T.block("C"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                T.reads(A[vi, vk], B[vk, vj])
                T.writes(C_local[vi, vj])
                with T.init():
                    C_local[vi, vj] = T.float32(0)
                C_local[vi, vj] = C_local[vi, vj] + A[vi, vk] * B[vk, vj]
        for ax0, ax1 in T.grid(64, 64):
            with T.block("C_local"):
                v0, v1 = T.axis.remap("SS", [ax0, ax1])
                T.reads(C_local[v0, v1])
                T.writes(C[v0, v1])
                C[v0, v1] = C_local[v0, v1]


def test_cache_write_writes_the_cache_and_copies_it_back_after_the_block():
    sch = tir.Schedule(Matmul)
    cached = sch.cache_write(sch.get_block("C"), 0, "local")
    assert sch.get(cached).name_hint == "C_local"
    args = matmul_args()
    check_schedule(sch, Matmul, WriteCached, args, matmul_ref, atol=matmul_atol(args))


def test_cache_read_index_out_of_range_names_the_block():
    sch = tir.Schedule(Matmul)
    with pytest.raises(ScheduleError, match=r"cache_read: block 'C' reads 2 buffers \(\['A', 'B'\]\); index 2"):
        sch.cache_read(sch.get_block("C"), 2, "local")


@I.ir_module
class InPlace:
    @T.prim_func
    def main(A: T.Buffer((8,), "float32")):
        for i in T.serial(8):
            with T.block("A"):
                vi = T.axis.spatial(8, i)
                A[vi] = A[vi] * T.float32(2)


def test_cache_read_of_a_buffer_the_block_also_writes_is_refused():
    sch = tir.Schedule(InPlace)
    with pytest.raises(ScheduleError, match=r"cache_read: block 'A' both reads and writes A; stage it with cache_write"):
        sch.cache_read(sch.get_block("A"), 0, "local")
