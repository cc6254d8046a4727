"""Scalar and vector expressions of the loop IR (TIR).

Every node is a frozen dataclass with its own class, so user code can write
``isinstance(e, tir.Add)`` and ``e.a``. ``==`` on expressions builds an ``EQ`` node (as in TVM);
compare structure with ``kiln.ir.structural_equal``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

from .dtype import BOOL_T, INT32, DType, dtype as _dtype

# One decorator for every node: immutable, compact, and leaving == and repr to the base classes.
node = dataclass(frozen=True, slots=True, eq=False, repr=False)


class Node:
    """Base of every IR node (expressions, statements, buffers, functions)."""

    __slots__ = ()
    # How nodes print (TVMScript): printer.py, above every node module, installs its to_text here
    # when kiln.ir loads (kiln/ir/__init__.py), so no node module depends on the printer.
    text_form: ClassVar[Callable[["Node"], str]]

    def script(self) -> str:
        return self.text_form(self)

    def show(self) -> None:
        """Print the node as TVMScript."""
        print(self.script())

    def __str__(self) -> str:
        return self.script()

    def __repr__(self) -> str:
        return self.script()


class PrimExpr(Node):
    """An expression with a dtype. Python operators build new expressions."""

    __slots__ = ()
    dtype: DType

    # Arithmetic ---------------------------------------------------------------------------
    def __add__(self, other):
        return _binary(Add, self, other)

    def __radd__(self, other):
        return _binary(Add, other, self)

    def __sub__(self, other):
        return _binary(Sub, self, other)

    def __rsub__(self, other):
        return _binary(Sub, other, self)

    def __mul__(self, other):
        return _binary(Mul, self, other)

    def __rmul__(self, other):
        return _binary(Mul, other, self)

    def __truediv__(self, other):
        return _binary(Div, self, other)

    def __rtruediv__(self, other):
        return _binary(Div, other, self)

    def __floordiv__(self, other):
        return _binary(FloorDiv, self, other)

    def __rfloordiv__(self, other):
        return _binary(FloorDiv, other, self)

    def __mod__(self, other):
        return _binary(FloorMod, self, other)

    def __rmod__(self, other):
        return _binary(FloorMod, other, self)

    def __neg__(self):
        zero = FloatImm(self.dtype, 0.0) if self.dtype.is_float else IntImm(self.dtype, 0)
        return Sub(zero, self, self.dtype)

    # Comparisons --------------------------------------------------------------------------
    def __lt__(self, other):
        return _compare(LT, self, other)

    def __le__(self, other):
        return _compare(LE, self, other)

    def __gt__(self, other):
        return _compare(GT, self, other)

    def __ge__(self, other):
        return _compare(GE, self, other)

    def __eq__(self, other):  # type: ignore[override]
        return _compare(EQ, self, other)

    def __ne__(self, other):  # type: ignore[override]
        return _compare(NE, self, other)

    __hash__ = object.__hash__

    # Logic and bits -----------------------------------------------------------------------
    def __and__(self, other):
        a, b = _match(self, other)
        if a.dtype.is_bool:
            return And(a, b, a.dtype)
        return Call(a.dtype, "tir.bitwise_and", (a, b))

    __rand__ = __and__

    def __or__(self, other):
        a, b = _match(self, other)
        if a.dtype.is_bool:
            return Or(a, b, a.dtype)
        return Call(a.dtype, "tir.bitwise_or", (a, b))

    __ror__ = __or__

    def __xor__(self, other):
        a, b = _match(self, other)
        return Call(a.dtype, "tir.bitwise_xor", (a, b))

    def __invert__(self):
        if self.dtype.is_bool:
            return Not(self, self.dtype)
        return Call(self.dtype, "tir.bitwise_not", (self,))

    def __lshift__(self, other):
        a, b = _match(self, other)
        return Call(a.dtype, "tir.shift_left", (a, b))

    def __rshift__(self, other):
        a, b = _match(self, other)
        return Call(a.dtype, "tir.shift_right", (a, b))

    def __bool__(self) -> bool:
        raise ValueError(
            f"cannot use the symbolic expression {self} as a Python bool; "
            "use tvm.tir.all/any/if_then_else to build conditions"
        )

    def astype(self, dtype) -> "PrimExpr":
        return cast(self, dtype)

    def equal(self, other) -> "PrimExpr":
        return _compare(EQ, self, other)


# Leaves ------------------------------------------------------------------------------------


@node
class Var(PrimExpr):
    """A named scalar variable. Two Vars are the same only if they are the same object."""

    name: str
    dtype: DType = INT32
    type_annotation: Any = None

    @property
    def name_hint(self) -> str:
        return self.name


@node
class SizeVar(Var):
    """A Var known to be non-negative (a symbolic shape dimension)."""


@node
class IntImm(PrimExpr):
    """An integer (or bool) constant."""

    dtype: DType
    value: int

    def __int__(self) -> int:
        return self.value

    def __index__(self) -> int:
        return self.value

    def __bool__(self) -> bool:
        return bool(self.value)


@node
class FloatImm(PrimExpr):
    """A floating-point constant."""

    dtype: DType
    value: float

    def __float__(self) -> float:
        return self.value


@node
class StringImm(PrimExpr):
    """A string constant (used in asserts and call arguments)."""

    value: str
    dtype: DType = field(default_factory=lambda: _dtype("handle"))


# Operators ---------------------------------------------------------------------------------


@node
class Cast(PrimExpr):
    """Convert value to dtype (float→int truncates toward zero, as C does)."""

    dtype: DType
    value: PrimExpr


@node
class BinaryOp(PrimExpr):
    a: PrimExpr
    b: PrimExpr
    dtype: DType


class Add(BinaryOp):
    """a + b. Integers wrap on overflow."""

    __slots__ = ()


class Sub(BinaryOp):
    """a - b."""

    __slots__ = ()


class Mul(BinaryOp):
    """a * b."""

    __slots__ = ()


class Div(BinaryOp):
    """a / b: IEEE division for floats, truncating division for integers (C semantics)."""

    __slots__ = ()


class Mod(BinaryOp):
    """Remainder of truncating division (sign of a), as C's %."""

    __slots__ = ()


