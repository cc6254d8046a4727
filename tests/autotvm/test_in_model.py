"""autotvm.in_model: each task's config chosen by timing its kernels inside the whole model."""

import time

import numpy as np
import pytest

import kiln as tvm
from kiln import autotvm
from kiln.autotvm import in_model, record
from kiln.autotvm.measure import MeasureInput, MeasureResult
from kiln.errors import KilnError

relay = pytest.importorskip("kiln.relay")


def _net():
    """A 1x1 conv then a 3x3 one (Winograd on x86), weights bound as constants like a model's."""
    rng = np.random.default_rng(1)
    x = relay.var("data", shape=(1, 16, 14, 14), dtype="float32")
    y = relay.nn.relu(relay.nn.conv2d(x, relay.var("w1", shape=(32, 16, 1, 1))))
    y = relay.nn.conv2d(y, relay.var("w2", shape=(32, 32, 3, 3)), padding=(1, 1))
    mod = tvm.IRModule.from_expr(relay.Function(relay.analysis.free_vars(y), y))
    params = {"w1": rng.uniform(-1, 1, (32, 16, 1, 1)).astype("float32"),
              "w2": rng.uniform(-1, 1, (32, 32, 3, 3)).astype("float32")}
    return mod, params


def _tasks(mod, params):
    return autotvm.task.extract_from_program(mod["main"], target="llvm", params=params,
                                             ops=(relay.op.get("nn.conv2d"),))


def _records(tasks, per_task: int = 3) -> list:
    """For each task, its first configs whose output block differs from the default's (so the
    model gains layout transforms), ranked by made-up costs: the picker re-times them in the
    model, these only choose which it tries."""
    rows = []
    for task in tasks:
        space = task.config_space
        default = space.get(space.default_index())
        others = [i for i in range(len(space)) if space.get(i)["oc_bn"].val != default["oc_bn"].val]
        for rank, i in enumerate(others[:per_task]):
            rows.append((MeasureInput(task.target, task, space.get(i)),
                         MeasureResult((1e-4 * (rank + 1),), 0, 0.1, time.time())))
    return rows


def _run(lib, x):
    from kiln.contrib import graph_executor
    m = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    m.set_input("data", x)
    m.run()
    return m.get_output(0).numpy()


def test_relay_build_names_the_workload_of_each_tuned_kernel():
    mod, params = _net()
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm", params=params)
    assert sorted(map(str, lib.kernel_workloads.values())) == sorted(str(t.workload) for t in _tasks(mod, params))
    assert all(name.startswith("tvmgen_default_fused_nn_conv2d") for name in lib.kernel_workloads)


def test_candidates_are_the_default_then_the_fastest_records():
    mod, params = _net()
    tasks = _tasks(mod, params)
    rows = _records(tasks, per_task=5)
    cands = in_model.candidates(tasks, rows, top=2)
    for task in tasks:
        indexes = [cfg.index for _, cfg in cands[task.workload]]
        ranked = [inp.config.index for inp, _ in rows if inp.task.workload == task.workload]
        assert indexes == [task.config_space.default_index()] + ranked[:2]


def test_picked_log_builds_a_model_that_matches_the_reference(tmp_path):
    mod, params = _net()
    tasks = _tasks(mod, params)
    out = tmp_path / "picked.log"
    picks = in_model.pick_in_model(mod, params, "llvm", tasks, _records(tasks), rounds=5, out=str(out))

    assert len(picks) == len(tasks)
    tried = {t.workload: {c.index for _, c in in_model.candidates(tasks, _records(tasks))[t.workload]}
             for t in tasks}
    for inp, res in picks:
        assert inp.config.index in tried[inp.task.workload]
        assert res.error_no == 0 and res.costs[0] > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["picked.log"]  # no temporary left behind
    assert len(list(record.load_from_file(str(out)))) == len(tasks)

    x = np.random.default_rng(2).uniform(-1, 1, (1, 16, 14, 14)).astype("float32")
    want = relay.reference.run(mod, {"data": x}, params)
    with autotvm.apply_history_best(str(out)), tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm", params=params)
    np.testing.assert_allclose(_run(lib, x), want, rtol=1e-4, atol=1e-3)


def test_a_candidate_must_beat_the_default_by_the_margin():
    mod, params = _net()
    tasks = _tasks(mod, params)
    # Nothing is twice as fast as itself: with margin 1.0 every task keeps its default.
    picks = in_model.pick_in_model(mod, params, "llvm", tasks, _records(tasks), rounds=3, margin=1.0)
    assert {inp.task.workload: inp.config.index for inp, _ in picks} == \
        {t.workload: t.config_space.default_index() for t in tasks}


def test_no_tasks_is_a_clear_error():
    mod, params = _net()
    with pytest.raises(KilnError, match="no task"):
        in_model.pick_in_model(mod, params, "llvm", [], [], rounds=1)


def test_picks_that_lose_the_whole_run_give_way_to_the_defaults(monkeypatch):
    """The kernels are built and timed for real; the test only decides the verdicts: every
    candidate's kernels come out faster, and the build of all the picks slower as a whole."""
    mod, params = _net()
    tasks = _tasks(mod, params)
    builds, finals = [], []
    real_init, real_cost, real_interleaved = in_model._Run.__init__, in_model._Run.cost, in_model._interleaved

    def init(self, *args):
        real_init(self, *args)
        builds.append(self)

    def cost(self, workload):
        return real_cost(self, workload) * (1.0 if self is builds[0] else 0.5)

    def interleaved(runs, rounds, burst):
        medians = real_interleaved(runs, rounds, burst)
        if len(runs) == 2:  # the defaults against the picks
            finals.append(runs[1])
            return [medians[0], medians[0] * 1.5]
        return medians

    monkeypatch.setattr(in_model._Run, "__init__", init)
    monkeypatch.setattr(in_model._Run, "cost", cost)
    monkeypatch.setattr(in_model, "_interleaved", interleaved)
    picks = in_model.pick_in_model(mod, params, "llvm", tasks, _records(tasks), rounds=2)
    assert len(finals) == 1 and finals[0] is builds[-1]  # the picks were built and run whole
    assert {inp.task.workload: inp.config.index for inp, _ in picks} == \
        {t.workload: t.config_space.default_index() for t in tasks}


def test_picking_for_a_machine_of_another_kind_is_a_clear_error():
    mod, params = _net()
    with pytest.raises(KilnError, match="cannot run code for .*aarch64"):
        in_model.pick_in_model(mod, params, "llvm -mtriple=aarch64-linux-gnu", _tasks(mod, params), [], rounds=1)
    with pytest.raises(KilnError, match="not CPU code"):
        in_model.check_runs_here("cuda")
    in_model.check_runs_here("llvm")  # this machine runs its own code
