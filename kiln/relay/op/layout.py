"""Layout strings of relay ops: plain permutations ("NCHW", "NHWC") and channel-blocked ones
("NCHW16c": C split into C/16 chunks of 16, the block innermost), with numpy conversions.

Only blocks that divide their axis exactly are allowed: a blocked tensor never holds padding.
"""

from __future__ import annotations

import numpy as np

from kiln.layout import parse_layout as parse


def primal(layout: str) -> str:
    """The layout without its blocks: "NCHW16c" -> "NCHW"."""
    return "".join(a for a, f in parse(layout) if not f)


def channel_block(layout: str) -> int:
    """16 for "NCHW16c", 0 for a layout without a channel block."""
    return next((f for a, f in parse(layout) if f and a == "C"), 0)


def blocked_shape(shape: tuple, src: str, dst: str, fail=None) -> tuple:
    """The shape of a ``src``-layout tensor of ``shape`` in layout ``dst``."""
    def bad(msg):
        if fail:
            fail(msg)
        raise ValueError(msg)

    s, d = parse(src), parse(dst)
    if len(s) != len(shape):
        bad(f"layout {src!r} has {len(s)} axes but the input has {len(shape)}")
    if sorted(a for a, f in s if not f) != sorted(a for a, f in d if not f):
        bad(f"layouts {src!r} and {dst!r} have different axes")
    full: dict = {}
    for (axis, _), n in zip(s, shape):
        full[axis] = full.get(axis, 1) * n
    block = {a: f for a, f in d if f}
    for a, f in block.items():
        if full[a] % f:
            bad(f"axis {a} has {full[a]} elements, not a multiple of the block {f} of layout {dst!r}")
    return tuple(f if f else full[a] // block.get(a, 1) for a, f in d)


def transform(x: np.ndarray, src: str, dst: str) -> np.ndarray:
    """numpy: ``x`` in layout ``src`` re-laid out as ``dst`` (both may be blocked)."""
    if src == dst:
        return x
    s = parse(src)
    # to the primal order of src: merge each block into its axis
    order = [a for a, f in s if not f]
    perm = []
    for a in order:
        perm.append(next(i for i, (b, f) in enumerate(s) if b == a and not f))
        perm += [i for i, (b, f) in enumerate(s) if b == a and f]
    plain_shape = blocked_shape(x.shape, src, "".join(order))
    x = np.transpose(x, perm).reshape(plain_shape)
    d = parse(dst)
    block = {a: f for a, f in d if f}
    split_shape, names = [], []
    for a, n in zip(order, plain_shape):
        if a in block:
            split_shape += [n // block[a], block[a]]
            names += [(a, 0), (a, block[a])]
        else:
            split_shape.append(n)
            names.append((a, 0))
    x = x.reshape(split_shape)
    return np.ascontiguousarray(np.transpose(x, [names.index(item) for item in d]))