class FloorDiv(BinaryOp):
    """floor(a / b); for floats floor of the IEEE quotient."""

    __slots__ = ()


class FloorMod(BinaryOp):
    """a - floordiv(a, b) * b: the sign of b, as Python's %."""

    __slots__ = ()


class Min(BinaryOp):
    """The smaller of a and b."""

    __slots__ = ()


class Max(BinaryOp):
    """The larger of a and b."""

    __slots__ = ()


class CmpOp(BinaryOp):
    """Comparisons: the result is bool with the operands' lanes."""

    __slots__ = ()


class EQ(CmpOp):
    """a == b (bool). As a Python bool it is identity of a and b, like TVM's same_as."""

    __slots__ = ()

    def __bool__(self) -> bool:
        return self.a is self.b


class NE(CmpOp):
    """a != b (bool)."""

    __slots__ = ()

    def __bool__(self) -> bool:
        return self.a is not self.b


class LT(CmpOp):
    """a < b (bool)."""

    __slots__ = ()


class LE(CmpOp):
    """a <= b (bool)."""

    __slots__ = ()


class GT(CmpOp):
    """a > b (bool)."""

    __slots__ = ()


class GE(CmpOp):
    """a >= b (bool)."""

    __slots__ = ()


class And(BinaryOp):
    """Logical and of two bools."""

    __slots__ = ()


class Or(BinaryOp):
    """Logical or of two bools."""

    __slots__ = ()


@node
class Not(PrimExpr):
    """Logical negation of a bool."""

    a: PrimExpr
    dtype: DType = BOOL_T


@node
class Select(PrimExpr):
    """condition ? true_value : false_value; both sides may be evaluated."""

    condition: PrimExpr
    true_value: PrimExpr
    false_value: PrimExpr
    dtype: DType = None

    def __post_init__(self):
        # tvm.tir.Select(cond, t, f) is public API without a dtype: take it from the values.
        if type(self.dtype) is not DType:
            object.__setattr__(self, "dtype", _dtype(self.dtype) if self.dtype else convert(self.true_value).dtype)
        for name in ("condition", "true_value", "false_value"):
            value = getattr(self, name)
            if not isinstance(value, PrimExpr):
                object.__setattr__(self, name, convert(value))


@node
class Ramp(PrimExpr):
    """The vector base, base + stride, ..., base + (lanes-1)*stride."""

    base: PrimExpr
    stride: PrimExpr
    lanes: int
    dtype: DType


