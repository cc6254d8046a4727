"""``tvm.tir.ir_builder``: write a TIR statement imperatively, as ``te.extern`` bodies do.

    ib = tvm.tir.ir_builder.create()
    a = ib.buffer_ptr(ins[0])
    with ib.for_range(0, n, name="i") as i:
        with ib.if_scope(a[i] > 0):
            out[i] = a[i]
    stmt = ib.get()

Statements go into the innermost open scope; scopes (loops, ifs, new_scope) close when their
``with`` block ends. ``allocate`` and ``let`` wrap everything emitted after them in the same scope.
"""

from __future__ import annotations

from contextlib import contextmanager

from kiln.errors import CompileError
from kiln.ir import expr as E
from kiln.ir.dtype import BOOL_T, HANDLE_T
from kiln.ir.dtype import dtype as _dtype
from kiln.ir.expr import IterVar, PrimExpr, Var, convert
from kiln.ir.stmt import (
    Allocate, AttrStmt, Buffer, BufferStore, Evaluate, For, ForKind, IfThenElse, LetStmt, Stmt, While,
    decl_buffer, seq,
)

_KINDS = {"serial": ForKind.SERIAL, "parallel": ForKind.PARALLEL, "vectorize": ForKind.VECTORIZED,
          "unroll": ForKind.UNROLLED}


class BufferVar:
    """Element access to a buffer: ``x[i, j]`` (one index per dim) or ``x[k]`` (flat, row-major)
    reads; ``x[...] = v`` emits a store into the builder."""

    def __init__(self, builder: "IRBuilder", buffer: Buffer):
        self._builder = builder
        self._buffer = buffer
        self._flat: Buffer | None = None

    @property
    def buffer(self) -> Buffer:
        return self._buffer

    @property
    def dtype(self):
        return self._buffer.dtype

    @property
    def data(self) -> Var:
        return self._buffer.data

    def asobject(self) -> Buffer:
        return self._buffer

    def _access(self, index) -> tuple[Buffer, tuple]:
        idx = list(index) if isinstance(index, (list, tuple)) else [index]
        idx = [i.var if isinstance(i, IterVar) else i for i in idx]
        out = []
        for i in idx:
            e = convert(i)
            if not isinstance(e, PrimExpr) or not e.dtype.is_integer:
                raise TypeError(f"buffer {self._buffer.name}: index {i!r} must be an integer expression")
            out.append(e)
        buf = self._buffer
        if len(out) == len(buf.shape):
            return buf, tuple(out)
        if len(out) == 1:
            return self._flat_view(), tuple(out)
        raise IndexError(f"buffer {buf.name} has {len(buf.shape)} dims but is indexed with {len(out)} indices")

    def _flat_view(self) -> Buffer:
        # One index into an n-d buffer addresses its row-major storage: a 1-d view of the same data.
        if self._flat is None:
            buf = self._buffer
            if buf.strides:
                raise IndexError(f"buffer {buf.name} has strides; index it with one index per dim")
            n = convert(1)
            for d in buf.shape:
                n = n * d
            from kiln.tir.simplify import simplify

            self._flat = decl_buffer((simplify(n),), buf.dtype, buf.name, data=buf.data, scope=buf.scope)
        return self._flat

    def __getitem__(self, index) -> PrimExpr:
        buf, idx = self._access(index)
        return E.BufferLoad(buf, idx, buf.dtype)

    def __setitem__(self, index, value) -> None:
        buf, idx = self._access(index)
        value = convert(value)
        if not isinstance(value, PrimExpr):
            raise TypeError(f"buffer {buf.name}: stored value {value!r} is not an expression")
        if value.dtype != buf.dtype:
            if value.dtype.lanes != buf.dtype.lanes and value.dtype.element_of() != buf.dtype:
                raise TypeError(f"buffer {buf.name}: storing {value.dtype} into a {buf.dtype} buffer")
            if value.dtype.lanes == buf.dtype.lanes:
                value = E.cast(value, buf.dtype)
        self._builder.emit(BufferStore(buf, value, idx))


