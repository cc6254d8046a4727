"""A numpy executor for relay: the oracle for tests and the evaluator behind FoldConstant.

It runs each op's ``reference`` implementation in dataflow order. It is meant to be obviously
right, not fast; compiled modules come from ``relay.build``.

>>> out = reference.run(mod, {"data": x}, params)
"""

from __future__ import annotations

import numpy as np

from kiln.errors import KilnError

from .expr import Call, Constant, Function, If, Let, Tuple, TupleGetItem, Var
from .op.registry import OpDef
from .ty import TensorType, np_dtype
from .visitor import _walk, children


def _kids(node):
    if isinstance(node, Let):
        return [node.value]
    if isinstance(node, If):
        return [node.cond]
    if isinstance(node, Call) and isinstance(node.op, Function):
        return list(node.args)
    return children(node)


class _Interpreter:
    def __init__(self, env: dict):
        self.env = env

    def eval(self, expr):
        memo: dict = {}
        _walk(expr, memo, lambda n: self.step(n, memo), _kids)
        return memo[expr]

    def step(self, node, memo):
        if isinstance(node, Var):
            if node not in self.env:
                raise KilnError(f"reference executor: no value for input %{node.name_hint}")
            return self.env[node]
        if isinstance(node, Constant):
            return node.data
        if isinstance(node, Tuple):
            return tuple(memo[f] for f in node.fields)
        if isinstance(node, TupleGetItem):
            return memo[node.tuple_value][node.index]
        if isinstance(node, Function):
            return node
        if isinstance(node, Let):
            self.env[node.var] = memo[node.value]
            return self.eval(node.body)
        if isinstance(node, If):
            return self.eval(node.true_branch if bool(memo[node.cond]) else node.false_branch)
        if isinstance(node, Call):
            args = [memo[a] for a in node.args]
            if isinstance(node.op, OpDef):
                return node.op.reference(node.attrs, *args)
            func = node.op if isinstance(node.op, Function) else memo[node.op]
            return call_function(func, args)
        raise KilnError(f"reference executor: cannot evaluate {type(node).__name__}")


def call_function(func: Function, args: list):
    """Evaluate ``func`` on numpy ``args``."""
    if len(args) != len(func.params):
        raise KilnError(f"function takes {len(func.params)} arguments, got {len(args)}")
    return _Interpreter(dict(zip(func.params, args))).eval(func.body)


def evaluate(expr, env: dict | None = None):
    """Evaluate an expression whose free Vars are bound in ``env`` ({Var: ndarray})."""
    return _Interpreter(dict(env or {})).eval(expr)


def _to_numpy(value, param: Var):
    if hasattr(value, "numpy") and not isinstance(value, np.ndarray):
        value = value.numpy()
    arr = np.asarray(value)
    t = param.type_annotation
    if isinstance(t, TensorType):
        if arr.shape != t.shape:
            raise KilnError(f"input {param.name_hint!r} has shape {arr.shape}; the model expects {t.shape}")
        arr = arr.astype(np_dtype(t.dtype), copy=False)
    return arr


def run(mod, inputs: dict | None = None, params: dict | None = None, func_name: str = "main"):
    """Run ``mod[func_name]`` with inputs and params given by parameter name. Returns numpy
    array(s): a tuple when the function returns a tuple."""
    func = mod[func_name] if not isinstance(mod, Function) else mod
    values = {**(params or {}), **(inputs or {})}
    missing = [p.name_hint for p in func.params if p.name_hint not in values]
    if missing:
        raise KilnError(f"reference executor: missing values for inputs {missing}")
    return call_function(func, [_to_numpy(values[p.name_hint], p) for p in func.params])


class _Executor:
    """What ``relay.create_executor("debug", mod)`` returns: ``evaluate()(*inputs, **params)``."""

    def __init__(self, mod):
        self.mod = mod

    def evaluate(self, expr=None):
        func = self.mod["main"] if expr is None else expr
        if not isinstance(func, Function):
            from .analysis import as_function
            func = as_function(func)

        def run_it(*args, **kwargs):
            values = dict(zip([p.name_hint for p in func.params], args))
            values.update(kwargs)
            out = run(func, values)
            return _wrap(out)

        return run_it


def _wrap(out):
    try:
        from kiln import nd
    except ImportError:  # a device without the runtime still gets numpy
        return out
    if isinstance(out, tuple):
        return tuple(_wrap(o) for o in out)
    return nd.array(np.asarray(out).copy(order="C"))


def create_executor(kind: str = "debug", mod=None, device=None, target="llvm", params=None):
    """An executor over the numpy reference (kinds "debug" and "reference").

    Compiled executors ("graph", "vm") need ``relay.build``; use ``graph_executor`` for those.
    """
    if kind not in ("debug", "reference"):
        raise KilnError(f"create_executor: kind {kind!r} needs the compiled path; use relay.build and "
                        "kiln.contrib.graph_executor.GraphModule, or kind='debug' for the numpy reference")
    from kiln.ir.module import IRModule
    if mod is None:
        mod = IRModule()
    if params:
        from .transform.bind import bind_params_by_name
        mod = IRModule({"main": bind_params_by_name(mod["main"], params)})
    return _Executor(mod)
