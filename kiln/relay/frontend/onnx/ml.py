"""Converters of the ``ai.onnx.ml`` domain that are tensor arithmetic: Binarizer and
ArrayFeatureExtractor (the tree ensembles and label encoders are not converted); and the
default domain's TfIdfVectorizer over integer tokens."""

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


def _tfidf_vectorizer(ctx, ins, attrs):
    """Counts of the pool's n-grams in each row: for every n-gram size and skip distance, the
    windows of the row gathered by a constant index map, compared with the pool's n-grams of that
    size, matches summed; unigrams count once (skip distance 1), longer n-grams for every skip
    distance 1..max_skip_count+1. A constant one-hot matrix maps pool entries to output columns,
    after the TF / IDF / TFIDF weighting of each pool n-gram."""
    from ...op import nn, reduce

    if attrs.get("pool_strings"):
        ctx.fail("string pools are not supported (kiln runs numeric tensors); give pool_int64s")
    x = ins[0]
    shape = ctx.shape_of(x)
    if len(shape) not in (1, 2):
        ctx.fail(f"input of shape {list(shape)}: TfIdfVectorizer takes [C] or [N, C]")
    rows = x if len(shape) == 2 else tf.reshape(x, (1, shape[0]))
    length = int(shape[-1])
    pool = np.asarray(attrs.get("pool_int64s", []), np.int64)
    starts = list(attrs["ngram_counts"]) + [len(pool)]
    index = np.asarray(attrs["ngram_indexes"], np.int64)
    lo, hi, skips = int(attrs["min_gram_length"]), int(attrs["max_gram_length"]), int(attrs["max_skip_count"])
    width = int(index.max()) + 1 if index.size else 0
    mode = attrs.get("mode", "TF")
    if mode not in ("TF", "TFIDF", "IDF"):
        ctx.fail(f"mode {mode!r} must be TF, IDF or TFIDF")
    weights = np.asarray(attrs.get("weights", []), np.float32)
    if weights.size and weights.size != index.size:
        ctx.fail(f"{weights.size} weights for {index.size} n-grams; give one per n-gram of the pool")
    ctx.allocation((ctx.shape_of(rows)[0], width), "float32")
    tokens = tf.cast(rows, "int64") if str(ctx.type_of(rows).dtype) != "int64" else rows
    counts, first = [], 0
    for n, (begin, end) in enumerate(zip(starts[:-1], starts[1:]), start=1):
        grams = pool[begin:end].reshape(-1, n)
        ids = np.arange(first, first + len(grams))
        first += len(grams)
        if not len(grams) or not lo <= n <= hi:
            continue
        total = None
        for d in ([1] if n == 1 else range(1, skips + 2)):
            windows = length - d * (n - 1)
            if windows <= 0:
                continue
            where = np.arange(windows)[:, None] + d * np.arange(n)[None, :]
            win = tf.expand_dims(tf.take(tokens, const(where), axis=1), 2)          # [B, W, 1, n]
            hit = reduce.all(tensor.equal(win, const(grams)), axis=3)              # [B, W, P]
            found = reduce.sum(tf.cast(hit, "float32"), axis=1)                    # [B, P]
            total = found if total is None else tensor.add(total, found)
        if total is not None:
            if mode == "IDF":
                total = tf.cast(tensor.greater(total, const(np.float32(0))), "float32")
            if mode in ("IDF", "TFIDF") and weights.size:  # the weight of each pool n-gram (the spec's,
                total = tensor.multiply(total, const(weights[ids]))  # and onnxruntime's, reading)
            onehot = np.zeros((width, len(grams)), np.float32)
            onehot[index[ids], np.arange(len(grams))] = 1.0
            counts.append(nn.dense(total, const(onehot)))
    y = counts[0] if counts else const(np.zeros((ctx.shape_of(rows)[0], width), np.float32))
    for c in counts[1:]:
        y = tensor.add(y, c)
    return y if len(shape) == 2 else tf.reshape(y, (width,))


CONVERTERS = {"Binarizer": _binarizer, "ArrayFeatureExtractor": _array_feature_extractor,
              "TfIdfVectorizer": _tfidf_vectorizer}
DOMAIN_OPS = frozenset((DOMAIN, op) for op in ("Binarizer", "ArrayFeatureExtractor"))
