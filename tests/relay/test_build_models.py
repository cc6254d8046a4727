"""Whole models through relay.build and the graph executor: the ONNX ResNet-18, MobileNetV2 and
BERT-like block against onnxruntime (rtol/atol 1e-4), and every relay.testing workload against
the numpy reference executor."""

import numpy as np
import pytest
from built_models import MODELS, built

import kiln as tvm
from kiln import relay
from kiln.contrib import graph_executor, graph_runtime
from kiln.relay import reference

TOL = dict(rtol=1e-4, atol=1e-4)


def run(module, inputs):
    m = graph_executor.GraphModule(module)
    m.set_input(**inputs)
    m.run()
    return [m.get_output(i).numpy() for i in range(m.get_num_outputs())]


@pytest.mark.parametrize("name", list(MODELS))
def test_onnx_model_matches_onnxruntime(name):
    b = built(name)
    got = run(b.lib["default"](tvm.cpu(0)), b.inputs)
    assert len(got) == len(b.expected)
    for g, w in zip(got, b.expected):
        np.testing.assert_allclose(g, w, **TOL)


def test_resnet18_exported_and_reloaded(tmp_path):
    b = built("resnet18")
    b.lib.export_library(str(tmp_path / "resnet18.so"))
    loaded = tvm.runtime.load_module(str(tmp_path / "resnet18.so"))
    m = graph_runtime.GraphModule(loaded["default"](tvm.cpu(0)))  # 004's spelling
    (name, x), = b.inputs.items()
    m.set_input(name, tvm.nd.array(x))
    m.run()
    np.testing.assert_allclose(m.get_output(0).numpy(), b.expected[0], **TOL)
    timer = m.module.time_evaluator("run", tvm.cpu(0), number=1, repeat=2)
    assert len(timer().results) == 2


def test_resnet18_fuses_conv_bias_relu_and_residual():
    names = built("resnet18").lib.get_lib().function_names()
    assert "tvmgen_default_fused_nn_conv2d_add_nn_relu" in names
    assert "tvmgen_default_fused_nn_conv2d_add_add_nn_relu" in names  # residual add fused too
    assert len(names) < 25  # identical blocks share kernels


T = relay.testing
# The deeper variants of each family build the same kernels as the first, many times over:
# they run in the heavy tier (make test-heavy), keeping make test's time for kinds of network.
WORKLOADS = [
    ("resnet-18", lambda: T.resnet.get_workload(num_layers=18, image_shape=(3, 32, 32))),
    pytest.param("resnet-34", lambda: T.resnet.get_workload(num_layers=34, image_shape=(3, 32, 32)),
                 marks=pytest.mark.heavy),
    pytest.param("resnet-50", lambda: T.resnet.get_workload(num_layers=50, image_shape=(3, 32, 32)),
                 marks=pytest.mark.heavy),
    ("vgg-11", lambda: T.vgg.get_workload(num_layers=11, image_shape=(3, 32, 32))),
    pytest.param("vgg-13", lambda: T.vgg.get_workload(num_layers=13, image_shape=(3, 32, 32)), marks=pytest.mark.heavy),
    pytest.param("vgg-16", lambda: T.vgg.get_workload(num_layers=16, image_shape=(3, 32, 32), batch_norm=True),
                 marks=pytest.mark.heavy),
    pytest.param("vgg-19", lambda: T.vgg.get_workload(num_layers=19, image_shape=(3, 32, 32)), marks=pytest.mark.heavy),
    ("mobilenet", lambda: T.mobilenet.get_workload(image_shape=(3, 32, 32))),
    ("squeezenet_v1.0", lambda: T.squeezenet.get_workload(version="1.0", image_shape=(3, 64, 64))),
    ("squeezenet_v1.1", lambda: T.squeezenet.get_workload(version="1.1", image_shape=(3, 64, 64))),
    pytest.param("inception_v3", lambda: T.inception_v3.get_workload(image_shape=(3, 75, 75)), marks=pytest.mark.heavy),
]


@pytest.mark.parametrize("name, make", WORKLOADS)
def test_relay_testing_workload_builds_and_runs(name, make):
    mod, params = make()
    shape = mod["main"].params[0].type_annotation.shape
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm", params=params)
    x = np.random.default_rng(0).standard_normal(shape).astype("float32")
    (got,) = run(lib["default"](tvm.cpu(0)), {"data": x})
    np.testing.assert_allclose(got, reference.run(mod, {"data": x}, params), rtol=1e-4, atol=1e-6)
