"""TFLite importer (flatbuffers read with the ``tflite`` package).

Converters live in one file per op category; CONVERTERS joins the float ones and QCONVERTERS
the integer ones (keys are TFLite builtin operator names). Quantized models stay integer, with
TFLite's arithmetic: see importer.py and docs/quantization.md.
"""

from . import elementwise, nn, qnn_elementwise, qnn_nn, tensor
from .importer import from_tflite

CONVERTERS = {**elementwise.CONVERTERS, **nn.CONVERTERS, **tensor.CONVERTERS}
QCONVERTERS = {**qnn_elementwise.CONVERTERS, **qnn_nn.CONVERTERS}

__all__ = ["from_tflite", "CONVERTERS", "QCONVERTERS"]
