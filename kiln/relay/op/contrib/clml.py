"""Qualcomm OpenCLML (002's ``--target="opencl, clml, llvm"``): which ops CLML would take.

``partition_for_clml`` marks and outlines them exactly as it would with the SDK present, so the
partitioned module can be inspected anywhere; compiling it fails with one line saying the
OpenCLML SDK is needed (kiln/relay/backend/contrib/clml.py), never a silent fallback.
"""

from __future__ import annotations

from kiln.ir.op_attr import register_op_attr

from ...ty import TensorType

COMPILER = "clml"

# The operators CLML's graph runtime implements (float32 / float16 tensors).
SUPPORTED = ("nn.conv2d", "nn.conv2d_transpose", "nn.dense", "nn.batch_matmul", "nn.batch_norm", "nn.bias_add",
             "nn.max_pool2d", "nn.avg_pool2d", "nn.global_avg_pool2d", "nn.global_max_pool2d", "nn.relu",
             "nn.leaky_relu", "clip", "sigmoid", "tanh", "add", "subtract", "multiply", "divide", "minimum",
             "maximum", "nn.softmax", "reshape", "nn.batch_flatten", "transpose", "concatenate", "nn.pad",
             "image.resize2d")


def _float(call) -> bool:
    types = [call.checked_type, *(a.checked_type for a in call.args)]
    return all(not isinstance(t, TensorType) or t.dtype in ("float32", "float16") for t in types)


def _conv_ok(call) -> bool:
    return _float(call) and call.attrs.data_layout == "NCHW"


for _name in SUPPORTED:
    register_op_attr(_name, f"target.{COMPILER}", _conv_ok if _name == "nn.conv2d" else _float)


def partition_for_clml(mod, params=None):
    """Bind ``params``, then AnnotateTarget(["clml"]), MergeCompilerRegions, PartitionGraph."""
    from kiln.relay import transform
    from kiln.transform import PassContext, Sequential

    from ...build_module import _as_module

    mod = _as_module(mod)
    if params:
        mod = transform.BindParams(params)(mod)
    seq = Sequential([transform.InferType(), transform.FoldConstant(), transform.AnnotateTarget([COMPILER]),
                      transform.MergeCompilerRegions(), transform.PartitionGraph()])
    with PassContext(opt_level=3):
        return seq(mod)
