"""cuBLAS for kiln's CUDA target: dense and batch_matmul offloaded (``"cublas, cuda, llvm"``).

>>> mod = partition_for_cublas(mod, params)
>>> lib = relay.build(mod, target="cuda")      # matrix products in cuBLAS, the rest kiln's kernels
"""

from __future__ import annotations

from kiln.ir.op_attr import register_op_attr

from ...ty import TensorType

COMPILER = "cublas"


def _f32(*exprs) -> bool:
    return all(isinstance(e.checked_type, TensorType) and e.checked_type.dtype == "float32" for e in exprs)


def dense_ok(call) -> bool:
    data, weight = call.args
    return _f32(call, data, weight) and len(data.checked_type.shape) == 2 and len(weight.checked_type.shape) == 2


def batch_matmul_ok(call) -> bool:
    a, b = call.args
    return (_f32(call, a, b) and not call.attrs.get("transpose_a", False)
            and len(a.checked_type.shape) == 3 and len(b.checked_type.shape) == 3
            and int(a.checked_type.shape[0]) == int(b.checked_type.shape[0]))


register_op_attr("nn.dense", f"target.{COMPILER}", dense_ok)
register_op_attr("nn.batch_matmul", f"target.{COMPILER}", batch_matmul_ok)


def partition_for_cublas(mod, params=None):
    """Bind ``params``; AnnotateTarget(["cublas"]), PartitionGraph: one function per product (no
    MergeCompilerRegions: the cuBLAS runtime runs one call per function)."""
    from kiln.relay import transform
    from kiln.transform import PassContext, Sequential

    from ...build_module import _as_module

    mod = _as_module(mod)
    if params:
        mod = transform.BindParams(params)(mod)
    seq = Sequential([transform.InferType(), transform.FoldConstant(), transform.AnnotateTarget([COMPILER]),
                      transform.PartitionGraph()])
    with PassContext(opt_level=3):
        return seq(mod)
