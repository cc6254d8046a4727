"""ONNX LSTM, GRU and RNN.

Each layer becomes one dense for the input projections of all steps (X·Wᵀ + Wb) and one
``nn.rnn_recurrence`` call that loops over time (kiln/relay/op/rnn.py), then slices of its
packed output. Nothing is unrolled per step, so a 512-step sequence imports and builds in the
time a 2-step one does. Both layouts, all three directions, initial states, sequence lengths,
peepholes, clip, input_forget, linear_before_reset and every activation ONNX lists are supported.
"""

from __future__ import annotations

import numpy as np

from ...expr import const
from ...op import nn, rnn, tensor
from ...op import transform as tf

DEFAULT_ACTIVATIONS = {"LSTM": ("Sigmoid", "Tanh", "Tanh"), "GRU": ("Sigmoid", "Tanh"), "RNN": ("Tanh",)}
_USES_ALPHA = {"affine", "leakyrelu", "thresholdedrelu", "scaledtanh", "hardsigmoid", "elu"}
_USES_BETA = {"affine", "scaledtanh", "hardsigmoid"}


def _text(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _activations(ctx, attrs, num_dirs: int) -> tuple:
    op = ctx.node.op_type
    per_dir = len(DEFAULT_ACTIVATIONS[op])
    names = [_text(a) for a in attrs.get("activations", [])] or list(DEFAULT_ACTIVATIONS[op]) * num_dirs
    if len(names) == per_dir and num_dirs == 2:
        names = names * 2
    if len(names) != per_dir * num_dirs:
        ctx.fail(f"attribute activations has {len(names)} entries; {op} with {num_dirs} direction(s) takes "
                 f"{per_dir * num_dirs}")
    alphas = list(attrs.get("activation_alpha", []))
    betas = list(attrs.get("activation_beta", []))
    out = []
    for name in names:
        key = name.lower()
        if key not in rnn.ACTIVATIONS:
            ctx.fail(f"activation {name!r} is not supported; use one of the ONNX activations "
                     f"{sorted(rnn.ACTIVATIONS)}")
        alpha = float(alphas.pop(0)) if key in _USES_ALPHA and alphas else None
        beta = float(betas.pop(0)) if key in _USES_BETA and betas else None
        out.append((key, alpha, beta))
    return tuple(out)


def _input(ins, k):
    return ins[k] if len(ins) > k and ins[k] is not None else None


def _recurrent(ctx, ins, attrs):
    op = ctx.node.op_type
    gates = rnn.GATES[op.lower()]
    layout = attrs.get("layout", 0)
    if layout not in (0, 1):
        ctx.fail(f"attribute layout={layout} must be 0 (steps first) or 1 (batch first)")
    direction = _text(attrs.get("direction", "forward"))
    reverse = {"forward": (False,), "reverse": (True,), "bidirectional": (False, True)}.get(direction)
    if reverse is None:
        ctx.fail(f"attribute direction={direction!r} must be forward, reverse or bidirectional")
    num_dirs = len(reverse)
    x, w, r = ins[0], ins[1], ins[2]
    xshape = tuple(int(s) for s in ctx.shape_of(x))
    if len(xshape) != 3:
        ctx.fail(f"input X must be 3-d, got shape {list(xshape)}")
    if layout == 1:
        x = tf.transpose(x, (1, 0, 2))
        xshape = (xshape[1], xshape[0], xshape[2])
    steps, batch, size = xshape
    wshape = tuple(int(s) for s in ctx.shape_of(w))
    if len(wshape) != 3 or wshape[0] != num_dirs or wshape[1] % gates or wshape[2] != size:
        ctx.fail(f"input W has shape {list(wshape)}; expected [{num_dirs}, {gates}*hidden_size, {size}]")
    hidden = wshape[1] // gates
    if "hidden_size" in attrs and int(attrs["hidden_size"]) != hidden:
        ctx.fail(f"attribute hidden_size={attrs['hidden_size']} does not match W's {wshape[1]} = {gates} x {hidden} rows")
    rshape = tuple(int(s) for s in ctx.shape_of(r))
    if rshape != (num_dirs, gates * hidden, hidden):
        ctx.fail(f"input R has shape {list(rshape)}; expected {[num_dirs, gates * hidden, hidden]}")
    dtype = ctx.type_of(x).dtype
    gh = gates * hidden

    proj = nn.dense(tf.reshape(x, (steps * batch, size)), tf.reshape(w, (num_dirs * gh, size)))
    bias = _input(ins, 3)
    if bias is not None:
        if tuple(int(s) for s in ctx.shape_of(bias)) != (num_dirs, 2 * gh):
            ctx.fail(f"input B has shape {list(ctx.shape_of(bias))}; expected {[num_dirs, 2 * gh]}")
        proj = tensor.add(proj, tf.reshape(tf.strided_slice(bias, [0], [gh], axes=[1]), (num_dirs * gh,)))
        rbias = tf.strided_slice(bias, [gh], [2 * gh], axes=[1])
    else:
        rbias = const(np.zeros((num_dirs, gh), dtype))
    proj = tf.reshape(proj, (steps, batch, num_dirs, gh))

    lens = _input(ins, 4)
    if lens is None:
        lens = const(np.full((batch,), steps, "int32"))
    elif ctx.type_of(lens).dtype != "int32":
        lens = tf.cast(lens, "int32")
    state_shape = (num_dirs, batch, hidden)

    def state(k, what):
        s = _input(ins, k)
        if s is None:
            return const(np.zeros(state_shape, dtype))
        if layout == 1:
            s = tf.transpose(s, (1, 0, 2))
        if tuple(int(d) for d in ctx.shape_of(s)) != state_shape:
            ctx.fail(f"input {what} has shape {list(ctx.shape_of(_input(ins, k)))}; expected "
                     f"{list(state_shape if layout == 0 else (batch, num_dirs, hidden))}")
        return s

    h0 = state(5, "initial_h")
    c0 = state(6, "initial_c") if op == "LSTM" else const(np.zeros(state_shape, dtype))
    peep = _input(ins, 7) if op == "LSTM" else None
    if peep is not None and tuple(int(s) for s in ctx.shape_of(peep)) != (num_dirs, 3 * hidden):
        ctx.fail(f"input P has shape {list(ctx.shape_of(peep))}; expected {[num_dirs, 3 * hidden]}")
    clip = attrs.get("clip")
    if clip is not None and not float(clip) > 0:
        ctx.fail(f"attribute clip={clip} must be positive")
    packed = rnn.rnn_recurrence(
        proj, tf.transpose(r, (0, 2, 1)), rbias, h0, c0, lens,
        peep if peep is not None else const(np.zeros((num_dirs, 3 * hidden), dtype)),
        op.lower(), reverse, _activations(ctx, attrs, num_dirs), clip,
        linear_before_reset=bool(attrs.get("linear_before_reset", 0)),
        input_forget=bool(attrs.get("input_forget", 0)), use_peepholes=peep is not None)

    y = tf.strided_slice(packed, [0], [steps], axes=[0])
    outs = [y if layout == 0 else tf.transpose(y, (2, 0, 1, 3))]
    for row in range(1, 3 if op == "LSTM" else 2):
        last = tf.reshape(tf.strided_slice(packed, [steps + row - 1], [steps + row], axes=[0]), state_shape)
        outs.append(last if layout == 0 else tf.transpose(last, (1, 0, 2)))
    return outs


CONVERTERS = {"LSTM": _recurrent, "GRU": _recurrent, "RNN": _recurrent}
