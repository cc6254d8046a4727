"""FlattenRows: a transformer's row-wise ops on the 2-D rows its dense layers read, so that no
reshape is left between kernels (issue 37).

An ONNX transformer keeps its activations 3-D (batch, seq, hidden) and its attention scores 4-D;
every dense layer reads them through ``reshape(x, (-1, hidden))``. A layer norm's or softmax's
output then goes through a reshape before its consumer; FuseOps cannot put a reshape into
those (opaque) kernels, so each such reshape was a copy kernel of its own, and the residual
``add`` after a dense stayed apart from the dense (a reshape between them). After
``ToMixedPrecision`` the casts to float16 sit after those reshapes, one per consumer. Rewrites,
all exact (they move data, never change values):

1. ``layer_norm(x)`` over the last axis of a tensor of 3 or more axes, read as rows by some
   consumer, becomes ``reshape(layer_norm(reshape(x, (-1, C))), shape)``: the norm of rows is
   the same on either shape, and the reshapes now meet the dense layers' own and cancel (4).
2. ``reshape(softmax(x))`` that keeps the last axis (softmax over it) becomes
   ``softmax(reshape(x))`` when the reshape is the softmax's only consumer (casts to its own
   dtype between them are dropped): the reshape joins the kernel that computes ``x``.
3. ``cast(reshape(x))``, x computed by an opaque kernel (a layer norm), becomes
   ``reshape(cast(x))``; a cast to the dtype a value has is dropped; equal casts and equal
   reshapes of one value are one call (``_Dedupe``).
4. ``reshape(reshape(x))`` is one reshape of ``x``, none when it has ``x``'s shape.
5. An elementwise or broadcast op of 3 or more axes with an operand ``reshape(y)``, y rows
   (n, C): ``reshape(op(y, ...))``, its other operands reshaped to rows too (where they are
   reshapes from rows, these cancel; an elementwise or injective producer takes the reshape into
   its kernel; a cast goes after the reshape) or to (C,) (a bias). This is FuseDenseEpilogue's
   sink (run just before) for any source of rows: the residual add joins its dense layer's kernel.

Runs on CUDA targets, after FuseDenseEpilogue (relay/transform/__init__.py): the GELU is one
op by then, not a graph the sink would cut into. On CUDA it ends with combine_dense.py's rewrites
(Q, K, V as one dense; float32 norms between half casts as half norms).
"""

from __future__ import annotations

import numpy as np

from ..expr import Call, Constant, Function, const
from ..op import nn_norm
from ..op.registry import OpDef, OpPattern
from ..op import transform as tf
from ..visitor import ExprMutator
from .infer_type import infer


def _shape(e) -> tuple:
    return tuple(int(d) for d in e.checked_type.shape)


def _last_axis(axis: int, ndim: int) -> bool:
    return int(axis) in (-1, ndim - 1)


