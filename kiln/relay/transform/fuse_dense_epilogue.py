"""FuseDenseEpilogue: a dense layer's bias and activation in the dense kernel's epilogue.

An ONNX ``MatMul`` of a (batch, seq, K) activation by a weight imports as
``reshape(dense(reshape(x, (-1, K)), w), (batch, seq, N))``; the bias ``Add`` and the GELU come
after the reshape back to 3-D. FuseOps lets a dense absorb only elementwise consumers, and
only consumers that read it alone, so the reshape and GELU's second use of its input left dense,
bias and GELU as three kernels, each a pass over the (seq, N) activations. Two rewrites fix
that, before FuseOps:

1. **GELU** graphs become ``nn.gelu(x)`` (relay/op/activation.py): a multiply whose operands
   are computed by elementwise arithmetic, erf and tanh from one tensor ``x`` and scalar
   constants (nothing in between used elsewhere), and whose values at probe points equal the
   erf or the tanh GELU. **Hardswish** graphs (``x * clip(x / 6 + 1/2, 0, 1)``, ``x * relu6(x + 3)
   / 6``, ...) become ``nn.hardswish(x)`` the same way, so a conv takes them into its kernel
   (MobileNetV3, DeepLabV3's backbone). Checking values instead of shapes of graphs accepts every way an
   exporter spells it (``x * 0.5 * (1 + erf(x / 1.414))``, ``0.5 * x * (1 + tanh(...))``, ...).
2. **Reshapes sink** below elementwise ops: ``op(reshape(y), c)`` becomes ``reshape(op(y, c'))``
   when ``y`` is computed by a dense (through ops already moved), the reshape keeps the last axis,
   and every other operand varies along the last axis only (a bias); ``reshape(reshape(y))`` is
   one reshape, and a reshape to ``y``'s own shape is ``y``. The reshape that ends up before the
   next dense then cancels with that dense's own.
3. **One reshape per tensor and shape**: each ONNX MatMul reshapes its input for itself, so a
   layer norm feeding Q, K and V was copied three times (three reshape kernels); now once.
"""

from __future__ import annotations

import math

import numpy as np

from ..analysis import only_user, users
from ..expr import Call, Constant, Function, const
from ..op import activation, tensor
from ..op import transform as tf
from ..op.registry import OpDef, OpPattern
from ..visitor import DataflowRewriter, post_order
from .infer_type import infer

# elementwise ops a GELU graph is built of, as float64 numpy functions
_ARITH = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide, "power": np.power,
    "erf": np.vectorize(math.erf, otypes=[np.float64]), "tanh": np.tanh, "sqrt": np.sqrt, "negative": np.negative,
    "maximum": np.maximum, "minimum": np.minimum, "nn.relu": lambda v: np.maximum(v, 0.0),
    "clip": None,  # attrs a_min, a_max: _evaluate
}
_PROBE = np.linspace(-5.0, 5.0, 41)
# hardswish's kinks are at -3 and 3: a wider grid, with points between and beyond them
_HS_PROBE = np.linspace(-8.0, 8.0, 129)
_MAX_CONE = 16


def _shape(e) -> tuple:
    return tuple(int(d) for d in e.checked_type.shape)


def _is_scalar_const(e) -> bool:
    return isinstance(e, Constant) and e.data.size == 1 and (e.data.dtype.kind == "f" or e.data.dtype.name == "bfloat16")


def _cone(root: Call, consumers: dict, stop=None):
    """(leaf x, nodes) of the arithmetic cone ending at root (not entering ``stop``), or None
    unless it has exactly one tensor leaf."""
    nodes, leaves, todo = set(), set(), [root]
    while todo:
        node = todo.pop()
        if node in nodes:
            continue
        if node is not stop and (_arith(node) or _float_cast(node)) and len(nodes) < _MAX_CONE:
            nodes.add(node)
            todo.extend(node.args)
        elif not _is_scalar_const(node):
            leaves.add(node)
    if len(leaves) != 1:
        return None
    (x,) = leaves
    if any(c not in nodes for n in nodes if n is not root for c in consumers.get(n, [])):
        return None  # an inner value is used outside: it must stay
    return x, nodes


def _candidates(root: Call, consumers: dict):
    """Every (x, nodes) cone of root: x is the cone's only tensor leaf when the walk stops there."""
    whole = _cone(root, consumers)
    if whole is not None:
        yield whole
    seen, todo = set(), [root]
    while todo and len(seen) < _MAX_CONE:
        node = todo.pop()
        if node in seen or not (_arith(node) or _float_cast(node)):
            continue
        seen.add(node)
        for a in node.args:
            if isinstance(a, Call) and a is not root:
                found = _cone(root, consumers, stop=a)
                if found is not None:
                    yield found
                todo.append(a)


