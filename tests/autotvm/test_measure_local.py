"""Local measurement: real builds and timings; failing candidates become errors, not aborts."""

import numpy as np

from kiln import autotvm
from kiln.autotvm.measure import MeasureErrorNo, MeasureInput
from kiln.autotvm.measure.measure import create_measure_batch
from kiln.autotvm.tuner import GridSearchTuner


def _config(task, **wanted):
    space = task.config_space
    for i in range(len(space)):
        cfg = space.get(i)
        if all((cfg[k].val if hasattr(cfg[k], "val") else cfg[k].size[-1]) == v for k, v in wanted.items()):
            return cfg
    raise AssertionError(f"no config with {wanted}")


def test_crash_hang_and_reject_are_recorded_and_tuning_goes_on(tmp_path):
    task = autotvm.task.create("test/add", (1024, "faults"), "llvm")
    option = autotvm.measure_option(
        builder=autotvm.LocalBuilder(n_parallel=2, timeout=30),
        runner=autotvm.LocalRunner(number=2, repeat=1, timeout=3, cooldown_interval=0))
    batch = create_measure_batch(task, option)
    try:
        inputs = [MeasureInput(task.target, task, _config(task, fault=f, tile=4))
                  for f in ("crash", "none", "hang", "reject", "none")]
        results = batch(inputs)
    finally:
        batch.close()
    kinds = [MeasureErrorNo(r.error_no) for r in results]
    assert kinds == [MeasureErrorNo.RUNTIME_DEVICE, MeasureErrorNo.NO_ERROR, MeasureErrorNo.RUN_TIMEOUT,
                     MeasureErrorNo.INSTANTIATION_ERROR, MeasureErrorNo.NO_ERROR]
    assert "signal 11" in results[0].costs[0] or "SIGSEGV" in results[0].costs[0]
    assert "invalid for the template" in results[3].costs[0]
    assert all(c > 0 for c in results[1].costs)


def test_a_tuning_run_through_crashes_logs_errors(tmp_path):
    task = autotvm.task.create("test/add", (1024, "faults"), "llvm")
    log = str(tmp_path / "faults.log")
    option = autotvm.measure_option(builder=autotvm.LocalBuilder(n_parallel=2),
                                    runner=autotvm.LocalRunner(number=2, repeat=1, timeout=3,
                                                               cooldown_interval=0))
    tuner = GridSearchTuner(task)
    # Index order is tile fastest, then fault: the first 11 are fault=none, then crashes.
    tuner.tune(n_trial=16, measure_option=option, callbacks=[autotvm.callback.log_to_file(log)])
    errors = [MeasureErrorNo(r.error_no) for _, r in autotvm.record.load_from_file(log)]
    assert len(errors) == 16
    assert MeasureErrorNo.RUNTIME_DEVICE in errors and MeasureErrorNo.NO_ERROR in errors
    assert tuner.best_config["fault"].val == "none"


def test_check_correctness_against_the_untuned_kernel():
    task = autotvm.task.create("kiln/matmul", (64, 64, 64, "float32"), "llvm")
    option = autotvm.measure_option(
        builder=autotvm.LocalBuilder(n_parallel=2),
        runner=autotvm.LocalRunner(number=2, repeat=1, check_correctness=True, cooldown_interval=0))
    batch = create_measure_batch(task, option)
    try:
        configs = [task.config_space.get(i) for i in (0, 101, 555)]
        results = batch([MeasureInput(task.target, task, c) for c in configs])
    finally:
        batch.close()
    assert [r.error_no for r in results] == [0, 0, 0], results


def test_wrong_answers_are_caught():
    from kiln.autotvm.measure.reference import Reference
    want = [np.ones((4, 4), "float32") * 100]
    assert Reference.compare(want, [want[0] + 1e-3]) == ""
    assert "differs" in Reference.compare(want, [want[0] * 1.5])
