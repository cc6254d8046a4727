"""FuseConvEpilogue: on x86, the ops ToMixedPrecision puts after a bfloat16 (or float16) conv2d that
sums in float32 run in float32 and round once:

    %1 = nn.conv2d(%x, W, data_layout="NCHW32c", out_layout="NCHW32c", out_dtype="float32")
    %2 = cast(%1, dtype="bfloat16")
    %3 = add(%2, B)                      (the bias, a per-channel constant)
    %4 = add(%3, %r)                     (optional: a residual of the output's shape)
    %5 = nn.relu(%4)                     (optional; off AMX also clip)

- On CPUs with AMX-BF16 the chain becomes one op, ``nn.contrib_conv2d_bias_NCHWc`` (or
  ``..._residual_NCHWc``): ``%5 = nn.contrib_conv2d_bias_residual_NCHWc(%x, pack(W), B, %r,
  relu=True)``. Its AMX kernel (topi/x86/amx_bf16.py) applies the additions and the relu to each
  tile of float32 sums while it is in L1 and rounds once; what goes is the float32 output (twice
  the bfloat16 one) written to memory and read back by a separate epilogue kernel, and that
  kernel's three roundings (after the conv, the bias and the residual). Measured per layer (one
  core, CPU time): 64->256 1x1 at 56x56 0.50 -> 0.28 ms (epilogue in bfloat16, as the unfused
  ops) -> 0.2 ms (in float32, one rounding).
- Elsewhere the cast moves after the chain: ``cast(relu(%1 + float32(B) + cast(%r, float32)),
  "bfloat16")``, which FuseOps puts in the conv's tile store as before, now in float32 with one
  rounding (the same speed for znver3 code; MobileNetV2's max |difference| / max |logit| against
  onnxruntime 7.4e-2 -> 5.8e-2).

One rounding instead of three is closer to float32's result, not further (as FuseExpandDepthwise).
Runs on x86 after AlterOpLayout (blocked layouts; the weight must be constant) and after
FuseExpandDepthwise (whose 1x1 convs it leaves alone); the AMX op only where ``cpu_facts`` gives
the target AMX-BF16 and the conv is one the AMX kernel takes (``amx_bf16.applies`` /
``plain_applies``).
"""

from __future__ import annotations

import numpy as np

from ..analysis import only_user, users
from ..expr import Call, Constant, Function, const
from ..op import layout
from ..op import nn as nn_ops
from ..op import tensor
from ..op.nn_fused import contrib_conv2d_bias_NCHWc, contrib_conv2d_bias_residual_NCHWc
from ..op import transform
from ..op.transform import CAST
from ..visitor import DataflowRewriter


def _amx_conv(conv, consumers, cast, amx: bool = True) -> tuple | None:
    """(input block, output block) of a conv2d on ``cast``'s 16-bit type summing in float32, its
    only user ``cast``: one the AMX kernel takes (``amx``), else any groups-1 conv with a constant
    weight ((0, 0)); None otherwise."""
    from kiln.topi.x86 import amx_bf16

    if not isinstance(conv, Call) or conv.op is not nn_ops.CONV2D or not only_user(conv, consumers, cast):
        return None
    a, (data, weight) = conv.attrs, conv.args
    narrow = str(cast.attrs.dtype)
    if (not isinstance(weight, Constant) or a.groups != 1 or a.kernel_layout != "OIHW"
            or str(a.out_dtype) != "float32" or str(data.checked_type.dtype) != narrow
            or str(weight.data.dtype) != narrow):
        return None
    if not amx:
        return (0, 0)
    if narrow != "bfloat16":
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


