"""Tasks from a relay program: ``autotvm.task.extract_from_program(mod["main"], target, params,
ops=(relay.op.get("nn.conv2d"),))``.

The tasks are the tunable kernels ``relay.build(mod, target, params=params)`` would build: the
program goes through the build's own passes and graph codegen (``relay.backend.asked_workloads``),
and every workload the codegen asks the dispatch context for becomes a task. Layout passes (x86's NCHW16c, adreno's NCHW4c and its NHWC conversion), fusion and
float16 conversion therefore shape the tasks exactly as they shape the build, so a log of these
tasks is used by ``with autotvm.apply_history_best(log): relay.build(...)``.

The passes run under the current PassContext when one is entered (build under the same one);
outside any, at ``opt_level=3`` -- the level of ``tvmc compile`` and of the documents' builds
(TVM's extraction also lowers at opt_level 3).
"""

from __future__ import annotations

import logging

from kiln.errors import TuningError

logger = logging.getLogger("autotvm")


def _op_name(op) -> str:
    return getattr(op, "name", op if isinstance(op, str) else str(op))


def extract_from_program(mod, params=None, target=None, target_host=None, ops=None):
    """Tasks for the tunable ops of ``mod`` (a relay Function or IRModule), as relay.build
    would lower them for ``target``; ``ops`` limits them to these relay ops."""
    from kiln.target import Target
    from kiln.transform import PassContext
    from .task import TEMPLATES, _load_builtin_templates, create

    try:
        from kiln.relay.backend import dispatch
        from kiln.relay.backend.asked_workloads import asked_workloads
    except ImportError:
        raise TuningError("extract_from_program needs kiln.relay, which this kiln lacks") from None

    _load_builtin_templates()
    tgt = Target(target, host=target_host)
    wanted = {_op_name(o) for o in ops} if ops else set(dispatch.TEMPLATES)
    ctx = PassContext.current()
    if not _entered(ctx):
        ctx = PassContext(opt_level=3)
    with ctx:
        asked = asked_workloads(mod, tgt, params)
    tasks, missing = [], {}
    for name, workload in asked:
        if name not in wanted:
            continue
        if workload[0] not in TEMPLATES:
            missing[workload[0]] = missing.get(workload[0], 0) + 1
            continue
        tasks.append(create(workload[0], workload[1:], tgt))
    for template, count in missing.items():
        logger.warning("extract_from_program: no tunable template %s (%d workload%s) on %s; those kernels "
                       "build with topi's default schedule", template, count, "s" * (count > 1), tgt)
    logger.info("extract_from_program: %d tasks for %s", len(tasks), tgt)
    return tasks


def _entered(ctx) -> bool:
    """Whether ``ctx`` is a context the caller entered (not the default outside any ``with``)."""
    from kiln import transform
    return ctx is not getattr(transform, "_DEFAULT", None)
