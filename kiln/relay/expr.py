"""Relay expressions: the dataflow graph of a model.

Nodes are immutable and compare by identity (``a == b`` is ``a is b``): a graph shares a node
by referencing it twice, and passes memoize on identity. After ``InferType`` every node knows
its type (``expr.checked_type``); the type is cached on the node, which is sound because a
node's type is a function of the node alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

import numpy as np

from kiln.errors import KilnError

from .ty import TensorType, Type, dtype_of, np_dtype


class Attrs:
    """Read-only attributes of a call or function: ``attrs.strides`` or ``attrs["strides"]``."""

    __slots__ = ("_values",)

    def __init__(self, values: dict | None = None):
        object.__setattr__(self, "_values", dict(values or {}))

    def __getattr__(self, name: str):
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(f"attrs have no field {name!r}; they have {sorted(self._values)}") from None

    def __setattr__(self, name, value):
        raise AttributeError("Attrs are read-only; build a new call with different attrs")

    def __getitem__(self, name: str):
        return self._values[name]

    def __contains__(self, name: str) -> bool:
        return name in self._values

    def get(self, name: str, default=None):
        return self._values.get(name, default)

    def keys(self):
        return self._values.keys()

    def items(self):
        return self._values.items()

    def with_changes(self, **changes) -> "Attrs":
        return Attrs({**self._values, **changes})

    def __bool__(self) -> bool:
        return bool(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"Attrs({self._values})"


DictAttrs = Attrs


# The relay ops Python's operators on expressions build (``a + b`` is ``relay.add(a, b)``): they
# are defined above this module, and op/tensor.py installs them here when kiln.relay loads.
OPERATORS: dict[str, Callable] = {}


class RelayExpr:
    """Base of relay expressions; ``+ - * /`` and unary ``-`` build calls to the tensor ops."""

    # The text form (relay's text format): installed by printer.py, above this module, when
    # kiln.relay loads, so expressions print without this module importing the printer.
    text_form: ClassVar[Callable[["RelayExpr"], str]]

    @property
    def checked_type(self) -> Type:
        t = self.__dict__.get("_checked_type")
        if t is None:
            raise KilnError(f"{type(self).__name__} has no type yet; run relay.transform.InferType() first")
        return t

    def _set_type(self, t: Type) -> None:
        object.__setattr__(self, "_checked_type", t)

    def __add__(self, other):
        return OPERATORS["add"](self, _lift(other, self))

    def __radd__(self, other):
        return OPERATORS["add"](_lift(other, self), self)

    def __sub__(self, other):
        return OPERATORS["subtract"](self, _lift(other, self))

    def __rsub__(self, other):
        return OPERATORS["subtract"](_lift(other, self), self)

    def __mul__(self, other):
        return OPERATORS["multiply"](self, _lift(other, self))

    def __rmul__(self, other):
        return OPERATORS["multiply"](_lift(other, self), self)

    def __truediv__(self, other):
        return OPERATORS["divide"](self, _lift(other, self))

    def __neg__(self):
        return OPERATORS["negative"](self)

    def astext(self, show_meta_data: bool = False) -> str:
        return self.text_form(self)

    def __str__(self) -> str:
        return self.astext()

    __hash__ = object.__hash__


def _lift(value, like: RelayExpr) -> RelayExpr:
    if isinstance(value, RelayExpr):
        return value
    dtype = "float32"
    t = like.__dict__.get("_checked_type")
    if isinstance(t, TensorType):
        dtype = t.dtype
    elif isinstance(like, Var) and isinstance(like.type_annotation, TensorType):
        dtype = like.type_annotation.dtype
    return const(value, dtype)


@dataclass(frozen=True, eq=False, repr=False)
class Var(RelayExpr):
    """A named input: a function parameter or a let-bound name."""

    name_hint: str
    type_annotation: Type | None = None

    def __repr__(self) -> str:
        return f"Var({self.name_hint})"


@dataclass(frozen=True, eq=False, repr=False)
class Constant(RelayExpr):
    """A constant tensor. ``data`` is a numpy array (never copied by passes)."""

    data: np.ndarray

    def __repr__(self) -> str:
        return f"Constant({self.data.shape}, {self.data.dtype})"


@dataclass(frozen=True, eq=False, repr=False)
class Call(RelayExpr):
    """Apply ``op`` (an OpDef, a Function or a Var/GlobalVar naming one) to ``args``."""

    op: Any
    args: tuple
    attrs: Attrs = field(default_factory=Attrs)
    type_args: tuple = ()

    def __post_init__(self):
        object.__setattr__(self, "args", tuple(self.args))
        if self.attrs is None or isinstance(self.attrs, dict):
            object.__setattr__(self, "attrs", Attrs(self.attrs))

    def __repr__(self) -> str:
        return f"Call({getattr(self.op, 'name', type(self.op).__name__)}, {len(self.args)} args)"


@dataclass(frozen=True, eq=False, repr=False)
class Tuple(RelayExpr):
    """A tuple of expressions."""

    fields: tuple

    def __post_init__(self):
        object.__setattr__(self, "fields", tuple(self.fields))

    def __getitem__(self, i):
        return self.fields[i]

    def __len__(self) -> int:
        return len(self.fields)


@dataclass(frozen=True, eq=False, repr=False)
class TupleGetItem(RelayExpr):
    """Field ``index`` of a tuple-valued expression."""

    tuple_value: RelayExpr
    index: int


@dataclass(frozen=True, eq=False, repr=False)
class Let(RelayExpr):
    """``let var = value; body``."""

    var: Var
    value: RelayExpr
    body: RelayExpr


@dataclass(frozen=True, eq=False, repr=False)
class If(RelayExpr):
    """``if (cond) { true_branch } else { false_branch }``; ``cond`` is a scalar bool tensor."""

    cond: RelayExpr
    true_branch: RelayExpr
    false_branch: RelayExpr


@dataclass(frozen=True, eq=False, repr=False, init=False)
class Function(RelayExpr):
    """``fn (params) -> ret_type { body }``. ``attrs["Primitive"] == 1`` marks a fused kernel.

    >>> x = relay.var("x", shape=(2, 2))
    >>> f = relay.Function([x], relay.nn.relu(x))
    """

    params: tuple
    body: RelayExpr
    ret_type: Type | None
    type_params: tuple
    attrs: Attrs

    def __init__(self, params, body, ret_type=None, type_params=None, attrs=None):
        object.__setattr__(self, "params", tuple(params))
        object.__setattr__(self, "body", body)
        object.__setattr__(self, "ret_type", ret_type)
        object.__setattr__(self, "type_params", tuple(type_params or ()))
        object.__setattr__(self, "attrs", attrs if isinstance(attrs, Attrs) else Attrs(attrs))

    def with_attr(self, key: str, value) -> "Function":
        return Function(self.params, self.body, self.ret_type, self.type_params, self.attrs.with_changes(**{key: value}))

    def __repr__(self) -> str:
        return f"Function({[p.name_hint for p in self.params]})"


class TupleWrapper:
    """The result of an op returning several tensors (``batch_norm``, ``split``).

    Index it to get one output (``bn[0]``); ``astuple()`` gives the tuple expression itself.
    """

    def __init__(self, tuple_value: RelayExpr, size: int):
        self.tuple_value = tuple_value
        self.size = size

    def astuple(self) -> RelayExpr:
        return self.tuple_value

    def astext(self) -> str:
        return self.tuple_value.astext()

    def __getitem__(self, index: int) -> TupleGetItem:
        if not -self.size <= index < self.size:
            raise IndexError(f"tuple index {index} out of range for {self.size} outputs")
        return TupleGetItem(self.tuple_value, index % self.size)

    def __len__(self) -> int:
        return self.size

    def __iter__(self):
        return (self[i] for i in range(self.size))


# -- constructors ---------------------------------------------------------------------------------

def var(name_hint: str, type_annotation: Type | None = None, shape=None, dtype: str = "float32") -> Var:
    """A relay variable. ``relay.var("data", shape=(1, 3, 224, 224), dtype="float32")``."""
    if type_annotation is not None and shape is not None:
        raise ValueError(f"relay.var({name_hint!r}): give either type_annotation or shape, not both")
    if isinstance(type_annotation, str):  # relay.var("x", "float32") means a scalar
        type_annotation = TensorType((), type_annotation)
    if shape is not None:
        type_annotation = TensorType(tuple(int(d) for d in shape), dtype)
    return Var(name_hint, type_annotation)


def const(value, dtype: str | None = None) -> Constant:
    """A constant from a Python number, a list or a numpy array (``dtype`` converts it).

    Python floats default to float32 and ints to int32, as relay does.
    """
    if isinstance(value, Constant):
        return value
    if hasattr(value, "numpy") and not isinstance(value, np.ndarray):
        value = value.numpy()
    if dtype is None and not isinstance(value, np.ndarray):
        probe = np.asarray(value)
        if probe.dtype.kind == "f":
            dtype = "float32"
        elif probe.dtype.kind in "iu":
            dtype = "int32"
    arr = np.asarray(value, dtype=np_dtype(dtype) if dtype else None)
    return Constant(arr)


def type_of_value(value: np.ndarray) -> TensorType:
    return TensorType(value.shape, dtype_of(value))
