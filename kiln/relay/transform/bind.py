"""Bind parameter values into a function as constants (what ``relay.build(params=...)`` does first)."""

from __future__ import annotations

import numpy as np

from kiln.errors import KilnError

from ..expr import Function, const
from ..visitor import bind


def bind_params_by_name(func: Function, params: dict) -> Function:
    """Replace the params of ``func`` named in ``params`` by Constants; they leave the signature."""
    by_name: dict = {}
    for p in func.params:
        if p.name_hint in by_name:
            raise KilnError(f"bind_params_by_name: two parameters are named {p.name_hint!r}; names must be unique")
        by_name[p.name_hint] = p
    binds = {}
    for name, value in params.items():
        if name not in by_name:
            continue  # TVM ignores extra params too; they may belong to another function
        if hasattr(value, "numpy") and not isinstance(value, np.ndarray):
            value = value.numpy()
        binds[by_name[name]] = const(np.asarray(value))
    return bind(func, binds) if binds else func
