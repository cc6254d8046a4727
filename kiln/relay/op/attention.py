"""``nn.attention``: scaled dot-product attention of a batch of heads as one op.

    out[b, i, :] = sum_j softmax_j(scale * q[b, i, :] . k[b, j, :] + mask[b, i, j]) * v[b, j, :]

Inputs (B is batch x heads, M queries, N keys, D and E the head widths):

    query  (B, M, D)
    key    (B, N, D), or (B, D, N) with ``key_transposed`` (what exporters feed the first MatMul)
    value  (B, N, E), or (B, E, N) with ``value_transposed``
    mask   additive, broadcast to (B, M, N): a scalar (no mask) or (Bm, Mm, N) with Bm in (1, B)
           and Mm in (1, M): BERT's padding mask (1, 1, N), GPT-2's causal mask (1, M, N)

Output (B, M, E). With ``heads = H > 0`` the heads stay side by side in the rows the dense
layers write (one sequence): query (M, H*D), key (N, H*D), value (N, H*E), output (M, H*E),
mask as above with B = H; head h reads columns h*D ... h*D + D - 1 (the head-split reshape and
transpose of the exporters' graph, and the one that joins the heads after, become no kernels).

The FuseAttention pass (relay/transform/fuse_attention.py) forms it from the
batch_matmul -> scale -> add mask -> softmax -> batch_matmul chain that ``torch.onnx.export``
writes for BERT, GPT-2, ViT and Whisper; topi/x86/attention.py computes it so that a block of
a head's score rows stays in cache between the two products. The GPU issue's flash-attention
schedule belongs under the same op.
"""

from __future__ import annotations

import numpy as np

from ..ty import TensorType
from .registry import OpDef, OpPattern, RelCtx

_NAME = "nn.attention"


def _dims(ctx: RelCtx):
    a = ctx.attrs
    if a.heads:
        return _row_dims(ctx)
    q = ctx.ndim(0, 3, "B, M, D")
    k = ctx.ndim(1, 3, "B, D, N" if a.key_transposed else "B, N, D")
    v = ctx.ndim(2, 3, "B, E, N" if a.value_transposed else "B, N, E")
    b, m, d = q.shape
    kd, n = (k.shape[1], k.shape[2]) if a.key_transposed else (k.shape[2], k.shape[1])
    vn, e = (v.shape[2], v.shape[1]) if a.value_transposed else (v.shape[1], v.shape[2])
    if k.shape[0] != b or v.shape[0] != b:
        ctx.fail(f"query, key and value need the same batch; got {q.shape}, {k.shape}, {v.shape}")
    if kd != d:
        ctx.fail(f"input 'key' {k.shape} has head width {kd}; 'query' {q.shape} has {d}")
    if vn != n:
        ctx.fail(f"input 'value' {v.shape} has {vn} positions; 'key' {k.shape} has {n}")
    return b, m, n, d, e


def _row_dims(ctx: RelCtx):
    a, h = ctx.attrs, int(ctx.attrs.heads)
    if a.key_transposed or a.value_transposed:
        ctx.fail("heads > 0 reads key and value as rows (N, H*D): key_transposed and value_transposed must be False")
    q, k, v = (ctx.ndim(i, 2, shape) for i, shape in enumerate(("M, H*D", "N, H*D", "N, H*E")))
    (m, hd), (n, kd), (vn, he) = q.shape, k.shape, v.shape
    if hd % h or he % h:
        ctx.fail(f"heads={h} must divide the query's {hd} and the value's {he} columns")
    if kd != hd:
        ctx.fail(f"input 'key' {k.shape} has {kd} columns; 'query' {q.shape} has {hd}")
    if vn != n:
        ctx.fail(f"input 'value' {v.shape} has {vn} positions; 'key' {k.shape} has {n}")
    return h, m, n, hd // h, he // h


def _attention_rel(ctx: RelCtx):
    b, m, n, _, e = _dims(ctx)
    ctx.same_dtype(0, 1, 2)  # the mask is cast to it
    mask = ctx.tensor(3)
    if mask.ndim and (mask.ndim != 3 or mask.shape[0] not in (1, b) or mask.shape[1] not in (1, m)
                      or mask.shape[2] != n):
        ctx.fail(f"input 'mask' has shape {mask.shape}; expected a scalar or (1 or {b}, 1 or {m}, {n})")
    return TensorType((m, b * e) if ctx.attrs.heads else (b, m, e), ctx.tensor(0).dtype)


def _attention_ref(a, q, k, v, mask):
    if a.heads:  # rows: each head's columns as (H, rows, width), joined back after
        h = int(a.heads)
        heads = lambda x: x.reshape(x.shape[0], h, -1).transpose(1, 0, 2)  # noqa: E731
        out = _head_major_ref(heads(q), heads(k).transpose(0, 2, 1), heads(v), mask, a.scale)
        return out.transpose(1, 0, 2).reshape(q.shape[0], -1)
    k = k if a.key_transposed else k.transpose(0, 2, 1)
    v = v.transpose(0, 2, 1) if a.value_transposed else v
    return _head_major_ref(q, k, v, mask, a.scale)


def _head_major_ref(q, kt, v, mask, scale: float):
    """softmax(scale * q kt + mask) v in float64, q (B, M, D), kt (B, D, N), v (B, N, E)."""
    s = np.matmul(q.astype(np.float64), kt.astype(np.float64)) * scale + mask.astype(np.float64)
    s = np.exp(s - s.max(axis=-1, keepdims=True))
    p = s / s.sum(axis=-1, keepdims=True)
    return np.matmul(p, v.astype(np.float64)).astype(q.dtype)


ATTENTION = OpDef(_NAME, ("query", "key", "value", "mask"),
                  {"scale": 1.0, "key_transposed": False, "value_transposed": False, "heads": 0},
                  _attention_rel, OpPattern.OPAQUE, _attention_ref,
                  doc="softmax(scale * q k^T + mask) v over a batch of heads, as one kernel")

OPS = [ATTENTION]


def attention(query, key, value, mask=None, scale=1.0, key_transposed=False, value_transposed=False, heads=0):
    """The fused attention op (module docstring); ``mask=None`` is no mask; ``heads > 0``: rows.

    >>> out = relay.nn.attention(q, k, v, mask, scale=0.125)
    """
    from ..expr import const

    if mask is None:
        mask = const(np.zeros((), dtype="float32"))
    return ATTENTION(query, key, value, mask, scale=float(scale), key_transposed=bool(key_transposed),
                     value_transposed=bool(value_transposed), heads=int(heads))
