"""Find the ops relay.quantize quantizes, collect their inputs on calibration data, and rewrite
the model into QDQ form (quantize/dequantize pairs that FakeQuantizationToInteger integerizes)."""

from __future__ import annotations

import logging
import time

import numpy as np

from kiln.errors import KilnError

from ..expr import Call, Constant, Function, Tuple, const
from ..qnn import op as qop
from ..transform.infer_type import infer
from ..visitor import ExprMutator, ExprVisitor
from .calibrate import weight_scale

logger = logging.getLogger("kiln.relay.quantize")


def targets(func, cfg) -> list:
    """The conv2d / dense calls to quantize, in graph order, after the skips (constant weights only)."""
    convs, denses = [], []

    class V(ExprVisitor):
        def visit_Call(self, call):
            super().visit_Call(call)
            name = getattr(call.op, "name", "")
            if name == "nn.conv2d":
                convs.append(call)
            elif name == "nn.dense":
                denses.append(call)
    V().visit(func)
    chosen = [c for i, c in enumerate(convs) if i not in cfg.skip_conv_layers]
    chosen += [] if cfg.skip_dense_layer else denses
    keep = []
    for c in chosen:
        if not isinstance(c.args[1], Constant) or infer(c.args[0]).checked_type.dtype != "float32":
            logger.info("relay.quantize: %s left float (its weight is not a constant; pass params=)", c.op.name)
            continue
        keep.append(c)
    order = {id(c): i for i, c in enumerate(convs + denses)}
    return sorted(keep, key=lambda c: order[id(c)])


def collect(func, calls: list, dataset, limit: int = 0) -> list:
    """Per call, the list of its data input's values over the calibration batches."""
    import kiln
    from kiln.contrib import graph_executor
    from kiln.ir.module import IRModule

    from .. import build
    probe = Function(list(func.params), Tuple([c.args[0] for c in calls]))
    with kiln.transform.PassContext(opt_level=2):
        lib = build(IRModule({"main": infer(probe)}), target="llvm")
    m = graph_executor.GraphModule(lib["default"](kiln.cpu(0)))
    samples: list = [[] for _ in calls]
    total = len(dataset) if hasattr(dataset, "__len__") else None
    start = time.perf_counter()
    n = 0
    for n, batch in enumerate(dataset, 1):
        if not isinstance(batch, dict):
            raise KilnError(f"relay.quantize: calibration batch {n} is a {type(batch).__name__}; each batch must be "
                            "a dict {input name: array}")
        m.set_input(**batch)
        m.run()
        for i in range(len(calls)):
            samples[i].append(m.get_output(i).numpy())
        if n == 1 or n % 10 == 0 or n == total:
            logger.info("relay.quantize: calibration batch %d%s (%.1f s)", n, f"/{total}" if total else "",
                        time.perf_counter() - start)
        if limit and n >= limit:
            break
    if n == 0:
        raise KilnError("relay.quantize: the calibration dataset is empty; give at least one batch")
    return samples


def to_qdq(func, calls: list, scales: list, cfg):
    """``func`` with each call's data input quantized at its scale and its weight in int8."""
    plan = {c: s for c, s in zip(calls, scales)}

    class M(ExprMutator):
        def visit_Function(self, f):
            return super().visit_Function(f)

        def visit_Call(self, call):
            new = super().visit_Call(call)
            if call not in plan:
                return new
            x, w = new.args
            s = np.float32(plan[call])
            xq = qop.dequantize(qop.quantize(x, s, 0, out_dtype="int8"), s, 0)
            ws = weight_scale(w.data, cfg.weight_scale, cfg.per_channel)
            axis = 0
            wq = np.clip(np.rint(w.data / ws.reshape((-1,) + (1,) * (w.data.ndim - 1)) if ws.size > 1
                                 else w.data / ws), -127, 127).astype("int8")
            wdq = qop.dequantize(const(wq), ws, np.zeros(ws.shape, "int32") if ws.size > 1 else 0,
                                 axis=axis if ws.size > 1 else -1)
            return Call(new.op, [xq, wdq], new.attrs)
    return infer(M().visit(func))
