"""``vta.lower`` and ``vta.build``: a TE schedule -> the accelerator's instruction stream.

The schedule is lowered by kiln's TE pipeline; loops bound to ``te.thread_axis("cthread")`` (or
"vthread"), VTA's virtual threads, are injected by kiln's virtual-thread pass (private SRAM tiles
per thread, each copy and GEMM nest once per thread in turn, so one thread's loads overlap
another's GEMMs); emit.py walks the loops into instructions and deps.py adds the dependency tokens.
"""

from __future__ import annotations

import contextlib
from dataclasses import replace

import numpy as np

from kiln.errors import CompileError
from kiln.ir.functor import Mutator
from kiln.ir.stmt import ForKind

from . import isa
from .deps import insert_tokens
from .emit import Emitter
from .environment import get_env
from .module import VTAFunction, VTAModule


@contextlib.contextmanager
def build_config(**_options):
    """VTA's ``with vta.build_config():`` block; kiln's VTA passes need no options."""
    yield


class _AsCoprocessorThreads(Mutator):
    """Loops bound to "vthread" are the accelerator's virtual threads too: tag them "cthread"
    (private SRAM tiles, whole copy/GEMM nests per thread; see inject_virtual_thread.py)."""

    def visit_For(self, op):
        body = self.visit(op.body)
        tag = getattr(op.thread_binding, "thread_tag", "") or ""
        if op.kind == ForKind.THREAD_BINDING and tag.startswith("vthread"):
            return replace(op, body=body, thread_binding=replace(op.thread_binding, thread_tag="cthread"))
        return op if body is op.body else replace(op, body=body)


def inject_threads(func):
    """The function with its virtual threads injected, as the emitter takes it."""
    from kiln.tir.transform.inject_virtual_thread import inject_virtual_threads

    return inject_virtual_threads(replace(func, body=_AsCoprocessorThreads().visit(func.body)))


def lower(s, args, name: str = "main", simple_mode: bool = False):
    """The loop IR of a VTA schedule, virtual threads injected: ``print(vta.lower(s, [A, B, C]))``."""
    from kiln.build_module import lower as tvm_lower

    mod = tvm_lower(s, args, name=name)
    return mod.with_functions({key: inject_threads(func) for key, func in mod.items()})


def compile_func(func, env=None, name: str = "main", mode: str | None = None) -> VTAFunction:
    """One lowered PrimFunc -> a VTAFunction (instructions, micro-ops, argument specs)."""
    env = env or get_env()
    em = Emitter(func, env)
    em.run(func.body)
    insns = insert_tokens(em.ops, env)
    words = isa.encode(insns, env)
    uops = np.array(em.uop_words, dtype=np.uint32)
    args = []
    for p in func.params:
        buf = func.buffer_map.get(p)
        if buf is None:
            raise CompileError(f"vta: parameter {p.name} of {name} is a scalar; accelerator kernels take arrays only")
        shape = [int(getattr(d, "value", d)) for d in buf.shape]
        args.append({"name": buf.name, "shape": shape, "dtype": str(buf.dtype)})
    fn = VTAFunction(name, env.export(), words, uops, args, mode or ("cycle" if env.TARGET == "tsim" else "functional"))
    fn.sram_peak = {isa.MEM_NAMES[m]: v for m, v in em.peak.items()}
    return fn


def compile_lowered(mod, env=None) -> VTAModule:
    """Every lowered function of ``mod`` -> a VTAModule: ``tvm.build(s, args, "ext_dev")`` (the
    ext_dev code generator) ends here."""
    from kiln.codegen import lowered_functions

    env = env or get_env()
    funcs = {name: compile_func(inject_threads(f), env, name) for name, f in lowered_functions(mod, "ext_dev")}
    return VTAModule(funcs, env.export())


def build(s, args, target=None, name: str = "default_function", env=None, mode: str | None = None) -> VTAModule:
    """``vta.build(s, [A, B, C], tvm.target.Target("ext_dev", host=env.target_host), name="gemm")``.

    Returns a VTAModule; call it with arrays on ``tvm.ext_dev(0)`` (or the CPU), or ``save`` it
    and load it through RPC on a server with the simulator.
    """
    from kiln.target import Target

    env = env or get_env()
    if target is not None:
        tgt = target if isinstance(target, Target) else Target(target)
        if tgt.kind.name != "ext_dev":
            raise CompileError(f"vta.build: target {tgt} is not the accelerator; use "
                               "Target('ext_dev', host=env.target_host) (tvm.build handles CPU targets)")
    mod = lower(s, args, name=name)
    func = mod[name] if name in mod else next(iter(mod.values()))
    fn = compile_func(func, env, name, mode)
    return VTAModule({name: fn}, env.export())
