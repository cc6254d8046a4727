"""Helpers around modules: temporary directories (utils), compilers and linkers (cc), tar files.

Submodules load on first use, so ``tvm.contrib.utils.tempdir()`` works without an import.
"""

import importlib


def __getattr__(name: str):
    try:
        module = importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as err:
        if err.name != f"{__name__}.{name}":
            raise
        raise AttributeError(f"module 'kiln.contrib' has no attribute {name!r}") from None
    globals()[name] = module
    return module
