"""Misused primitives raise errors that name the stage and the axis."""

import pytest

import kiln as tvm
from kiln import te
from kiln.errors import ScheduleError


def make():
    A = te.placeholder((64, 64), name="A")
    k = te.reduce_axis((0, 64), name="k")
    B = te.compute((64,), lambda i: te.sum(A[i, k], axis=k), name="B")
    return A, B, te.create_schedule(B.op)


def test_split_twice_names_stage_and_axis():
    _, B, s = make()
    s[B].split(B.op.axis[0], factor=8)
    with pytest.raises(ScheduleError, match=r"stage B: cannot split axis i: it was already split"):
        s[B].split(B.op.axis[0], factor=4)


def test_vectorize_reduction_axis_is_rejected():
    _, B, s = make()
    with pytest.raises(ScheduleError, match=r"stage B: cannot vectorize the reduction axis k"):
        s[B].vectorize(B.op.reduce_axis[0])


def test_bind_on_llvm_is_rejected():
    A, B, s = make()
    s[B].bind(B.op.axis[0], te.thread_axis("blockIdx.x"))
    with pytest.raises(ScheduleError, match=r"stage B: axis i is bound to blockIdx.x.*llvm"):
        tvm.build(s, [A, B], target="llvm")


def test_fuse_needs_adjacent_axes():
    A = te.placeholder((4, 4, 4), name="A")
    C = te.compute((4, 4, 4), lambda i, j, k: A[i, j, k], name="C")
    s = te.create_schedule(C.op)
    i, j, k = C.op.axis
    with pytest.raises(ScheduleError, match="stage C: fuse needs adjacent axes"):
        s[C].fuse(i, k)


def test_missing_placeholder_in_args():
    A, B, s = make()
    with pytest.raises(tvm.errors.CompileError, match="placeholder A is read but not in args"):
        tvm.lower(s, [B])


def test_unknown_target_is_a_clear_error():
    A, B, s = make()
    with pytest.raises(ValueError, match="llvmm"):
        tvm.build(s, [A, B], target="llvmm")


def test_compute_arity_mismatch():
    A = te.placeholder((4, 4), name="A")
    with pytest.raises(ValueError, match="fcompute takes 1 arguments but the shape has 2 dims"):
        te.compute((4, 4), lambda i: A[i, i], name="bad")
