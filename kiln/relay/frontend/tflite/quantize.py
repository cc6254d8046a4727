"""Quantization parameters of TFLite tensors and TFLite's integer arithmetic as relay ops.

Quantized tensors (int8, uint8, int16) stay integers in the imported graph: the converters in
qnn_nn.py / qnn_elementwise.py write each op as ``relay.qnn`` ops and integer relay ops with the
arithmetic of TFLite's reference kernels (docs/quantization.md lists which ops are exact):

- rescaling is ``qnn.requantize`` with rounding ``TFLITE`` (saturating rounding doubling high
  multiply, then a rounding right shift), the multiplier computed in float64 from the float32
  scales as TFLite's ``Prepare`` does (passed as a float64 constant so it is not rounded to float32);
- CONV_2D, DEPTHWISE_CONV_2D and FULLY_CONNECTED: TFLite's optimized kernels (ruy's GEMM, the
  SIMD depthwise kernel) round twice, both times half up: ``(x * q + 2**30) >> 31``, then a
  rounding shift. That is two ``qnn.requantize`` with rounding ``UPWARD`` (multipliers
  ``q / 2**31`` and ``2**-shift``, both exact), called ``GEMM`` here;
- int16 activations with int64 accumulators (int16x8) rescale with TFLite's 64-bit
  ``MultiplyByQuantizedMultiplier``: one rounding half up (``UPWARD``), the multiplier cut to 16
  bits in convolutions (``wide``), whole in FULLY_CONNECTED;
- float to integer rounds half away from zero (``std::round``), as TFLite's QUANTIZE.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...expr import const
from ...op import tensor
from ...op import transform as tf

RANGES = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767)}


@dataclass(frozen=True)
class QParams:
    scale: np.ndarray        # per-tensor (size 1) or per-channel, float64 of the file's float32
    zero_point: np.ndarray
    axis: int                # quantized_dimension for per-channel parameters

    def per_tensor(self) -> tuple[float, int]:
        return float(self.scale.reshape(-1)[0]), int(self.zero_point.reshape(-1)[0])

    @property
    def s(self) -> float:
        return float(self.scale.reshape(-1)[0])

    @property
    def z(self) -> int:
        return int(self.zero_point.reshape(-1)[0])


def read_qparams(tensor_fb) -> QParams | None:
    q = tensor_fb.Quantization()
    if q is None or q.ScaleLength() == 0:
        return None
    scale = q.ScaleAsNumpy().astype("float64")
    zp = q.ZeroPointAsNumpy().astype("int64") if q.ZeroPointLength() else np.zeros_like(scale, dtype="int64")
    return QParams(scale, zp, int(q.QuantizedDimension()))


def qparams_problem(qp: QParams, dtype: str, shape) -> str | None:
    """Why ``qp`` cannot describe a ``dtype`` tensor of ``shape`` (None when it can)."""
    s = qp.scale
    if s.size == 0 or np.any(~np.isfinite(s)) or np.any(s <= 0):
        return (f"scale {s.ravel()[:8].tolist()} must be finite and > 0 (a quantized tensor needs a positive "
                "step); convert the model again")
    if dtype in RANGES:
        lo, hi = RANGES[dtype]
        z = qp.zero_point
        if np.any(z < lo) or np.any(z > hi):
            return f"zero point {z.ravel()[:8].tolist()} is outside {dtype} [{lo}, {hi}]; convert the model again"
    elif np.any((qp.zero_point < -(1 << 31)) | (qp.zero_point >= 1 << 31)):  # int32/int64 biases (zero point 0)
        return f"zero point {qp.zero_point.ravel()[:8].tolist()} does not fit int32; convert the model again"
    if qp.zero_point.size not in (1, s.size) or (s.size > 1 and not (
            0 <= qp.axis < len(shape) and shape[qp.axis] == s.size)):
        return (f"{s.size} scales and {qp.zero_point.size} zero points along axis {qp.axis} do not fit shape "
                f"{list(shape)} (one per tensor, or one per channel of the quantized dimension); the file is damaged")
    return None


def dequantize_array(values: np.ndarray, qp: QParams) -> np.ndarray:
    """Real values of a quantized constant, per channel along ``qp.axis`` when there are several scales."""
    if qp.scale.size == 1:
        return ((values.astype("float64") - qp.zero_point.reshape(-1)[0]) * qp.scale[0]).astype("float32")
    shape = [1] * values.ndim
    shape[qp.axis] = -1
    real = (values.astype("float64") - qp.zero_point.reshape(shape)) * qp.scale.reshape(shape)
    return real.astype("float32")


def f64(value):
    """A float64 constant: a requantize multiplier that must not be rounded to float32."""
    return const(np.asarray(value, dtype="float64"))


def round_away(x):
    """Round half away from zero (TFLite's ``std::round``; relay's round goes half to even).
    ``floor(|x|)`` and ``|x| - floor(|x|)`` are exact in float32, so ties are seen as ties.
    ``x``: an expression, or a function building one (then every use gets its own copy, a tree
    that FuseOps puts in one kernel: it fuses no op whose result has two consumers)."""
    make = x if callable(x) else (lambda: x)
    a = lambda: tensor.abs(make())  # noqa: E731
    f = lambda: tensor.floor(a())  # noqa: E731
    up = tf.cast(tensor.greater_equal(tensor.subtract(a(), f()), const(0.5, "float32")), "float32")
    return tensor.multiply(tensor.sign(make()), tensor.add(f(), up))


def round_away_np(x):
    a = np.abs(np.asarray(x))
    return np.sign(x) * (np.floor(a) + (a - np.floor(a) >= 0.5))


def quantize(x, qp: QParams, dtype: str):
    """Float real values to the integer grid of ``qp`` as ``dtype``: TFLite's QUANTIZE,
    ``round_away(x / scale) + zero_point`` in float32."""
    scale, zp = qp.per_tensor()
    lo, hi = RANGES[dtype]
    q = tensor.add(round_away(lambda: tensor.divide(x, const(np.float32(scale), "float32"))),
                   const(float(zp), "float32"))
    return tf.cast(tensor.clip(q, float(lo), float(hi)), dtype)


def dequantize(x, qp: QParams):
    """``float32(q - zero_point) * scale``, as TFLite's DEQUANTIZE."""
    from ...qnn import op as qnn
    return qnn.dequantize(x, np.float32(qp.s), int(qp.z))


