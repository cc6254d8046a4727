"""FakeQuantizationToInteger: QDQ graphs (``dequantize -> float ops -> quantize``) become qnn ops.

A QDQ model (onnxruntime's quantizer, PyTorch's exporter...) stores int8 tensors but computes in
float between ``qnn.dequantize`` and ``qnn.quantize``. For each ``qnn.quantize`` this pass walks up
through the float ops it knows how to compute on integers until every path ends at a
``qnn.dequantize``; that region is then rewritten on the integer tensors (``nn.conv2d`` ->
``qnn.conv2d`` on int8 with an int32 result, ``nn.bias_add`` of a dequantized int32 bias -> an
int32 add, ``add`` -> ``qnn.add``, max pooling and reshapes on the int8 values, ...) and the
quantize becomes a ``qnn.requantize``. A conv/dense/matmul of dequantized tensors whose result
is not quantized again (the classifier's Gemm at a graph output) is computed the same way and
dequantized once, from its int32 accumulator. A region with an op not in ``REWRITES``, or a path that
does not start at a dequantize, stays float as written; one log line (logger
``kiln.relay.quantize``) lists the float compute ops left in the graph.

The qnn ops made of a region take the rounding of the quantize at its root (its ``rounding``
attribute: the importer's choice, e.g. ONNX's ``FLOAT32``, onnxruntime's arithmetic).

Values inside a region are ``QTensor``s: an integer expression with its scale and zero point
(constants; scalars, or per channel along ``axis``).
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass

import numpy as np

from ..expr import Call, Constant, Tuple, const
from ..op import nn as fnn
from ..op import tensor as ft
from ..op import transform as ftf
from ..op.registry import OpDef
from ..qnn import op as qop
from ..qnn.fixed_point import dtype_range
from ..visitor import ExprMutator, ExprVisitor
from .infer_type import infer

logger = logging.getLogger("kiln.relay.quantize")
_rounding = ["UPWARD"]  # the rounding of the region being converted (its quantize's attribute)


@dataclass(frozen=True)
class QTensor:
    expr: object
    scale: Constant
    zero_point: Constant
    dtype: str
    axis: int = -1

    @property
    def per_tensor(self) -> bool:
        return self.scale.data.size == 1 and self.zero_point.data.size == 1


def _qt(expr, scale, zp, dtype, axis=-1) -> QTensor:
    return QTensor(expr, const(np.asarray(scale, "float32")), const(np.asarray(zp, "int32")), dtype, axis)


def _scalar(x) -> float:
    return float(np.asarray(x).ravel()[0])


def _requant(q: QTensor, scale, zp, dtype: str, axis=-1):
    if q.dtype == dtype and np.array_equal(q.scale.data, np.asarray(scale, "float32")) and \
            np.array_equal(q.zero_point.data, np.asarray(zp, "int32")):
        return q.expr
    return qop.requantize(q.expr, q.scale, q.zero_point, np.asarray(scale, "float32"), np.asarray(zp, "int32"),
                          axis=q.axis if q.scale.data.size > 1 else axis, out_dtype=dtype, rounding=_rounding[0])


def _to_int32(q: QTensor, scale) -> object:
    """``q`` as an int32 tensor with zero point 0 at ``scale`` (per-tensor)."""
    return _requant(q, scale, 0, "int32", q.axis)


# -- rewrites: (call, quantized args, hint) -> QTensor or None -------------------------------------

def _matmul(qnn_fn, kernel_axis_ok, out_axis):
    def rewrite(call, args, hint):
        a, b = args
        if not isinstance(a, QTensor) or not isinstance(b, QTensor) or not a.per_tensor:
            return None
        if not b.per_tensor and not kernel_axis_ok(call, b):
            return None
        attrs = {k: v for k, v in call.attrs.items() if k != "out_dtype"}
        out = qnn_fn(a.expr, b.expr, a.zero_point, b.zero_point, a.scale, b.scale, **attrs)
        scale = np.float64(a.scale.data) * b.scale.data.astype(np.float64)
        return _qt(out, scale.astype("float32"), 0, "int32", out_axis(call))
    return rewrite


def _conv_kernel_axis(call, b):
    return call.attrs.kernel_layout.index("O") == b.axis % 4


def _conv2d_attrs(fn):
    def build(x, w, zx, zw, sx, sw, **attrs):
        return fn(x, w, zx, zw, sx, sw, **{k: v for k, v in attrs.items() if k != "out_layout" or v})
    return build


def _bias(call, args, hint):
    acc, bias = args
    if not isinstance(acc, QTensor) or acc.dtype != "int32" or np.any(acc.zero_point.data):
        return None
    axis = call.attrs.axis if call.op is fnn.BIAS_ADD else -1
    b_int = _bias_int32(bias, acc)
    if b_int is None:
        return None
    if call.op is fnn.BIAS_ADD:
        return QTensor(fnn.bias_add(acc.expr, b_int, axis), acc.scale, acc.zero_point, "int32", acc.axis)
    return QTensor(ft.add(acc.expr, b_int), acc.scale, acc.zero_point, "int32", acc.axis)


def _bias_int32(bias, acc: QTensor):
    """A 1-D bias at the accumulator's (per-channel) scale, as int32."""
    if isinstance(bias, QTensor):
        if bias.dtype == "int32" and not np.any(bias.zero_point.data) and \
                np.allclose(bias.scale.data, acc.scale.data, rtol=1e-6, atol=0):
            return bias.expr
        if not bias.per_tensor and bias.scale.data.size != acc.scale.data.size:
            return None
        return qop.requantize(bias.expr, bias.scale, bias.zero_point, acc.scale, 0, axis=0, out_dtype="int32",
                              rounding=_rounding[0])
    if isinstance(bias, Constant) and bias.data.dtype.kind == "f" and bias.data.ndim <= 1:
        q = np.rint(bias.data.astype(np.float64) / acc.scale.data.astype(np.float64))
        return const(np.clip(q, *dtype_range("int32")).astype("int32"))
    return None


