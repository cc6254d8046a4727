"""OpDef: everything kiln knows about one relay operator, as one value.

Each op family file (nn.py, tensor.py, reduce.py, transform.py, image.py) defines its OpDefs
and lists them in ``OPS``; ``op/__init__.py`` joins those lists into the one table that
``relay.op.get(name)`` reads. No import-time registration by side effect.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Callable

from kiln.errors import ShapeError
from kiln.ir.op_attr import attrs_of

from ..expr import Attrs, Call, RelayExpr, TupleWrapper
from ..ty import TensorType, TupleType, Type


class OpPattern(enum.IntEnum):
    """How an op may be fused with its neighbours (same order and values as TVM's)."""

    ELEMWISE = 0              # out[i] = f(in[i])
    BROADCAST = 1             # out[i] = f(in[broadcast(i)])
    INJECTIVE = 2             # each output element reads one input element (reshape, transpose)
    COMM_REDUCE = 3           # commutative reduction (sum, max)
    OUT_ELEMWISE_FUSABLE = 4  # complex op whose output can take an elementwise epilogue (conv2d)
    TUPLE = 7
    OPAQUE = 8                # never fused


REQUIRED = object()  # attr schema marker: no default


@dataclass(eq=False)
class OpDef:
    """One operator.

    - ``inputs``: names of the positional inputs (used in error messages).
    - ``attrs``: attr name -> default value (``REQUIRED`` if the caller must give it).
    - ``type_rel(ctx) -> Type``: infers the output type from ``ctx.args`` (input types) and
      ``ctx.attrs``; reports problems with ``ctx.fail(...)``.
    - ``reference(attrs, *arrays)``: numpy implementation; returns an array or a tuple of arrays.
    - ``extra``: named attributes others attach (``tvm.ir.register_op_attr``). How an op is
      computed and scheduled is the compiler's table, ``relay/backend/op_impl.py``.
    """

    name: str
    inputs: tuple
    attrs: dict
    type_rel: Callable
    pattern: OpPattern
    reference: Callable
    num_outputs: int = 1
    doc: str = ""
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        # tvm.ir.register_op_attr keeps attributes by op name, below relay (kiln/ir/op_attr.py)
        given, self.extra = self.extra, attrs_of(self.name)
        self.extra.update(given)

    def __repr__(self) -> str:
        return f"Op({self.name})"

    def __str__(self) -> str:
        return self.name

    def make_attrs(self, values: dict) -> Attrs:
        unknown = set(values) - set(self.attrs)
        if unknown:
            raise TypeError(f"{self.name}: unknown attribute(s) {sorted(unknown)}; it takes {sorted(self.attrs)}")
        out = {}
        for key, default in self.attrs.items():
            value = values.get(key, default)
            if value is REQUIRED:
                raise TypeError(f"{self.name}: attribute {key!r} is required")
            out[key] = value
        return Attrs(out)

    def __call__(self, *args, **attrs):
        """Build a call; multi-output ops return a TupleWrapper."""
        if len(args) != len(self.inputs):
            raise TypeError(f"{self.name} takes {len(self.inputs)} inputs {list(self.inputs)}, got {len(args)}")
        for name, a in zip(self.inputs, args):
            if not isinstance(a, RelayExpr):
                raise TypeError(f"{self.name}: input {name!r} must be a relay expression, got {type(a).__name__}")
        call = Call(self, args, self.make_attrs(attrs))
        return TupleWrapper(call, self.num_outputs) if self.num_outputs > 1 else call


class RelCtx:
    """What a type relation sees: input types, attrs, and a way to fail with a clear message."""

    def __init__(self, op: OpDef, args: list, attrs: Attrs, where: str = ""):
        self.op = op
        self.args = args
        self.attrs = attrs
        self.where = where

    def fail(self, msg: str):
        suffix = f"\n  at: {self.where}" if self.where else ""
        raise ShapeError(f"{self.op.name}: {msg}{suffix}")

    def tensor(self, i: int) -> TensorType:
        t = self.args[i]
        if not isinstance(t, TensorType):
            self.fail(f"input {self.op.inputs[i]!r} must be a tensor, got {t}")
        return t

    def tuple(self, i: int) -> TupleType:
        t = self.args[i]
        if not isinstance(t, TupleType) or not all(isinstance(f, TensorType) for f in t.fields):
            self.fail(f"input {self.op.inputs[i]!r} must be a tuple of tensors, got {t}")
        return t

    def ndim(self, i: int, n: int, layout: str = "") -> TensorType:
        t = self.tensor(i)
        if t.ndim != n:
            hint = f" ({layout})" if layout else ""
            self.fail(f"input {self.op.inputs[i]!r} has {t.ndim} dims; expected {n}{hint}")
        return t

    def axis(self, axis: int, ndim: int, what: str = "axis") -> int:
        if not -ndim <= axis < max(ndim, 1):
            self.fail(f"{what}={axis} is out of range for a {ndim}-d input")
        return axis % ndim if ndim else 0

    def same_dtype(self, *idx) -> str:
        dtypes = {self.tensor(i).dtype for i in idx}
        if len(dtypes) > 1:
            names = ", ".join(f"{self.op.inputs[i]!r}: {self.tensor(i).dtype}" for i in idx)
            self.fail(f"inputs must share a dtype; got {names}. Insert relay.cast to convert.")
        return dtypes.pop()


def broadcast_shapes(ctx: RelCtx, shapes: list) -> tuple:
    """numpy broadcasting of ``shapes``, failing with the inputs' names."""
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for k in range(ndim):
        dims = {s[len(s) - ndim + k] for s in shapes if len(s) - ndim + k >= 0}
        dims.discard(1)
        if len(dims) > 1:
            desc = ", ".join(f"{n!r}: {tuple(s)}" for n, s in zip(ctx.op.inputs, shapes))
            ctx.fail(f"shapes cannot be broadcast together ({desc})")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def identity_rel(ctx: RelCtx) -> Type:
    return ctx.tensor(0)


def as_tuple(value, n: int, what: str) -> tuple:
    """Normalize an int or sequence attribute to an n-tuple of ints."""
    if isinstance(value, int):
        return (value,) * n
    value = tuple(int(v) for v in value)
    if len(value) == 1:
        return value * n
    if len(value) != n:
        raise ValueError(f"{what} needs {n} values, got {value}")
    return value


def conv_padding(padding) -> tuple:
    """(top, left, bottom, right) from an int, (pad_h, pad_w) or 4 values."""
    if isinstance(padding, int):
        return (padding,) * 4
    padding = tuple(int(p) for p in padding)
    if len(padding) == 1:
        return padding * 4
    if len(padding) == 2:
        return padding + padding
    if len(padding) == 4:
        return padding
    raise ValueError(f"padding must have 1, 2 or 4 values, got {padding}")


Any_ = Any
