"""TVMScript: write TIR in Python syntax, print TIR as text, and read that text back.

``from kiln.script import ir as I, tir as T`` gives the ``@I.ir_module`` and ``@T.prim_func``
decorators; ``from_source(text)`` parses printed text (``mod.script()``, ``func.script()``).
The bodies are read with Python's ``ast`` module and never run.
"""

from __future__ import annotations

from . import ir, tir
from .ir import ir_module
from .source import from_source

__all__ = ["ir", "tir", "ir_module", "from_source"]
