"""``compiler_begin`` / ``compiler_end``: the marks AnnotateTarget leaves around offloadable ops.

``compiler_end(op(compiler_begin(x, "dnnl")), "dnnl")`` says ``op`` runs in the external
compiler "dnnl", reading ``x`` from outside and giving its value back outside. Both are
identities; PartitionGraph removes them. They are not in ``relay.op``'s table: only the
partitioning passes make them.
"""

from __future__ import annotations

from ..registry import REQUIRED, OpDef, OpPattern


def _identity(ctx):
    return ctx.args[0]


def _reference(attrs, x):
    return x


compiler_begin_op = OpDef("annotation.compiler_begin", ("data",), {"compiler": REQUIRED}, _identity,
                          OpPattern.OPAQUE, _reference, doc="start of an external compiler's region")
compiler_end_op = OpDef("annotation.compiler_end", ("data",), {"compiler": REQUIRED}, _identity,
                        OpPattern.OPAQUE, _reference, doc="end of an external compiler's region")


def compiler_begin(data, compiler: str):
    return compiler_begin_op(data, compiler=compiler)


def compiler_end(data, compiler: str):
    return compiler_end_op(data, compiler=compiler)


def is_begin(node) -> bool:
    return getattr(node, "op", None) is compiler_begin_op


def is_end(node) -> bool:
    return getattr(node, "op", None) is compiler_end_op
