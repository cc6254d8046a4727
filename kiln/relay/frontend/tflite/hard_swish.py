"""TFLite's 8-bit HARD_SWISH arithmetic in numpy (16-bit fixed point), for the importer's table.

TFLite does not compute ``x * relu6(x + 3) / 6`` in float for int8: it rescales the input to a
16-bit "hires" scale (``input_scale / 128``), computes the gate ``(x + 3) / 6`` clamped to
[0, 1] as a Q15 value from ``x`` on the scale where 3.0 is 32768, multiplies the two with a
truncating doubling high multiply, and shifts to the output scale. Both multipliers are computed
in float32 and cut to 16 bits. Written here from that description, value by value (vectorized);
the importer evaluates it on all 256 inputs once.
"""

from __future__ import annotations

import numpy as np

from ...qnn.fixed_point import quantize_multiplier

I16_MIN, I16_MAX = -(1 << 15), (1 << 15) - 1


def _q15(real: float) -> tuple[int, int]:
    """(16-bit multiplier, exponent) of ``real``: the 31-bit one rounded to 16 bits."""
    q, e = quantize_multiplier(np.float64(real))
    q, e = int(q), int(e)
    q16 = I16_MAX if q >= (1 << 31) - 1 - (1 << 15) else (q + (1 << 15)) >> 16
    return q16, e


def _srdhm16(a, b):
    """Saturating rounding doubling high multiply of int16 values (ties away from zero)."""
    ab = a * b
    nudge = np.where(ab >= 0, 1 << 14, 1 - (1 << 14))
    t = ab + nudge
    high = np.where(t < 0, -((-t) >> 15), t >> 15)   # C division truncates toward zero
    return np.where((a == b) & (a == I16_MIN), I16_MAX, high)


def _sdhm16(a, b):
    """Doubling high multiply truncating toward zero (no rounding)."""
    ab = a * b
    high = np.where(ab < 0, -((-ab) >> 15), ab >> 15)
    return np.where((a == b) & (a == I16_MIN), I16_MAX, high)


def _sat_shift(v, amount):
    return np.clip(v * (1 << amount), I16_MIN, I16_MAX)


def _rdbpot(x, exponent):
    """Rounding divide by 2**exponent, ties away from zero."""
    if exponent <= 0:
        return x
    mask = (1 << exponent) - 1
    rem = x & mask
    threshold = (mask >> 1) + (x < 0)
    return (x >> exponent) + (rem > threshold)


def hard_swish_int(values: np.ndarray, iq, oq) -> np.ndarray:
    """The output integers (before the dtype clamp) for stored inputs ``values`` (int64)."""
    f32 = np.float32
    hires = f32(1.0 / 128.0) * f32(iq.s)
    out_m, out_e = _q15(float(f32(hires / f32(oq.s))))
    relu_m, relu_e = _q15(float(f32(hires / f32(3.0 / 32768.0))))
    if out_e > 0:
        raise ValueError(f"HARD_SWISH: output scale {oq.s} is below input scale / 128; TFLite refuses it too")
    x = np.asarray(values, np.int64) - iq.z
    hires_x = x * 128
    pre_out = _srdhm16(hires_x, np.int64(out_m))
    reluish = hires_x
    if relu_e > 0:
        reluish = _sat_shift(reluish, relu_e - 1)
    reluish = _srdhm16(reluish, np.int64(relu_m))
    if relu_e > 0:
        reluish = _sat_shift(reluish, 1)
    if relu_e < 0:
        reluish = _rdbpot(reluish, -relu_e)
    reluish = (reluish + (1 << 15)) >> 1
    out = _sdhm16(reluish, pre_out)
    return _rdbpot(out, -out_e) + oq.z
