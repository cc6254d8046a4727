"""tvmc picks the frontend by extension: .h5 (Keras, channels-last), .tflite and .pt models load,
compile for llvm and run with outputs equal to their framework's."""

import numpy as np
import pytest

from kiln.driver import tvmc

TOL = dict(rtol=1e-4, atol=1e-4)


def _compile_run(path, tmp_path, inputs, shape_dict=None, desired_layout=None):
    model = tvmc.load(str(path), shape_dict=shape_dict)
    package = tvmc.compile(model, target="llvm", package_path=str(tmp_path / "p.tar"), desired_layout=desired_layout)
    result = tvmc.run(package, device="cpu", inputs=inputs, benchmark=False)
    return model, [result.outputs[f"output_{i}"] for i in range(len(result.outputs))]


@pytest.mark.parametrize("desired_layout", [None, "NCHW"])
def test_keras_h5(tmp_path, desired_layout):
    """Keras models load channels-last; --desired-layout NCHW converts the body."""
    pytest.importorskip("h5py", reason="needs h5py")
    from test_keras_frontend import resnet_like
    forward = resnet_like(tmp_path / "resnet.h5", seed=9, image=16)
    x = np.random.default_rng(1).random((1, 16, 16, 3), dtype="float32")
    model, (got,) = _compile_run(tmp_path / "resnet.h5", tmp_path, {"input_1": x}, desired_layout=desired_layout)
    assert model.model_format == "keras"
    np.testing.assert_allclose(got, forward(x), **TOL)


def test_tflite(tmp_path):
    pytest.importorskip("tflite", reason="needs tflite")
    pytest.importorskip("ai_edge_litert", reason="needs ai-edge-litert")
    import tflite_builder as TB
    path = tmp_path / "mobilenet.tflite"
    path.write_bytes(TB.mobilenet_like(seed=4))
    x = np.random.default_rng(2).standard_normal((1, 16, 16, 3)).astype("float32")
    model, got = _compile_run(path, tmp_path, {"input": x})
    assert model.model_format == "tflite"
    for g, w in zip(got, TB.run_tflite(path.read_bytes(), {"input": x})):
        np.testing.assert_allclose(g, w, **TOL)


@pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning")
def test_torchscript_pt(tmp_path):
    torch = pytest.importorskip("torch", reason="needs torch (pip install 'kiln[frontends]')")
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                              torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(4, 3)).eval()
    x = torch.rand(1, 3, 8, 8)
    torch.jit.trace(net, x).save(str(tmp_path / "net.pt"))
    model, (got,) = _compile_run(tmp_path / "net.pt", tmp_path, {"input": x.numpy()}, {"input": [1, 3, 8, 8]})
    assert model.model_format == "pytorch"
    np.testing.assert_allclose(got, net(x).detach().numpy(), **TOL)


def test_keras_h5_through_the_command_line(tmp_path):
    """002's flow with a Keras .h5: tvmc compile, then tvmc run --print-time with inputs/outputs files."""
    import os
    import subprocess
    import sys
    pytest.importorskip("h5py", reason="needs h5py")
    from test_keras_frontend import resnet_like
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))

    def tvmc_cli(*args):
        proc = subprocess.run([sys.executable, "-m", "kiln.driver.tvmc", *args], capture_output=True, text=True,
                              env=env, timeout=600)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc.stdout

    forward = resnet_like(tmp_path / "resnet50.h5", seed=2, image=16)
    x = np.random.default_rng(3).random((1, 16, 16, 3), dtype="float32")
    np.savez(tmp_path / "in.npz", input_1=x)
    tvmc_cli("compile", "--target", "llvm", "-o", str(tmp_path / "keras-resnet50.tar"), str(tmp_path / "resnet50.h5"))
    out = tvmc_cli("run", "--device", "cpu", str(tmp_path / "keras-resnet50.tar"), "--inputs", str(tmp_path / "in.npz"),
                   "--outputs", str(tmp_path / "out.npz"), "--print-time", "--repeat", "2")
    assert "Execution time summary" in out
    with np.load(tmp_path / "out.npz") as got:
        np.testing.assert_allclose(got["output_0"], forward(x), **TOL)
