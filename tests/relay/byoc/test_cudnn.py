"""cuDNN through BYOC: partitioning, the JSON, the CUDA build (PTX through NVRTC) and tvmc run
everywhere; running needs an NVIDIA GPU and cuDNN 9 (``@pytest.mark.gpu``, skipped without)."""

import json
import os
import sys
import tarfile

import numpy as np
import pytest

import kiln as tvm
from kiln import relay
from kiln.contrib import graph_executor
from kiln.errors import KilnError
from kiln.relay.op.contrib.cudnn import partition_for_cudnn
from kiln.runtime.json_cudnn import cudnn_available

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from onnx_models import resnet18, run_ort  # noqa: E402

TOL = dict(rtol=1e-4, atol=1e-4)
needs_cudnn = pytest.mark.skipif(cudnn_available() is not None, reason=f"needs cuDNN: {cudnn_available()}")


def _block():
    """conv+bias+relu, a residual conv+bias+add+relu, a conv cuDNN cannot pad (asymmetric: stays on
    kiln), max pool, global average pool, dense (kiln), softmax."""
    rng = np.random.default_rng(0)
    x = relay.var("x", shape=(2, 3, 16, 16))
    w = lambda *s: relay.const(rng.standard_normal(s).astype("float32") * 0.2)  # noqa: E731
    y = relay.nn.relu(relay.nn.bias_add(relay.nn.conv2d(x, w(8, 3, 3, 3), padding=(1, 1)), w(8)))
    r = relay.nn.bias_add(relay.nn.conv2d(y, w(8, 8, 3, 3), padding=(1, 1)), w(8))
    y = relay.nn.relu(relay.add(r, y))
    y = relay.nn.conv2d(y, w(8, 8, 2, 2), padding=(0, 0, 1, 1))  # asymmetric
    y = relay.nn.max_pool2d(y, pool_size=(2, 2), strides=(2, 2))
    y = relay.nn.global_avg_pool2d(relay.sigmoid(y))
    y = relay.nn.dense(relay.nn.batch_flatten(y), w(5, 8))
    mod = tvm.IRModule.from_expr(relay.Function([x], relay.nn.softmax(y)))
    return mod, {"x": rng.standard_normal((2, 3, 16, 16)).astype("float32")}


def _reference(mod, inputs):
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm")
    m = graph_executor.GraphModule(lib["default"](tvm.cpu()))
    m.set_input(**inputs)
    m.run()
    return m.get_output(0).numpy()


def _graphs(lib):
    return [json.loads(m.get_source()) for m in lib.get_lib().imported_modules if m.type_key == "cudnn"]


def test_block_is_partitioned_and_the_cuda_library_carries_the_json(tmp_path):
    mod, _ = _block()
    part = partition_for_cudnn(mod)
    assert [n for n in part if n.startswith("tvmgen_")] == [f"tvmgen_default_cudnn_main_{i}" for i in range(3)]
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(part, target="cuda")
    graphs = _graphs(lib)
    assert [[n["name"] for n in g["nodes"]] for g in graphs] == [
        ["cudnn.conv2d_bias_relu", "cudnn.conv2d_bias_sum_relu"],
        ["nn.max_pool2d", "sigmoid", "nn.global_avg_pool2d"], ["nn.softmax"]]
    first = graphs[0]
    assert first["compiler"] == "cudnn" and first["nodes"][1]["attrs"]["post"] == "sr"
    assert [c["shape"] for c in first["constants"]] == [[8, 3, 3, 3], [8], [8, 8, 3, 3], [8]]
    # the asymmetric conv and the dense stayed on kiln
    kiln_kernels = [n["attrs"]["func_name"] for n in json.loads(lib.get_graph_json())["nodes"]
                    if n["op"] == "tvm_op" and "compiler" not in n["attrs"]]
    assert any("conv2d" in k for k in kiln_kernels) and any("dense" in k for k in kiln_kernels)
    path = str(tmp_path / "cudnn.tar")
    lib.export_library(path)  # compile-only here: the .tar holds the JSON next to the CUDA host code
    assert "metadata.json" in tarfile.open(path).getnames()


def test_resnet18_convolutions_go_to_cudnn():
    model, inputs = resnet18(image=32, classes=10)
    mod, params = relay.frontend.from_onnx(model, shape={k: v.shape for k, v in inputs.items()})
    part = partition_for_cudnn(mod, params)
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(part, target="cuda")
    nodes = [n for g in _graphs(lib) for n in g["nodes"]]
    assert sum(n["kind"] == "conv2d" for n in nodes) == 20  # every convolution, batch norms folded in
    assert sum(n["attrs"].get("post") == "sr" for n in nodes) == 8  # the residual adds and relus fused


