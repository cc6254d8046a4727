"""The adreno conv2d / depthwise templates: extracted for opencl -device=adreno, measured on the
OpenCL device by LocalRunner (check_correctness), their kernels reading textures."""

import pytest

import kiln as tvm
from kiln import autotvm, relay
from kiln.autotvm.measure import MeasureInput
from kiln.autotvm.measure.measure import create_measure_batch

TARGET = "opencl -device=adreno"


def _tasks():
    x = relay.var("data", shape=(1, 8, 8, 8), dtype="float32")
    y = relay.nn.conv2d(x, relay.var("w1", shape=(16, 8, 3, 3)), padding=(1, 1))
    y = relay.nn.conv2d(relay.nn.relu(y), relay.var("dw", shape=(16, 1, 3, 3)), padding=(1, 1), groups=16)
    mod = tvm.IRModule.from_expr(relay.Function(relay.analysis.free_vars(y), y))
    return autotvm.task.extract_from_program(mod["main"], target=tvm.target.Target(TARGET, host="llvm"), params={})


def test_adreno_templates_are_extracted_with_defaults():
    tasks = _tasks()
    assert sorted(t.name for t in tasks) == ["conv2d_nchw.adreno", "depthwise_conv2d_nchw.adreno"]
    for t in tasks:
        assert {"tile_f", "tile_y", "tile_x"} <= set(t.config_space.space_map)
        assert t.config_space.default_index() is not None


@pytest.mark.opencl
def test_adreno_candidates_measure_on_the_device():
    option = autotvm.measure_option(
        builder=autotvm.LocalBuilder(n_parallel=2, timeout=60),
        runner=autotvm.LocalRunner(number=2, repeat=1, timeout=60, cooldown_interval=0, check_correctness=True))
    for task in _tasks():
        space = task.config_space
        configs = [space.get(space.default_index()), space.get((space.default_index() + 7) % len(space))]
        batch = create_measure_batch(task, option)
        try:
            results = batch([MeasureInput(task.target, task, c) for c in configs])
        finally:
            batch.close()
        assert results[0].error_no == 0, results[0]
        assert all(c > 0 for c in results[0].costs)
        with tvm.target.Target(TARGET, host="llvm"):
            s, args = task.instantiate(configs[0])
        src = tvm.build(s, args, target=tvm.target.Target(TARGET, host="llvm")).imported_modules[0].get_source()
        assert "read_imagef" in src
