"""FuseAttention: the attention chain of a transformer as one ``nn.attention`` op (relay/op/attention.py).

``torch.onnx.export`` writes a head's attention as two batched products around a softmax; kiln's
ONNX importer gives (BERT; GPT-2 and ViT differ only in the mask: causal constant / none):

    %s = nn.batch_matmul(%q, %kt, transpose_b=False)            q (B, M, D), kt (B, D, N)
    %1 = reshape(%s, newshape=[1, H, M, N])
    %2 = multiply(%1, 0.125f)                                   or divide by sqrt(D), or none
    %3 = add(%2, %mask)                                         optional, broadcast to (1, H, M, N)
    %4 = nn.softmax(%3)                                         last axis
    %5 = reshape(%4, newshape=[B, M, N])                        (and same-dtype casts anywhere)
    %o = nn.batch_matmul(%5, %v, transpose_b=False)             v (B, N, E)
  ->
    %o = nn.attention(%q, %kt, %v, reshape(%mask, [1, M, N]), scale=0.125, key_transposed=True)

On x86 (``rows=True``), when the query, key and value are the exporters' head splits of one
sequence's rows, ``reshape(transpose(reshape(X, (1, S, H, D)), ...), ...)``, and the output is
joined back the same way, ``reshape(transpose(reshape(%o, (1, H, M, E)), (0, 2, 1, 3)), rows)``:
    %o = nn.attention(X_q, X_k, X_v, mask, scale=0.125, heads=H)        X (S, H*D), %o (M, H*E)
so the four copy kernels of a layer (ViT-B/16: 48 of 160) go; the x86 kernel reads the heads
in place (it copies the key, transposed, as it did the padded key before).

Every intermediate must have the next node as its only consumer (otherwise the scores are needed
anyway). The mask keeps its own shape when it broadcasts over the batch (one copy for all heads);
a mask that varies over some leading axes only is broadcast to all of them. Runs for x86 targets
(the only ones with an nn.attention compute) after constant folding, before FuseOps.
"""

from __future__ import annotations

import math

import numpy as np

from ..analysis import only_user, users
from ..expr import Call, Constant, Function, Tuple, const
from ..op import nn as nn_ops
from ..op import nn_norm, tensor
from ..op import transform as tf
from ..op.attention import attention
from ..op.registry import OpDef, OpPattern
from ..visitor import DataflowRewriter


def _shape(e) -> tuple:
    return tuple(int(d) for d in e.checked_type.shape)


def _dtype(e) -> str:
    return str(e.checked_type.dtype)


def _scalar(e):
    """The value of a scalar (or one-element) float constant, else None."""
    if isinstance(e, Constant) and e.data.size == 1 and e.data.dtype.kind == "f":
        return float(e.data.reshape(()))
    return None


class _Chain:
    """Walks producer links that the fusion may skip, checking single use."""

    def __init__(self, consumers: dict):
        self.consumers = consumers

    def single(self, node, user) -> bool:
        return only_user(node, self.consumers, user)

    def skip_moves(self, node):
        """Through reshapes and same-dtype casts (each used once) to the node that computes."""
        while isinstance(node, Call) and (node.op is tf.RESHAPE or (
                node.op is tf.CAST and _dtype(node) == _dtype(node.args[0]))):
            inner = node.args[0]
            if not self.single(inner, node):
                return node
            node = inner
        return node

    def scores(self, node):
        """(batch_matmul, scale) when node is scale * batch_matmul (through moves), else None."""
        scale = 1.0
        while True:
            node = self.skip_moves(node)
            if not isinstance(node, Call):
                return None
            if node.op is nn_ops.BATCH_MATMUL:
                return (node, scale) if not node.attrs.transpose_a else None
            if node.op not in (tensor.MULTIPLY, tensor.DIVIDE):
                return None
            x, c = node.args
            if node.op is tensor.MULTIPLY and _scalar(x) is not None:
                x, c = c, x
            value = _scalar(c)
            if value is None or value == 0.0 or not self.single(x, node):
                return None
            scale = scale * value if node.op is tensor.MULTIPLY else scale / value
            node = x