def activation_range(code: int, qp: QParams, dtype: str) -> tuple[int, int]:
    """TFLite's CalculateActivationRangeQuantized: the integer clamp of a fused activation."""
    if dtype not in RANGES:  # a damaged file: a quantized op's output declared int32, float32...
        raise ValueError(f"its output is {dtype} with quantization parameters; a quantized op writes "
                         "int8, uint8 or int16 (the file is damaged)")
    lo, hi = RANGES[dtype]
    scale, zp = np.float32(qp.s), qp.z

    def q(v):  # zero_point + round(v / scale), in float32 as TFLite
        return zp + int(round_away_np(np.float32(v) / scale))

    if code == 1:    # RELU
        return max(lo, q(0.0)), hi
    if code == 3:    # RELU6
        return max(lo, q(0.0)), min(hi, q(6.0))
    if code == 2:    # RELU_N1_TO_1
        return max(lo, q(-1.0)), min(hi, q(1.0))
    return lo, hi


def clamp(x, lo: int, hi: int, dtype: str):
    """Integer clamp of ``x`` (already ``dtype``) to [lo, hi]; nothing when that is the whole dtype."""
    if (lo, hi) == RANGES[dtype]:
        return x
    return tensor.minimum(tensor.maximum(x, const(lo, dtype)), const(hi, dtype))


def requantize(x, real, out_zp: int, out_dtype: str, axis: int = -1, wide: bool = False, rounding: str = "TFLITE"):
    """``out_zp + MultiplyByQuantizedMultiplier(x, real)`` clipped to ``out_dtype``.

    ``x`` is an int32 tensor already centered (its zero point subtracted); ``real`` the float64
    multiplier (per channel along ``axis`` when it has several values). ``wide``: TFLite's 64-bit
    variant (int16x8 kernels with int64 accumulators), the multiplier rounded to 16 bits and one
    rounding half up."""
    from ...qnn import op as qnn
    real = checked_multiplier(real)
    if wide:
        real, rounding = reduced_multiplier(real), "UPWARD"
    elif rounding == "GEMM":
        from ...qnn.fixed_point import quantize_multiplier
        q, e = quantize_multiplier(real)
        first = q.astype(np.float64) * np.exp2(np.maximum(e, 0).astype(np.float64) - 31)
        high = requantize(x, first, 0, "int32", axis, rounding="UPWARD")
        return requantize(high, np.exp2(-np.maximum(-e, 0).astype(np.float64)), out_zp, out_dtype, axis,
                          rounding="UPWARD")
    r = real if real.size > 1 else real.reshape(())
    return qnn.requantize(x, f64(r), 0, f64(1.0), int(out_zp), axis=axis, rounding=rounding,
                          out_dtype=out_dtype)


def checked_multiplier(real) -> np.ndarray:
    """``real`` (float64), refused at import when no integer kernel can apply it (relay.build would)."""
    real = np.asarray(real, dtype=np.float64)
    if np.any(~np.isfinite(real)) or np.any(np.abs(real) >= 2.0 ** 30):
        raise ValueError(f"a rescale multiplier made of the tensors' scales is {np.abs(real).max():g}, beyond the "
                         "2**30 integer kernels apply; the quantization parameters are damaged")
    return real


def reduced_multiplier(real: np.ndarray) -> np.ndarray:
    """The multiplier TFLite's int64 MultiplyByQuantizedMultiplier really applies: the 31-bit
    mantissa rounded to 15 bits (``(q + 2**15) >> 16``, at most 0x7FFF), as an exact float64."""
    from ...qnn.fixed_point import quantize_multiplier
    q, e = quantize_multiplier(real)
    reduced = np.where(q < 0x7FFF0000, (q + (1 << 15)) >> 16, 0x7FFF)
    return reduced.astype(np.float64) * np.exp2(e.astype(np.float64) - 15)


def requantize_np(x, real):
    """numpy of TFLite's MultiplyByQuantizedMultiplier (32-bit, double rounding); tables use it."""
    from ...qnn.fixed_point import requantize_int
    return requantize_int(np.asarray(x, np.int64), np.asarray(real, np.float64), "TFLITE")
