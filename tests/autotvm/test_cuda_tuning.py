"""Tuning for CUDA: task extraction for 'cuda' targets gives the shared GPU templates (no GPU
needed); on an NVIDIA GPU, LocalRunner times candidates on tvm.cuda(0), a candidate with too many
threads is a candidate error, and the best config of a short run reaches relay.build."""

import numpy as np
import pytest

import kiln as tvm
from kiln import autotvm, relay
from kiln.autotvm import record
from kiln.autotvm.measure import MeasureErrorNo, MeasureInput
from kiln.autotvm.measure.measure import create_measure_batch


def _dense_mod():
    x = relay.var("x", shape=(32, 64), dtype="float32")
    w = relay.var("w", shape=(48, 64), dtype="float32")
    return tvm.IRModule.from_expr(relay.Function([x, w], relay.nn.relu(relay.nn.dense(x, w))))


def _conv_task(target):
    x = relay.var("data", shape=(1, 8, 8, 8), dtype="float32")
    y = relay.nn.conv2d(x, relay.var("w1", shape=(16, 8, 3, 3)), padding=(1, 1))
    mod = tvm.IRModule.from_expr(relay.Function(relay.analysis.free_vars(y), y))
    (task,) = autotvm.task.extract_from_program(mod["main"], target=target, params={})
    return task


def test_cuda_targets_get_the_gpu_templates():
    target = tvm.target.Target("cuda", host="llvm")
    (task,) = autotvm.task.extract_from_program(_dense_mod()["main"], target=target, params={})
    assert task.name == "dense_nopack.gpu"
    assert {"tile_x", "tile_y", "tile_k"} <= set(task.config_space.space_map)
    assert _conv_task(target).name == "conv2d_nchw.gpu"


def _config(space, **sizes):
    for i in range(len(space)):
        c = space.get(i)
        if all(list(c[k].size[1:]) == v for k, v in sizes.items()):
            return c
    raise AssertionError(f"no config with {sizes}")


@pytest.mark.gpu
def test_local_runner_on_the_gpu_records_bad_candidates():
    target = tvm.target.Target("cuda -max_num_threads=512", host="llvm")
    conv = _conv_task(target)
    space = conv.config_space
    good = [space.get(space.default_index()),
            _config(space, tile_f=[1, 4, 2], tile_y=[1, 4, 1], tile_x=[1, 8, 1], tile_rc=[4])]
    too_many = _config(space, tile_f=[1, 16, 1], tile_y=[1, 8, 1], tile_x=[1, 8, 1])  # 1024 threads > 512
    option = autotvm.measure_option(
        builder=autotvm.LocalBuilder(n_parallel=2, timeout=60),
        runner=autotvm.LocalRunner(number=2, repeat=1, timeout=60, cooldown_interval=0, check_correctness=True))
    batch = create_measure_batch(conv, option)
    try:
        results = batch([MeasureInput(conv.target, conv, c) for c in good + [too_many]])
    finally:
        batch.close()
    assert [r.error_no for r in results[:2]] == [0, 0], results
    assert all(0 < c < 1 for r in results[:2] for c in r.costs)
    assert results[2].error_no != MeasureErrorNo.NO_ERROR


@pytest.mark.gpu
def test_tuning_dense_on_the_gpu_and_building_with_the_best(tmp_path):
    from kiln.autotvm.tuner import RandomTuner
    from kiln.contrib import graph_executor

    target = tvm.target.Target("cuda", host="llvm")
    mod = _dense_mod()
    (task,) = autotvm.task.extract_from_program(mod["main"], target=target, params={})
    log = str(tmp_path / "dense.log")
    option = autotvm.measure_option(builder=autotvm.LocalBuilder(n_parallel=2),
                                    runner=autotvm.LocalRunner(number=2, repeat=1, timeout=60, cooldown_interval=0))
    RandomTuner(task).tune(n_trial=6, measure_option=option, callbacks=[autotvm.callback.log_to_file(log)])
    rows = list(record.load_from_file(log))
    assert len(rows) == 6 and any(r.error_no == 0 for _, r in rows)
    with autotvm.apply_history_best(log):
        with tvm.transform.PassContext(opt_level=3):
            lib = relay.build(mod, target=target)
    rng = np.random.default_rng(0)
    xv, wv = rng.standard_normal((32, 64)).astype("float32"), rng.standard_normal((48, 64)).astype("float32")
    g = graph_executor.GraphModule(lib["default"](tvm.cuda(0)))
    g.set_input(x=xv, w=wv)
    g.run()
    np.testing.assert_allclose(g.get_output(0).numpy(), np.maximum(xv @ wv.T, 0), rtol=1e-4, atol=1e-3)