def _match(bmm2: Call, chain: _Chain):
    """The pieces of the pattern ending at ``bmm2`` (module docstring), or None."""
    if bmm2.op is not nn_ops.BATCH_MATMUL or bmm2.attrs.transpose_a:
        return None
    probs, value = bmm2.args
    sm = chain.skip_moves(probs)
    if not (isinstance(sm, Call) and sm.op is nn_norm.SOFTMAX and chain.single(probs, bmm2)):
        return None
    if sm.attrs.axis not in (-1, len(_shape(sm)) - 1) or not chain.single(sm.args[0], sm):
        return None
    x = chain.skip_moves(sm.args[0])
    mask, found = None, chain.scores(x)
    if found is None and isinstance(x, Call) and x.op is tensor.ADD:
        for s_side, m_side in ((0, 1), (1, 0)):
            found = chain.scores(x.args[s_side]) if chain.single(x.args[s_side], x) else None
            if found is not None:
                mask = x.args[m_side]
                break
    if found is None:
        return None
    bmm1, scale = found
    q, k = bmm1.args
    b, m, n = _shape(bmm1)
    if _shape(probs) != (b, m, n) or len({_shape(q)[0], _shape(k)[0], _shape(value)[0], b}) != 1:
        return None
    # float32 only: the fused kernel sums in its input type, where the unfused float16 chain sums in float32
    if len({_dtype(q), _dtype(k), _dtype(value), _dtype(bmm2)}) != 1 or _dtype(q) != "float32":
        return None
    lead = _shape(sm)[:-2]
    if _shape(sm)[-2:] != (m, n) or math.prod(lead) != b:
        return None
    return q, k, value, bmm1.attrs.transpose_b, bmm2.attrs.transpose_b, scale, mask, lead


def _mask3(typed, mask, lead: tuple, m: int, n: int, b: int):
    """The mask (``typed``: the original node, ``mask``: its rewritten form) as (1 or B, 1 or M, N)
    for nn.attention, or None when it does not broadcast so."""
    ms = _shape(typed)
    if len(ms) > len(lead) + 2:
        return None
    ms = (1,) * (len(lead) + 2 - len(ms)) + ms
    if ms[-1] != n or ms[-2] not in (1, m):
        return None
    mlead = ms[:-2]
    if any(d not in (1, full) for d, full in zip(mlead, lead)):
        return None
    rows = ms[-2]
    if rows > 1 and not isinstance(mask, Constant) and _row_invariant(typed):  # one row serves all
        mask = tf.strided_slice(mask, [0], [1], axes=[len(_shape(typed)) - 2])
        rows = 1
    if all(d == 1 for d in mlead):
        shape = (1, rows, n)
    else:
        if tuple(mlead) != tuple(lead):
            mask = tf.BROADCAST_TO(mask, shape=tuple(lead) + (rows, n))
        shape = (b, rows, n)
    if isinstance(mask, Constant):
        return _shrunk(mask.data.reshape(shape))
    return tf.RESHAPE(mask, newshape=shape)


def _row_invariant(e, depth: int = 0) -> bool:
    """Whether ``e`` (typed) has the same value along its second-to-last axis (a mask row for every
    query): elementwise and broadcast ops of such operands, constants equal along it, operands of
    size 1 there or without it. BERT's padding mask is where(and(all-true (1, 1, M, 1), pad (1, 1,
    1, N)), ...): (1, 1, M, N) in the graph, one row of N in value."""
    shape = _shape(e)
    if len(shape) < 2 or shape[-2] == 1:
        return True
    if isinstance(e, Constant):
        return bool((e.data == e.data[..., :1, :]).all())
    if depth > 16 or not isinstance(e, Call) or not isinstance(e.op, OpDef):
        return False
    if e.op is tf.BROADCAST_TO or e.op.pattern <= OpPattern.BROADCAST:
        return all(_row_invariant(a, depth + 1) for a in e.args)
    return False


def _shrunk(data: np.ndarray):
    """A constant mask (Bm, Mm, N) without the axes it repeats along (one row for all queries,
    one for all heads), or a scalar 0 when it adds nothing: each element read costs a load and
    an add per score (the dynamo exporter's ViT adds a (1, 1, 197, 197) mask of zeros, 0.5 ms of
    an attention's 1.2 ms). Exact: the values added are the same; +0.0 for an all-zero mask
    turns only a -0.0 score into +0.0, which exp maps to the same 1."""
    if not np.any(data):
        return const(np.zeros((), dtype=data.dtype))
    for axis in (0, 1):
        if data.shape[axis] > 1 and (data == data[(slice(None),) * axis + (slice(0, 1),)]).all():
            data = data[(slice(None),) * axis + (slice(0, 1),)]
    return const(np.ascontiguousarray(data))


