"""Binary operators with numpy broadcasting: ``topi.add(a, b)`` where a, b are tensors or scalars."""

from __future__ import annotations

from kiln import te, tir
from kiln.errors import ShapeError
from kiln.ir.expr import IntImm, PrimExpr, const, convert



def broadcast_shape(shape_a, shape_b, op: str = "broadcast") -> tuple:
    """numpy's result shape for two shapes (sizes 1 stretch; symbolic sizes must match)."""
    a, b = list(shape_a), list(shape_b)
    n = max(len(a), len(b))
    a = [1] * (n - len(a)) + a
    b = [1] * (n - len(b)) + b
    out = []
    for i, (x, y) in enumerate(zip(a, b)):
        xi, yi = _maybe_int(x), _maybe_int(y)
        if xi == 1:
            out.append(y)
        elif yi == 1 or (xi is not None and xi == yi) or x is y:
            out.append(x)
        elif xi is None or yi is None:
            out.append(x)  # symbolic sizes: trust that they agree, as TVM does
        else:
            raise ShapeError(f"{op}: shapes {tuple(map(str, shape_a))} and {tuple(map(str, shape_b))} "
                             f"do not broadcast (dim {i}: {xi} vs {yi})")
    return tuple(out)


def _maybe_int(x):
    if isinstance(x, int):
        return x
    if isinstance(x, IntImm):
        return x.value
    return None


def broadcast_index(tensor, out_idx):
    """Indices into tensor for the output index out_idx (drop leading dims, pin size-1 dims to 0)."""
    skip = len(out_idx) - len(tensor.shape)
    idx = []
    for d, size in enumerate(tensor.shape):
        idx.append(const(0, out_idx[skip + d].dtype) if _maybe_int(size) == 1 else out_idx[skip + d])
    return idx


def _binary(name: str, fn, tag: str = "broadcast"):
    def op(lhs, rhs):
        lt, rt = isinstance(lhs, te.Tensor), isinstance(rhs, te.Tensor)
        if not lt and not rt:
            return fn(convert(lhs), convert(rhs))
        if lt and rt:
            shape = broadcast_shape(lhs.shape, rhs.shape, name)
            return te.compute(shape, lambda *i: fn(lhs(*broadcast_index(lhs, i)), rhs(*broadcast_index(rhs, i))),
                              name=f"T_{name}", tag=tag)
        t, s = (lhs, rhs) if lt else (rhs, lhs)
        scalar = s if isinstance(s, PrimExpr) else const(s, t.dtype)
        if lt:
            return te.compute(t.shape, lambda *i: fn(t(*i), scalar), name=f"T_{name}", tag="elemwise")
        return te.compute(t.shape, lambda *i: fn(scalar, t(*i)), name=f"T_{name}", tag="elemwise")

    op.__name__ = name
    op.__doc__ = f"Element-wise {name} with numpy broadcasting; either side may be a scalar."
    return op


def _div(a, b):
    return a / b if a.dtype.is_float else tir.truncdiv(a, b)


def _floor_div(a, b):
    return tir.floor(a / b) if a.dtype.is_float else tir.floordiv(a, b)


def _floor_mod(a, b):
    return a - tir.floor(a / b) * b if a.dtype.is_float else tir.floormod(a, b)


def _mod(a, b):
    return tir.fmod(a, b) if a.dtype.is_float else tir.truncmod(a, b)


add = _binary("add", lambda a, b: a + b)
subtract = _binary("subtract", lambda a, b: a - b)
multiply = _binary("multiply", lambda a, b: a * b)
divide = _binary("divide", _div)
floor_divide = _binary("floor_divide", _floor_div)
mod = _binary("mod", _mod)
floor_mod = _binary("floor_mod", _floor_mod)
_pow = _binary("power", tir.power)


def power(lhs, rhs):
    """lhs ** rhs; a constant exponent 1, 2, 3 or 4 (GPT-2's GELU: x ** 3) as products: a pow call
    per element does not vectorize (it cost a fifth of GPT-2's time)."""
    n = _small_exponent(rhs)
    if n and isinstance(lhs, te.Tensor) and lhs.dtype.is_float:
        def fpow(*i):
            x = lhs(*i)
            out = x
            for _ in range(n - 1):
                out = out * x
            return out
        return te.compute(lhs.shape, fpow, name="T_power", tag="elemwise")
    return _pow(lhs, rhs)


def _small_exponent(e) -> int:
    """1..4 when e is that float constant (a number, a FloatImm or relay's 0-d constant tensor), else 0."""
    from kiln.ir.expr import FloatImm

    if isinstance(e, te.Tensor) and not e.shape and isinstance(e.op, te.ComputeOp) and len(e.op.body) == 1:
        e = e.op.body[0]
    value = e.value if isinstance(e, FloatImm) else e if isinstance(e, float) else None
    return int(value) if value in (1.0, 2.0, 3.0, 4.0) else 0
maximum = _binary("maximum", tir.max)
minimum = _binary("minimum", tir.min)
equal = _binary("equal", lambda a, b: a == b)
not_equal = _binary("not_equal", lambda a, b: a != b)
less = _binary("less", lambda a, b: a < b)
less_equal = _binary("less_equal", lambda a, b: a <= b)
greater = _binary("greater", lambda a, b: a > b)
greater_equal = _binary("greater_equal", lambda a, b: a >= b)
logical_and = _binary("logical_and", lambda a, b: tir.all(a, b))
logical_or = _binary("logical_or", lambda a, b: tir.any(a, b))
logical_xor = _binary("logical_xor", lambda a, b: a != b)
bitwise_and = _binary("bitwise_and", lambda a, b: a & b)
bitwise_or = _binary("bitwise_or", lambda a, b: a | b)
bitwise_xor = _binary("bitwise_xor", lambda a, b: a ^ b)


def broadcast_to(data, shape):
    """data stretched to shape by numpy broadcasting rules."""
    shape = tuple(convert(s) for s in shape)
    out = broadcast_shape(data.shape, shape, "broadcast_to")
    if len(out) != len(shape) or any(_maybe_int(o) != _maybe_int(s) for o, s in zip(out, shape)):
        raise ShapeError(f"broadcast_to: input 'data' of shape {tuple(map(str, data.shape))} cannot become "
                         f"{tuple(map(str, shape))}")
    return te.compute(shape, lambda *i: data(*broadcast_index(data, i)), name="T_broadcast_to", tag="broadcast")

