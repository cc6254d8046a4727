"""Integer shifts with ONNX BitShift's rule: a shift by the bit width or more gives 0 (LLVM and C
leave it undefined)."""

from __future__ import annotations

from kiln import tir
from kiln.ir.expr import const

from .broadcast import _binary


def _shift(a, b, left: bool):
    width = const(a.dtype.bits, b.dtype)
    shifted = (a << b) if left else (a >> b)
    return tir.if_then_else(b >= width, const(0, a.dtype), shifted)


left_shift = _binary("left_shift", lambda a, b: _shift(a, b, True))
right_shift = _binary("right_shift", lambda a, b: _shift(a, b, False))


def reinterpret(x, dtype):
    """The bits of each element of ``x`` read as ``dtype`` (of the same width)."""
    from kiln import te
    return te.compute(x.shape, lambda *i: tir.reinterpret(dtype, x(*i)), name="T_reinterpret", tag="elemwise")