def test_unsupported_layouts_stay_on_kiln():
    x = relay.var("x", shape=(1, 8, 8, 3))
    w = relay.const(np.ones((3, 3, 3, 4), "float32"))
    y = relay.nn.conv2d(x, w, padding=(1, 1), data_layout="NHWC", kernel_layout="HWIO")
    part = partition_for_cudnn(tvm.IRModule.from_expr(relay.Function([x], relay.nn.relu(y))))
    assert [n for n in part if n.startswith("tvmgen_")] == ["tvmgen_default_cudnn_main_0"]  # the relu only
    assert "nn.conv2d" in str(part["main"])


def test_running_off_the_gpu_fails_with_one_line():
    mod, inputs = _block()
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(partition_for_cudnn(mod), target="llvm")
    want = "cuDNN is not installed" if cudnn_available() else "CUDA device"
    with pytest.raises(KilnError, match=want):
        m = graph_executor.GraphModule(lib["default"](tvm.cpu()))
        m.set_input(**inputs)
        m.run()


def test_tvmc_compiles_cudnn_cuda_llvm(tmp_path):
    import onnx

    from kiln.driver import tvmc

    model, _ = resnet18(image=32, classes=10)
    path = str(tmp_path / "r18.onnx")
    onnx.save(model, path)
    package = tvmc.compile(tvmc.load(path), target="cudnn, cuda, llvm", package_path=str(tmp_path / "r18.tar"))
    assert '"compiler":"cudnn"' in package.graph.replace(" ", "")


def _case(name):
    """One node kind (and epilogue) per case: (relay function, inputs, the cuDNN node names)."""
    rng = np.random.default_rng(1)
    c = lambda *s: relay.const(rng.standard_normal(s).astype("float32") * 0.3)  # noqa: E731
    x = relay.var("x", shape=(2, 4, 9, 9))
    z = relay.var("z", shape=(2, 6, 9, 9))
    conv = relay.nn.conv2d(x, c(6, 4, 3, 3), padding=(1, 1))
    body, names = {
        "conv": (conv, ["nn.conv2d"]),
        "conv_bias": (relay.nn.bias_add(conv, c(6)), ["cudnn.conv2d_bias"]),
        "conv_bias_relu": (relay.nn.relu(relay.nn.bias_add(conv, c(6))), ["cudnn.conv2d_bias_relu"]),
        "conv_relu": (relay.nn.relu(conv), ["cudnn.conv2d_relu"]),
        "conv_bias_sum_relu": (relay.nn.relu(relay.add(relay.nn.bias_add(conv, c(6)), z)),
                               ["cudnn.conv2d_bias_sum_relu"]),
        "conv_sum": (relay.add(conv, z), ["cudnn.conv2d_sum"]),
        "conv_grouped_strided_dilated": (relay.nn.conv2d(x, c(8, 2, 3, 3), strides=(2, 2), padding=(2, 2),
                                                         dilation=(2, 2), groups=2), ["nn.conv2d"]),
        "depthwise": (relay.nn.conv2d(x, c(4, 1, 3, 3), padding=(1, 1), groups=4), ["nn.conv2d"]),
        "max_pool": (relay.nn.max_pool2d(x, pool_size=(3, 3), strides=(2, 2), padding=(1, 1)), ["nn.max_pool2d"]),
        "avg_pool": (relay.nn.avg_pool2d(x, pool_size=(3, 3), strides=(2, 2), padding=(1, 1)), ["nn.avg_pool2d"]),
        "avg_pool_pad": (relay.nn.avg_pool2d(x, pool_size=(3, 3), strides=(2, 2), padding=(1, 1),
                                             count_include_pad=True), ["nn.avg_pool2d"]),
        "global_max_pool": (relay.nn.global_max_pool2d(x), ["nn.global_max_pool2d"]),
        "sigmoid_tanh": (relay.tanh(relay.sigmoid(x)), ["sigmoid", "tanh"]),
        "softmax_2d": (relay.nn.softmax(relay.nn.batch_flatten(x), axis=-1), ["nn.softmax"]),
        "softmax_4d": (relay.nn.softmax(x, axis=1), ["nn.softmax"]),
    }[name]
    free = relay.analysis.free_vars(body)
    inputs = {v.name_hint: rng.standard_normal([int(d) for d in v.type_annotation.shape]).astype("float32")
              for v in free}
    return tvm.IRModule.from_expr(relay.Function(free, body)), inputs, names


CASES = ["conv", "conv_bias", "conv_bias_relu", "conv_relu", "conv_bias_sum_relu", "conv_sum",
         "conv_grouped_strided_dilated", "depthwise", "max_pool", "avg_pool", "avg_pool_pad", "global_max_pool",
         "sigmoid_tanh", "softmax_2d", "softmax_4d"]