def _bias_add(node, consumers, amx: bool = True):
    """(conv, bias constant, input block, output block) when ``node`` is add(cast(conv, T), bias)
    with a per-channel constant bias (T bfloat16 on AMX, else bfloat16 or float16); else None."""
    if not isinstance(node, Call) or node.op is not tensor.ADD:
        return None
    for rounded, bias in (node.args, node.args[::-1]):
        if (not isinstance(rounded, Call) or rounded.op is not CAST
                or str(rounded.attrs.dtype) not in ("bfloat16", "float16")
                or not isinstance(bias, Constant) or not only_user(rounded, consumers, node)
                or str(bias.data.dtype) != str(rounded.attrs.dtype)):
            continue
        blocks = _amx_conv(rounded.args[0], consumers, rounded, amx)
        if blocks is None:
            continue
        if not amx:
            if tuple(node.checked_type.shape) != tuple(rounded.checked_type.shape):
                continue  # the bias must not broadcast the conv's output any larger
            return rounded.args[0], bias, *blocks
        bn = blocks[1]
        chunks = int(rounded.checked_type.shape[1])
        shape = tuple(int(d) for d in bias.data.shape)  # AlterOpLayout's (C/b, 1, 1, b), or (1, C/b, 1, 1, b)
        if shape[-4:] != (chunks, 1, 1, bn) or len(shape) > 5 or (len(shape) == 5 and shape[0] != 1):
            continue
        return rounded.args[0], bias, *blocks
    return None


def _match(end: Call, consumers: dict, amx: bool = True):
    """(conv, bias, input block, output block, residual or None, activation) when ``end`` ends
    the pattern; activation None, ("relu",) or, off AMX, ("clip", a_min, a_max)."""
    act = None
    if isinstance(end, Call) and end.op is nn_ops.RELU:
        act = ("relu",)
    elif not amx and isinstance(end, Call) and end.op is tensor.CLIP:
        act = ("clip", end.attrs.a_min, end.attrs.a_max)
    inner = end.args[0] if act else end
    if act and not only_user(inner, consumers, end):
        return None
    found = _bias_add(inner, consumers, amx)
    if found is not None:
        return (*found, None, act)
    if not isinstance(inner, Call) or inner.op is not tensor.ADD:
        return None
    for first, residual in (inner.args, inner.args[::-1]):
        found = _bias_add(first, consumers, amx)
        if (found is not None and only_user(first, consumers, inner)
                and tuple(residual.checked_type.shape) == tuple(first.checked_type.shape)
                and str(residual.checked_type.dtype) == str(first.checked_type.dtype)):
            return (*found, residual, act)
    return None


class _Fuse(DataflowRewriter):
    def __init__(self, consumers, amx: bool):
        super().__init__(consumers)
        self.amx = amx

    def visit_Call(self, call):
        found = _match(call, self.consumers, self.amx)
        if found is None:
            return super().visit_Call(call)
        conv, bias, ib, bn, residual, act = found
        if not self.amx:
            return self._float_epilogue(conv, bias, residual, act, str(call.checked_type.dtype))
        from kiln.topi.x86.conv2d_bf16 import prepack_kernel_nchwc_bf16
        from kiln.topi.x86.conv2d_nchwc import prepack_kernel_nchwc

        w = conv.args[1].data
        packed = prepack_kernel_nchwc_bf16(w, ib, bn) if ib else prepack_kernel_nchwc(w, 1, bn)
        a = conv.attrs
        args = (self.visit(conv.args[0]), const(packed), const(bias.data.reshape(1, -1, 1, 1, bn)))
        relu = act is not None
        if residual is None:
            return contrib_conv2d_bias_NCHWc(*args, a.strides, a.padding, a.dilation, relu)
        return contrib_conv2d_bias_residual_NCHWc(*args, self.visit(residual), a.strides, a.padding, a.dilation, relu)

    def _float_epilogue(self, conv, bias, residual, act, narrow: str):
        """cast(act(conv + float32(bias) [+ cast(residual, float32)]), narrow): FuseOps puts it all
        in the conv's tile store, in float32 with one rounding."""
        y = Call(conv.op, [self.visit(conv.args[0]), conv.args[1]], conv.attrs)
        y = tensor.add(y, const(np.asarray(bias.data, np.float32)))
        if residual is not None:
            y = tensor.add(y, transform.cast(self.visit(residual), "float32"))
        if act is not None and act[0] == "relu":
            y = nn_ops.relu(y)
        elif act is not None:
            y = tensor.clip(y, act[1], act[2])
        return transform.cast(y, narrow)


def fuse_conv_epilogue(func: Function, amx: bool = True) -> Function:
    return _Fuse(users(func.body), amx).visit(func)
