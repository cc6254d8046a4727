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
