"""Whole models under ``apply_history_best``: the tasks extracted from a model are the workloads
relay.build asks for, and a log of configs for them changes the kernels it emits while the
model's output still equals onnxruntime's.

The models are tests/relay/onnx_models.py's ResNet-18 and MobileNetV2 at 32x32 pixels (the
same layer kinds as at 224, smaller images) so each build takes seconds.
"""

import os
import sys
import time

import numpy as np
import pytest

import kiln as tvm
from kiln import autotvm
from kiln.autotvm import record
from kiln.autotvm.measure import MeasureInput, MeasureResult

relay = pytest.importorskip("kiln.relay")
pytest.importorskip("onnxruntime")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "relay"))
from onnx_models import mobilenet_v2, resnet18, run_ort  # noqa: E402

from kiln.relay.backend import dispatch  # noqa: E402

OPS = ("nn.conv2d", "nn.dense")
MODELS = {"resnet18": resnet18, "mobilenet_v2": mobilenet_v2}


def _import(name):
    model, inputs = MODELS[name](image=32)
    mod, params = relay.frontend.from_onnx(model)
    return model, inputs, mod, params


def _build(mod, params):
    with tvm.transform.PassContext(opt_level=3):
        return relay.build(mod, target="llvm", params=params)


def _run(lib, inputs):
    from kiln.contrib import graph_executor
    m = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    m.set_input(**inputs)
    m.run()
    return m.get_output(0).numpy()


@pytest.mark.parametrize("name", sorted(MODELS))
def test_extracted_tasks_are_the_workloads_relay_build_asks_for(name):
    _, _, mod, params = _import(name)
    tasks = autotvm.task.extract_from_program(mod["main"], target="llvm", params=params,
                                              ops=tuple(relay.op.get(o) for o in OPS))
    asked = set()
    with dispatch.use_config_provider(lambda op, wkl, target: asked.add(wkl)):
        _build(mod, params)
    assert {t.workload for t in tasks} == asked
    names = {t.name for t in tasks}
    assert {"conv2d_nchw.x86", "dense_nopack.x86"} <= names
    if name == "mobilenet_v2":
        assert "depthwise_conv2d_nchw.x86" in names


def test_tuned_log_changes_the_kernels_and_output_matches_onnxruntime(tmp_path, monkeypatch):
    """One record per task with a config other than topi's default (a stand-in for a tuning
    run, which bench/tune_conv2d.py and bench/e2e.py do for real): the build reads every one."""
    model, inputs, mod, params = _import("mobilenet_v2")
    tasks = autotvm.task.extract_from_program(mod["main"], target="llvm", params=params,
                                              ops=tuple(relay.op.get(o) for o in OPS))
    rng = np.random.default_rng(0)
    rows = []
    for task in tasks:
        cfg = task.config_space.get(int(rng.integers(len(task.config_space))))
        rows.append((MeasureInput(task.target, task, cfg), MeasureResult((1e-4,), 0, 0.1, time.time())))
    log = str(tmp_path / "model.log")
    record.save_to_file(log, rows)

    untuned = _build(mod, params)
    used, real = [], dispatch.select_config
    monkeypatch.setattr(dispatch, "select_config",
                        lambda op, wkl, target: used.append((wkl, real(op, wkl, target))) or used[-1][1])
    with autotvm.apply_history_best(log):
        tuned = _build(mod, params)
    tuned_ops = [(wkl, cfg) for wkl, cfg in used if wkl is not None]
    assert {wkl for wkl, _ in tuned_ops} == {t.workload for t in tasks}
    assert all(cfg is not None for _, cfg in tuned_ops)
    assert tuned.get_lib().get_source() != untuned.get_lib().get_source()
    want = run_ort(model, inputs)[0]
    for lib in (untuned, tuned):
        np.testing.assert_allclose(_run(lib, inputs), want, rtol=1e-4, atol=1e-4)
