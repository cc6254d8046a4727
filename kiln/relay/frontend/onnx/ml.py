"""Converters of the ``ai.onnx.ml`` domain that are tensor arithmetic: Binarizer and
ArrayFeatureExtractor (the tree ensembles, label encoders and vectorizers are not converted)."""

from __future__ import annotations

import numpy as np

from ...expr import const
from ...op import tensor
from ...op import transform as tf

DOMAIN = "ai.onnx.ml"


def _binarizer(ctx, ins, attrs):
    x = ins[0]
    dtype = str(ctx.type_of(x).dtype)
    return tf.cast(tensor.greater(x, const(np.array(attrs.get("threshold", 0.0), dtype))), dtype)


def _array_feature_extractor(ctx, ins, attrs):
    """X[..., indices] (a 1-D X gives a row: [1, len(indices)])."""
    x, idx = ins
    shape = ctx.shape_of(x)
    if len(shape) == 1:
        x = tf.reshape(x, (1, shape[0]))
    return tf.take(x, tf.reshape(idx, (-1,)), axis=-1, mode="clip")


CONVERTERS = {"Binarizer": _binarizer, "ArrayFeatureExtractor": _array_feature_extractor}
DOMAIN_OPS = frozenset((DOMAIN, op) for op in CONVERTERS)
