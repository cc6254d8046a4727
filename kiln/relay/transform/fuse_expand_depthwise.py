"""FuseExpandDepthwise: run a 1x1 "expand" conv2d and the depthwise conv2d that reads it as one
op, ``nn.contrib_expand_depthwise_NCHWc`` (the first half of a MobileNetV2 block):

    %1 = nn.conv2d(%x, W1, kernel_size=[1, 1], data_layout="NCHW8c", out_layout="NCHW8c")
    %2 = clip(add(%1, B1), a_min=0f, a_max=6f)                 (or nn.relu, or no activation)
    %3 = nn.conv2d(%2, W2, groups=C, padding=[1, 1, 1, 1], data_layout="NCHW8c", ...)
  ->
    %3 = nn.contrib_expand_depthwise_NCHWc(%x, pack(W1), B1, pack(W2), padding=[1, 1, 1, 1],
                                           act_min=0f, act_max=6f)

so the expanded tensor (six times the block's channels) is never written to memory: each task of
the fused kernel computes the rows it needs in a buffer that stays in cache
(topi/x86/expand_depthwise.py). It runs on x86 after AlterOpLayout (which gives the blocked
layouts) and needs W1, B1 and W2 constant (``relay.build(..., params=...)`` binds them), each
intermediate used only by the next op, and the expanded tensor at least ``MIN_EXPANDED_BYTES``.
Measured on MobileNetV2 (AVX2 code, 2 threads): fusing its 112x112 and 56x56 blocks saves 1.5%
of the model's time on a quiet machine and 9-13% while another tenant loads the memory; its
28x28 blocks gain nothing either way; also fusing the 14x14 and 7x7 ones (under 512 KB, which
stay in L2 between two kernels, and whose padded border is 30% of the grid) ran 7% slower.

bfloat16 / float16 blocks (ToMixedPrecision's) fuse too: float16's convs carry out_dtype float16;
bfloat16's accumulate in float32 and are cast back (``cast(conv2d(.., out_dtype="float32"),
"bfloat16")``), and for the depthwise conv the pass replaces that cast. The fused kernel reads
and writes the narrow type but computes and buffers in float32, so the expanded tensor is no
longer rounded before the depthwise conv (the result is closer to float32's, not further).
"""

from __future__ import annotations

import math

from ..analysis import only_user, users
from ..expr import Call, Constant, Function, const
from ..op import layout
from ..op import nn as nn_ops
from ..op import tensor
from ..op.nn_fused import contrib_expand_depthwise_NCHWc
from ..op.transform import CAST
from ..visitor import DataflowRewriter

MIN_EXPANDED_BYTES = 512 * 1024
LOW_PRECISION = ("bfloat16", "float16")  # computed in float32 by the fused kernel


def _bound(value):
    return None if value is None or math.isinf(float(value)) else float(value)


def _rounded(call, consumers):
    """The float32 conv2d under ``cast(conv2d(x: T, w: T, out_dtype="float32"), T)`` (T bfloat16 or
    float16: how ToMixedPrecision writes a conv that accumulates in float32), the cast its only
    user; else None."""
    if not isinstance(call, Call) or call.op is not CAST or not isinstance(call.args[0], Call):
        return None
    conv = call.args[0]
    dtype = str(call.attrs.dtype)
    if (conv.op is not nn_ops.CONV2D or dtype not in LOW_PRECISION or str(conv.attrs.out_dtype) != "float32"
            or str(conv.args[0].checked_type.dtype) != dtype or not only_user(conv, consumers, call)):
        return None
    return conv