def _binary(qnn_fn, int_fn):
    def rewrite(call, args, hint):
        a, b = args
        if call.op is ft.ADD and isinstance(a, QTensor) and a.dtype == "int32" and not np.any(a.zero_point.data):
            out = _bias(call, [a, b], hint)  # an accumulator plus its bias (Gemm's C, a MatMul's Add)
            if out is not None or isinstance(b, Constant):
                return out
        if not isinstance(a, QTensor) or not isinstance(b, QTensor) or not (a.per_tensor and b.per_tensor):
            return None
        if hint is not None and a.dtype != "int32" and b.dtype != "int32":
            scale, zp, dtype = hint
            out = qnn_fn(a.expr, b.expr, a.scale, a.zero_point, b.scale, b.zero_point, scale, zp, out_dtype=dtype,
                         rounding=_rounding[0])
            return _qt(out, scale, zp, dtype)
        scale = min(_scalar(a.scale.data), _scalar(b.scale.data))
        return _qt(int_fn(_to_int32(a, scale), _to_int32(b, scale)), scale, 0, "int32")
    return rewrite


def _mul(call, args, hint):
    a, b = args
    if not isinstance(a, QTensor) or not isinstance(b, QTensor) or not (a.per_tensor and b.per_tensor):
        return None
    if hint is not None:
        scale, zp, dtype = hint
        out = qop.mul(a.expr, b.expr, a.scale, a.zero_point, b.scale, b.zero_point, scale, zp, out_dtype=dtype,
                      rounding=_rounding[0])
        return _qt(out, scale, zp, dtype)
    prod = ft.multiply(_centered32(a), _centered32(b))
    return _qt(prod, _scalar(a.scale.data) * _scalar(b.scale.data), 0, "int32")


def _centered32(q: QTensor):
    x = ftf.cast(q.expr, "int32")
    return x if not np.any(q.zero_point.data) else ft.subtract(x, const(q.zero_point.data.astype("int32")))


