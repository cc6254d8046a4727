"""Tuning on OpenCL (PoCL in CI): the GPU templates' knobs and defaults, task extraction for
opencl targets, LocalRunner and RPCRunner timing candidates on the OpenCL device, invalid
launches recorded as candidate errors, and tuned configs reaching relay.build."""

import time

import numpy as np
import pytest

import kiln as tvm
from kiln import autotvm, relay
from kiln.autotvm import record
from kiln.autotvm.measure import MeasureErrorNo, MeasureInput, MeasureResult
from kiln.autotvm.measure.measure import create_measure_batch

GPU_KNOBS = {"tile_f", "tile_y", "tile_x", "tile_rc", "tile_ry", "tile_rx", "auto_unroll_max_step", "unroll_explicit"}
TARGETS = [pytest.param("opencl", id="gpu"), pytest.param("opencl -device=mali", id="mali")]


def _net():
    x = relay.var("data", shape=(1, 8, 8, 8), dtype="float32")
    y = relay.nn.conv2d(x, relay.var("w1", shape=(16, 8, 3, 3)), padding=(1, 1))
    y = relay.nn.conv2d(relay.nn.relu(y), relay.var("dw", shape=(16, 1, 3, 3)), padding=(1, 1), groups=16)
    z = relay.nn.dense(relay.nn.batch_flatten(y), relay.var("fc", shape=(10, 16 * 8 * 8)))
    return tvm.IRModule.from_expr(relay.Function(relay.analysis.free_vars(z), z))


def _tasks(target):
    return autotvm.task.extract_from_program(_net()["main"], target=tvm.target.Target(target, host="llvm"),
                                             params={})


@pytest.mark.parametrize("target", TARGETS)
def test_extract_gives_gpu_templates_with_tvm_knobs_and_a_default(target):
    family = "mali" if "mali" in target else "gpu"
    tasks = _tasks(target)
    # the batch-1 dense runs as a GEMV kernel that takes no config: not a task
    assert sorted(t.name for t in tasks) == sorted(f"{n}.{family}" for n in ("conv2d_nchw", "depthwise_conv2d_nchw"))
    conv = next(t for t in tasks if t.name.startswith("conv2d"))
    assert GPU_KNOBS <= set(conv.config_space.space_map)
    x = relay.var("x", shape=(32, 64), dtype="float32")
    y = relay.nn.dense(x, relay.var("w", shape=(48, 64)))
    (dense_task,) = autotvm.task.extract_from_program(relay.Function(relay.analysis.free_vars(y), y),
                                                      target=tvm.target.Target(target, host="llvm"), params={})
    tasks.append(dense_task)
    assert dense_task.name == f"dense_nopack.{family}"
    assert set(dense_task.config_space.space_map) >= {
        "tile_x", "tile_y", "tile_k", "auto_unroll_max_step", "unroll_explicit"}
    for t in tasks:
        index = t.config_space.default_index()
        assert index is not None, t.name  # topi's untuned tiles are a point of the space
        assert t.config_space.get(index)["tile_y"].size[0] == -1


def _config(space, **sizes):
    """The first config whose split knobs end with the given inner sizes."""
    for i in range(len(space)):
        c = space.get(i)
        if all(list(c[k].size[1:]) == v for k, v in sizes.items()):
            return c
    raise AssertionError(f"no config with {sizes}")


@pytest.mark.opencl
@pytest.mark.parametrize("target", TARGETS)
def test_local_runner_times_on_the_device_and_records_bad_launches(target):
    conv = next(t for t in _tasks(target) if t.name.startswith("conv2d"))
    space = conv.config_space
    good = [space.get(space.default_index()),
            _config(space, tile_f=[1, 4, 2], tile_y=[1, 4, 1], tile_x=[1, 8, 1], tile_rc=[4])]
    # 16 x 8 x 8 = 1024 work-items per group: over the target's 256
    too_many = _config(space, tile_f=[1, 16, 1], tile_y=[1, 8, 1], tile_x=[1, 8, 1])
    option = autotvm.measure_option(
        builder=autotvm.LocalBuilder(n_parallel=2, timeout=60),
        runner=autotvm.LocalRunner(number=2, repeat=1, timeout=60, cooldown_interval=0, check_correctness=True))
    batch = create_measure_batch(conv, option)
    try:
        results = batch([MeasureInput(conv.target, conv, c) for c in good + [too_many]])
    finally:
        batch.close()
    assert [r.error_no for r in results[:2]] == [0, 0], results
    assert all(c > 0 for r in results[:2] for c in r.costs)
    assert results[2].error_no != MeasureErrorNo.NO_ERROR
    assert "thread" in str(results[2].costs[0]).lower() or "work" in str(results[2].costs[0]).lower()


