"""TFLite elementwise operators: ADD/SUB/MUL/MAXIMUM/MINIMUM, RELU/RELU6/RELU_N1_TO_1,
LOGISTIC, TANH, HARD_SWISH, QUANTIZE/DEQUANTIZE, and the fused activations of every op."""

from __future__ import annotations

from ...expr import const
from ...op import nn, tensor

# ActivationFunctionType: NONE, RELU, RELU_N1_TO_1, RELU6, TANH, SIGN_BIT
_FUSED = {
    0: lambda x: x,
    1: nn.relu,
    2: lambda x: tensor.clip(x, -1.0, 1.0),
    3: lambda x: tensor.clip(x, 0.0, 6.0),
    4: tensor.tanh,
}


def fused(ctx, x, code: int):
    """Apply a fused activation to real values (float models and the float route)."""
    if code not in _FUSED:
        ctx.fail(f"fused activation {code} is not supported (NONE, RELU, RELU_N1_TO_1, RELU6 and TANH are)")
    return _FUSED[code](x)


def _binary(fn, options):
    def convert(ctx, ins):
        if len(ins) < 2 or ins[1] is None:
            ctx.fail(f"has {len(ins)} inputs; {ctx.op_name} takes two")
        out = fn(ins[0], ins[1])
        if options is None or not ctx.has_options():
            return out
        return fused(ctx, out, ctx.options(options()).FusedActivationFunction())
    return convert


def _lazy_options(name):
    def get():
        import tflite
        return getattr(tflite, name)
    return get


def _unary(fn):
    return lambda ctx, ins: fn(ins[0])


def _hard_swish(ctx, ins):
    x = ins[0]
    gate = tensor.clip(tensor.add(x, const(3.0, "float32")), 0.0, 6.0)
    return tensor.multiply(x, tensor.divide(gate, const(6.0, "float32")))


def _identity(ctx, ins):
    """DEQUANTIZE of a float16 constant (already float32 at import) in a float model; quantized
    QUANTIZE/DEQUANTIZE are converted by qnn_elementwise.py."""
    return ins[0]


CONVERTERS = {
    "ADD": _binary(tensor.add, _lazy_options("AddOptions")),
    "SUB": _binary(tensor.subtract, _lazy_options("SubOptions")),
    "MUL": _binary(tensor.multiply, _lazy_options("MulOptions")),
    "MAXIMUM": _binary(tensor.maximum, None), "MINIMUM": _binary(tensor.minimum, None),
    "RELU": _unary(nn.relu), "RELU6": _unary(_FUSED[3]), "RELU_N1_TO_1": _unary(_FUSED[2]),
    "LOGISTIC": _unary(tensor.sigmoid), "TANH": _unary(tensor.tanh), "HARD_SWISH": _hard_swish,
    "QUANTIZE": _identity, "DEQUANTIZE": _identity,
}
