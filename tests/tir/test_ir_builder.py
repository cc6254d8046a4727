"""tvm.tir.ir_builder: the statements it builds, and a kernel built from them checked against numpy."""

import numpy as np
import pytest

import kiln as tvm
from kiln import te, tir
from kiln.errors import CompileError


def test_for_range_if_else_and_allocate_structure():
    ib = tir.ir_builder.create()
    n = te.var("n")
    buf = tir.decl_buffer((n,), "float32", "x")
    x = ib.buffer_ptr(buf)
    tmp = ib.allocate("float32", (4,), name="tmp", scope="local")
    with ib.for_range(2, n) as i:
        with ib.if_scope(i < 5):
            x[i] = tmp[0]
        with ib.else_scope():
            x[i] = 1.0
    stmt = ib.get()
    assert isinstance(stmt, tir.Allocate) and stmt.buffer.name == "tmp"
    loop = stmt.body
    assert isinstance(loop, tir.For) and loop.loop_var.name == "i"
    assert str(loop.min) == "2"
    assert isinstance(loop.body, tir.IfThenElse) and loop.body.else_case is not None
    assert isinstance(loop.body.then_case, tir.BufferStore)


def test_default_loop_names_and_kinds():
    ib = tir.ir_builder.create()
    with ib.for_range(0, 2) as i:
        with ib.for_range(0, 3, kind="parallel") as j:
            with ib.for_range(0, 4, name="t") as t:
                ib.emit(tir.Evaluate(i + j + t))
    loop = ib.get()
    assert [loop.loop_var.name, loop.body.loop_var.name, loop.body.body.loop_var.name] == ["i", "j", "t"]
    assert loop.body.kind == tir.ForKind.PARALLEL
    with pytest.raises(ValueError, match="kind"):
        with ib.for_range(0, 2, kind="sideways"):
            pass


def test_errors_name_the_problem():
    ib = tir.ir_builder.create()
    with pytest.raises(CompileError, match="else_scope"):
        with ib.else_scope():
            pass
    x = ib.buffer_ptr(tir.decl_buffer((2, 3), "float32", "x"))
    with pytest.raises(IndexError, match="x has 2 dims"):
        x[0, 1, 2]
    with pytest.raises(TypeError, match="buffer_ptr"):
        ib.buffer_ptr(np.zeros(3))


def test_bubble_sort_kernel_matches_numpy():
    """Nested data-dependent loops with a let and a swap through scratch memory."""
    n = 23
    A = te.placeholder((n,), name="A")

    def body(ins, outs):
        ib = tir.ir_builder.create()
        a, o = ib.buffer_ptr(ins[0]), ib.buffer_ptr(outs[0])
        with ib.for_range(0, n, name="c") as i:
            o[i] = a[i]
        with ib.for_range(0, n, name="p") as p:
            with ib.for_range(0, n - 1 - p, name="q") as q:
                with ib.if_scope(o[q] > o[q + 1]):
                    t = ib.let("t", o[q])
                    o[q] = o[q + 1]
                    o[q + 1] = t
        return ib.get()

    B = te.extern((n,), [A], body, name="sort")
    s = te.create_schedule(B.op)
    f = tvm.build(s, [A, B], target="llvm", name="sort")
    a = np.random.default_rng(1).standard_normal(n).astype("float32")
    out = tvm.nd.empty((n,), "float32", tvm.cpu(0))
    f(tvm.nd.array(a, tvm.cpu(0)), out)
    np.testing.assert_array_equal(out.numpy(), np.sort(a))


def test_thread_extent_binds_a_thread_axis():
    ib = tir.ir_builder.create()
    tx = te.thread_axis("threadIdx.x")
    ib.scope_attr(tx, "thread_extent", 32)
    ib.scope_attr(tir.const(0), "pragma_note", 1)
    x = ib.buffer_ptr(tir.decl_buffer((32,), "float32", "x"))
    x[tx] = 1.0
    stmt = ib.get()
    assert isinstance(stmt, tir.For) and stmt.kind == tir.ForKind.THREAD_BINDING
    assert stmt.thread_binding is tx and str(stmt.extent) == "32"
    assert isinstance(stmt.body, tir.AttrStmt) and stmt.body.attr_key == "pragma_note"
    with pytest.raises(TypeError, match="thread_axis"):
        ib.scope_attr(tir.const(0), "thread_extent", 4)
