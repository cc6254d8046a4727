"""``relay.dataflow_pattern``: patterns over the dataflow graph, for MergeComposite.

>>> conv = is_op("nn.conv2d")(wildcard(), is_constant())
>>> pat = conv.optional(lambda x: is_op("nn.relu")(x))      # conv, or relu(conv)
>>> pat.match(expr)                                        # True / False

A pattern is an immutable tree. ``match`` binds every pattern node to one expression: a
pattern node used twice must match the same expression both times (so a diamond pattern only
matches a diamond). Alternatives (``|``, ``optional``) are tried left to right.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..expr import Call, Constant, Function, RelayExpr, Tuple, TupleGetItem, Var


class DFPattern:
    """Base of patterns; ``p(x, y)`` is a call pattern with ``p`` as the operator."""

    def __call__(self, *args):
        return CallPattern(self, tuple(_as_pattern(a) for a in args))

    def __or__(self, other):
        return AltPattern(self, _as_pattern(other))

    def has_attr(self, attrs: dict):
        return AttrPattern(self, dict(attrs))

    def has_dtype(self, dtype: str):
        return TypePattern(self, None, str(dtype))

    def has_shape(self, shape):
        return TypePattern(self, tuple(int(d) for d in shape), None)

    def optional(self, fn: Callable):
        """``self`` alone, or ``fn(self)`` (e.g. an activation after it)."""
        return AltPattern(self, fn(self))

    def match(self, expr) -> bool:
        return match(self, expr) is not None


class WildcardPattern(DFPattern):
    def __repr__(self):
        return "*"


class ConstantPattern(DFPattern):
    def __repr__(self):
        return "const"


class VarPattern(DFPattern):
    def __init__(self, name: str = ""):
        self.name = name


class OpPattern(DFPattern):
    """Matches the operator of a call: a primitive op by name."""

    def __init__(self, name: str):
        from ..op import get

        get(name)  # a typo in a pattern table fails here, not as a pattern that never matches
        self.name = name

    def __repr__(self):
        return self.name


class CallPattern(DFPattern):
    def __init__(self, op: DFPattern, args: tuple):
        self.op, self.args = op, args

    def __repr__(self):
        return f"{self.op}({', '.join(map(repr, self.args))})"


class AltPattern(DFPattern):
    def __init__(self, left: DFPattern, right: DFPattern):
        self.left, self.right = left, right

    def __repr__(self):
        return f"({self.left} | {self.right})"


class AttrPattern(DFPattern):
    def __init__(self, pattern: DFPattern, attrs: dict):
        self.pattern, self.attrs = pattern, attrs


class TypePattern(DFPattern):
    def __init__(self, pattern: DFPattern, shape, dtype):
        self.pattern, self.shape, self.dtype = pattern, shape, dtype


class TupleGetItemPattern(DFPattern):
    def __init__(self, tuple_pattern: DFPattern, index: int | None = None):
        self.tuple, self.index = tuple_pattern, index


class TuplePattern(DFPattern):
    def __init__(self, fields):
        self.fields = tuple(_as_pattern(f) for f in fields)


def is_op(name: str) -> OpPattern:
    return OpPattern(name)


def wildcard() -> WildcardPattern:
    return WildcardPattern()


def is_constant() -> ConstantPattern:
    return ConstantPattern()


def is_var(name: str = "") -> VarPattern:
    return VarPattern(name)


def is_tuple_get_item(pattern, index: int | None = None) -> TupleGetItemPattern:
    return TupleGetItemPattern(_as_pattern(pattern), index)


def is_tuple(fields) -> TuplePattern:
    return TuplePattern(fields)


def _as_pattern(x) -> DFPattern:
    if isinstance(x, DFPattern):
        return x
    raise TypeError(f"dataflow_pattern: expected a pattern, got {type(x).__name__}; "
                    "use wildcard(), is_constant() or is_op(name)(...)")


def match(pattern: DFPattern, expr) -> dict | None:
    """The binding ``{pattern node: expression}`` of a match of ``pattern`` at ``expr``, or None."""
    for env in _match(pattern, expr, {}):
        return env
    return None


def _match(p, e, env):
    """Yield every extension of ``env`` under which ``p`` matches ``e`` (backtracking)."""
    bound = env.get(p)
    if bound is not None:
        if bound is e:
            yield env
        return
    if isinstance(p, AltPattern):
        yield from _match(p.left, e, env)
        yield from _match(p.right, e, env)
        return
    for out in _match_node(p, e, env):
        yield {**out, p: e}


def _match_node(p, e, env):
    if isinstance(p, WildcardPattern):
        yield env
    elif isinstance(p, ConstantPattern):
        if isinstance(e, Constant):
            yield env
    elif isinstance(p, VarPattern):
        if isinstance(e, Var) and (not p.name or p.name == e.name_hint):
            yield env
    elif isinstance(p, CallPattern):
        if not isinstance(e, Call) or len(e.args) != len(p.args):
            return
        if isinstance(p.op, OpPattern):
            if getattr(e.op, "name", None) != p.op.name or isinstance(e.op, RelayExpr):
                return
            heads = [env]
        else:
            heads = list(_match(p.op, e.op, env))
        for h in heads:
            yield from _match_args(p.args, e.args, h)
    elif isinstance(p, AttrPattern):
        for out in _match(p.pattern, e, env):
            attrs = e.attrs if isinstance(e, (Call, Function)) else {}
            if all(k in attrs and _same(attrs[k], v) for k, v in p.attrs.items()):
                yield out
    elif isinstance(p, TypePattern):
        for out in _match(p.pattern, e, env):
            t = e.__dict__.get("_checked_type")
            if t is None or not hasattr(t, "shape"):
                continue
            if (p.shape is None or tuple(t.shape) == p.shape) and (p.dtype is None or t.dtype == p.dtype):
                yield out
    elif isinstance(p, TupleGetItemPattern):
        if isinstance(e, TupleGetItem) and (p.index is None or p.index == e.index):
            yield from _match(p.tuple, e.tuple_value, env)
    elif isinstance(p, TuplePattern):
        if isinstance(e, Tuple) and len(e.fields) == len(p.fields):
            yield from _match_args(p.fields, e.fields, env)
    elif isinstance(p, OpPattern):
        if getattr(e, "name", None) == p.name:
            yield env
    else:
        raise TypeError(f"dataflow_pattern: unknown pattern {type(p).__name__}")


def _match_args(pats, exprs, env):
    if not pats:
        yield env
        return
    for h in _match(pats[0], exprs[0], env):
        yield from _match_args(pats[1:], exprs[1:], h)


def _same(a, b) -> bool:
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(a, b)
    return a == b or str(a) == str(b)


__all__ = ["DFPattern", "is_op", "wildcard", "is_constant", "is_var", "is_tuple", "is_tuple_get_item",
           "match", "WildcardPattern", "ConstantPattern", "CallPattern", "AltPattern", "OpPattern"]
