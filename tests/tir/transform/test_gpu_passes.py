"""The GPU passes on lowered functions: binding check, host/device split, barriers, limits."""

from __future__ import annotations

import pytest

import kiln as tvm
from kiln import te
from kiln.errors import CompileError
from kiln.ir import expr as E
from kiln.ir.functor import Visitor
from kiln.ir.stmt import ForKind
from kiln.target import Target
from kiln.tir.transform.device_workspace import device_workspace
from kiln.tir.transform.split_host_device import LAUNCH_OP, split_host_device
from kiln.tir.transform.thread_sync import insert_barriers, is_barrier
from kiln.tir.transform.verify_gpu import check_kernel_limits, shared_bytes, verify_thread_binding


def _lowered(s, args, name="f"):
    mod = tvm.lower(s, args, name=name)
    return mod[name] if hasattr(mod, "__getitem__") else list(mod.items())[0][1]


def _add_one(n=1000, factor=64):
    A = te.placeholder((n,), name="A")
    B = te.compute(A.shape, lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    xo, xi = s[B].split(B.op.axis[0], factor=factor)
    s[B].bind(xo, te.thread_axis("blockIdx.x"))
    s[B].bind(xi, te.thread_axis("threadIdx.x"))
    return s, [A, B]


def _calls(stmt, op):
    found = []

    class _V(Visitor):
        def visit_Call(self, c):
            if c.op == op:
                found.append(c)
            self.generic_visit(c)

    _V().visit(stmt)
    return found


def test_split_makes_a_kernel_and_a_launch():
    n = te.var("n")
    s, args = _add_one(n)
    host, kernels = split_host_device(_lowered(s, args, "add_one"))
    (k,) = kernels
    assert k.attrs["global_symbol"] == "add_one_kernel0" and k.attrs["calling_conv"] == "kernel"
    assert k.attrs["thread_tags"] == ["blockIdx.x", "threadIdx.x"]
    ext = k.attrs["thread_extent"]
    assert isinstance(ext["threadIdx.x"], E.IntImm) and ext["threadIdx.x"].value == 64
    assert "n" in str(ext["blockIdx.x"])  # ceil(n / 64) blocks
    assert [p.name for p in k.params] == ["A", "B", "n"]
    assert [k.buffer_map.get(p) is not None for p in k.params] == [True, True, False]
    (launch,) = _calls(host.body, LAUNCH_OP)
    kid, gx, gy, gz, bx, by, bz, dyn = launch.args[:8]
    assert kid.value == 0 and (gy.value, gz.value, bx.value, by.value, bz.value, dyn.value) == (1, 1, 64, 1, 1, 0)
    assert host.attrs["kiln.kernels"] == ["add_one_kernel0"]

    class _NoThreadLoops(Visitor):
        def visit_For(self, op):
            assert op.kind != ForKind.THREAD_BINDING
            self.generic_visit(op)

    _NoThreadLoops().visit(k.body)


def test_kernel_ids_count_across_functions():
    s, args = _add_one()
    _, ks = split_host_device(_lowered(s, args), first_kernel_id=3)
    assert ks[0].attrs["kernel_id"] == 3 and ks[0].attrs["global_symbol"] == "f_kernel0"


def test_shorter_thread_loop_is_guarded():
    A = te.placeholder((64, 64), name="A")
    B = te.compute((64,), lambda i: A[i, 0] * 2.0, name="B")
    C = te.compute((64, 64), lambda i, j: A[i, j] + B[i], name="C")
    s = te.create_schedule(C.op)
    tx = te.thread_axis("threadIdx.x")
    s[C].bind(C.op.axis[0], te.thread_axis("blockIdx.x"))
    s[C].bind(C.op.axis[1], tx)
    s[B].compute_at(s[C], C.op.axis[0])
    s[B].set_scope("shared")
    _, ko = s[B].split(B.op.axis[0], factor=1)  # one element per block: one thread of 64 computes it
    s[B].bind(ko, tx)
    _, (k,) = split_host_device(_lowered(s, [A, C]))
    assert "threadIdx.x < 1" in str(k.body) or "threadIdx_x < 1" in str(k.body)


def test_unbound_loop_error_names_stage_and_axes():
    A = te.placeholder((8, 8), name="A")
    B = te.compute((8, 8), lambda i, j: A[i, j] * 2.0, name="B")
    s = te.create_schedule(B.op)
    with pytest.raises(CompileError, match=r"f: stage B: loop axes i, j write global memory .* Did you forget to bind\?"):
        verify_thread_binding(_lowered(s, [A, B]))



def test_barrier_rules_on_a_tiled_matmul():
    M = 64
    A = te.placeholder((M, M), name="A")
    B = te.placeholder((M, M), name="B")
    k = te.reduce_axis((0, M), name="k")
    C = te.compute((M, M), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    AA = s.cache_read(A, "shared", [C])
    i, j = C.op.axis
    io, ii = s[C].split(i, factor=16)
    s[C].bind(io, te.thread_axis("blockIdx.x"))
    s[C].bind(ii, te.thread_axis("threadIdx.x"))
    ko, ki = s[C].split(k, factor=16)
    s[C].reorder(io, ii, ko, ki, j)
    s[AA].compute_at(s[C], ko)
    fused = s[AA].fuse(*s[AA].op.axis)
    _, t = s[AA].split(fused, factor=16)
    s[AA].bind(t, te.thread_axis("threadIdx.x"))
    _, (kern,) = split_host_device(_lowered(s, [A, B, C]))
    assert shared_bytes(kern) == 16 * 16 * 4
    synced = insert_barriers(kern)
    text = str(synced.body)
    # one barrier between the cooperative fetch and the compute, one closing the ko loop
    assert text.count("tvm_storage_sync") == 2
    seen = []

    def flat(x):
        if hasattr(x, "seq"):
            for y in x.seq:
                flat(y)
        elif type(x).__name__ == "Allocate":
            flat(x.body)
        else:
            seen.append("barrier" if is_barrier(x) else type(x).__name__)

    class _Order(Visitor):
        def visit_For(self, op):
            if op.loop_var.name in ("k.outer", "k_outer"):
                flat(op.body)
            self.generic_visit(op)

    _Order().visit(synced.body)
    # fetch (a thread loop became LetStmts) ; barrier ; compute loop ; barrier
    assert seen[0] != "barrier" and seen[1] == "barrier" and seen[-1] == "barrier" and len(seen) == 4, seen


def test_limits_use_the_target():
    s, args = _add_one(factor=128)
    _, (k,) = split_host_device(_lowered(s, args))
    check_kernel_limits(k, Target("opencl"))
    with pytest.raises(CompileError, match=r"128 threads per block \(threadIdx.x=128\) exceed the target's limit of 64"):
        check_kernel_limits(k, Target("opencl -max_num_threads=64"))


def test_workspace_between_kernels():
    n = 100
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((n,), lambda i: B[n - 1 - i], name="C")
    s = te.create_schedule(C.op)
    for X in (B, C):
        xo, xi = s[X].split(X.op.axis[0], factor=32)
        s[X].bind(xo, te.thread_axis("blockIdx.x"))
        s[X].bind(xi, te.thread_axis("threadIdx.x"))
    host, ks = split_host_device(_lowered(s, [A, C]))
    assert len(ks) == 2
    host = device_workspace(host)
    (alloc,) = _calls(host.body, "tir.kiln_device_alloc")
    assert alloc.args[0].value == n * 4
    assert len(_calls(host.body, "tir.kiln_device_free")) == 1


def test_shared_memory_under_a_thread_condition_is_an_error():
    # B runs 16 threads on threadIdx.x where the shared stage's fetch, attached inside B's thread
    # loop, runs 32: the fetch and the reads after it sit under "threadIdx.x < 16", where the
    # barrier between them cannot go.
    M = 64
    A = te.placeholder((M, M), name="A")
    B = te.compute((M, M), lambda i, j: A[i, j] * 2.0, name="B")
    s = te.create_schedule(B.op)
    AA = s.cache_read(A, "shared", [B])
    io, ii = s[B].split(B.op.axis[0], factor=16)
    s[B].bind(io, te.thread_axis("blockIdx.x"))
    s[B].bind(ii, te.thread_axis("threadIdx.x"))
    ji, jj = s[B].split(B.op.axis[1], factor=8)
    s[AA].compute_at(s[B], ji)
    fused = s[AA].fuse(*s[AA].op.axis)
    _, t = s[AA].split(fused, factor=32)
    s[AA].bind(t, te.thread_axis("threadIdx.x"))
    _, (k,) = split_host_device(_lowered(s, [A, B]))
    assert k.attrs["thread_extent"]["threadIdx.x"].value == 32
    with pytest.raises(CompileError, match="shared memory is written and read under a condition"):
        insert_barriers(k)


def test_a_condition_over_statements_that_need_no_barrier_is_kept():
    # A branch holding a sequence (no shared memory in it) needs no barrier: the pass leaves it
    # as it is instead of mistaking the rebuilt sequence for an inserted barrier.
    from dataclasses import replace

    from kiln.ir.stmt import IfThenElse, SeqStmt

    s, args = _add_one()
    _, (k,) = split_host_device(_lowered(s, args))
    cond = E.Var("n") < 5
    branchy = replace(k, body=IfThenElse(cond, SeqStmt((k.body, k.body)), None))
    assert insert_barriers(branchy).body is branchy.body


def test_virtual_threads_are_interleaved():
    from kiln.tir.transform.inject_virtual_thread import inject_virtual_threads

    M = 64
    A = te.placeholder((M, M), name="A")
    B = te.placeholder((M, M), name="B")
    k = te.reduce_axis((0, M), name="k")
    C = te.compute((M, M), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    AA = s.cache_read(A, "shared", [C])
    CL = s.cache_write(C, "local")
    bi, ii = s[C].split(C.op.axis[0], factor=32)
    vi, ii = s[C].split(ii, nparts=2)
    ti, ii = s[C].split(ii, nparts=16)
    s[C].reorder(bi, vi, ti, ii, C.op.axis[1])
    s[C].bind(bi, te.thread_axis("blockIdx.x"))
    s[C].bind(vi, te.thread_axis("vthread"))
    s[C].bind(ti, te.thread_axis("threadIdx.x"))
    s[CL].compute_at(s[C], ti)
    ko, _ = s[CL].split(CL.op.reduce_axis[0], factor=8)
    s[CL].reorder(ko, *[iv for iv in s[CL].leaf_iter_vars if iv is not ko])
    s[AA].compute_at(s[CL], ko)
    fused = s[AA].fuse(*s[AA].op.axis)
    _, t = s[AA].split(fused, factor=16)
    s[AA].bind(t, te.thread_axis("threadIdx.x"))
    func = inject_virtual_threads(_lowered(s, [A, B, C]))

    class _Check(Visitor):
        def __init__(self):
            super().__init__()
            self.vthread_loops, self.allocs, self.fetches = 0, {}, 0

        def visit_For(self, op):
            if op.kind == ForKind.THREAD_BINDING and op.thread_binding.thread_tag == "vthread":
                self.vthread_loops += 1
            self.generic_visit(op)

        def visit_Allocate(self, op):
            self.allocs[op.buffer.name] = str(op.extents[0])
            self.generic_visit(op)

        def visit_BufferStore(self, op):
            if op.buffer.name.startswith("A.shared"):
                self.fetches += 1
            self.generic_visit(op)

    c = _Check()
    c.visit(func.body)
    assert c.vthread_loops == 0
    # the tile of A the block needs (32 rows x 8) fetched by one statement; a private C tile per vthread
    assert c.allocs["A.shared"] == "256" and c.fetches == 1, c.allocs
    assert c.allocs["C.local"] == "128"
