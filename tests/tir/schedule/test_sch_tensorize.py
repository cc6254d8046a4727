"""tvm.tir.Schedule tensorize with tir.TensorIntrin.register / get (desc + impl prim_funcs)."""

import pytest

from helpers.tir_schedule import (
    Matmul, TwoStage, check_schedule, matmul_args, matmul_atol, matmul_ref, two_stage_args, two_stage_ref,
)
from kiln import tir
from kiln.errors import ScheduleError
from kiln.script import ir as I, tir as T


@T.prim_func
def mma_desc(a: T.handle, b: T.handle, c: T.handle) -> None:
    A = T.match_buffer(a, (4, 4), "float32", offset_factor=1)
    B = T.match_buffer(b, (4, 4), "float32", offset_factor=1)
    C = T.match_buffer(c, (4, 4), "float32", offset_factor=1)
    with T.block("root"):
        T.reads(C[0:4, 0:4], A[0:4, 0:4], B[0:4, 0:4])
        T.writes(C[0:4, 0:4])
        for i, j, k in T.grid(4, 4, 4):
            with T.block("update"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]


@T.prim_func
def mma_impl(a: T.handle, b: T.handle, c: T.handle) -> None:
    A = T.match_buffer(a, (4, 4), "float32", offset_factor=1)
    B = T.match_buffer(b, (4, 4), "float32", offset_factor=1)
    C = T.match_buffer(c, (4, 4), "float32", offset_factor=1)
    with T.block("root"):
        T.reads(C[0:4, 0:4], A[0:4, 0:4], B[0:4, 0:4])
        T.writes(C[0:4, 0:4])
        for k in T.serial(4):
            for i in T.unroll(4):
                for j in T.vectorized(4):
                    C[i, j] = C[i, j] + A[i, k] * B[k, j]


MMA = tir.TensorIntrin.register("test_sch_mma_4x4", mma_desc, mma_impl, override=True)


@I.ir_module
class MatmulTensorized:
    @T.prim_func
    def main(A: T.Buffer((64, 64), "float32"), B: T.Buffer((64, 64), "float32"), C: T.Buffer((64, 64), "float32")):
        T.func_attr({"global_symbol": "main"})
        for i_0, j_0 in T.grid(16, 16):
            for i_1_init, j_1_init in T.grid(4, 4):
                with T.block("C_init"):
                    vi_init = T.axis.spatial(64, i_0 * 4 + i_1_init)
                    vj_init = T.axis.spatial(64, j_0 * 4 + j_1_init)
                    T.reads()
                    T.writes(C[vi_init, vj_init])
                    C[vi_init, vj_init] = T.float32(0)
            for k_0 in T.serial(16):
                with T.block("C_o"):
                    T.reads(C[i_0 * 4:i_0 * 4 + 4, j_0 * 4:j_0 * 4 + 4], A[i_0 * 4:i_0 * 4 + 4, k_0 * 4:k_0 * 4 + 4],
                            B[k_0 * 4:k_0 * 4 + 4, j_0 * 4:j_0 * 4 + 4])
                    T.writes(C[i_0 * 4:i_0 * 4 + 4, j_0 * 4:j_0 * 4 + 4])
                    T.block_attr({"tensorized": "test_sch_mma_4x4"})
                    for k in T.serial(4):
                        for i in T.unroll(4):
                            for j in T.vectorized(4):
                                C[i_0 * 4 + i, j_0 * 4 + j] = (C[i_0 * 4 + i, j_0 * 4 + j]
                                                               + A[i_0 * 4 + i, k_0 * 4 + k] * B[k_0 * 4 + k, j_0 * 4 + j])


def _tiled(sch):
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    i0, i1 = sch.split(i, factors=[None, 4])
    j0, j1 = sch.split(j, factors=[None, 4])
    k0, k1 = sch.split(k, factors=[None, 4])
    sch.reorder(i0, j0, k0, i1, j1, k1)
    return c, i1, k0


def test_tensorize_a_matmul_tile_by_name():
    assert tir.TensorIntrin.get("test_sch_mma_4x4") is MMA
    sch = tir.Schedule(Matmul)
    c, i1, k0 = _tiled(sch)
    sch.decompose_reduction(c, k0)
    sch.tensorize(i1, "test_sch_mma_4x4")
    with pytest.raises(ScheduleError, match="get_block: no block named 'C_init_o'"):
        sch.get_block("C_init_o")
    assert sch.get(sch.get_block("C_o")).annotations == {"tensorized": "test_sch_mma_4x4"}
    args = matmul_args()
    check_schedule(sch, Matmul, MatmulTensorized, args, matmul_ref, atol=matmul_atol(args))


@T.prim_func
def scale_desc(a: T.handle, b: T.handle) -> None:
    A = T.match_buffer(a, (4, 4), "float32", offset_factor=1)
    B = T.match_buffer(b, (4, 4), "float32", offset_factor=1)
    with T.block("root"):
        T.reads(A[0:4, 0:4])
        T.writes(B[0:4, 0:4])
        for i, j in T.grid(4, 4):
            with T.block("scale"):
                vi, vj = T.axis.remap("SS", [i, j])
                B[vi, vj] = A[vi, vj] * T.float32(2)


