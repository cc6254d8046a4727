"""Print-then-parse checks: every PrimFunc kiln lowers must come back structurally equal.

``install()`` (the test suite calls it when KILN_ROUNDTRIP=1) adds a pass instrument
(``RoundTrip``) to the default PassContext: at the TIR pipeline of ``tvm.lower``/``tvm.build``
(its input and its output) and after the GPU pipeline (host functions and kernels), each
function is printed, parsed back and compared; a difference raises AssertionError with both
texts. ``counts`` says how many functions were checked, by stage.
"""

from __future__ import annotations

import collections

from kiln.ir.module import IRModule
from kiln.ir.stmt import PrimFunc
from kiln.ir.structural import structural_equal

counts: collections.Counter = collections.Counter()


def check(func: PrimFunc, stage: str = "") -> PrimFunc:
    """Print func, parse the text, and assert the result is structurally equal; returns the parsed one."""
    from .source import from_source

    text = func.script()
    try:
        back = from_source(text)
    except Exception as exc:  # noqa: BLE001 - reported with the text that failed
        raise AssertionError(f"round trip ({stage}): the printed function does not parse: {exc}\n{text}") from None
    if not structural_equal(func, back):
        raise AssertionError(f"round trip ({stage}): parsed function differs at {first_difference(func, back)}\n"
                             f"--- printed\n{text}\n--- reprinted\n{back.script()}")
    counts[stage] += 1
    return back


def first_difference(a, b) -> str:
    """Where the structural keys of a and b first differ (for error messages)."""
    from kiln.ir.structural import _key

    def walk(x, y, depth):
        if isinstance(x, tuple) and isinstance(y, tuple) and len(x) == len(y):
            for p, q in zip(x, y):
                if p != q:
                    return walk(p, q, depth + 1)
        return f"depth {depth}: {str(x)[:400]} vs {str(y)[:400]}"

    return walk(_key(a, {}, {}), _key(b, {}, {}), 0)


def check_module(mod, stage: str) -> None:
    if isinstance(mod, IRModule):
        for _, func in mod.items():
            if isinstance(func, PrimFunc):
                check(func, stage)


class RoundTrip:
    """A pass instrument: checks the functions entering and leaving the TIR pipeline
    ("before pipeline", "lowered") and the host functions and kernels the GPU pipeline makes
    ("gpu host", "gpu kernel"). Use it in a PassContext, or for every build with ``install()``."""

    def run_before_pass(self, mod, info) -> None:
        if info.name == "tir.Pipeline":
            check_module(mod, "before pipeline")

    def run_after_pass(self, mod, info) -> None:
        if info.name == "tir.Pipeline":
            check_module(mod, "lowered")
        elif info.name == "tir.GPUPipeline":
            from kiln.tir.transform import is_kernel

            for _, func in mod.items():
                if isinstance(func, PrimFunc):
                    check(func, "gpu kernel" if is_kernel(func) else "gpu host")


_installed = False


def install() -> None:
    """Check every PrimFunc that tvm.lower/tvm.build and the GPU split produce from now on: the
    default PassContext gets a RoundTrip instrument (contexts made later keep it)."""
    global _installed
    if _installed:
        return
    _installed = True
    from kiln import transform

    default = transform.PassContext.current()
    transform.set_default_context(transform.PassContext(
        default.opt_level, default.required_pass, default.disabled_pass, default.config,
        [*default.instruments, RoundTrip()]))
