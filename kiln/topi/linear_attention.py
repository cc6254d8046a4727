"""ONNX LinearAttention (opset 27): the recurrent state of linear / gated / delta / gated-delta
attention as one ``te.extern`` kernel, float32.

Per batch and key/value head, a state S (d_k x d_v) is carried over the sequence: gating scales
its row i by exp(decay) (per head, or per row i); the delta rule replaces v by
beta * (v - k S) (the part of v the state does not yet recall); then S += k^T v, and every query
head of the group reads scale * q S. The state lives in the second output (present_state), so
no scratch besides one d_v vector. Sequential over time, as the operator is.
"""

from __future__ import annotations

from kiln import te, tir
from kiln.ir import expr as E


def linear_attention(query, key, value, past, decay, beta, q_heads: int, kv_heads: int, scale: float,
                     gating: bool, delta: bool, decay_per_row: bool, beta_per_head: bool):
    """(output [B, T, Hq*dv], present_state [B, Hkv, dk, dv]); every input float32 (``decay``
    and ``beta`` may be dummies when the rule does not read them)."""
    B, T, qd = (int(d) for d in query.shape)
    dk, dv = qd // q_heads, int(value.shape[2]) // kv_heads
    group = q_heads // kv_heads
    f32 = "float32"

    def body(ins, outs):
        ib = tir.ir_builder.create()
        q, k, v, s0, g, bt = (ib.buffer_ptr(b) for b in ins)
        out, st = ib.buffer_ptr(outs[0]), ib.buffer_ptr(outs[1])
        vv = ib.allocate(f32, (dv,), name="vv")
        acc = ib.allocate(f32, (1,), name="acc")
        zero = E.const(0.0, f32)
        with ib.for_range(0, B, name="b") as b:
            with ib.for_range(0, kv_heads, name="h") as h:
                with ib.for_range(0, dk * dv, name="e0") as e:
                    st[b, h, e // dv, e % dv] = s0[b, h, e // dv, e % dv]
                with ib.for_range(0, T, name="t") as t:
                    if gating:
                        with ib.for_range(0, dk, name="i1") as i:
                            gi = g[b, t, h * dk + i] if decay_per_row else g[b, t, h]
                            e_ = ib.let("decay_e", tir.exp(gi))
                            with ib.for_range(0, dv, name="j1") as j:
                                st[b, h, i, j] = st[b, h, i, j] * e_
                    with ib.for_range(0, dv, name="j2") as j:
                        if delta:
                            acc[0] = zero
                            with ib.for_range(0, dk, name="i2") as i:
                                acc[0] = acc[0] + st[b, h, i, j] * k[b, t, h * dk + i]
                            bb = bt[b, t, h] if beta_per_head else bt[b, t, 0]
                            vv[j] = bb * (v[b, t, h * dv + j] - acc[0])
                        else:
                            vv[j] = v[b, t, h * dv + j]
                    with ib.for_range(0, dk, name="i3") as i:
                        ki = ib.let("ki", k[b, t, h * dk + i])
                        with ib.for_range(0, dv, name="j3") as j:
                            st[b, h, i, j] = st[b, h, i, j] + ki * vv[j]
                    with ib.for_range(0, group, name="gq") as gq:
                        qh = ib.let("qh", h * group + gq)
                        with ib.for_range(0, dv, name="j4") as j:
                            acc[0] = zero
                            with ib.for_range(0, dk, name="i4") as i:
                                acc[0] = acc[0] + q[b, t, qh * dk + i] * st[b, h, i, j]
                            out[b, t, qh * dv + j] = acc[0] * E.const(float(scale), f32)
        return ib.get()

    return te.extern([(B, T, q_heads * dv), (B, kv_heads, dk, dv)], [query, key, value, past, decay, beta], body,
                     name="linear_attention", dtype=[f32, f32], tag="linear_attention")