@T.prim_func
def scale_impl(a: T.handle, b: T.handle) -> None:
    sa = T.int32()
    sb = T.int32()
    A = T.match_buffer(a, (4, 4), "float32", strides=(sa, 1), offset_factor=1)
    B = T.match_buffer(b, (4, 4), "float32", strides=(sb, 1), offset_factor=1)
    with T.block("root"):
        T.reads(A[0:4, 0:4])
        T.writes(B[0:4, 0:4])
        Af = T.Buffer((4096,), "float32", data=A.data)
        Bf = T.Buffer((4096,), "float32", data=B.data)
        for i in T.serial(4):
            for j in T.vectorized(4):
                Bf[B.elem_offset + i * sb + j] = Af[A.elem_offset + i * sa + j] + Af[A.elem_offset + i * sa + j]


tir.TensorIntrin.register("test_sch_scale_4x4", scale_desc, scale_impl, override=True)


@I.ir_module
class ScaleTensorized:
    @T.prim_func
    def main(A: T.Buffer((64, 64), "float32"), C: T.Buffer((64, 64), "float32")):
        T.func_attr({"global_symbol": "main"})
        Af = T.Buffer((4096,), "float32", data=A.data)
        B = T.alloc_buffer((64, 64), "float32")
        Bf = T.Buffer((4096,), "float32", data=B.data)
        for i_0, j_0 in T.grid(16, 16):
            with T.block("B_o"):
                T.reads(Af[i_0 * 256 + j_0 * 4:i_0 * 256 + j_0 * 4 + 196])
                T.writes(Bf[i_0 * 256 + j_0 * 4:i_0 * 256 + j_0 * 4 + 196])
                T.block_attr({"tensorized": "test_sch_scale_4x4"})
                for i in T.serial(4):
                    for j in T.vectorized(4):
                        Bf[i_0 * 256 + j_0 * 4 + i * 64 + j] = Af[i_0 * 256 + j_0 * 4 + i * 64 + j] + Af[i_0 * 256 + j_0 * 4 + i * 64 + j]
        for i, j in T.grid(64, 64):
            with T.block("C"):
                vi, vj = T.axis.remap("SS", [i, j])
                T.reads(B[vi, vj])
                T.writes(C[vi, vj])
                C[vi, vj] = B[vi, vj] + T.float32(1)


def test_tensorize_binds_data_elem_offset_and_strides_of_the_tile():
    """impl reads X.data, X.elem_offset and X.strides: they become the real buffer's data, the tile's
    flat offset (i_0 * 4 * 64 + j_0 * 4) and the real row stride 64."""
    sch = tir.Schedule(TwoStage)
    b = sch.get_block("B")
    i, j = sch.get_loops(b)
    i0, i1 = sch.split(i, factors=[None, 4])
    j0, j1 = sch.split(j, factors=[None, 4])
    sch.reorder(i0, j0, i1, j1)
    sch.tensorize(b, "test_sch_scale_4x4")
    check_schedule(sch, TwoStage, ScaleTensorized, two_stage_args(), two_stage_ref)


def test_tensorize_a_block_with_init_asks_for_decompose_reduction():
    sch = tir.Schedule(Matmul)
    _, i1, _ = _tiled(sch)
    with pytest.raises(ScheduleError, match=r"tensorize: block 'C' with test_sch_mma_4x4: the block has an init; "
                                            r"run sch.decompose_reduction"):
        sch.tensorize(i1, "test_sch_mma_4x4")


def test_tensorize_with_other_tile_extents_is_refused():
    sch = tir.Schedule(Matmul)
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    i0, i1 = sch.split(i, factors=[None, 8])
    sch.decompose_reduction(c, j)
    with pytest.raises(ScheduleError, match=r"tensorize with test_sch_mma_4x4: loop i_1: the loops must hold exactly "
                                            r"one block and nothing else; they hold blocks \['C_init', 'C'\]"):
        sch.tensorize(i1, "test_sch_mma_4x4")
    with pytest.raises(ScheduleError, match=r"tensorize: block 'C' with test_sch_mma_4x4: loop i_1 has extent 8, "
                                            r"the intrinsic's loop 4"):
        sch2 = tir.Schedule(Matmul)
        c2 = sch2.get_block("C")
        i0, i1 = sch2.split(sch2.get_loops(c2)[0], factors=[None, 8])
        sch2.decompose_reduction(c2, i0)
        sch2.tensorize(i1, "test_sch_mma_4x4")


def test_tensorize_with_another_computation_is_refused():
    sch = tir.Schedule(TwoStage)
    c = sch.get_block("C")
    i, j = sch.get_loops(c)
    i0, i1 = sch.split(i, factors=[None, 4])
    j0, j1 = sch.split(j, factors=[None, 4])
    sch.reorder(i0, j0, i1, j1)
    with pytest.raises(ScheduleError, match=r"tensorize: block 'C' with test_sch_scale_4x4: the block computes .* "
                                            r"the intrinsic .*; they differ"):
        sch.tensorize(i1, "test_sch_scale_4x4")


def test_an_unknown_intrinsic_is_named():
    with pytest.raises(ScheduleError, match=r"TensorIntrin.get: no intrinsic named 'nope'; register it"):
        tir.TensorIntrin.get("nope")
    assert tir.TensorIntrin.get("nope", allow_missing=True) is None
