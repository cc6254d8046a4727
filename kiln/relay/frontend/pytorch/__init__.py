"""PyTorch importer for TorchScript modules (``torch.jit.trace`` / ``torch.jit.load``).

Converters live in one file per op category; CONVERTERS joins them (keys are ``aten::`` names
without the in-place ``_`` suffix).
"""

from . import elementwise, nn, sequence, tensor
from .importer import from_pytorch

CONVERTERS = {**elementwise.CONVERTERS, **nn.CONVERTERS, **tensor.CONVERTERS, **sequence.CONVERTERS}

__all__ = ["from_pytorch", "CONVERTERS"]
