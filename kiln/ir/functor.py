"""Traversal of TIR: a visitor and a mutator that dispatch to ``visit_<ClassName>``.

The default visit walks every child expression/statement field of a node. The mutator
rebuilds a node only when one of its children changed, so untouched subtrees keep their
identity (cheap passes, and ``is`` tells whether anything happened).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from .block import BufferRegion
from .expr import IterVar, PrimExpr, Range, Var
from .stmt import Stmt

# Fields that are not children: buffers are shared objects, and the combiner of a Reduce is
# a description rather than code at this point.
_SKIP = {"buffer", "combiner", "producer", "thread_binding", "annotations", "node", "dtype", "type_annotation"}


def _child_fields(cls) -> tuple[str, ...]:
    names = []
    for f in dataclasses.fields(cls):
        if f.name not in _SKIP:
            names.append(f.name)
    return tuple(names)


_FIELDS: dict[type, tuple[str, ...]] = {}


def _walk_fields(cls) -> tuple[str, ...]:
    """The child fields of a dataclass type, () for anything else (cached per type)."""
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = _child_fields(cls) if dataclasses.is_dataclass(cls) else ()
    return names


def child_fields(node) -> tuple[str, ...]:
    return _walk_fields(type(node))


_IR_TYPES = (PrimExpr, Stmt, Range, IterVar, BufferRegion)
_IS_IR: dict[type, bool] = {}


def _is_ir(value) -> bool:
    # by type, cached: the walkers ask this of every field of every node
    cls = type(value)
    known = _IS_IR.get(cls)
    if known is None:
        known = _IS_IR[cls] = issubclass(cls, _IR_TYPES)
    return known


class Visitor:
    """Walk an IR tree; override ``visit_<ClassName>`` to act on a node type."""

    def __init__(self):
        self._table: dict[type, Callable] = {}

    def visit(self, node) -> None:
        method = self._table.get(type(node))
        if method is None:
            method = getattr(self, "visit_" + type(node).__name__, None) or self.generic_visit
            self._table[type(node)] = method
        method(node)

    def generic_visit(self, node) -> None:
        for name in _walk_fields(type(node)):
            value = getattr(node, name)
            if _is_ir(value):
                self.visit(value)
            elif isinstance(value, tuple):
                for item in value:
                    if _is_ir(item):
                        self.visit(item)


class Mutator:
    """Rebuild an IR tree; override ``visit_<ClassName>`` to replace a node type."""

    def __init__(self):
        self._table: dict[type, Callable] = {}

    def visit(self, node):
        method = self._table.get(type(node))
        if method is None:
            method = getattr(self, "visit_" + type(node).__name__, None) or self.generic_visit
            self._table[type(node)] = method
        return method(node)

    def generic_visit(self, node):
        changes: dict[str, Any] = {}
        for name in _walk_fields(type(node)):
            value = getattr(node, name)
            if _is_ir(value):
                new = self.visit(value)
                if new is not value:
                    changes[name] = new
            elif isinstance(value, tuple) and value and any(_is_ir(v) for v in value):
                new_items = tuple(self.visit(v) if _is_ir(v) else v for v in value)
                if any(a is not b for a, b in zip(new_items, value)):
                    changes[name] = new_items
        if not changes:
            return node
        return dataclasses.replace(node, **changes)


def post_order_visit(node, fvisit: Callable[[Any], None]) -> None:
    """Call fvisit on every node of the tree, children first."""

    class _Post(Visitor):
        def visit(self, n):
            super().visit(n)
            fvisit(n)

    _Post().visit(node)


def substitute(node, mapping: dict) -> Any:
    """Replace Vars by expressions (mapping: Var -> PrimExpr, or a callable Var -> expr|None)."""
    if not mapping:
        return node
    lookup = mapping if callable(mapping) else mapping.get

    class _Subst(Mutator):
        def visit_Var(self, v):
            new = lookup(v)
            return v if new is None else new

        visit_SizeVar = visit_Var

    return _Subst().visit(node)


def uses_var(node, pred: Callable[[Var], bool]) -> bool:
    found = False

    class _Find(Visitor):
        def visit_Var(self, v):
            nonlocal found
            if pred(v):
                found = True

        visit_SizeVar = visit_Var

    _Find().visit(node)
    return found