def _per_tensor(q: QTensor):
    """A per-channel int32 accumulator at one scale (the smallest), so that ops that move channels
    (reshape, flatten) can take it; None for other per-channel tensors."""
    if q.per_tensor:
        return q
    if q.dtype != "int32" or np.any(q.zero_point.data):
        return None
    scale = float(q.scale.data.min())
    return _qt(_to_int32(q, scale), scale, 0, "int32")


def _same_params(fn, per_tensor_only=True):
    """Ops that move or select values: the same op on the integers, same scale and zero point."""
    def rewrite(call, args, hint):
        q = args[0]
        if not isinstance(q, QTensor):
            return None
        if per_tensor_only:
            q = _per_tensor(q)
            if q is None:
                return None
        return QTensor(fn(call, q), q.scale, q.zero_point, q.dtype, q.axis)
    return rewrite


def _redo(call, q):
    return Call(call.op, [q.expr] + list(call.args[1:]), call.attrs)


def _transpose(call, args, hint):
    q = args[0]
    if not isinstance(q, QTensor):
        return None
    ndim = len(infer(q.expr).checked_type.shape)
    axes = list(call.attrs.axes) if call.attrs.axes is not None else list(range(ndim))[::-1]
    axis = [a % ndim for a in axes].index(q.axis % ndim) if not q.per_tensor else q.axis
    return QTensor(ftf.transpose(q.expr, axes), q.scale, q.zero_point, q.dtype, axis)


def _relu(call, q):
    if q.per_tensor:
        return ft.maximum(q.expr, const(q.zero_point.data.astype(q.dtype).reshape(())))
    ndim = len(infer(q.expr).checked_type.shape)
    shape = [1] * ndim
    shape[q.axis % ndim] = -1
    zp = np.broadcast_to(q.zero_point.data, q.scale.data.shape).astype(q.dtype).reshape(shape)
    return ft.maximum(q.expr, const(zp))


def _clip(call, args, hint):
    q = args[0]
    if not isinstance(q, QTensor) or not q.per_tensor:
        return None
    lo, hi = dtype_range(q.dtype)
    s, z = _scalar(q.scale.data), _scalar(q.zero_point.data)
    qlo = max(lo, np.rint(call.attrs.a_min / s) + z) if np.isfinite(call.attrs.a_min) else lo
    qhi = min(hi, np.rint(call.attrs.a_max / s) + z) if np.isfinite(call.attrs.a_max) else hi
    clamped = ft.minimum(ft.maximum(q.expr, const(int(qlo), q.dtype)), const(int(qhi), q.dtype))
    return QTensor(clamped, q.scale, q.zero_point, q.dtype, q.axis)


def _pad(call, q):
    s, z = _scalar(q.scale.data), _scalar(q.zero_point.data)
    value = float(np.clip(np.rint(call.attrs.pad_value / s) + z, *dtype_range(q.dtype)))
    return fnn.pad(q.expr, call.attrs.pad_width, value, call.attrs.pad_mode)


def _avg_pool(call, args, hint):
    q = args[0]
    if not isinstance(q, QTensor) or not q.per_tensor or q.dtype not in ("int8", "uint8"):
        return None
    scale, zp, _ = hint if hint is not None and hint[2] == q.dtype else (q.scale.data, q.zero_point.data, None)
    attrs = dict(call.attrs.items())
    if call.op.name == "nn.global_avg_pool2d":
        out = qop.global_avg_pool2d(q.expr, q.scale, q.zero_point, scale, zp, layout=attrs["layout"],
                                    rounding=_rounding[0])
    else:
        out = qop.avg_pool2d(q.expr, q.scale, q.zero_point, scale, zp,
                             **{k: v for k, v in attrs.items() if k != "out_layout" or v})
    return _qt(out, scale, zp, q.dtype)


