"""FuseConvEpilogue: on CPUs with AMX-BF16, a bfloat16 conv2d and the ops ToMixedPrecision puts
after it run as one kernel, ``nn.contrib_conv2d_bias_NCHWc`` (or ``..._residual_NCHWc``):

    %1 = nn.conv2d(%x, W, data_layout="NCHW32c", out_layout="NCHW32c", out_dtype="float32")
    %2 = cast(%1, dtype="bfloat16")
    %3 = add(%2, B)                      (the bias, a per-channel constant)
    %4 = add(%3, %r)                     (optional: a residual of the output's shape)
    %5 = nn.relu(%4)                     (optional)
  ->
    %5 = nn.contrib_conv2d_bias_residual_NCHWc(%x, pack(W), B, %r, relu=True)

The AMX kernel (topi/x86/amx_bf16.py) applies the additions and the relu to each tile of float32
sums while it is in L1 and rounds once; what goes is the float32 output (twice the bfloat16 one)
written to memory and read back by a separate epilogue kernel, and that kernel's three roundings
(after the conv, the bias and the residual): the result is closer to float32's, not further, as
with FuseExpandDepthwise. Measured per layer (one core, CPU time): 64->256 1x1 at 56x56 0.50 ->
0.28 ms (epilogue in bfloat16, as the unfused ops) -> 0.2 ms (in float32, one rounding).

Runs on x86 after AlterOpLayout (blocked layouts; the weight must be constant) and after
FuseExpandDepthwise (whose 1x1 convs it leaves alone); only where ``cpu_facts`` gives the target
AMX-BF16 and the conv is one the AMX kernel takes (``amx_bf16.applies`` / ``plain_applies``).
"""

from __future__ import annotations

from ..analysis import users
from ..expr import Call, Constant, Function, const
from ..op import layout
from ..op import nn as nn_ops
from ..op import tensor
from ..op.nn_fused import contrib_conv2d_bias_NCHWc, contrib_conv2d_bias_residual_NCHWc
from ..op.transform import CAST
from ..visitor import DataflowRewriter


def _only_user(node, consumers, user) -> bool:
    return consumers.get(node, []) == [user]


def _amx_conv(conv, consumers, cast) -> tuple | None:
    """(input block, output block) of a conv2d the AMX kernel takes, its only user ``cast``; else None."""
    from kiln.topi.x86 import amx_bf16

    if not isinstance(conv, Call) or conv.op is not nn_ops.CONV2D or not _only_user(conv, consumers, cast):
        return None
    a, (data, weight) = conv.attrs, conv.args
    if (not isinstance(weight, Constant) or a.groups != 1 or a.kernel_layout != "OIHW"
            or str(a.out_dtype) != "float32" or str(data.checked_type.dtype) != "bfloat16"
            or str(weight.data.dtype) != "bfloat16"):
        return None
    ib, bn = layout.channel_block(str(a.data_layout)), layout.channel_block(str(a.out_layout or a.data_layout))
    if not bn:
        return None
    o, c, kh, kw = weight.data.shape
    if ib:
        ok = amx_bf16.applies("bfloat16", "bfloat16", ib, bn)
    else:
        ok = str(a.data_layout) == "NCHW" and amx_bf16.plain_applies("bfloat16", "bfloat16", c, kw, a.dilation[1], bn)
    return (ib, bn) if ok else None


def _bias_add(node, consumers):
    """(conv, bias constant, input block, output block) when ``node`` is add(cast(conv, bfloat16),
    bias) of an AMX conv with a per-channel constant bias; else None."""
    if not isinstance(node, Call) or node.op is not tensor.ADD:
        return None
    for rounded, bias in (node.args, node.args[::-1]):
        if (not isinstance(rounded, Call) or rounded.op is not CAST or str(rounded.attrs.dtype) != "bfloat16"
                or not isinstance(bias, Constant) or not _only_user(rounded, consumers, node)):
            continue
        blocks = _amx_conv(rounded.args[0], consumers, rounded)
        if blocks is None:
            continue
        bn = blocks[1]
        chunks = int(rounded.checked_type.shape[1])
        shape = tuple(int(d) for d in bias.data.shape)  # AlterOpLayout's (C/b, 1, 1, b), or (1, C/b, 1, 1, b)
        if str(bias.data.dtype) != "bfloat16" or shape[-4:] != (chunks, 1, 1, bn) or len(shape) > 5 \
                or (len(shape) == 5 and shape[0] != 1):
            continue
        return rounded.args[0], bias, *blocks
    return None


def _match(end: Call, consumers: dict):
    """(conv, bias, input block, output block, residual or None, relu) when ``end`` ends the pattern."""
    relu = isinstance(end, Call) and end.op is nn_ops.RELU
    inner = end.args[0] if relu else end
    if relu and not _only_user(inner, consumers, end):
        return None
    found = _bias_add(inner, consumers)
    if found is not None:
        return (*found, None, relu)
    if not isinstance(inner, Call) or inner.op is not tensor.ADD:
        return None
    for first, residual in (inner.args, inner.args[::-1]):
        found = _bias_add(first, consumers)
        if (found is not None and _only_user(first, consumers, inner)
                and tuple(residual.checked_type.shape) == tuple(first.checked_type.shape)
                and str(residual.checked_type.dtype) == "bfloat16"):
            return (*found, residual, relu)
    return None


class _Fuse(DataflowRewriter):
    def visit_Call(self, call):
        found = _match(call, self.consumers)
        if found is None:
            return super().visit_Call(call)
        from kiln.topi.x86.conv2d_bf16 import prepack_kernel_nchwc_bf16
        from kiln.topi.x86.conv2d_nchwc import prepack_kernel_nchwc

        conv, bias, ib, bn, residual, relu = found
        w = conv.args[1].data
        packed = prepack_kernel_nchwc_bf16(w, ib, bn) if ib else prepack_kernel_nchwc(w, 1, bn)
        a = conv.attrs
        args = (self.visit(conv.args[0]), const(packed), const(bias.data.reshape(1, -1, 1, 1, bn)))
        if residual is None:
            return contrib_conv2d_bias_NCHWc(*args, a.strides, a.padding, a.dilation, relu)
        return contrib_conv2d_bias_residual_NCHWc(*args, self.visit(residual), a.strides, a.padding, a.dilation, relu)


def fuse_conv_epilogue(func: Function) -> Function:
    return _Fuse(users(func.body)).visit(func)
