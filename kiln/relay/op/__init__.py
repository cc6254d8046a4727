"""``relay.op``: the operator table. ``relay.op.get("nn.conv2d")`` returns its OpDef."""

from __future__ import annotations

from kiln.ir.op_attr import set_op_name_check

from . import activation as _activation_ops
from . import attention as _attention_ops
from . import dynamic as _dynamic_ops
from . import grid_sample as _grid_sample_ops
from . import image as _image_ops
from . import linear_attention as _linear_attention_ops
from . import math_ops as _math_ops
from . import nn as _nn_ops
from . import nn_fused as _nn_fused_ops
from . import nn_norm as _nn_norm_ops
from . import nn_pool as _nn_pool_ops
from . import reduce as _reduce_ops
from . import rnn as _rnn_ops
from . import scatter as _scatter_ops
from . import sort as _sort_ops
from . import tensor as _tensor_ops
from . import transform as _transform_ops
from . import vision as _vision_ops
from .registry import REQUIRED, OpDef, OpPattern, RelCtx

OP_TABLE: dict[str, OpDef] = {
    op.name: op
    for family in (_tensor_ops, _reduce_ops, _transform_ops, _nn_ops, _nn_pool_ops, _nn_norm_ops, _nn_fused_ops,
                   _image_ops, _scatter_ops, _rnn_ops, _math_ops, _attention_ops, _sort_ops, _grid_sample_ops,
                   _dynamic_ops, _activation_ops, _vision_ops, _linear_attention_ops)
    for op in family.OPS
}


def get(name: str) -> OpDef:
    """The OpDef named ``name`` (e.g. "nn.conv2d", "add")."""
    try:
        return OP_TABLE[name]
    except KeyError:
        raise KeyError(f"relay has no op {name!r}; see relay.op.list_ops()") from None


def list_ops() -> list[str]:
    return sorted(OP_TABLE)


set_op_name_check(get)  # tvm.ir.register_op_attr refuses names that are not relay ops


def __getattr__(name: str):
    """``relay.op.contrib`` (BYOC support tables) loads on first use."""
    if name == "contrib":
        import importlib
        value = importlib.import_module("kiln.relay.op.contrib")
        globals()[name] = value
        return value
    raise AttributeError(f"module 'kiln.relay.op' has no attribute {name!r}")


__all__ = ["OP_TABLE", "get", "list_ops", "OpDef", "OpPattern", "RelCtx", "REQUIRED"]
