"""The NCHW4c convolutions of adreno graphs as autotvm templates: extracted (at opt_level 3) with
the shapes relay.build lowers, their default the untuned build, a logged config reaching the
graph's kernels (outputs vs numpy on the OpenCL device), a short tuning run with LocalRunner and
candidates timed through an RPC tracker and server on 127.0.0.1."""

import re
import time

import numpy as np
import pytest

import kiln as tvm
from kiln import autotvm, relay
from kiln.autotvm import record
from kiln.autotvm.measure import MeasureInput, MeasureResult
from kiln.autotvm.measure.measure import create_measure_batch
from kiln.topi.testing.conv import conv2d_nchw_python

TARGET = "opencl -device=adreno"
SHAPES = {"w1": (8, 3, 3, 3), "w2": (16, 8, 3, 3), "dw": (16, 1, 3, 3)}


def _target():
    return tvm.target.Target(TARGET, host="llvm")


def _net():
    """An RGB 32x32 input, a 3x3 conv to 8 channels, a 3x3 conv to 16, a depthwise 3x3."""
    x = relay.var("data", shape=(1, 3, 32, 32), dtype="float32")
    y = relay.nn.relu(relay.nn.conv2d(x, relay.var("w1", shape=SHAPES["w1"]), padding=(1, 1)))
    y = relay.nn.relu(relay.nn.conv2d(y, relay.var("w2", shape=SHAPES["w2"]), padding=(1, 1)))
    y = relay.nn.conv2d(y, relay.var("dw", shape=SHAPES["dw"]), padding=(1, 1), groups=16)
    return tvm.IRModule.from_expr(relay.Function(relay.analysis.free_vars(y), y))


def _params():
    rng = np.random.default_rng(1)
    return {n: (rng.standard_normal(s) * 0.3).astype("float32") for n, s in SHAPES.items()}


def _reference(x, p):
    y = np.maximum(conv2d_nchw_python(x, p["w1"], 1, 1), 0)
    y = np.maximum(conv2d_nchw_python(y, p["w2"], 1, 1), 0)
    return conv2d_nchw_python(y, p["dw"], 1, 1, groups=16)


def _tasks():
    with tvm.transform.PassContext(opt_level=3):
        return autotvm.task.extract_from_program(_net()["main"], target=_target(), params=_params())


def _build(log=None):
    def build():
        with tvm.transform.PassContext(opt_level=3):
            return relay.build(_net(), target=_target(), params=_params())
    if log is None:
        return build()
    with autotvm.apply_history_best(log):
        return build()


def _source(lib) -> str:
    return [m for m in lib.get_lib().imported_modules if m.type_key == "opencl"][0].get_source()


def _run(lib):
    from kiln.contrib import graph_executor

    x = np.random.default_rng(2).standard_normal((1, 3, 32, 32)).astype("float32")
    g = graph_executor.GraphModule(lib["default"](tvm.cl(0)))
    g.set_input(data=x)
    g.run()
    return g.get_output(0).numpy(), _reference(x, _params())


def _save(path, task, config):
    record.save_to_file(str(path), [(MeasureInput(task.target, task, config),
                                     MeasureResult((1e-5,), 0, 0.1, time.time()))])


def _pick(space, **knobs):
    for i in range(len(space)):
        c = space.get(i)
        if all(c[k].val == v for k, v in knobs.items()):
            return c
    raise AssertionError(f"no config with {knobs}")


def test_extraction_gives_the_nchw4c_templates_with_the_build_shapes():
    tasks = _tasks()
    assert [t.workload for t in tasks] == [
        ("conv2d_NCHW4c.adreno", ("TENSOR", (1, 3, 32, 32), "float32"), ("TENSOR", (8, 3, 3, 3), "float32"),
         (1, 1), (1, 1, 1, 1), (1, 1), 1, "float32", 4),
        ("conv2d_NCHW4c.adreno", ("TENSOR", (1, 2, 32, 32, 4), "float32"), ("TENSOR", (16, 8, 3, 3), "float32"),
         (1, 1), (1, 1, 1, 1), (1, 1), 1, "float32", 4),
        ("depthwise_conv2d_NCHW4c.adreno", ("TENSOR", (1, 4, 32, 32, 4), "float32"),
         ("TENSOR", (16, 1, 3, 3), "float32"), (1, 1), (1, 1, 1, 1), (1, 1), 16, "float32", 4),
    ]
    for t in tasks:
        space = t.config_space
        assert {"tile_pixels", "tile_blocks", "threads", "unroll_kernel"} <= set(space.space_map)
        default = space.get(space.default_index())  # the untuned build's tiles are a point of the space
        assert (default["tile_pixels"].val, default["tile_blocks"].val, default["threads"].val) == (2, 1, 64)
        assert default["unroll_kernel"].val == 0
    assert tasks[1].config_space.get(tasks[1].config_space.default_index())["unroll_channels"].val == 1
    assert t.flop == 2.0 * 16 * 32 * 32 * 9


def test_below_opt_level_3_extraction_keeps_the_per_operator_templates():
    # outside any PassContext extraction runs at opt_level 3, as tvmc compile builds
    with tvm.transform.PassContext(opt_level=2):
        tasks = autotvm.task.extract_from_program(_net()["main"], target=_target(), params=_params())
    assert sorted({t.name for t in tasks}) == ["conv2d_nchw.adreno", "depthwise_conv2d_nchw.adreno"]


