"""The workloads a relay.build would ask the tuning hook for: what autotvm's task extraction tunes.

Above the build (it runs ``build_module.optimize`` and the graph codegen), so that the hook
itself (relay/backend/dispatch.py), which the build's lowering asks, imports none of them.
"""

from __future__ import annotations

from ...tuning import tuned_config
from ..build_module import _target, optimize
from . import dispatch
from .graph_codegen import GraphCodegen
from .te_compiler import TECompiler


def asked_workloads(mod, target, params=None) -> list[tuple[str, tuple]]:
    """``[(op name, workload)]``, each workload once in the order first asked, of every kernel
    ``relay.build(mod, target, params=params)`` would ask ``select_config`` for under the current
    PassContext. It runs the build's passes (``build_module.optimize``) and the graph codegen
    that calls ``TECompiler.lower`` per fused function, but lowers and compiles nothing."""
    tgt = _target(target, None)
    with tgt:  # as relay.build: target-dependent passes (AlterOpLayout) read it
        opt_mod, _ = optimize(mod, tgt, params)
    asked: dict = {}
    outer = dispatch.current_provider()

    def record(op_name, workload, where):
        asked.setdefault(workload, op_name)
        # the answer the build would get: configs may change weight layouts the codegen plans
        return outer(op_name, workload, where) if outer is not None else tuned_config(workload, where)

    with dispatch.use_config_provider(record):
        GraphCodegen(TECompiler(tgt)).codegen(opt_mod["main"])
    return [(op_name, workload) for workload, op_name in asked.items()]