def _unary(qnn_fn, extra=()):
    def rewrite(call, args, hint):
        q = args[0]
        if hint is None or not isinstance(q, QTensor) or not q.per_tensor or q.dtype not in ("int8", "uint8"):
            return None
        scale, zp, dtype = hint
        kw = {k: call.attrs[k] for k in extra}
        return _qt(qnn_fn(q.expr, q.scale, q.zero_point, scale, zp, out_dtype=dtype, **kw), scale, zp, dtype)
    return rewrite


def _concat(call, args, hint):
    fields = args[0]
    if not isinstance(fields, list) or not all(isinstance(f, QTensor) and f.per_tensor for f in fields):
        return None
    if hint is not None:
        scale, zp, dtype = hint
    else:
        scale, zp, dtype = fields[0].scale.data, fields[0].zero_point.data, fields[0].dtype
    out = qop.concatenate([f.expr for f in fields], [f.scale for f in fields], [f.zero_point for f in fields],
                          scale, zp, call.attrs.axis, out_dtype=dtype, rounding=_rounding[0])
    return _qt(out, scale, zp, dtype)


REWRITES = {
    "nn.conv2d": _matmul(_conv2d_attrs(qop.conv2d), _conv_kernel_axis, lambda c: 1),
    "nn.dense": _matmul(qop.dense, lambda c, b: b.axis % 2 == 0, lambda c: -1),
    "nn.batch_matmul": _matmul(qop.batch_matmul, lambda c, b: False, lambda c: -1),
    "nn.bias_add": _bias,
    "add": _binary(qop.add, ft.add),
    "subtract": _binary(qop.subtract, ft.subtract),
    "multiply": _mul,
    "nn.relu": _same_params(_relu, per_tensor_only=False),
    "clip": _clip,
    "nn.max_pool2d": _same_params(_redo),
    "nn.avg_pool2d": _avg_pool,
    "nn.global_avg_pool2d": _avg_pool,
    "nn.global_max_pool2d": _same_params(_redo),
    "nn.pad": _same_params(_pad),
    "reshape": _same_params(_redo), "squeeze": _same_params(_redo), "expand_dims": _same_params(_redo),
    "nn.batch_flatten": _same_params(_redo), "transpose": _transpose,
    "strided_slice": _same_params(_redo), "copy": _same_params(_redo),
    "concatenate": _concat,
    "sigmoid": _unary(qop.sigmoid), "tanh": _unary(qop.tanh), "exp": _unary(qop.exp), "erf": _unary(qop.erf),
    "sqrt": _unary(qop.sqrt), "rsqrt": _unary(qop.rsqrt), "log": _unary(qop.log), "abs": _unary(qop.abs),
    "nn.leaky_relu": _unary(qop.leaky_relu, ("alpha",)),
    "nn.softmax": _unary(qop.softmax, ("axis",)),
}

_DEQUANTIZE = qop.core.DEQUANTIZE
_QUANTIZE = qop.core.QUANTIZE


class _Region:
    """Converts the float graph above one quantize, or says it cannot."""

    def __init__(self):
        self.memo: dict = {}

    def convert(self, expr, hint=None):
        key = (expr, hint)
        if key not in self.memo:
            self.memo[key] = self._convert(expr, hint)
        return self.memo[key]

    def _convert(self, expr, hint):
        if isinstance(expr, Call) and expr.op is _DEQUANTIZE:
            x, s, z = expr.args
            if not isinstance(s, Constant) or not isinstance(z, Constant):
                return None
            return QTensor(x, s, z, infer(x).checked_type.dtype, expr.attrs.axis)
        if not isinstance(expr, Call) or not isinstance(expr.op, OpDef):
            return None
        rewrite = REWRITES.get(expr.op.name)
        if rewrite is None:
            return None
        args = []
        for a in expr.args:
            if isinstance(a, Constant):
                args.append(a)
            elif isinstance(a, Tuple):
                fields = [self.convert(f) for f in a.fields]
                if any(f is None for f in fields):
                    return None
                args.append(fields)
            else:
                q = self.convert(a)
                if q is None:
                    return None
                args.append(q)
        return rewrite(expr, args, hint)


