"""TFLite importer (flatbuffers read with the ``tflite`` package).

Converters live in one file per op category; CONVERTERS joins them (keys are TFLite builtin
operator names). Quantized models are imported by dequantizing to float: see importer.py.
"""

from . import elementwise, nn, tensor
from .importer import from_tflite

CONVERTERS = {**elementwise.CONVERTERS, **nn.CONVERTERS, **tensor.CONVERTERS}

__all__ = ["from_tflite", "CONVERTERS"]
