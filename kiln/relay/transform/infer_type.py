"""Type inference: give every node its TensorType/TupleType/FuncType, or fail naming the node.

Types are cached on the nodes (``expr.checked_type``), so inferring a graph that grew by a few
nodes only types the new ones; the ONNX importer relies on that to ask shapes as it goes.
Every Var must carry a type annotation, except let-bound vars, which take their value's type.
"""

from __future__ import annotations

from kiln.errors import ShapeError

from ..expr import Call, Constant, Function, If, Let, RelayExpr, Tuple, TupleGetItem, Var, type_of_value
from ..op.registry import OpDef, RelCtx
from ..ty import FuncType, TensorType, TupleType
from ..visitor import _walk, children


def _typed(node) -> bool:
    return "_checked_type" in node.__dict__


def _kids(node):
    if isinstance(node, Let):
        return [node.value]
    return [c for c in children(node) if not _typed(c)]


def _brief(e) -> str:
    if isinstance(e, Var):
        return "%" + e.name_hint
    t = e.__dict__.get("_checked_type")
    if isinstance(e, Call) and isinstance(e.op, OpDef):
        return f"{e.op.name}(...): {t}" if t is not None else f"{e.op.name}(...)"
    return str(t) if t is not None else type(e).__name__


def _where(call: Call) -> str:
    return f"{getattr(call.op, 'name', 'fn')}({', '.join(_brief(a) for a in call.args)})"


def _infer_node(node):
    if isinstance(node, Var):
        if node.type_annotation is None:
            raise ShapeError(f"variable %{node.name_hint} has no type; create it with relay.var(name, shape=, dtype=)")
        return node.type_annotation
    if isinstance(node, Constant):
        return type_of_value(node.data)
    if isinstance(node, Tuple):
        return TupleType([f.checked_type for f in node.fields])
    if isinstance(node, TupleGetItem):
        t = node.tuple_value.checked_type
        if not isinstance(t, TupleType) or not 0 <= node.index < len(t.fields):
            raise ShapeError(f"TupleGetItem: cannot take field {node.index} of {t}")
        return t.fields[node.index]
    if isinstance(node, Call):
        return _infer_call(node)
    if isinstance(node, Function):
        infer(node.body)
        for p in node.params:
            infer(p)
        ret = node.body.checked_type
        if node.ret_type is not None and node.ret_type != ret:
            raise ShapeError(f"function declares return type {node.ret_type} but its body has type {ret}")
        return FuncType([p.checked_type for p in node.params], ret)
    if isinstance(node, Let):
        vt = node.value.checked_type
        if node.var.type_annotation is not None and node.var.type_annotation != vt:
            raise ShapeError(f"let %{node.var.name_hint}: annotated {node.var.type_annotation} but bound to {vt}")
        node.var._set_type(vt)
        infer(node.body)
        return node.body.checked_type
    if isinstance(node, If):
        c = node.cond.checked_type
        if not (isinstance(c, TensorType) and c.shape == () and c.dtype == "bool"):
            raise ShapeError(f"if: condition must be a scalar bool tensor, got {c}")
        t, f = node.true_branch.checked_type, node.false_branch.checked_type
        if t != f:
            raise ShapeError(f"if: branches have different types {t} and {f}")
        return t
    raise ShapeError(f"cannot infer the type of {type(node).__name__}")


def _infer_call(call: Call):
    arg_types = [a.checked_type for a in call.args]
    if isinstance(call.op, OpDef):
        return call.op.type_rel(RelCtx(call.op, arg_types, call.attrs, _where(call)))
    ft = call.op.checked_type
    if not isinstance(ft, FuncType):
        raise ShapeError(f"call of a non-function of type {ft}")
    if len(ft.arg_types) != len(arg_types) or any(a != b for a, b in zip(ft.arg_types, arg_types)):
        names = [p.name_hint for p in call.op.params] if isinstance(call.op, Function) else []
        raise ShapeError(f"function {names} expects arguments {[str(t) for t in ft.arg_types]}, "
                         f"got {[str(t) for t in arg_types]}")
    return ft.ret_type


def infer(expr: RelayExpr) -> RelayExpr:
    """Type ``expr`` and everything under it; returns ``expr`` (now with ``checked_type``)."""
    if _typed(expr):
        return expr
    memo: dict = {}

    def dispatch(node):
        if not _typed(node):
            node._set_type(_infer_node(node))
        return True

    _walk(expr, memo, dispatch, _kids)
    return expr


def infer_type(mod):
    """Type every relay Function of ``mod`` in place; returns ``mod``."""
    for _, func in mod.items():
        if isinstance(func, Function):
            infer(func)
    return mod
