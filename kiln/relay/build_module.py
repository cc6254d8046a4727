"""``relay.build``: compile a relay module into kernels + graph JSON + parameters.

>>> with tvm.transform.PassContext(opt_level=3):
...     lib = relay.build(mod, target="llvm", params=params)
>>> m = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))

Steps: bind ``params`` into ``main`` as constants; run the optimization passes allowed by the
PassContext's opt level (``optimize``); lower every fused primitive function to a kernel with
topi (backend/te_compiler.py); write the graph JSON and plan its memory
(backend/graph_codegen.py); compile all kernels into one module.
"""

from __future__ import annotations

import logging
import time

from kiln.errors import CompileError
from kiln.transform import PassContext

from . import transform
from .backend.factory import GraphExecutorFactoryModule
from .backend.graph_codegen import GraphCodegen
from .backend.te_compiler import TECompiler
from .expr import Function

logger = logging.getLogger("kiln.relay.build")

build_config = PassContext  # relay.build_config(opt_level=3): the name before tvm.transform.PassContext


def _target(target, target_host):
    from kiln.target import Target

    if isinstance(target, dict):
        if len(target) != 1:
            raise CompileError(f"relay.build: kiln compiles a graph for one target, got {list(target)}")
        target = next(iter(target.values()))
    if target is None:
        target = Target.current(allow_none=True) or "llvm"
    tgt = Target(target, host=target_host) if target_host is not None else (
        target if isinstance(target, Target) else Target(target))
    if tgt.kind.name not in ("llvm", "c", "opencl", "cuda"):
        raise CompileError(f"relay.build: target {tgt} is not supported yet; the graph compiler generates CPU "
                           "code (target 'llvm', with -mtriple for ARM boards; 'c' for microcontrollers), OpenCL ('opencl', "
                           "'opencl -device=mali', with a host target) and CUDA ('cuda', 'cuda -arch=sm_90')")
    if tgt.kind.name not in ("llvm", "c") and tgt.host is None:
        tgt = Target(tgt, host="llvm")  # the graph's host code: the kernels' launchers
    return tgt


def _as_module(mod):
    from kiln.ir.module import IRModule

    if isinstance(mod, Function):
        return IRModule.from_expr(mod)
    if not hasattr(mod, "functions") or "main" not in mod:
        raise CompileError(f"relay.build takes an IRModule with a 'main' function (or a relay.Function), "
                           f"got {type(mod).__name__}")
    return mod


def optimize(mod, target=None, params=None):
    """Bind ``params``, then run the passes of ``transform.optimize_sequence`` that the current
    PassContext's opt level allows (fusion always runs). Returns ``(mod, params)``."""
    mod = _as_module(mod)
    if params:
        mod = transform.BindParams(params)(mod)
    ctx = PassContext.current()
    required = set(ctx.required_pass) | {"FuseOps", "InferType"}  # the backend needs fused, typed code
    if "FuseOps" in ctx.disabled_pass:
        raise CompileError("relay.build: FuseOps is disabled, but the graph executor runs fused "
                           "primitive functions; remove it from disabled_pass")
    with PassContext(ctx.opt_level, required, ctx.disabled_pass, ctx.config, ctx.instruments):
        mod = transform.optimize_sequence()(transform.InferType()(mod))
    return mod, {}


def build(ir_mod, target=None, target_host=None, params=None, mod_name: str = "default", executor=None,
          runtime=None):
    """Compile ``ir_mod["main"]`` for ``target``; returns a factory module (backend/factory.py).

    ``params``: ``{name: array}`` bound into the model as constants (weights). ``mod_name``
    names the kernels (``tvmgen_<mod_name>_fused_...``) and the factory function (``lib[mod_name]``).
    """
    kind = executor if isinstance(executor, str) or executor is None else getattr(executor, "name", executor)
    if kind not in (None, "graph", "aot"):
        raise CompileError(f"relay.build: executor {executor} is not supported; kiln has the graph and aot executors")
    tgt = _target(target, target_host)
    if kind == "aot" and tgt.kind.name != "c":
        raise CompileError(f"relay.build: executor aot generates C; build with target 'c' "
                           f"(e.g. 'c -keys=arm_cpu -mcpu=cortex-m4'), not {tgt}")
    start = time.perf_counter()
    with tgt:  # target-dependent passes (AlterOpLayout) read it
        opt_mod, _ = optimize(ir_mod, tgt, params)
    optimized = time.perf_counter()
    func = opt_mod["main"]
    compiler = TECompiler(tgt, mod_name)
    codegen = GraphCodegen(compiler, plan_inplace=kind == "aot")
    graph_json, graph_params = codegen.codegen(func)
    if codegen.external and kind == "aot":
        raise CompileError(f"relay.build: the aot executor cannot call functions offloaded to "
                           f"{sorted({e.compiler for e in codegen.external})} (they run in the Python JSON "
                           "runtime); build with the graph executor, or without partition_for_<compiler>")
    lowered = time.perf_counter()
    lib = compiler.build()
    if codegen.external:  # offloaded functions travel in the library as JSON (docs/byoc.md)
        from .backend.contrib import attach_external
        lib = attach_external(lib, codegen.external, tgt, mod_name)
    done = time.perf_counter()
    logger.info("relay.build %s: optimize %.2f s, graph of %d kernels %.2f s, lower + codegen (or build "
                "cache) %.2f s", mod_name,
                optimized - start, len(compiler.lowered), lowered - optimized, done - lowered)
    if kind == "aot":  # one C run function over a static arena (backend/aot.py)
        from .backend.aot import AOTExecutorFactoryModule
        from .backend.executor import Executor, Runtime
        executor = executor if isinstance(executor, Executor) else Executor("aot")
        runtime = runtime if runtime is not None else Runtime("crt")
        return AOTExecutorFactoryModule(opt_mod, tgt, executor, runtime, graph_json, lib, graph_params, mod_name,
                                        inplace=codegen.inplace)
    factory = GraphExecutorFactoryModule(opt_mod, tgt, graph_json, lib, graph_params, mod_name)
    factory.kernel_workloads = dict(compiler.workloads)
    return factory
