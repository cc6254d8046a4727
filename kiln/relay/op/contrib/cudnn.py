"""cuDNN for kiln's CUDA target: convolutions (with bias, residual add and relu), pools, softmax
and activations offloaded (``"cudnn, cuda, llvm"``).

>>> mod = partition_for_cudnn(mod, params)
>>> lib = relay.build(mod, target="cuda")      # convolutions in cuDNN, the rest kiln's kernels

cuDNN's legacy API (kiln/runtime/json_cudnn.py) takes NCHW float32 tensors and symmetric
padding; a layer outside these limits stays on kiln. Batch norms are folded into the
convolutions before partitioning, as for oneDNN.
"""

from __future__ import annotations

import contextvars

from kiln.ir.op_attr import register_op_attr

from ...expr import Call
from .dnnl import _f32, _layer, _layer_parts, _shape, bias_vector, partition_composites
from .dnnl import conv2d_ok as _dnnl_conv2d_ok
from .dnnl import pool_ok as _dnnl_pool_ok

COMPILER = "cudnn"
ACTIVATIONS = {"nn.relu": "relu", "sigmoid": "sigmoid", "tanh": "tanh"}
POOLS = ("nn.max_pool2d", "nn.avg_pool2d", "nn.global_avg_pool2d", "nn.global_max_pool2d")
# Depthwise convolutions go to cuDNN only when partition_for_cudnn(..., depthwise=True) asks.
_depthwise = contextvars.ContextVar("kiln_cudnn_depthwise", default=False)


def _symmetric(padding) -> bool:
    p = [int(v) for v in padding]
    return len(p) == 4 and p[0] == p[2] and p[1] == p[3]


def conv2d_ok(call: Call) -> bool:
    """What oneDNN takes (dnnl.conv2d_ok) with symmetric padding; depthwise only when asked."""
    if not (_dnnl_conv2d_ok(call) and _symmetric(call.attrs.padding)):
        return False
    groups = int(call.attrs.groups)
    return _depthwise.get() or groups == 1 or groups != _shape(call.args[0])[1]


def pool_ok(call: Call) -> bool:
    """oneDNN's pooling rule, and cuDNN pads both sides of a window alike."""
    if not _dnnl_pool_ok(call):
        return False
    return call.op.name.startswith("nn.global") or _symmetric(call.attrs.padding)


def activation_ok(call: Call) -> bool:
    return _f32(call, *call.args) and 1 <= len(_shape(call)) <= 4


def softmax_ok(call: Call) -> bool:
    """cuDNN's channel softmax: the last axis of a 2-d tensor, or axis 1 of a 4-d one."""
    if not _f32(call, *call.args):
        return False
    rank, axis = len(_shape(call)), int(call.attrs.axis)
    return (rank == 2 and axis in (1, -1)) or (rank == 4 and axis in (1, -3))


for _name in ACTIVATIONS:
    register_op_attr(_name, f"target.{COMPILER}", activation_ok)
for _name in POOLS:
    register_op_attr(_name, f"target.{COMPILER}", pool_ok)
register_op_attr("nn.softmax", f"target.{COMPILER}", softmax_ok)
register_op_attr("nn.conv2d", f"target.{COMPILER}", conv2d_ok)


def _conv_check(root: Call, want_bias: bool, want_sum: bool) -> bool:
    layer, bias, addend, _ = _layer_parts(root)
    # add(conv, constant) matches the residual pattern too; it is a bias, which another entry takes
    if (bias is not None) != want_bias or (addend is not None) != want_sum or layer.op.name != "nn.conv2d":
        return False
    if not conv2d_ok(layer):
        return False
    if bias is not None and (bias_vector(layer, bias) is None or _shape(bias) != _shape(layer)):
        return False
    return addend is None or (_shape(addend) == _shape(layer) and _f32(addend))


def pattern_table():
    """(name, pattern, check) for MergeComposite, longest first: y = relu(conv(x) + bias + z), the
    epilogue cudnnConvolutionBiasActivationForward computes (or conv, then adds, without relu)."""
    table = []
    for bias, residual, relu in ((1, 1, 1), (1, 1, 0), (0, 1, 1), (0, 1, 0), (1, 0, 1), (1, 0, 0), (0, 0, 1)):
        name = f"{COMPILER}.conv2d" + ("_bias" if bias else "") + ("_sum" if residual else "") + \
            ("_relu" if relu else "")
        check = lambda root, b=bool(bias), r=bool(residual): _conv_check(root, b, r)  # noqa: E731
        table.append((name, _layer("nn.conv2d", bias, residual, relu), check))
    return table


def partition_for_cudnn(mod, params=None, depthwise: bool = False):
    """Bind ``params``, fold batch norms into the convolutions, then offload what cuDNN runs:
    MergeComposite, AnnotateTarget(["cudnn"]), MergeCompilerRegions, PartitionGraph.

    Depthwise convolutions stay on kiln unless ``depthwise``: on MobileNetV2 (H100) offloading
    them gained nothing and cut the model into 41 subgraphs instead of 24 (docs/byoc.md)."""
    patterns = pattern_table()
    token = _depthwise.set(bool(depthwise))
    try:
        return partition_composites(mod, params, COMPILER, patterns)
    finally:
        _depthwise.reset(token)