def _match(end: Call, consumers: dict):
    """(x, W1, input block, block, B1, W2, act_min, act_max, depthwise conv) when ``end`` ends the pattern, else None.
    ``end`` is the depthwise conv2d, or the cast back to bfloat16/float16 of one accumulating in
    float32 (the fused op computes in float32 and rounds once, at its store)."""
    dw = _rounded(end, consumers) or end
    block = _depthwise_block(dw)
    if not block:
        return None
    act, lo, hi = dw.args[0], None, None
    if not isinstance(act, Call) or not only_user(act, consumers, dw):
        return None
    add = act
    if act.op is tensor.CLIP:
        lo, hi, add = _bound(act.attrs.a_min), _bound(act.attrs.a_max), act.args[0]
    elif act.op is nn_ops.RELU:
        lo, add = 0.0, act.args[0]
    if not isinstance(add, Call) or add.op is not tensor.ADD:
        return None
    if add is not act and not only_user(add, consumers, act):
        return None
    conv, bias = add.args
    if isinstance(conv, Constant):
        conv, bias = bias, conv
    w2 = dw.args[1].data
    if (not isinstance(bias, Constant) or _per_channel(bias.data.shape) != (w2.shape[0] // block, 1, 1, block)
            or not isinstance(conv, Call) or not only_user(conv, consumers, add)):
        return None
    dtype = str(dw.args[0].checked_type.dtype)  # the expanded tensor's, what the fused op reads and writes
    conv = _rounded(conv, consumers) or conv
    in_block = _expand_block(conv, dw)
    if not in_block:
        return None
    w1 = conv.args[1].data
    if ({str(conv.args[0].checked_type.dtype), str(end.checked_type.dtype), str(bias.data.dtype), str(w1.dtype),
         str(w2.dtype)} != {dtype}):
        return None
    if math.prod(int(d) for d in conv.checked_type.shape) * w1.dtype.itemsize < MIN_EXPANDED_BYTES:
        return None
    return conv.args[0], w1, in_block, block, bias, w2, lo, hi, dw


def _depthwise_block(dw) -> int:
    """The channel block of a blocked, undilated depthwise conv2d with a constant OIHW weight, else 0."""
    if dw.op is not nn_ops.CONV2D or not isinstance(dw.args[1], Constant):
        return 0
    a, w2 = dw.attrs, dw.args[1].data
    block = layout.channel_block(str(a.data_layout))
    if (not block or (a.out_layout or a.data_layout) != a.data_layout or a.kernel_layout != "OIHW"
            or tuple(a.dilation) != (1, 1) or not _accumulates_as_topi(dw) or w2.ndim != 4 or w2.shape[1] != 1
            or a.groups != w2.shape[0] or w2.shape[0] % block):
        return 0
    return block


def _expand_block(conv, dw) -> int:
    """The input block of a blocked 1x1 conv2d (stride 1, no padding, constant OIHW weight) that
    writes the depthwise conv's channels in its layout, else 0."""
    if conv.op is not nn_ops.CONV2D or not isinstance(conv.args[1], Constant):
        return 0
    c, w1 = conv.attrs, conv.args[1].data
    in_block = layout.channel_block(str(c.data_layout))
    if (not in_block or (c.out_layout or c.data_layout) != dw.attrs.data_layout or c.kernel_layout != "OIHW"
            or c.groups != 1 or not _accumulates_as_topi(conv) or tuple(c.strides) != (1, 1) or tuple(c.dilation) != (1, 1)
            or tuple(c.padding) != (0, 0, 0, 0) or w1.shape[0] != dw.args[1].data.shape[0]
            or tuple(w1.shape[2:]) != (1, 1)):
        return 0
    return in_block


def _accumulates_as_topi(conv) -> bool:
    """The conv's out_dtype is what expand_depthwise_NCHWc computes in: none, its data's dtype, or
    float32 for bfloat16/float16 data (the kernel accumulates those in float32 anyway)."""
    out, data = str(conv.attrs.out_dtype or ""), str(conv.args[0].checked_type.dtype)
    return out in ("", data) or (out == "float32" and data in LOW_PRECISION)


def _per_channel(shape) -> tuple:
    """A bias's shape without its leading 1s: AlterOpLayout writes (C/b, 1, 1, b), ONNX graphs
    (1, C/b, 1, 1, b); both broadcast the same over the blocked conv output."""
    shape = tuple(int(d) for d in shape)
    while shape and shape[0] == 1 and len(shape) > 4:
        shape = shape[1:]
    return shape


class _Fuse(DataflowRewriter):
    def visit_Call(self, call):
        found = _match(call, self.consumers)
        if found is None:
            return super().visit_Call(call)
        from kiln.topi.x86.conv2d_nchwc import prepack_kernel_nchwc
        from kiln.topi.x86.depthwise_conv2d_nchwc import prepack_depthwise_kernel

        x, w1, in_block, block, bias, w2, lo, hi, dw = found
        return contrib_expand_depthwise_NCHWc(
            self.visit(x), const(prepack_kernel_nchwc(w1, in_block, block)),
            const(bias.data.reshape(1, -1, 1, 1, block)),
            const(prepack_depthwise_kernel(w2, block)), dw.attrs.strides, dw.attrs.padding, lo, hi)


def fuse_expand_depthwise(func: Function) -> Function:
    return _Fuse(users(func.body)).visit(func)
