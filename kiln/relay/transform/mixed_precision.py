"""Run a float32 graph in float16 or bfloat16 where that is safe: ``ToMixedPrecision("float16")``,
``ToMixedPrecision("bfloat16")``.

Every op call falls in one of three lists:

- ALWAYS: the heavy ops (conv2d, dense, batch_matmul, conv2d_transpose). Their floating
  inputs are cast to float16 (constant weights are converted once, at compile time) and they
  accumulate in the *accumulation dtype*: float16, or float32 with a cast to float16 right
  after the op, so the next op still reads half the bytes.
- FOLLOW: ops whose error does not grow much in float16 (elementwise arithmetic, relu, pooling,
  reshapes, concatenation, batch norm at inference). They run in float16 when one of their
  floating inputs already is, else they stay float32; this keeps the float16 regions as long
  as possible without converting ops that only ever see float32 data.
- NEVER: ops that overflow or lose too much in float16 (softmax, exp, log, sums, means, layer
  norm, variance, ...). Their inputs are cast back to float32. Ops in no list count as NEVER.

bfloat16 keeps float32's range with 8 significant bits (float16: 11): its heavy ops accumulate
in float32 by default (``accumulation_dtype="bfloat16"`` is refused: a sum of K bfloat16-rounded
terms loses about log2(K) of those 8 bits), and what follows them rounds to bfloat16 once per
op. Constants are rounded to bfloat16 (nearest even) at compile time with ml_dtypes, which the
onnx package brings. The runtime holds bfloat16 tensors as their bits, uint16 arrays.

Graph inputs keep their dtype (the cast is inside the graph) and every output whose dtype
changed is cast back, so the compiled model's interface is the float32 one. The lists are
module constants; ``ToMixedPrecision(..., overrides={"nn.softmax": "follow"})`` moves ops
between them for one run.
"""

from __future__ import annotations

import numpy as np

from kiln.errors import CompileError

from ..expr import Call, Constant, Function, Tuple, TupleGetItem, const
from ..op import get as get_op
from ..op.registry import OpDef
from ..ty import TensorType, TupleType
from ..visitor import ExprMutator
from .infer_type import infer

ALWAYS, FOLLOW, NEVER = "always", "follow", "never"

ALWAYS_OPS = ("nn.conv2d", "nn.conv2d_transpose", "nn.dense", "nn.batch_matmul")
FOLLOW_OPS = (
    "add", "subtract", "multiply", "divide", "maximum", "minimum", "negative", "abs", "clip",
    "nn.relu", "nn.leaky_relu", "nn.prelu", "nn.bias_add", "nn.batch_norm", "nn.dropout",
    "nn.max_pool2d", "nn.avg_pool2d", "nn.global_max_pool2d", "nn.global_avg_pool2d",
    "nn.adaptive_avg_pool2d", "nn.pad", "nn.batch_flatten", "reshape", "transpose", "squeeze",
    "expand_dims", "concatenate", "split", "strided_slice", "take", "gather", "tile", "reverse",
    "broadcast_to", "layout_transform", "copy", "max", "min", "where", "image.resize2d",
    "floor", "ceil", "round", "sign", "tanh", "sigmoid",
)
NEVER_OPS = (
    "nn.softmax", "nn.log_softmax", "exp", "log", "sqrt", "rsqrt", "power", "erf", "sum", "mean",
    "prod", "variance", "nn.layer_norm", "reciprocal", "sin", "cos",
)
SUPPORTED_TYPES = ("float16", "bfloat16")


def default_lists() -> dict:
    """``{op_name: "always" | "follow" | "never"}`` for every op in the built-in lists."""
    table = {name: NEVER for name in NEVER_OPS}
    table.update({name: FOLLOW for name in FOLLOW_OPS})
    table.update({name: ALWAYS for name in ALWAYS_OPS})
    return table


def _check_overrides(overrides: dict) -> dict:
    out = {}
    for name, kind in (overrides or {}).items():
        try:
            get_op(name)
        except Exception:
            raise CompileError(f"ToMixedPrecision: unknown op {name!r} in the overrides; see "
                               "relay.op.list_ops() for the names") from None
        if kind not in (ALWAYS, FOLLOW, NEVER):
            raise CompileError(f"ToMixedPrecision: op {name!r} is put in list {kind!r}; use "
                               f"'{ALWAYS}', '{FOLLOW}' or '{NEVER}'")
        out[name] = kind
    return out


def _dtype(expr) -> str | None:
    t = infer(expr).checked_type
    return t.dtype if isinstance(t, TensorType) else None


def _is_float32(expr) -> bool:
    return _dtype(expr) == "float32"


