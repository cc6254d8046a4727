"""The KWS-size CNN built with AOT for a Cortex-M3, linked into firmware for the mps2-an385 board
and run under qemu-system-arm: outputs vs onnxruntime, deterministic cycle counts (-icount)."""

import numpy as np
import pytest
from kws_model import kws_cnn, run_ort

from kiln import micro, relay
from kiln.errors import KilnError
from kiln.micro import project as micro_project
from kiln.micro.toolchain import missing_arm_gcc, missing_qemu
from kiln.relay.backend import Executor, Runtime


def _need_tools():
    why = missing_arm_gcc() or missing_qemu()
    if why:
        pytest.skip(why)


@pytest.fixture(scope="module")
def kws_lib():
    model, inputs = kws_cnn()
    mod, params = relay.frontend.from_onnx(model)
    lib = relay.build(mod, target="c -keys=arm_cpu -mcpu=cortex-m3",
                      executor=Executor("aot", {"interface-api": "c", "unpacked-api": True}),
                      runtime=Runtime("crt"), params=params)
    return model, inputs, lib


def test_kws_cnn_on_the_emulated_cortex_m3_matches_onnxruntime(kws_lib, tmp_path):
    _need_tools()
    model, inputs, lib = kws_lib
    template = micro.get_microtvm_template_projects("qemu-mps2-an385")
    project = micro_project.generate_project(template, lib, str(tmp_path / "proj"), {"inputs": inputs})
    project.build()
    sizes = project.sizes()
    assert sizes["flash"] > sizes["text"] - 1 and sizes["ram"] >= lib.workspace_size
    first = project.run()
    np.testing.assert_allclose(first["outputs"]["output"], run_ort(model, inputs)[0], rtol=1e-5, atol=1e-6)
    assert first["cycles"] and first["cycles"] > 1000
    assert project.run()["cycles"] == first["cycles"]  # -icount: board time does not depend on the host


def test_other_inputs_from_the_mlf_tar(kws_lib, tmp_path):
    _need_tools()
    model, _, lib = kws_lib
    mlf = micro.export_model_library_format(lib, str(tmp_path / "model.tar"))
    x = np.random.default_rng(9).standard_normal((1, 1, 20, 10)).astype("float32")
    project = micro_project.generate_project(micro.get_microtvm_template_projects("qemu-mps2-an385"), mlf,
                                             str(tmp_path / "proj"), {"inputs": {"input": x}})
    project.build()
    got = project.run()["outputs"]["output"]
    np.testing.assert_allclose(got, run_ort(model, {"input": x})[0], rtol=1e-5, atol=1e-6)


def test_wrong_input_shape_and_unknown_template_are_clear_errors(kws_lib, tmp_path):
    _, _, lib = kws_lib
    with pytest.raises(KilnError, match="no micro project template"):
        micro.get_microtvm_template_projects("stm32f746")
    with pytest.raises(KilnError, match="shape"):
        micro_project.generate_project(micro.get_microtvm_template_projects("qemu-mps2-an385"), lib,
                                       str(tmp_path / "p"), {"inputs": {"input": np.zeros((1, 10), "float32")}})


def test_kws_cnn_on_the_emulated_cortex_m4f_matches_onnxruntime(tmp_path):
    _need_tools()
    model, inputs = kws_cnn()
    mod, params = relay.frontend.from_onnx(model)
    lib = relay.build(mod, target="c -keys=arm_cpu -mcpu=cortex-m4",
                      executor=Executor("aot", {"interface-api": "c", "unpacked-api": True}), params=params)
    project = micro_project.generate_project(micro.get_microtvm_template_projects("qemu-mps2-an386"), lib,
                                             str(tmp_path / "m4"), {"inputs": inputs})
    project.build()
    result = project.run()
    # Hardware float with fused multiply-adds: a few ulps from onnxruntime's rounding.
    np.testing.assert_allclose(result["outputs"]["output"], run_ort(model, inputs)[0], rtol=1e-5, atol=1e-6)
    assert result["cycles"] > 0


def test_int8_tflite_model_on_the_emulated_board_within_one_step(tmp_path):
    """kiln's int8 path (TFLite import: int8 tensors carried as their real values, rounded to
    each tensor's grid) with int8 and float outputs, AOT on the Cortex-M3, vs the TFLite kernels."""
    _need_tools()
    pytest.importorskip("tflite", reason="the TFLite frontend needs the tflite package")
    pytest.importorskip("ai_edge_litert", reason="TFLite reference outputs need ai-edge-litert")
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "relay", "frontend"))
    import tflite_builder as TB

    rng = np.random.default_rng(0)
    model = TB.mobilenet_like(TB.calibrate(TB.mobilenet_like(), [rng.standard_normal((1, 16, 16, 3)).astype("float32")
                                                                  for _ in range(8)]))
    mod, params = relay.frontend.from_tflite(model)
    lib = relay.build(mod, target="c -mcpu=cortex-m3",
                      executor=Executor("aot", {"interface-api": "c", "unpacked-api": True}), params=params)
    x = np.random.default_rng(100).standard_normal((1, 16, 16, 3)).astype("float32")
    project = micro_project.generate_project(micro.get_microtvm_template_projects("qemu-mps2-an385"), lib,
                                             str(tmp_path / "int8"), {"inputs": {"input": x}})
    project.build()
    got = project.run()["outputs"]
    want = TB.run_tflite(model, {"input": x})
    assert got["output0"].dtype == np.int8
    assert np.abs(got["output0"].astype(int) - want[0].astype(int)).max() <= 1  # one quantization step
    assert np.abs(got["output1"] - want[1]).max() <= 1 / 256 + 1e-6
