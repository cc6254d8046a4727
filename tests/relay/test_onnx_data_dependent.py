"""Ops whose output size depends on the data (NonMaxSuppression, NonZero, Unique): imported,
built with relay.build for llvm, run by the graph executor, compared with onnxruntime."""

from __future__ import annotations

import json

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import kiln as tvm
from kiln import relay
from kiln.contrib import graph_executor

ort = pytest.importorskip("onnxruntime")


def _model(nodes, inputs, outputs, inits=(), opset=13):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _info(name, arr):
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(arr.dtype), arr.shape)


def _out(name, dtype=TensorProto.INT64):
    return helper.make_tensor_value_info(name, dtype, None)


def _build(model):
    mod, params = relay.frontend.from_onnx(model)
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm", params=params)
    return lib, graph_executor.GraphModule(lib["default"](tvm.cpu(0)))


def _compare(model, feeds: dict, runs=None):
    """Build once, run on each feed dict (the first and ``runs``), compare every output with onnxruntime."""
    lib, gm = _build(model)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for feed in [feeds] + list(runs or []):
        for name, value in feed.items():
            gm.set_input(name, value)
        gm.run()
        want = sess.run(None, feed)
        assert gm.get_num_outputs() == len(want)
        for k, w in enumerate(want):
            got = gm.get_output(k).numpy()
            assert got.shape == w.shape, (k, got.shape, w.shape)
            np.testing.assert_allclose(got, w, rtol=1e-6, atol=1e-6)
    return lib


def _boxes(rng, b, n):
    corner = rng.uniform(0, 10, (b, n, 2))
    size = rng.uniform(0.5, 4, (b, n, 2))
    return np.concatenate([corner, corner + size], -1).astype("float32")


@pytest.mark.parametrize("center", [0, 1])
def test_nms_matches_onnxruntime_and_the_length_changes_per_run(center):
    rng = np.random.default_rng(center)
    b, c, n = 2, 3, 40
    boxes, scores = _boxes(rng, b, n), rng.uniform(0, 1, (b, c, n)).astype("float32")
    inits = [numpy_helper.from_array(np.array([5], "int64"), "k"), numpy_helper.from_array(np.array([0.3], "float32"), "iou")]
    node = helper.make_node("NonMaxSuppression", ["boxes", "scores", "k", "iou", "floor"], ["sel"],
                            center_point_box=center)
    floor = np.array([0.2], "float32")
    model = _model([node], [_info("boxes", boxes), _info("scores", scores), _info("floor", floor)], [_out("sel")],
                   inits, opset=11)
    lib = _compare(model, {"boxes": boxes, "scores": scores, "floor": floor},
                   [{"boxes": boxes, "scores": scores, "floor": np.array([0.9], "float32")}])
    graph = json.loads(lib.get_graph_json())
    assert graph["dynamic_heads"] == [[0, 0, 1]] and len(graph["heads"]) == 2


def test_nms_followed_by_gathers_as_detection_heads_export_it():
    # selected (batch, class, box) rows -> box ids -> the kept boxes and their scores
    rng = np.random.default_rng(7)
    boxes, scores = _boxes(rng, 1, 30), rng.uniform(0, 1, (1, 2, 30)).astype("float32")
    inits = [numpy_helper.from_array(np.array([10], "int64"), "k"),
             numpy_helper.from_array(np.array([0.4], "float32"), "iou"),
             numpy_helper.from_array(np.array([0.1], "float32"), "floor"),
             numpy_helper.from_array(np.array(2, "int64"), "two"),
             numpy_helper.from_array(np.array(0, "int64"), "zero")]
    nodes = [helper.make_node("NonMaxSuppression", ["boxes", "scores", "k", "iou", "floor"], ["sel"]),
             helper.make_node("Gather", ["sel", "two"], ["ids"], axis=1),
             helper.make_node("Gather", ["boxes", "zero"], ["b0"], axis=0),
             helper.make_node("Gather", ["b0", "ids"], ["kept"], axis=0),
             helper.make_node("Mul", ["kept", "kept"], ["sq"]),
             helper.make_node("ReduceSum", ["sq"], ["norm"], axes=[1], keepdims=0),
             helper.make_node("Transpose", ["kept"], ["kept_t"], perm=[1, 0])]
    model = _model(nodes, [_info("boxes", boxes), _info("scores", scores)],
                   [_out("ids"), _out("kept", TensorProto.FLOAT), _out("norm", TensorProto.FLOAT),
                    _out("kept_t", TensorProto.FLOAT)], inits, opset=11)
    _compare(model, {"boxes": boxes, "scores": scores})


