"""``nn.rnn_recurrence``: the sequential part of an LSTM/GRU/RNN layer (topi/rnn.py).

The input projection of all steps is an ordinary dense before it; this op loops over time in
one kernel, so a graph's size does not grow with the sequence length. Its one output packs
Y (rows 0..T-1), the final hidden state (row T) and, for LSTM, the final cell state (row T+1);
the frontend slices them apart. OPAQUE: nothing fuses into a loop over time.
"""

from __future__ import annotations

import numpy as np

from ..expr import Call
from ..ty import TensorType
from .registry import OpDef, OpPattern, RelCtx

GATES = {"lstm": 4, "gru": 3, "rnn": 1}
NUM_ACTIVATIONS = {"lstm": 3, "gru": 2, "rnn": 1}
ACTIVATIONS = ("relu", "tanh", "sigmoid", "affine", "leakyrelu", "thresholdedrelu", "scaledtanh",
               "hardsigmoid", "elu", "softsign", "softplus")


def _rel(ctx: RelCtx):
    a = ctx.attrs
    if a.mode not in GATES:
        ctx.fail(f"mode={a.mode!r} is not one of {sorted(GATES)}")
    xp = ctx.ndim(0, 4, "steps x batch x directions x gates*hidden")
    T, B, D, GH = (int(s) for s in xp.shape)
    rt = ctx.ndim(1, 3, "directions x hidden x gates*hidden")
    H = int(rt.shape[1])
    if GH != GATES[a.mode] * H or tuple(rt.shape) != (D, H, GH):
        ctx.fail(f"'xproj' {xp.shape} and 'rt' {rt.shape} do not fit {GATES[a.mode]} gates of hidden size {H}")
    want = {2: (D, GH), 3: (D, B, H), 4: (D, B, H), 5: (B,), 6: (D, 3 * H)}
    for i, shape in want.items():
        t = ctx.tensor(i)
        dtype = "int32" if i == 5 else xp.dtype
        if tuple(int(s) for s in t.shape) != shape or t.dtype != dtype:
            ctx.fail(f"input {ctx.op.inputs[i]!r} must be {list(shape)} {dtype}, got {list(t.shape)} {t.dtype}")
    if len(a.reverse) != D:
        ctx.fail(f"reverse={a.reverse} must give one flag per direction ({D})")
    if len(a.activations) != NUM_ACTIVATIONS[a.mode] * D:
        ctx.fail(f"{len(a.activations)} activations for {D} directions; {a.mode} takes "
                 f"{NUM_ACTIVATIONS[a.mode]} per direction")
    for act in a.activations:
        if act[0] not in ACTIVATIONS:
            ctx.fail(f"activation {act[0]!r} is not one of {list(ACTIVATIONS)}")
    return TensorType((T + (2 if a.mode == "lstm" else 1), D, B, H), xp.dtype)


def _act(name, x, alpha, beta):
    d = {"affine": (1.0, 0.0), "leakyrelu": (0.01, 0), "thresholdedrelu": (1.0, 0), "scaledtanh": (1.0, 1.0),
         "hardsigmoid": (0.2, 0.5), "elu": (1.0, 0)}.get(name, (0, 0))
    a = d[0] if alpha is None else alpha
    b = d[1] if beta is None else beta
    fns = {
        "relu": lambda: np.maximum(x, 0), "tanh": lambda: np.tanh(x), "sigmoid": lambda: 1 / (1 + np.exp(-x)),
        "affine": lambda: a * x + b, "leakyrelu": lambda: np.where(x >= 0, x, a * x),
        "thresholdedrelu": lambda: np.where(x > a, x, 0), "scaledtanh": lambda: a * np.tanh(b * x),
        "hardsigmoid": lambda: np.clip(a * x + b, 0, 1), "elu": lambda: np.where(x >= 0, x, a * (np.exp(x) - 1)),
        "softsign": lambda: x / (1 + np.abs(x)), "softplus": lambda: np.log1p(np.exp(x)),
    }
    return fns[name]()


def _ref(a, xp, rt, rb, h0, c0, lens, peep):
    T, B, D, GH = xp.shape
    H = rt.shape[1]
    na = NUM_ACTIVATIONS[a.mode]
    out = np.zeros((T + (2 if a.mode == "lstm" else 1), D, B, H), xp.dtype)

    def clip(v):
        return v if a.clip is None else np.clip(v, -a.clip, a.clip)

    for d in range(D):
        f = [lambda v, s=s: _act(s[0], v, s[1], s[2]) for s in a.activations[d * na:(d + 1) * na]]
        h, c = h0[d].astype(np.float64), c0[d].astype(np.float64)
        for s in range(T):
            t = T - 1 - s if a.reverse[d] else s
            live = (t < lens)[:, None]
            x = xp[t, :, d].astype(np.float64)
            if a.mode == "rnn":
                hn = f[0](clip(x + h @ rt[d] + rb[d]))
            elif a.mode == "gru":
                rec = h @ rt[d] + rb[d]
                z = f[0](clip(x[:, :H] + rec[:, :H]))
                r = f[0](clip(x[:, H:2 * H] + rec[:, H:2 * H]))
                if a.linear_before_reset:
                    hh = f[1](clip(x[:, 2 * H:] + r * rec[:, 2 * H:]))
                else:
                    hh = f[1](clip(x[:, 2 * H:] + (r * h) @ rt[d][:, 2 * H:] + rb[d, 2 * H:]))
                hn = (1 - z) * hh + z * h
            else:
                g = x + h @ rt[d] + rb[d]
                pi, po, pf = (peep[d, k * H:(k + 1) * H] if a.use_peepholes else 0 for k in range(3))
                i = f[0](clip(g[:, :H] + pi * c))
                fg = 1 - i if a.input_forget else f[0](clip(g[:, 2 * H:3 * H] + pf * c))
                cn = fg * c + i * f[1](clip(g[:, 3 * H:]))
                hn = f[0](clip(g[:, H:2 * H] + po * cn)) * f[2](cn)
                c = np.where(live, cn, c)
            h = np.where(live, hn, h)
            out[t, d] = np.where(live, hn, 0)
        some = (lens > 0)[:, None]
        out[T, d] = np.where(some, h, 0)
        if a.mode == "lstm":
            out[T + 1, d] = np.where(some, c, 0)
    return out


RNN_RECURRENCE = OpDef(
    "nn.rnn_recurrence", ("xproj", "rt", "rb", "h0", "c0", "seq_lens", "peep"),
    {"mode": "lstm", "reverse": (False,), "activations": (), "clip": None, "linear_before_reset": False,
     "input_forget": False, "use_peepholes": False},
    _rel, OpPattern.OPAQUE, _ref,
    doc="the time loop of an LSTM/GRU/RNN layer over precomputed input projections")

OPS = [RNN_RECURRENCE]


def rnn_recurrence(xproj, rt, rb, h0, c0, seq_lens, peep, mode, reverse, activations, clip=None,
                   linear_before_reset=False, input_forget=False, use_peepholes=False) -> Call:
    return RNN_RECURRENCE(xproj, rt, rb, h0, c0, seq_lens, peep, mode=mode, reverse=tuple(bool(r) for r in reverse),
                          activations=tuple((str(n), a, b) for n, a, b in activations),
                          clip=None if clip is None else float(clip), linear_before_reset=bool(linear_before_reset),
                          input_forget=bool(input_forget), use_peepholes=bool(use_peepholes))
