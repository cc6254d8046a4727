"""``tvm.ir.register_op_attr``: named attributes of operators, kept here by op name.

Used for per-compiler support predicates: ``"target.dnnl"`` on ``nn.conv2d`` is a function of
the call that says whether oneDNN can run it (AnnotateTarget reads it). The operators are
relay's, above this package; relay reads this table (each ``OpDef.extra`` is the dict kept here
for its name, relay/op/registry.py) and, once loaded, installs the check that a name is one of
its ops. So this package never imports relay.
"""

from __future__ import annotations

from typing import Callable

_ATTRS: dict[str, dict] = {}  # op name -> {attribute key: value}
_check_name: Callable | None = None  # relay's op lookup (raises for an unknown name), once relay is loaded


def attrs_of(op_name: str) -> dict:
    """The attribute dict of op ``op_name`` (created empty): relay's ``OpDef.extra``."""
    return _ATTRS.setdefault(op_name, {})


def set_op_name_check(check: Callable | None) -> None:
    """Install ``check(op_name)``, which raises for a name that is not an operator (relay does)."""
    global _check_name
    _check_name = check


def register_op_attr(op_name: str, attr_key: str, value=None, level: int = 10):
    """Set ``attr_key`` of op ``op_name`` to ``value``; without ``value``, a decorator.

    >>> @tvm.ir.register_op_attr("nn.conv2d", "target.dnnl")
    ... def _conv2d(expr):
    ...     return expr.attrs.groups == 1
    """
    if _check_name is not None:
        _check_name(op_name)
    attrs = attrs_of(op_name)

    def setter(v):
        attrs[attr_key] = v
        return v

    del level  # one value per key; the last registration wins
    return setter if value is None else setter(value)


def get_op_attr(op_name: str, attr_key: str, default=None):
    return _ATTRS.get(op_name, {}).get(attr_key, default)
