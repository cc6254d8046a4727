"""Pass lists that run: ``Pipeline`` is a named list of steps and the one runner of them.

The host TIR pipeline (``PIPELINE`` in ``__init__.py``), the GPU pipeline (``GPU_PIPELINE``)
and the C target's (``C_PIPELINE``) are all Pipelines, so every step of every one of them is
handled alike by the current ``PassContext``:

- a step named in ``disabled_pass`` is skipped (a step the code generators cannot do without,
  such as ``tir.SplitHostDevice``, refuses to be disabled, in one line);
- each instrument's ``should_run(mod, info)``, ``run_before_pass(mod, info)`` and
  ``run_after_pass(mod, info)`` are called around each step, and around the whole pipeline
  (``info.name`` is the pipeline's name then), where the instrument defines them;
- with ``KILN_DEBUG=2`` the module is printed after every step.

A step is gated by the capabilities of the device it compiles for (``GPUCaps``), never by the
target's kind: the GPU build driver (kiln/codegen/gpu.py) fills them from the target and the
kernel language, and the pipeline runs the steps whose gate holds.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from kiln import config
from kiln.errors import CompileError
from kiln.ir.module import IRModule
from kiln.ir.stmt import PrimFunc
from kiln.transform import PassContext, PassInfo


@dataclasses.dataclass(frozen=True)
class GPUCaps:
    """What the device and its kernel language can do; the GPU pipeline's steps are gated on it."""

    target: object  # the Target: limits (threads, shared memory, texture extent) come from it
    warp_shuffle: bool = False  # threads of a warp read each other's registers (CUDA __shfl_down_sync)
    async_copy: bool = False  # global -> shared copies can overlap compute (double-buffered tiles)
    fp16_arith: bool = True  # the language computes in half; else halves are stored, math is float


@dataclasses.dataclass(frozen=True, eq=False)
class Step:
    """One pass of a pipeline.

    ``on`` says what ``fn`` takes: "func" every PrimFunc (``fn(func)``), "kernel" / "host" the
    kernels / host functions after the split, "module" the whole IRModule (``fn(mod, caps)``).
    ``takes_caps``: fn is called ``fn(func, caps)``. ``when(caps)``: run only where it holds.
    ``essential``: later stages need it, so disabling it is an error rather than a skip.
    """

    name: str
    fn: Callable
    on: str = "func"
    when: Callable[[GPUCaps], bool] | None = None
    takes_caps: bool = False
    essential: bool = False

    def apply(self, mod: IRModule, caps) -> IRModule:
        if self.on == "module":
            return self.fn(mod, caps)
        out = {}
        for key, func in mod.items():
            if isinstance(func, PrimFunc) and self._wants(func):
                func = self.fn(func, caps) if self.takes_caps else self.fn(func)
            out[key] = func
        return mod.with_functions(out)

    def __eq__(self, other) -> bool:
        # ("tir.Simplify", simplify_func): a step reads like the (name, function) pair it is
        if isinstance(other, tuple):
            return (self.name, self.fn) == other
        return dataclasses.astuple(self) == dataclasses.astuple(other) if isinstance(other, Step) else NotImplemented

    __hash__ = object.__hash__

    def _wants(self, func: PrimFunc) -> bool:
        if self.on == "func":
            return True
        return is_kernel(func) == (self.on == "kernel")


def is_kernel(func: PrimFunc) -> bool:
    """A device kernel that tir.SplitHostDevice made (as opposed to a host function)."""
    return func.attrs.get("calling_conv") == "kernel"


class Pipeline:
    """A named list of Steps; ``pipeline(mod, caps)`` runs them in order (see the module doc)."""

    def __init__(self, name: str, steps: list[Step]):
        self.name = name
        self.steps = list(steps)

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.steps]

    def __iter__(self):
        return iter(self.steps)

    def __len__(self) -> int:
        return len(self.steps)

    def __getitem__(self, index):
        return self.steps[index]

    def __call__(self, mod: IRModule, caps: GPUCaps | None = None) -> IRModule:
        ctx = PassContext.current()
        whole = PassInfo(0, self.name)
        _hook(ctx, "run_before_pass", mod, whole)
        debug = config.get().debug
        for step in self.steps:
            if step.when is not None and not step.when(caps):
                continue
            info = PassInfo(0, step.name)
            if step.name in ctx.disabled_pass:
                if step.essential:
                    raise CompileError(f"PassContext disables {step.name}, which {self.name} cannot do without; "
                                       f"remove it from disabled_pass")
                continue
            if not all(getattr(i, "should_run", lambda m, i: True)(mod, info) for i in ctx.instruments):
                continue
            _hook(ctx, "run_before_pass", mod, info)
            mod = step.apply(mod, caps)
            _hook(ctx, "run_after_pass", mod, info)
            if debug >= 2:
                print(f"# kiln: after pass {step.name}\n{mod}\n")
        _hook(ctx, "run_after_pass", mod, whole)
        return mod

    def __repr__(self) -> str:
        return f"Pipeline({self.name}: {', '.join(self.names)})"


def _hook(ctx: PassContext, name: str, mod, info: PassInfo) -> None:
    for instrument in ctx.instruments:
        hook = getattr(instrument, name, None)
        if hook is not None:
            hook(mod, info)