@pytest.mark.parametrize("name", CASES)
def test_each_case_is_offloaded(name):
    mod, _, names = _case(name)
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(partition_for_cudnn(mod, depthwise=True), target="cuda")
    assert [n["name"] for g in _graphs(lib) for n in g["nodes"]] == names


def test_depthwise_stays_on_kiln_unless_asked():
    mod, _, _ = _case("depthwise")
    assert not [n for n in partition_for_cudnn(mod) if n.startswith("tvmgen_")]
    assert [n for n in partition_for_cudnn(mod, depthwise=True) if n.startswith("tvmgen_")]
    grouped, _, _ = _case("conv_grouped_strided_dilated")  # groups=2 of 4 channels: not depthwise
    assert [n for n in partition_for_cudnn(grouped) if n.startswith("tvmgen_")]


@pytest.mark.gpu
@needs_cudnn
@pytest.mark.parametrize("name", CASES)
def test_each_case_matches_kiln_on_the_gpu(name):
    mod, inputs, _ = _case(name)
    want = _reference(mod, inputs)
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(partition_for_cudnn(mod, depthwise=True), target="cuda")
    dev = tvm.cuda(0)
    m = graph_executor.GraphModule(lib["default"](dev))
    for k, v in inputs.items():
        m.set_input(k, tvm.nd.array(v, dev))
    m.run()
    np.testing.assert_allclose(m.get_output(0).numpy(), want, **TOL)


@pytest.mark.gpu
@needs_cudnn
def test_block_matches_kiln_on_the_gpu():
    mod, inputs = _block()
    want = _reference(mod, inputs)
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(partition_for_cudnn(mod), target="cuda")
    dev = tvm.cuda(0)
    m = graph_executor.GraphModule(lib["default"](dev))
    m.set_input("x", tvm.nd.array(inputs["x"], dev))
    m.run()
    np.testing.assert_allclose(m.get_output(0).numpy(), want, **TOL)


@pytest.mark.gpu
@needs_cudnn
def test_resnet18_matches_onnxruntime_on_the_gpu():
    model, inputs = resnet18(image=32, classes=10)
    mod, params = relay.frontend.from_onnx(model, shape={k: v.shape for k, v in inputs.items()})
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(partition_for_cudnn(mod, params), target="cuda")
    dev = tvm.cuda(0)
    m = graph_executor.GraphModule(lib["default"](dev))
    for k, v in inputs.items():
        m.set_input(k, tvm.nd.array(v, dev))
    m.run()
    np.testing.assert_allclose(m.get_output(0).numpy(), run_ort(model, inputs)[0], **TOL)


@pytest.mark.gpu
@needs_cudnn
def test_tvmc_runs_cudnn_on_the_gpu(tmp_path):
    import onnx

    from kiln.driver import tvmc

    model, inputs = resnet18(image=32, classes=10)
    path = str(tmp_path / "r18.onnx")
    onnx.save(model, path)
    package = tvmc.compile(tvmc.load(path), target="cudnn, cuda, llvm", package_path=str(tmp_path / "r18.tar"))
    result = tvmc.run(package, device="cuda", inputs=inputs, number=1, repeat=1)
    np.testing.assert_allclose(result.outputs["output_0"], run_ort(model, inputs)[0], **TOL)


@pytest.mark.gpu
@needs_cudnn
def test_subgraphs_replay_as_cuda_graphs_like_the_calls_one_by_one(monkeypatch):
    mod, inputs = _block()  # three cuDNN subgraphs between kiln kernels: the order must hold
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(partition_for_cudnn(mod), target="cuda")
    dev = tvm.cuda(0)
    outs = []
    for graphs in ("1", "0"):
        monkeypatch.setenv("KILN_CUDA_GRAPHS", graphs)
        m = graph_executor.GraphModule(lib["default"](dev))
        m.set_input("x", tvm.nd.array(inputs["x"], dev))
        m.run()
        executors = [f.executor for _, _, f, _ in m.module.kernels if hasattr(f, "executor")]
        assert len(executors) == 3
        assert [e.captured for e in executors] == [graphs == "1"] * 3, [e.capture_failure for e in executors]
        for scale in (1.0, -2.0):  # replayed with new inputs, not only the captured ones
            m.set_input("x", tvm.nd.array(inputs["x"] * scale, dev))
            m.run()
            outs.append(m.get_output(0).numpy())
    np.testing.assert_allclose(outs[0], outs[2], **TOL)
    np.testing.assert_allclose(outs[1], outs[3], **TOL)
    assert not np.allclose(outs[0], outs[1])
