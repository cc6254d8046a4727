"""The tvmc Python API: load / compile / run objects, the frontend registry, the target and
shape parsers, apply_graph_transforms as 002 calls it, and the command's entry points."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib

import numpy as np
import pytest

from helpers.ranking import allclose_bound, assert_ranking_kept
from kiln.driver import tvmc
from kiln.driver.tvmc.common import TVMCException, parse_pass_config, parse_shape_string
from kiln.driver.tvmc.target import split_targets, target_from_cli

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def test_load_summary_save_and_reload(tmp_path, small_onnx):
    path, _, _ = small_onnx
    model = tvmc.load(path, shape_dict={"data": [1, 3, 16, 16]})
    assert isinstance(model, tvmc.TVMCModel) and model.model_format == "onnx"
    text = model.summary()
    assert "input  data: Tensor[(1, 3, 16, 16), float32]" in text and "nn.conv2d" in text
    saved = model.save(str(tmp_path / "model.tar"))
    again = tvmc.load(saved)
    assert str(again.mod) == str(model.mod)


def test_compile_and_run_objects(tmp_path, small_onnx):
    path, inputs, want = small_onnx
    package = tvmc.compile(tvmc.load(path), target="llvm", package_path=str(tmp_path / "p.tar"))
    assert isinstance(package, tvmc.TVMCPackage) and package.lib_name == "mod.so"
    assert os.path.isfile(package.lib_path) and '"nodes"' in package.graph and package.params[:8] == b"KILNPRM1"
    result = tvmc.run(package, device="cpu", inputs=inputs, number=2, repeat=4)
    assert isinstance(result, tvmc.TVMCResult) and len(result.times) == 4 and all(t > 0 for t in result.times)
    np.testing.assert_allclose(result.outputs["output_0"], want[0], rtol=1e-4, atol=1e-4)
    table = result.format_times().splitlines()
    assert table[0] == "Execution time summary:" and len(table) == 3
    assert float(table[2].split()[0]) == pytest.approx(np.mean(result.times) * 1e3, abs=6e-5)
    (order, values), = result.get_top_results(3)
    assert list(order) == list(np.argsort(result.outputs["output_0"].ravel())[::-1][:3])
    assert_ranking_kept(result.outputs["output_0"].ravel(), want[0].ravel(),
                        allclose_bound(want[0].ravel(), rtol=1e-4, atol=1e-4), top=3)
    # the same package by path, inputs filled
    ones = tvmc.run(str(tmp_path / "p.tar"), fill_mode="ones", benchmark=False)
    assert ones.times == [] and ones.outputs["output_0"].shape == (1, 10)
    profiled = tvmc.run(package, inputs=inputs, benchmark=False, profile=True)
    assert {r["name"] for r in profiled.profile} >= {"tvmgen_default_fused_nn_dense_add"}
    assert all(r["ms"] > 0 for r in profiled.profile) and "Total" in profiled.format_profile()


def test_fill_modes(tmp_path, small_onnx):
    from kiln.driver.tvmc.runner import make_inputs
    wanted = {"data": ((1, 2), "float32"), "ids": ((3,), "int64")}
    zeros = make_inputs(wanted, None, "zeros")
    assert not zeros["data"].any() and zeros["ids"].dtype == np.int64
    assert make_inputs(wanted, None, "ones")["data"].sum() == 2
    rnd = make_inputs(wanted, {"ids": np.array([1, 2, 3])}, "random")
    assert list(rnd["ids"]) == [1, 2, 3] and rnd["data"].std() > 0
    with pytest.raises(TVMCException, match="--fill-mode 'nan'"):
        make_inputs(wanted, None, "nan")


def test_frontend_registry_plugs_in_by_extension(tmp_path, small_onnx, monkeypatch):
    """A format kiln lacks says so; registering its relay.frontend function makes tvmc use it."""
    from kiln.relay import frontend
    h5 = tmp_path / "resnet50.h5"
    h5.write_bytes(b"\0")
    monkeypatch.delattr(frontend, "from_keras")
    with pytest.raises(TVMCException, match="keras models are not supported yet"):
        tvmc.load(str(h5))
    onnx_model = tvmc.load(small_onnx[0])
    seen = {}

    def from_keras(path, shape_dict, **options):
        seen["args"] = (path, shape_dict, options)
        return onnx_model.mod, onnx_model.params
    monkeypatch.setattr(frontend, "from_keras", from_keras, raising=False)
    model = tvmc.load(str(h5), shape_dict={"input_1": [1, 224, 224, 3]})
    assert model.model_format == "keras"
    assert seen["args"] == (str(h5), {"input_1": [1, 224, 224, 3]}, {"layout": "NHWC"})


def test_apply_graph_transforms_as_002_calls_it(small_onnx):
    from kiln.driver.tvmc.transform import apply_graph_transforms
    from kiln.relay.transform import infer
    mod = tvmc.load(small_onnx[0]).mod
    for acc in ("float16", "float32"):
        out = apply_graph_transforms(
            mod,
            {
                "mixed_precision": True,
                "mixed_precision_ops": ["nn.conv2d", "nn.dense"],
                "mixed_precision_calculation_type": "float16",
                "mixed_precision_acc_type": acc,
            },
        )
        text = str(out)
        assert "float16" in text and infer(out["main"]).body.checked_type.dtype == "float32"
        assert (f'out_dtype="{acc}"' in text) or (f"out_dtype='{acc}'" in text) or acc in text
    only_dense = apply_graph_transforms(mod, {"mixed_precision": True, "mixed_precision_ops": ["nn.dense"]})
    from kiln.relay.visitor import post_order
    convs = [n for n in post_order(infer(only_dense["main"]).body)
             if getattr(getattr(n, "op", None), "name", "") == "nn.conv2d"]
    assert convs and all(c.checked_type.dtype == "float32" for c in convs)
    with pytest.raises(TVMCException, match="nn.conv3x3"):
        apply_graph_transforms(mod, {"mixed_precision": True, "mixed_precision_ops": ["nn.conv3x3"]})
    with pytest.raises(TVMCException, match="unknown option"):
        apply_graph_transforms(mod, {"mixed_precison": True})
    assert apply_graph_transforms(mod, {"mixed_precision": False}) is mod


def test_target_strings():
    assert split_targets("opencl -device=adreno, llvm -mattr=+neon,+dotprod") == \
        ["opencl -device=adreno", "llvm -mattr=+neon,+dotprod"]
    t = target_from_cli("llvm", options={"llvm": {"mtriple": "aarch64-linux-gnu", "mcpu": "cortex-a72"}})
    assert t.kind.name == "llvm" and t.mtriple == "aarch64-linux-gnu" and t.mcpu == "cortex-a72"
    t = target_from_cli("opencl", target_host="llvm -mtriple=aarch64-linux-gnu")
    assert t.kind.name == "opencl" and t.host.mtriple == "aarch64-linux-gnu"
    with pytest.raises(TVMCException, match="two CPU targets"):
        target_from_cli("llvm, c")
    with pytest.raises(TVMCException, match="does not parse"):
        target_from_cli("opencl -foo=bar, llvm")


def test_shape_and_pass_config_parsers():
    assert parse_shape_string("data:[1,3,224,224]") == {"data": [1, 3, 224, 224]}
    assert parse_shape_string("a:[1, 2] input:0:[3]") == {"a": [1, 2], "input:0": [3]}
    for bad in ("data", "data:[1,x]", "data:[0,3]"):
        with pytest.raises(TVMCException, match="--input-shapes"):
            parse_shape_string(bad)
    assert parse_pass_config(["relay.FuseOps.max_depth=10", "tir.disable_vectorize=true", "x=y"]) == \
        {"relay.FuseOps.max_depth": 10, "tir.disable_vectorize": True, "x": "y"}
    with pytest.raises(TVMCException, match="KEY=VALUE"):
        parse_pass_config(["novalue"])


def test_entry_points():
    """``tvmc`` (console script), ``kiln tvmc`` and ``python -m kiln.driver.tvmc`` reach the same parser."""
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        scripts = tomllib.load(f)["project"]["scripts"]
    module, func = scripts["tvmc"].split(":")
    import importlib

    from kiln.driver.tvmc import main as tvmc_main
    assert getattr(importlib.import_module(module), func) is tvmc_main.main
    env = dict(os.environ, PYTHONPATH=ROOT)
    for cmd in ([sys.executable, "-m", "kiln.cli", "tvmc", "run", "--help"],
                [sys.executable, "-m", "kiln.driver.tvmc", "run", "--help"]):
        out = subprocess.run(cmd, capture_output=True, text=True, env=env)
        assert out.returncode == 0 and "--print-time" in out.stdout and "--fill-mode" in out.stdout
