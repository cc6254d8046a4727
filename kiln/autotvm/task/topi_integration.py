"""Tunable operators of kiln.topi: ``register_topi_compute`` / ``register_topi_schedule``.

A topi compute decorated with ``@autotvm.register_topi_compute("conv2d_nchw.x86")`` takes
``cfg`` as its first argument; callers pass the remaining ones. The wrapper asks the active
dispatch context for the config of this workload and tags the output op with the workload, so
the matching schedule (``@autotvm.register_topi_schedule("conv2d_nchw.x86")``, called with the
outputs) reads the same config. Both together make a task template of that name whose
arguments are those of the compute, tensors written as ("TENSOR", shape, dtype).
"""

from __future__ import annotations

import functools

from kiln.errors import TuningError

from .. import dispatcher
from .task import TEMPLATES, args_to_placeholders, serialize_args

# name -> {"compute": f, "schedule": g}; completed into a template once both are known.
_PARTS: dict[str, dict] = {}


def _query(workload):
    from kiln.target import Target
    return dispatcher.current().query(Target.current(allow_none=True), workload)


def register_topi_compute(task_name: str, func=None):
    """Decorate ``compute(cfg, *args)``; callers call ``compute(*args)``."""
    def register(f):
        @functools.wraps(f)
        def wrapper(*args, **kwargs):
            if kwargs:
                raise TuningError(f"{task_name}: pass the arguments of a tunable compute "
                                  f"positionally (got keywords {sorted(kwargs)}): they form its "
                                  "workload")
            workload = (task_name, *serialize_args(args))
            cfg = _query(workload)
            out = f(cfg, *args)
            for t in out if isinstance(out, (list, tuple)) else [out]:
                t.op.attrs["workload"] = workload
            return out
        _PARTS.setdefault(task_name, {})["compute"] = wrapper
        _complete(task_name)
        return wrapper
    return register(func) if func is not None else register


def _find_workload(outs):
    seen, stack = set(), [t.op for t in outs]
    while stack:
        op = stack.pop()
        if id(op) in seen:
            continue
        seen.add(id(op))
        wkl = getattr(op, "attrs", {}).get("workload")
        if wkl is not None:
            return wkl
        stack.extend(t.op for t in getattr(op, "input_tensors", []))
    return None


def register_topi_schedule(task_name: str, func=None):
    """Decorate ``schedule(cfg, outs)``; callers call ``schedule(outs)``."""
    def register(f):
        @functools.wraps(f)
        def wrapper(outs, *args, **kwargs):
            outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
            workload = _find_workload(outs)
            if workload is None:
                raise TuningError(f"schedule {task_name}: its outputs were not made by a compute "
                                  "registered with register_topi_compute; build them with the "
                                  "matching tunable compute")
            return f(_query(workload), outs, *args, **kwargs)
        _PARTS.setdefault(task_name, {})["schedule"] = wrapper
        _complete(task_name)
        return wrapper
    return register(func) if func is not None else register


def _complete(task_name: str) -> None:
    parts = _PARTS[task_name]
    if "compute" not in parts or "schedule" not in parts:
        return
    compute, schedule = parts["compute"], parts["schedule"]

    def topi_template(*args):
        placeholders = args_to_placeholders(args)
        out = compute(*placeholders)
        outs = list(out) if isinstance(out, (list, tuple)) else [out]
        s = schedule(outs)
        # A compute may measure its own inputs (conv2d's blocked data and pre-packed kernel: the
        # layout relay.build deploys) instead of the workload's tensors.
        tensors = list(outs[0].op.attrs.get("template_inputs") or [a for a in placeholders if hasattr(a, "op")])
        return s, tensors + outs

    topi_template.template_name = task_name
    TEMPLATES[task_name] = topi_template
