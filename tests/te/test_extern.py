"""te.extern stages built with tvm.tir.ir_builder, run on the host and checked against numpy."""

import numpy as np
import pytest

import kiln as tvm
from kiln import te
from kiln.errors import ScheduleError

RNG = np.random.default_rng(3)


def run(s, args, inputs, outs):
    f = tvm.build(s, args, target="llvm", name="kernel")
    dev = tvm.cpu(0)
    nd = [tvm.nd.array(x, dev) for x in inputs] + [tvm.nd.empty(sh, dt, dev) for sh, dt in outs]
    f(*nd)
    return [a.numpy() for a in nd[len(inputs):]]


def _cumsum_rows(ins, outs):
    # A recurrence over the second axis: out[i, j] = out[i, j - 1] + x[i, j].
    ib = tvm.tir.ir_builder.create()
    x, out = ib.buffer_ptr(ins[0]), ib.buffer_ptr(outs[0])
    n, m = ins[0].shape
    with ib.for_range(0, n, name="r") as i:
        out[i, 0] = x[i, 0]
        with ib.for_range(1, m, name="c") as j:
            out[i, j] = out[i, j - 1] + x[i, j]
    return ib.get()


def test_extern_recurrence_matches_numpy_cumsum():
    A = te.placeholder((5, 37), name="A")
    C = te.extern((5, 37), [A], _cumsum_rows, name="cumsum", dtype="float32")
    assert isinstance(C.op, te.ExternOp) and C.op.input_tensors == [A]
    s = te.create_schedule(C.op)
    a = RNG.standard_normal((5, 37)).astype("float32")
    (c,) = run(s, [A, C], [a], [((5, 37), "float32")])
    np.testing.assert_allclose(c, np.cumsum(a, axis=1), rtol=1e-5, atol=1e-5)


def test_extern_between_compute_stages_with_scratch_and_branches():
    """compute -> extern (two outputs, scratch buffer, if/else, flat indexing) -> compute."""
    n = 64
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0, name="B")

    def body(ins, outs):
        ib = tvm.tir.ir_builder.create()
        b = ib.buffer_ptr(ins[0])
        pos, neg = ib.buffer_ptr(outs[0]), ib.buffer_ptr(outs[1])
        acc = ib.allocate("float32", (1,), name="acc", scope="local")
        acc[0] = 0.0
        with ib.for_range(0, n) as i:
            with ib.if_scope(b[i] > 0.0):
                pos[i] = b[i]
                neg[i // 8, i % 8] = 0
            with ib.else_scope():
                pos[i] = 0.0
                neg[i] = acc[0]  # flat index into the 8 x 8 output
            acc[0] = acc[0] + b[i]
        return ib.get()

    P, N = te.extern([(n,), (8, 8)], [B], body, name="split_sign", dtype=["float32", "int32"])
    D = te.compute((n,), lambda i: P[i] + 1.0, name="D")
    s = te.create_schedule([D.op, N.op])
    s[B].compute_inline()  # read by the extern: kept in memory all the same
    a = RNG.standard_normal(n).astype("float32")
    d, nn = run(s, [A, D, N], [a], [((n,), "float32"), ((8, 8), "int32")])
    b = a * 2
    np.testing.assert_allclose(d, np.where(b > 0, b, 0) + 1, rtol=1e-6)
    prefix = np.concatenate([[0.0], np.cumsum(b)[:-1]]).astype("float32")
    want = np.where(b > 0, 0, prefix.astype("int32")).reshape(8, 8)
    np.testing.assert_array_equal(nn, want)


def test_extern_parallel_loop_let_and_while():
    n, m = 6, 10
    A = te.placeholder((n, m), name="A", dtype="int32")

    def body(ins, outs):
        ib = tvm.tir.ir_builder.create()
        a, out = ib.buffer_ptr(ins[0]), ib.buffer_ptr(outs[0])
        with ib.for_range(0, n, kind="parallel") as i:
            k = ib.allocate("int32", (1,), name="k", scope="local")
            k[0] = 0
            # count the leading positive entries of each row
            with ib.while_loop(tvm.tir.all(k[0] < m, a[i, tvm.tir.min(k[0], m - 1)] > 0)):
                k[0] = k[0] + 1
            twice = ib.let("twice", k[0] * 2)
            out[i] = twice
        return ib.get()

    C = te.extern((n,), [A], body, name="lead", dtype="int32")
    s = te.create_schedule(C.op)
    a = RNG.integers(-2, 8, size=(n, m)).astype("int32")
    a[0] = 5  # a row without a non-positive entry
    (c,) = run(s, [A, C], [a], [((n,), "int32")])
    want = [2 * (int(np.argmax(row <= 0)) if (row <= 0).any() else m) for row in a]
    np.testing.assert_array_equal(c, want)


def test_extern_cannot_be_inlined_or_computed_at():
    A = te.placeholder((8,), name="A")
    C = te.extern((8,), [A], _copy, name="ext")
    D = te.compute((8,), lambda i: C[i] + 1.0, name="D")
    s = te.create_schedule(D.op)
    s[C].compute_inline()
    with pytest.raises(ScheduleError, match="ext"):
        tvm.lower(s, [A, D])
    s = te.create_schedule(D.op)
    with pytest.raises(ScheduleError, match="ext"):
        s[C].split(D.op.axis[0], factor=2)  # an extern stage has no loop axes to schedule


def _copy(ins, outs):
    ib = tvm.tir.ir_builder.create()
    a, o = ib.buffer_ptr(ins[0]), ib.buffer_ptr(outs[0])
    with ib.for_range(0, ins[0].shape[0]) as i:
        o[i] = a[i]
    return ib.get()


def test_extern_fcompute_must_return_a_statement():
    A = te.placeholder((4,), name="A")
    with pytest.raises(TypeError, match="ext.*statement"):
        te.extern((4,), [A], lambda ins, outs: None, name="ext")
