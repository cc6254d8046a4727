"""NarrowRequantize: the int64 fixed-point requantize of qnn's canonical form (qnn/canonicalize.py)
rewritten with 32-bit values where the constants allow, for 32-bit cores (Cortex-M: issue 36).

The canonical requantize of an int32 accumulator ``x`` (per channel ``q``, ``r``, ``s``, ``o``)::

    cast(minimum(maximum(((int64(x) * q + r) >> s) + o, lo), hi), int8)

is on a 32-bit core a 64 x 64-bit multiply (three multiplies), a 64-bit add, a variable 64-bit
shift with its range check, and 64-bit compares: ~50 instructions per output on a Cortex-M4.
When every ``q`` fits in int32 and every ``s`` is in [33, 63] (real multipliers below 2**-2 --
a conv's ``s_x s_w / s_y`` is ~1e-3), the same integers come from::

    h = int32((int64(x) * int64(q32) + r) >> 32)       # one SMLAL; the high word is h
    cast(minimum(maximum((h >> (s - 32)) + o32, lo), hi), int8)   # in int32

onnxruntime's rounding (``FLOAT32``, the ONNX importer's: ``clip(round(float32(x) * m) + z, lo, hi)``
in float32) keeps its float32 multiply and round half to even, but the zero point and the clamp
move to int32 when every ``|m| < 0.5`` (so ``|round(float32(x) * m)| <= 2**30``: the conversion is
exact) and ``z`` is integral: ``minimum(maximum(int32(round(float32(x) * m)) + z, lo), hi)``, the
same integers (a float32 sum that rounds, past 2**24, is saturated by the clamp either way) in
an integer add and one SSAT instead of float compares.

The zero-point term and the bias the canonical conv adds one after the other
(``bias_add(subtract(conv, zx * sum w), b)``, two per-channel loads per output) become one
per-channel constant ``b - zx * sum w`` (int32 arithmetic is modular: the same sums).

Exact: ``(v >> 32) >> (s - 32) == v >> s`` for an arithmetic shift (floor division composes), any
int64 ``v >> 32`` fits in int32, and ``|h >> (s - 32)| <= 2**30`` with ``|o| < 2**30`` keeps the
sum in int32. So the board's integers equal the host's int64 build bit for bit
(tests/micro/test_cortex_m_int8.py). Runs only when the current target's ``-mcpu`` is a
Cortex-M core; other targets keep the canonical form.
"""

from __future__ import annotations

import numpy as np

from ..expr import Call, Constant, const
from ..op import math_ops as fmath
from ..op import tensor as ft
from ..op import transform as ftf
from ..visitor import ExprMutator


def _op(e, op) -> bool:
    return isinstance(e, Call) and e.op is op


def _int_const(e, lo: int, hi: int):
    """The integer array of constant ``e`` when all its values are in [lo, hi], else None."""
    if not isinstance(e, Constant) or e.data.dtype.kind not in "iu":
        return None
    v = np.asarray(e.data).astype(np.int64)
    return v if v.size and v.min() >= lo and v.max() <= hi else None


def _dtype(e) -> str:
    try:
        return e.checked_type.dtype
    except Exception:  # noqa: BLE001 - an untyped node: no match
        return ""


def match(call):
    """``(x, q, r, s, o, lo, hi)`` (numpy constants) when ``call`` is a canonical requantize that
    narrows exactly, else None."""
    if not _op(call, ftf.CAST) or str(call.attrs.dtype) not in ("int8", "uint8", "int16"):
        return None
    mn = call.args[0]
    if not _op(mn, ft.MINIMUM) or _dtype(mn) != "int64":
        return None
    mx, hi = mn.args
    if not _op(mx, ft.MAXIMUM):
        return None
    a2, lo = mx.args
    lo, hi = _int_const(lo, -(1 << 15), 1 << 16), _int_const(hi, -(1 << 15), 1 << 16)
    if lo is None or hi is None:
        return None
    o = np.zeros((), np.int64)
    rs = a2
    if _op(a2, ft.ADD):
        rs, oc = a2.args
        o = _int_const(oc, -(1 << 30), 1 << 30)
        if o is None:
            return None
    if not _op(rs, fmath.RIGHT_SHIFT):
        return None
    a1, sc = rs.args
    s = _int_const(sc, 33, 63)
    if s is None or not _op(a1, ft.ADD):
        return None
    m, rc = a1.args
    if not isinstance(rc, Constant) or np.asarray(rc.data).dtype != np.int64 or not _op(m, ft.MULTIPLY):
        return None
    c, qc = m.args
    q = _int_const(qc, -(1 << 31), (1 << 31) - 1)
    if q is None or not _op(c, ftf.CAST) or str(c.attrs.dtype) != "int64":
        return None
    x = c.args[0]
    if _dtype(x) not in ("int32", "int16", "int8", "uint8", "uint16"):
        return None
    return x, q, np.asarray(rc.data), s, o, lo, hi


