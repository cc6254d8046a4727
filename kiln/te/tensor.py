"""Tensor expressions: placeholders, computes and reductions (the seed's ``te`` API)."""

from __future__ import annotations

import inspect
from typing import Callable

from kiln.ir.dtype import dtype as _dtype
from kiln.ir.expr import (
    IterType, IterVar, PrimExpr, ProducerLoad, Range, Reduce, Var, SizeVar, const, convert,
)


class Operation:
    """A node of the tensor graph; produces ``num_outputs`` tensors."""

    name: str
    tag: str = ""
    attrs: dict

    def output(self, index: int = 0) -> "Tensor":
        return self.outputs[index]

    @property
    def num_outputs(self) -> int:
        return len(self.outputs)

    @property
    def input_tensors(self) -> list["Tensor"]:
        return []

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name})"


class Tensor:
    """The value_index-th output of op, with a shape and dtype. ``A[i, j]`` or ``A(i, j)`` reads it."""

    __slots__ = ("op", "value_index", "shape", "dtype")

    def __init__(self, op: Operation, value_index: int, shape: tuple, dtype):
        self.op = op
        self.value_index = value_index
        self.shape = tuple(shape)
        self.dtype = _dtype(dtype)

    @property
    def name(self) -> str:
        return self.op.name if self.op.num_outputs == 1 else f"{self.op.name}.v{self.value_index}"

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __call__(self, *indices) -> ProducerLoad:
        if len(indices) == 1 and isinstance(indices[0], (list, tuple)):
            indices = tuple(indices[0])
        if len(indices) != len(self.shape):
            raise IndexError(f"tensor {self.name} has {len(self.shape)} dims but is indexed with {len(indices)} indices")
        return ProducerLoad(self, tuple(_index(i) for i in indices), self.dtype)

    def __getitem__(self, indices) -> ProducerLoad:
        if not isinstance(indices, tuple):
            indices = (indices,)
        return self(*indices)

    def __repr__(self) -> str:
        return f"Tensor(shape={[str(s) for s in self.shape]}, op.name={self.op.name})"

    __hash__ = object.__hash__

    def __eq__(self, other):  # identity, like TVM's same_as for tensors
        return self is other

    def __ne__(self, other):
        return self is not other


def _index(i) -> PrimExpr:
    e = convert(i)
    if not isinstance(e, PrimExpr):
        raise TypeError(f"tensor index {i!r} is not an expression")
    if not e.dtype.is_integer:
        raise TypeError(f"tensor index {e} has dtype {e.dtype}; indices must be integers")
    return e


class PlaceholderOp(Operation):
    """An input of the computation."""

    def __init__(self, name: str, shape: tuple, dtype):
        self.name = name
        self.attrs = {}
        self.shape = shape
        self.dtype = _dtype(dtype)
        self.outputs = [Tensor(self, 0, shape, dtype)]


class ComputeOp(Operation):
    """Tensors defined element-wise by expressions over the axes (and reductions)."""

    def __init__(self, name: str, tag: str, attrs: dict, axis: list[IterVar], body: list[PrimExpr]):
        self.name = name
        self.tag = tag
        self.attrs = dict(attrs or {})
        self.axis = list(axis)
        self.body = list(body)
        first = body[0]
        self.reduce_axis = list(first.axis) if isinstance(first, Reduce) else []
        shape = tuple(iv.dom.extent for iv in axis)
        self.outputs = [Tensor(self, i, shape, b.dtype) for i, b in enumerate(body)]

    @property
    def input_tensors(self) -> list[Tensor]:
        return collect_inputs(self.body)


def collect_inputs(exprs) -> list[Tensor]:
    from kiln.ir.functor import post_order_visit

    seen: dict[int, Tensor] = {}

    def visit(node):
        if isinstance(node, ProducerLoad) and id(node.producer) not in seen:
            seen[id(node.producer)] = node.producer

    for e in exprs:
        post_order_visit(e, visit)
    return list(seen.values())


