"""``tvm.ir.register_op_attr``: attach a named attribute to a relay operator.

Used for per-compiler support predicates: ``"target.dnnl"`` on ``nn.conv2d`` is a function of
the call that says whether oneDNN can run it (AnnotateTarget reads it). The ops live in
``relay.op``'s table, above this package, hence the import inside the function.
"""

from __future__ import annotations


def register_op_attr(op_name: str, attr_key: str, value=None, level: int = 10):
    """Set ``attr_key`` of op ``op_name`` to ``value``; without ``value``, a decorator.

    >>> @tvm.ir.register_op_attr("nn.conv2d", "target.dnnl")
    ... def _conv2d(expr):
    ...     return expr.attrs.groups == 1
    """
    from kiln.relay.op import get

    op = get(op_name)

    def setter(v):
        op.extra[attr_key] = v
        return v

    del level  # one value per key; the last registration wins
    return setter if value is None else setter(value)


def get_op_attr(op_name: str, attr_key: str, default=None):
    from kiln.relay.op import get

    return get(op_name).extra.get(attr_key, default)
