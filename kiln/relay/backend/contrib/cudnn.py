"""``relay.ext.cudnn``: the JSON graph of a function offloaded to cuDNN.

The node kinds and attributes are oneDNN's (backend/contrib/dnnl.py), restricted to what
kiln/runtime/json_cudnn.py runs: ``conv2d`` (data, weight, [bias], [addend]; ``post`` ``s`` adds
the addend, ``r`` applies relu), ``pool2d`` (max, avg, avg_pad), ``eltwise`` (relu, sigmoid,
tanh) and ``softmax`` (the channel axis).
"""

from __future__ import annotations

from kiln.errors import CompileError

from ...expr import Call, Function
from ...op.contrib.cudnn import ACTIVATIONS, POOLS
from .dnnl import _composite, _layer, _pool
from .json_graph import ExternalFunction, Serializer


def cudnn_codegen(func: Function) -> ExternalFunction:
    return Serializer(func, _convert).serialize()


def _convert(s: Serializer, call: Call):
    if isinstance(call.op, Function):
        if not str(call.op.attrs.get("Composite", "")).startswith("cudnn.conv2d"):
            raise CompileError(f"{s.symbol}: the cuDNN codegen has no rule for composite "
                               f"{call.op.attrs.get('Composite')}")
        return _composite(s, call)
    name = call.op.name
    if name == "nn.conv2d":
        return _layer(s, call, call, None, None, False, {}, name)
    if name in POOLS:
        return _pool(s, call)
    if name in ACTIVATIONS:
        return s.add("eltwise", name, [s.ref(call.args[0])], {"alg": ACTIVATIONS[name], "alpha": 0.0, "beta": 0.0},
                     call)
    if name == "nn.softmax":
        return s.add("softmax", name, [s.ref(call.args[0])], {"axis": int(call.attrs.axis)}, call)
    raise CompileError(f"{s.symbol}: the cuDNN codegen has no rule for {name}")
