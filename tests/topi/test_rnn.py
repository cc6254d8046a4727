"""topi.rnn.recurrence built for the host against the numpy reference of nn.rnn_recurrence (which
the ONNX tests check against onnxruntime): every code path of the recurrent matvec (vector
blocks, parallel blocks, scalar tails, odd hidden sizes)."""

import numpy as np
import pytest

import kiln as tvm
from kiln import te
from kiln.relay.expr import Attrs
from kiln.relay.op.rnn import _ref
from kiln.topi import rnn


def _run(mode, T, B, H, D, lens, **kw):
    rng = np.random.default_rng(H * 7 + D)
    G = rnn.GATES[mode]
    shapes = [(T, B, D, G * H), (D, H, G * H), (D, G * H), (D, B, H), (D, B, H), (B,), (D, 3 * H)]
    names = ["xp", "rt", "rb", "h0", "c0", "lens", "peep"]
    args = [te.placeholder(s, "int32" if n == "lens" else "float32", name=n) for s, n in zip(shapes, names)]
    reverse = (False, True)[:D] if D == 2 else (True,)
    acts = {"lstm": (("sigmoid", None, None), ("tanh", None, None), ("tanh", None, None)),
            "gru": (("sigmoid", None, None), ("tanh", None, None)), "rnn": (("tanh", None, None),)}[mode] * D
    y = rnn.recurrence(*args, mode, D, reverse, acts, **kw)
    f = tvm.build(te.create_schedule(y.op), args + [y], target="llvm", name="rnn")
    data = [(rng.standard_normal(s) * 0.3).astype("float32") for s in shapes]
    data[5] = np.array(lens, "int32")
    out = tvm.nd.empty(tuple(int(d) for d in y.shape), "float32", tvm.cpu(0))
    f(*[tvm.nd.array(a, tvm.cpu(0)) for a in data], out)
    attrs = Attrs({"mode": mode, "reverse": reverse, "activations": acts, "clip": kw.get("clip"),
                   "linear_before_reset": kw.get("linear_before_reset", False),
                   "input_forget": kw.get("input_forget", False), "use_peepholes": kw.get("use_peepholes", False)})
    np.testing.assert_allclose(out.numpy(), _ref(attrs, *data), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("H", [1, 3, 8, 21])
def test_odd_hidden_sizes_use_vector_blocks_and_tails(H):
    _run("lstm", 5, 2, H, 2, [5, 3], use_peepholes=True, clip=2.0)


def test_parallel_blocks(monkeypatch):
    monkeypatch.setattr(rnn, "PARALLEL_MIN", 0)
    monkeypatch.setattr(rnn, "CHUNK", 8)
    _run("gru", 4, 3, 13, 1, [4, 0, 2])  # z, r: 26 columns = 3 parallel blocks of 8 + 2; h: 8 + 5
    _run("lstm", 3, 1, 12, 2, [3])


def test_gru_and_rnn_modes():
    _run("gru", 6, 2, 9, 2, [6, 4], linear_before_reset=True)
    _run("rnn", 6, 2, 9, 1, [1, 6])
