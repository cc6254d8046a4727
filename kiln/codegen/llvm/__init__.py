"""The LLVM backend: an IRModule of lowered PrimFuncs -> a CompiledModule (one ELF object).

Input contract (what lowering hands over), see docs/codegen.md: flattened buffer accesses
(one index each, in elements of ``buffer.dtype``), storage identified by ``buffer.data``,
tensor parameters described by ``buffer_map``, ``attrs["global_symbol"]`` naming each
function. Output: the kernel ABI of docs/abi.md, with the metadata, last-error buffer and
thread pool inside the object, so it links for any triple without a runtime library.
"""

from __future__ import annotations

import json

from ...errors import CompileError, InternalError, KilnError
from .. import lowered_functions
from .function import DLTENSOR_TYPE, SUPPORT_IR, emit_prim_func
from .ir import ModuleWriter, string_literal
from .launch import launch_globals
from .thread_pool import pool_ir
from .target import assembly_of, compile_ir, target_info
from ..metadata import module_metadata


def generate_ir(mod, target, device_target=None, device_code=None) -> tuple[str, dict, object]:
    """LLVM IR text, metadata and TargetInfo for mod (no LLVM optimization yet).

    With device_code (GPU modules), mod holds the host functions, which launch kernels through
    the __kiln_device_launch hook (launch.py), and the metadata carries the kernels."""
    info = target_info(target)
    funcs = lowered_functions(mod, "llvm")
    mw = ModuleWriter(info.triple, info.datalayout)
    mw.header.append(DLTENSOR_TYPE)
    for symbol, func in funcs:
        mw.unique(symbol)
        try:
            emit_prim_func(mw, func, symbol, info)
        except KilnError:
            raise
        except RecursionError:
            raise CompileError(f"{symbol}: expression nesting too deep to compile") from None
        except Exception as err:  # a bug here must still say which function it was compiling
            raise InternalError(f"LLVM codegen of {symbol!r} failed: {type(err).__name__}: {err}") from err
    _check_names(funcs, mw)
    meta = module_metadata(funcs, target, info.triple)
    if device_code is not None:
        meta["target"] = str(device_target)
        meta["device_type"] = device_target.get_target_device_type()
        meta["device_code"] = device_code
        mw.globals.extend(launch_globals())
    blob = json.dumps(meta, separators=(",", ":")).encode() + b"\0"
    mw.globals.append(f"@__kiln_metadata = protected constant [{len(blob)} x i8] "
                      f"{string_literal(blob)}, align 1")
    mw.functions.append(SUPPORT_IR)
    mw.functions.append(pool_ir(info.arch, info.android, info.intptr))
    return mw.text(), meta, info


def build(mod, target):
    """Compile every PrimFunc of mod for an llvm target; returns a CompiledModule."""
    from ...runtime.compiled import CompiledModule
    from ...target import Target

    target = target if isinstance(target, Target) else Target(target)
    text, meta, info = generate_ir(mod, target)
    names = [f["name"] for f in meta["functions"]]
    out = compile_ir(text, info, names, want_asm=False)
    return _module(out.obj, meta, out.ll, info, info.triple)


def build_host(mod, host_target, device_target, device_code: dict):
    """The host side of a GPU module: mod's functions launch the kernels of device_code."""
    text, meta, info = generate_ir(mod, host_target, device_target, device_code)
    names = [f["name"] for f in meta["functions"]]
    out = compile_ir(text, info, names, want_asm=False)
    return _module(out.obj, meta, out.ll, info, info.triple)


def _module(obj: bytes, meta: dict, ll, info, triple: str):
    """The CompiledModule of one object; ``ll``: its LLVM IR, or a function that gives it."""
    from ...runtime.compiled import CompiledModule

    module = CompiledModule([obj], meta, {}, triple=triple, type_key="llvm")
    texts, lazy = ({"ll": ll}, {}) if isinstance(ll, str) else ({}, {"ll": ll})
    # Assembly costs as much as the object itself: make it when someone asks for it.
    lazy["asm"] = lambda: assembly_of(module.sources["ll"], info)
    module.sources = LazySources(texts, lazy)
    return module


def code_identity(target) -> tuple:
    """What of an llvm target decides the code LLVM makes (triple, CPU, features, opt level; plain
    "llvm" means this machine's CPU): the part of a build cache key that names the target."""
    info = target_info(target)
    return (info.triple, info.cpu, info.features, info.opt_level)


def module_from_cache(obj: bytes, meta: dict, ll, target):
    """The CompiledModule a build cache restores: its object, metadata and LLVM IR (text, or a
    function that gives it), with assembly made on demand as after a fresh build."""
    return _module(obj, meta, ll, target_info(target), meta.get("triple", ""))


class LazySources(dict):
    """Source texts by format; the ones in `lazy` are produced on first access."""

    def __init__(self, texts: dict, lazy: dict):
        super().__init__(texts)
        self._lazy = dict(lazy)

    def __contains__(self, key) -> bool:
        return dict.__contains__(self, key) or key in self._lazy

    def __missing__(self, key):
        make = self._lazy.pop(key)  # KeyError when it is not a known format either
        value = self[key] = make()
        return value

    def __iter__(self):
        return iter([*dict.keys(self), *self._lazy])

    def keys(self):
        return list(self)

    def get(self, key, default=None):
        return self[key] if key in self else default


_RUNTIME_NAMES = {"free", "posix_memalign", "sysconf", "getpid", "sched_yield", "pthread_create",
                  "pthread_detach", "pthread_mutex_init", "pthread_cond_init", "pthread_mutex_lock",
                  "pthread_mutex_unlock", "pthread_cond_wait", "pthread_cond_broadcast"}


def _check_names(funcs, mw) -> None:
    """A kernel may not take the name of a C function the module itself calls."""
    for symbol, _ in funcs:
        if symbol in mw.declared or symbol in _RUNTIME_NAMES or symbol.startswith("__kiln"):
            raise CompileError(f"function name {symbol!r} is also the name of a C library function "
                               "the module calls (or a kiln runtime symbol); rename the function")
