"""Build a relay function with relay.build and run it with the graph executor (or the numpy
reference executor), for the qnn tests."""

from __future__ import annotations

import numpy as np

import kiln as tvm
from kiln import relay
from kiln.contrib import graph_executor


def module(body, params=()):
    from kiln.ir.module import IRModule
    free = relay.analysis.free_vars(body)
    return IRModule.from_expr(relay.Function(free, body))


def build(mod, target="llvm", opt_level=3, config=None):
    gpu = target.startswith(("opencl", "cuda"))
    tgt = tvm.target.Target(target, host="llvm") if gpu else tvm.target.Target(target)
    with tvm.transform.PassContext(opt_level=opt_level, config=config or {}):
        return relay.build(mod, target=tgt)


def run(mod, inputs: dict, target="llvm", opt_level=3):
    lib = build(mod, target, opt_level)
    dev = tvm.cl(0) if target.startswith("opencl") else tvm.cpu(0)
    m = graph_executor.GraphModule(lib["default"](dev))
    m.set_input(**inputs)
    m.run()
    return [m.get_output(i).numpy() for i in range(m.get_num_outputs())]


def reference(mod, inputs: dict):
    out = relay.create_executor("debug", mod).evaluate()(**inputs)
    if isinstance(out, (list, tuple)):
        return [np.asarray(o.numpy() if hasattr(o, "numpy") else o) for o in out]
    return [np.asarray(out.numpy() if hasattr(out, "numpy") else out)]


INT8_KERNELS = ("nn.contrib_conv2d_int8", "nn.contrib_conv2d_int8_mixed", "nn.contrib_depthwise_conv2d_int8",
                "nn.contrib_dense_int8", "nn.contrib_batch_matmul_int8")


def anchor_ops(lib, names=("nn.conv2d", "nn.dense", "nn.batch_matmul", "nn.conv2d_transpose") + INT8_KERNELS) -> list:
    """(op name, input dtypes, output dtype) of every ``names`` call in the built graph's fused
    kernels (the relay the kernels were lowered from). The CPU int8 kernels (relay/qnn/cpu_int8.py)
    report (data, "int8") and their int32 accumulators: their weights hold int8 values (packed as
    int16 for the exact 16-bit x86 path) and their requantized output is the epilogue's."""
    from kiln.relay.expr import Call, Function
    from kiln.relay.transform.infer_type import infer
    from kiln.relay.visitor import ExprVisitor

    found = []

    class V(ExprVisitor):
        def visit_Function(self, f):
            self.visit(f.body)

        def visit_Call(self, call):
            super().visit_Call(call)
            if isinstance(call.op, Function):
                self.visit(call.op)
            name = getattr(call.op, "name", "")
            if name in names and name in INT8_KERNELS:
                found.append((name, (infer(call.args[0]).checked_type.dtype, "int8"), "int32"))
            elif name in names:
                found.append((name, tuple(infer(a).checked_type.dtype for a in call.args),
                              infer(call).checked_type.dtype))
    V().visit(lib.ir_mod["main"])
    assert isinstance(lib.ir_mod["main"], Function) and Call is not None
    return found
