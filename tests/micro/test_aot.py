"""relay.build with the AOT executor (target c): the Model Library Format's sources compiled by the
host cc into a program calling tvmgen_default_run, vs onnxruntime; the arena plan; errors."""

import json
import os
import subprocess
import tarfile

import numpy as np
import pytest
from kws_model import kws_cnn, run_ort

from kiln import micro, relay
from kiln.errors import CompileError
from kiln.relay.backend import Executor, Runtime

HERE = os.path.dirname(__file__)
AOT = Executor("aot", {"interface-api": "c", "unpacked-api": True})


@pytest.fixture(scope="module")
def kws():
    model, inputs = kws_cnn()
    mod, params = relay.frontend.from_onnx(model)
    lib = relay.build(mod, target="c -keys=arm_cpu -mcpu=cortex-m4", executor=AOT, runtime=Runtime("crt"),
                      params=params)
    return model, inputs, lib


def _host_program(mlf: str, work) -> str:
    with tarfile.open(mlf) as tar:
        tar.extractall(work)
    src = os.path.join(work, "codegen", "host", "src")
    exe = os.path.join(work, "model")
    cmd = ["cc", "-std=gnu99", "-O2", "-Wall", "-I", os.path.join(work, "codegen", "host", "include"),
           *sorted(os.path.join(src, f) for f in os.listdir(src)), os.path.join(HERE, "host_main.c"), "-lm", "-o", exe]
    out = subprocess.run(cmd, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return exe


def test_aot_model_library_format_runs_on_the_host_and_matches_onnxruntime(kws, tmp_path):
    model, inputs, lib = kws
    mlf = micro.export_model_library_format(lib, str(tmp_path / "model.tar"))
    with tarfile.open(mlf) as tar:
        names = set(tar.getnames())
        meta = json.load(tar.extractfile("metadata.json"))
    assert {"codegen/host/src/default_lib0.c", "codegen/host/src/default_lib1.c", "metadata.json",
            "codegen/host/include/tvmgen_default.h", "parameters/default.params", "src/relay.txt",
            "executor-config/graph/default.graph"} <= names
    assert meta["executors"] == ["aot"] and meta["memory"]["workspace_size_bytes"] == lib.workspace_size
    exe = _host_program(mlf, str(tmp_path / "mlf"))
    x = inputs["input"]
    run = subprocess.run([exe], input=x.tobytes(), capture_output=True)
    assert run.returncode == 0, run.stderr
    got = np.frombuffer(run.stdout, "float32").reshape(1, 12)
    np.testing.assert_allclose(got, run_ort(model, inputs)[0], rtol=1e-5, atol=1e-6)
    # A second input through the same program (the arena is reused between runs).
    x2 = np.random.default_rng(5).standard_normal(x.shape).astype("float32")
    run = subprocess.run([exe], input=x2.tobytes(), capture_output=True)
    np.testing.assert_allclose(np.frombuffer(run.stdout, "float32").reshape(1, 12),
                               run_ort(model, {"input": x2})[0], rtol=1e-5, atol=1e-6)


def test_arena_reuses_dead_intermediates_and_constants_are_const(kws):
    _, _, lib = kws
    plan = lib.plan
    intermediates = [e for e in range(plan.row[-1]) if e not in plan.io_role]
    total = sum(int(np.prod(plan.shape[e])) * 4 for e in intermediates)
    assert 0 < lib.workspace_size < total  # storage shared between tensors that do not live together
    assert all(off % 16 == 0 for off in plan.offset.values())
    src = lib.sources["default_lib1.c"]
    assert "static const float tvmgen_default_const_p0" in src and "malloc" not in src
    header = lib.headers["tvmgen_default.h"]
    assert "struct tvmgen_default_inputs {\n  void* input;" in header
    assert f"#define TVMGEN_DEFAULT_WORKSPACE_SIZE {lib.workspace_size}" in header


def test_workspace_alignment_is_honoured():
    model, _ = kws_cnn()
    mod, params = relay.frontend.from_onnx(model)
    lib = relay.build(mod, target="c", executor=Executor("aot", {"interface-api": "c", "unpacked-api": True,
                                                                  "workspace-byte-alignment": 256}), params=params)
    assert lib.plan.offset and all(off % 256 == 0 for off in lib.plan.offset.values())
    assert lib.workspace_size % 256 == 0 and "aligned(256)" in lib.sources["default_lib1.c"]


def test_executor_and_runtime_options_are_checked():
    with pytest.raises(CompileError, match="no option"):
        Executor("aot", {"interface_api": "c"})
    with pytest.raises(CompileError, match="unknown"):
        Executor("vm")
    with pytest.raises(CompileError, match="unknown"):
        Runtime("tflm")
    model, _ = kws_cnn()
    mod, params = relay.frontend.from_onnx(model)
    with pytest.raises(CompileError, match="target 'c'"):
        relay.build(mod, target="llvm", executor=AOT, params=params)