def test_nonzero_and_unique_match_onnxruntime():
    rng = np.random.default_rng(3)
    x = (rng.uniform(0, 1, (3, 5, 4)) > 0.6).astype("float32") * rng.integers(1, 4, (3, 5, 4)).astype("float32")
    nodes = [helper.make_node("NonZero", ["x"], ["nz"]),
             helper.make_node("Unique", ["x"], ["u", "ui", "uinv", "uc"], sorted=1),
             helper.make_node("Unique", ["x"], ["v", "vi", "vinv", "vc"], axis=1, sorted=1),
             helper.make_node("Unique", ["x"], ["w", "wi", "winv", "wc"], sorted=0)]
    outs = [_out("nz"), _out("u", TensorProto.FLOAT), _out("ui"), _out("uinv"), _out("uc"),
            _out("v", TensorProto.FLOAT), _out("vi"), _out("vinv"), _out("vc"),
            _out("w", TensorProto.FLOAT), _out("wi"), _out("winv"), _out("wc")]
    model = _model(nodes, [_info("x", x)], outs, opset=11)
    repeated = np.repeat(x[:, :2], 3, axis=1)[:, :5]  # repeated slices along axis 1
    _compare(model, {"x": x}, [{"x": np.zeros_like(x)}, {"x": repeated}])


def test_constant_input_folds_to_a_static_shape():
    x = np.array([[0, 2], [3, 0]], "int64")
    model = _model([helper.make_node("NonZero", ["x"], ["y"])], [], [_out("y")],
                   [numpy_helper.from_array(x, "x")])
    mod, _ = relay.frontend.from_onnx(model)
    assert mod["main"].body.checked_type.shape == (2, 2)


def test_a_consumer_that_mixes_the_padding_is_refused():
    x = np.ones((2, 3), "float32")
    nodes = [helper.make_node("NonZero", ["x"], ["nz"]),
             helper.make_node("ReduceMax", ["nz"], ["m"], axes=[1], keepdims=0)]
    model = _model(nodes, [_info("x", x)], [_out("m")])
    with pytest.raises(tvm.KilnError, match=r"ReduceMax node .*reads 'nz', whose axis 1 holds only as many entries "
                                            r"as NonZero found at run time; ReduceMax reduces over that axis"):
        relay.frontend.from_onnx(model)


@pytest.mark.parametrize("mode, transform", [("avg", "half_pixel"), ("max", "output_half_pixel")])
def test_roi_align_with_adaptive_sampling_matches_onnxruntime(mode, transform):
    # sampling_ratio 0: each roi's grid comes from its size, so the kernel's loop extents come from the data
    rng = np.random.default_rng(11)
    x = rng.standard_normal((2, 3, 24, 20)).astype("float32")
    corner = rng.uniform(-4, 60, (6, 2))
    rois = np.concatenate([corner, corner + rng.uniform(1, 40, (6, 2))], -1).astype("float32")
    idx = np.array([0, 1, 1, 0, 1, 0], "int64")
    node = helper.make_node("RoiAlign", ["x", "rois", "idx"], ["y"], mode=mode, output_height=3, output_width=4,
                            sampling_ratio=0, spatial_scale=0.25, coordinate_transformation_mode=transform)
    model = _model([node], [_info("x", x), _info("rois", rois), _info("idx", idx)], [_out("y", TensorProto.FLOAT)],
                   opset=16)
    _compare_close(model, {"x": x, "rois": rois, "idx": idx})


