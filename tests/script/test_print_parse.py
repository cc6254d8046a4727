"""Hand-built TIR shapes that the printer must write unambiguously and the parser read back equal."""

from kiln import ir
from kiln.ir import expr as E
from kiln.ir import stmt as S
from kiln.ir.dtype import HANDLE_T, INT64
from kiln.script import from_source


def _func(body, bufs, attrs=None, params=None):
    handles = [E.Var(b.name, HANDLE_T) for b in bufs]
    return S.PrimFunc(tuple(params or handles), body, None,
                      {h: b for h, b in zip(params or handles, bufs)}, attrs or {"global_symbol": "f"})


def _roundtrip(f, same_text=True):
    text = f.script()
    back = from_source(text)
    assert ir.structural_equal(back, f), text
    if same_text:
        assert back.script() == text
    return text


def test_allocation_followed_by_siblings_prints_as_a_with_block():
    A = S.decl_buffer((4,), "float32", "A")
    scratch = S.decl_buffer((4,), "float32", "s", scope="local")
    inner = S.BufferStore(scratch, E.const(1.0), (E.const(0),))
    body = S.SeqStmt((S.Allocate(scratch, (E.const(4),), inner),
                      S.BufferStore(A, E.const(2.0), (E.const(0),))))
    text = _roundtrip(_func(body, [A]))
    assert 'with T.allocate([4], "float32", "local") as s:' in text


def test_one_var_reused_by_sibling_loops_equals_two_vars():
    A = S.decl_buffer((8,), "float32", "A")
    i = E.Var("i")
    loop = S.For(i, E.const(0), E.const(8), S.ForKind.SERIAL, S.BufferStore(A, E.const(0.0), (i,)))
    text = _roundtrip(_func(S.SeqStmt((loop, loop)), [A]), same_text=False)
    assert "for i in" in text and "for i_1 in" not in text  # the same Var prints with one name
    # Two distinct Vars are not one Var used twice inside one loop nest.
    j = E.Var("j")
    nest = S.For(i, E.const(0), E.const(8), S.ForKind.SERIAL,
                 S.For(j, E.const(0), E.const(8), S.ForKind.SERIAL, S.BufferStore(A, E.const(0.0), (i,))))
    same = S.For(i, E.const(0), E.const(8), S.ForKind.SERIAL,
                 S.For(j, E.const(0), E.const(8), S.ForKind.SERIAL, S.BufferStore(A, E.const(0.0), (j,))))
    assert not ir.structural_equal(nest, same)


def test_nested_sequences_compare_flat():
    A = S.decl_buffer((2,), "float32", "A")
    s0 = S.BufferStore(A, E.const(0.0), (E.const(0),))
    s1 = S.BufferStore(A, E.const(1.0), (E.const(1),))
    assert ir.structural_equal(S.SeqStmt((S.SeqStmt((s0, s1)),)), S.SeqStmt((s0, s1)))
    assert not ir.structural_equal(S.SeqStmt((s0, s1)), S.SeqStmt((s1, s0)))


def test_zero_dim_buffers_int64_loops_and_let_bindings():
    out = S.decl_buffer((), "float32", "out")
    A = S.decl_buffer((E.const(16, "int64"),), "float32", "A")
    k = E.Var("k", INT64)
    x = E.Var("x", INT64)
    body = S.For(k, E.const(0, "int64"), E.const(16, "int64"), S.ForKind.SERIAL,
                 S.LetStmt(x, k * E.const(1, "int64"),
                           S.BufferStore(out, E.BufferLoad(out, (), out.dtype) + E.BufferLoad(A, (x,), A.dtype), ())))
    text = _roundtrip(_func(body, [out, A]))
    assert "out[()] = out[()] + A[x]" in text and "T.serial(T.int64(16))" in text


def test_kernel_whose_parameter_is_the_buffer_data_and_var_sets():
    A = S.decl_buffer((E.Var("n"),), "float32", "A")
    n = A.shape[0]
    body = S.BufferStore(A, E.const(0.0), (n - 1,))
    f = _func(body, [A], {"global_symbol": "k", "shape_vars": frozenset({n})}, params=[A.data])
    text = _roundtrip(f)
    assert "T.match_buffer(A, (n,), \"float32\", data=A)" in text and "frozenset({n})" in text


def test_calls_whose_dtype_the_shorthand_would_not_give_are_explicit():
    A = S.decl_buffer((4,), "int32", "A")
    odd = E.Call(E.INT32, "tir.exp", (E.const(1.0),))  # not the float dtype T.exp would give
    text = _roundtrip(_func(S.BufferStore(A, odd, (E.const(0),)), [A]))
    assert 'T.call_intrin("int32", "tir.exp", T.float32(1.0))' in text