def _split_heads(node, axes: tuple, chain: _Chain):
    """(X, H) when ``node`` is ``reshape(transpose(reshape(X, (1, S, H, W)), axes), ...)`` (the
    exporters' head split of X's rows (S, H*W) or (1, S, H*W)), else None. The transpose may be
    several whose composition is ``axes``, with one-input concatenates between them (GPT-2's
    key/value cache), each step used once."""
    if not (isinstance(node, Call) and node.op is tf.RESHAPE and len(_shape(node.args[0])) == 4
            and _shape(node.args[0]) == (1,) + _shape(node)):
        return None  # the outer reshape only drops the leading 1
    net, user, cur = (0, 1, 2, 3), node, node.args[0]
    while isinstance(cur, Call) and chain.single(cur, user):
        if cur.op is tf.TRANSPOSE and cur.attrs.axes is not None and len(cur.attrs.axes) == 4:
            net = tuple(int(cur.attrs.axes[k]) for k in net)
        elif cur.op is tf.CONCATENATE and isinstance(cur.args[0], Tuple) and len(cur.args[0].fields) == 1 \
                and chain.single(cur.args[0], cur):
            user, cur = cur.args[0], cur.args[0].fields[0]
            continue
        else:
            break
        user, cur = cur, cur.args[0]
    r = cur
    if net != axes or not (isinstance(r, Call) and r.op is tf.RESHAPE and chain.single(r, user)
                           and len(_shape(r)) == 4):
        return None
    one, rows, h, w = _shape(r)
    x = r.args[0]
    if one != 1 or _shape(x) not in ((rows, h * w), (1, rows, h * w)):
        return None
    return x, h


def _rows_form(call, chain: _Chain):
    """The pieces of ``reshape(transpose(reshape(attention chain, (1, H, M, E)), (0, 2, 1, 3)),
    rows)`` whose query, key and value are head splits of rows (a batch of one sequence), for
    nn.attention with ``heads=H``; else None."""
    t = call.args[0]
    if not (isinstance(t, Call) and t.op is tf.TRANSPOSE and chain.single(t, call)
            and tuple(int(a) for a in t.attrs.axes or ()) == (0, 2, 1, 3)):
        return None
    r = t.args[0]
    if not (isinstance(r, Call) and r.op is tf.RESHAPE and chain.single(r, t) and len(_shape(r)) == 4):
        return None
    bmm2 = r.args[0]
    if not (isinstance(bmm2, Call) and chain.single(bmm2, r)):
        return None
    found = _match(bmm2, chain)
    if found is None:
        return None
    q, k, v, k_nd, v_en, scale, mask, lead = found
    one, h, m, e = _shape(r)
    if one != 1 or tuple(lead) != (1, h) or v_en or _shape(call)[-1] != h * e:
        return None
    splits = [_split_heads(x, axes, chain) for x, axes in ((q, (0, 2, 1, 3)), (k, (0, 2, 1, 3) if k_nd else (0, 2, 3, 1)),
                                                           (v, (0, 2, 1, 3)))]
    if any(x is None or x[1] != h for x in splits):
        return None
    return [x for x, _ in splits], scale, mask, lead, h, m, e


class _Fuse(DataflowRewriter):
    def __init__(self, consumers: dict, rows: bool = False):
        super().__init__(consumers)
        self.rows, self.chain = rows, _Chain(consumers)

    def visit_Call(self, call):
        if self.rows and call.op is tf.RESHAPE:
            out = self._rows(call)
            if out is not None:
                return out
        found = _match(call, self.chain)
        if found is None:
            return super().visit_Call(call)
        q, k, v, k_nd, v_en, scale, mask, lead = found
        b, m, n = _shape(call.args[0])
        mask3 = None
        if mask is not None:
            mask3 = _mask3(mask, self.visit(mask), lead, m, n, b)
            if mask3 is None:
                return super().visit_Call(call)
        return attention(self.visit(q), self.visit(k), self.visit(v), mask3, scale, key_transposed=not k_nd,
                         value_transposed=bool(v_en))

    def _rows(self, call):
        found = _rows_form(call, self.chain)
        if found is None:
            return None
        xs, scale, mask, lead, h, m, e = found
        mask3 = None
        if mask is not None:
            mask3 = _mask3(mask, self.visit(mask), lead, m, _shape(xs[1])[-2], h)
            if mask3 is None:
                return None
        rows = [self.visit(x) if len(_shape(x)) == 2 else tf.reshape(self.visit(x), _shape(x)[1:]) for x in xs]
        return tf.reshape(attention(*rows, mask3, scale, heads=h), _shape(call))


def fuse_attention(func: Function, rows: bool = False) -> Function:
    """Replace each attention chain of ``func`` (typed) by nn.attention; ``rows``: with
    ``heads`` where the chain splits rows into heads and joins them after (module docstring)."""
    return _Fuse(users(func.body), rows).visit(func)
