"""Insert barriers into a GPU kernel where threads share memory.

A block's threads see each other's writes to shared memory only after a barrier. In each
statement sequence, a barrier goes before a statement that reads a shared buffer written by
an earlier statement since the last barrier (read after write), and before a statement that
writes a shared buffer read since the last barrier (write after read). In a loop whose body
writes a shared buffer that it also reads, a barrier ends the body, so the next iteration's
writes wait for this iteration's reads (the loop of a shared-memory tiled matmul).

Barriers only go into sequences outside conditionals: every thread must reach every barrier.
Statements that already hold barriers (cross-thread reductions) end with one, so they clear
the pending state.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import replace

from kiln.errors import CompileError
from kiln.ir import expr as E
from kiln.ir.functor import Mutator, Visitor, post_order_visit
from kiln.ir.stmt import Allocate, Evaluate, For, IfThenElse, PrimFunc, SeqStmt, seq

BARRIER_OP = "tir.tvm_storage_sync"


def barrier():
    return Evaluate(E.Call(E.const(0).dtype, BARRIER_OP, (E.StringImm("shared"),)))


def is_barrier(s) -> bool:
    return isinstance(s, Evaluate) and isinstance(s.value, E.Call) and s.value.op == BARRIER_OP


class _Access(Visitor):
    """Shared buffers (by data Var id) read and written by a statement; whether it syncs."""

    def __init__(self):
        super().__init__()
        self.reads: set = set()
        self.writes: set = set()
        self.syncs = False

    def visit_BufferLoad(self, op):
        if op.buffer.scope == "shared":
            self.reads.add(id(op.buffer.data))
        self.generic_visit(op)

    def visit_BufferStore(self, op):
        if op.buffer.scope == "shared":
            self.writes.add(id(op.buffer.data))
        self.generic_visit(op)

    def visit_Evaluate(self, op):
        if is_barrier(op):
            self.syncs = True
        self.generic_visit(op)

    def visit_AttrStmt(self, op):
        # A double-buffered prefetch writes the half nobody reads until the next barrier
        # (kiln/tir/transform/double_buffer.py places that barrier itself).
        if op.attr_key != "kiln.async_fetch":
            self.generic_visit(op)

    def visit_Call(self, op):
        # Tensor-core loads and stores reach memory through pointers: tvm_access_ptr's mask says how.
        if op.op == "tir.tvm_access_ptr" and id(op.args[1]) in _SHARED.get():
            mask = op.args[4].value
            if mask & 1:
                self.reads.add(id(op.args[1]))
            if mask & 2:
                self.writes.add(id(op.args[1]))
        self.generic_visit(op)


_SHARED: ContextVar[frozenset] = ContextVar("kiln_shared_handles", default=frozenset())


def access(s) -> _Access:
    a = _Access()
    a.visit(s)
    return a


def _ends_with_barrier(s) -> bool:
    while True:
        if is_barrier(s):
            return True
        if isinstance(s, SeqStmt):
            s = s.seq[-1]
        elif hasattr(s, "body") and not isinstance(s, (For, IfThenElse)):
            s = s.body
        else:
            return False


class _Sync(Mutator):
    def __init__(self, name: str):
        super().__init__()
        self.name = name

    def visit_IfThenElse(self, op):
        # No barrier may go where only some threads are: if one is needed there, the schedule
        # has threads of one block sharing memory under a condition that depends on the thread.
        for branch in (op.then_case, op.else_case):
            if branch is not None and self.visit(branch) is not branch:
                raise CompileError(f"{self.name}: shared memory is written and read under a condition "
                                   f"({op.condition}), where a barrier cannot go (not every thread reaches "
                                   "it); bind the stages that share memory to the same thread extents")
        return op

    def visit_AttrStmt(self, op):
        if op.attr_key == "kiln.async_fetch":  # only writes a tile nobody reads before the next barrier
            return op
        return self.generic_visit(op)

    def visit_For(self, op):
        body = self.visit(op.body)
        a = access(body)
        if a.reads & a.writes and not _ends_with_barrier(body):
            body = seq(body, barrier())
        return op if body is op.body else replace(op, body=body)

    def visit_SeqStmt(self, op):
        out = []
        written: set = set()
        read: set = set()
        for s in op.seq:
            if is_barrier(s):
                written, read = set(), set()
                out.append(s)
                continue
            a = access(s)
            if (a.reads & written) or (a.writes & read):
                out.append(barrier())
                written, read = set(), set()
            out.append(self.visit(s))
            if a.syncs and _ends_with_barrier(s):
                written, read = set(), set()
            else:
                written |= a.writes
                read |= a.reads
        # Unchanged sequences stay the same object: visit_IfThenElse tells by identity whether
        # a branch needed a barrier.
        if len(out) == len(op.seq) and all(x is y for x, y in zip(out, op.seq)):
            return op
        return seq(*out)


def insert_barriers(kernel: PrimFunc) -> PrimFunc:
    shared = set()
    post_order_visit(kernel.body, lambda n: shared.add(id(n.buffer.data))
                     if isinstance(n, Allocate) and n.buffer.scope == "shared" else None)
    token = _SHARED.set(frozenset(shared))
    try:
        return replace(kernel, body=_Sync(kernel.attrs.get("global_symbol", "kernel")).visit(kernel.body))
    finally:
        _SHARED.reset(token)
