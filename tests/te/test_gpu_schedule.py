"""GPU schedules in TE lowering: thread-bound loops, regions of shared/local stages, storage
alignment, cross-thread reductions and their errors (no device needed)."""

from __future__ import annotations

import pytest

import kiln as tvm
from kiln import te
from kiln.errors import ScheduleError
from kiln.ir.functor import Visitor
from kiln.te.lower import lower_to_primfunc


def _allocs(func):
    out = {}

    class _V(Visitor):
        def visit_Allocate(self, op):
            out[op.buffer.name] = (op.buffer.scope, [e.value for e in op.extents], op.buffer)
            self.generic_visit(op)

    _V().visit(func.body)
    return out


def _tiled_matmul(M=64, tile=16, th=4, kt=8, local=True):
    A = te.placeholder((M, M), name="A")
    B = te.placeholder((M, M), name="B")
    k = te.reduce_axis((0, M), name="k")
    C = te.compute((M, M), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    AA = s.cache_read(A, "shared", [C])
    CL = s.cache_write(C, "local") if local else C
    tx, ty = te.thread_axis("threadIdx.x"), te.thread_axis("threadIdx.y")
    io, ii = s[C].split(C.op.axis[0], factor=tile)
    jo, ji = s[C].split(C.op.axis[1], factor=tile)
    tyo, ii = s[C].split(ii, nparts=th)
    txo, ji = s[C].split(ji, nparts=th)
    s[C].reorder(io, jo, tyo, txo, ii, ji)
    s[C].bind(io, te.thread_axis("blockIdx.y"))
    s[C].bind(jo, te.thread_axis("blockIdx.x"))
    s[C].bind(tyo, ty)
    s[C].bind(txo, tx)
    if local:
        s[CL].compute_at(s[C], txo)
    ko, ki = s[CL].split(CL.op.reduce_axis[0], factor=kt)
    if local:
        s[CL].reorder(ko, ki, *s[CL].op.axis)
    s[AA].compute_at(s[CL], ko)
    return s, [A, B, C], AA


def test_shared_stage_covers_the_block_local_stage_the_thread():
    s, args, _ = _tiled_matmul(tile=16, th=4, kt=8)
    allocs = _allocs(lower_to_primfunc(s, args, "mm"))
    # A.shared: the block's 16 rows x 8 k (not one thread's 4 rows); C.local: one thread's 4x4
    assert allocs["A.shared"][:2] == ("shared", [128])
    assert allocs["C.local"][:2] == ("local", [16])


def test_attached_stage_scope_is_inferred_from_thread_loops():
    n = 64
    A = te.placeholder((n, n), name="A")
    B = te.compute((n, n), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((n, n), lambda i, j: B[i, j] + 1.0, name="C")
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    s[C].bind(i, te.thread_axis("blockIdx.x"))
    s[C].bind(j, te.thread_axis("threadIdx.x"))
    s[B].compute_at(s[C], j)  # under threadIdx: each thread's own element
    assert _allocs(lower_to_primfunc(s, [A, C], "f"))["B"][:2] == ("local", [1])
    s2 = te.create_schedule(C.op)
    i, j = C.op.axis
    s2[C].bind(i, te.thread_axis("blockIdx.x"))
    s2[C].bind(j, te.thread_axis("threadIdx.x"))
    s2[B].compute_at(s2[C], i)  # under blockIdx only: the block's row, shared by its threads
    assert _allocs(lower_to_primfunc(s2, [A, C], "f"))["B"][:2] == ("shared", [n])


def test_cpu_compute_at_keeps_global_scope():
    A = te.placeholder((8, 8), name="A")
    B = te.compute((8, 8), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((8, 8), lambda i, j: B[i, j] + 1.0, name="C")
    s = te.create_schedule(C.op)
    s[B].compute_at(s[C], C.op.axis[0])
    assert _allocs(lower_to_primfunc(s, [A, C], "f"))["B"][:2] == ("global", [8])


def test_storage_align_pads_the_row_stride():
    s, args, AA = _tiled_matmul(tile=16, th=4, kt=8)
    s[AA].storage_align(AA.op.axis[0], 32, 4)
    scope, ext, buf = _allocs(lower_to_primfunc(s, args, "mm"))["A.shared"]
    assert [x.value for x in buf.strides] == [36, 1] and ext == [16 * 36]


def test_storage_align_errors():
    s, args, AA = _tiled_matmul()
    with pytest.raises(ScheduleError, match="storage_align needs factor > 0 and 0 <= offset < factor"):
        s[AA].storage_align(AA.op.axis[0], 8, 8)
    with pytest.raises(ScheduleError, match="storage_align needs one of the stage's original axes"):
        s[AA].storage_align(args[2].op.axis[0], 8, 1)


def test_bind_errors():
    A = te.placeholder((64,), name="A")
    B = te.compute((64,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    xo, xi = s[B].split(B.op.axis[0], factor=8)
    with pytest.raises(ScheduleError, match="unknown thread tag 'threadIdx.w'"):
        s[B].bind(xo, te.thread_axis("threadIdx.w"))
    s[B].bind(xo, te.thread_axis("threadIdx.x"))
    with pytest.raises(ScheduleError, match="axes i.outer and i.inner are both bound to threadIdx.x"):
        s[B].bind(xi, te.thread_axis("threadIdx.x"))


def _rowsum(m=100, factor=32):
    A = te.placeholder((8, m), name="A")
    k = te.reduce_axis((0, m), name="k")
    B = te.compute((8,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=factor)
    s[B].bind(B.op.axis[0], te.thread_axis("blockIdx.x"))
    return s, A, B, ko, ki


def test_cross_thread_reduction_structure():
    s, A, B, ko, ki = _rowsum(100, 32)
    s[B].bind(ki, te.thread_axis("threadIdx.x"))
    func = lower_to_primfunc(s, [A, B], "rowsum")
    allocs = _allocs(func)
    assert allocs["B.red_shared"][:2] == ("shared", [32]) and allocs["B.red_local"][:2] == ("local", [1])
    text = str(tvm.lower(s, [A, B], name="rowsum"))
    assert text.count("tvm_storage_sync") == 1 + 5 + 1  # after the partials, per tree level (32 -> 1), at the end


def test_cross_thread_reduction_errors():
    s, A, B, ko, ki = _rowsum()
    s[B].bind(ki, te.thread_axis("blockIdx.y"))
    with pytest.raises(ScheduleError, match="bind exactly one reduction axis, to a threadIdx axis"):
        lower_to_primfunc(s, [A, B], "f")
    s, A, B, ko, ki = _rowsum()
    s[B].bind(ko, te.thread_axis("threadIdx.x"))
    s[B].bind(ki, te.thread_axis("threadIdx.y"))
    with pytest.raises(ScheduleError, match="bind exactly one reduction axis"):
        lower_to_primfunc(s, [A, B], "f")
