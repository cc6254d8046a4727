"""AutoTVM on the board for the Cortex-M int8 kernels (issue 36 item 4): the template
``cortex_m/dense_int8`` (kiln/micro/templates.py) has the naive schedule (plain loops) and the
untuned default in its space; candidates are timed by instruction count on the emulated M4F."""

import numpy as np
import pytest

import kiln as tvm
from kiln import autotvm
from kiln.autotvm.space import FallbackConfigEntity
from kiln.micro import autotvm as micro_autotvm
from kiln.micro import templates
from kiln.micro.toolchain import missing_arm_gcc, missing_qemu

SHAPE = (25, 64, 64, "cortex-m4")  # a DS-CNN pointwise layer's rows of 5 pixels: M, N, K


@pytest.fixture(autouse=True)
def _tools():
    why = missing_arm_gcc() or missing_qemu()
    if why:
        pytest.skip(why)


def _task():
    return autotvm.task.create("cortex_m/dense_int8", SHAPE, "c -mcpu=cortex-m4")


def _instructions(task, config, tmp_path):
    sch, args = task.instantiate(config)
    src = tvm.build(sch, args, target=task.target, name="default_function").get_source()
    info = [(tuple(int(d) for d in t.shape), str(t.dtype), False) for t in args]
    return micro_autotvm.time_on_board(src, info, "qemu-mps2-an386", number=1, work=str(tmp_path))[0] * 1e9


def test_the_untuned_default_is_in_the_space_and_beats_the_naive_schedule(tmp_path):
    task = _task()
    default = templates.default_config(task)
    fallback = FallbackConfigEntity()
    task.instantiate(fallback)  # the template fills the fallback with its default
    assert [fallback[k].val for k in ("isa", "rows", "local")] == [default[k].val for k in ("isa", "rows", "local")]
    naive = next(task.config_space.get(i) for i in range(len(task.config_space))
                 if task.config_space.get(i)["isa"].val == "plain")
    n, d = _instructions(task, naive, tmp_path / "n"), _instructions(task, default, tmp_path / "d")
    assert n >= 1.5 * d, (n, d)


@pytest.mark.heavy
def test_grid_search_on_the_board_finds_the_default_within_15_percent(tmp_path):
    task = _task()
    log = str(tmp_path / "tune.json")
    option = autotvm.measure_option(builder=micro_autotvm.MicroBuilder(n_parallel=2),
                                    runner=micro_autotvm.MicroRunner("qemu-mps2-an386", number=1))
    tuner = autotvm.tuner.GridSearchTuner(task)
    tuner.tune(n_trial=len(task.config_space), measure_option=option, callbacks=[autotvm.callback.log_to_file(log)])
    costs = {str(inp.config): np.mean(res.costs) for inp, res in autotvm.record.load_from_file(log) if res.error_no == 0}
    assert len(costs) == len(task.config_space)
    best = min(costs.values())
    assert costs[str(templates.default_config(task))] <= 1.15 * best
    naive = max(v for k, v in costs.items() if "'plain'" in k)
    assert naive >= 1.5 * best


def _conv_tasks():
    """The conv tasks relay extracts from a small int8 CNN (direct stem, depthwise, 1x1) for the M4."""
    import os
    import sys
    sys.path.insert(0, os.path.dirname(__file__))
    from test_cortex_m_conv import _model
    _, mod, _ = _model(np.random.default_rng(5))
    tasks = autotvm.task.extract_from_program(mod, target="c -keys=arm_cpu -mcpu=cortex-m4")
    return {t.name + ("/1x1" if t.args[1][1][2:] == (1, 1) else ""): t for t in tasks}


def test_relay_int8_convs_are_tasks_with_the_cortex_m_knobs_and_the_default_in_the_space():
    """extract_from_program returns the Cortex-M int8 convs as tasks (kiln/topi/cortex_m/tuning.py);
    the fallback (what relay builds untuned) is a point of each space."""
    tasks = _conv_tasks()
    assert sorted(tasks) == ["conv2d_nchw.arm_cpu", "conv2d_nchw.arm_cpu/1x1", "depthwise_conv2d_nchw.arm_cpu"]
    knobs = {name: sorted(t.config_space.space_map) for name, t in tasks.items()}
    assert knobs == {"conv2d_nchw.arm_cpu": ["cols", "isa", "rows", "unroll"], "conv2d_nchw.arm_cpu/1x1": ["cols", "isa", "rows", "unroll"],
                     "depthwise_conv2d_nchw.arm_cpu": ["isa", "unroll"]}
    for t in tasks.values():
        fallback = FallbackConfigEntity()
        t.instantiate(fallback)
        points = [{k: c[k].val for k in t.config_space.space_map} for c in
                  (t.config_space.get(i) for i in range(len(t.config_space)))]
        assert {k: fallback[k].val for k in t.config_space.space_map} in points