@node
class Broadcast(PrimExpr):
    """A vector of lanes copies of a scalar value."""

    value: PrimExpr
    lanes: int
    dtype: DType


@node
class Let(PrimExpr):
    """body with var bound to value."""

    var: Var
    value: PrimExpr
    body: PrimExpr
    dtype: DType


@node
class Call(PrimExpr):
    """A call of an intrinsic by name ("tir.exp", "tir.if_then_else", ...) or of an extern C function."""

    dtype: DType
    op: str
    args: tuple


@node
class BufferLoad(PrimExpr):
    """buffer[indices]. After flattening there is one index; a Ramp index loads a vector."""

    buffer: Any
    indices: tuple
    dtype: DType


@node
class ProducerLoad(PrimExpr):
    """tensor[indices] for a TE tensor, before lowering turns tensors into buffers."""

    producer: Any
    indices: tuple
    dtype: DType


@node
class Reduce(PrimExpr):
    """A commutative reduction of source over the reduce axes where condition holds."""

    combiner: Any
    source: tuple
    axis: tuple
    condition: PrimExpr
    value_index: int
    init: tuple
    dtype: DType


# Ranges and iteration variables -------------------------------------------------------------


@node
class Range(Node):
    """The half-open interval [min, min + extent)."""

    min: PrimExpr
    extent: PrimExpr

    @staticmethod
    def from_min_extent(min_value, extent) -> "Range":
        return Range(convert(min_value), convert(extent))


class IterType:
    DATA_PAR = 0
    THREAD_INDEX = 1
    COMM_REDUCE = 2
    ORDERED = 3
    OPAQUE = 4
    UNROLLED = 5
    VECTORIZED = 6
    PARALLELIZED = 7
    TENSORIZED = 8


@node
class IterVar(Node):
    """A loop axis: its variable, its domain, its kind, and for GPU axes the thread tag."""

    dom: Range | None
    var: Var
    iter_type: int = IterType.DATA_PAR
    thread_tag: str = ""

    # An IterVar stands for its variable in expressions, as in TVM.
    def _as_expr(self) -> Var:
        return self.var

    def __add__(self, o):
        return self.var + o

    def __radd__(self, o):
        return o + self.var

    def __sub__(self, o):
        return self.var - o

    def __rsub__(self, o):
        return o - self.var

    def __mul__(self, o):
        return self.var * o

    def __rmul__(self, o):
        return o * self.var

    def __floordiv__(self, o):
        return self.var // o

    def __mod__(self, o):
        return self.var % o

    __hash__ = object.__hash__


# Construction helpers ----------------------------------------------------------------------


def const(value, dtype=None) -> PrimExpr:
    """A constant: ``const(1)`` is int32, ``const(1.0)`` float32, or the dtype given."""
    if isinstance(value, (IntImm, FloatImm)):
        return value if dtype is None else cast(value, dtype)
    if dtype is None:
        if isinstance(value, bool):
            dtype = "bool"
        elif isinstance(value, int):
            dtype = "int32" if -(2**31) <= value < 2**31 else "int64"
        elif isinstance(value, float):
            dtype = "float32"
        else:
            import numpy as np  # only for numpy scalars

            if isinstance(value, np.generic):
                return const(value.item(), str(value.dtype))
            raise TypeError(f"cannot make a constant from {type(value).__name__} {value!r}")
    dt = _dtype(dtype)
    if dt.lanes > 1:
        return Broadcast(const(value, dt.element_of()), dt.lanes, dt)
    if dt.is_float:
        return FloatImm(dt, float(value))
    if dt.is_bool:
        return IntImm(dt, int(bool(value)))
    if dt.is_integer:
        if isinstance(value, float) and not value.is_integer():
            raise ValueError(f"cannot make a {dt} constant from the non-integer {value!r}")
        return IntImm(dt, _wrap_int(int(value), dt))
    raise TypeError(f"cannot make a constant of dtype {dt}")


def _wrap_int(value: int, dt: DType) -> int:
    bits = dt.bits
    mask = (1 << bits) - 1
    value &= mask
    if dt.is_int and value >= 1 << (bits - 1):
        value -= 1 << bits
    return value


