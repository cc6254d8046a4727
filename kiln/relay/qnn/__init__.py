"""``relay.qnn``: the quantized-integer dialect (scales and zero points on the ops).

- ``relay.qnn.op``: quantize / dequantize / requantize, conv2d, dense, batch_matmul, add,
  subtract, mul, concatenate, pools, lookup-table unary ops (op/).
- ``relay.qnn.transform``: ``Legalize()`` (per target: u8 x s8 for x86's dot-product
  instructions, s8 x s8 for AArch64's) and ``CanonicalizeOps()`` (qnn ops to integer relay ops
  that topi schedules). ``relay.build`` runs both, after FakeQuantizationToInteger.

docs/quantization.md describes the arithmetic of each op.
"""

from __future__ import annotations

import importlib

from . import op

__all__ = ["op", "transform"]


def __getattr__(name: str):
    if name == "transform":
        value = importlib.import_module("kiln.relay.qnn.transform")
        globals()[name] = value
        return value
    raise AttributeError(f"module 'kiln.relay.qnn' has no attribute {name!r}")
