"""``relay.qnn.op``: the quantized operators (TVM 0.13's names and argument order).

Scales and zero points are relay expressions or numbers (made float32 / int32 constants).
Constant ones are checked here: a zero, negative or non-finite scale, or a zero point outside
its dtype, is one ShapeError naming the op.
"""

from __future__ import annotations

from ...expr import Tuple
from ...op.registry import as_tuple, conv_padding
from . import core, elemwise, nn
from .params import as_const, check_qparams

OPS = core.OPS + nn.OPS + elemwise.OPS
QNN_OPS = {op.name: op for op in OPS}


def _s(x):
    return as_const(x, "float32")


def _z(x):
    return as_const(x, "int32")


def _rounding(rounding):
    return "UPWARD" if rounding in (None, "None") else str(rounding).upper()


def quantize(data, output_scale, output_zero_point, axis=-1, out_dtype="int8", rounding="UPWARD"):
    """``rounding``: of the integer ops that FakeQuantizationToInteger makes of the float region
    ending at this quantize (the quantize itself always rounds half to even); importers choose
    their reference runtime's (ONNX: ``FLOAT32``, onnxruntime's arithmetic)."""
    s, z = _s(output_scale), _z(output_zero_point)
    check_qparams("qnn.quantize", s, z, out_dtype)
    return core.QUANTIZE(data, s, z, axis=int(axis), out_dtype=str(out_dtype), rounding=_rounding(rounding))


def dequantize(data, input_scale, input_zero_point, axis=-1, in_dtype=None):
    s, z = _s(input_scale), _z(input_zero_point)
    check_qparams("qnn.dequantize", s, z, in_dtype)
    return core.DEQUANTIZE(data, s, z, axis=int(axis))


def requantize(data, input_scale, input_zero_point, output_scale, output_zero_point, axis=-1, rounding="UPWARD",
               compute_dtype="int64", out_dtype="int8"):
    si, zi, so, zo = _s(input_scale), _z(input_zero_point), _s(output_scale), _z(output_zero_point)
    check_qparams("qnn.requantize", si, None)
    check_qparams("qnn.requantize", so, zo, out_dtype)
    return core.REQUANTIZE(data, si, zi, so, zo, axis=int(axis), rounding=_rounding(rounding),
                           out_dtype=str(out_dtype), compute_dtype=str(compute_dtype or "int64"))


def _mm_qparams(op, input_zero_point, kernel_zero_point, input_scale, kernel_scale):
    zi, zk, si, sk = _z(input_zero_point), _z(kernel_zero_point), _s(input_scale), _s(kernel_scale)
    check_qparams(op, si, None)
    check_qparams(op, sk, None)
    return zi, zk, si, sk


def conv2d(data, kernel, input_zero_point, kernel_zero_point, input_scale, kernel_scale, kernel_size=None,
           channels=None, strides=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1, data_layout="NCHW",
           kernel_layout="OIHW", out_layout="", out_dtype="int32"):
    q = _mm_qparams("qnn.conv2d", input_zero_point, kernel_zero_point, input_scale, kernel_scale)
    return nn.CONV2D(data, kernel, *q, strides=as_tuple(strides, 2, "strides"), padding=conv_padding(padding),
                     dilation=as_tuple(dilation, 2, "dilation"), groups=int(groups),
                     channels=None if channels is None else int(channels),
                     kernel_size=None if kernel_size is None else as_tuple(kernel_size, 2, "kernel_size"),
                     data_layout=data_layout, kernel_layout=kernel_layout or "OIHW", out_layout=out_layout,
                     out_dtype=out_dtype)


def conv2d_transpose(data, weight, input_zero_point, kernel_zero_point, input_scale, kernel_scale, strides=(1, 1),
                     padding=(0, 0), dilation=(1, 1), groups=1, channels=None, kernel_size=None, data_layout="NCHW",
                     kernel_layout="IOHW", out_layout="", output_padding=(0, 0), out_dtype="int32"):
    q = _mm_qparams("qnn.conv2d_transpose", input_zero_point, kernel_zero_point, input_scale, kernel_scale)
    return nn.CONV2D_TRANSPOSE(data, weight, *q, strides=as_tuple(strides, 2, "strides"),
                               padding=conv_padding(padding), dilation=as_tuple(dilation, 2, "dilation"),
                               groups=int(groups), channels=channels, kernel_size=kernel_size,
                               data_layout=data_layout, kernel_layout=kernel_layout, out_layout=out_layout,
                               output_padding=as_tuple(output_padding, 2, "output_padding"), out_dtype=out_dtype)


def dense(data, weight, input_zero_point, kernel_zero_point, input_scale, kernel_scale, units=None,
          out_dtype="int32"):
    q = _mm_qparams("qnn.dense", input_zero_point, kernel_zero_point, input_scale, kernel_scale)
    return nn.DENSE(data, weight, *q, units=None if units is None else int(units), out_dtype=out_dtype)


