"""``relay.ext.dnnl``: the JSON graph of a function offloaded to oneDNN.

Node kinds (what kiln/runtime/json_runtime.py's oneDNN executor runs):

| kind | inputs | attrs |
|---|---|---|
| conv2d | data, weight, [bias], [addend] | strides, padding (t, l, b, r), dilation, groups, bias, post |
| dense | data, weight, [bias], [addend] | bias, post |
| pool2d | data | alg (max, avg, avg_pad), pool_size, strides, padding |
| eltwise | data | alg (relu, sigmoid, tanh, clip, exp, sqrt, abs), alpha, beta |
| binary | a, b (b broadcasts) | alg (add, mul, sub, max, min, div) |
| softmax | data | axis |
| matmul | a (B, M, K), b ((B, N, K) or (B, K, N)) | transpose_b |

``post`` lists what oneDNN fuses after the layer, in order: ``s`` adds ``addend`` (a residual),
``r`` applies relu. Biases are stored as one value per output channel.
"""

from __future__ import annotations

from kiln.errors import CompileError

from ...expr import Call, Function
from ...op.contrib.dnnl import BINARY, ELTWISE, _layer_parts, bias_vector
from .json_graph import ExternalFunction, Serializer


def dnnl_codegen(func: Function) -> ExternalFunction:
    from kiln.runtime.json_runtime import dnnl_available

    problem = dnnl_available()
    if problem is not None:
        raise CompileError(f"{func.attrs.get('global_symbol')}: {problem}")
    return Serializer(func, _convert).serialize()


def _convert(s: Serializer, call: Call):
    if isinstance(call.op, Function):
        return _composite(s, call)
    name = call.op.name
    if name in ("nn.conv2d", "nn.dense"):
        return _layer(s, call, call, None, None, False, {}, name)
    if name in ("nn.max_pool2d", "nn.avg_pool2d", "nn.global_avg_pool2d", "nn.global_max_pool2d"):
        return _pool(s, call)
    if name in ELTWISE:
        a = call.attrs
        alpha, beta = (float(a.a_min), float(a.a_max)) if name == "clip" else (0.0, 0.0)
        return s.add("eltwise", name, [s.ref(call.args[0])], {"alg": ELTWISE[name], "alpha": alpha, "beta": beta},
                     call)
    if name in BINARY:
        a, b = call.args
        if tuple(a.checked_type.shape) != tuple(call.checked_type.shape):
            a, b = b, a  # commutative (binary_ok checked): the full-shape operand goes first
        return s.add("binary", name, [s.ref(a), s.ref(b)],
                     {"alg": BINARY[name], "b_shape": _broadcast_shape(b, call)}, call)
    if name == "nn.softmax":
        return s.add("softmax", name, [s.ref(call.args[0])], {"axis": int(call.attrs.axis)}, call)
    if name == "nn.batch_matmul":
        return s.add("matmul", name, [s.ref(call.args[0]), s.ref(call.args[1])],
                     {"transpose_b": bool(call.attrs.get("transpose_b", True))}, call)
    raise CompileError(f"{s.symbol}: oneDNN codegen has no rule for {name}")


def _composite(s: Serializer, call: Call):
    comp = call.op
    args = dict(zip(comp.params, call.args))
    layer, bias, addend, relu = _layer_parts(comp.body)
    return _layer(s, call, layer, bias, addend, relu, args, str(comp.attrs.get("Composite")))


def _layer(s: Serializer, out, layer: Call, bias, addend, relu: bool, args: dict, name: str):
    outer = lambda e: args.get(e, e)  # noqa: E731 - composite params -> the call's arguments
    inputs = [s.ref(outer(layer.args[0])), s.ref(outer(layer.args[1]))]
    if bias is not None:
        vec = bias_vector(layer, bias)
        if vec is None:
            raise CompileError(f"{s.symbol}: {name}: the bias is not one value per output channel")
        inputs.append(s.constant(vec))
    if addend is not None:
        inputs.append(s.ref(outer(addend)))
    post = ("s" if addend is not None else "") + ("r" if relu else "")
    attrs = {"bias": bias is not None, "post": post}
    if layer.op.name == "nn.conv2d":
        a = layer.attrs
        attrs.update(strides=list(a.strides), padding=list(a.padding), dilation=list(a.dilation),
                     groups=int(a.groups), kernel=[int(d) for d in layer.args[1].checked_type.shape[2:]])
        return s.add("conv2d", name, inputs, attrs, out)
    return s.add("dense", name, inputs, attrs, out)


def _pool(s: Serializer, call: Call):
    a = call.attrs
    h, w = (int(d) for d in call.args[0].checked_type.shape[2:])
    if call.op.name.startswith("nn.global"):
        size, strides, padding = [h, w], [1, 1], [0, 0, 0, 0]
    else:
        size, strides, padding = list(a.pool_size), list(a.strides), list(a.padding)
    if "max" in call.op.name:
        alg = "max"
    else:
        alg = "avg_pad" if a.get("count_include_pad", False) else "avg"
    return s.add("pool2d", call.op.name, [s.ref(call.args[0])],
                 {"alg": alg, "pool_size": size, "strides": strides, "padding": padding}, call)


def _broadcast_shape(b, out) -> list:
    shape = [int(d) for d in b.checked_type.shape]
    return [1] * (len(out.checked_type.shape) - len(shape)) + shape
