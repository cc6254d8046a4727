"""ConvertLayout: run conv2d in a requested data layout (e.g. NHWC) and keep the data in that
layout through the ops that do not care, converting back only where needed.

``desired = {"nn.conv2d": ["NHWC", "default"]}``: conv2d inputs are transformed to NHWC (the
weight to HWIO, the default kernel layout for NHWC; or the given kernel layout). Each rewritten
value carries its current layout; layout-agnostic consumers keep it:

- elementwise ops and casts pass it through;
- broadcasting ops pass it through when the other operands are scalars or can be transformed
  too (4-d operands are transposed; lower-rank ones are expanded to 4-d first);
- nn.bias_add, nn.batch_norm, concatenate and nn.pad remap their axis / pad widths;
- pooling ops switch their ``layout`` attribute.

Anything else receives its inputs back in their original layout (a ``layout_transform``).
Only layouts that are permutations of each other are handled (no NCHW16c-style split axes).
"""

from __future__ import annotations

from ..expr import Call, Constant, Function, Tuple, TupleGetItem, const
from ..op import nn as nn_ops
from ..op import nn_norm, nn_pool
from ..op import transform as tf_ops
from ..op.registry import OpDef, OpPattern
from .infer_type import infer

_DEFAULT_KERNEL = {"NCHW": "OIHW", "NHWC": "HWIO"}
_POOLS = {nn_pool.MAX_POOL2D, nn_pool.AVG_POOL2D, nn_pool.GLOBAL_AVG_POOL2D, nn_pool.GLOBAL_MAX_POOL2D,
          nn_pool.ADAPTIVE_AVG_POOL2D}


def _transform(expr, src: str, dst: str):
    if src == dst:
        return expr
    if isinstance(expr, Constant):  # transform constants now instead of at run time
        return const(expr.data.transpose([src.index(c) for c in dst]).copy())
    return tf_ops.layout_transform(expr, src, dst)


