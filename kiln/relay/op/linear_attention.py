"""``nn.linear_attention``: ONNX LinearAttention's recurrence (topi/linear_attention.py), on
float32 tensors; the converter casts around it."""

from __future__ import annotations

import numpy as np

from ..expr import TupleWrapper
from ..ty import TensorType, TupleType
from .registry import OpDef, OpPattern, RelCtx


def _rel(ctx: RelCtx):
    q, k, v, past = (ctx.ndim(i, n) for i, n in ((0, 3), (1, 3), (2, 3), (3, 4)))
    a = ctx.attrs
    if a.q_heads % a.kv_heads or int(q.shape[2]) % a.q_heads or int(v.shape[2]) % a.kv_heads:
        ctx.fail(f"query {q.shape} / value {v.shape} do not split into {a.q_heads} and {a.kv_heads} heads")
    b, t = (int(d) for d in q.shape[:2])
    dk, dv = int(q.shape[2]) // a.q_heads, int(v.shape[2]) // a.kv_heads
    if tuple(int(d) for d in past.shape) != (b, a.kv_heads, dk, dv):
        ctx.fail(f"past_state {past.shape} must be {(b, a.kv_heads, dk, dv)}")
    return TupleType([TensorType((b, t, a.q_heads * dv), "float32"), TensorType((b, a.kv_heads, dk, dv), "float32")])


def _ref(a, q, k, v, past, decay, beta):
    b, t, _ = q.shape
    dk, dv = q.shape[2] // a.q_heads, v.shape[2] // a.kv_heads
    group = a.q_heads // a.kv_heads
    q4 = q.reshape(b, t, a.q_heads, dk).astype(np.float64)
    k4 = k.reshape(b, t, a.kv_heads, dk).astype(np.float64)
    v4 = v.reshape(b, t, a.kv_heads, dv).astype(np.float64)
    s = past.astype(np.float64).copy()
    out = np.zeros((b, t, a.q_heads, dv))
    for i in range(t):
        if a.gating:
            g = decay[:, i].reshape(b, a.kv_heads, dk if a.decay_per_row else 1)
            s = s * np.exp(g)[..., None]
        vt = v4[:, i]
        if a.delta:
            bt = beta[:, i].reshape(b, -1)[:, :, None] if a.beta_per_head else beta[:, i, :1][:, :, None]
            vt = bt * (vt - np.einsum("bhdm,bhd->bhm", s, k4[:, i]))
        s = s + k4[:, i][..., :, None] * vt[..., None, :]
        out[:, i] = a.scale * np.einsum("bhd,bhdm->bhm", q4[:, i], np.repeat(s, group, axis=1))
    return out.reshape(b, t, -1).astype(np.float32), s.astype(np.float32)


LINEAR_ATTENTION = OpDef(
    "nn.linear_attention", ("query", "key", "value", "past_state", "decay", "beta"),
    {"q_heads": 1, "kv_heads": 1, "scale": 1.0, "gating": False, "delta": False, "decay_per_row": False,
     "beta_per_head": True}, _rel, OpPattern.OPAQUE, _ref, num_outputs=2,
    doc="ONNX LinearAttention: (output, present_state), float32")

OPS = [LINEAR_ATTENTION]


def linear_attention(query, key, value, past, decay, beta, **attrs) -> TupleWrapper:
    return LINEAR_ATTENTION(query, key, value, past, decay, beta, **attrs)
