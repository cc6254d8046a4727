"""tvmc with OpenCL targets (PoCL here): 002's "opencl, llvm" and "opencl -device=adreno, llvm"
compiled into packages and run with --device cl, locally and on an RPC server through the
tracker, against onnxruntime."""

from __future__ import annotations

import tarfile

import numpy as np
import pytest

from conftest import KEY
from test_tvmc_cli import tvmc

pytestmark = pytest.mark.opencl


@pytest.fixture(scope="module", autouse=True)
def _needs_opencl():
    try:
        import kiln as tvm
        if not tvm.cl(0).exist:
            pytest.skip("no OpenCL device (apt-get install -y pocl-opencl-icd; pip install pyopencl)")
    except Exception as err:  # pyopencl missing or no platform
        pytest.skip(f"no OpenCL platform: {err}")


@pytest.mark.parametrize("target", ["opencl, llvm", "opencl -device=adreno, llvm"])
def test_compile_and_run_on_opencl(tmp_path, small_onnx, fleet, target):
    model, inputs, want = small_onnx
    package = tmp_path / "cl.tar"
    tvmc("compile", f"--target={target}", "-o", str(package), "--dump-code", "cl", model)
    assert "__kernel void" in open(f"{package}.cl").read()
    with tarfile.open(package) as tar:
        assert sorted(tar.getnames()) == ["mod.json", "mod.params", "mod.so"]
    np.savez(tmp_path / "in.npz", **inputs)
    tvmc("run", "--device=cl", str(package), "--inputs", str(tmp_path / "in.npz"), "--outputs",
         str(tmp_path / "local.npz"))
    np.testing.assert_allclose(np.load(tmp_path / "local.npz")["output_0"], want[0], rtol=1e-4, atol=1e-4)
    port, _ = fleet
    out = tvmc("run", "--device=cl", str(package), "--rpc-key", KEY, "--rpc-tracker", f"127.0.0.1:{port}",
               "--print-time", "--repeat", "2", "--number", "2", "--inputs", str(tmp_path / "in.npz"),
               "--outputs", str(tmp_path / "remote.npz"))
    assert "Execution time summary:" in out.stdout
    np.testing.assert_allclose(np.load(tmp_path / "remote.npz")["output_0"], want[0], rtol=1e-4, atol=1e-4)


def test_tune_compile_run_opencl_locally(tmp_path, small_onnx):
    """tvmc tune on the local OpenCL device (the .gpu templates), then compile with the records."""
    import json
    model, inputs, want = small_onnx
    log = tmp_path / "cl.log"
    out = tvmc("tune", "--target", "opencl, llvm", model, "-o", str(log), "--trials", "1", "--tuner", "random",
               "--timeout", "60", "--parallel", "2")
    assert "Done." in out.stdout
    rows = [json.loads(line) for line in open(log)]
    assert rows and all(r["input"][0].startswith("opencl") and r["input"][1].endswith(".gpu") for r in rows)
    assert any(r["result"][1] == 0 for r in rows)
    package = tmp_path / "cl.tar"
    done = tvmc("compile", "--target", "opencl, llvm", "--tuning-records", str(log), "-o", str(package), model)
    assert "Cannot find config" not in done.stderr
    np.savez(tmp_path / "in.npz", **inputs)
    tvmc("run", "--device", "cl", str(package), "--inputs", str(tmp_path / "in.npz"), "--outputs",
         str(tmp_path / "out.npz"))
    np.testing.assert_allclose(np.load(tmp_path / "out.npz")["output_0"], want[0], rtol=1e-4, atol=1e-4)
