"""Structural equality and hashing of IR trees.

``structural_equal(a, b)`` is true when the trees have the same shape, the same constants and
dtypes, and their variables correspond one to one (numbered in order of first appearance).
Use it, not ``==``, which builds an ``EQ`` expression.
"""

from __future__ import annotations

import dataclasses
import enum

from .block import Block
from .dtype import DType
from .expr import IterVar, Let, Node, Var
from .module import IRModule
from .stmt import Allocate, Buffer, For, LetStmt, PrimFunc, SeqStmt


def _fresh(vars_: dict) -> int:
    n = vars_.get("#", 0)
    vars_["#"] = n + 1
    return n


def _flat_seq(node) -> list:
    out = []
    for s in node.seq:
        out.extend(_flat_seq(s) if isinstance(s, SeqStmt) else [s])
    return out


# Types that take one of _key's own branches before the generic dataclass one; every other
# dataclass (the expression nodes, most statements) takes the per-type field list below. A type
# given a branch of its own in _key must be added here too, or it takes the generic walk.
_OWN_BRANCH = (Var, Buffer, DType, str, int, float, bool, type(None), enum.Enum, set, frozenset, tuple, list,
               dict, IRModule, SeqStmt, PrimFunc, For, LetStmt, Let, Allocate, Block)
_NAMED = ("combiner", "producer", "type_annotation")  # keyed by name: descriptions, not code
_PLAIN: dict[type, tuple | None] = {}
_UNSEEN = object()


def _plain_fields(cls) -> tuple | None:
    """The fields of a dataclass node that _key walks generically, or None (cached per type):
    simplification keys millions of nodes, and the isinstance chain was most of the cost."""
    fields = _PLAIN.get(cls, _UNSEEN)
    if fields is _UNSEEN:
        fields = None
        if dataclasses.is_dataclass(cls) and not issubclass(cls, _OWN_BRANCH):
            fields = tuple((f.name, f.name in _NAMED) for f in dataclasses.fields(cls))
        _PLAIN[cls] = fields
    return fields


def _key(node, vars_: dict | None, buffers: dict):
    fields = _plain_fields(type(node))
    if fields is not None:
        parts = [type(node).__name__]
        for name, named in fields:
            value = getattr(node, name)
            parts.append(getattr(value, "name", id(value)) if named else _key(value, vars_, buffers))
        return tuple(parts)
    if isinstance(node, Var):
        if vars_ is None:
            return ("var", id(node))
        if id(node) not in vars_:
            vars_[id(node)] = _fresh(vars_)
        return ("var", vars_[id(node)], str(node.dtype))
    if isinstance(node, Buffer):
        # A buffer is identified by its data variable; its shape and dtype matter too.
        if vars_ is None and id(node) in buffers:
            return buffers[id(node)]
        key = ("buffer", _key(node.data, vars_, buffers), str(node.dtype),
               tuple(_key(s, vars_, buffers) for s in node.shape), node.scope)
        buffers[id(node)] = key
        return key
    if isinstance(node, (DType, str, int, float, bool, type(None), enum.Enum)):
        return node if not isinstance(node, DType) else str(node)
    if isinstance(node, (set, frozenset)):
        return ("set", tuple(sorted((_key(x, vars_, buffers) for x in node), key=repr)))
    if isinstance(node, (tuple, list)):
        return tuple(_key(x, vars_, buffers) for x in node)
    if isinstance(node, dict):
        # Keys are names, or Vars (texture layouts keyed by their buffer's data Var).
        return tuple(sorted(((_key(k, vars_, buffers) if isinstance(k, Var) else str(k), _key(v, vars_, buffers))
                             for k, v in node.items()), key=repr))
    if isinstance(node, IRModule):
        return ("IRModule", tuple((name, _key(f, vars_, buffers)) for name, f in sorted(node.items())))
    if isinstance(node, SeqStmt):
        # Nesting of statement sequences carries no meaning: compare the flat list.
        flat = _flat_seq(node)
        return _key(flat[0], vars_, buffers) if len(flat) == 1 else ("SeqStmt", _key(tuple(flat), vars_, buffers))
    if isinstance(node, PrimFunc):
        # Buffers in parameter order (the dict's own order is how it happened to be built).
        return ("PrimFunc", _key(node.params, vars_, buffers), _key(node.body, vars_, buffers),
                tuple(_key(node.buffer_map.get(p), vars_, buffers) for p in node.params),
                _key(node.attrs, vars_, buffers))
    if vars_ is not None and isinstance(node, (For, LetStmt, Let)):
        # A binding defines its variable afresh: one Var object reused by two sibling loops
        # equals two distinct Vars, as in TVM (variables are matched at their definitions).
        var = node.loop_var if isinstance(node, For) else node.var
        vars_[id(var)] = _fresh(vars_)
    if vars_ is not None and isinstance(node, Allocate):
        vars_[id(node.buffer.data)] = _fresh(vars_)
    if isinstance(node, Block):
        return _block_key(node, vars_, buffers)
    if dataclasses.is_dataclass(node):
        parts = [type(node).__name__]
        for f in dataclasses.fields(node):
            if f.name == "thread_binding" and isinstance(node, For) and node.thread_binding is not None:
                # The loop variable is the thread index; the binding's own Var is never read.
                iv = node.thread_binding
                parts.append(("binding", iv.thread_tag, iv.iter_type, _key(iv.dom, vars_, buffers)))
                continue
            if f.name in _NAMED:
                value = getattr(node, f.name)
                parts.append(getattr(value, "name", id(value)))
                continue
            parts.append(_key(getattr(node, f.name), vars_, buffers))
        return tuple(parts)
    if isinstance(node, IterVar):
        return ("itervar", _key(node.var, vars_, buffers))
    return ("object", id(node))


def _block_key(node: Block, vars_: dict | None, buffers: dict) -> tuple:
    """A block defines its iteration variables (with domain and kind) and its scratch buffers."""
    if vars_ is not None:
        for iv in node.iter_vars:
            vars_[id(iv.var)] = _fresh(vars_)
        for b in node.alloc_buffers:
            vars_[id(b.data)] = _fresh(vars_)
    ivs = tuple((_key(iv.var, vars_, buffers), _key(iv.dom, vars_, buffers), iv.iter_type) for iv in node.iter_vars)
    return ("Block", node.name_hint, ivs, _key(node.alloc_buffers, vars_, buffers), _key(node.reads, vars_, buffers),
            _key(node.writes, vars_, buffers), _key(node.init, vars_, buffers), _key(node.body, vars_, buffers),
            _key(node.annotations, vars_, buffers))


def structural_key(node) -> tuple:
    """A hashable key equal for structurally equal trees that share their variables."""
    return _key(node, None, {})


def structural_equal(a, b, map_free_vars: bool = True) -> bool:
    del map_free_vars  # variables are always matched by position of first appearance
    return _key(a, {}, {}) == _key(b, {}, {})


def structural_hash(node, map_free_vars: bool = True) -> int:
    del map_free_vars
    return hash(_key(node, {}, {}))


def assert_structural_equal(a, b, map_free_vars: bool = True) -> None:
    if not structural_equal(a, b, map_free_vars):
        raise AssertionError(f"not structurally equal:\n--- left\n{a}\n--- right\n{b}")


_ = Node
