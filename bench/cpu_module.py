"""The benchmarks' one way to build a relay module for the CPU and time the build."""

from __future__ import annotations

import time


def built(mod, params, threads: int, target: str = "llvm"):
    """(GraphModule on cpu(0) with a pool of ``threads``, build seconds) for ``mod`` at opt_level 3."""
    import kiln as tvm
    from kiln import config, relay
    from kiln.contrib import graph_executor

    start = time.perf_counter()
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target=target, params=params)
    build_s = time.perf_counter() - start
    with config.override(num_threads=threads):
        m = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    return m, build_s
