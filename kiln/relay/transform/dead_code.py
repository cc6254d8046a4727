"""Dead-code elimination: drop ``let`` bindings whose variable the body never uses.

Relay's dataflow graph holds only what the result reaches, so lets are the only place dead
code can hide. All relay ops are pure, so dropping an unused binding is always safe.
"""

from __future__ import annotations

from ..analysis import free_vars
from ..expr import Let
from ..visitor import ExprMutator


class _DCE(ExprMutator):
    def visit_Let(self, let):
        body = self.visit(let.body)
        if let.var not in free_vars(body):
            return body
        value = self.visit(let.value)
        if value is let.value and body is let.body:
            return let
        return Let(let.var, value, body)


def dead_code_elimination(expr):
    return _DCE().visit(expr)
