"""Module: what ``tvm.build`` returns and ``load_module`` loads; functions by name.

Concrete kinds: ``LibraryModule`` (a loaded .so, library.py) and ``CompiledModule`` (objects
fresh from the compiler, compiled.py). The RPC client subclasses Module for remote modules.
"""

from __future__ import annotations

import importlib
import os

from ..errors import KilnError


class Module:
    """Base class: ``mod["name"](...)``, ``mod(...)`` calls the entry function."""

    type_key = "module"

    def __init__(self):
        self.imported_modules: list[Module] = []

    @property
    def entry_name(self) -> str:
        raise KilnError(f"a {self.type_key} module has no entry function")

    def function_names(self) -> list[str]:
        return []

    def _get_function(self, name: str):
        """The function ``name`` of this module itself, or None."""
        return None

    def get_function(self, name: str, query_imports: bool = False):
        func = self._get_function(name)
        if func is None and query_imports:
            for mod in self.imported_modules:
                func = mod._get_function(name)
                if func is not None:
                    break
        if func is None:
            names = ", ".join(self.function_names()) or "none"
            raise AttributeError(f"{self.type_key} module has no function {name!r}; "
                                 f"its functions: {names}")
        return func

    def __getitem__(self, name: str):
        if not isinstance(name, str):
            raise TypeError(f"functions are looked up by name (str), got {type(name).__name__}")
        return self.get_function(name)

    def __call__(self, *args):
        return self.get_function(self.entry_name)(*args)

    def import_module(self, module: Module) -> None:
        self.imported_modules.append(module)

    def get_source(self, fmt: str = "") -> str:
        raise KilnError(f"a {self.type_key} module keeps no source; get_source works on the "
                        "module tvm.build returned")

    def time_evaluator(self, func_name: str, dev, number: int = 10, repeat: int = 1,
                       min_repeat_ms: int = 0, limit_zero_time_iterations: int = 100,
                       cooldown_interval_ms: int = 0, repeats_to_cooldown: int = 1,
                       f_preproc: str = ""):
        """A function that runs ``func_name`` and returns a ProfileResult (see evaluator.py)."""
        from .evaluator import time_evaluator
        return time_evaluator(self, func_name, dev, number=number, repeat=repeat,
                              min_repeat_ms=min_repeat_ms,
                              limit_zero_time_iterations=limit_zero_time_iterations,
                              cooldown_interval_ms=cooldown_interval_ms,
                              repeats_to_cooldown=repeats_to_cooldown, f_preproc=f_preproc)

    def export_library(self, file_name: str, fcompile=None, **kwargs) -> None:
        raise KilnError(f"a {self.type_key} module cannot be exported; export the module "
                        "tvm.build returned")

    def save(self, file_name: str, fmt: str = "") -> None:
        raise KilnError(f"a {self.type_key} module cannot be saved; save the module tvm.build returned")

    def __repr__(self) -> str:
        return f"Module({self.type_key}, functions=[{', '.join(self.function_names())}])"


def load_module(path: str, fmt: str = "") -> Module:
    """Load a module file: ``.so`` as is; ``.tar`` relinked with this machine's C compiler.

    >>> f = tvm.runtime.load_module("lib.tar")
    >>> f(a, b)
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise KilnError(f"module file {path} does not exist")
    if os.path.isdir(path):
        raise KilnError(f"module file {path} is a directory; pass the .so or .tar file inside it")
    kind = "tar" if (fmt or path.rsplit(".", 1)[-1]) == "tar" else "so"
    with open(path, "rb") as f:
        if f.read(8) == b"KILNVTA1":  # an accelerator's instruction stream, whatever its name
            kind = "vta"
    module_name, attr = LOADERS[kind]
    return getattr(importlib.import_module(module_name), attr)(path)


# Which loader reads which file kind: one literal table, so this base module does not import
# the Module subclasses that import it (compiled.py: .tar relinked here; library.py: .so).
LOADERS = {
    "tar": ("kiln.runtime.compiled", "load_tar"),
    "so": ("kiln.runtime.library", "LibraryModule"),
    "vta": ("kiln.vta.module", "load"),
}