class _FQ2I(ExprMutator):
    def __init__(self):
        super().__init__()
        self.converted = 0

    def visit_Function(self, f):
        if f.attrs.get("Primitive"):
            return f
        return super().visit_Function(f)

    def visit_Call(self, call):
        call = super().visit_Call(call)
        if call.op is not _QUANTIZE:
            return self._accumulator(call)
        x, s, z = call.args
        if not isinstance(s, Constant) or not isinstance(z, Constant) or not isinstance(x, Call):
            return call
        dtype = call.attrs.out_dtype
        hint = (s.data, z.data, dtype) if s.data.size == 1 and z.data.size == 1 else None
        _rounding[0] = call.attrs.get("rounding", "UPWARD")
        try:
            q = _Region().convert(x, _Hint(hint) if hint else None)
            if q is None:
                return call
            self.converted += 1
            return _requant(q, s.data, z.data, dtype, call.attrs.axis)
        finally:
            _rounding[0] = "UPWARD"


    def _accumulator(self, call):
        """A conv/dense/matmul of dequantized tensors (and the bias added to it) whose result is
        not quantized again (a graph output, a float op next): int32, then one dequantize."""
        name = getattr(call.op, "name", "")
        if name not in _ACC_OPS and not (name in ("add", "nn.bias_add") and any(map(_int32_dq, call.args))):
            return call
        q = _Region().convert(call)
        if q is None or q.dtype != "int32" or np.any(q.zero_point.data):
            return call
        self.converted += 1
        return qop.dequantize(q.expr, q.scale, q.zero_point, axis=q.axis if q.scale.data.size > 1 else -1)


_ACC_OPS = ("nn.conv2d", "nn.dense", "nn.batch_matmul")


def _int32_dq(e) -> bool:
    return isinstance(e, Call) and e.op is _DEQUANTIZE and infer(e.args[0]).checked_type.dtype == "int32"


class _Hint(tuple):
    """(scale, zero point, dtype) of the quantize at a region's root; hashable for the memo."""

    def __new__(cls, value):
        return super().__new__(cls, value)

    def __hash__(self):
        return hash((float(np.asarray(self[0]).ravel()[0]), int(np.asarray(self[1]).ravel()[0]), self[2]))

    def __eq__(self, other):
        return isinstance(other, _Hint) and hash(self) == hash(other)


_MOVES = {"reshape", "squeeze", "expand_dims", "transpose", "nn.batch_flatten", "copy", "cast", "strided_slice",
          "concatenate", "split"}  # data movement, not compute


class _FloatOps(ExprVisitor):
    def __init__(self):
        super().__init__()
        self.float_ops: Counter = Counter()
        self.qdq = 0

    def visit_Call(self, call):
        super().visit_Call(call)
        name = getattr(call.op, "name", "")
        if name in ("qnn.quantize", "qnn.dequantize"):
            self.qdq += 1
        elif name and not name.startswith("qnn.") and name not in _MOVES:
            t = infer(call).checked_type
            t = t.fields[0] if hasattr(t, "fields") else t  # batch_norm: (out, mean, var)
            if str(getattr(t, "dtype", "")).startswith("float"):
                self.float_ops[name] += 1


def fake_quantization_to_integer(func):
    """``func`` with its dequantize -> float ops -> quantize regions computed on integers."""
    func = infer(func)
    before = _FloatOps()
    before.visit(func)
    if not before.qdq:
        return func
    mutator = _FQ2I()
    out = infer(mutator.visit(func))
    after = _FloatOps()
    after.visit(out)
    left = ", ".join(f"{n} x{c}" for n, c in sorted(after.float_ops.items())) or "none"
    logger.info("FakeQuantizationToInteger: %d quantize regions made integer; float compute ops left: %s",
                mutator.converted, left)
    return out
