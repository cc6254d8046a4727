"""ONNX importer. Converters live in one file per op category; CONVERTERS joins them."""

from . import elementwise, nn, reduce, tensor
from .importer import from_onnx

CONVERTERS = {**elementwise.CONVERTERS, **nn.CONVERTERS, **reduce.CONVERTERS, **tensor.CONVERTERS}

__all__ = ["from_onnx", "CONVERTERS"]
