"""Keras importer for ``.h5`` files (read with h5py; TensorFlow is not needed).

Converters live in one file per layer category; CONVERTERS joins them (keys are Keras layer
class names).
"""

from . import conv, core
from .importer import from_keras

CONVERTERS = {**conv.CONVERTERS, **core.CONVERTERS}

__all__ = ["from_keras", "CONVERTERS"]
