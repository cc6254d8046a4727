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
op by then, not a graph the sink would cut into.
"""

from __future__ import annotations

from ..expr import Call, Function
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
        self.changed = False

    def visit_Function(self, f):
        return f if f.attrs.get("Primitive") else super().visit_Function(f)

    def visit_Call(self, call):
        new = super().visit_Call(call)
        op = call.op
        if op is nn_norm.LAYER_NORM:
            return self._layer_norm(call, new)
        if op is tf.RESHAPE:
            return self._reshape(call, new)
        if op is tf.CAST:
            return self._cast(call, new)
        if isinstance(op, OpDef) and op.pattern <= OpPattern.BROADCAST:
            return self._sink(call, new)
        return new

    def _sink(self, call, new):
        """5: ``op(reshape(y), z)``, y rows (n, C) and the op of call's shape, becomes
        ``reshape(op(y, reshape(z)))`` where every other operand z is a reshape from rows too (they
        cancel), computed by an elementwise or injective kernel (the reshape joins it), or varies
        along the last axis only (a bias: reshaped to (C,))."""
        shape = _shape(call)
        if len(shape) < 3:
            return new
        rows = [a for a in call.args if isinstance(a, Call) and a.op is tf.RESHAPE and _shape(a) == shape
                and len(_shape(a.args[0])) == 2 and _shape(a.args[0])[-1] == shape[-1]]
        if not rows:
            return new
        flat = (-1, shape[-1])
        args = []
        for old, a in zip(call.args, new.args):
            oshape = _shape(old)
            if old in rows or oshape == shape and (isinstance(old, Call) and isinstance(old.op, OpDef)
                                                   and old.op.pattern <= OpPattern.INJECTIVE):
                args.append(self._one_reshape(a, flat))
            elif not oshape or all(d == 1 for d in oshape[:-1]) and oshape[-1] in (1, shape[-1]):
                args.append(a if len(oshape) <= 1 else self._one_reshape(a, oshape[-1:]))
            else:
                return new
        self.changed = True
        return tf.reshape(Call(new.op, args, new.attrs), shape)

    def _one_reshape(self, x, shape):
        if isinstance(x, Call) and x.op is tf.CAST:  # reshape(cast(y)) as cast(reshape(y)): 3 backwards
            return self._one_cast(self._one_reshape(x.args[0], shape), x.attrs)
        if isinstance(x, Call) and x.op is tf.RESHAPE:
            x = x.args[0]  # 4 at once
            if _typed_shape(x) is not None and _typed_shape(x)[-1] == shape[-1] and len(_typed_shape(x)) == \
                    len(shape) and (shape[0] == -1 or _typed_shape(x) == tuple(shape)):
                return x
        key = (x, tuple(shape))
        if key not in self.reshapes:
            self.reshapes[key] = tf.reshape(x, shape)
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
        rows = Call(new.op, [self._one_reshape(new.args[0], (-1, shape[-1])), *new.args[1:]],
                    new.op.make_attrs({**call.attrs._values, "axis": -1}))
        return tf.reshape(rows, shape)

    def _reshape(self, call, new):
        src = call.args[0]
        shape = _shape(call)
        inner = new.args[0]
        soft = _softmax_under(src, self.consumers, call)
        if soft is not None and _last_axis(soft.attrs.axis, len(_shape(soft))) and shape and \
                shape[-1] == _shape(soft)[-1]:
            self.changed = True  # 2: the reshape before the softmax
            return Call(soft.op, [tf.reshape(self.visit(soft.args[0]), shape)], soft.op.make_attrs({"axis": -1}))
        if isinstance(inner, Call) and inner.op is tf.RESHAPE:  # 4
            self.changed = True
            source = inner.args[0]
            if _typed_shape(source) == shape:
                return source
            return tf.reshape(source, shape)
        if _typed_shape(inner) == shape:
            self.changed = True
            return inner
        return new

    def _cast(self, call, new):
        x = new.args[0]
        if _typed_shape(x) is not None and str(x.checked_type.dtype) == str(call.attrs.dtype):
            self.changed = True
            return x  # a cast to the dtype it has
        if isinstance(x, Call) and x.op is tf.RESHAPE and _opaque(x.args[0]):  # 3: the cast next to its producer
            self.changed = True
            return tf.reshape(self._one_cast(x.args[0], new.attrs), _shape(call))
        return self._one_cast(x, new.attrs, new)

    def _one_cast(self, x, attrs, made=None):
        key = (x, str(attrs.dtype))
        if key not in self.casts:
            self.casts[key] = made if made is not None else Call(tf.CAST, [x], attrs)
        elif self.casts[key] is not made:
            self.changed = True
        return self.casts[key]


def _rows(reshape, width: int) -> bool:
    """reshape gives 2-D rows of ``width``."""
    shape = _shape(reshape)
    return len(shape) == 2 and shape[-1] == width


def _opaque(e) -> bool:
    """e is computed by a kernel that takes no elementwise consumer (layer norm, softmax)."""
    return isinstance(e, Call) and isinstance(e.op, OpDef) and e.op.pattern > OpPattern.INJECTIVE


def _typed_shape(e):
    """e's shape where it is typed (a node of the input graph), else None (a node made here)."""
    try:
        return _shape(e)
    except Exception:  # noqa: BLE001 - a new node has no type yet
        return None


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

    for _ in range(8):
        rows = _Rows(users(func.body))
        func = infer(rows.visit(func))
        dedupe = _Dedupe()
        func = infer(dedupe.visit(func))
        if not (rows.changed or dedupe.changed):
            break
    return func
