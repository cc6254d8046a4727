"""The benchmarks' one way to build a relay module for the CPU and time the build."""

from __future__ import annotations

import time


def built(mod, params, threads: int, target: str = "llvm", pass_config: dict | None = None):
    """(GraphModule on cpu(0) with a pool of ``threads``, build seconds) for ``mod`` at opt_level 3;
    ``pass_config``: PassContext settings (an A/B of a kiln switch)."""
    import kiln as tvm
    from kiln import config, relay
    from kiln.contrib import graph_executor

    start = time.perf_counter()
    with tvm.transform.PassContext(opt_level=3, config=pass_config):
        lib = relay.build(mod, target=target, params=params)
    build_s = time.perf_counter() - start
    with config.override(num_threads=threads):
        m = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    return m, build_s