class _Converter:
    def __init__(self, desired: dict):
        self.desired = desired
        self.memo: dict = {}  # old node -> (new node, layout or None)

    def get(self, e):
        return self.memo[e]

    def plain(self, e):
        """``e`` rewritten, in its original layout."""
        new, layout = self.memo[e]
        if layout is None:
            return new
        orig = self.original_layout(e)
        return _transform(new, layout, orig)

    def original_layout(self, e) -> str:
        return self.origin[e]

    def run(self, func: Function) -> Function:
        from ..visitor import post_order
        self.origin: dict = {}
        for node in post_order(func.body):
            self.memo[node] = self.rewrite(node)
        body = self.plain(func.body)
        return Function(func.params, body, None, func.type_params, func.attrs)

    def rewrite(self, node):
        if isinstance(node, Tuple):
            return Tuple([self.plain(f) for f in node.fields]), None
        if isinstance(node, TupleGetItem):
            new, layout = self.memo[node.tuple_value]
            if layout is not None and isinstance(new, Call) and new.op is nn_norm.BATCH_NORM and node.index == 0:
                self.origin[node] = self.origin[node.tuple_value]
                return TupleGetItem(new, 0), layout
            return TupleGetItem(self.plain(node.tuple_value), node.index), None
        if not isinstance(node, Call) or not isinstance(node.op, OpDef):
            if isinstance(node, Call):
                return Call(self.visit_callee(node.op), [self.plain(a) for a in node.args], node.attrs), None
            return node, None
        return self.rewrite_call(node)

    def visit_callee(self, op):
        return self.memo[op][0] if op in self.memo else op

    def rewrite_call(self, call: Call):
        op, a = call.op, call.attrs
        args = [self.get(x) for x in call.args]
        layouts = {lay for _, lay in args if lay is not None}
        if op is nn_ops.CONV2D and op.name in self.desired:
            return self.convert_conv(call)
        if not layouts:
            return Call(op, [n for n, _ in args], a), None
        layout = next(iter(layouts))
        src = self.origin[next(x for x, (_, lay) in zip(call.args, args) if lay is not None)]
        if len(layouts) == 1:
            out = self.keep_layout(call, args, src, layout)
            if out is not None:
                self.origin[call] = src
                return out, layout
        return Call(op, [self.plain(x) for x in call.args], a), None

    def convert_conv(self, call: Call):
        want = self.desired[call.op.name]
        data_layout = want[0]
        kernel_layout = want[1] if len(want) > 1 and want[1] != "default" else _DEFAULT_KERNEL[data_layout]
        a = call.attrs
        data_new, data_lay = self.get(call.args[0])
        data = _transform(data_new, data_lay or a.data_layout, data_layout)
        weight = _transform(self.plain(call.args[1]), a.kernel_layout, kernel_layout)
        new = Call(call.op, [data, weight], a.with_changes(data_layout=data_layout, kernel_layout=kernel_layout,
                                                           out_layout=""))
        self.origin[call] = a.out_layout or a.data_layout
        return new, (data_layout if data_layout != self.origin[call] else None)

    def keep_layout(self, call, args, src, layout):
        """The call rewritten to work on ``layout`` data, or None if it cannot."""
        op, a = call.op, call.attrs
        ndim = len(src)
        axis_map = lambda ax: layout.index(src[ax % ndim])  # noqa: E731
        if op.pattern == OpPattern.ELEMWISE and len(args) == 1:
            return Call(op, [args[0][0]], a)
        if op.pattern == OpPattern.BROADCAST and op not in (nn_ops.BIAS_ADD, nn_ops.PRELU):
            new_args = []
            for x, (n, lay) in zip(call.args, args):
                if lay is not None:
                    new_args.append(n)
                    continue
                t = infer(x).checked_type
                if t.ndim == 0 or all(d == 1 for d in t.shape):
                    new_args.append(n)
                elif t.ndim <= ndim:
                    expanded = n if t.ndim == ndim else tf_ops.expand_dims(n, 0, ndim - t.ndim)
                    if isinstance(n, Constant) and t.ndim < ndim:
                        expanded = const(n.data.reshape((1,) * (ndim - t.ndim) + n.data.shape))
                    new_args.append(_transform(expanded, src, layout))
                else:
                    return None
            return Call(op, new_args, a)
        if op in (nn_ops.BIAS_ADD, nn_ops.PRELU) and args[1][1] is None:
            return Call(op, [args[0][0], args[1][0]], a.with_changes(axis=axis_map(a.axis)))
        if op is nn_norm.BATCH_NORM and all(lay is None for _, lay in args[1:]):
            return Call(op, [n for n, _ in args], a.with_changes(axis=axis_map(a.axis)))
        if op in _POOLS and a.layout == src:
            return Call(op, [args[0][0]], a.with_changes(layout=layout))
        if op is nn_ops.PAD:
            pw = [a.pad_width[src.index(c)] for c in layout]
            return Call(op, [args[0][0]], a.with_changes(pad_width=tuple(pw)))
        return None


def _convert_concat(conv: _Converter):
    """Concatenate takes a Tuple: handle it where the tuple's fields share one layout."""
    orig_rewrite = conv.rewrite

    def rewrite(node):
        if isinstance(node, Call) and node.op is tf_ops.CONCATENATE and isinstance(node.args[0], Tuple):
            fields = [conv.get(f) for f in node.args[0].fields]
            layouts = {lay for _, lay in fields}
            if len(layouts) == 1 and None not in layouts:
                layout = layouts.pop()
                src = conv.origin[node.args[0].fields[0]]
                if all(conv.origin[f] == src for f in node.args[0].fields):
                    conv.origin[node] = src
                    axis = layout.index(src[node.attrs.axis % len(src)])
                    return Call(node.op, [Tuple([n for n, _ in fields])], node.attrs.with_changes(axis=axis)), layout
        return orig_rewrite(node)

    conv.rewrite = rewrite
    return conv


def convert_layout(func: Function, desired_layouts: dict) -> Function:
    for name, value in desired_layouts.items():
        if name != "nn.conv2d":
            raise ValueError(f"ConvertLayout: only nn.conv2d layouts can be requested, got {name!r}")
        if value[0] not in _DEFAULT_KERNEL:
            raise ValueError(f"ConvertLayout: nn.conv2d data layout must be NCHW or NHWC, got {value[0]!r}")
    return _convert_concat(_Converter(desired_layouts)).run(func)
