"""AnnotateTarget: mark every op an external compiler supports.

An op is supported by compiler ``t`` when its OpDef has a predicate registered under
``"target.t"`` (``tvm.ir.register_op_attr("nn.conv2d", "target.dnnl")``) that returns True for
the call, or when it is a call of a composite function named ``"t.<pattern>"`` (MergeComposite).
Each supported call becomes its own region:

    compiler_end(op(compiler_begin(a, "t"), compiler_begin(b, "t")), "t")

Unsupported ops stay as they are. The first compiler in ``targets`` that accepts an op wins.
"""

from __future__ import annotations

import importlib
import logging

from ..expr import Call, Function
from ..op.contrib.annotation import compiler_begin, compiler_end, is_begin, is_end
from ..op.registry import OpDef
from ..visitor import post_order
from .merge_composite import rebuild

logger = logging.getLogger("kiln.relay.partition")


def supported_by(call: Call, targets) -> str | None:
    """The first of ``targets`` that can run ``call``, or None."""
    if isinstance(call.op, Function):
        name = call.op.attrs.get("Composite")
        if name:
            prefix = str(name).split(".", 1)[0]
            return prefix if prefix in targets else None
        return None
    if not isinstance(call.op, OpDef) or is_begin(call) or is_end(call):
        return None
    for t in targets:
        check = call.op.extra.get(f"target.{t}")
        if check is None:
            continue
        try:
            ok = check(call) if callable(check) else bool(check)
        except Exception as err:  # noqa: BLE001 - a predicate that fails means "not supported"
            logger.warning("target.%s predicate of %s raised %s; the op stays on kiln", t, call.op.name, err)
            ok = False
        if ok:
            return t
    return None


def annotate_target(func: Function, targets) -> Function:
    targets = [targets] if isinstance(targets, str) else list(targets)
    for t in targets:  # a compiler kiln knows registers its predicates when its module loads
        try:
            importlib.import_module(f"kiln.relay.op.contrib.{t}")
        except ModuleNotFoundError:
            pass
    new_of: dict = {}
    for node in post_order(func.body):
        if isinstance(node, Call) and (t := supported_by(node, targets)) is not None:
            args = [compiler_begin(new_of.get(a, a), t) for a in node.args]
            new_of[node] = compiler_end(Call(node.op, args, node.attrs, node.type_args), t)
        else:
            new_of[node] = rebuild(node, new_of)
    return Function(func.params, new_of.get(func.body, func.body), func.ret_type, func.type_params, func.attrs)
