"""For every target family, the tasks extracted from a whole model are exactly the kernels its
build tunes: a log holding one non-default config per extracted task changes the kernel of
every task in ``relay.build`` (no kernel is left asking for a workload the log lacks), and the
tuned model still computes what onnxruntime does (llvm, and adreno on the OpenCL device).

The models are small whole networks (a conv stack with a residual add, a depthwise conv, pooling
and a dense head; NCHW from ONNX, and the Keras-style NHWC model document 002 compiles for
``-device=adreno``). cuda is checked through NVRTC's CUDA source and PTX, without a GPU.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import time

import numpy as np
import pytest

import kiln as tvm
from kiln import autotvm
from kiln.autotvm import record
from kiln.autotvm.measure import MeasureInput, MeasureResult

relay = pytest.importorskip("kiln.relay")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "relay"))
from onnx_models import GraphBuilder, run_ort  # noqa: E402

FAMILIES = {
    "llvm": "llvm",
    "opencl": "opencl",
    "adreno": "opencl -device=adreno",
    "mali": "opencl -device=mali",
    "cuda": "cuda",
}


def _net():
    """conv3x3 -> relu -> depthwise 3x3 -> conv1x1 (+ residual) -> relu -> max pool -> conv3x3/2
    -> global pool -> dense: every kind of tunable kernel a CNN has, 16 images of 8x8."""
    g = GraphBuilder(3)
    x = g.op("Relu", [g.conv("data", 3, 8, 3, bias=True)])
    d = g.op("Relu", [g.conv(x, 8, 8, 3, group=8, bias=True)])
    y = g.conv(d, 8, 8, 1, bias=True)
    x = g.op("Relu", [g.op("Add", [x, y])])
    x = g.op("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    x = g.op("Relu", [g.conv(x, 8, 16, 3, stride=2, bias=True)])
    x = g.op("Flatten", [g.op("GlobalAveragePool", [x])], axis=1)
    out = g.dense(x, 16, 10)
    # batch 16: GPUs run a dense of fewer rows as a GEMV kernel without knobs (not a task)
    data = np.random.default_rng(4).standard_normal((16, 3, 8, 8)).astype("float32")
    return g.model({"data": data.shape}, out), {"data": data}


def _target(family):
    kind = FAMILIES[family]
    if family == "cuda":
        from kiln.codegen import cuda as cg
        if not cg.have_nvrtc():
            pytest.skip("needs NVRTC (pip install -e '.[cuda]') to compile CUDA to PTX")
    return tvm.target.Target(kind, host="llvm") if kind != "llvm" else tvm.target.Target("llvm")


def _other_config(task):
    """A config of the task other than its default, deterministic: every multi-valued knob
    of the default moved one step."""
    space = task.config_space
    default = space.default_index() or 0
    index, stride = 0, 1
    for name in space.space_map:
        n = len(space.space_map[name])
        digit = (default // stride) % n
        index += stride * ((digit + 1) % n)
        stride *= n
    assert index != default, f"task {task.name} has a single config: nothing to tune"
    return space.get(index)


def _kernels(lib) -> dict:
    """{fused kernel name: its code}: device source (OpenCL / CUDA) or the host's LLVM IR."""
    host = lib.get_lib()
    device = [m for m in host.imported_modules if m.type_key in ("opencl", "cuda")]
    text = device[0].get_source() if device else host.get_source("ll")
    out = {}
    for name in lib.kernel_workloads:
        pattern = re.escape(name) + r"(_kernel\d*|_compute_\w*)?\b"
        out[name] = "\n".join(chunk for chunk in re.split(r"(?=__kernel void|extern \"C\" __global__|\ndefine )",
                                                            text) if re.search(pattern, chunk))
        assert out[name], f"kernel {name} not found in the module's source"
    return out


def _build(mod, params, target, log=None):
    with tvm.transform.PassContext(opt_level=3):
        if log is None:
            return relay.build(mod, target=target, params=params)
        with autotvm.apply_history_best(log):
            return relay.build(mod, target=target, params=params)


def _run(lib, family, inputs):
    from kiln.contrib import graph_executor
    dev = tvm.cpu(0) if family == "llvm" else tvm.cl(0)
    m = graph_executor.GraphModule(lib["default"](dev))
    m.set_input(**inputs)
    m.run()
    return m.get_output(0).numpy()


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_log_of_the_extracted_tasks_changes_every_tuned_kernel(family, tmp_path, caplog):
    model, inputs = _net()
    mod, params = relay.frontend.from_onnx(model)
    target = _target(family)
    tasks = autotvm.task.extract_from_program(mod["main"], target=target, params=params)
    convs = [t for t in tasks if "conv2d" in t.name]
    assert len(convs) >= 3, [t.name for t in tasks]  # the stem, the depthwise, the 1x1 and the strided conv
    rows = [(MeasureInput(t.target, t, _other_config(t)), MeasureResult((1e-4,), 0, 0.1, time.time()))
            for t in tasks]
    log = str(tmp_path / f"{family}.log")
    record.save_to_file(log, rows)

    untuned = _build(mod, params, target)
    with caplog.at_level(logging.WARNING, logger="autotvm"):
        tuned = _build(mod, params, target, log)
    assert not [r for r in caplog.records if "Cannot find config" in r.getMessage()]
    # every kernel the build tunes has its task, and every task a kernel
    assert set(tuned.kernel_workloads.values()) == {t.workload for t in tasks}
    before, after = _kernels(untuned), _kernels(tuned)
    assert set(before) == set(after)
    for name, workload in tuned.kernel_workloads.items():
        assert after[name] != before[name], f"{family}: the logged config did not change {name} ({workload[0]})"

    if family in ("llvm", "adreno"):  # opencl and mali kernels run in their own tests (minutes on PoCL)
        if family != "llvm" and not tvm.cl(0).exist:
            return  # the sources were checked; no OpenCL device to run them on
        want = run_ort(model, inputs)[0]
        for lib in (untuned, tuned):
            np.testing.assert_allclose(_run(lib, family, inputs), want, rtol=1e-4, atol=1e-5)
    elif family == "cuda":
        ptx = [m for m in tuned.get_lib().imported_modules if m.type_key == "cuda"][0].get_source("ptx")
        assert all(f".entry {name}" in ptx for name in after)
    else:  # opencl, mali: the tuned kernels are those the device module carries
        (cl,) = [m for m in tuned.get_lib().imported_modules if m.type_key == "opencl"]
        source = cl.get_source()
        assert all(f"__kernel void {name}_kernel" in source for name in after)