def _compare_close(model, feed):
    _, gm = _build(model)
    gm.run(**feed)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)[0]
    # sums of at most ~100 bilinear samples of standard normals, float32
    np.testing.assert_allclose(gm.get_output(0).numpy(), want, rtol=1e-5, atol=1e-5)


def test_deform_conv_matches_the_onnx_reference():
    # onnxruntime lacks DeformConv: onnx's reference evaluator (grid_sample based) is the reference
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(12)
    x = rng.standard_normal((2, 4, 9, 8)).astype("float32")
    w = rng.standard_normal((6, 2, 3, 3)).astype("float32")
    oh, ow = (9 + 2 - 2 * 2 - 1) // 2 + 1, (8 + 2 - 2 * 2 - 1) // 2 + 1
    offset = (rng.standard_normal((2, 2 * 2 * 9, oh, ow)) * 1.5).astype("float32")
    mask = rng.uniform(0, 1, (2, 2 * 9, oh, ow)).astype("float32")
    bias = rng.standard_normal(6).astype("float32")
    node = helper.make_node("DeformConv", ["x", "w", "off", "b", "m"], ["y"], group=2, offset_group=2,
                            strides=[2, 2], dilations=[2, 2], pads=[1, 1, 1, 1], kernel_shape=[3, 3])
    feeds = {"x": x, "w": w, "off": offset, "b": bias, "m": mask}
    model = _model([node], [_info(n, a) for n, a in feeds.items()], [_out("y", TensorProto.FLOAT)], opset=19)
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    _, gm = _build(model)
    gm.run(**feeds)
    # sums of 18 bilinear samples times weights, float32
    np.testing.assert_allclose(gm.get_output(0).numpy(), want, rtol=1e-4, atol=1e-4)


def test_exported_library_returns_the_valid_part(tmp_path):
    # export_library + the runtime's loader (kiln/runtime imports nothing of the compiler): the
    # count travels as a hidden head, the executor cuts NonZero's columns to it
    from kiln.runtime.graph_executor import GraphExecutor

    x = np.array([[0, 3, 0], [2, 0, 5]], "float32")
    model = _model([helper.make_node("NonZero", ["x"], ["nz"])], [_info("x", x)], [_out("nz")])
    lib, _ = _build(model)
    lib.export_library(str(tmp_path / "nz.so"))
    loaded = tvm.runtime.load_module(str(tmp_path / "nz.so"))
    ex = GraphExecutor(loaded["get_graph_json"](), loaded, tvm.cpu(0))
    assert ex.get_num_outputs() == 1
    for value in (x, np.zeros_like(x), np.ones_like(x)):
        ex.set_input("x", value)
        ex.run()
        np.testing.assert_array_equal(ex.get_output(0).numpy(), np.array(np.nonzero(value)))


def test_tvmc_kernel_by_kernel_runner_returns_the_valid_part(tmp_path):
    # tvmc walks the graph itself on servers without a graph executor (remote_graph.py): it hides
    # the length heads and cuts the output as the graph executor does. A real server on 127.0.0.1.
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, "rpc"))
    import rpc_services

    from kiln import rpc
    from kiln.driver.tvmc.remote_graph import KernelByKernel

    x = np.array([[0, 3, 0], [2, 0, 5]], "float32")
    model = _model([helper.make_node("NonZero", ["x"], ["nz"])], [_info("x", x)], [_out("nz")])
    lib, _ = _build(model)
    lib.export_library(str(tmp_path / "nz.so"))
    svc = rpc_services.server()
    try:
        remote = rpc.connect("127.0.0.1", svc.port)
        remote.upload(str(tmp_path / "nz.so"))
        m = KernelByKernel(lib.get_graph_json(), remote.load_module("nz.so"), remote.cpu(0))
        assert m.get_num_outputs() == 1
        for value in (x, np.zeros_like(x), np.ones_like(x)):
            m.set_input("x", value)
            m.run()
            np.testing.assert_array_equal(m.get_output(0).numpy(), np.array(np.nonzero(value)))
    finally:
        svc.stop()
