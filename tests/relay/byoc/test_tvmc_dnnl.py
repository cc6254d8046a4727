"""``tvmc compile --target "dnnl, llvm"``: oneDNN takes what it runs, kiln the rest."""

import os
import sys

import numpy as np
import pytest

from kiln.driver import tvmc
from kiln.driver.tvmc.target import byoc_from_cli, target_from_cli
from kiln.runtime.json_runtime import dnnl_available

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from onnx_models import resnet18, run_ort  # noqa: E402

MISSING = dnnl_available()


def test_target_list_names_the_offloads():
    assert byoc_from_cli("dnnl, llvm") == ["dnnl"]
    assert byoc_from_cli("opencl, clml, llvm") == ["clml"]
    assert str(target_from_cli("dnnl, llvm -mcpu=znver3")).startswith("llvm")


@pytest.mark.skipif(MISSING is not None, reason=f"needs oneDNN: {MISSING}")
def test_compile_and_run_with_dnnl(tmp_path):
    import onnx

    model, inputs = resnet18(image=32, classes=10)
    path = str(tmp_path / "r18.onnx")
    onnx.save(model, path)
    package = tvmc.compile(tvmc.load(path), target="dnnl, llvm", package_path=str(tmp_path / "r18.tar"))
    assert '"compiler":"dnnl"' in package.graph.replace(" ", "")
    result = tvmc.run(package, device="cpu", inputs=inputs, number=1, repeat=1)
    np.testing.assert_allclose(result.outputs["output_0"], run_ort(model, inputs)[0], rtol=1e-4, atol=1e-4)