class _Convert(ExprMutator):
    def __init__(self, low: str, acc: str, lists: dict):
        super().__init__()
        self.low, self.acc, self.lists = low, acc, lists

    def visit_Function(self, f):
        # Fused primitive functions (if any) are left alone: they are compiled as they are.
        return f if f.attrs.get("Primitive") else super().visit_Function(f)

    # -- casts -------------------------------------------------------------------------------
    def _to(self, expr, dtype: str, src: str):
        """``expr`` (a tensor of float dtype ``src``) converted to ``dtype``; constants fold now."""
        if src == dtype:
            return expr
        if isinstance(expr, Constant):
            return const(np.asarray(expr.data).astype(dtype))
        if isinstance(expr, Call) and expr.op is get_op("cast") and _dtype(expr.args[0]) == dtype:
            return expr.args[0]  # cast(cast(x, low), f32) -> x: no round trip through float16
        return Call(get_op("cast"), [expr], get_op("cast").make_attrs({"dtype": dtype}))

    def _convert_arg(self, arg, to_low: bool):
        """Cast the floating tensors of ``arg`` (a tensor or a Tuple) between float32 and low."""
        src, dst = ("float32", self.low) if to_low else (self.low, "float32")
        if isinstance(arg, Tuple):
            fields = [self._convert_arg(f, to_low) for f in arg.fields]
            return arg if all(a is b for a, b in zip(fields, arg.fields)) else Tuple(fields)
        return self._to(arg, dst, src) if _dtype(arg) == src else arg

    def _has_low(self, arg) -> bool:
        if isinstance(arg, Tuple):
            return any(self._has_low(f) for f in arg.fields)
        return _dtype(arg) == self.low

    # -- rewriting -----------------------------------------------------------------------------
    def visit_Call(self, call):
        new = super().visit_Call(call)
        if not isinstance(new.op, OpDef) or new.op.name == "cast":
            return new
        kind = self.lists.get(new.op.name, NEVER)
        floating = [a for a in new.args if self._has_low(a) or _floatish(a)]
        if not floating:
            return new
        if kind == ALWAYS:
            return self._always(new)
        if kind == FOLLOW and any(self._has_low(a) for a in new.args):
            args = [self._convert_arg(a, to_low=True) for a in new.args]
            return _rebuild(new, args)
        if kind in (FOLLOW, NEVER):
            args = [self._convert_arg(a, to_low=False) for a in new.args]
            return _rebuild(new, args)
        return new

    def _always(self, call):
        args = [self._convert_arg(a, to_low=True) for a in call.args]
        if "out_dtype" not in call.attrs:
            return _rebuild(call, args)
        out = Call(call.op, args, call.attrs.with_changes(out_dtype=self.acc), call.type_args)
        return self._to(out, self.low, self.acc)


def _floatish(arg) -> bool:
    if isinstance(arg, Tuple):
        return any(_floatish(f) for f in arg.fields)
    return _is_float32(arg)


def _rebuild(call, args):
    if all(a is b for a, b in zip(args, call.args)):
        return call
    return Call(call.op, args, call.attrs, call.type_args)


def _restore_outputs(body, original_type, low: str):
    """Cast each output whose dtype the rewrite changed back to its original dtype."""
    new_type = infer(body).checked_type
    if isinstance(original_type, TupleType):
        fields = [TupleGetItem(body, i) if not isinstance(body, Tuple) else body.fields[i]
                  for i in range(len(original_type.fields))]
        fixed = [_restore_outputs(f, t, low) for f, t in zip(fields, original_type.fields)]
        if isinstance(body, Tuple) and all(a is b for a, b in zip(fixed, body.fields)):
            return body
        if not isinstance(body, Tuple) and new_type == original_type:
            return body
        return Tuple(fixed)
    if isinstance(new_type, TensorType) and new_type.dtype != original_type.dtype:
        return Call(get_op("cast"), [body], get_op("cast").make_attrs({"dtype": original_type.dtype}))
    return body


def _need_ml_dtypes() -> None:
    try:
        import ml_dtypes  # noqa: F401
    except ImportError:
        raise CompileError("ToMixedPrecision('bfloat16') rounds the weights with numpy's bfloat16 from the "
                           "ml_dtypes package; install it (pip install ml_dtypes)") from None


def to_mixed_precision(func: Function, mixed_precision_type: str = "float16",
                       accumulation_dtype: str | None = None, overrides: dict | None = None) -> Function:
    """``func`` with its ALWAYS/FOLLOW ops in ``mixed_precision_type`` (see the module doc)."""
    if mixed_precision_type not in SUPPORTED_TYPES:
        raise CompileError(f"ToMixedPrecision: mixed_precision_type {mixed_precision_type!r} is not supported; "
                           f"use one of {', '.join(SUPPORTED_TYPES)}")
    acc = accumulation_dtype or ("float32" if mixed_precision_type == "bfloat16" else mixed_precision_type)
    if mixed_precision_type == "bfloat16":
        _need_ml_dtypes()
        if acc != "float32":
            raise CompileError(f"ToMixedPrecision: accumulation dtype {acc!r} with bfloat16: bfloat16 sums lose "
                               "too much (8 significant bits); use accumulation_dtype='float32' (the default)")
    if acc not in (mixed_precision_type, "float32"):
        raise CompileError(f"ToMixedPrecision: accumulation dtype {acc!r} must be {mixed_precision_type!r} "
                           "or 'float32'")
    lists = {**default_lists(), **_check_overrides(overrides)}
    func = infer(func)
    original = func.body.checked_type
    converted = _Convert(mixed_precision_type, acc, lists).visit(func)
    body = _restore_outputs(converted.body, original, mixed_precision_type)
    return infer(Function(converted.params, body, None, converted.type_params, converted.attrs))
