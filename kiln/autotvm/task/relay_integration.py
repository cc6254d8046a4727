"""Tasks from a relay program: ``autotvm.task.extract_from_program(mod["main"], target, params,
ops=(relay.op.get("nn.conv2d"),))``.

Walks the program's calls; every call of a requested op that has a tunable template for the
target becomes a task, deduplicated by workload. The template and workload of a call are what
relay.build will ask the dispatch context for (``kiln.relay.backend.dispatch.workload_of``), so a
log of these tasks is used by ``with autotvm.apply_history_best(log): relay.build(...)``.

For adreno targets at opt_level 3 (the current PassContext) the program is first optimized as
relay.build does (NCHW4c layouts, fusion), so its convs give the ``*_NCHW4c.adreno`` tasks with
the shapes that build lowers (docs/adreno.md, "Tuning").
"""

from __future__ import annotations

import logging

from kiln.errors import TuningError

logger = logging.getLogger("autotvm")


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
            op = node.op
            # a fused primitive function (adreno) holds kiln's kernels; one offloaded to a
            # vendor library (attrs["Compiler"]) holds none to tune
            if type(op).__name__ == "Function" and not (op.attrs and op.attrs.get("Compiler")):
                stack.append(op)
        for name in ("args", "fields", "value", "body", "tuple_value", "cond", "true_branch",
                     "false_branch"):
            child = getattr(node, name, None)
            if isinstance(child, (list, tuple)):
                stack.extend(child)
            elif child is not None and hasattr(child, "__dict__") or hasattr(child, "__slots__"):
                stack.append(child)
    return out


def extract_from_program(mod, params=None, target=None, target_host=None, ops=None):
    """Tasks for the tunable ops of ``mod`` (a relay Function or IRModule)."""
    from kiln.target import Target
    from .task import TEMPLATES, _load_builtin_templates, create

    try:
        from kiln.relay import transform  # noqa: F401  (types must be inferred first)
    except ImportError:
        raise TuningError("extract_from_program needs kiln.relay, which this kiln lacks") from None
    from kiln.relay.backend import dispatch
    from kiln.relay.backend.te_compiler import target_family

    _load_builtin_templates()
    func = mod["main"] if hasattr(mod, "functions") and not hasattr(mod, "body") else mod
    tgt = Target(target, host=target_host)
    family = target_family(tgt)
    func = _adreno_optimized(func, tgt, params) if family == "adreno" else _typed(func)
    wanted = {_op_name(o) for o in ops} if ops else set(dispatch.TEMPLATES)
    tasks, seen = [], set()
    for call in _calls(func):
        name = _op_name(call.op)
        if name not in wanted:
            continue
        types = [getattr(a, "checked_type", None) for a in call.args]
        if any(getattr(t, "shape", None) is None for t in types):
            continue
        workload = dispatch.workload_of(name, call.attrs, types, family)
        if workload is None or workload in seen:
            continue
        if workload[0] not in TEMPLATES:
            logger.warning("extract_from_program: no tunable template %s for %s on %s",
                           workload[0], name, tgt)
            continue
        seen.add(workload)
        tasks.append(create(workload[0], workload[1:], tgt))
    return tasks


def _adreno_optimized(func, tgt, params):
    """At opt_level 3 an adreno build runs its convs on NCHW4c (their own templates): the
    program as relay.build lowers it (optimized, fused), so the workloads are that build's.
    Below opt_level 3 the per-operator templates apply: the program as it is."""
    from kiln.relay.build_module import optimize
    from kiln.transform import PassContext

    if PassContext.current().opt_level < 3:
        return _typed(func)
    with tgt:
        opt, _ = optimize(func, tgt, params)
    return opt["main"]


def _typed(func):
    """``func`` with types inferred (so every call argument has a shape)."""
    from kiln import relay
    from kiln.ir.module import IRModule
    infer = getattr(relay.transform, "InferType", None)
    if infer is None:
        return func
    mod = IRModule.from_expr(func)
    return infer()(mod)["main"]
