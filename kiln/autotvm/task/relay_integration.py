"""Tasks from a relay program: ``autotvm.task.extract_from_program(mod["main"], target, params,
ops=(relay.op.get("nn.conv2d"),))``.

Walks the program's calls; every call of a requested op whose argument types are known becomes
the task of the tunable template for that op and target (OP_TEMPLATES), deduplicated by
workload.
"""

from __future__ import annotations

import logging

from kiln.errors import TuningError

logger = logging.getLogger("autotvm")

# relay op name -> {target key: template name}: the tunable topi implementation per target.
OP_TEMPLATES = {
    "nn.conv2d": {"cpu": "conv2d_nchw.x86", "arm_cpu": "conv2d_nchw_spatial_pack.arm_cpu"},
    "nn.dense": {"cpu": "dense_nopack.x86", "arm_cpu": "dense_nopack.x86"},
    "nn.batch_matmul": {"cpu": "batch_matmul.x86", "arm_cpu": "batch_matmul.x86"},
}


def _op_name(op) -> str:
    return getattr(op, "name", op if isinstance(op, str) else str(op))


def _tensor_arg(expr):
    ty = getattr(expr, "checked_type", None) or getattr(expr, "type_annotation", None)
    shape = getattr(ty, "shape", None)
    if shape is None:
        return None
    return ("TENSOR", tuple(int(getattr(d, "value", d)) for d in shape), str(ty.dtype))


def _calls(func):
    """Every Call node reachable from ``func`` (post-order, each once)."""
    seen, out, stack = set(), [], [getattr(func, "body", func)]
    while stack:
        node = stack.pop()
        if id(node) in seen or node is None:
            continue
        seen.add(id(node))
        if type(node).__name__ == "Call":
            out.append(node)
        for name in ("args", "fields", "value", "body", "tuple_value", "cond", "true_branch",
                     "false_branch"):
            child = getattr(node, name, None)
            if isinstance(child, (list, tuple)):
                stack.extend(child)
            elif child is not None and hasattr(child, "__dict__") or hasattr(child, "__slots__"):
                stack.append(child)
    return out


def _attrs_args(op_name: str, call) -> tuple:
    """The template arguments after the tensors, from the call's attributes."""
    attrs = getattr(call, "attrs", None) or {}
    get = attrs.get if isinstance(attrs, dict) else (lambda k, d=None: getattr(attrs, k, d))
    if op_name == "nn.conv2d":
        return (tuple(get("strides", (1, 1))), tuple(get("padding", (0, 0))),
                tuple(get("dilation", (1, 1))), str(get("data_layout", "NCHW")),
                str(get("out_dtype", "") or "float32"))
    if op_name == "nn.dense":
        return (None, str(get("out_dtype", "") or "float32"))
    return (str(get("out_dtype", "") or "float32"),)


def extract_from_program(mod, params=None, target=None, target_host=None, ops=None):
    """Tasks for the tunable ops of ``mod`` (a relay Function or IRModule)."""
    from kiln.target import Target
    from .task import TEMPLATES, _load_builtin_templates, create

    try:
        from kiln.relay import transform  # noqa: F401  (types must be inferred first)
    except ImportError:
        raise TuningError("extract_from_program needs kiln.relay, which this kiln lacks") from None
    del params  # shapes come from the types; weights do not change the workloads
    _load_builtin_templates()
    func = mod["main"] if hasattr(mod, "functions") and not hasattr(mod, "body") else mod
    func = _typed(func)
    tgt = Target(target, host=target_host)
    wanted = {_op_name(o) for o in ops} if ops else set(OP_TEMPLATES)
    tasks, seen = [], set()
    for call in _calls(func):
        name = _op_name(call.op)
        if name not in wanted or name not in OP_TEMPLATES:
            continue
        template = next((OP_TEMPLATES[name][k] for k in tgt.keys if k in OP_TEMPLATES[name]), None)
        if template is None or template not in TEMPLATES:
            logger.warning("extract_from_program: no tunable template for %s on %s (needs %s)",
                           name, tgt, template)
            continue
        tensors = [_tensor_arg(a) for a in call.args]
        if any(t is None for t in tensors):
            continue
        args = (*tensors, *_attrs_args(name, call))
        if (template, args) in seen:
            continue
        seen.add((template, args))
        tasks.append(create(template, args, tgt))
    return tasks


def _typed(func):
    """``func`` with types inferred (so every call argument has a shape)."""
    from kiln import relay
    from kiln.ir.module import IRModule
    infer = getattr(relay.transform, "InferType", None)
    if infer is None:
        return func
    mod = IRModule.from_expr(func)
    return infer()(mod)["main"]
