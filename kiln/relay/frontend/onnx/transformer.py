"""The opset-23+ sequence-model ops: Attention, RMSNormalization, RotaryEmbedding, TensorScatter
(a KV-cache write), CausalConvWithState (a depthwise causal conv1d carrying its state).

Attention is written as plain relay ops (scale, batch_matmul, mask add, softmax, batch_matmul),
the pattern the attention fusion looks for; grouped-query heads repeat each K/V head, a KV
cache (past_key/past_value) is concatenated on the sequence axis."""

from __future__ import annotations

import numpy as np

from ...expr import const
from ...op import nn_norm, reduce, tensor
from ...op import transform as tf


def _c(value, dtype):
    return const(np.asarray(value, dtype=dtype))


def _bmm(ctx, a, b):
    from .nn import CONVERTERS as NN
    return NN["MatMul"](ctx, [a, b], {})


def _heads_first(ctx, x, heads, what):
    """(B, S, H*D) -> (B, H, S, D); 4-D inputs pass through."""
    shape = ctx.shape_of(x)
    if len(shape) == 4:
        return x
    if len(shape) != 3:
        ctx.fail(f"input {what} must be 3-D (batch, sequence, hidden) or 4-D (batch, heads, sequence, head size), "
                 f"got shape {list(shape)}")
    if not heads or shape[2] % heads:
        ctx.fail(f"input {what} of shape {list(shape)} needs the attribute q_num_heads/kv_num_heads "
                 f"dividing its hidden size, got {heads}")
    return tf.transpose(tf.reshape(x, (shape[0], shape[1], heads, shape[2] // heads)), (0, 2, 1, 3))


def _as_bias(ctx, mask, dtype):
    """A boolean mask (True: attend) as 0/-inf; a float mask as is."""
    if ctx.type_of(mask).dtype == "bool":
        return tensor.where(mask, _c(0, dtype), _c(-np.inf, dtype))
    return tf.cast(mask, dtype) if ctx.type_of(mask).dtype != dtype else mask


def _in_float32(fn):
    """A converter that computes a float16 node in float32 and rounds its outputs once (the
    operators' references stay within one rounding; float16 sums and activations do not)."""
    def convert(ctx, ins, attrs):
        if str(ctx.type_of(ins[0]).dtype) != "float16":
            return fn(ctx, ins, attrs)
        wide = [tf.cast(x, "float32") if x is not None and str(ctx.type_of(x).dtype) == "float16" else x for x in ins]
        outs = fn(ctx, wide, attrs)
        outs = outs if isinstance(outs, list) else [outs]
        return [tf.cast(o, "float16") if o is not None and str(ctx.type_of(o).dtype) == "float32" else o for o in outs]
    return convert


def _attention(ctx, ins, attrs):
    ins = list(ins) + [None] * (7 - len(ins))
    q, k, v, mask, past_k, past_v, nonpad = ins[:7]
    dtype = ctx.type_of(q).dtype
    three_d = len(ctx.shape_of(q)) == 3
    q = _heads_first(ctx, q, attrs.get("q_num_heads"), "Q")
    k = _heads_first(ctx, k, attrs.get("kv_num_heads"), "K")
    v = _heads_first(ctx, v, attrs.get("kv_num_heads"), "V")
    if past_k is not None:
        k = tf.concatenate([past_k, k], 2)
    if past_v is not None:
        v = tf.concatenate([past_v, v], 2)
    present_k, present_v = k, v
    b, hq, sq, d = ctx.shape_of(q)
    hk, skv = ctx.shape_of(k)[1], ctx.shape_of(k)[2]
    past = ctx.shape_of(past_k)[2] if past_k is not None else 0
    scale = attrs.get("scale")
    scale = float(scale if scale is not None else 1 / np.sqrt(d))
    if hq != hk:
        if hq % hk:
            ctx.fail(f"Q has {hq} heads, not a multiple of the {hk} heads of K and V")
        rep = hq // hk

        def repeat(x):
            s = ctx.shape_of(x)
            wide = tf.broadcast_to(tf.expand_dims(x, 2), (s[0], s[1], rep) + tuple(s[2:]))
            return tf.reshape(wide, (s[0], s[1] * rep) + tuple(s[2:]))
        k, v = repeat(k), repeat(v)
    # scaled after the product, as exporters write it (the FuseAttention pattern)
    scores = tensor.multiply(_bmm(ctx, q, tf.transpose(k, (0, 1, 3, 2))), _c(scale, dtype))
    softcap = attrs.get("softcap", 0.0)
    if softcap and softcap > 0:
        scores = tensor.multiply(tensor.tanh(tensor.divide(scores, _c(softcap, dtype))), _c(softcap, dtype))
    capped = scores
    bias = None
    if mask is not None:
        mshape = ctx.shape_of(mask)
        if not mshape:
            ctx.fail("attn_mask is 0-d; it needs a key axis (shape (..., query, key))")
        if mshape[-1] < skv:  # a mask shorter than the keys: the missing columns are masked out
            fill = False if ctx.type_of(mask).dtype == "bool" else -np.inf
            pad = np.full(tuple(mshape[:-1]) + (skv - mshape[-1],), fill,
                          dtype="bool" if fill is False else ctx.type_of(mask).dtype)
            mask = tf.concatenate([mask, const(pad)], len(mshape) - 1)
        bias = _as_bias(ctx, mask, dtype)
    if attrs.get("is_causal", 0):
        causal = np.where(np.arange(skv)[None, :] > np.arange(sq)[:, None] + past, -np.inf, 0).astype(dtype)
        bias = const(causal) if bias is None else tensor.add(bias, const(causal))
    if nonpad is not None:
        keep = tensor.less(const(np.arange(skv, dtype="int64")[None, :]), tf.reshape(tf.cast(nonpad, "int64"), (-1, 1)))
        pad_bias = tf.reshape(tensor.where(keep, _c(0, dtype), _c(-np.inf, dtype)), (b, 1, 1, skv))
        bias = pad_bias if bias is None else tensor.add(bias, pad_bias)
    with_bias = tensor.add(scores, bias) if bias is not None else scores
    probs = nn_norm.softmax(with_bias, -1)
    out = _bmm(ctx, probs, v)
    if three_d:
        dv = ctx.shape_of(out)[3]
        out = tf.reshape(tf.transpose(out, (0, 2, 1, 3)), (b, sq, hq * dv))
    mode = attrs.get("qk_matmul_output_mode", 0)
    qk = {0: capped, 1: capped, 2: with_bias, 3: probs}.get(mode)
    if qk is None:
        ctx.fail(f"attribute qk_matmul_output_mode={mode} is not one of 0, 1, 2, 3")
    return [out, present_k, present_v, qk]


def _rms_norm(ctx, ins, attrs):
    x, scale = ins[0], ins[1]
    shape = ctx.shape_of(x)
    dtype = ctx.type_of(x).dtype
    axis = attrs.get("axis", -1)
    if not isinstance(axis, int) or not -len(shape) <= axis < len(shape):
        ctx.fail(f"attribute axis={axis} is outside the input's {len(shape)} dimensions (shape {list(shape)})")
    axis %= len(shape)
    axes = list(range(axis, len(shape)))
    mean_sq = reduce.mean(tensor.multiply(x, x), axes, keepdims=True)
    inv = tensor.rsqrt(tensor.add(mean_sq, _c(attrs.get("epsilon", 1e-5), dtype)))
    return tensor.multiply(tensor.multiply(x, inv), scale)


def _rotary(ctx, ins, attrs):
    x, cos, sin = ins[0], ins[1], ins[2]
    pos = ins[3] if len(ins) > 3 else None
    shape = ctx.shape_of(x)
    if len(shape) == 4:  # (B, H, S, D) -> (B, S, H, D)
        xs = tf.transpose(x, (0, 2, 1, 3))
    else:
        heads = attrs.get("num_heads", 0)
        if len(shape) != 3 or not heads or shape[2] % heads:
            ctx.fail(f"input of shape {list(shape)} must be 4-D, or 3-D with num_heads dividing its last axis")
        xs = tf.reshape(x, (shape[0], shape[1], heads, shape[2] // heads))
    b, s, h, d = ctx.shape_of(xs)
    rot = attrs.get("rotary_embedding_dim", 0) or d
    half = rot // 2
    for what, cache in (("cos_cache", cos), ("sin_cache", sin)):
        if len(ctx.shape_of(cache)) < 2:
            ctx.fail(f"{what} has shape {list(ctx.shape_of(cache))}; it needs (positions, rotary_embedding_dim / 2) "
                     "or (batch, sequence, rotary_embedding_dim / 2)")
    if pos is not None:
        from .tensor import constant_indices
        pos = constant_indices(ctx, pos, ctx.shape_of(cos)[0], "position_ids")
        cos, sin = tf.take(cos, pos, axis=0), tf.take(sin, pos, axis=0)
    if ctx.shape_of(cos)[-1] != half:
        ctx.fail(f"cos_cache's last axis is {ctx.shape_of(cos)[-1]}, not rotary_embedding_dim/2 = {half}")
    cos, sin = tf.expand_dims(cos, 2), tf.expand_dims(sin, 2)
    part = tf.strided_slice(xs, [0], [rot], axes=[3])
    if attrs.get("interleaved", 0):
        pairs = tf.reshape(part, (b, s, h, half, 2))
        x1 = tf.squeeze(tf.strided_slice(pairs, [0], [1], axes=[4]), [4])
        x2 = tf.squeeze(tf.strided_slice(pairs, [1], [2], axes=[4]), [4])
    else:
        x1 = tf.strided_slice(part, [0], [half], axes=[3])
        x2 = tf.strided_slice(part, [half], [rot], axes=[3])
    real = tensor.subtract(tensor.multiply(cos, x1), tensor.multiply(sin, x2))
    imag = tensor.add(tensor.multiply(sin, x1), tensor.multiply(cos, x2))
    if attrs.get("interleaved", 0):
        rotated = tf.reshape(tf.stack([real, imag], 4), (b, s, h, rot))
    else:
        rotated = tf.concatenate([real, imag], 3)
    if rot < d:
        rotated = tf.concatenate([rotated, tf.strided_slice(xs, [rot], [d], axes=[3])], 3)
    if len(shape) == 4:
        return tf.transpose(rotated, (0, 2, 1, 3))
    return tf.reshape(rotated, shape)


def _tensor_scatter(ctx, ins, attrs):
    cache, update = ins[0], ins[1]
    where = ins[2] if len(ins) > 2 else None
    shape, ushape = ctx.shape_of(cache), ctx.shape_of(update)
    rank = len(shape)
    axis = attrs.get("axis", -2) % rank
    if axis == 0:
        ctx.fail("attribute axis must not be the batch axis 0")
    length, seq = shape[axis], ushape[axis]
    # the update position each cache position takes: p - write_index[batch] (mod length if circular)
    pos = const(np.arange(length, dtype="int64").reshape([length if a == axis else 1 for a in range(rank)]))
    start = tf.reshape(tf.cast(where, "int64"), [shape[0]] + [1] * (rank - 1)) if where is not None else \
        const(np.zeros([1] * rank, "int64"))
    src = tensor.subtract(pos, start)
    if attrs.get("mode", "linear") == "circular":
        src = tensor.floor_mod(src, const(np.array(length, "int64")))
    hit = tensor.logical_and(tensor.greater_equal(src, const(np.array(0, "int64"))),
                             tensor.less(src, const(np.array(seq, "int64"))))
    full = tuple(ushape[:axis]) + (length,) + tuple(ushape[axis + 1:])
    safe = tf.broadcast_to(tensor.minimum(tensor.maximum(src, const(np.array(0, "int64"))),
                                          const(np.array(max(seq - 1, 0), "int64"))), full)
    return tensor.where(tf.broadcast_to(hit, full), tf.gather(update, axis, safe), cache)


def _causal_conv(ctx, ins, attrs):
    from .nn import CONVERTERS as NN
    x, w = ins[0], ins[1]
    bias = ins[2] if len(ins) > 2 else None
    past = ins[3] if len(ins) > 3 else None
    n, c, _ = ctx.shape_of(x)
    k = ctx.shape_of(w)[2]
    dtype = ctx.type_of(x).dtype
    if past is None:
        past = const(np.zeros((n, c, k - 1), dtype))
    padded = tf.concatenate([past, x], 2) if k > 1 else x
    conv_ins = [padded, w] + ([bias] if bias is not None else [])
    out = NN["Conv"](ctx, conv_ins, {"group": c, "kernel_shape": [k], "pads": [0, 0], "strides": [1]})
    act = attrs.get("activation", "none")
    if act in ("silu", "swish"):
        out = tensor.multiply(out, tensor.sigmoid(out))
    elif act != "none":
        ctx.fail(f"attribute activation={act!r} must be 'none', 'silu' or 'swish'")
    total = ctx.shape_of(padded)[2]
    state = tf.strided_slice(padded, [total - (k - 1)], [total], axes=[2])
    return [out, state]


def _linear_attention(ctx, ins, attrs):
    """LinearAttention (opset 27) on the float32 recurrence kernel; fp16 models are cast around
    it, as the operator's reference computes in float32."""
    from ...op.linear_attention import linear_attention

    ins = list(ins) + [None] * (6 - len(ins))
    q, k, v, past, decay, beta = ins[:6]
    rule = attrs.get("update_rule", "gated_delta")
    if rule not in ("linear", "gated", "delta", "gated_delta"):
        ctx.fail(f"update_rule {rule!r} must be linear, gated, delta or gated_delta")
    gating, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    if gating != (decay is not None) or delta != (beta is not None):
        ctx.fail(f"update_rule {rule!r} needs {'a' if gating else 'no'} decay and {'a' if delta else 'no'} beta input")
    if "q_num_heads" not in attrs or "kv_num_heads" not in attrs:
        ctx.fail("q_num_heads and kv_num_heads are required")
    hq, hkv = int(attrs["q_num_heads"]), int(attrs["kv_num_heads"])
    b, t, qd = ctx.shape_of(q)
    dk, dv = qd // hq, ctx.shape_of(v)[2] // hkv
    scale = float(attrs.get("scale", 0.0)) or 1.0 / np.sqrt(dk)
    dtype = str(ctx.type_of(q).dtype)
    f32 = lambda e: e if e is None or str(ctx.type_of(e).dtype) == "float32" else tf.cast(e, "float32")  # noqa: E731
    state_dtype = str(ctx.type_of(past).dtype) if past is not None else dtype
    past = f32(past) if past is not None else const(np.zeros((b, hkv, dk, dv), "float32"))
    per_row = decay is not None and ctx.shape_of(decay)[-1] == hkv * dk and hkv * dk != hkv
    per_head = beta is not None and ctx.shape_of(beta)[-1] == hkv
    out = linear_attention(f32(q), f32(k), f32(v), past, f32(decay) if decay is not None else const(np.zeros(1, "float32")),
                           f32(beta) if beta is not None else const(np.zeros(1, "float32")), q_heads=hq, kv_heads=hkv,
                           scale=scale, gating=gating, delta=delta, decay_per_row=per_row, beta_per_head=per_head)
    y, state = out[0], out[1]
    return [y if dtype == "float32" else tf.cast(y, dtype), state if state_dtype == "float32" else tf.cast(state, state_dtype)]


def _flex_attention(ctx, ins, attrs):
    """ai.onnx.preview FlexAttention: scaled Q K^T (the scale's square root on each side, in the
    inputs' type), the ``score_mod`` graph, softmax in float32 for float16 inputs (or
    ``softmax_precision``), the ``prob_mod`` graph, times V; grouped heads repeat K and V."""
    from onnx import helper

    q, k, v = ins[:3]
    b, hq, _, e = ctx.shape_of(q)
    hkv = ctx.shape_of(k)[1]
    dtype = str(ctx.type_of(q).dtype)
    if hq != hkv:
        if hq % hkv:
            ctx.fail(f"{hq} query heads are not a multiple of {hkv} key/value heads")
        k, v = (tf.reshape(tf.broadcast_to(tf.expand_dims(t, 2), (b, hkv, hq // hkv) + tuple(ctx.shape_of(t)[2:])),
                           (b, hq) + tuple(ctx.shape_of(t)[2:])) for t in (k, v))
    scale = attrs.get("scale") or 1.0 / np.sqrt(e)
    root = _c(np.sqrt(np.float32(scale)), dtype)
    scores = _bmm(ctx, tensor.multiply(q, root), tf.transpose(tensor.multiply(k, root), (0, 1, 3, 2)))
    if "softmax_precision" in attrs:
        compute = helper.tensor_dtype_to_np_dtype(int(attrs["softmax_precision"])).name
    else:
        compute = "float32" if np.dtype(dtype).itemsize < 4 else dtype
    cast = lambda x: x if str(ctx.type_of(x).dtype) == compute else tf.cast(x, compute)  # noqa: E731
    scores = cast(scores)
    if attrs.get("score_mod") is not None:
        scores = cast(ctx.importer.run_subgraph(attrs["score_mod"], [scores])[0])
    probs = nn_norm.softmax(scores, -1)
    if attrs.get("prob_mod") is not None:
        probs = cast(ctx.importer.run_subgraph(attrs["prob_mod"], [probs])[0])
    out = _bmm(ctx, probs, cast(v))
    vdtype = str(ctx.type_of(ins[2]).dtype)
    return out if compute == vdtype else tf.cast(out, vdtype)


PREVIEW_OPS = frozenset({("ai.onnx.preview", "FlexAttention")})


CONVERTERS = {"LinearAttention": _linear_attention, "FlexAttention": _flex_attention,
              "Attention": _in_float32(_attention), "RMSNormalization": _rms_norm, "RotaryEmbedding": _rotary,
              "TensorScatter": _tensor_scatter, "CausalConvWithState": _in_float32(_causal_conv)}
