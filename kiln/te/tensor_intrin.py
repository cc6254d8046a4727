"""Tensor intrinsics: a small computation declared in TE together with the statements that do it.

``decl_tensor_intrin(op, fintrin, binds=...)`` pairs the pattern (``op``, a compute over
placeholders) with ``fintrin(ins, outs)``, which builds TIR from one buffer per input and
output. ``s[C].tensorize(axis, intrin)`` (kiln/te/tensorize.py) checks that the loops under
``axis`` compute the same thing and puts the intrinsic's statements in their place, binding the
buffers to the regions of the real tensors.

fintrin returns one statement (the whole computation) or, for a reduction, a triple
``(body, reduce_init, reduce_update)``: body computes the tile from scratch, reduce_init clears
the output tile and reduce_update adds one slice of the reduction to it. Tensorize uses body when
the whole reduction is under the axis, else reduce_init before the outer reduction loops and
reduce_update inside them.
"""

from __future__ import annotations

from dataclasses import dataclass

from kiln.errors import ScheduleError
from kiln.ir import expr as E
from kiln.ir.dtype import INT32 as INT32_T
from kiln.ir.stmt import Buffer, Evaluate, Stmt, decl_buffer

from .tensor import ComputeOp, PlaceholderOp, Tensor


@dataclass(frozen=True, eq=False)
class TensorIntrin:
    """A declared intrinsic: op is the pattern, buffers[i] binds op.input_tensors + op.outputs."""

    name: str
    op: ComputeOp
    fintrin: object
    inputs: tuple  # the op's input Tensors, in buffer order
    buffers: tuple  # Buffers: one per input, then one per output

    def build(self):
        """(body, reduce_init, reduce_update) of fintrin; the last two None for a plain statement."""
        n = len(self.inputs)
        got = self.fintrin(list(self.buffers[:n]), list(self.buffers[n:]))
        if isinstance(got, (list, tuple)):
            if len(got) != 3:
                raise ScheduleError(f"tensor intrinsic {self.name}: fintrin returned {len(got)} items; return "
                                    "a statement or (body, reduce_init, reduce_update)")
            return tuple(_stmt(x, self.name) for x in got)
        return _stmt(got, self.name), None, None


def _stmt(x, name: str):
    if x is None or isinstance(x, Stmt):
        return x
    if isinstance(x, E.PrimExpr):
        return Evaluate(x)
    raise ScheduleError(f"tensor intrinsic {name}: fintrin must build TIR statements, got {type(x).__name__}")


def decl_tensor_intrin(op, fintrin, name: str = "tensor_intrin", binds=None, scalar_params=None,
                       default_buffer_params=None) -> TensorIntrin:
    """Declare a tensor intrinsic.

    ``op`` is the output operation of a compute over placeholders (the pattern), ``fintrin(ins,
    outs)`` returns the TIR that computes it, and ``binds`` maps tensors of op to the buffers
    fintrin sees (``tvm.tir.decl_buffer(..., strides=[te.var("s"), 1], offset_factor=16,
    scope="shared")``); tensors without a bind get a compact buffer with a symbolic offset.

    >>> a = te.placeholder((16,), name="a"); b = te.placeholder((16,), name="b")
    >>> k = te.reduce_axis((0, 16)); c = te.compute((1,), lambda i: te.sum(a[k] * b[k], axis=k))
    >>> intrin = te.decl_tensor_intrin(c.op, lambda ins, outs: ..., binds={a: Ab, b: Bb, c: Cb})
    """
    if isinstance(op, Tensor):
        op = op.op
    if not isinstance(op, ComputeOp):
        raise ScheduleError(f"decl_tensor_intrin: op must be the operation of a te.compute, got {type(op).__name__}")
    if scalar_params:
        raise ScheduleError("decl_tensor_intrin: scalar_params are not supported; pass values through binds")
    if len(op.body) != 1:
        raise ScheduleError(f"decl_tensor_intrin: {op.name} has {len(op.body)} outputs; intrinsics have one")
    binds = dict(binds or {})
    defaults = dict(default_buffer_params or {})
    inputs = tuple(op.input_tensors)
    for t in inputs:
        if not isinstance(t.op, PlaceholderOp):
            raise ScheduleError(f"decl_tensor_intrin: input {t.name} of {op.name} must be a te.placeholder")
    buffers = []
    for t in inputs + tuple(op.outputs):
        buf = binds.get(t)
        if buf is None:
            buf = decl_buffer(t.shape, t.dtype, t.name, elem_offset=E.Var(f"{t.name}_elem_offset", INT32_T),
                              scope=defaults.get("scope", "global"))
            if defaults.get("offset_factor"):
                buf = _with_offset_factor(buf, defaults["offset_factor"])
        elif not isinstance(buf, Buffer):
            raise ScheduleError(f"decl_tensor_intrin: binds[{t.name}] must be a tvm.tir.decl_buffer(...)")
        elif len(buf.shape) != len(t.shape):
            raise ScheduleError(f"decl_tensor_intrin: buffer {buf.name} has {len(buf.shape)} dims but tensor "
                                f"{t.name} has {len(t.shape)}")
        buffers.append(buf)
    return TensorIntrin(name, op, fintrin, inputs, tuple(buffers))


def _with_offset_factor(buf: Buffer, factor: int) -> Buffer:
    from dataclasses import replace

    return replace(buf, offset_factor=int(factor))