# Public API --------------------------------------------------------------------------------


def _shape(shape) -> tuple:
    if not isinstance(shape, (list, tuple)):
        shape = (shape,)
    out = []
    for s in shape:
        e = convert(s)
        if not isinstance(e, PrimExpr) or not e.dtype.is_integer:
            raise TypeError(f"shape entry {s!r} must be an integer or an integer expression")
        out.append(e)
    return tuple(out)


def placeholder(shape, dtype="float32", name="placeholder") -> Tensor:
    """An input tensor: ``A = te.placeholder((n, m), name="A")``."""
    return PlaceholderOp(name, _shape(shape), dtype).output(0)


def compute(shape, fcompute: Callable, name="compute", tag="", attrs=None, varargs_names=None) -> Tensor | list[Tensor]:
    """A tensor whose element at index i is ``fcompute(*i)``: ``B = te.compute((n,), lambda i: A[i] + 1)``."""
    shape = _shape(shape)
    params = inspect.signature(fcompute).parameters
    has_varargs = any(p.kind == p.VAR_POSITIONAL for p in params.values())
    if has_varargs:
        names = list(varargs_names or [f"i{k}" for k in range(len(shape))])
    else:
        names = list(params)
        if len(names) != len(shape):
            raise ValueError(
                f"compute {name!r}: fcompute takes {len(names)} arguments but the shape has {len(shape)} dims"
            )
    axis = [IterVar(Range(const(0, s.dtype), s), Var(n, s.dtype), IterType.DATA_PAR) for n, s in zip(names, shape)]
    result = fcompute(*[iv.var for iv in axis])
    bodies = list(result) if isinstance(result, (list, tuple)) else [result]
    bodies = [convert(b) for b in bodies]
    for b in bodies:
        if not isinstance(b, PrimExpr):
            raise TypeError(f"compute {name!r}: fcompute returned {type(b).__name__}, expected an expression")
    reduces = [isinstance(b, Reduce) for b in bodies]
    if any(reduces) and not all(reduces):
        raise ValueError(f"compute {name!r}: either every output is a reduction or none is")
    op = ComputeOp(name, tag, attrs, axis, bodies)
    return op.outputs if len(op.outputs) > 1 else op.output(0)


def reduce_axis(dom, name="rv", thread_tag="") -> IterVar:
    """A reduction axis over ``dom``: a (begin, end) pair or a Range."""
    if isinstance(dom, (list, tuple)):
        if len(dom) != 2:
            raise ValueError(f"reduce_axis {name!r}: dom must be (begin, end), got {dom!r}")
        lo, hi = convert(dom[0]), convert(dom[1])
        from kiln.tir.simplify import simplify

        dom = Range(lo, simplify(hi - lo))
    elif not isinstance(dom, Range):
        raise TypeError(f"reduce_axis {name!r}: dom must be (begin, end) or a Range")
    return IterVar(dom, Var(name, dom.extent.dtype), IterType.COMM_REDUCE, thread_tag)


def thread_axis(dom=None, tag: str = "", name: str = "", span=None) -> IterVar:
    """A GPU thread axis: ``te.thread_axis("blockIdx.x")``."""
    if isinstance(dom, str):
        tag, dom = dom, None
    if not tag:
        raise ValueError("thread_axis needs a tag such as 'blockIdx.x' or 'threadIdx.x'")
    if isinstance(dom, (list, tuple)):
        from kiln.tir.simplify import simplify

        dom = Range(convert(dom[0]), simplify(convert(dom[1]) - convert(dom[0])))
    return IterVar(dom, Var(name or tag), IterType.THREAD_INDEX, tag)


def var(name="tindex", dtype="int32") -> Var:
    return Var(name, _dtype(dtype))


def size_var(name="size", dtype="int32") -> SizeVar:
    return SizeVar(name, _dtype(dtype))