class _Rows(ExprMutator):
    def __init__(self, consumers: dict):
        super().__init__()
        self.consumers = consumers
        self.casts: dict = {}  # (new operand, dtype) -> the one cast of it
        self.reshapes: dict = {}  # (new operand, shape) -> the one reshape of it made here
        self.known: dict = {}  # node made here -> its shape (made nodes have no type until infer)
        self.changed = False

    def sh(self, e):
        """e's shape: its type's, or the one recorded when it was made; None if neither."""
        if e in self.known:
            return self.known[e]
        try:
            return _shape(e)
        except Exception:  # noqa: BLE001 - an untyped node made by another rule
            return None

    def made(self, e, shape):
        self.known[e] = tuple(shape)
        return e

    def visit_Function(self, f):
        return f if f.attrs.get("Primitive") else super().visit_Function(f)

    def visit_Call(self, call):
        new = super().visit_Call(call)
        if not isinstance(call.op, OpDef) or not hasattr(call.checked_type, "shape"):
            return new  # a function's call, a tuple (split)
        shape = _shape(call)
        self.made(new, shape)
        op = call.op
        if op is nn_norm.LAYER_NORM:
            out = self._layer_norm(call, new)
        elif op is tf.RESHAPE:
            out = self._reshape(call, new)
        elif op is tf.CAST:
            out = self._cast(call, new)
        elif op.pattern <= OpPattern.BROADCAST:
            out = self._sink(call, new)
        else:
            out = new
        return self.made(out, shape)  # every rule keeps the call's shape

    def _sink(self, call, new):
        """5: ``op(reshape(y), z)`` of call's shape, y rows (n, C) or call's shape without some
        leading 1s (a batch_matmul's (H, S, S) scores as (1, H, S, S)), becomes
        ``reshape(op(y, z'))`` where every other operand z is a reshape from y's shape (they
        cancel), of call's shape computed by an elementwise or injective kernel (reshaped: the
        reshape joins it), or broadcasts: along the last axis only for rows (a bias, as (C,)),
        else without its leading 1s (the attention mask)."""
        shape = _shape(call)
        if len(shape) < 3:
            return new
        cands = [a for a in new.args if isinstance(a, Call) and a.op is tf.RESHAPE and self.sh(a) == shape
                 and self.sh(a.args[0]) is not None and _reshaped_from(self.sh(a.args[0]), shape)]
        if not cands:
            return new
        target = self.sh(cands[0].args[0])
        rows = len(target) == 2 and _unit_stripped(target) != _unit_stripped(shape)
        args = []
        for a in new.args:
            oshape = self.sh(a)
            if oshape is None:
                return new
            producer = isinstance(a, Call) and isinstance(a.op, OpDef) and a.op.pattern <= OpPattern.INJECTIVE
            stripped = _unit_stripped(oshape)
            if oshape == shape and producer:
                args.append(self._one_reshape(a, target))
            elif not oshape:
                args.append(a)
            elif rows and all(d == 1 for d in oshape[:-1]) and oshape[-1] in (1, shape[-1]):
                args.append(self._one_reshape(a, oshape[-1:]) if len(oshape) > 1 else a)
            elif not rows and len(stripped) <= len(target) and \
                    all(d in (1, t) for d, t in zip(stripped, target[len(target) - len(stripped):])):
                args.append(self._one_reshape(a, stripped) if stripped != oshape else a)
            else:
                return new
        self.changed = True
        return tf.reshape(self.made(Call(new.op, args, new.attrs), target), shape)

    def _one_reshape(self, x, shape):
        shape = tuple(shape)
        if isinstance(x, Call) and x.op is tf.CAST:  # reshape(cast(y)) as cast(reshape(y)): 3 backwards
            return self.made(self._one_cast(self._one_reshape(x.args[0], shape), x.attrs), shape)
        if isinstance(x, Call) and x.op is tf.RESHAPE:
            x = x.args[0]  # 4 at once
        if self.sh(x) == shape:
            return x
        if isinstance(x, Constant):  # folded now: FoldConstant has run
            return self.made(const(np.ascontiguousarray(x.data.reshape(shape))), shape)
        key = (x, shape)
        if key not in self.reshapes:
            self.reshapes[key] = self.made(tf.reshape(x, shape), shape)
        return self.reshapes[key]

    def _layer_norm(self, call, new):
        shape = _shape(call)
        if len(shape) < 3 or not _last_axis(call.attrs.axis, len(shape)) or \
                any(len(_shape(a)) != 1 for a in call.args[1:]):
            return new
        if not any(isinstance(c, Call) and c.op is tf.RESHAPE and _rows(c, shape[-1])
                   for c in self.consumers.get(call, [])):
            return new  # nothing reads it as rows (a model's output): it stays as it is
        self.changed = True
        flat = (int(np.prod(shape[:-1])), shape[-1])
        rows = Call(new.op, [self._one_reshape(new.args[0], flat), *new.args[1:]],
                    new.op.make_attrs({**call.attrs._values, "axis": -1}))
        return tf.reshape(self.made(rows, flat), shape)

    def _reshape(self, call, new):
        src = call.args[0]
        shape = _shape(call)
        inner = new.args[0]
        soft = _softmax_under(src, self.consumers, call)
        if soft is not None and _last_axis(soft.attrs.axis, len(_shape(soft))) and shape and \
                shape[-1] == _shape(soft)[-1]:
            self.changed = True  # 2: the reshape before the softmax
            return Call(soft.op, [self._one_reshape(self.visit(soft.args[0]), shape)], soft.op.make_attrs({"axis": -1}))
        if isinstance(inner, Call) and inner.op is tf.RESHAPE:  # 4
            self.changed = True
            return self._one_reshape(inner.args[0], shape)
        if self.sh(inner) == shape:
            self.changed = True
            return inner
        return new

    def _cast(self, call, new):
        x = new.args[0]
        if str(call.args[0].checked_type.dtype) == str(call.attrs.dtype):
            self.changed = True
            return x  # a cast to the dtype it has
        if isinstance(x, Call) and x.op is tf.RESHAPE and _opaque(x.args[0]):  # 3: the cast next to its producer
            self.changed = True
            return tf.reshape(self.made(self._one_cast(x.args[0], new.attrs), self.sh(x.args[0])), _shape(call))
        return self._one_cast(x, new.attrs, new)

    def _one_cast(self, x, attrs, made=None):
        key = (x, str(attrs.dtype))
        if key not in self.casts:
            self.casts[key] = made if made is not None else Call(tf.CAST, [x], attrs)
        elif self.casts[key] is not made:
            self.changed = True
        return self.casts[key]


