"""Statements, buffers and functions of the loop IR (TIR)."""

from __future__ import annotations

import enum
from dataclasses import field
from typing import Any

from .dtype import DType, HANDLE_T, INT32, dtype as _dtype
from .expr import Node, PrimExpr, Var, convert, node


class Stmt(Node):
    """Base of statements."""

    __slots__ = ()


@node
class Buffer(Node):
    """A region of memory seen as a multi-dimensional array.

    ``data`` is the handle Var holding its address; ``scope`` is "global" (function argument
    or heap), "local" (private scratch) or "shared" (GPU block memory). Strides empty means
    compact row-major. Buffers are compared by identity.
    """

    name: str
    data: Var
    dtype: DType
    shape: tuple
    strides: tuple = ()
    elem_offset: PrimExpr | None = None
    scope: str = "global"
    offset_factor: int = 0

    __hash__ = object.__hash__

    def vload(self, begin, dtype=None):
        from .expr import BufferLoad

        return BufferLoad(self, tuple(convert(b) for b in begin), _dtype(dtype) if dtype else self.dtype)

    def vstore(self, begin, value):
        return BufferStore(self, convert(value), tuple(convert(b) for b in begin))

    def __getitem__(self, indices):
        from .expr import BufferLoad

        if not isinstance(indices, tuple):
            indices = (indices,)
        return BufferLoad(self, tuple(convert(i) for i in indices), self.dtype)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def access_ptr(self, access_mask, ptr_type="handle", content_lanes=1, offset=0, extent=None):
        """A pointer to the buffer's first element (plus offset elements): a ``tir.tvm_access_ptr``
        call. access_mask is "r", "w", "rw" or 1 (read) | 2 (write); barriers use it."""
        from .expr import Call, IntImm

        if isinstance(access_mask, str):
            access_mask = ("r" in access_mask) * 1 | ("w" in access_mask) * 2
        start = convert(offset) if self.elem_offset is None else self.elem_offset + convert(offset)
        if extent is None:
            extent = convert(1)
            for d in self.shape:
                extent = extent * d
        annot = Call(self.dtype, "tir.type_annotation", ())
        return Call(HANDLE_T, "tir.tvm_access_ptr",
                    (annot, self.data, start, convert(extent), IntImm(_dtype("int32"), int(access_mask))))


def decl_buffer(shape, dtype="float32", name="buffer", data=None, strides=None, elem_offset=None, scope="global",
                offset_factor=0) -> Buffer:
    """A new buffer with its own data handle. offset_factor > 0 gives it a symbolic elem_offset
    (a multiple of offset_factor), as tensor intrinsics' buffers need."""
    shape = tuple(convert(s) for s in (shape if isinstance(shape, (list, tuple)) else [shape]))
    data = data if data is not None else Var(name, HANDLE_T)
    if elem_offset is None and offset_factor:
        elem_offset = Var(f"{name}_elem_offset", shape[0].dtype if shape else _dtype("int32"))
    return Buffer(name, data, _dtype(dtype), shape, tuple(convert(s) for s in strides or ()),
                  convert(elem_offset) if elem_offset is not None else None, scope, int(offset_factor))


class ForKind(enum.IntEnum):
    SERIAL = 0
    PARALLEL = 1
    VECTORIZED = 2
    UNROLLED = 3
    THREAD_BINDING = 4


@node
class LetStmt(Stmt):
    """Bind var to value in body."""

    var: Var
    value: PrimExpr
    body: Stmt


@node
class AttrStmt(Stmt):
    """An annotation (attr_key = value) on node that holds for body: thread extents, pragmas."""

    node: Any
    attr_key: str
    value: PrimExpr
    body: Stmt


@node
class AssertStmt(Stmt):
    """Fail with message unless condition holds, then run body."""

    condition: PrimExpr
    message: PrimExpr
    body: Stmt


@node
class BufferStore(Stmt):
    """buffer[indices] = value. After flattening there is one index; a Ramp index stores a vector."""

    buffer: Buffer
    value: PrimExpr
    indices: tuple


@node
class Allocate(Stmt):
    """Storage for buffer (its data Var is bound inside body). Extents are the flat element count."""

    buffer: Buffer
    extents: tuple
    body: Stmt
    condition: PrimExpr | None = None


@node
class For(Stmt):
    """for loop_var in [min, min + extent): body. kind says how the loop runs."""

    loop_var: Var
    min: PrimExpr
    extent: PrimExpr
    kind: ForKind
    body: Stmt
    thread_binding: Any = None
    annotations: dict = field(default_factory=dict)


@node
class While(Stmt):
    """while condition: body."""

    condition: PrimExpr
    body: Stmt


@node
class IfThenElse(Stmt):
    """if condition: then_case else: else_case (else_case may be None)."""

    condition: PrimExpr
    then_case: Stmt
    else_case: Stmt | None = None


@node
class SeqStmt(Stmt):
    """Statements run in order."""

    seq: tuple

    def __len__(self) -> int:
        return len(self.seq)

    def __getitem__(self, i):
        return self.seq[i]


@node
class Evaluate(Stmt):
    """Evaluate an expression for its side effect (usually a Call)."""

    value: PrimExpr


def seq(*stmts) -> Stmt:
    """A SeqStmt of the given statements, flattening nested sequences and dropping no-ops."""
    out: list = []
    for s in stmts:
        if s is None:
            continue
        if isinstance(s, SeqStmt):
            out.extend(s.seq)
        elif isinstance(s, Evaluate) and isinstance(s.value, PrimExpr) and type(s.value).__name__ == "IntImm":
            continue
        else:
            out.append(s)
    if not out:
        return Evaluate(convert(0))
    return out[0] if len(out) == 1 else SeqStmt(tuple(out))


@node
class PrimFunc(Node):
    """A function over buffers: params are Vars; buffer_map gives the Buffer behind a handle param."""

    params: tuple
    body: Stmt
    ret_type: Any = None
    buffer_map: dict = field(default_factory=dict)
    attrs: dict = field(default_factory=dict)

    __hash__ = object.__hash__

    def with_attr(self, key: str, value) -> "PrimFunc":
        from dataclasses import replace

        return replace(self, attrs={**self.attrs, key: value})

    @property
    def name(self) -> str:
        return self.attrs.get("global_symbol", "main")


INT32_T = INT32
