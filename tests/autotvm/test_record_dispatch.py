"""Records round-trip; pick_best; apply_history_best changes the kernel that is built."""

import threading
import time

import numpy as np

import kiln as tvm
from kiln import autotvm
from kiln.autotvm import record
from kiln.autotvm.measure import MeasureInput, MeasureResult


def _pairs(task, costs_by_index):
    return [(MeasureInput(task.target, task, task.config_space.get(i)),
             MeasureResult(tuple(c) if isinstance(c, tuple) else (c,), 0 if not isinstance(c, str) else 4,
                           0.5, time.time()))
            for i, c in costs_by_index.items()]


def test_records_round_trip(tmp_path):
    task = autotvm.task.create("kiln/matmul", (64, 64, 64, "float32"), "llvm")
    pairs = _pairs(task, {3: (0.002, 0.0021), 17: 0.001, 40: "RuntimeError: boom"})
    log = str(tmp_path / "t.log")
    record.save_to_file(log, pairs)
    with open(log, "a") as f:
        f.write("not json\n")  # a stray line is skipped with a warning, not fatal
    back = list(record.load_from_file(log))
    assert len(back) == 3
    for (inp, res), (inp2, res2) in zip(pairs, back):
        assert inp2.task.workload == inp.task.workload
        assert str(inp2.target) == str(inp.target)
        assert inp2.config == inp.config
        assert res2.error_no == res.error_no and res2.costs == res.costs
        assert record.encode(inp2, res2) == record.encode(inp, res)


def test_pick_best_keeps_the_fastest_valid_record(tmp_path):
    task = autotvm.task.create("kiln/matmul", (64, 64, 64, "float32"), "llvm")
    other = autotvm.task.create("kiln/matmul", (32, 32, 32, "float32"), "llvm")
    log, best = str(tmp_path / "all.log"), str(tmp_path / "best.log")
    record.save_to_file(log, _pairs(task, {1: 0.003, 2: 0.001, 5: "crash"}) + _pairs(other, {0: 0.5}))
    record.pick_best(log, best)
    kept = {(i.task.workload, i.config.index) for i, _ in record.load_from_file(best)}
    assert kept == {(task.workload, 2), (other.workload, 0)}


def test_apply_history_best_changes_the_built_kernel(tmp_path):
    from kiln.autotvm.templates import matmul
    task = autotvm.task.create("kiln/matmul", (64, 64, 64, "float32"), "llvm")
    space = task.config_space
    tuned = next(i for i in range(len(space))
                 if space.get(i)["tile_x"].size[-1] == 16 and space.get(i)["tile_y"].size[-1] == 4)
    log = str(tmp_path / "m.log")
    record.save_to_file(log, _pairs(task, {tuned: 0.0001, tuned + 1: 0.01}))

    with tvm.target.Target("llvm"):
        s0, args0 = matmul(64, 64, 64, "float32")
        untuned = str(tvm.lower(s0, args0))
        with autotvm.apply_history_best(log):
            s1, args1 = matmul(64, 64, 64, "float32")
            tuned_ir = str(tvm.lower(s1, args1))
    assert untuned != tuned_ir
    # Vector loops become ramps: 16 lanes wide as logged, 32 in the untuned fallback.
    assert ", 1, 16)]" in tuned_ir and ", 1, 16)]" not in untuned and ", 1, 32)]" in untuned
    f = tvm.build(s1, args1, target="llvm")
    a, b = np.random.rand(64, 64).astype("float32"), np.random.rand(64, 64).astype("float32")
    c = tvm.nd.empty((64, 64), "float32")
    f(tvm.nd.array(a), tvm.nd.array(b), c)
    np.testing.assert_allclose(c.numpy(), a @ b, rtol=1e-4)


def test_dispatch_context_is_per_thread(tmp_path):
    from kiln.autotvm.templates import matmul
    task = autotvm.task.create("kiln/matmul", (64, 64, 64, "float32"), "llvm")
    log = str(tmp_path / "m.log")
    record.save_to_file(log, _pairs(task, {7: 0.0001}))
    seen = {}

    def other_thread():
        with tvm.target.Target("llvm"):
            seen["cfg"] = autotvm.dispatcher.current().query(tvm.target.Target("llvm"), task.workload)

    with autotvm.apply_history_best(log) as ctx:
        assert ctx.query(tvm.target.Target("llvm"), task.workload).index == 7
        t = threading.Thread(target=other_thread)
        t.start()
        t.join()
    assert seen["cfg"].is_fallback  # the with-block of this thread is not another thread's
    assert matmul  # imported for its registration


def test_an_untuned_workload_warns_once_per_history_context(tmp_path, caplog):
    from kiln.autotvm.templates import matmul
    log = tmp_path / "empty.log"
    log.write_text("")

    def build_three_times():  # a fresh thread: apply_history_best has no parent context
        with tvm.target.Target("llvm"), autotvm.apply_history_best(str(log)):
            for _ in range(3):
                matmul(48, 48, 48, "float32")

    with caplog.at_level("WARNING", logger="autotvm"):
        worker = threading.Thread(target=build_three_times)
        worker.start()
        worker.join()
    warned = [r for r in caplog.records if "Cannot find config" in r.getMessage()]
    assert len(warned) == 1, [r.getMessage() for r in warned]