def _unit_stripped(shape) -> tuple:
    """shape without its leading 1s."""
    shape = tuple(shape)
    while shape and shape[0] == 1:
        shape = shape[1:]
    return shape


def _reshaped_from(source, shape) -> bool:
    """A reshape from ``source`` to ``shape`` (3+ axes) that rule 5 moves: from 2-D rows of the
    same width, or one that only adds or drops leading 1s."""
    if source == shape:
        return False
    return len(source) == 2 and source[-1] == shape[-1] or _unit_stripped(source) == _unit_stripped(shape)


def _rows(reshape, width: int) -> bool:
    """reshape gives 2-D rows of ``width``."""
    shape = _shape(reshape)
    return len(shape) == 2 and shape[-1] == width


def _opaque(e) -> bool:
    """e is computed by a kernel that takes no elementwise consumer (layer norm, softmax)."""
    return isinstance(e, Call) and isinstance(e.op, OpDef) and e.op.pattern > OpPattern.INJECTIVE


class _Dedupe(ExprMutator):
    """Equal reshapes and casts of one value (of one result type) as one call, so that the value's
    kernel takes the one that is left."""

    def __init__(self):
        super().__init__()
        self.seen: dict = {}
        self.changed = False

    def visit_Function(self, f):
        return f if f.attrs.get("Primitive") else super().visit_Function(f)

    def visit_Call(self, call):
        new = super().visit_Call(call)
        if call.op is not tf.RESHAPE and call.op is not tf.CAST:
            return new
        key = (call.op, new.args[0], str(call.checked_type))
        if key in self.seen:
            self.changed = True
            return self.seen[key]
        self.seen[key] = new
        return new


def _softmax_under(src, consumers: dict, user):
    """The softmax whose value ``user`` reads (directly or through casts to its own dtype), each
    step with one consumer; else None."""
    while isinstance(src, Call) and consumers.get(src, []) == [user]:
        if src.op is nn_norm.SOFTMAX:
            return src
        if src.op is not tf.CAST or str(src.attrs.dtype) != str(src.args[0].checked_type.dtype):
            return None
        src, user = src.args[0], src
    return None


def flatten_rows(func: Function) -> Function:
    """The rewrites of the module docstring on ``func`` (typed), to a fixed point; returns it typed."""
    from ..analysis import users

    for _ in range(64):  # each round moves a reshape by an op or two
        rows = _Rows(users(func.body))
        func = infer(rows.visit(func))
        dedupe = _Dedupe()
        func = infer(dedupe.visit(func))
        if not (rows.changed or dedupe.changed):
            break
    return _cuda_combine(func)


def _cuda_combine(func: Function) -> Function:
    """On a CUDA target, parallel dense layers of one input as one (combine_dense.py: Q, K, V), and
    a float32 layer norm between casts from and to a half dtype as the half one (fold_norm_casts)."""
    from kiln.target import Target

    target = Target.current(allow_none=True)
    if target is None or target.kind.name != "cuda":
        return func
    from .combine_dense import combine_parallel_dense, fold_norm_casts

    return fold_norm_casts(combine_parallel_dense(func))