def _evaluate(node, x, memo: dict, probe=_PROBE):
    if node is x:
        return probe
    if node in memo:
        return memo[node]
    if isinstance(node, Constant):
        return float(node.data.reshape(()))
    args = [_evaluate(a, x, memo, probe) for a in node.args]
    if _float_cast(node):
        value = args[0]  # values are compared in float64: the rounding is the cast's, not the graph's
    elif node.op.name == "clip":
        value = np.clip(args[0], node.attrs.a_min, node.attrs.a_max)
    else:
        value = _ARITH[node.op.name](*args)
    memo[node] = value
    return value


def gelu_form(root, consumers: dict):
    """(x, "none" | "tanh") when root computes GELU of x (module docstring), else None."""
    if not (isinstance(root, Call) and root.op is tensor.MULTIPLY):
        return None
    for x, nodes in _candidates(root, consumers):
        if len(nodes) < 4 or not str(getattr(x.checked_type, "dtype", "")).startswith(("float", "bfloat")):
            continue
        with np.errstate(all="ignore"):
            values = _evaluate(root, x, {})
        off = {}  # each form's largest relative distance from the probe values
        for form in activation.APPROXIMATIONS:
            want = activation.gelu_reference(_PROBE, form)
            if np.shape(values) == want.shape:
                off[form] = float(np.max(np.abs(values - want) / (1.0 + np.abs(want))))
        if off and min(off.values()) <= _tolerance(nodes):  # NaN compares False: not GELU
            return x, min(off, key=off.get)
    return None


def hardswish_form(root, consumers: dict):
    """x when root computes ``x * clip(x / 6 + 1/2, 0, 1)`` (ONNX HardSwish, x * HardSigmoid(x),
    x * relu6(x + 3) / 6, ...), by values at probe points as gelu_form; else None."""
    if not (isinstance(root, Call) and root.op in (tensor.MULTIPLY, tensor.DIVIDE)):
        return None
    want = activation.hardswish_reference(_HS_PROBE)
    for x, nodes in _candidates(root, consumers):
        if len(nodes) < 3 or not str(getattr(x.checked_type, "dtype", "")).startswith("float"):
            continue
        with np.errstate(all="ignore"):
            values = _evaluate(root, x, {}, _HS_PROBE)
        if np.shape(values) == want.shape and np.all(np.abs(values - want) <= 1e-6 * (1.0 + np.abs(want))):
            return x
    return None


def _tolerance(nodes) -> float:
    """How far a cone's probe values may be from GELU's: 1e-6 in float32; 1e-4 where its constants
    are float16 (ToMixedPrecision rounds sqrt(2) to 1.4140625: 3e-5 off), below the erf and tanh
    forms' 5e-4 difference; 2e-3 in bfloat16, where both forms are within rounding."""
    widths = {a.data.dtype.name for n in nodes for a in n.args if isinstance(a, Constant)}
    if "bfloat16" in widths:  # 8 bits: sqrt(2/pi) is 1.3e-3 off; the closer form is taken
        return 2e-3
    return 1e-4 if "float16" in widths else 1e-6


def _arith(node) -> bool:
    return isinstance(node, Call) and getattr(node.op, "name", None) in _ARITH


def _float_cast(node) -> bool:
    """A cast from one float dtype to another: ToMixedPrecision's casts around erf and tanh
    (float32 ops) in a float16 GELU. The value probes see through it."""
    return isinstance(node, Call) and node.op is tf.CAST and \
        str(node.checked_type.dtype).startswith(("float", "bfloat")) and \
        str(node.args[0].checked_type.dtype).startswith(("float", "bfloat"))


def _gelu_call(root, x, new_x, form: str):
    """nn.gelu of x; where the matched graph cast to a wider float for erf/tanh (ToMixedPrecision),
    the GELU computes in that dtype between casts, so the fused kernel rounds as the graph did at
    most once more, not at every step in float16."""
    wide, seen, todo = False, set(), [root]
    while todo and not wide:  # the cone between root and x (gelu_form checked it is small)
        node = todo.pop()
        if node is x or node in seen or not isinstance(node, Call):
            continue
        seen.add(node)
        wide = _float_cast(node) and str(node.attrs.dtype) == "float32"
        todo.extend(node.args)
    have, want = str(x.checked_type.dtype), str(root.checked_type.dtype)
    if not wide and have == want:
        return activation.gelu(new_x, form)
    out = activation.gelu(new_x if have == "float32" else tf.cast(new_x, "float32"), form)
    return out if want == "float32" else tf.cast(out, want)