class IRBuilder:
    """Collects statements; ``get()`` returns them as one statement."""

    def __init__(self):
        self._seq_stack: list[list] = [[]]
        self.nidx = 0

    # Emitting ---------------------------------------------------------------------------------
    def emit(self, stmt) -> None:
        """Append a statement; an expression is evaluated for its effect. A callable
        ``f(rest) -> Stmt`` wraps every statement emitted after it in this scope."""
        if isinstance(stmt, PrimExpr):
            stmt = Evaluate(stmt)
        if not (isinstance(stmt, Stmt) or callable(stmt)):
            raise TypeError(f"ir_builder.emit: expected a statement, got {type(stmt).__name__}")
        self._seq_stack[-1].append(stmt)

    def _pop_seq(self) -> Stmt:
        items = self._seq_stack.pop()
        body: Stmt | None = None
        for item in reversed(items):
            if callable(item) and not isinstance(item, Stmt):
                body = item(body if body is not None else Evaluate(E.const(0, "int32")))
            else:
                body = item if body is None else seq(item, body)
        return body if body is not None else Evaluate(E.const(0, "int32"))

    def get(self) -> Stmt:
        """The statement built so far (every scope must be closed)."""
        if len(self._seq_stack) != 1:
            raise CompileError("ir_builder.get: a for_range/if_scope is still open; call get() after the with blocks")
        out = self._pop_seq()
        self._seq_stack.append([])
        return out

    # Scopes -------------------------------------------------------------------------------------
    @contextmanager
    def for_range(self, begin, end, name: str = "i", dtype=None, kind: str = "serial"):
        """A loop ``for name in range(begin, end)``; yields the loop variable."""
        if kind not in _KINDS:
            raise ValueError(f"ir_builder.for_range: kind={kind!r} is not one of {sorted(_KINDS)}")
        if name == "i":
            # Nested default names read i, j, k, then i_3, i_4, ...
            name = chr(ord("i") + self.nidx) if self.nidx < 3 else f"i_{self.nidx}"
            self.nidx += 1
        begin, end = convert(begin), convert(end)
        if dtype is None:
            dtype = end.dtype if end.dtype.bits >= begin.dtype.bits else begin.dtype
        dtype = _dtype(dtype)
        loop_var = Var(name, dtype)
        self._seq_stack.append([])
        yield loop_var
        body = self._pop_seq()
        from kiln.tir.simplify import simplify

        extent = simplify(E.cast(end, dtype) - E.cast(begin, dtype))
        self.emit(For(loop_var, E.cast(begin, dtype) if begin.dtype != dtype else begin, extent, _KINDS[kind], body))

    @contextmanager
    def while_loop(self, condition):
        """``while condition:`` the body."""
        self._seq_stack.append([])
        yield
        self.emit(While(_cond(condition, "while_loop"), self._pop_seq()))

    @contextmanager
    def if_scope(self, cond):
        """``if cond:`` the body; an ``else_scope`` may follow directly."""
        self._seq_stack.append([])
        yield
        self.emit(IfThenElse(_cond(cond, "if_scope"), self._pop_seq()))

    @contextmanager
    def else_scope(self):
        """The else branch of the if_scope emitted just before."""
        current = self._seq_stack[-1]
        if not current or not isinstance(current[-1], IfThenElse) or current[-1].else_case is not None:
            raise CompileError("ir_builder.else_scope must directly follow an if_scope")
        prev = current.pop()
        self._seq_stack.append([])
        yield
        self.emit(IfThenElse(prev.condition, prev.then_case, self._pop_seq()))

    @contextmanager
    def new_scope(self):
        """A nested scope: allocations and lets inside it end with it."""
        self._seq_stack.append([])
        yield
        self.emit(self._pop_seq())

    # Storage and names ------------------------------------------------------------------------
    def allocate(self, dtype, shape, name: str = "buf", scope: str = "global") -> BufferVar:
        """Scratch storage of ``shape`` for the rest of the current scope."""
        shape = shape if isinstance(shape, (list, tuple)) else [shape]
        buf = decl_buffer(shape, dtype, name, scope=scope or "global")
        from kiln.tir.simplify import simplify

        n = convert(1)
        for d in buf.shape:
            n = n * d
        size = simplify(n)
        self.emit(lambda body: Allocate(buf, (size,), body))
        return BufferVar(self, buf)

    def buffer_ptr(self, buf: Buffer, shape=None) -> BufferVar:
        """Element access to ``buf`` (a te.extern input or output): ``x = ib.buffer_ptr(outs[0])``."""
        if not isinstance(buf, Buffer):
            raise TypeError(f"ir_builder.buffer_ptr expects a tvm.tir.Buffer, got {type(buf).__name__}")
        if shape is not None:
            buf = decl_buffer(shape, buf.dtype, buf.name, data=buf.data, scope=buf.scope)
        return BufferVar(self, buf)

    def pointer(self, content_type, name: str = "ptr", scope: str = "global") -> BufferVar:
        """A new pointer variable to ``content_type`` elements, indexed with one index."""
        data = Var(name, HANDLE_T)
        buf = decl_buffer((convert(1),), content_type, name, data=data, scope=scope or "global")
        return BufferVar(self, buf)

    def let(self, var_name: str, value) -> Var:
        """A variable bound to ``value`` for the rest of the current scope."""
        value = convert(value)
        v = Var(var_name, value.dtype)
        self.emit(lambda body: LetStmt(v, value, body))
        return v

    def scope_attr(self, node, attr_key: str, value) -> None:
        """An attribute over the rest of the current scope. ``"thread_extent"`` of a
        ``te.thread_axis`` binds that GPU thread axis with ``value`` threads (kiln keeps thread
        bindings as loops of kind THREAD_BINDING, so it becomes one)."""
        value = convert(value)
        if attr_key == "thread_extent":
            if not isinstance(node, IterVar) or not node.thread_tag:
                raise TypeError(f"ir_builder.scope_attr: thread_extent needs a te.thread_axis, got {node!r}")
            iv = node
            self.emit(lambda body: For(iv.var, E.const(0, iv.var.dtype), E.cast(value, iv.var.dtype)
                                       if value.dtype != iv.var.dtype else value, ForKind.THREAD_BINDING, body, iv))
            return
        self.emit(lambda body: AttrStmt(node, attr_key, value, body))

    def likely(self, expr) -> PrimExpr:
        from kiln.tir.op import likely

        return likely(expr)


def _cond(cond, where: str) -> PrimExpr:
    c = convert(cond)
    if not isinstance(c, PrimExpr):
        raise TypeError(f"ir_builder.{where}: condition {cond!r} is not an expression")
    if c.dtype != BOOL_T:
        c = E.NE(c, E.const(0, c.dtype), BOOL_T)
    return c


def create() -> IRBuilder:
    """A new IRBuilder: ``ib = tvm.tir.ir_builder.create()``."""
    return IRBuilder()