@pytest.mark.opencl
def test_tuning_a_dense_task_and_building_with_the_best(tmp_path):
    """A short random tuning run on cl(0), then relay.build with apply_history_best."""
    from kiln.autotvm.tuner import RandomTuner
    from kiln.contrib import graph_executor

    target = tvm.target.Target("opencl", host="llvm")
    x = relay.var("x", shape=(32, 64), dtype="float32")
    w = relay.var("w", shape=(48, 64), dtype="float32")
    mod = tvm.IRModule.from_expr(relay.Function([x, w], relay.nn.relu(relay.nn.dense(x, w))))
    (task,) = autotvm.task.extract_from_program(mod["main"], target=target, params={})
    log = str(tmp_path / "dense.log")
    option = autotvm.measure_option(builder=autotvm.LocalBuilder(n_parallel=2),
                                    runner=autotvm.LocalRunner(number=2, repeat=1, timeout=60, cooldown_interval=0))
    tuner = RandomTuner(task)
    tuner.tune(n_trial=6, measure_option=option, callbacks=[autotvm.callback.log_to_file(log)])
    rows = list(record.load_from_file(log))
    assert len(rows) == 6 and any(r.error_no == 0 for _, r in rows)
    with autotvm.apply_history_best(log):
        with tvm.transform.PassContext(opt_level=3):
            lib = relay.build(mod, target=target)
    rng = np.random.default_rng(0)
    xv, wv = rng.standard_normal((32, 64)).astype("float32"), rng.standard_normal((48, 64)).astype("float32")
    g = graph_executor.GraphModule(lib["default"](tvm.cl(0)))
    g.set_input(x=xv, w=wv)
    g.run()
    np.testing.assert_allclose(g.get_output(0).numpy(), np.maximum(xv @ wv.T, 0), rtol=1e-4, atol=1e-3)


def test_a_tuned_config_reaches_the_gpu_kernel(tmp_path):
    """The tiles of a logged config are the ones relay.build lowers the conv with."""
    target = tvm.target.Target("opencl", host="llvm")
    conv = next(t for t in _tasks("opencl") if t.name.startswith("conv2d"))
    pick = _config(conv.config_space, tile_f=[1, 2, 8], tile_y=[1, 2, 1], tile_x=[1, 8, 1])
    log = str(tmp_path / "conv.log")
    record.save_to_file(log, [(MeasureInput(target, conv, pick), MeasureResult((1e-5,), 0, 0.1, time.time()))])
    with autotvm.apply_history_best(log):
        with tvm.transform.PassContext(opt_level=3):
            lib = relay.build(_net(), target=target)
    src = [m for m in lib.get_lib().imported_modules if m.type_key == "opencl"][0].get_source()
    # tile_* are [block, vthread, thread, inner]: 8 (x) x 2 (y) x 2 (f) work-items per group; the
    # untuned tiles would give (8, 8, 4)
    assert "reqd_work_group_size(8, 2, 2)" in src.split("nn_conv2d_nn_relu_kernel0")[0]


@pytest.mark.opencl
def test_rpc_runner_measures_on_the_servers_opencl_device():
    """Candidates timed through a tracker on a server's cl(0); a bad launch is an error there too."""
    import rpc_services

    tracker = rpc_services.tracker()
    server = rpc_services.server("--tracker", f"127.0.0.1:{tracker.port}", "--key", "gpu-test")
    try:
        conv = next(t for t in _tasks("opencl") if t.name.startswith("conv2d"))
        space = conv.config_space
        configs = [space.get(space.default_index()),
                   _config(space, tile_f=[1, 16, 1], tile_y=[1, 8, 1], tile_x=[1, 8, 1])]
        option = autotvm.measure_option(
            builder=autotvm.LocalBuilder(n_parallel=2, timeout=60),
            runner=autotvm.RPCRunner("gpu-test", "127.0.0.1", tracker.port, number=2, repeat=1, timeout=60,
                                     cooldown_interval=0, check_correctness=True))
        batch = create_measure_batch(conv, option)
        try:
            results = batch([MeasureInput(conv.target, conv, c) for c in configs])
        finally:
            batch.close()
        assert results[0].error_no == 0 and all(c > 0 for c in results[0].costs), results
        assert results[1].error_no != 0, results
    finally:
        server.stop()
        tracker.stop()


@pytest.mark.opencl
def test_a_candidate_with_too_much_shared_memory_is_an_error():
    target = tvm.target.Target("opencl", host="llvm")
    x = relay.var("x", shape=(128, 128), dtype="float32")
    w = relay.var("w", shape=(128, 128), dtype="float32")
    mod = tvm.IRModule.from_expr(relay.Function([x, w], relay.nn.dense(x, w)))
    (task,) = autotvm.task.extract_from_program(mod["main"], target=target, params={})
    space = task.config_space
    # 128 x 64 slabs of A and B: 64 KiB of shared memory, over the 48 KiB a work-group gets
    big = next(space.get(i) for i in range(len(space))
               if space.get(i)["tile_y"].size[1:] == [1, 16, 8] and space.get(i)["tile_x"].size[1:] == [1, 16, 8]
               and space.get(i)["tile_k"].size[1:] == [64] and space.get(i)["vec"].val == 4)
    option = autotvm.measure_option(builder=autotvm.LocalBuilder(n_parallel=2),
                                    runner=autotvm.LocalRunner(number=1, repeat=1, timeout=60, cooldown_interval=0))
    batch = create_measure_batch(task, option)
    try:
        ok, bad = batch([MeasureInput(target, task, space.get(space.default_index())), MeasureInput(target, task, big)])
    finally:
        batch.close()
    assert ok.error_no == 0, ok
    assert bad.error_no != 0 and "shared memory" in str(bad.costs[0]), bad
