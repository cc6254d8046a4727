"""``nn.gelu`` and ``nn.hardswish``: activations as one elementwise op each.

Exporters write GELU as a small graph that reads its input twice (``x * 0.5 * (1 + erf(x /
sqrt 2))``, or the tanh form of GPT-2), so FuseOps could never put it after a dense layer in
one kernel (its rule wants a single consumer). ``FuseDenseEpilogue``
(transform/fuse_dense_epilogue.py) recognises those graphs and writes this op instead.

``nn.hardswish``: ``x * clip(x / 6 + 1/2, 0, 1)`` (MobileNetV3) as one elementwise op, for the
same reason: ONNX ``HardSwish``, ``x * HardSigmoid(x)`` and torch's ``x * relu6(x + 3) / 6`` read
``x`` twice, so the conv before them could not take them into its kernel.
"""

from __future__ import annotations

import math

import numpy as np

from ..expr import Call
from .registry import OpDef, OpPattern, RelCtx

APPROXIMATIONS = ("none", "tanh")


def _gelu_rel(ctx: RelCtx):
    t = ctx.tensor(0)
    if not str(t.dtype).startswith("float"):
        ctx.fail(f"input must be a float tensor, got {t.dtype}")
    if ctx.attrs.approximate not in APPROXIMATIONS:
        ctx.fail(f"approximate={ctx.attrs.approximate!r} must be one of {APPROXIMATIONS}")
    return t


def gelu_reference(x: np.ndarray, approximate: str = "none") -> np.ndarray:
    v = x.astype(np.float64)
    if approximate == "tanh":
        out = 0.5 * v * (1.0 + np.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3)))
    else:
        out = 0.5 * v * (1.0 + np.vectorize(math.erf, otypes=[np.float64])(v / math.sqrt(2)))
    return out.astype(x.dtype)


GELU = OpDef("nn.gelu", ("data",), {"approximate": "none"}, _gelu_rel, OpPattern.ELEMWISE,
             lambda a, x: gelu_reference(x, a.approximate), doc="x * Phi(x) (approximate='tanh': GPT-2's form)")



def _hardswish_rel(ctx: RelCtx):
    t = ctx.tensor(0)
    if not str(t.dtype).startswith("float"):
        ctx.fail(f"input must be a float tensor, got {t.dtype}")
    return t


def hardswish_reference(x: np.ndarray) -> np.ndarray:
    v = x.astype(np.float64)
    return (v * np.clip(v / 6.0 + 0.5, 0.0, 1.0)).astype(x.dtype)


# MobileNetV3's activation; exporters write x * hardsigmoid(x) (reads x twice), FuseDenseEpilogue
# writes this op so FuseOps can put it after a conv in one kernel
HARDSWISH = OpDef("nn.hardswish", ("data",), {}, _hardswish_rel, OpPattern.ELEMWISE,
                  lambda a, x: hardswish_reference(x), doc="x * clip(x / 6 + 1/2, 0, 1)")

OPS = [GELU, HARDSWISH]


def gelu(data, approximate: str = "none") -> Call:
    return GELU(data, approximate=str(approximate))


def hardswish(data) -> Call:
    return HARDSWISH(data)