def batch_matmul(x, y, x_zero_point, y_zero_point, x_scale, y_scale, out_dtype="int32", transpose_a=False,
                 transpose_b=True):
    q = _mm_qparams("qnn.batch_matmul", x_zero_point, y_zero_point, x_scale, y_scale)
    return nn.BATCH_MATMUL(x, y, *q, out_dtype=out_dtype, transpose_a=bool(transpose_a),
                           transpose_b=bool(transpose_b))


def _pool_q(op, input_scale, input_zero_point, output_scale, output_zero_point):
    q = (_s(input_scale), _z(input_zero_point), _s(output_scale), _z(output_zero_point))
    check_qparams(op, q[0], None)
    check_qparams(op, q[2], None)
    return q


def avg_pool2d(data, input_scale, input_zero_point, output_scale, output_zero_point, pool_size=(1, 1),
               strides=(1, 1), dilation=(1, 1), padding=(0, 0), layout="NCHW", out_layout="", ceil_mode=False,
               count_include_pad=False):
    q = _pool_q("qnn.avg_pool2d", input_scale, input_zero_point, output_scale, output_zero_point)
    return nn.AVG_POOL2D(data, *q, pool_size=as_tuple(pool_size, 2, "pool_size"),
                         strides=as_tuple(strides, 2, "strides"), dilation=as_tuple(dilation, 2, "dilation"),
                         padding=conv_padding(padding), layout=layout, out_layout=out_layout,
                         ceil_mode=bool(ceil_mode), count_include_pad=bool(count_include_pad))


def global_avg_pool2d(data, input_scale, input_zero_point, output_scale, output_zero_point, layout="NCHW",
                      rounding="UPWARD"):
    q = _pool_q("qnn.global_avg_pool2d", input_scale, input_zero_point, output_scale, output_zero_point)
    return nn.GLOBAL_AVG_POOL2D(data, *q, layout=layout, rounding=_rounding(rounding))


def _binary(opdef):
    def build(lhs, rhs, lhs_scale, lhs_zero_point, rhs_scale, rhs_zero_point, output_scale, output_zero_point,
              lhs_axis=-1, rhs_axis=-1, rounding="UPWARD", out_dtype=""):
        del lhs_axis, rhs_axis  # per-tensor only
        q = (_s(lhs_scale), _z(lhs_zero_point), _s(rhs_scale), _z(rhs_zero_point), _s(output_scale),
             _z(output_zero_point))
        for s in q[0::2]:
            check_qparams(opdef.name, s, None)
        return opdef(lhs, rhs, *q, rounding=_rounding(rounding), out_dtype=out_dtype)
    build.__name__ = opdef.name.split(".")[1]
    return build


add = _binary(elemwise.ADD)
subtract = _binary(elemwise.SUBTRACT)
mul = _binary(elemwise.MUL)


def concatenate(data, input_scales, input_zero_points, output_scale, output_zero_point, axis, rounding="UPWARD",
                out_dtype=""):
    data = data if isinstance(data, Tuple) else Tuple(list(data))
    scales = input_scales if isinstance(input_scales, Tuple) else Tuple([_s(s) for s in input_scales])
    zps = input_zero_points if isinstance(input_zero_points, Tuple) else Tuple([_z(z) for z in input_zero_points])
    for s in list(scales.fields) + [_s(output_scale)]:
        check_qparams("qnn.concatenate", s, None)
    return elemwise.CONCATENATE(data, scales, zps, _s(output_scale), _z(output_zero_point), axis=int(axis),
                                rounding=_rounding(rounding), out_dtype=out_dtype)


def _unary(name):
    opdef = elemwise.UNARY[name]

    def build(x, scale, zero_point, output_scale, output_zero_point, out_dtype="", **extra):
        q = (_s(scale), _z(zero_point), _s(output_scale), _z(output_zero_point))
        check_qparams(opdef.name, q[0], None)
        check_qparams(opdef.name, q[2], None)
        return opdef(x, *q, out_dtype=out_dtype, **extra)
    build.__name__ = name
    return build


sigmoid, tanh, exp, erf, gelu = (_unary(n) for n in ("sigmoid", "tanh", "exp", "erf", "gelu"))
hardswish, hardsigmoid, sqrt, rsqrt = (_unary(n) for n in ("hardswish", "hardsigmoid", "sqrt", "rsqrt"))
log, abs, leaky_relu = (_unary(n) for n in ("log", "abs", "leaky_relu"))  # noqa: A001 - relay's names


def softmax(x, scale, zero_point, output_scale, output_zero_point, axis=-1, out_dtype=""):
    q = (_s(scale), _z(zero_point), _s(output_scale), _z(output_zero_point))
    return elemwise.SOFTMAX(x, *q, axis=int(axis), out_dtype=out_dtype)


def get(name: str):
    """The OpDef of a qnn op, e.g. ``get("qnn.conv2d")``."""
    return QNN_OPS[name]
