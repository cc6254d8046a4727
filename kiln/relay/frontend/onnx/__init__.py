"""ONNX importer. Converters live in one file per op category; CONVERTERS joins them."""

from . import (conv3d, data_dependent, einsum, elementwise, generate, grid, math_ops, ml, nn, quantized, recurrent, reduce, resize,
               sequence, spectral, tensor, transformer, unfold)
from .importer import from_onnx

CONVERTERS = {**elementwise.CONVERTERS, **nn.CONVERTERS, **reduce.CONVERTERS, **resize.CONVERTERS,
              **tensor.CONVERTERS, **quantized.CONVERTERS,
              **sequence.CONVERTERS, **einsum.CONVERTERS,
              **conv3d.CONVERTERS, **recurrent.CONVERTERS, **math_ops.CONVERTERS,
              **transformer.CONVERTERS, **generate.CONVERTERS,
              **grid.CONVERTERS, **spectral.CONVERTERS, **unfold.CONVERTERS,
              **data_dependent.CONVERTERS, **ml.CONVERTERS}

__all__ = ["from_onnx", "CONVERTERS"]
