"""inject_virtual_threads on hand-built loop nests, run before and after by a small interpreter.

The reference is the same statement run with the virtual-thread loop as a plain loop (each
iteration on its own copy of the buffers allocated inside): the injected statement must leave
the same values in the output array. Two cases a plain load/store walk misses: a buffer written
only through an intrinsic's ``access_ptr`` (tensorize), and coprocessor threads ("cthread"),
where every allocation is private and whole loop nests run per thread.
"""

import numpy as np
import pytest

from kiln.errors import CompileError
from kiln.ir import expr as E
from kiln.ir.expr import IterVar, Range
from kiln.ir.functor import Visitor
from kiln.ir.stmt import (Allocate, BufferStore, Evaluate, For, ForKind, PrimFunc, SeqStmt, decl_buffer)
from kiln.tir.transform.inject_virtual_thread import inject_virtual_threads

I32 = "int32"


def _var(name):
    return E.Var(name)


def _loop(var, n, body, tag=""):
    if tag:
        iv = IterVar(Range(E.const(0), E.const(n)), var, thread_tag=tag)
        return For(var, E.const(0), E.const(n), ForKind.THREAD_BINDING, body, thread_binding=iv)
    return For(var, E.const(0), E.const(n), ForKind.SERIAL, body)


class _Machine:
    """Runs For/SeqStmt/Allocate/BufferStore and the test intrinsic ``test.fill(ptr, value, n)``
    (ptr[0:n] = value) on numpy arrays. A loop bound to a virtual thread runs as a plain loop,
    each iteration with fresh buffers for what it allocates (the reference semantics)."""

    def __init__(self, arrays):
        self.mem = dict(arrays)  # data Var -> numpy array

    def expr(self, e, env):
        if isinstance(e, E.IntImm):
            return int(e.value)
        if isinstance(e, E.Var):
            return env[e]
        if isinstance(e, E.BufferLoad):
            return int(self.mem[e.buffer.data][self.expr(e.indices[0], env)])
        ops = {E.Add: lambda a, b: a + b, E.Sub: lambda a, b: a - b, E.Mul: lambda a, b: a * b,
               E.FloorDiv: lambda a, b: a // b, E.FloorMod: lambda a, b: a % b}
        if type(e) in ops:
            return ops[type(e)](self.expr(e.a, env), self.expr(e.b, env))
        if isinstance(e, E.Cast):
            return self.expr(e.value, env)
        raise NotImplementedError(type(e).__name__)

    def run(self, s, env):
        if isinstance(s, SeqStmt):
            for x in s.seq:
                self.run(x, env)
        elif isinstance(s, For):
            lo = self.expr(s.min, env)
            for v in range(lo, lo + self.expr(s.extent, env)):
                self.run(s.body, {**env, s.loop_var: v})
        elif isinstance(s, Allocate):
            self.mem[s.buffer.data] = np.full(self.expr(s.extents[0], env), -999, np.int64)
            self.run(s.body, env)
        elif isinstance(s, BufferStore):
            self.mem[s.buffer.data][self.expr(s.indices[0], env)] = self.expr(s.value, env)
        elif isinstance(s, Evaluate) and s.value.op == "tir.test.fill":
            ptr, value, n = s.value.args
            assert ptr.op == "tir.tvm_access_ptr"
            start = self.expr(ptr.args[2], env)
            self.mem[ptr.args[1]][start:start + self.expr(n, env)] = self.expr(value, env)
        else:
            raise NotImplementedError(type(s).__name__)


def _fill(buf, value, n, offset=0):
    return Evaluate(E.Call(E.const(0).dtype, "tir.test.fill", (buf.access_ptr("w", offset=offset), value, E.const(n))))


def _func(body, *bufs):
    return PrimFunc(tuple(b.data for b in bufs), body, buffer_map={b.data: b for b in bufs},
                    attrs={"global_symbol": "f"})


def _run(func, out_size):
    out = func.params[0]
    m = _Machine({out: np.zeros(out_size, np.int64)})
    m.run(func.body, {})
    return m.mem[out]


def _allocs(stmt):
    found = {}

    class _Find(Visitor):
        def visit_Allocate(self, op):
            found[op.buffer.name] = op.extents[0].value
            self.generic_visit(op)

    _Find().visit(stmt)
    return found


def test_buffer_written_through_access_ptr_gets_a_copy_per_thread():
    # for v in vthread(2): acc = alloc(4); test.fill(acc.access_ptr, v + 7); out[v*4 + i] = acc[i]
    out = decl_buffer((8,), I32, name="out")
    acc = decl_buffer((4,), I32, name="acc", scope="local")
    v, i = _var("v"), _var("i")
    body = Allocate(acc, (E.const(4),), SeqStmt((
        _fill(acc, v + 7, 4),
        _loop(i, 4, BufferStore(out, acc[i], (v * 4 + i,))))))
    func = _func(_loop(v, 2, body, "vthread"), out)
    want = _run(func, 8)
    np.testing.assert_array_equal(want, [7, 7, 7, 7, 8, 8, 8, 8])
    got = inject_virtual_threads(func)
    # the intrinsic writes acc with a value that depends on the thread: one copy per thread, each
    # call pointing at its own copy (before, the pass saw no store and shared one acc)
    assert _allocs(got.body) == {"acc": 8}
    np.testing.assert_array_equal(_run(got, 8), want)


def test_access_ptr_offset_follows_the_thread_copy():
    # the copy per thread comes from a store; a second intrinsic writes half the tile through a
    # pointer at element offset 2: it must land in the thread's own copy
    out = decl_buffer((8,), I32, name="out")
    acc = decl_buffer((4,), I32, name="acc", scope="local")
    v, i, j = _var("v"), _var("i"), _var("j")
    body = Allocate(acc, (E.const(4),), SeqStmt((
        _loop(j, 4, BufferStore(acc, v * 10 + j, (j,))),
        _fill(acc, E.const(5), 2, offset=2),
        _loop(i, 4, BufferStore(out, acc[i], (v * 4 + i,))))))
    func = _func(_loop(v, 2, body, "vthread"), out)
    want = _run(func, 8)
    np.testing.assert_array_equal(want, [0, 1, 5, 5, 10, 11, 5, 5])
    np.testing.assert_array_equal(_run(inject_virtual_threads(func), 8), want)


def test_bare_data_pointer_of_a_private_buffer_is_refused():
    out = decl_buffer((8,), I32, name="out")
    acc = decl_buffer((4,), I32, name="acc", scope="local")
    v, i = _var("v"), _var("i")
    bare = Evaluate(E.Call(E.const(0).dtype, "tir.test.opaque", (acc.data, E.const(0))))
    body = Allocate(acc, (E.const(4),), SeqStmt((
        _loop(i, 4, BufferStore(acc, v + i, (i,))),
        bare,
        _loop(i, 4, BufferStore(out, acc[i], (v * 4 + i,))))))
    with pytest.raises(CompileError, match=r"tir.test.opaque takes buffer acc by its data pointer.*access_ptr"):
        inject_virtual_threads(_func(_loop(v, 2, body, "vthread"), out))


def _pipeline(tag):
    """for v in <tag>(2): for k in 3: tile = alloc(4); tile[i] = k*4 + i (the same for both
    threads); out[v*12 + k*4 + i] = tile[i] + v."""
    out = decl_buffer((24,), I32, name="out")
    tile = decl_buffer((4,), I32, name="tile", scope="local")
    v, k, i, i2 = _var("v"), _var("k"), _var("i"), _var("i2")
    step = Allocate(tile, (E.const(4),), SeqStmt((
        _loop(i, 4, BufferStore(tile, k * 4 + i, (i,))),
        _loop(i2, 4, BufferStore(out, tile[i2] + v, (v * 12 + k * 4 + i2,))))))
    return _func(_loop(v, 2, _loop(k, 3, step), tag), out)


def test_vthread_shares_what_does_not_depend_on_the_thread():
    func = _pipeline("vthread")
    want = _run(func, 24)
    got = inject_virtual_threads(func)
    assert _allocs(got.body) == {"tile": 4}  # the copy into tile runs once for both threads
    np.testing.assert_array_equal(_run(got, 24), want)


def test_cthread_keeps_private_tiles_and_whole_nests_per_thread():
    func = _pipeline("cthread")
    want = _run(func, 24)
    got = inject_virtual_threads(func)
    np.testing.assert_array_equal(_run(got, 24), want)
    assert _allocs(got.body) == {"tile": 8}  # private even though its stores do not use v
    # the k loop holds the allocation, so it is entered; inside, each loop nest (the copy, the
    # store) runs whole for thread 0, then for thread 1: four loops, no interleaving inside them
    k_loop = got.body
    assert isinstance(k_loop, For) and k_loop.kind == ForKind.SERIAL
    steps = k_loop.body.body.seq
    assert [type(x).__name__ for x in steps] == ["For"] * 4
    assert all(isinstance(x.body, BufferStore) for x in steps)
    starts = [x.body.indices[0] for x in steps[:2]]
    assert {str(s) for s in starts} == {"i", "i + 4"}
