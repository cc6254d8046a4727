"""The documents' tutorials in examples/ run as written."""

import runpy
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.mark.parametrize("name", ["cross_compilation_and_rpc.py", "matmul_schedule.py", "onnx_resnet18_rpc.py"])
def test_example_runs(name, capsys):
    runpy.run_path(str(EXAMPLES / name), run_name="__main__")
    out = capsys.readouterr().out
    if name == "cross_compilation_and_rpc.py":
        assert "secs/op" in out and "lib.so: loaded and checked" in out
    elif name == "onnx_resnet18_rpc.py":
        assert "matches onnxruntime" in out and "top-5 classes" in out and "latency on the server" in out
    else:
        assert "matches numpy" in out


@pytest.mark.opencl
@pytest.mark.parametrize("name", ["opencl_rpc.py", "opencl_c_rpc.py"])
def test_opencl_example_runs(name, capsys):
    """000's run_opencl through a local Python server, and through the C kiln_rpc server."""
    runpy.run_path(str(EXAMPLES / name), run_name="__main__")
    out = capsys.readouterr().out
    assert "OpenCL test passed" in out
    if name == "opencl_c_rpc.py":
        assert "secs/op on the device" in out and "threads per block" in out
