"""Virtual threads: a loop bound to ``vthread`` becomes interleaved copies of the work inside it.

``s[C].bind(v, te.thread_axis("vthread"))`` says the iterations of v are independent and may
be interleaved. Run as a loop, each iteration would repeat everything inside it, the block's
shared-memory fetches included. Instead the loop is pushed down the statement tree:

- a statement that does not use the loop variable runs once (a shared tile fetched for all the
  virtual threads);
- sequences, serial loops and thread loops are entered (their iterations are independent of
  the virtual thread's);
- a buffer allocated inside whose stores depend on the variable gets one copy per virtual thread
  (the register tiles), indexed by ``x * size``;
- anything else that uses the variable is repeated with x = 0, 1, ..., so indices into the
  private copies are constants the kernel compiler keeps in registers.

``te.thread_axis("cthread")`` binds coprocessor threads (an accelerator's latency hiding, as
kiln/vta uses them): nothing is shared. Every buffer allocated inside gets one copy per thread,
loops are entered only where they hold allocations (the steps of a pipeline), and every other
statement, a whole loop nest of copies or of intrinsic calls, runs once per thread in turn. So
thread 1's loads are issued before thread 0's compute and the two overlap on the device.

A buffer with per-thread copies is also reached through intrinsic calls (``tensorize``): a
``buffer.access_ptr(...)`` argument (``tir.tvm_access_ptr``) gets the thread's offset added to
its element offset, and its writes count as stores. A call that takes such a buffer's bare data
pointer cannot be offset and is refused with the call's name.

Runs before split_host_device, on loops of kind THREAD_BINDING whose tag starts with "vthread"
or "cthread" (kiln/vta runs it on its own lowered functions).
"""

from __future__ import annotations

from dataclasses import replace

from kiln.errors import CompileError
from kiln.ir import expr as E
from kiln.ir.functor import Mutator, Visitor, substitute, uses_var
from kiln.ir.stmt import Allocate, AttrStmt, BufferStore, For, ForKind, IfThenElse, LetStmt, PrimFunc, SeqStmt, seq

MAX_COPIES = 64  # larger virtual-thread extents stay a loop (#pragma unroll)


def _thread_kind(s) -> str:
    """"vthread", "cthread" or "" (not a virtual-thread loop)."""
    if not (isinstance(s, For) and s.kind == ForKind.THREAD_BINDING):
        return ""
    tag = getattr(s.thread_binding, "thread_tag", "") or ""
    return next((k for k in ("vthread", "cthread") if tag.startswith(k)), "")


def _is_vthread(s) -> bool:
    return bool(_thread_kind(s))


class _Inject(Mutator):
    def __init__(self, symbol: str):
        super().__init__()
        self.symbol = symbol

    def visit_For(self, op):
        body = self.visit(op.body)  # inner virtual threads first
        kind = _thread_kind(op)
        if not kind:
            return op if body is op.body else replace(op, body=body)
        if not isinstance(op.extent, E.IntImm) or not isinstance(op.min, E.IntImm):
            raise CompileError(f"{self.symbol}: the loop {op.loop_var.name} bound to {kind} needs a constant "
                               f"extent, got {op.extent}")
        return _Push(op.loop_var, op.min.value, op.extent.value, share=kind == "vthread").push(body)


