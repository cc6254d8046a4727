"""TVM 0.13's AOT test helpers (tvm.micro.testing.aot_test_utils): the default runner (this
machine's cc) and the Corstone-300 runner (Cortex-M55 firmware on qemu mps3-an547) over every
valid interface combination, against kiln's llvm graph executor and numpy."""

import numpy as np
import pytest

import kiln as tvm
from kiln import relay
from kiln.micro.testing.aot_test_utils import (AOT_DEFAULT_RUNNER, AOTTestModel, compile_and_run,
                                               generate_ref_data, parametrize_aot_options)


def _conv_relu():
    x = relay.var("x", shape=(1, 3, 8, 8), dtype="float32")
    w = relay.var("w", shape=(4, 3, 3, 3), dtype="float32")
    y = relay.nn.relu(relay.nn.conv2d(x, w, padding=(1, 1), kernel_size=(3, 3)))
    mod = tvm.IRModule.from_expr(relay.Function([x, w], y))
    rng = np.random.default_rng(0)
    return mod, {"x": rng.standard_normal((1, 3, 8, 8)).astype("float32")}, \
        {"w": rng.standard_normal((4, 3, 3, 3)).astype("float32")}


def _int_add_mul():
    a = relay.var("a", shape=(2, 8), dtype="int32")
    b = relay.var("b", shape=(2, 8), dtype="int32")
    mod = tvm.IRModule.from_expr(relay.Function([a, b], relay.multiply(relay.add(a, b), relay.const(3, "int32"))))
    rng = np.random.default_rng(1)
    return mod, {"a": rng.integers(-1000, 1000, (2, 8), dtype="int32"), "b": rng.integers(-1000, 1000, (2, 8),
                                                                                          dtype="int32")}


@parametrize_aot_options
def test_conv_with_params(interface_api, use_unpacked_api, test_runner, tmp_path):
    mod, inputs, params = _conv_relu()
    outputs = generate_ref_data(mod, inputs, params)
    # numpy says what the reference must be (ReLU of a 27-term float32 dot product)
    x, w = np.pad(inputs["x"][0], ((0, 0), (1, 1), (1, 1))).astype("float64"), params["w"].astype("float64")
    ref = np.zeros((4, 8, 8))
    for i in range(3):
        for j in range(3):
            ref += np.einsum("chw,oc->ohw", x[:, i:i + 8, j:j + 8], w[:, :, i, j])
    np.testing.assert_allclose(outputs["output"][0], np.maximum(ref, 0), rtol=1e-5, atol=1e-5)
    runs = compile_and_run(AOTTestModel(module=mod, inputs=inputs, outputs=outputs, params=params),
                           test_runner, interface_api, use_unpacked_api, test_dir=str(tmp_path))
    assert runs[0]["cycles"] > 0


@parametrize_aot_options
def test_integer_outputs_are_exact(interface_api, use_unpacked_api, test_runner, tmp_path):
    mod, inputs = _int_add_mul()
    outputs = {"output": (inputs["a"] + inputs["b"]) * 3}
    compile_and_run(AOTTestModel(module=mod, inputs=inputs, outputs=outputs), test_runner, interface_api,
                    use_unpacked_api, test_dir=str(tmp_path))


def test_a_wrong_expectation_fails(tmp_path):
    mod, inputs = _int_add_mul()
    wrong = {"output": (inputs["a"] + inputs["b"]) * 3 + np.eye(2, 8, dtype="int32")}
    with pytest.raises(AssertionError, match="output output"):
        compile_and_run(AOTTestModel(module=mod, inputs=inputs, outputs=wrong), AOT_DEFAULT_RUNNER, "c", True,
                        test_dir=str(tmp_path))
