"""ONNX LSTM, GRU and RNN against onnxruntime (issue 32 item 1).

The node tests of the three ops run by name from onnx_node_passing.txt; here: stacked
bidirectional models with initial states and sequence lengths, the attributes the node tests
leave out (clip, activations, input_forget, linear_before_reset=0, layout=1), that a long
sequence builds the same kernels as a short one, and the errors for bad attributes.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the ONNX frontend tests need the onnx package (pip install onnx)")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the reference (pip install onnxruntime)")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from kiln.errors import KilnError  # noqa: E402
from kiln.relay.frontend.onnx import backend  # noqa: E402

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
RTOL = ATOL = 1e-4


def _layer(op, prefix, x, inp, hidden, rng, dirs, seq_lens=None, h0=None, c0=None, peep=False, **attrs):
    """One recurrent node with random weights as initializers; returns (node, initializers)."""
    g = GATES[op]
    inits = [numpy_helper.from_array((rng.standard_normal((dirs, g * hidden, inp)) * 0.4).astype("float32"), f"{prefix}W"),
             numpy_helper.from_array((rng.standard_normal((dirs, g * hidden, hidden)) * 0.4).astype("float32"), f"{prefix}R"),
             numpy_helper.from_array((rng.standard_normal((dirs, 2 * g * hidden)) * 0.2).astype("float32"), f"{prefix}B")]
    names = [x, f"{prefix}W", f"{prefix}R", f"{prefix}B", seq_lens or "", h0 or ""]
    if op == "LSTM":
        names.append(c0 or "")
        if peep:
            inits.append(numpy_helper.from_array((rng.standard_normal((dirs, 3 * hidden)) * 0.3).astype("float32"),
                                                 f"{prefix}P"))
            names.append(f"{prefix}P")
    while names and names[-1] == "":
        names.pop()
    outs = [f"{prefix}Y", f"{prefix}Yh"] + ([f"{prefix}Yc"] if op == "LSTM" else [])
    direction = {1: "forward", 2: "bidirectional"}[dirs] if "direction" not in attrs else attrs.pop("direction")
    node = helper.make_node(op, names, outs, name=f"{prefix}{op.lower()}", hidden_size=hidden, direction=direction,
                            **attrs)
    return node, inits


def _run_both(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, feeds)
    got = backend.KilnBackend.prepare(model, "CPU").run([feeds[i.name] for i in model.graph.input])
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)
    return got


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_two_layer_bidirectional_matches_onnxruntime(op):
    """Layer 1 (initial states, sequence lengths) -> [T, B, 2H] -> layer 2, like a stacked
    bidirectional torch.nn.LSTM/GRU/RNN export."""
    rng = np.random.default_rng(7)
    T, B, I, H = 9, 3, 5, 6
    extra = {"linear_before_reset": 1} if op == "GRU" else {}  # what torch exports
    n1, i1 = _layer(op, "l1_", "X", I, H, rng, 2, seq_lens="lens", h0="h0", c0="c0" if op == "LSTM" else None,
                    **extra)
    perm = helper.make_node("Transpose", ["l1_Y"], ["l1_Yt"], perm=[0, 2, 1, 3])
    shape = numpy_helper.from_array(np.array([T, B, 2 * H], "int64"), "shape")
    flat = helper.make_node("Reshape", ["l1_Yt", "shape"], ["l2_X"])
    n2, i2 = _layer(op, "l2_", "l2_X", 2 * H, H, rng, 2, seq_lens="lens", **extra)
    inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, [T, B, I]),
              helper.make_tensor_value_info("lens", TensorProto.INT32, [B]),
              helper.make_tensor_value_info("h0", TensorProto.FLOAT, [2, B, H])]
    if op == "LSTM":
        inputs.append(helper.make_tensor_value_info("c0", TensorProto.FLOAT, [2, B, H]))
    outputs = [helper.make_tensor_value_info("l2_Y", TensorProto.FLOAT, None),
               helper.make_tensor_value_info("l2_Yh", TensorProto.FLOAT, None),
               helper.make_tensor_value_info("l1_Yh", TensorProto.FLOAT, None)]
    graph = helper.make_graph([n1, perm, flat, n2], "stacked", inputs, outputs, i1 + i2 + [shape])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"X": rng.standard_normal((T, B, I)).astype("float32"),
             "lens": np.array([T, 4, 1], "int32"),  # one full, one short, one of a single step
             "h0": rng.standard_normal((2, B, H)).astype("float32")}
    if op == "LSTM":
        feeds["c0"] = rng.standard_normal((2, B, H)).astype("float32")
    y = _run_both(model, feeds)[0]
    assert np.all(y[4:, :, 1] == 0) and np.abs(y[:4, :, 1]).min() > 0  # steps past a length output 0


CASES = {
    "lstm_reverse_clip_peepholes": ("LSTM", dict(direction="reverse", clip=0.7), dict(peep=True)),
    "lstm_input_forget": ("LSTM", dict(input_forget=1), {}),
    "lstm_activations": ("LSTM", dict(activations=["HardSigmoid", "LeakyRelu", "Softsign"],
                                      activation_alpha=[0.3, 0.05], activation_beta=[0.4]), {}),
    "gru_reset_before_linear": ("GRU", dict(direction="bidirectional", linear_before_reset=0), {}),
    "gru_activations": ("GRU", dict(activations=["Sigmoid", "ScaledTanh"], activation_alpha=[0.8],
                                    activation_beta=[1.2]), {}),
    "rnn_relu_bidirectional": ("RNN", dict(direction="bidirectional", activations=["Relu", "Tanh"]), {}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_attributes_match_onnxruntime(case):
    op, attrs, layer = CASES[case]
    rng = np.random.default_rng(11)
    T, B, I, H = 6, 3, 4, 5
    dirs = 2 if attrs.get("direction") == "bidirectional" else 1
    node, inits = _layer(op, "", "X", I, H, rng, dirs, seq_lens="lens", **layer, **attrs)
    outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in node.output]
    graph = helper.make_graph([node], case, [helper.make_tensor_value_info("X", TensorProto.FLOAT, [T, B, I]),
                                             helper.make_tensor_value_info("lens", TensorProto.INT32, [B])],
                              outs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    # An empty sequence (length 0) ends with zero states in onnxruntime.
    _run_both(model, {"X": (rng.standard_normal((T, B, I)) * 2).astype("float32"), "lens": np.array([T, 3, 0], "int32")})


def _count(node, cls) -> int:
    from kiln.ir.functor import post_order_visit

    n = 0

    def visit(x):
        nonlocal n
        n += isinstance(x, cls)

    post_order_visit(node, visit)
    return n


def _long_model(T, op="LSTM", B=1, I=16, H=32):
    rng = np.random.default_rng(0)
    node, inits = _layer(op, "", "X", I, H, rng, 2)
    outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in node.output]
    graph = helper.make_graph([node], "long", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [T, B, I])],
                              outs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
def test_long_sequence_builds_the_same_kernels_in_bounded_time(op):
    """512 steps build the same kernels, with the same loop nests, as 8 steps: the time loop is
    one loop in one kernel, not unrolled."""
    from kiln import te
    from kiln.ir.stmt import For
    from kiln.te.lower import lower_to_primfunc
    from kiln.topi import rnn as topi_rnn

    def kernel_loops(T):
        xp = te.placeholder((T, 1, 2, 128), name="xp")
        args = [xp, te.placeholder((2, 32, 128), name="rt"), te.placeholder((2, 128), name="rb"),
                te.placeholder((2, 1, 32), name="h0"), te.placeholder((2, 1, 32), name="c0"),
                te.placeholder((1,), "int32", name="lens"), te.placeholder((2, 96), name="peep")]
        y = topi_rnn.recurrence(*args, "lstm", 2, (False, True), (("sigmoid", None, None), ("tanh", None, None),
                                                                  ("tanh", None, None)) * 2)
        func = lower_to_primfunc(te.create_schedule(y.op), args + [y], "rnn")
        return _count(func.body, For)

    if op == "LSTM":  # GRU's kernel is the same recurrence with other gates
        assert kernel_loops(512) == kernel_loops(8)
    timings, kernels = {}, {}
    for T in (8, 512):
        start = time.perf_counter()
        lib = backend.compile_model(_long_model(T, op))
        timings[T] = time.perf_counter() - start
        kernels[T] = sorted(lib.get_lib().function_names())
    print(f"\nbidirectional {op} (hidden 32) build: 8 steps {timings[8]:.2f} s, 512 steps {timings[512]:.2f} s")
    assert len(kernels[512]) == len(kernels[8])
    # Bounded: nothing per step. A generous bound, since the machine may be loaded.
    assert timings[512] < 3 * timings[8] + 10
    x = np.random.default_rng(1).standard_normal((512, 1, 16)).astype("float32")
    model = _long_model(512, op)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"X": x})
    got = backend.KilnBackend.prepare(model, "CPU").run([x])
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("attrs, match", [
    (dict(activations=["Sigmoid", "Gelu", "Tanh"]), "Gelu.*not supported"),
    (dict(layout=2), "layout=2"),
    (dict(direction="sideways"), "direction='sideways'"),
    (dict(hidden_size=7), "hidden_size=7"),
    (dict(activations=["Sigmoid"]), "activations has 1 entries"),
    (dict(clip=-1.0), "clip=-1.0"),
])
def test_bad_attributes_name_the_node(attrs, match):
    rng = np.random.default_rng(2)
    node, inits = _layer("LSTM", "", "X", 3, 4, rng, 1, **{k: v for k, v in attrs.items() if k != "hidden_size"})
    if "hidden_size" in attrs:
        for a in node.attribute:
            if a.name == "hidden_size":
                a.i = attrs["hidden_size"]
    outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in node.output]
    graph = helper.make_graph([node], "bad", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 1, 3])],
                              outs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    from kiln import relay

    with pytest.raises(KilnError, match=f"LSTM node 'lstm'.*{match}"):
        relay.frontend.from_onnx(model)


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
def test_opencl_build_matches_onnxruntime(op):
    """GPU targets get the one-thread kernel: built for opencl and run on the local OpenCL
    device (PoCL here), with sequence lengths, against onnxruntime."""
    pytest.importorskip("pyopencl", reason="the OpenCL runtime needs pyopencl")
    import kiln as tvm
    from kiln.contrib import graph_executor

    rng = np.random.default_rng(5)
    T, B, I, H = 5, 3, 4, 6
    node, inits = _layer(op, "", "X", I, H, rng, 2, seq_lens="lens")
    outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in node.output]
    graph = helper.make_graph([node], "cl", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [T, B, I]),
                                             helper.make_tensor_value_info("lens", TensorProto.INT32, [B])],
                              outs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"X": rng.standard_normal((T, B, I)).astype("float32"), "lens": np.array([5, 2, 0], "int32")}
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    lib = backend.compile_model(model, target="opencl")
    g = graph_executor.GraphModule(lib["default"](tvm.cl(0)))
    g.set_input(**feeds)
    g.run()
    for i, w in enumerate(want):
        np.testing.assert_allclose(g.get_output(i).numpy(), w, rtol=RTOL, atol=ATOL)
