"""CUDA rewrites run at the end of FlattenRows (issue 37): parallel dense layers of one input as
one dense layer (``combine_parallel_dense``), and float32 norms between half casts as half norms
(``fold_norm_casts``, below).

BERT's and ViT's attention computes Q, K and V as three dense layers of the same rows, each with
its own bias: three kernels of N = 768, each with too few output tiles to fill a GPU (128 tokens:
96 blocks of 32 x 32 on tensor cores). Here dense layers that read the same 2-D input with constant
weights of the same dtype and reduction, and whose epilogues are the same chain of casts and
bias adds (the chain up to the first op that is not one of those; biases constants of shape (N,)
or (1, N)), become one dense of the concatenated weights with the concatenated biases, and each
old chain's end becomes a ``strided_slice`` of its columns. The slices join the injective kernels
after them (the head split's reshape and transpose), so the layer has one product kernel instead
of three. GPT-2's attention already has one (its c_attn is one weight). Each output is the same
sum of the same products (the kernels may tile and order it differently: rounding-level changes).
"""

from __future__ import annotations

import numpy as np

from ..expr import Call, Constant, Function, const
from ..op import nn, tensor, transform as tf
from ..visitor import ExprMutator
from .infer_type import infer

MAX_CHAIN = 4  # casts and bias adds followed after a dense


def _shape(e) -> tuple:
    return tuple(int(d) for d in e.checked_type.shape)


def _bias(e, n: int):
    """e as a constant bias of n columns (shape (n,) or (1, n)), else None."""
    if isinstance(e, Constant) and e.data.shape in ((n,), (1, n)):
        return e
    return None


def _chain(dense, consumers: dict):
    """(steps, end): the casts and bias adds after ``dense`` that are the only consumers of what
    they read; each step ("cast", dtype) or ("add", side, bias constant)."""
    n = _shape(dense)[1]
    steps, end = [], dense
    while len(steps) < MAX_CHAIN:
        users = consumers.get(end, [])
        if len(users) != 1 or not isinstance(users[0], Call):
            break
        user = users[0]
        if user.op is tf.CAST:
            steps.append(("cast", str(user.attrs.dtype)))
        elif user.op is tensor.ADD and len(user.args) == 2:
            side = 0 if user.args[1] is end else 1  # the bias's position
            bias = _bias(user.args[side], n)
            if bias is None or user.args[1 - side] is not end or _shape(user) != _shape(end):
                break
            steps.append(("add", side, bias))
        else:
            break
        end = user
    return steps, end


def _signature(steps) -> tuple:
    return tuple((s[0], s[1]) if s[0] == "cast" else (s[0], s[1], s[2].data.ndim, str(s[2].data.dtype))
                 for s in steps)


class _Combine(ExprMutator):
    def __init__(self, groups: list):
        super().__init__()
        self.slices: dict = {}  # old chain end -> (group, column offset, columns)
        for group in groups:
            offset = 0
            for dense, steps, end in group:
                n = _shape(dense)[1]
                self.slices[end] = (id(group), offset, n)
                offset += n
        self.groups = {id(g): g for g in groups}
        self.made: dict = {}  # group id -> the combined chain's end

    def visit_Function(self, f):
        return f if f.attrs.get("Primitive") else super().visit_Function(f)

    def visit_Call(self, call):
        hit = self.slices.get(call)
        if hit is None:
            return super().visit_Call(call)
        key, offset, n = hit
        if key not in self.made:
            self.made[key] = self._combined(self.groups[key])
        rows = _shape(call)[0]
        return tf.strided_slice(self.made[key], [0, offset], [rows, offset + n])

    def _combined(self, group):
        first, steps, _ = group[0]
        weight = const(np.ascontiguousarray(np.concatenate([d.args[1].data for d, _, _ in group], axis=0)))
        out = nn.dense(self.visit(first.args[0]), weight, out_dtype=first.attrs.out_dtype)
        for i, step in enumerate(steps):
            if step[0] == "cast":
                out = tf.cast(out, step[1])
                continue
            side = step[1]
            biases = [s[i][2].data for _, s, _ in group]
            bias = const(np.ascontiguousarray(np.concatenate(biases, axis=-1)))
            out = tensor.add(bias, out) if side == 0 else tensor.add(out, bias)
        return out


def combine_parallel_dense(func: Function) -> Function:
    """The rewrite of the module docstring on ``func`` (typed); returns it typed."""
    from ..analysis import users
    from ..visitor import post_order

    consumers = users(func.body)
    by_input: dict = {}
    for node in post_order(func.body):
        if not (isinstance(node, Call) and node.op is nn.DENSE and isinstance(node.args[1], Constant)):
            continue
        data = node.args[0]
        if len(_shape(data)) != 2 or node.args[1].data.ndim != 2:
            continue
        steps, end = _chain(node, consumers)
        key = (data, str(node.args[1].data.dtype), node.args[1].data.shape[1], str(node.attrs.out_dtype),
               _signature(steps))
        by_input.setdefault(key, []).append((node, steps, end))
    groups = [g for g in by_input.values() if len(g) > 1]
    if not groups:
        return func
    return infer(_Combine(groups).visit(func))


HALVES = ("float16", "bfloat16")


class _NormCasts(ExprMutator):
    def __init__(self, consumers: dict):
        super().__init__()
        self.consumers = consumers
        self.changed = False

    def visit_Function(self, f):
        return f if f.attrs.get("Primitive") else super().visit_Function(f)

    def visit_Call(self, call):
        from ..op import nn_norm

        if call.op is tf.CAST and str(call.attrs.dtype) in HALVES:
            norm = call.args[0]
            if isinstance(norm, Call) and norm.op in (nn_norm.LAYER_NORM, nn_norm.SOFTMAX) and \
                    self.consumers.get(norm) == [call]:
                wide = norm.args[0]
                if isinstance(wide, Call) and wide.op is tf.CAST and self.consumers.get(wide) == [norm] and \
                        str(wide.args[0].checked_type.dtype) == str(call.attrs.dtype) and \
                        str(norm.checked_type.dtype) == "float32":
                    self.changed = True
                    return Call(norm.op, [self.visit(wide.args[0])] + [self.visit(a) for a in norm.args[1:]],
                                norm.attrs)
        return super().visit_Call(call)


def fold_norm_casts(func: Function) -> Function:
    """``cast(layer_norm(cast(x, "float32"), gamma, beta), half)``, x of that half dtype and each
    call the other's only consumer (ToMixedPrecision keeps the norm float32), becomes
    ``layer_norm(x, gamma, beta)`` of the half dtype: on CUDA topi.gpu.layer_norm computes it in
    float32 and rounds once, so the result is the same, in one kernel instead of three (the two
    casts were kernels of their own: the norm is opaque to FuseOps). Softmax likewise
    (topi.gpu.softmax): its input cast joins the kernel before it (the scores' batch_matmul)."""
    from ..analysis import users

    rewrite = _NormCasts(users(func.body))
    out = rewrite.visit(func)
    return infer(out) if rewrite.changed else func
