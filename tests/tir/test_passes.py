"""TIR passes on hand-built functions, compared with the expected structure."""

import kiln.ir as I
from kiln.ir import ForKind, assert_structural_equal, const
from kiln.tir.transform import flatten_buffers, partition_loops, simplify_func, unroll_loops, vectorize_loops


def func(body, *bufs):
    params = tuple(I.Var(b.name, I.dtype("handle")) for b in bufs)
    return I.PrimFunc(params, body, buffer_map=dict(zip(params, bufs)), attrs={"global_symbol": "f"})


def test_flatten_row_major():
    A = I.decl_buffer((4, 8), "float32", "A")
    i, j = I.var("i"), I.var("j")
    f = func(I.For(i, const(0), const(4), ForKind.SERIAL, I.For(j, const(0), const(8), ForKind.SERIAL,
              I.BufferStore(A, const(1.0), (i, j)))), A)
    out = flatten_buffers(f)
    store = out.body.body.body
    assert len(store.indices) == 1
    assert I.structural_equal(store.indices[0], i * 8 + j)


def test_vectorize_makes_ramps():
    A = I.decl_buffer((64,), "float32", "A")
    B = I.decl_buffer((64,), "float32", "B")
    i = I.var("i")
    f = func(I.For(i, const(0), const(16), ForKind.VECTORIZED, I.BufferStore(B, A[i] + const(1.0), (i,))), A, B)
    out = vectorize_loops(f)
    ramp = I.Ramp(const(0), const(1), 16, I.dtype("int32x16"))
    expected = I.BufferStore(B, I.Add(I.BufferLoad(A, (ramp,), I.dtype("float32x16")),
                                      I.Broadcast(const(1.0), 16, I.dtype("float32x16")), I.dtype("float32x16")), (ramp,))
    assert_structural_equal(out.body, expected)


def test_vectorize_falls_back_for_a_reduction_into_one_element():
    A = I.decl_buffer((16,), "float32", "A")
    S = I.decl_buffer((1,), "float32", "S")
    i = I.var("i")
    loop = I.For(i, const(0), const(16), ForKind.VECTORIZED, I.BufferStore(S, S[0] + A[i], (const(0),)))
    out = vectorize_loops(func(loop, A, S))
    assert isinstance(out.body, I.For) and out.body.kind == ForKind.SERIAL


def test_vectorize_keeps_a_lane_invariant_if_then_else_as_one_branch():
    # Padding of a channel-blocked tensor: the guard depends on the row, not the vector lane.
    A = I.decl_buffer((64,), "float32", "A")
    B = I.decl_buffer((96,), "float32", "B")
    y, c = I.var("y"), I.var("c")
    value = I.Call(I.dtype("float32"), "tir.if_then_else", (y >= 1, A[(y - 1) * 16 + c], const(0.0)))
    inner = I.For(c, const(0), const(16), ForKind.VECTORIZED, I.BufferStore(B, value, (y * 16 + c,)))
    out = vectorize_loops(func(I.For(y, const(0), const(6), ForKind.SERIAL, inner), A, B))
    store = out.body.body
    assert isinstance(store, I.BufferStore) and store.value.dtype.lanes == 16
    assert store.value.op == "tir.if_then_else" and store.value.args[0].dtype.lanes == 1


def test_vectorize_keeps_a_per_lane_if_then_else_scalar():
    A = I.decl_buffer((16,), "float32", "A")
    i = I.var("i")
    value = I.Call(I.dtype("float32"), "tir.if_then_else", (i >= 3, A[i - 3], const(0.0)))
    out = vectorize_loops(func(I.For(i, const(0), const(16), ForKind.VECTORIZED, I.BufferStore(A, value, (i,))), A))
    assert isinstance(out.body, I.For) and out.body.kind == ForKind.SERIAL


def test_unroll_constant_loop():
    A = I.decl_buffer((4,), "float32", "A")
    i = I.var("i")
    out = unroll_loops(func(I.For(i, const(0), const(3), ForKind.UNROLLED, I.BufferStore(A, const(0.0), (i,))), A))
    assert isinstance(out.body, I.SeqStmt) and len(out.body) == 3
    assert [s.indices[0].value for s in out.body.seq] == [0, 1, 2]


def test_loop_partition_removes_guard_from_main_part():
    A = I.decl_buffer((100,), "float32", "A")
    o, i = I.var("o"), I.var("i")
    from kiln.tir.op import likely

    guarded = I.IfThenElse(likely(o * 16 + i < 100), I.BufferStore(A, const(0.0), (o * 16 + i,)))
    f = func(I.For(o, const(0), const(7), ForKind.SERIAL, I.For(i, const(0), const(16), ForKind.SERIAL, guarded)), A)
    out = simplify_func(partition_loops(f))
    main, tail = out.body.seq
    assert main.extent.value == 6 and isinstance(main.body.body, I.BufferStore)
    # The last outer iteration runs exactly the 4 in-range elements, with no guard left.
    assert isinstance(tail, I.For) and tail.extent.value == 4 and isinstance(tail.body, I.BufferStore)
    assert I.structural_equal(tail.body.indices[0], tail.loop_var + 96)
