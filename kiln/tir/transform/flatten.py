"""Flatten multi-dimensional buffer accesses to one element index (row-major)."""

from __future__ import annotations

from dataclasses import replace

from kiln.ir import expr as E
from kiln.ir.stmt import Allocate, Buffer, BufferStore, PrimFunc
from kiln.ir.functor import Mutator
from kiln.tir.simplify import simplify


def flat_index(buf: Buffer, indices: tuple) -> E.PrimExpr:
    if len(indices) == 1 and len(buf.shape) <= 1:
        return indices[0]
    if buf.strides:
        out = None
        for i, s in zip(indices, buf.strides):
            out = i * s if out is None else out + i * s
        return out
    out = None
    for i, dim in zip(indices, buf.shape):
        out = i if out is None else out * dim + i
    return out if out is not None else E.const(0)


class _Flatten(Mutator):
    def __init__(self):
        super().__init__()
        self.flat: dict[int, Buffer] = {}

    def flat_buffer(self, buf: Buffer) -> Buffer:
        got = self.flat.get(id(buf))
        if got is None:
            n = None
            for d in buf.shape:
                n = d if n is None else n * d
            got = replace(buf, shape=(simplify(n) if n is not None else E.const(1),), strides=())
            self.flat[id(buf)] = got
        return got

    def visit_BufferLoad(self, op):
        op = self.generic_visit(op)
        if len(op.indices) == 1 and len(op.buffer.shape) == 1:
            return op
        return E.BufferLoad(self.flat_buffer(op.buffer), (simplify(flat_index(op.buffer, op.indices)),), op.dtype)

    def visit_BufferStore(self, op):
        op = self.generic_visit(op)
        if len(op.indices) == 1 and len(op.buffer.shape) == 1:
            return op
        return BufferStore(self.flat_buffer(op.buffer), op.value, (simplify(flat_index(op.buffer, op.indices)),))

    def visit_Allocate(self, op):
        body = self.visit(op.body)
        return Allocate(self.flat_buffer(op.buffer) if len(op.buffer.shape) != 1 else op.buffer, op.extents, body, op.condition)


def flatten_buffers(func: PrimFunc) -> PrimFunc:
    return replace(func, body=_Flatten().visit(func.body))