def test_a_logged_default_config_builds_the_untuned_kernels(tmp_path):
    log = tmp_path / "default.log"
    for t in _tasks():
        _save(log, t, t.config_space.get(t.config_space.default_index()))
    assert _source(_build(log)) == _source(_build())


@pytest.mark.opencl
def test_a_logged_config_reaches_the_graph_kernels(tmp_path):
    tasks = _tasks()
    log = tmp_path / "tuned.log"
    _save(log, tasks[0], _pick(tasks[0].config_space, tile_pixels=1, tile_blocks=2, threads=128, unroll_kernel=1))
    _save(log, tasks[1], _pick(tasks[1].config_space, tile_pixels=4, tile_blocks=2, threads=32, unroll_kernel=1,
                               unroll_channels=0))
    _save(log, tasks[2], _pick(tasks[2].config_space, tile_pixels=8, tile_blocks=1, threads=16, unroll_kernel=1))
    default, tuned = _build(), _build(log)
    assert _source(tuned) != _source(default)
    assert "read_imagef" in _source(tuned)
    # work-items per group by kernel: the untuned 64 everywhere; the logged 128, 32 and 16
    assert _groups(default) == {"nn_conv2d_nn_relu": 64, "nn_conv2d_nn_relu_1": 64, "nn_conv2d": 64}
    assert _groups(tuned) == {"nn_conv2d_nn_relu": 128, "nn_conv2d_nn_relu_1": 32, "nn_conv2d": 16}
    for lib in (default, tuned):
        out, ref = _run(lib)
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


def _groups(lib) -> dict:
    found = re.findall(r"reqd_work_group_size\((\d+), 1, 1\)\)\)\s*__kernel void tvmgen_default_fused_(\w+)_kernel0",
                       _source(lib))
    return {name: int(n) for n, name in found if "conv2d" in name}


def _option(runner):
    return autotvm.measure_option(builder=autotvm.LocalBuilder(n_parallel=2, timeout=60), runner=runner)


@pytest.mark.opencl
def test_tuning_a_conv_task_with_local_runner_and_building_with_the_best(tmp_path):
    from kiln.autotvm.tuner import GridSearchTuner

    task = _tasks()[1]
    log = str(tmp_path / "conv.log")
    tuner = GridSearchTuner(task)
    runner = autotvm.LocalRunner(number=2, repeat=1, timeout=60, cooldown_interval=0, check_correctness=True)
    tuner.tune(n_trial=3, measure_option=_option(runner), callbacks=[autotvm.callback.log_to_file(log)])
    rows = list(record.load_from_file(log))
    assert len(rows) == 3 and all(r.error_no == 0 and min(r.costs) > 0 for _, r in rows), rows
    best = min(rows, key=lambda row: np.mean(row[1].costs))[0].config
    with autotvm.apply_history_best(log) as ctx:
        assert ctx.query(_target(), task.workload).to_json_dict() == best.to_json_dict()
    out, ref = _run(_build(log))
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.opencl
def test_rpc_runner_measures_the_nchw4c_conv_on_the_servers_device():
    import rpc_services

    tracker = rpc_services.tracker()
    server = rpc_services.server("--tracker", f"127.0.0.1:{tracker.port}", "--key", "adreno-test")
    try:
        task = _tasks()[2]
        space = task.config_space
        configs = [space.get(space.default_index()), _pick(space, tile_pixels=4, threads=32, unroll_kernel=1)]
        runner = autotvm.RPCRunner("adreno-test", "127.0.0.1", tracker.port, number=2, repeat=1, timeout=60,
                                   cooldown_interval=0, check_correctness=True)
        batch = create_measure_batch(task, _option(runner))
        try:
            results = batch([MeasureInput(task.target, task, c) for c in configs])
        finally:
            batch.close()
        assert all(r.error_no == 0 and min(r.costs) > 0 for r in results), results
    finally:
        server.stop()
        tracker.stop()


def test_the_template_builds_its_conv_once_with_the_output_size_from_the_shapes(monkeypatch):
    # A strided, dilated, unevenly padded conv: the knobs' pixel tiles divide the output width
    # the conv itself computes, and the template builds that conv once per instantiation.
    from kiln.topi import adreno

    calls = []
    real = adreno.conv2d_NCHW4c
    monkeypatch.setattr(adreno, "conv2d_NCHW4c", lambda *a, **k: calls.append(1) or real(*a, **k))
    args = (("TENSOR", (1, 2, 30, 27, 4), "float32"), ("TENSOR", (16, 8, 3, 3), "float32"),
            (2, 2), (1, 0, 2, 1), (2, 1), 1, "float32", 4)
    task = autotvm.task.create("conv2d_NCHW4c.adreno", args, _target())
    out_w = (27 + 0 + 1 - (3 - 1) * 1 - 1) // 2 + 1  # 13
    out_h = (30 + 1 + 2 - (3 - 1) * 2 - 1) // 2 + 1  # 15
    with _target():
        _, tensors = task.instantiate(task.config_space.get(0))
    assert tuple(int(d) for d in tensors[-1].shape) == (1, 4, out_h, out_w, 4)
    assert all(out_w % e.val == 0 for e in task.config_space.space_map["tile_pixels"].entities)
    assert task.flop == 2.0 * 16 * out_h * out_w * 8 * 9
    assert len(calls) == 2  # one when the task was created, one for the instantiated config
