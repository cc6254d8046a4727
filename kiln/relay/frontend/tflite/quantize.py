"""Quantized tensors as float: kiln imports int8/uint8 TFLite models by dequantizing.

Every tensor of the graph is carried as its real value, ``(q - zero_point) * scale``.
Quantized weights and biases are dequantized once at import (per-tensor or per-channel).
After each op whose output tensor is quantized, the value is rounded to that tensor's grid
(``fake_quant``): the result is exactly a value the integer kernel could produce, so the
float graph tracks TFLite's integer arithmetic to within one quantization step (the integer
kernels round their fixed-point rescaling differently at ties). Integer graph inputs are
dequantized on entry and integer graph outputs quantized on exit, so the compiled model
takes and returns the same dtypes as the .tflite model.
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
    scale: np.ndarray        # per-tensor (size 1) or per-channel
    zero_point: np.ndarray
    axis: int                # quantized_dimension for per-channel parameters

    def per_tensor(self) -> tuple[float, int]:
        return float(self.scale.reshape(-1)[0]), int(self.zero_point.reshape(-1)[0])


def read_qparams(tensor_fb) -> QParams | None:
    q = tensor_fb.Quantization()
    if q is None or q.ScaleLength() == 0:
        return None
    scale = q.ScaleAsNumpy().astype("float64")
    zp = q.ZeroPointAsNumpy().astype("int64") if q.ZeroPointLength() else np.zeros_like(scale, dtype="int64")
    return QParams(scale, zp, int(q.QuantizedDimension()))


def dequantize_array(values: np.ndarray, qp: QParams) -> np.ndarray:
    """Real values of a quantized constant, per channel along ``qp.axis`` when there are several scales."""
    if qp.scale.size == 1:
        return ((values.astype("float64") - qp.zero_point.reshape(-1)[0]) * qp.scale[0]).astype("float32")
    shape = [1] * values.ndim
    shape[qp.axis] = -1
    real = (values.astype("float64") - qp.zero_point.reshape(shape)) * qp.scale.reshape(shape)
    return real.astype("float32")


def _round(x):
    """Round half away from zero, as TFLite's kernels do (relay's round goes half to even)."""
    return tensor.multiply(tensor.sign(x), tensor.floor(tensor.add(tensor.abs(x), const(0.5, "float32"))))


def dequantize(x, qp: QParams):
    scale, zp = qp.per_tensor()
    return tensor.multiply(tensor.subtract(tf.cast(x, "float32"), const(float(zp), "float32")),
                           const(scale, "float32"))


def quantize(x, qp: QParams, dtype: str):
    """Float real values to the integer grid of ``qp`` as ``dtype``."""
    scale, zp = qp.per_tensor()
    lo, hi = RANGES[dtype]
    q = tensor.add(_round(tensor.divide(x, const(scale, "float32"))), const(float(zp), "float32"))
    return tf.cast(tensor.clip(q, float(lo), float(hi)), dtype)


def fake_quant(x, qp: QParams, dtype: str, with_zero_point: bool = False):
    """Round float real values to the grid of ``qp`` and return them as real values again.

    Most integer kernels round the rescaled value and then add the zero point;
    ``with_zero_point`` rounds after adding it, as TFLite's int8 average pooling does (it
    averages the stored integers), which differs at ties.
    """
    scale, zp = qp.per_tensor()
    lo, hi = RANGES[dtype]
    v = tensor.divide(x, const(scale, "float32"))
    if with_zero_point:
        q = tensor.subtract(_round(tensor.add(v, const(float(zp), "float32"))), const(float(zp), "float32"))
    else:
        q = _round(v)
    return tensor.multiply(tensor.clip(q, float(lo - zp), float(hi - zp)), const(scale, "float32"))
