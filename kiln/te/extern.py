"""``te.extern``: a stage whose body is a TIR statement written by the user.

Recurrences (an RNN over time, a scan) are not element-wise expressions: each step reads what
the previous one wrote. ``te.extern`` lets a stage be any loop program over buffers, usually
built with ``tvm.tir.ir_builder``. The statement is written against placeholder buffers;
``te/lower.py`` binds them to the real buffers of the inputs and outputs and places the
statement where the stage's loop nest would go. An extern stage is scheduled as a whole: it
stays at the root (no split, no compute_at), and stages it reads are kept in memory.
"""

from __future__ import annotations

from typing import Callable, Sequence

from kiln.ir.dtype import dtype as _dtype
from kiln.ir.expr import PrimExpr
from kiln.ir.stmt import Buffer, Evaluate, Stmt, decl_buffer

from .tensor import Operation, Tensor, _shape


class ExternOp(Operation):
    """Outputs computed by ``body``, a statement over ``input_placeholders`` and ``output_placeholders``."""

    def __init__(self, name: str, tag: str, attrs: dict, inputs: list[Tensor], input_placeholders: list[Buffer],
                 output_placeholders: list[Buffer], body: Stmt):
        self.name = name
        self.tag = tag
        self.attrs = dict(attrs or {})
        self.inputs = list(inputs)
        self.input_placeholders = list(input_placeholders)
        self.output_placeholders = list(output_placeholders)
        self.body = body
        self.outputs = [Tensor(self, i, b.shape, b.dtype) for i, b in enumerate(output_placeholders)]

    @property
    def input_tensors(self) -> list[Tensor]:
        return list(self.inputs)


def extern(shape, inputs: Sequence[Tensor], fcompute: Callable, name: str = "extern", dtype=None,
           in_buffers=None, out_buffers=None, tag: str = "", attrs=None):
    """Tensors computed by a statement: ``fcompute(ins, outs)`` gets one buffer per input and per
    output and returns a TIR statement (or an expression, evaluated for its effect).

    ``shape`` is one shape or a list of shapes (one per output); ``dtype`` one dtype or a list
    (default: the first input's). Returns a tensor, or a list of them for several outputs.
    """
    inputs = list(inputs)
    for k, t in enumerate(inputs):
        if not isinstance(t, Tensor):
            raise TypeError(f"extern {name!r}: input {k} must be a te.Tensor, got {type(t).__name__}")
    multi = isinstance(shape, (list, tuple)) and len(shape) > 0 and isinstance(shape[0], (list, tuple))
    shapes = [_shape(s) for s in (shape if multi else [shape])]
    if dtype is None:
        if not inputs:
            raise ValueError(f"extern {name!r}: give dtype= when there are no inputs")
        dtypes = [inputs[0].dtype] * len(shapes)
    elif isinstance(dtype, (list, tuple)):
        dtypes = [_dtype(d) for d in dtype]
    else:
        dtypes = [_dtype(dtype)] * len(shapes)
    if len(dtypes) != len(shapes):
        raise ValueError(f"extern {name!r}: {len(shapes)} output shapes but {len(dtypes)} dtypes")
    ins = _buffers(in_buffers, [(t.shape, t.dtype, t.op.name) for t in inputs], name, "in_buffers")
    outs = _buffers(out_buffers, [(s, d, f"{name}_out{k}" if len(shapes) > 1 else name)
                                  for k, (s, d) in enumerate(zip(shapes, dtypes))], name, "out_buffers")
    body = fcompute(ins, outs)
    if isinstance(body, PrimExpr):
        body = Evaluate(body)
    if not isinstance(body, Stmt):
        raise TypeError(f"extern {name!r}: fcompute returned {type(body).__name__}; it must return a TIR "
                        "statement (e.g. ib.get() of a tvm.tir.ir_builder)")
    op = ExternOp(name, tag, attrs, inputs, ins, outs, body)
    return op.outputs if len(op.outputs) > 1 else op.output(0)


def _buffers(given, specs, name: str, what: str) -> list[Buffer]:
    if given is None:
        return [decl_buffer(s, d, n) for s, d, n in specs]
    given = list(given) if isinstance(given, (list, tuple)) else [given]
    if len(given) != len(specs):
        raise ValueError(f"extern {name!r}: {what} has {len(given)} buffers for {len(specs)} tensors")
    for b, (s, d, _) in zip(given, specs):
        if not isinstance(b, Buffer):
            raise TypeError(f"extern {name!r}: {what} must hold tvm.tir.Buffer objects, got {type(b).__name__}")
        if b.dtype != _dtype(d) or len(b.shape) != len(s):
            raise ValueError(f"extern {name!r}: buffer {b.name} ({b.dtype}, {len(b.shape)} dims) does not match "
                             f"its tensor ({d}, {len(s)} dims)")
    return given
