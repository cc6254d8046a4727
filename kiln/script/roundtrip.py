"""Print-then-parse checks: every PrimFunc kiln lowers must come back structurally equal.

``install()`` (the test suite calls it when KILN_ROUNDTRIP=1) wraps the places where kiln
produces PrimFuncs -- the TIR pipeline of ``tvm.lower``/``tvm.build`` (its input and its
output) and the host/kernel split of GPU builds -- so each function is printed, parsed back and
compared; a difference raises AssertionError with both texts. ``counts`` says how many
functions were checked, by stage.
"""

from __future__ import annotations

import collections
import functools

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


_installed = False


def install() -> None:
    """Check every PrimFunc that tvm.lower/tvm.build and the GPU split produce from now on."""
    global _installed
    if _installed:
        return
    _installed = True
    from kiln.driver import build_module

    pipeline = build_module._run_pipeline

    @functools.wraps(pipeline)
    def run_pipeline(mod):
        check_module(mod, "before pipeline")
        out = pipeline(mod)
        check_module(out, "lowered")
        return out

    build_module._run_pipeline = run_pipeline
    try:
        from kiln.codegen import opencl
    except ImportError:
        return
    lower_device = getattr(opencl, "lower_device", None)
    if lower_device is None:
        return

    @functools.wraps(lower_device)
    def checked_lower_device(mod, target):
        hosts, kernels = lower_device(mod, target)
        check_module(hosts, "gpu host")
        for k in kernels:
            check(k, "gpu kernel")
        return hosts, kernels

    opencl.lower_device = checked_lower_device
