"""Fixed-point arithmetic behind ``qnn.requantize``: a real multiplier as (int32 mantissa, shift)
and the three rounding modes, in numpy. The canonicalize pass emits the same arithmetic as
relay ops (int64), so the numpy here is the op's reference and the kernels match it bit for bit.

A positive real ``r`` is ``q * 2**(e - 31)`` with ``q`` in [2**30, 2**31) (``quantize_multiplier``).
``x * r`` is then the int64 product ``x * q`` shifted right by ``31 - e`` bits, rounded:

- ``UPWARD``: ties toward +inf (``(p + half) >> s``), TVM's default;
- ``TONEAREST``: ties away from zero;
- ``TFLITE``: TFLite's reference kernels: a left shift for ``r >= 1``, then the saturating rounding
  doubling high multiply (``(x*q + nudge) / 2**31`` truncated, nudge ``2**30`` or ``1 - 2**30`` by
  sign) and a rounding divide by ``2**(-e)`` (ties away from zero), two roundings as TFLite does.

``FLOAT32`` is not fixed point: it is onnxruntime's arithmetic (MLAS), which the ONNX importer
selects. The multiplier is ``si / so`` divided in float32 (``float32_multiplier``), the integer is
converted to float32, multiplied in float32 and rounded half to even (``requantize_float32``).
qnn.add, qnn.global_avg_pool2d and qnn.concatenate have their own float32 forms in this mode
(``add_float32``, ``concat_float32``: onnxruntime's QLinearAdd and QLinearConcat).
"""

from __future__ import annotations

import numpy as np

ROUNDINGS = ("UPWARD", "TONEAREST", "TFLITE", "FLOAT32")
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


def quantize_multiplier(real) -> tuple[np.ndarray, np.ndarray]:
    """(q, e) arrays with ``real == q * 2**(e - 31)`` to 31 bits; ``q`` 0 for multipliers below 2**-62."""
    real = np.asarray(real, dtype=np.float64)
    if np.any(~np.isfinite(real)) or np.any(real < 0):
        raise ValueError(f"requantize multipliers must be finite and >= 0, got {real.ravel()[:8]}")
    mant, exp = np.frexp(real)
    q = np.floor(mant * (1 << 31) + 0.5).astype(np.int64)  # half away from zero, as std::round
    carry = q == (1 << 31)
    q = np.where(carry, q // 2, q)
    exp = np.where(carry, exp + 1, exp).astype(np.int64)
    tiny = (exp < -31) | (q == 0)
    q = np.where(tiny, 0, q)
    exp = np.where(tiny, 0, exp)
    if np.any(exp > 30):
        raise ValueError(f"requantize multiplier {real.max()} is too large (above 2**30)")
    return q, exp


def requantize_int(x, real, rounding: str = "UPWARD") -> np.ndarray:
    """``round(x * real)`` in fixed point (int64 result, not clipped). ``real`` broadcasts with ``x``."""
    if rounding not in ROUNDINGS:
        raise ValueError(f"rounding must be one of {ROUNDINGS}, got {rounding!r}")
    x = np.asarray(x, dtype=np.int64)
    if rounding == "FLOAT32":
        return requantize_float32(x, np.asarray(real).astype(np.float32))
    q, e = quantize_multiplier(real)
    if rounding == "TFLITE":
        return _tflite(x, q, e)
    s = 31 - e
    p = x * q
    half = np.left_shift(np.int64(1), s - 1)
    if rounding == "TONEAREST":
        half = half - (p < 0)
    return np.right_shift(p + half, s)


def float32_multiplier(in_scale, out_scale, count: int = 1) -> np.ndarray:
    """``in_scale / (out_scale * count)`` in float32 arithmetic, as onnxruntime computes its
    requantize scale (per channel where a scale is 1-D; ``count``: the pixels a global pool sums)."""
    so = np.asarray(out_scale, np.float32)
    if count != 1:
        so = (so * np.float32(count)).astype(np.float32)
    return (np.asarray(in_scale, np.float32) / so).astype(np.float32)


def requantize_float32(x, m32) -> np.ndarray:
    """``round_half_even(float32(x) * m32)`` (float32 product) as int64, not clipped."""
    prod = np.asarray(x).astype(np.float32) * np.asarray(m32, np.float32)
    return np.rint(prod.astype(np.float32)).astype(np.int64)


def fma32(a, b, c) -> np.ndarray:
    """float32 ``a * b + c`` rounded once: the product is exact in float64 (24 + 24 bits); the sum
    is rounded to float64 and then to float32, which is the single rounding unless the two
    terms are over 2**29 apart."""
    return (np.asarray(a, np.float64) * np.asarray(b, np.float64) + np.asarray(c, np.float64)).astype(np.float32)


def add_float32(a, za, b, zb, sa, sb, so, zo, sign: int = 1) -> np.ndarray:
    """onnxruntime's QLinearAdd (MLAS, x86 AVX2/AVX-512): ``ra = sa / so``, ``rb = sb / so`` and
    ``k = zo - (ra * za + rb * zb)`` in float32 (the inner product-sum fused), then
    ``fma(ra, a, fma(rb, b, k))`` rounded half to even, zero point included, not clipped.
    ``sign=-1`` subtracts ``b`` (the same arithmetic with ``-rb``)."""
    f = np.float32
    ra, rb = f(f(sa) / f(so)), f(sign) * f(f(sb) / f(so))
    k = f(f(zo) - fma32(ra, f(za), f(rb * f(zb))))
    inner = fma32(rb, np.asarray(b).astype(f), k)
    return np.rint(fma32(ra, np.asarray(a).astype(f), inner)).astype(np.int64)


def concat_float32(x, s, z, so, zo) -> np.ndarray:
    """onnxruntime's QLinearConcat of one input: dequantize (float32), quantize to the output
    (float32 division, half to even), zero point included, not clipped."""
    f = np.float32
    real = ((np.asarray(x, np.int64) - np.int64(z)).astype(f) * f(s)).astype(f)
    return (np.rint((real / f(so)).astype(f)) + np.int64(zo)).astype(np.int64)


def _tflite(x, q, e):
    left = np.maximum(e, 0)
    right = np.maximum(-e, 0)
    x = np.clip(x * np.left_shift(np.int64(1), left), INT32_MIN, INT32_MAX)
    ab = x * q
    nudge = np.where(ab >= 0, 1 << 30, 1 - (1 << 30))
    high = _trunc_div(ab + nudge, np.int64(1 << 31))
    mask = np.left_shift(np.int64(1), right) - 1
    rem = np.bitwise_and(high, mask)
    threshold = np.right_shift(mask, 1) + (high < 0)
    return np.right_shift(high, right) + (rem > threshold)


def _trunc_div(a, b):
    qq = np.abs(a) // b
    return np.where(a < 0, -qq, qq)


def dtype_range(dtype: str) -> tuple[int, int]:
    info = np.iinfo(np.dtype(dtype))
    return int(info.min), int(info.max)