def convert(value) -> Any:
    """Turn Python values into IR: ints and floats into constants, lists recursively."""
    if isinstance(value, PrimExpr):
        return value
    if isinstance(value, IterVar):
        return value.var
    if isinstance(value, (bool, int, float)):
        return const(value)
    if isinstance(value, (list, tuple)):
        return type(value)(convert(v) for v in value) if isinstance(value, list) else tuple(convert(v) for v in value)
    if isinstance(value, str):
        return StringImm(value)
    if hasattr(value, "dtype") and hasattr(value, "item") and getattr(value, "shape", None) == ():
        return const(value.item(), str(value.dtype))
    if isinstance(value, Node):
        return value
    as_expr = getattr(value, "_as_expr", None)
    if as_expr is not None:
        return as_expr()
    raise TypeError(f"cannot convert {type(value).__name__} {value!r} to a kiln IR value")


def _to_expr(value, like: PrimExpr | None = None) -> PrimExpr:
    """A Python scalar becomes a constant of the other operand's type where that is exact."""
    if isinstance(value, PrimExpr):
        return value
    if isinstance(value, IterVar):
        return value.var
    if like is not None and isinstance(value, (int, float)) and not isinstance(value, bool):
        dt = like.dtype.element_of()
        if isinstance(value, int) and (dt.is_integer and not dt.is_bool or dt.is_float):
            return const(value, dt)
        if isinstance(value, float) and dt.is_float:
            return const(value, dt)
    return convert(value)


def _rank(dt: DType) -> tuple:
    # bfloat16 is a float of 16 bits: it widens to float32/float64; against float16 neither holds
    # the other's values, and _match refuses the pair.
    return ({"bool": 0, "uint": 1, "int": 2, "float": 3, "bfloat": 3}[dt.kind], dt.bits)


def _match(a, b) -> tuple[PrimExpr, PrimExpr]:
    """Bring two operands to one dtype (TVM's rules: int→float, narrow→wide, scalar→vector)."""
    if not isinstance(a, PrimExpr):
        a = _to_expr(a, b if isinstance(b, PrimExpr) else None)
    if not isinstance(b, PrimExpr):
        b = _to_expr(b, a)
    ta, tb = a.dtype, b.dtype
    if ta == tb:
        return a, b
    if ta.lanes != tb.lanes:
        if ta.lanes == 1:
            a = Broadcast(a, tb.lanes, ta.with_lanes(tb.lanes))
        elif tb.lanes == 1:
            b = Broadcast(b, ta.lanes, tb.with_lanes(ta.lanes))
        else:
            raise TypeError(f"cannot combine vectors of {ta.lanes} and {tb.lanes} lanes: {a} and {b}")
        ta, tb = a.dtype, b.dtype
        if ta == tb:
            return a, b
    ea, eb = ta.element_of(), tb.element_of()
    if {ea.kind, eb.kind} == {"float", "bfloat"} and ea.bits == eb.bits:
        raise TypeError(f"cannot combine {ea} and {eb} without an explicit cast (neither holds the other's "
                        f"values): {a} and {b}")
    if _rank(ea) >= _rank(eb):
        return a, cast(b, ta)
    return cast(a, tb), b


def _binary(cls, a, b) -> PrimExpr:
    a, b = _match(a, b)
    if cls in (FloorDiv, FloorMod, Div, Mod) and isinstance(b, IntImm) and b.value == 0:
        raise ZeroDivisionError(f"division by the constant zero in {a} / {b}")
    return cls(a, b, a.dtype)


def _compare(cls, a, b) -> PrimExpr:
    a, b = _match(a, b)
    return cls(a, b, BOOL_T.with_lanes(a.dtype.lanes))


def cast(value, dtype) -> PrimExpr:
    """value converted to dtype; a no-op when it already has that dtype."""
    value = convert(value)
    dt = _dtype(dtype)
    if value.dtype == dt:
        return value
    if isinstance(value, IntImm) and dt.lanes == 1 and (dt.is_integer or dt.is_float):
        return const(value.value, dt)
    if isinstance(value, FloatImm) and dt.lanes == 1 and dt.is_float:
        return const(value.value, dt)
    if value.dtype.lanes == 1 and dt.lanes > 1:
        return Broadcast(cast(value, dt.element_of()), dt.lanes, dt)
    return Cast(dt, value)


def var(name: str = "v", dtype="int32") -> Var:
    return Var(name, _dtype(dtype))


def size_var(name: str = "n", dtype="int32") -> SizeVar:
    return SizeVar(name, _dtype(dtype))
