"""ONNX models with dynamic axes (issue 32 item 4): they import once the sizes are given, one
build per size; without them, one error names every input and axis left open.

The helper-built model runs without torch (CI); the torch-exported one (``dynamic_axes``, the
TorchScript exporter) skips where torch is missing. References: onnxruntime and torch."""

from __future__ import annotations

import io

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the ONNX frontend tests need the onnx package (pip install onnx)")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the reference (pip install onnxruntime)")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import kiln  # noqa: E402
from kiln import relay  # noqa: E402
from kiln.contrib import graph_executor  # noqa: E402
from kiln.errors import KilnError  # noqa: E402

RTOL = ATOL = 1e-4


def _masked_mean_model():
    """ids (batch, sequence) int64, mask (batch, sequence) -> embedding rows averaged over the
    unmasked positions, (batch, 8). Both inputs share the symbolic dims."""
    rng = np.random.default_rng(0)
    table = rng.standard_normal((20, 8)).astype("float32")
    nodes = [helper.make_node("Gather", ["table", "ids"], ["emb"]),
             helper.make_node("Cast", ["mask"], ["maskf"], to=TensorProto.FLOAT),
             helper.make_node("Unsqueeze", ["maskf", "minus1"], ["mask3"]),
             helper.make_node("Mul", ["emb", "mask3"], ["kept"]),
             helper.make_node("ReduceSum", ["kept", "one"], ["total"], keepdims=0),
             helper.make_node("ReduceSum", ["mask3", "one"], ["count"], keepdims=0),
             helper.make_node("Div", ["total", "count"], ["y"])]
    inputs = [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "sequence"]),
              helper.make_tensor_value_info("mask", TensorProto.INT64, ["batch", "sequence"])]
    inits = [numpy_helper.from_array(table, "table"), numpy_helper.from_array(np.array([-1], "int64"), "minus1"),
             numpy_helper.from_array(np.array([1], "int64"), "one")]
    graph = helper.make_graph(nodes, "masked_mean", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _build_run(model, shape, feeds):
    mod, params = relay.frontend.from_onnx(model, shape=shape)
    with kiln.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm", params=params)
    gm = graph_executor.GraphModule(lib["default"](kiln.cpu(0)))
    gm.set_input(**feeds)
    gm.run()
    return gm.get_output(0).numpy(), mod


def _feeds(batch, seq, rng, vocab=20):
    ids = rng.integers(0, vocab, (batch, seq)).astype("int64")
    mask = np.ones((batch, seq), "int64")
    mask[0, seq // 2:] = 0  # padding at the end of the first row
    return {"ids": ids, "mask": mask}


def test_missing_sizes_are_one_error_naming_inputs_and_axes():
    model = _masked_mean_model()
    with pytest.raises(KilnError) as err:
        relay.frontend.from_onnx(model)
    msg = str(err.value)
    assert "'ids' axis 0 (batch), axis 1 (sequence)" in msg and "'mask' axis 0 (batch), axis 1 (sequence)" in msg
    assert "Pass shape={'ids': (..., ...), 'mask': (..., ...)}" in msg and "docs/frontends.md" in msg
    assert len(msg.splitlines()) == 1


def test_one_input_binds_the_symbolic_dims_it_shares():
    model = _masked_mean_model()
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1)
    for batch, seq in ((1, 5), (3, 12)):  # one build per size
        feeds = _feeds(batch, seq, rng)
        got, mod = _build_run(model, {"ids": (batch, seq)}, feeds)
        assert [tuple(p.type_annotation.shape) for p in mod["main"].params[:2]] == [(batch, seq)] * 2
        np.testing.assert_allclose(got, sess.run(None, feeds)[0], rtol=RTOL, atol=ATOL)


def test_a_size_against_the_model_wins_with_a_warning_and_bad_shapes_are_refused(caplog):
    model = _masked_mean_model()
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 2  # batch fixed to 2 on 'ids'
    # the user's size wins, as in TVM (a model exported at batch 1, run on batches)
    with caplog.at_level("WARNING", logger="kiln.frontend.onnx"):
        mod, _ = relay.frontend.from_onnx(model, shape={"ids": (4, 6), "mask": (4, 6)})
    assert "shape['ids'] = (4, 6) sets axis 0 to 4 where the model says 2" in caplog.text
    assert [tuple(p.type_annotation.shape) for p in mod["main"].params[:2]] == [(4, 6)] * 2
    with pytest.raises(KilnError, match=r"shape\['ids'\] = \(6,\) has 1 axes; the model's input 'ids' has 2"):
        relay.frontend.from_onnx(model, shape={"ids": (6,)})
    with pytest.raises(KilnError, match=r"shape names \['idz'\], which are not inputs of the model"):
        relay.frontend.from_onnx(model, shape={"idz": (2, 6)})


def test_torch_export_with_dynamic_axes():
    torch = pytest.importorskip("torch", reason="the exporter test needs torch (pip install torch==2.13.0)")

    class Tiny(torch.nn.Module):  # one attention head over a padded batch, as BERT-like exports have
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(50, 16)
            self.qkv = torch.nn.Linear(16, 48)
            self.out = torch.nn.Linear(16, 3)

        def forward(self, ids, mask):
            h = self.emb(ids)
            q, k, v = self.qkv(h).chunk(3, dim=-1)
            bias = (1.0 - mask[:, None, :].to(h.dtype)) * -10000.0
            a = torch.softmax(q @ k.transpose(1, 2) / 4.0 + bias, dim=-1) @ v
            m = mask.unsqueeze(-1).to(a.dtype)
            return self.out((a * m).sum(1) / m.sum(1))

    torch.manual_seed(0)
    net = Tiny().eval()
    ids, mask = torch.randint(0, 50, (2, 8)), torch.ones(2, 8, dtype=torch.int64)
    buf = io.BytesIO()
    axes = {0: "batch", 1: "sequence"}
    torch.onnx.export(net, (ids, mask), buf, input_names=["ids", "mask"], output_names=["y"], opset_version=17,
                      dynamic_axes={"ids": axes, "mask": axes}, dynamo=False)
    model = onnx.load_from_string(buf.getvalue())
    with pytest.raises(KilnError, match=r"'ids' axis 0 \(batch\), axis 1 \(sequence\)"):
        relay.frontend.from_onnx(model)
    sess = ort.InferenceSession(buf.getvalue(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(2)
    for batch, seq in ((1, 6), (2, 16)):
        feeds = _feeds(batch, seq, rng, vocab=50)
        got, _ = _build_run(model, {"ids": (batch, seq), "mask": (batch, seq)}, feeds)
        with torch.no_grad():
            want = net(torch.from_numpy(feeds["ids"]), torch.from_numpy(feeds["mask"])).numpy()
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(got, sess.run(None, feeds)[0], rtol=RTOL, atol=ATOL)
