"""``tvm.transform``: passes over IRModules and the context that configures them.

A pass is a callable ``IRModule -> IRModule`` with a name and an opt level. ``PassContext``
decides which passes run: a pass runs when its opt level is at most the context's, or when it
is listed in ``required_pass``; it never runs when listed in ``disabled_pass``. The current
context lives in a ``contextvars.ContextVar`` so threads and asyncio tasks each see their own.

>>> with tvm.transform.PassContext(opt_level=3):
...     mod = tvm.transform.Sequential([relay.transform.FoldConstant()])(mod)
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
from typing import Any, Callable, Iterable

from . import config as _config


@dataclasses.dataclass(frozen=True)
class PassInfo:
    """What describes a pass: its opt level, name and the passes it needs to run first."""

    opt_level: int
    name: str
    required: tuple[str, ...] = ()


class PassContext:
    """Settings for the passes run inside ``with PassContext(...)``.

    ``config`` takes the seed's string keys (``"relay.FuseOps.max_depth"``, ...); kiln keeps them
    as given and passes read them with ``PassContext.current().config.get(key, default)``.
    """

    def __init__(self, opt_level: int = 2, required_pass: Iterable[str] | None = None,
                 disabled_pass: Iterable[str] | None = None, config: dict | None = None,
                 instruments: Iterable | None = None, trace=None):
        if not isinstance(opt_level, int) or not 0 <= opt_level <= 4:
            raise ValueError(f"PassContext: opt_level must be an integer in 0..4, got {opt_level!r}")
        self.opt_level = opt_level
        self.required_pass = frozenset(required_pass or ())
        self.disabled_pass = frozenset(disabled_pass or ())
        self.config = dict(config or {})
        # Instruments stay on in nested contexts that name none (a test harness's checks, say).
        self.instruments = list(instruments) if instruments is not None else list(PassContext.current().instruments)
        self._tokens: list[contextvars.Token] = []

    @staticmethod
    def current() -> "PassContext":
        """The innermost active context (a default one, opt_level=2, outside any ``with``)."""
        ctx = _CURRENT.get()
        return ctx if ctx is not None else _DEFAULT

    def pass_enabled(self, info: PassInfo) -> bool:
        if info.name in self.disabled_pass:
            return False
        return info.name in self.required_pass or info.opt_level <= self.opt_level

    def __enter__(self) -> "PassContext":
        self._tokens.append(_CURRENT.set(self))
        return self

    def __exit__(self, *exc) -> None:
        _CURRENT.reset(self._tokens.pop())

    def __repr__(self) -> str:
        return (f"PassContext(opt_level={self.opt_level}, required_pass={sorted(self.required_pass)}, "
                f"disabled_pass={sorted(self.disabled_pass)}, config={self.config})")


_CURRENT: contextvars.ContextVar[PassContext | None] = contextvars.ContextVar("kiln_pass_context", default=None)
_DEFAULT = PassContext(instruments=())


def set_default_context(ctx: PassContext) -> None:
    """The context every thread's passes see outside any ``with PassContext`` (and whose
    instruments nested contexts keep): kiln/script/roundtrip.py installs its checks here."""
    global _DEFAULT
    _DEFAULT = ctx


class Pass:
    """A named transformation of an IRModule. Call it: ``mod = pass_(mod)``."""

    def __init__(self, fn: Callable, info: PassInfo):
        self._fn = fn
        self.info = info

    @property
    def name(self) -> str:
        return self.info.name

    def __call__(self, mod):
        ctx = PassContext.current()
        if not ctx.pass_enabled(self.info):
            return mod
        out = self._transform(mod, ctx)
        if _config.get().debug >= 2:
            print(f"# kiln: after pass {self.info.name}\n{out}")
        return out

    def _transform(self, mod, ctx):
        return self._fn(mod, ctx)

    def __repr__(self) -> str:
        return f"Pass({self.info.name}, opt_level={self.info.opt_level})"


class ModulePass(Pass):
    """A pass whose function takes the whole module: ``fn(mod, ctx) -> mod``."""


class FunctionPass(Pass):
    """A pass applied to each relay Function of a module: ``fn(func, mod, ctx) -> func``.

    Functions marked ``Primitive`` (fused kernels) are left alone, as their bodies are fixed.
    """

    def _transform(self, mod, ctx):
        out = {}
        for name, func in mod.items():
            primitive = _is_graph_function(func) and func.attrs and func.attrs.get("Primitive")
            out[name] = self._fn(func, mod, ctx) if _is_graph_function(func) and not primitive else func
        return mod.with_functions(out)


def _is_graph_function(func) -> bool:
    """A relay Function: a function of the module that is not loop-level TIR. (Told apart by
    what it is not, so this base layer never imports relay, which is built on it.)"""
    from kiln.ir.stmt import PrimFunc

    return not isinstance(func, PrimFunc) and hasattr(func, "params") and hasattr(func, "body")


class Sequential(Pass):
    """Run passes in order; each is skipped if the context disables it."""

    def __init__(self, passes: Iterable[Pass] | None = None, opt_level: int = 0, name: str = "sequential",
                 required: Iterable[str] = ()):
        self.passes = list(passes or ())
        super().__init__(None, PassInfo(opt_level, name, tuple(required)))

    def _transform(self, mod, ctx):
        for p in self.passes:
            mod = p(mod)
        return mod


def _decorator(cls, pass_func, opt_level, name, required):
    def make(fn):
        info = PassInfo(opt_level or 0, name or fn.__name__, tuple(required or ()))
        if isinstance(fn, type):  # a class with transform_module / transform_function
            @functools.wraps(fn)
            def create(*args, **kwargs):
                inst = fn(*args, **kwargs)
                method = inst.transform_module if cls is ModulePass else inst.transform_function
                return cls(method, info)
            return create
        return cls(fn, info)

    return make(pass_func) if pass_func is not None else make


def module_pass(pass_func=None, opt_level: int | None = None, name: str | None = None, required=None):
    """Turn ``fn(mod, ctx) -> mod`` into a Pass (usable bare or with arguments, as a decorator)."""
    return _decorator(ModulePass, pass_func, opt_level, name, required)


def function_pass(pass_func=None, opt_level: int | None = None, name: str | None = None, required=None):
    """Turn ``fn(func, mod, ctx) -> func`` into a Pass applied to every relay Function."""
    return _decorator(FunctionPass, pass_func, opt_level, name, required)


def PrintIR(header: str = "") -> Pass:  # noqa: N802 - seed name
    """A pass that prints the module and returns it unchanged."""
    def show(mod, ctx: Any):
        print(f"# {header}\n{mod}" if header else mod)
        return mod

    return ModulePass(show, PassInfo(0, "PrintIR"))
