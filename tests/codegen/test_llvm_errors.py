"""User mistakes reach the user as kiln errors that name the function, never LLVM tracebacks."""

import pytest

from kiln import codegen
from kiln.errors import CompileError, TargetError
from kiln.ir import AttrStmt, Call, ForKind, IterVar, Var, const, var
from kiln.ir.dtype import dtype
from tirkit import buffer, build, func, load, loop, module, store


def _simple():
    A = buffer("A", (4,))
    i = var("i")
    return func("simple", [A], loop(i, 4, store(A, i, const(1.0))))


def test_every_target_kind_has_a_code_generator():
    from kiln.target.target import KINDS
    assert all(codegen.BACKENDS.get(kind) for kind in KINDS)
    with pytest.raises(TargetError, match="unknown target kind 'vulkan'"):
        codegen.build(module(_simple()), "vulkan")


def test_cuda_needs_bound_loops():
    with pytest.raises(CompileError, match="simple: stage A: loop axes i write global memory but are not bound"):
        codegen.build(module(_simple()), "cuda")


def test_opencl_needs_bound_loops():
    with pytest.raises(CompileError, match="simple: stage A: loop axes i write global memory but are not bound "
                                           "to GPU threads. Did you forget to bind"):
        codegen.build(module(_simple()), "opencl")


def test_thread_binding_on_llvm():
    A = buffer("A", (4,))
    i = var("i")
    f = func("bound", [A], loop(i, 4, store(A, i, const(1.0)), ForKind.THREAD_BINDING))
    with pytest.raises(CompileError, match="bound: loop 'i' is bound to a GPU thread axis"):
        build(f)
    tx = IterVar(None, Var("threadIdx.x"), 1, "threadIdx.x")
    g = func("attr", [A], AttrStmt(tx, "thread_extent", const(4), store(A, const(0), const(1.0))))
    with pytest.raises(CompileError, match="attr: loop bound to a GPU thread axis"):
        build(g)


def test_unknown_intrinsic():
    A = buffer("A", (4,))
    i = var("i")
    f = func("weird", [A], loop(i, 4, store(A, i, Call(dtype("float32"), "tir.frobnicate", (load(A, i),)))))
    with pytest.raises(CompileError, match=r"weird: the LLVM backend has no intrinsic 'tir.frobnicate'; known: .*tir.exp"):
        build(f)


def test_undefined_variable():
    A = buffer("A", (4,))
    i, ghost = var("i"), var("ghost")
    f = func("leaky", [A], loop(i, 4, store(A, i + ghost, const(1.0))))
    with pytest.raises(CompileError, match="leaky: variable 'ghost' .* is used but never defined"):
        build(f)


def test_unflattened_access():
    from kiln.errors import InternalError
    from kiln.ir import BufferStore
    A = buffer("A", (2, 2))
    i = var("i")
    f = func("multi", [A], loop(i, 2, BufferStore(A, const(1.0), (i, i))))
    with pytest.raises(InternalError, match="multi: access to 'A' has 2 indices"):
        build(f)


def test_bad_triple():
    with pytest.raises(TargetError, match="LLVM cannot generate code for triple 'bogus"):
        build(_simple(), "llvm -mtriple=bogus-none-thing")