class _Push:
    """Pushes one virtual-thread loop down: ``share`` (vthread) runs what does not depend on the
    thread once; without it (cthread) every allocation is private and loop nests are units."""

    def __init__(self, var, lo: int, n: int, share: bool = True):
        self.var, self.lo, self.n, self.share = var, lo, n, share

    def uses(self, node) -> bool:
        return uses_var(node, lambda v: v is self.var)

    def push(self, s):
        if not self.uses(s):
            return s
        if isinstance(s, SeqStmt):
            return seq(*[self.push(c) for c in s.seq])
        if isinstance(s, For) and not _is_vthread(s) and not self.uses(s.min) and not self.uses(s.extent) and \
                (self.share or _holds_allocation(s.body)):
            return replace(s, body=self.push(s.body))
        if isinstance(s, Allocate):
            return self._allocate(s)
        if isinstance(s, AttrStmt) and not self.share and not self.uses(s.value):
            return replace(s, body=self.push(s.body))
        if isinstance(s, LetStmt) and not self.uses(s.value):
            return replace(s, body=self.push(s.body))
        if isinstance(s, IfThenElse) and not self.uses(s.condition):
            return replace(s, then_case=self.push(s.then_case),
                           else_case=None if s.else_case is None else self.push(s.else_case))
        return self.repeat(s)

    def repeat(self, s):
        if self.n > MAX_COPIES:
            return For(self.var, E.const(self.lo, self.var.dtype), E.const(self.n, self.var.dtype),
                       ForKind.UNROLLED, s)
        return seq(*[substitute(s, {self.var: E.const(self.lo + k, self.var.dtype)}) for k in range(self.n)])

    def _allocate(self, s: Allocate):
        if self.share and not _stores_depend(s.body, s.buffer, self.var):
            return replace(s, body=self.push(s.body))
        if len(s.extents) != 1 or len(s.buffer.shape) != 1:
            raise CompileError(f"buffer {s.buffer.name} under a virtual-thread loop is not flattened")
        size = s.extents[0]
        new = replace(s.buffer, shape=(E.const(self.n) * size if not isinstance(size, E.IntImm)
                                       else E.const(self.n * size.value),))
        offset = (self.var - self.lo) * size if self.lo else self.var * size
        body = _Reindex(s.buffer, new, offset).visit(s.body)
        return Allocate(new, (new.shape[0],), self.push(body), s.condition)


def _holds_allocation(s) -> bool:
    found = []

    class _Find(Visitor):
        def visit_Allocate(self, op):
            found.append(op)

    _Find().visit(s)
    return bool(found)


def _writes_through_pointer(stmt, data) -> bool:
    """Whether an intrinsic call in stmt takes ``access_ptr`` of data with the write bit."""
    found = []

    class _Find(Visitor):
        def visit_Call(self, op):
            if op.op == "tir.tvm_access_ptr" and op.args[1] is data and \
                    (not isinstance(op.args[4], E.IntImm) or op.args[4].value & 2):
                found.append(op)
            self.generic_visit(op)

    _Find().visit(stmt)
    return bool(found)


def _stores_depend(body, buf, var) -> bool:
    """Whether a store into buf (or an intrinsic writing it through a pointer) uses var."""
    found = []

    class _Find(Visitor):
        def visit_BufferStore(self, op):
            if op.buffer.data is buf.data and uses_var(op, lambda v: v is var):
                found.append(op)
            self.generic_visit(op)

        def visit_Evaluate(self, op):
            if _writes_through_pointer(op, buf.data) and uses_var(op, lambda v: v is var):
                found.append(op)

    _Find().visit(body)
    return bool(found)


class _Reindex(Mutator):
    """Accesses of old go to new at index + offset (each virtual thread's own copy)."""

    def __init__(self, old, new, offset):
        super().__init__()
        self.old, self.new, self.offset = old, new, offset

    def _index(self, idx):
        i = idx[0]
        if isinstance(i, E.Ramp):
            return (E.Ramp(i.base + self.offset, i.stride, i.lanes, i.dtype),)
        return (i + self.offset,)

    def visit_BufferLoad(self, op):
        op = self.generic_visit(op)
        if op.buffer.data is not self.old.data:
            return op
        return E.BufferLoad(self.new, self._index(op.indices), op.dtype)

    def visit_BufferStore(self, op):
        op = self.generic_visit(op)
        if op.buffer.data is not self.old.data:
            return op
        return BufferStore(self.new, op.value, self._index(op.indices))

    def visit_Call(self, op):
        if op.op == "tir.tvm_access_ptr" and op.args[1] is self.old.data:
            args = [self.visit(a) for a in op.args]
            args[2] = args[2] + self.offset  # the element offset of this thread's copy
            return E.Call(op.dtype, op.op, tuple(args))
        for a in op.args:
            if a is self.old.data:
                raise CompileError(f"{op.op} takes buffer {self.old.name} by its data pointer, but the buffer has "
                                   "one copy per virtual thread here; pass buffer.access_ptr(...) so the thread's "
                                   "offset can be added")
        return self.generic_visit(op)


def inject_virtual_threads(func: PrimFunc) -> PrimFunc:
    from .simplify_stmt import simplify_func

    body = _Inject(func.attrs.get("global_symbol", "main")).visit(func.body)
    if body is func.body:
        return func
    return simplify_func(replace(func, body=body))  # fold the copies' constant indices