def test_the_m55_depthwise_task_has_the_mve_rows_as_its_default():
    """On the M55 the depthwise task's isa knob adds ``mve`` (dw_row_mve_intrin; stride 1), the
    untuned default, beside the DSP rows; the M4's space has no ``mve``."""
    import os
    import sys
    sys.path.insert(0, os.path.dirname(__file__))
    from test_cortex_m_conv import _model
    _, mod, _ = _model(np.random.default_rng(5))
    for cpu, isas in (("cortex-m55", ["plain", "unrolled", "dsp", "mve"]), ("cortex-m4", ["plain", "unrolled", "dsp"])):
        (t,) = [t for t in autotvm.task.extract_from_program(mod, target=f"c -keys=arm_cpu -mcpu={cpu}")
                if t.name == "depthwise_conv2d_nchw.arm_cpu"]
        assert [e.val for e in t.config_space.space_map["isa"].entities] == isas
        fallback = FallbackConfigEntity()
        t.instantiate(fallback)
        assert fallback["isa"].val == isas[-1]


def test_the_default_conv_beats_the_naive_schedule_on_the_board(tmp_path):
    """The 1x1 task on the M4F board: the untuned default >= 1.5x fewer instructions than plain loops."""
    t = _conv_tasks()["conv2d_nchw.arm_cpu/1x1"]
    fallback = FallbackConfigEntity()
    t.instantiate(fallback)
    naive = next(t.config_space.get(i) for i in range(len(t.config_space)) if t.config_space.get(i)["isa"].val == "plain")
    n, d = _instructions(t, naive, tmp_path / "n"), _instructions(t, fallback, tmp_path / "d")
    assert n >= 1.5 * d, (n, d)


@pytest.mark.heavy
def test_ds_cnn_conv_tasks_tuned_on_the_board(tmp_path):
    """DS-CNN's int8 conv tasks (the published shapes, quantized by onnxruntime) grid-searched on the
    M4F board by instruction count: each tuned best >= 1.5x fewer than its naive schedule, the
    untuned default within 15 % of the best; the tuned log builds a model equal to the host's."""
    import os
    import sys
    onnx = pytest.importorskip("onnx")
    oq = pytest.importorskip("onnxruntime.quantization")
    sys.path.insert(0, os.path.dirname(__file__))
    from ds_cnn_model import SHAPE, ds_cnn
    from kiln import micro, relay
    from kiln.contrib import graph_executor
    from kiln.relay.backend import Executor

    model, inputs = ds_cnn()
    onnx.save(model, str(tmp_path / "f.onnx"))

    class Calibration(oq.CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(0)
            self.data = iter([{"input": rng.standard_normal(SHAPE).astype("float32")} for _ in range(4)])

        def get_next(self):
            return next(self.data, None)

    oq.quantize_static(str(tmp_path / "f.onnx"), str(tmp_path / "q.onnx"), Calibration(), quant_format=oq.QuantFormat.QDQ,
                       activation_type=oq.QuantType.QInt8, weight_type=oq.QuantType.QInt8, per_channel=True)
    mod, params = relay.frontend.from_onnx(onnx.load(str(tmp_path / "q.onnx")))
    target = "c -keys=arm_cpu -mcpu=cortex-m4"
    tasks = [t for t in autotvm.task.extract_from_program(mod, params=params, target=target) if "conv" in t.name]
    assert len(tasks) == 3
    log = str(tmp_path / "tune.json")
    option = autotvm.measure_option(builder=micro_autotvm.MicroBuilder(n_parallel=2, timeout=120),
                                    runner=micro_autotvm.MicroRunner("qemu-mps2-an386", number=1))
    for t in tasks:
        autotvm.tuner.GridSearchTuner(t).tune(n_trial=len(t.config_space), measure_option=option,
                                              callbacks=[autotvm.callback.log_to_file(log)])
        fallback = FallbackConfigEntity()
        t.instantiate(fallback)
        want = {k: fallback[k].val for k in t.config_space.space_map}
        costs = {}
        for inp, res in autotvm.record.load_from_file(log):
            if inp.task.workload == t.workload and res.error_no == 0:
                costs[tuple(sorted((k, inp.config[k].val) for k in t.config_space.space_map))] = np.mean(res.costs)
        assert len(costs) == len(t.config_space), t
        best = min(costs.values())
        naive = min(v for k, v in costs.items() if dict(k)["isa"] == "plain")
        assert naive >= 1.5 * best, (t.name, naive, best)
        assert costs[tuple(sorted(want.items()))] <= 1.15 * best, (t.name, costs, want)
    with autotvm.apply_history_best(log):
        lib = relay.build(mod, target=target, params=params,
                          executor=Executor("aot", {"interface-api": "c", "unpacked-api": True}))
    project = micro.generate_project(micro.get_microtvm_template_projects("qemu-mps2-an386"), lib, tmp_path / "fw",
                                     {"inputs": inputs})
    project.build()
    host = graph_executor.GraphModule(relay.build(mod, target="llvm", params=params)["default"](tvm.cpu(0)))
    host.set_input(**inputs)
    host.run()
    np.testing.assert_array_equal(project.run()["outputs"]["output"], host.get_output(0).numpy())
