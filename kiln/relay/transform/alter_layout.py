"""AlterOpLayout: on x86, convolutions run on channel-blocked data (NCHW16c) and the data stays
blocked between them, so no kernel converts to and from NCHW around every convolution.

In the blocked layout a pixel's ``b`` channels are one contiguous vector: a convolution's
register tile (``tile_ow`` pixels x ``oc_bn`` channels) is stored as it is and the next one
reads whole vectors of input channels; a depthwise convolution or a pooling window is a vector
operation over channels whatever its stride. This is the layout onnxruntime's CPU provider and
TVM's x86 schedules use.

The rewrite walks the graph once, children first; each value carries its channel block (0 for
the original NCHW):

- ``nn.conv2d`` (NCHW data, OIHW constant weight, groups 1) gets ``out_layout = NCHW{oc_bn}c``,
  ``oc_bn`` from the op's tuning config (or topi's default) adjusted to divide the channels
  (24 channels -> 8). Its input stays in whatever block the producer chose; plain inputs (an
  RGB image) are read as NCHW directly, except by 3x3 stride-1 convs, which always run blocked
  (the backend's Winograd kernel outweighs the layout transforms around it).
- depthwise ``nn.conv2d`` (groups == channels) keeps its input's block.
- elementwise ops keep the block; broadcasting ops keep it when the other operands are the same
  shape (blocked too), scalars, or constants that broadcast along whole axes (a per-channel bias
  ``(C, 1, 1)`` becomes ``(C/b, 1, 1, b)`` here, in numpy), or computed per-channel values
  ``(N, C, 1, 1)`` (a squeeze-and-excitation scale), which are viewed as ``(N, C/b, 1, 1, b)``.
- pooling (``nn.max_pool2d``, ``nn.avg_pool2d``, the global pools) switches its ``layout``.
- a channel ``concatenate`` of blocked inputs joins them along the chunk axis (SqueezeNet's
  fire modules, Inception's branches), in the block most of its inputs have.

Every other consumer, and the function's result, gets a ``layout_transform`` back to NCHW (one
per value, shared by its plain consumers). Blocks always divide the channels: a blocked tensor
holds no padding, so no op can see padding values.
"""

from __future__ import annotations

import numpy as np

from kiln.topi.x86.conv2d_nchwc import input_block
from kiln.topi.x86.conv2d_winograd import applies_to as winograd_applies

from ..expr import Call, Constant, Function, Tuple, TupleGetItem, const
from ..op import layout as layouts
from ..op import nn as nn_ops
from ..op import nn_pool
from ..op import tensor as tensor_ops
from ..op import transform as tf_ops
from ..op.registry import OpDef, OpPattern

_POOLS = (nn_pool.MAX_POOL2D, nn_pool.AVG_POOL2D, nn_pool.GLOBAL_AVG_POOL2D, nn_pool.GLOBAL_MAX_POOL2D)


def _blocked(block: int) -> str:
    return f"NCHW{block}c"


def _shape(e) -> tuple:
    return tuple(int(d) for d in e.checked_type.shape)


