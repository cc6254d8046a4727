"""kiln_run (002's rtvm) cross-built for the qemu boards: tvmc packages compiled for aarch64 and
armv7 run on the "board" without Python and match the Python graph executor (the same model
compiled for this machine) and onnxruntime. ResNet-18 runs at 64x64 instead of 224x224: the
same layers and kernels (7x7/2 stem, max pool, four stages with strided 1x1 shortcuts, global
pool, dense), with a 12x smaller run under qemu."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile

import numpy as np
import pytest

import boards

import kiln as tvm
from kiln.contrib import graph_executor

sys.path.insert(0, os.path.join(boards.ROOT, "tests", "relay"))
from onnx_models import GraphBuilder, resnet18, run_ort  # noqa: E402
from helpers.ranking import allclose_bound, assert_ranking_kept  # noqa: E402

pytestmark = pytest.mark.qemu


def convnet(image=12):
    g = GraphBuilder(3)
    x = g.op("Relu", [g.bn(g.conv("data", 3, 8, 3, 1, 1), 8)])
    y = g.op("Relu", [g.bn(g.conv(x, 8, 16, 3, 2, 1), 16)])
    x = g.op("Relu", [g.op("Add", [y, g.conv(x, 8, 16, 1, 2, 0)])])
    x = g.op("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    x = g.op("Flatten", [g.op("GlobalAveragePool", [x])], axis=1)
    out = g.dense(x, 16, 10)
    data = np.random.default_rng(4).standard_normal((1, 3, image, image)).astype("float32")
    return g.model({"data": data.shape}, out), {"data": data}


def tvmc_compile(onnx_path, package, *target_args):
    result = subprocess.run([sys.executable, "-m", "kiln.driver.tvmc", "compile", str(onnx_path), "-o", str(package),
                             *target_args], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def python_executor(package, inputs, tmp):
    d = tmp / "host-extract"
    d.mkdir(exist_ok=True)
    with tarfile.open(package) as tar:
        tar.extractall(d, filter="data")
    m = graph_executor.create(open(d / "mod.json").read(), tvm.runtime.load_module(str(d / "mod.so")), tvm.cpu())
    m.load_params(open(d / "mod.params", "rb").read())
    for k, v in inputs.items():
        m.set_input(k, v)
    m.run()
    return m.get_output(0).numpy()


def run_on_board(arch, build, package, inputs, tmp, *extra):
    np.savez(tmp / "in.npz", **inputs)
    out = tmp / f"out-{arch.name}.npz"
    result = subprocess.run([arch.qemu, "-L", arch.sysroot, os.path.join(build, "kiln_run"), "--package",
                             str(package), "--input", str(tmp / "in.npz"), "--output", str(out), "--dump-time",
                             *extra], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "mean run: " in result.stdout
    return np.load(out)["output_0"], result.stdout


def _arch(name):
    arch = boards.ARCHES[name]
    missing = arch.missing()
    if missing:
        pytest.skip(f"{name} board {missing}")
    return arch


@pytest.mark.parametrize("name", sorted(boards.ARCHES))
def test_convnet_package_on_each_board(name, runtime_builds, tmp_path):
    import onnx
    arch = _arch(name)
    model, inputs = convnet()
    onnx.save(model, tmp_path / "m.onnx")
    triple = arch.target.split("-mtriple=")[1].split()[0]
    target = ["--target", "llvm", "--target-llvm-mtriple", triple]
    if "+neon" in arch.target:
        target += ["--target-llvm-mattr", "+neon"]
    tvmc_compile(tmp_path / "m.onnx", tmp_path / "board.tar", *target, "--cross-compiler", f"{arch.cross}gcc")
    tvmc_compile(tmp_path / "m.onnx", tmp_path / "host.tar", "--target", "llvm")
    got, _ = run_on_board(arch, runtime_builds(arch.cross), tmp_path / "board.tar", inputs, tmp_path, "--repeat", "2")
    np.testing.assert_allclose(got, python_executor(tmp_path / "host.tar", inputs, tmp_path), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, run_ort(model, inputs)[0], rtol=1e-4, atol=1e-4)


def test_resnet18_package_on_the_aarch64_board(runtime_builds, tmp_path):
    import onnx
    arch = _arch("aarch64")
    model, inputs = resnet18(image=64)
    onnx.save(model, tmp_path / "resnet18.onnx")
    tvmc_compile(tmp_path / "resnet18.onnx", tmp_path / "board.tar", "--target", "llvm", "--target-llvm-mtriple",
                 "aarch64-linux-gnu", "--cross-compiler", f"{arch.cross}gcc")
    tvmc_compile(tmp_path / "resnet18.onnx", tmp_path / "host.tar", "--target", "llvm")
    got, stdout = run_on_board(arch, runtime_builds(arch.cross), tmp_path / "board.tar", inputs, tmp_path)
    want = run_ort(model, inputs)[0]
    assert got.shape == (1, 1000)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))
    np.testing.assert_allclose(got, python_executor(tmp_path / "host.tar", inputs, tmp_path), rtol=1e-4,
                               atol=1e-4 * float(np.abs(want).max()))
    # the class order wherever the float32 error accepted above cannot explain a swap
    print(assert_ranking_kept(got[0], want[0], allclose_bound(want[0], rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))))