class _Gelu(DataflowRewriter):
    """GELU graphs as nn.gelu, hardswish graphs as nn.hardswish."""
    def visit_Call(self, call):
        found = gelu_form(call, self.consumers)
        if found is not None:
            return _gelu_call(call, found[0], self.visit(found[0]), found[1])
        x = hardswish_form(call, self.consumers)
        if x is not None:
            return activation.hardswish(self.visit(x))
        return super().visit_Call(call)


def _from_dense(e, depth: int = 0) -> bool:
    """e is a dense, or elementwise ops (a bias, an activation) over one."""
    if not isinstance(e, Call) or depth > 16:
        return False
    if getattr(e.op, "name", None) == "nn.dense":
        return True
    pattern = getattr(e.op, "pattern", None)
    return pattern is not None and pattern <= OpPattern.BROADCAST and \
        any(_from_dense(a, depth + 1) for a in e.args if isinstance(a, Call))


def _lifted(arg, n: int):
    """arg as an operand over (rows, n) instead of the reshaped shape: a scalar, or a tensor that
    varies along the last axis only, reshaped to (n,) / (1,). None when it varies elsewhere."""
    shape = _shape(arg)
    if not shape:
        return arg
    if any(d != 1 for d in shape[:-1]) or shape[-1] not in (1, n):
        return None
    if isinstance(arg, Constant):
        return const(np.ascontiguousarray(arg.data.reshape(shape[-1:])))
    return tf.reshape(arg, shape[-1:])


class _Sink(DataflowRewriter):
    def __init__(self, consumers):
        super().__init__(consumers)
        self.changed = False

    def visit_Call(self, call):
        new = self._reshape_of_reshape(call) or self._sink(call)
        if new is None:
            return super().visit_Call(call)
        self.changed = True
        return new

    def _reshape_of_reshape(self, call):
        if call.op is not tf.RESHAPE:
            return None
        inner = call.args[0]
        if _shape(inner) == _shape(call):
            return self.visit(inner)
        if isinstance(inner, Call) and inner.op is tf.RESHAPE and only_user(inner, self.consumers, call):
            source = inner.args[0]
            if _shape(source) == _shape(call):
                return self.visit(source)
            return tf.reshape(self.visit(source), _shape(call))
        return None

    def _sink(self, call):
        pattern = getattr(call.op, "pattern", None)
        if pattern is None or pattern > OpPattern.BROADCAST or not isinstance(call.op, OpDef):
            return None
        moved = [a for a in call.args if isinstance(a, Call) and a.op is tf.RESHAPE]
        if not moved:
            return None
        source = moved[0].args[0]
        if len(_shape(source)) != 2 or _shape(moved[0]) != _shape(call) or _shape(source)[-1] != _shape(call)[-1]:
            return None
        if not _from_dense(source) or any(self.consumers.get(r, []) != [call] for r in moved):
            return None
        n = _shape(source)[-1]
        args = []
        for a in call.args:
            if isinstance(a, Call) and a.op is tf.RESHAPE and _shape(a.args[0]) == _shape(source):
                args.append(self.visit(a.args[0]))
                continue
            lifted = _lifted(a, n)
            if lifted is None:
                return None
            args.append(self.visit(lifted) if not isinstance(lifted, Constant) else lifted)
        return tf.reshape(Call(call.op, args, call.attrs), _shape(call))


class _OneReshape(DataflowRewriter):
    """Reshapes of one tensor to one shape become one node (rewrite 3 of the module docstring)."""

    def __init__(self, consumers):
        super().__init__(consumers)
        self.seen: dict = {}

    def visit_Call(self, call):
        new = super().visit_Call(call)
        if isinstance(new, Call) and new.op is tf.RESHAPE:
            return self.seen.setdefault((id(new.args[0]), _shape(call)), new)  # seen keeps args alive
        return new


def fuse_dense_epilogue(func: Function) -> Function:
    """The rewrites of the module docstring on ``func`` (typed); returns it typed."""
    func = infer(_Gelu(users(func.body)).visit(func))
    if not any(isinstance(n, Call) and getattr(n.op, "name", None) == "nn.dense" for n in post_order(func.body)):
        return func
    func = infer(_OneReshape(users(func.body)).visit(func))
    for _ in range(32):  # each round moves every reshape by one op
        sink = _Sink(users(func.body))
        func = infer(sink.visit(func))
        if not sink.changed:
            break
    return func
