"""Tuning records apply to the part of a ``dnnl, llvm`` build that stays on kiln (002: tuning
logs still apply to the ops the vendor library does not take), through the Python API and tvmc.

The convolutions are made NHWC (tvmc's ``--desired-layout NHWC``), which the oneDNN table does
not take: they stay on kiln (``conv2d_nhwc.x86``, tunable) while oneDNN runs the relus and the
dense layer. A log with one record per kiln convolution is written; the build under it must ask
for and get exactly those configs, produce different kernels than the untuned build, and still
match onnxruntime."""

import json
import os
import sys

import numpy as np
import pytest
from onnx import helper, numpy_helper

import kiln as tvm
from kiln import autotvm, relay
from kiln.autotvm import record
from kiln.autotvm.measure import MeasureInput, MeasureResult
from kiln.contrib import graph_executor
from kiln.driver import tvmc
from kiln.driver.tvmc.transform import apply_graph_transforms
from kiln.relay.op.contrib.dnnl import partition_for_dnnl
from kiln.runtime.json_runtime import dnnl_available

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from onnx_models import run_ort  # noqa: E402

MISSING = dnnl_available()
pytestmark = pytest.mark.skipif(MISSING is not None, reason=f"needs oneDNN: {MISSING}")
TOL = dict(rtol=1e-4, atol=1e-4)


def _model():
    rng = np.random.default_rng(0)
    w = {"w1": (8, 3, 3, 3), "b1": (8,), "w2": (8, 8, 3, 3), "w3": (5, 8)}
    inits = [numpy_helper.from_array((rng.standard_normal(s) * 0.3).astype("float32"), k) for k, s in w.items()]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("GlobalAveragePool", ["r2"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "w3"], ["y"], transB=1)]
    graph = helper.make_graph(nodes, "tuned", [helper.make_tensor_value_info("x", 1, (1, 3, 16, 16))],
                              [helper.make_tensor_value_info("y", 1, (1, 5))], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model, {"x": rng.standard_normal((1, 3, 16, 16)).astype("float32")}


class Recording(autotvm.ApplyHistoryBest):
    """apply_history_best that remembers which logged configs the build asked for and got."""

    def __init__(self, records):
        super().__init__(records)
        self.hits = {}

    def _query_inside(self, target, workload):
        cfg = super()._query_inside(target, workload)
        if cfg is not None:
            self.hits[workload] = cfg.index
        return cfg


def _partitioned(model):
    mod, params = relay.frontend.from_onnx(model)
    mod = apply_graph_transforms(mod, {"desired_layout": "NHWC"}, params=params)  # what tvmc does
    return partition_for_dnnl(mod, params)


def _log(part, path) -> dict:
    """One record per kiln-side task, with a config other than the default: {workload: index}."""
    tasks = autotvm.task.extract_from_program(part["main"], target="llvm")
    assert sorted(t.name for t in tasks) == ["conv2d_nhwc.x86", "conv2d_nhwc.x86"]
    pairs, chosen = [], {}
    for t in tasks:
        index = 0  # the narrowest tiles: not what topi picks without a log (the widest)
        pairs.append((MeasureInput(t.target, t, t.config_space.get(index)), MeasureResult((1e-4,), 0, 0.1, 0.0)))
        chosen[t.workload] = index
    record.save_to_file(path, pairs)
    return chosen


def _run(lib, inputs):
    m = graph_executor.GraphModule(lib["default"](tvm.cpu()))
    m.set_input(**inputs)
    m.run()
    return m.get_output(0).numpy()


def test_records_reach_the_kernels_kiln_keeps(tmp_path):
    model, inputs = _model()
    part = _partitioned(model)
    graph_funcs = [n for n in part if n.startswith("tvmgen_default_dnnl")]
    assert graph_funcs, "oneDNN should still take the relus and the dense layer"
    log = str(tmp_path / "conv.log")
    chosen = _log(part, log)
    with tvm.transform.PassContext(opt_level=3):
        untuned = relay.build(part, target="llvm")
        with Recording(log) as ctx:
            tuned = relay.build(part, target="llvm")
    assert ctx.hits == chosen  # every kiln convolution asked for its record and got it
    assert tuned.get_lib().get_source("ll") != untuned.get_lib().get_source("ll")
    assert any(m.type_key == "dnnl" for m in tuned.get_lib().imported_modules)
    np.testing.assert_allclose(_run(tuned, inputs), run_ort(model, inputs)[0], **TOL)


def test_tvmc_tuning_records_with_dnnl_llvm(tmp_path, monkeypatch):
    import onnx

    model, inputs = _model()
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    log = str(tmp_path / "conv.log")
    chosen = _log(_partitioned(model), log)
    seen = []

    def recording(records):
        seen.append(Recording(records))
        return seen[-1]

    monkeypatch.setattr(autotvm, "apply_history_best", recording)  # the context tvmc compile enters
    package = tvmc.compile(tvmc.load(path), target="dnnl, llvm", desired_layout="NHWC", tuning_records=log,
                           package_path=str(tmp_path / "m.tar"))
    assert len(seen) == 1 and seen[0].hits == chosen
    assert any(n["attrs"].get("compiler") == "dnnl" for n in json.loads(package.graph)["nodes"] if n["op"] == "tvm_op")
    result = tvmc.run(package, device="cpu", inputs=inputs, number=1, repeat=1)
    np.testing.assert_allclose(result.outputs["output_0"], run_ort(model, inputs)[0], **TOL)
