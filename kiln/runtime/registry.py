"""Global functions of the runtime, by name: what an RPC server offers besides loaded modules.

``session.get_function("tvm.graph_executor.create")`` on a client reaches this table in the
server's worker (kiln/rpc/worker.py looks names up here), which is how a graph executor is
created next to a remote library. One literal table; nothing registers itself on import.
"""

from __future__ import annotations


def _graph_executor_create(graph_json, lib, dev):
    from .graph_executor import create
    return create(graph_json, lib, dev)


GLOBAL_FUNCTIONS = {
    "tvm.graph_executor.create": _graph_executor_create,
    "tvm.graph_runtime.create": _graph_executor_create,  # the name in seed-era TVM
}


def get_global_func(name: str, allow_missing: bool = False):
    """The global function ``name``; None (with allow_missing) or KeyError when unknown."""
    func = GLOBAL_FUNCTIONS.get(name)
    if func is None and not allow_missing:
        raise KeyError(f"no global function {name!r}; known: {sorted(GLOBAL_FUNCTIONS)}")
    return func
