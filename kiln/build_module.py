"""``tvm.lower`` and ``tvm.build``: from a schedule (or PrimFunc/IRModule) to a runtime Module."""

from __future__ import annotations

import time

from kiln import config
from kiln.errors import ScheduleError
from kiln.ir.module import IRModule
from kiln.ir.stmt import PrimFunc


def _as_module(inputs, args, name: str) -> IRModule:
    from kiln.te.lower import lower_to_primfunc
    from kiln.te.schedule import Schedule

    if isinstance(inputs, Schedule):
        if args is None:
            raise ValueError("tvm.lower/build of a schedule needs args: the tensors of the function, e.g. [A, B]")
        func = lower_to_primfunc(inputs, list(args), name)
        return IRModule({name: func})
    if isinstance(inputs, PrimFunc):
        symbol = inputs.attrs.get("global_symbol", name)
        if symbol == "main" and name not in ("main", "default_function"):
            symbol = name
        return IRModule({symbol: inputs.with_attr("global_symbol", symbol)})
    if isinstance(inputs, IRModule):
        return inputs
    raise TypeError(f"expected a te.Schedule, tir.PrimFunc or IRModule, got {type(inputs).__name__}")


def _run_pipeline(mod: IRModule) -> IRModule:
    from kiln.tir.transform import PIPELINE

    named = {key: func.with_attr("global_symbol", key)
             if isinstance(func, PrimFunc) and "global_symbol" not in func.attrs else func
             for key, func in mod.items()}
    return PIPELINE(mod.with_functions(named))


def lower(inputs, args=None, name: str = "main", binds=None, simple_mode: bool = False) -> IRModule:
    """The loop IR of a schedule after kiln's TIR pipeline: ``print(tvm.lower(s, [A, B], simple_mode=True))``."""
    del binds, simple_mode  # buffers are bound from the args; the printout is always the simple one
    return _run_pipeline(_as_module(inputs, args, name))


def _check_bindings(sch, target) -> None:
    if "gpu" in target.keys:
        return
    for stage in getattr(sch, "stages", []):
        for iv, thread in stage.bindings.items():
            raise ScheduleError(
                f"stage {stage.name}: axis {iv.var.name} is bound to {thread.thread_tag}, but target "
                f"'{target}' has no GPU threads; remove bind() or build for 'cuda'/'opencl'"
            )


def build(inputs, args=None, target=None, target_host=None, name: str = "default_function", binds=None):
    """Compile to a runtime Module: ``f = tvm.build(s, [A, B], target="llvm", name="add_one")``."""
    from kiln import codegen
    from kiln.target import Target

    del binds
    if isinstance(inputs, dict):
        raise TypeError("tvm.build with a {target: module} dict is not supported; build one target at a time")
    if target is None:
        target = Target.current(allow_none=True) or "llvm"
    tgt = target if isinstance(target, Target) else Target(target, host=target_host)
    if target_host is not None and isinstance(target, Target):
        tgt = Target(target, host=target_host)
    start = time.perf_counter()
    _check_bindings(inputs, tgt)
    mod = lower(inputs, args, name)
    lowered = time.perf_counter()
    module = codegen.build(mod, tgt)
    if config.get().debug:
        done = time.perf_counter()
        print(f"kiln.build {name}: lower {1e3 * (lowered - start):.1f} ms, codegen {1e3 * (done - lowered):.1f} ms")
    return module