def match_float32(call):
    """``(y, z, lo, hi)`` when ``call`` is ``cast(clip(add(round(multiply(cast(x, float32), m)), z)),
    int8)`` with constants ``|m| < 0.5``, integral ``z`` and an int8/uint8/int16 result; ``y`` is
    the ``round(...)`` expression."""
    if not _op(call, ftf.CAST) or str(call.attrs.dtype) not in ("int8", "uint8", "int16"):
        return None
    clip = call.args[0]
    if not _op(clip, ft.CLIP) or _dtype(clip) != "float32":
        return None
    add = clip.args[0]
    if not _op(add, ft.ADD):
        return None
    y, zc = add.args
    if not isinstance(zc, Constant) or not _op(y, ft.ROUND):
        return None
    z = np.asarray(zc.data, np.float64)
    if z.size == 0 or np.any(z != np.round(z)) or np.any(np.abs(z) > 1 << 16):
        return None
    m = y.args[0]
    if not _op(m, ft.MULTIPLY) or not isinstance(m.args[1], Constant):
        return None
    mv = np.asarray(m.args[1].data)
    if mv.dtype != np.float32 or mv.size == 0 or not np.all(np.abs(mv) < 0.5):
        return None
    c = m.args[0]
    if not _op(c, ftf.CAST) or _dtype(c.args[0]) not in ("int32", "int16", "int8", "uint8", "uint16"):
        return None
    lo, hi = float(clip.attrs.a_min), float(clip.attrs.a_max)
    if lo != np.round(lo) or hi != np.round(hi) or lo < -(1 << 16) or hi > 1 << 16:
        return None
    return y, z.astype(np.int32), int(lo), int(hi)


MAGIC = np.float32(12582912.0)  # 1.5 * 2**23


def narrow_float32(y, z, lo, hi, out_dtype):
    # round half to even as (v + 1.5 * 2**23) - 1.5 * 2**23 in float32: exact for |v| < 2**22 (the
    # FPU's rounding of the sum); a larger |v| comes out within 2 of v, which the clamp below
    # saturates to the same bound as the exact value (|v| <= 2**30 as |m| < 0.5), so two FPU adds
    # stand for rint (no VRINT on the M4F's FPv4)
    m = y.args[0]
    r = ftf.cast(ft.subtract(ft.add(m, const(MAGIC)), const(MAGIC)), "int32")
    if np.any(z):
        r = ft.add(r, const(z))
    return ftf.cast(ft.minimum(ft.maximum(r, const(lo, "int32")), const(hi, "int32")), out_dtype)


def narrow(x, q, r, s, o, lo, hi, out_dtype):
    """The int32 form of the requantize (module docstring)."""
    p = ft.multiply(ftf.cast(x, "int64"), ftf.cast(const(q.astype("int32")), "int64"))
    h = ftf.cast(fmath.right_shift(ft.add(p, const(r.astype("int64"))), const(32, "int64")), "int32")
    y = fmath.right_shift(h, const((s - 32).astype("int32")))
    if np.any(o):
        y = ft.add(y, const(o.astype("int32")))
    y = ft.minimum(ft.maximum(y, const(lo.astype("int32"))), const(hi.astype("int32")))
    return ftf.cast(y, out_dtype)


def match_bias(call):
    """``(x, c)`` when ``call`` is ``nn.bias_add(subtract(x, C1), C2)`` of int32 constants (C1 shaped
    to broadcast along the bias axis), as one ``add(x, c)``; else None."""
    from ..op import nn as fnn
    if not _op(call, fnn.BIAS_ADD) or _dtype(call) != "int32":
        return None
    sub, c2 = call.args
    if not _op(sub, ft.SUBTRACT) or not isinstance(c2, Constant) or not isinstance(sub.args[1], Constant):
        return None
    x, c1 = sub.args[0], np.asarray(sub.args[1].data)
    b = np.asarray(c2.data)
    shape = tuple(int(d) for d in call.checked_type.shape)
    axis = int(call.attrs.axis) % len(shape)
    if c1.dtype != np.int32 or b.dtype != np.int32 or b.ndim != 1:
        return None
    along = [1] * len(shape)
    along[axis] = b.size
    try:
        c = np.broadcast_to(b.reshape(along).astype(np.int64) - c1.astype(np.int64), np.broadcast_shapes(
            tuple(along), c1.shape))
    except ValueError:
        return None
    if c.ndim > len(shape):
        return None
    wrapped = ((c + (1 << 31)) % (1 << 32) - (1 << 31)).astype(np.int32)  # int32 sums wrap as the two adds do
    return x, np.ascontiguousarray(wrapped)


class _Narrow(ExprMutator):
    def visit_Function(self, f):
        if f.attrs.get("Primitive"):
            return f
        return super().visit_Function(f)

    def visit_Call(self, call):
        found = match_bias(call)
        if found is not None:
            return ft.add(self.visit(found[0]), const(found[1]))
        found = match_float32(call)
        if found is not None:
            y, *consts = found
            return narrow_float32(self.visit(y), *consts, str(call.attrs.dtype))
        found = match(call)
        if found is None:
            return super().visit_Call(call)
        x, *consts = found
        return narrow(self.visit(x), *consts, str(call.attrs.dtype))


def narrow_requantize(func):
    """``func`` (typed) with each canonical requantize that narrows exactly in int32."""
    return _Narrow().visit(func)


__all__ = ["narrow_requantize", "match", "narrow"]
