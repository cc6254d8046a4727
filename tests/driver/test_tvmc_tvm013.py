"""tvmc's Python API as TVM 0.13 users type it: TVMCPackage imported from tvm.driver.tvmc.model,
TVMCModel.summary() printing (and returning) the model, and Target objects wherever a target
string is accepted (tvmc.compile's target and target_host, tvmc.tune's target)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import kiln as tvm
from kiln.driver import tvmc
from kiln.driver.tvmc.common import TVMCException


def test_tvmc_package_from_the_model_module(tmp_path, small_onnx):
    from kiln.driver.tvmc.model import TVMCPackage

    path, inputs, want = small_onnx
    assert TVMCPackage is tvm.driver.tvmc.model.TVMCPackage is tvmc.TVMCPackage
    tvmc.compile(tvmc.load(path), target="llvm", package_path=str(tmp_path / "p.tar"))
    with TVMCPackage(package_path=str(tmp_path / "p.tar")) as package:
        assert '"nodes"' in package.graph and package.lib_name == "mod.so"
        result = tvmc.run(package, device="cpu", inputs=inputs, benchmark=False)
    np.testing.assert_allclose(result.outputs["output_0"], want[0], rtol=1e-4, atol=1e-4)
    with pytest.raises(AttributeError, match="has no attribute 'TVMCPackages'"):
        tvm.driver.tvmc.model.TVMCPackages  # noqa: B018


def test_summary_prints_and_returns(capsys, small_onnx):
    path, _, _ = small_onnx
    model = tvmc.load(path, shape_dict={"data": [1, 3, 16, 16]})
    text = model.summary()
    printed = capsys.readouterr().out
    assert printed == text + "\n"
    assert "input  data: Tensor[(1, 3, 16, 16), float32]" in text and "nn.conv2d" in text
    assert str(model.mod) in text  # the relay text, as TVM's summary prints it
    with open(path + ".summary.txt", "w") as f:
        assert model.summary(file=f) == text
    assert capsys.readouterr().out == ""
    assert open(path + ".summary.txt").read() == text + "\n"


def test_compile_and_tune_take_target_objects(tmp_path, small_onnx):
    path, inputs, want = small_onnx
    model = tvmc.load(path)
    log = tvmc.tune(model, target=tvm.target.Target("llvm"), tuning_records=str(tmp_path / "t.log"), trials=1,
                    tuner="random", parallel=1, repeat=1, number=1, progress=open(tmp_path / "progress", "w"))
    records = [json.loads(line) for line in open(log)]
    assert records and all(r["input"][0] == "llvm" for r in records)
    package = tvmc.compile(model, target=tvm.target.Target("llvm"), target_host=tvm.target.Target("llvm"),
                           tuning_records=log, package_path=str(tmp_path / "obj.tar"))
    result = tvmc.run(package, device="cpu", inputs=inputs, benchmark=False)
    np.testing.assert_allclose(result.outputs["output_0"], want[0], rtol=1e-4, atol=1e-4)
    # The same target as a string gives the same kernels.
    by_string = tvmc.compile(model, target="llvm", tuning_records=log, package_path=str(tmp_path / "str.tar"))
    assert by_string.graph == package.graph


def test_target_objects_keep_their_host_and_bad_types_are_one_error():
    from kiln.driver.tvmc.target import target_from_cli

    gpu = tvm.target.Target("opencl -device=adreno", host="llvm -mtriple=aarch64-linux-android")
    got = target_from_cli(gpu)
    assert got.kind.name == "opencl" and str(got.host) == "llvm -mtriple=aarch64-linux-android"
    assert str(target_from_cli(tvm.target.Target("llvm"), options={"llvm": {"mcpu": "znver3"}})) == "llvm -mcpu=znver3"
    with pytest.raises(TVMCException, match="target must be a target string or a kiln.target.Target, not int"):
        target_from_cli(3)


def test_compile_to_model_library_format_for_a_board(tmp_path, small_onnx):
    """TVM 0.13's tvmc.compile(..., executor=Executor("aot"), runtime=Runtime("crt"), output_format="mlf"):
    the package is what micro.generate_project builds into firmware (run on the emulated M4F)."""
    from kiln import micro
    from kiln.driver.tvmc.model import TVMCPackage
    from kiln.micro.toolchain import missing_arm_gcc, missing_qemu
    from kiln.relay.backend import Executor, Runtime

    path, inputs, want = small_onnx
    package = tvmc.compile(tvmc.load(path), target=tvm.target.Target("c -keys=arm_cpu -mcpu=cortex-m4"),
                           executor=Executor("aot", {"interface-api": "c", "unpacked-api": True}),
                           runtime=Runtime("crt"), output_format="mlf", package_path=str(tmp_path / "model.tar"))
    assert isinstance(package, TVMCPackage) and package.type == "mlf" and '"nodes"' in package.graph
    with pytest.raises(TVMCException, match="Model Library Format package .* micro.generate_project"):
        package.lib_path  # noqa: B018
    with pytest.raises(TVMCException, match="compile with output_format='mlf'"):
        tvmc.compile(tvmc.load(path), target="c", executor=Executor("aot"), package_path=str(tmp_path / "x.tar"))
    with pytest.raises(TVMCException, match="output_format='mlf': .*build it with target 'c'"):
        tvmc.compile(tvmc.load(path), target="llvm", output_format="mlf", package_path=str(tmp_path / "y.tar"))
    why = missing_arm_gcc() or missing_qemu()
    if why:
        pytest.skip(why)
    project = micro.generate_project(micro.get_microtvm_template_projects("qemu-mps2-an386"), package.package_path,
                                     tmp_path / "fw", {"inputs": inputs})
    project.build()
    got = project.run()["outputs"]["output"]
    np.testing.assert_allclose(got, want[0], rtol=1e-4, atol=1e-4)  # the tolerance the other tvmc tests use
