"""The seam between the graph compiler and the tuner, below both.

relay's build asks ``tuned_config(workload, target)`` for each tunable kernel
(``relay/backend/dispatch.py``). ``kiln.autotvm``, when imported, installs the lookup that answers
from its active dispatch context (``with autotvm.apply_history_best(log):``,
``autotvm/dispatcher.py``); until then the answer is None (topi's default schedule), so a plain
build never imports the tuner and relay never imports it either.
"""

from __future__ import annotations

from typing import Callable

_lookup: Callable | None = None


def set_tuned_config_lookup(lookup: Callable | None) -> None:
    """Install ``lookup(workload, target) -> config or None`` (the tuner does, once)."""
    global _lookup
    _lookup = lookup


def tuned_config(workload, target):
    """The tuned config for ``workload`` on ``target``, or None (no tuner, or not tuned)."""
    return None if _lookup is None else _lookup(workload, target)
