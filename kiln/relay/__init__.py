"""relay: kiln's graph-level IR for whole models.

Build graphs with ``relay.var`` and the op constructors (``relay.nn.conv2d``, ``relay.add``...),
import them with ``relay.frontend.from_onnx``, get standard networks from ``relay.testing``,
optimize them with ``relay.transform`` passes, and check them with the numpy reference
executor (``relay.create_executor("debug", mod)``). ``relay.build`` compiles them.
"""

from __future__ import annotations

import importlib

from kiln.ir.module import GraphIR, register_graph_ir

from . import analysis, image, nn, op, printer
from .analysis import as_function
from .expr import (Attrs, Call, Constant, DictAttrs, Function, If, Let, RelayExpr, Tuple, TupleGetItem, TupleWrapper,
                   Var, const, var)
from .visitor import bind
from .op.reduce import all, any, argmax, argmin, max, mean, min, prod, sum, variance  # noqa: A004
from .op.tensor import (abs, add, ceil, clip, copy, cos, divide, equal, erf, exp, floor, floor_divide, floor_mod,
                        greater, greater_equal, isnan, less, less_equal, log, logical_and, logical_not, logical_or,
                        logical_xor, maximum, minimum, mod, multiply, negative, not_equal, power, reciprocal, round,
                        rsqrt, sigmoid, sign, sin, sqrt, subtract, tanh, where)
from .op.transform import (broadcast_to, cast, concatenate, expand_dims, full, gather, layout_transform, ones,
                           reshape, reverse, split, squeeze, stack, strided_slice, take, tile, transpose, zeros)
from .param_dict import load_param_dict, save_param_dict
from .reference import create_executor
from .ty import FuncType, TensorType, TupleType, Type

Expr = RelayExpr

# IRModule.from_expr and module printing find relay through this (kiln/ir never imports relay).
register_graph_ir(GraphIR((RelayExpr, TupleWrapper), as_function, printer.astext))

# Heavier parts load on first use: the ONNX frontend imports onnx, testing builds networks,
# and build_module (written on top of the TE compiler) pulls in codegen.
_LAZY_MODULES = {"frontend", "testing", "transform", "reference", "build_module", "backend", "visitor",
                 "dataflow_pattern", "qnn", "quantize"}
_LAZY_ATTRS = {"build": ("kiln.relay.build_module", "build"),
               "optimize": ("kiln.relay.build_module", "optimize"),
               "build_config": ("kiln.relay.build_module", "build_config")}


def __getattr__(name: str):
    if name in _LAZY_MODULES:
        value = importlib.import_module(f"kiln.relay.{name}")
    elif name in _LAZY_ATTRS:
        module, attr = _LAZY_ATTRS[name]
        value = getattr(importlib.import_module(module), attr)
    else:
        raise AttributeError(f"module 'kiln.relay' has no attribute {name!r}")
    globals()[name] = value
    return value
