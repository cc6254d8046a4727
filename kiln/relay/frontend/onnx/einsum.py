"""ONNX Einsum as relay ops: each operand's repeated letters become a diagonal (mask and sum),
its axes are transposed into one shared letter order with size-1 axes for the letters it lacks,
the operands are multiplied with broadcasting, and the letters not in the output are summed.

That is exact but materializes the full product of all letters' sizes; contractions of two
operands in transformer exports would be faster as batch_matmul (a later speed item).
"""

from __future__ import annotations

import string

import numpy as np

from ...expr import const
from ...op import reduce, tensor
from ...op import transform as tf


def _parse(ctx, equation: str, ranks: list) -> tuple:
    """(letters per operand, output letters), "..." spelled out as capital letters."""
    eq = equation.replace(" ", "")
    lhs, arrow, out = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        ctx.fail(f"equation {equation!r} names {len(terms)} operands, the node has {len(ranks)} inputs")
    spare = string.ascii_uppercase
    n_ell = 0
    for term, rank in zip(terms, ranks):
        if "..." in term:
            n_ell = max(n_ell, rank - len(term.replace("...", "")))
    ell = spare[:n_ell]
    parsed = []
    for term, rank in zip(terms, ranks):
        plain = term.replace("...", "")
        if not all(c in string.ascii_lowercase for c in plain):
            ctx.fail(f"equation {equation!r}: operand {term!r} must use letters a-z and at most one '...'")
        if "..." in term:
            k = rank - len(plain)
            term = term.replace("...", ell[n_ell - k:] if k else "")
        if len(term) != rank:
            ctx.fail(f"equation {equation!r}: operand {term!r} has {len(term)} letters for a {rank}-d input")
        parsed.append(term)
    if arrow:
        out = out.replace("...", ell)
    else:  # implicit output: the broadcast axes, then the letters used once, alphabetically
        counts = "".join(parsed)
        out = ell + "".join(sorted(c for c in set(counts) if c.islower() and counts.count(c) == 1))
    if len(set(out)) != len(out) or any(c not in "".join(parsed) for c in out):
        ctx.fail(f"equation {equation!r}: output letters {out!r} must be distinct and appear in the inputs")
    return parsed, out


def _diagonal(ctx, x, letters: str):
    """Collapse repeated letters of one operand onto their diagonal."""
    while len(set(letters)) != len(letters):
        c = next(c for c in letters if letters.count(c) > 1)
        i, j = letters.index(c), letters.index(c, letters.index(c) + 1)
        shape = ctx.shape_of(x)
        mask_shape = [1] * len(shape)
        mask_shape[i], mask_shape[j] = shape[i], shape[j]
        eye = np.eye(shape[i], dtype=ctx.type_of(x).dtype).reshape(mask_shape)
        x = reduce.sum(tensor.multiply(x, const(eye)), (j,))
        letters = letters[:j] + letters[j + 1:]
    return x, letters


def _einsum(ctx, ins, attrs):
    if "equation" not in attrs:
        ctx.fail("attribute equation is required")
    terms, out = _parse(ctx, attrs["equation"], [len(ctx.shape_of(x)) for x in ins])
    order = "".join(dict.fromkeys("".join(terms)))
    product = None
    for x, letters in zip(ins, terms):
        x, letters = _diagonal(ctx, x, letters)
        mine = [c for c in order if c in letters]
        if letters and list(letters) != mine:
            x = tf.transpose(x, [letters.index(c) for c in mine])
        shape = ctx.shape_of(x)
        full = tuple(shape[mine.index(c)] if c in mine else 1 for c in order)
        if full != tuple(shape):
            x = tf.reshape(x, full)
        product = x if product is None else tensor.multiply(product, x)
    summed = tuple(i for i, c in enumerate(order) if c not in out)
    kept = [c for c in order if c in out]
    if summed:
        product = reduce.sum(product, summed)
    if kept != list(out):
        product = tf.transpose(product, [kept.index(c) for c in out])
    return product


CONVERTERS = {"Einsum": _einsum}
