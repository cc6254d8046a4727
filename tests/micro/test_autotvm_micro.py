"""AutoTVM measuring candidates on the emulated Cortex-M3: MicroBuilder (C sources) + MicroRunner
(CRT firmware in qemu, board time through a session)."""

import pytest

import kiln as tvm
from kiln import autotvm
from kiln.autotvm.measure import MeasureErrorNo
from kiln.autotvm.space import FallbackConfigEntity
from kiln.autotvm.tuner import RandomTuner
from kiln.errors import TuningError
from kiln.micro import autotvm as micro_autotvm
from kiln.micro.toolchain import missing_arm_gcc, missing_qemu


@pytest.fixture
def tools():
    why = missing_arm_gcc() or missing_qemu()
    if why:
        pytest.skip(why)


def test_tuning_on_the_board_records_board_time(tools, tmp_path):
    task = autotvm.task.create("kiln/matmul", (16, 16, 16, "float32"), "c -mcpu=cortex-m3")
    option = autotvm.measure_option(builder=micro_autotvm.MicroBuilder(n_parallel=2),
                                    runner=micro_autotvm.MicroRunner("qemu-mps2-an385", number=2))
    log = str(tmp_path / "micro.log")
    tuner = RandomTuner(task)
    tuner.tune(n_trial=3, measure_option=option, callbacks=[autotvm.callback.log_to_file(log)])
    records = list(autotvm.record.load_from_file(log))
    assert len(records) == 3
    assert all(r.error_no == MeasureErrorNo.NO_ERROR and r.costs[0] > 0 for _, r in records)
    assert tuner.best_flops > 0


def test_board_time_does_not_depend_on_the_host(tools):
    task = autotvm.task.create("kiln/matmul", (16, 16, 16, "float32"), "c -mcpu=cortex-m3")
    sch, args = task.instantiate(FallbackConfigEntity())
    src = tvm.build(sch, args, target=task.target, name="default_function").get_source()
    info = [(tuple(int(d) for d in t.shape), str(t.dtype), False) for t in args]
    a = micro_autotvm.time_on_board(src, info, number=2)[0]
    b = micro_autotvm.time_on_board(src, info, number=2)[0]
    assert a > 0 and abs(a - b) <= 0.01 * a  # -icount: instructions, not host load


def test_micro_builder_wants_a_c_task():
    task = autotvm.task.create("kiln/matmul", (16, 16, 16, "float32"), "llvm")
    with pytest.raises(TuningError, match="C target"):
        micro_autotvm.MicroBuilder(n_parallel=1).set_task(task)