class _Rewriter:
    def __init__(self, conv_block, block_for=input_block, winograd: bool = True):
        self.conv_block = conv_block  # (call) -> output block of a groups-1 conv, 0 = keep NCHW
        self.block_for = block_for    # (channels) -> the block a depthwise conv's input takes, 0 = none
        self.winograd = winograd      # x86: 3x3 stride-1 convs always run blocked (Winograd)
        self.memo: dict = {}          # old node -> (new node, block)
        self.views: dict = {}         # (old node, block) -> the node in that block

    # -- values in a layout ------------------------------------------------------------------------
    def view(self, node, block: int):
        """``node`` rewritten, in NCHW (block 0) or NCHW{block}c."""
        new, have = self.memo[node]
        if have == block:
            return new
        key = (node, block)
        if key not in self.views:
            src, dst = (_blocked(have) if have else "NCHW"), (_blocked(block) if block else "NCHW")
            self.views[key] = tf_ops.layout_transform(new, src, dst)
        return self.views[key]

    def plain(self, node):
        return self.view(node, 0)

    # -- the walk ------------------------------------------------------------------------------------
    def run(self, func: Function) -> Function:
        from ..visitor import children, post_order

        order = post_order(func.body)
        users: dict = {}
        for node in order:
            for kid in children(node):
                users.setdefault(kid, []).append(node)
        # A value is worth producing blocked if some user keeps it blocked: a convolution, a
        # pool, or an elementwise op whose result is worth it in turn (parents come later in
        # ``order``, so walking it backwards sees every user first).
        self.wanted = set()
        for node in reversed(order):
            if any(self._keeps_blocked(u, node) for u in users.get(node, ())):
                self.wanted.add(node)
        for node in order:
            self.memo[node] = self.rewrite(node)
        return Function(func.params, self.plain(func.body), None, func.type_params, func.attrs)

    def rewrite(self, node):
        if isinstance(node, Tuple):
            return Tuple([self.plain(f) for f in node.fields]), 0
        if isinstance(node, TupleGetItem):
            return TupleGetItem(self.plain(node.tuple_value), node.index), 0
        if isinstance(node, Call):
            if isinstance(node.op, OpDef):
                out = self.rewrite_call(node)
                if out is not None:
                    return out
                return Call(node.op, [self.plain(a) for a in node.args], node.attrs), 0
            return Call(self.memo[node.op][0] if node.op in self.memo else node.op,
                        [self.plain(a) for a in node.args], node.attrs), 0
        return node, 0

    def _keeps_blocked(self, user, value) -> bool:
        if isinstance(user, Tuple):
            return user in self.wanted  # the fields of a wanted channel concatenation
        if not isinstance(user, Call) or not isinstance(user.op, OpDef):
            return False
        op = user.op
        if op is nn_ops.CONV2D or op in _POOLS:
            return user.args[0] is value  # convolutions read blocked data whatever they output
        if op is tf_ops.CONCATENATE:
            return user in self.wanted and self._channel_concat(user)
        if op is nn_ops.BIAS_ADD or (op.pattern in (OpPattern.ELEMWISE, OpPattern.BROADCAST)
                                     and "axis" not in user.attrs):
            return user in self.wanted
        return False

    def block_of(self, node) -> int:
        return self.memo[node][1]

    def rewrite_call(self, call: Call):
        """(new call, block) when the call can work on blocked data, else None."""
        op, a = call.op, call.attrs
        if op is nn_ops.CONV2D:
            return self.conv(call)
        if op is tf_ops.CONCATENATE:
            return self.concat(call) if call in self.wanted and self._channel_concat(call) else None
        blocked = [self.block_of(x) for x in call.args if self.block_of(x)]
        if not blocked:
            return None
        block = blocked[0]
        if op in _POOLS and a.layout == "NCHW" and len(call.args) == 1:
            return Call(op, [self.view(call.args[0], block)], a.with_changes(layout=_blocked(block))), block
        if call not in self.wanted and not all(self.block_of(x) or isinstance(x, Constant) or not _shape(x)
                                               for x in call.args):
            return None  # computed on NCHW, so that it fuses with a producer that writes NCHW
        if op is nn_ops.BIAS_ADD:
            return self.bias_add(call, block)
        if op.pattern not in (OpPattern.ELEMWISE, OpPattern.BROADCAST) or "axis" in a:
            return None
        out_shape = _shape(call)
        if len(out_shape) != 4 or out_shape[1] % block:
            return None
        args = []
        for x in call.args:
            arg = self.operand(x, out_shape, block)
            if arg is None:
                return None
            args.append(arg)
        return Call(op, args, a), block

    def operand(self, x, out_shape: tuple, block: int):
        """Operand ``x`` of a broadcasting op whose result is blocked, or None if it cannot be."""
        shape = _shape(x)
        if shape == out_shape:
            return self.view(x, block)
        if len(shape) > 4:
            return None
        if not shape or all(d == 1 for d in shape):
            return self.plain(x)  # a scalar broadcasts in any layout
        if not isinstance(x, Constant):
            # a per-channel computed scale (N, C, 1, 1), as squeeze-and-excitation multiplies by:
            # blocked it is (N, C/b, 1, 1, b) and broadcasts over the pixels as it did
            if len(shape) == 4 and shape[1] == out_shape[1] and shape[0] in (1, out_shape[0]) \
                    and shape[2:] == (1, 1):
                return self.view(x, block)
            return None
        data = x.data.reshape((1,) * (4 - len(shape)) + shape)
        if data.shape[1] == 1:  # no channel axis: blocked shape (n, 1, h, w, 1)
            return const(np.ascontiguousarray(data.reshape(data.shape + (1,))))
        if data.shape[1] != out_shape[1]:
            return None
        return const(layouts.transform(data, "NCHW", _blocked(block)))

    @staticmethod
    def _channel_concat(call: Call) -> bool:
        return isinstance(call.args[0], Tuple) and len(_shape(call)) == 4 and call.attrs.axis % 4 == 1

    def concat(self, call: Call):
        """A channel concatenation of blocked inputs is one along the chunk axis (all in one block)."""
        fields = call.args[0].fields
        blocks = [self.block_of(f) for f in fields if self.block_of(f)]
        if not blocks:
            return None
        block = max(set(blocks), key=blocks.count)
        if any(_shape(f)[1] % block for f in fields):
            return None
        return tf_ops.concatenate([self.view(f, block) for f in fields], 1), block

    def bias_add(self, call: Call, block: int):
        """bias_add over the channels of blocked data: an add of the bias as (C/b, 1, 1, b)."""
        data, bias = call.args
        if not isinstance(bias, Constant) or call.attrs.axis % 4 != 1 or len(_shape(data)) != 4 \
                or not self.block_of(data):
            return None
        c = bias.data.shape[0]
        blocked_bias = np.ascontiguousarray(bias.data.reshape(c // block, 1, 1, block))
        return tensor_ops.add(self.view(data, block), const(blocked_bias)), block

    def conv(self, call: Call):
        a = call.attrs
        data, weight = call.args
        if a.data_layout != "NCHW" or a.kernel_layout != "OIHW" or (a.out_layout or "NCHW") != "NCHW":
            return None
        if not isinstance(weight, Constant) or not str(call.checked_type.dtype).startswith("float"):
            return None
        channels, out_channels = _shape(data)[1], _shape(call)[1]
        have = self.block_of(data)
        if a.groups == 1:
            # Plain input is read as it is (the tile broadcasts one pixel at a time either way);
            # the output is blocked when a user keeps it so, else unpacked to NCHW in the kernel.
            block = self.conv_block(call)
            out_block = block if call in self.wanted else 0
            if block and self.winograd and winograd_applies(_shape(weight)[2:], a.strides, a.dilation, a.groups) \
                    and input_block(channels):
                # Winograd (blocked in and out) beats the direct kernel by more than the two
                # layout transforms a lone 3x3 conv then needs (64@56: 553 + ~60 vs 1070 us).
                have, out_block = have or input_block(channels), block
            if not block or not (have or out_block):
                return None
            new = Call(call.op, [self.view(data, have), weight],
                       a.with_changes(data_layout=_blocked(have) if have else "NCHW",
                                      out_layout=_blocked(out_block) if out_block else "NCHW",
                                      kernel_size=_shape(weight)[2:]))  # the backend picks Winograd by it
            return new, out_block
        if a.groups == channels == out_channels:
            block = have or self.block_for(channels)
            if not block:
                return None
            new = Call(call.op, [self.view(data, block), weight],
                       a.with_changes(data_layout=_blocked(block), out_layout=_blocked(block)))
            return new, block
        return None


def alter_op_layout(func: Function, target) -> Function:
    """``func`` with its convolutions on NCHW{b}c data (for x86 targets; see the module doc)."""
    from kiln.topi.x86.amx_bf16 import amx_block
    from kiln.topi.x86.conv2d_nchwc import config_for_nchwc

    from ..backend import dispatch

    def conv_block(call: Call) -> int:
        a = call.attrs
        arg_types = [x.checked_type for x in call.args]
        workload = dispatch.workload_of("nn.conv2d", a, arg_types, "x86")
        cfg = dispatch.select_config("nn.conv2d", workload, target) if target is not None else None
        conf = config_for_nchwc(_shape(call.args[0]), _shape(call.args[1]), a.strides, tuple(a.padding),
                                a.dilation, cfg)
        if cfg is None:  # AMX bfloat16, AVX512-FP16 float16: blocks of 32 channels (amx_bf16.amx_block)
            return amx_block(arg_types[0].dtype, arg_types[1].dtype, _shape(call)[1], int(conf["oc_bn"]), target)
        return int(conf["oc_bn"])

    return _Rewriter(conv_block).run(func)
