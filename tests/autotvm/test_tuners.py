"""Every tuner finds the known best of a tiny space, and never measures a config twice."""

import pytest

from kiln import autotvm
from kiln.autotvm.tuner import GATuner, GridSearchTuner, RandomTuner, XGBTuner

from conftest import toy_cost, toy_template

TUNERS = {
    "grid": lambda t: GridSearchTuner(t),
    "random": lambda t: RandomTuner(t, seed=0),
    "ga": lambda t: GATuner(t, pop_size=16, seed=0),
    "xgb-knob": lambda t: XGBTuner(t, plan_size=16, feature_type="knob", seed=0),
    "xgb-reg": lambda t: XGBTuner(t, plan_size=16, feature_type="knob", loss_type="reg", seed=0),
}


def best_index(task):
    return min(range(len(task.config_space)), key=lambda i: toy_cost(task.config_space.get(i)))


@pytest.mark.parametrize("name", sorted(TUNERS))
def test_tuner_finds_the_best_of_a_tiny_space(name, toy_task, synthetic_option):
    tuner = TUNERS[name](toy_task)
    tuner.tune(n_trial=len(toy_task.config_space), measure_option=synthetic_option)
    seen = synthetic_option["runner"].seen
    assert len(seen) == len(set(seen)), "a config was measured twice"
    assert tuner.best_config.index == best_index(toy_task)


@pytest.mark.parametrize("plan_size", [12, 120])
def test_xgb_measures_a_whole_space_whose_size_is_a_multiple_of_its_plan(plan_size, toy_task,
                                                                          synthetic_option):
    # The last batch leaves nothing unmeasured for the model to rank: tuning must end cleanly
    # (MobileNetV2 has a 6-config depthwise task that a 4-trial plan covers exactly).
    tuner = XGBTuner(toy_task, plan_size=plan_size, feature_type="knob", seed=0)
    tuner.tune(n_trial=len(toy_task.config_space), measure_option=synthetic_option)
    assert sorted(synthetic_option["runner"].seen) == list(range(len(toy_task.config_space)))
    assert tuner.best_config.index == best_index(toy_task)


def test_xgb_finds_the_best_with_half_the_budget(toy_task, synthetic_option):
    tuner = XGBTuner(toy_task, plan_size=12, feature_type="knob", seed=1)
    tuner.tune(n_trial=len(toy_task.config_space) // 2, measure_option=synthetic_option)
    assert tuner.best_config.index == best_index(toy_task)


def test_early_stopping_and_callbacks(toy_task, synthetic_option, capsys):
    tuner = GridSearchTuner(toy_task)
    tuner.tune(n_trial=100, measure_option=synthetic_option, early_stopping=8,
               callbacks=[autotvm.callback.progress_bar(100, prefix="[Task  1/1] ")])
    out = capsys.readouterr().out
    assert tuner.trial_count < 100
    assert "[Task  1/1] Current/Best:" in out and "GFLOPS | Progress: (" in out
    assert out.rstrip().endswith("Done.")


def test_resuming_skips_logged_configs(toy_task, synthetic_option, tmp_path):
    log = str(tmp_path / "toy.log")
    first = RandomTuner(toy_task, seed=3)
    first.tune(n_trial=20, measure_option=synthetic_option,
               callbacks=[autotvm.callback.log_to_file(log)])
    done = set(synthetic_option["runner"].seen)
    second = RandomTuner(toy_task, seed=4)
    second.load_history(autotvm.record.load_from_file(log))
    synthetic_option["runner"].seen.clear()
    second.tune(n_trial=20, measure_option=synthetic_option)
    assert not done & set(synthetic_option["runner"].seen)
    assert second.best_flops >= first.best_flops


@autotvm.template("test/toy_with_default")
def toy_with_default(n: int):
    s, args = toy_template(n)  # the toy knobs a, b, c
    autotvm.get_config().define_default({"a": 2, "b": 3, "c": 1})
    return s, args


@pytest.mark.parametrize("name", sorted(TUNERS))
def test_every_tuner_measures_the_declared_default_first_and_once(name, synthetic_option):
    task = autotvm.task.create("test/toy_with_default", (16,), "llvm")
    default = task.config_space.default_index()
    assert [task.config_space.get(default)[k].val for k in "abc"] == [2, 3, 1]
    tuner = TUNERS[name](task)
    tuner.tune(n_trial=len(task.config_space), measure_option=synthetic_option)
    seen = synthetic_option["runner"].seen
    assert seen[0] == default
    assert sorted(seen) == list(range(len(task.config_space)))


def test_a_default_outside_the_space_is_ignored():
    space = autotvm.ConfigSpace()
    space.define_knob("a", [1, 2, 4])
    space.define_knob("flag", [False, True])
    space.define_default({"a": 3, "flag": True})
    assert space.default_index() is None
    space.define_default({"a": 4, "flag": 1})  # 1 is not True: values match by type too
    assert space.default_index() is None
    space.define_default({"flag": True})
    assert space.get(space.default_index())["a"].val == 4
    space.define_split("tile", 16, num_outputs=2)  # a knob the declared default does not name
    assert space.default_index() is None


def test_other_tasks_records_are_featurized_once_for_all_tuners(synthetic_option, tmp_path, monkeypatch):
    """Each task of a model learns from the same prior log (tvmc tune --tuning-records); every
    record decodes to its own task object, so the features are cached by value, not by task."""
    from kiln.autotvm.tuner import cost_model, features
    pytest.importorskip("xgboost")
    log = str(tmp_path / "prior.log")
    other = autotvm.task.create("test/toy", args=(64,), target="llvm")
    RandomTuner(other, seed=1).tune(n_trial=12, measure_option=synthetic_option,
                                     callbacks=[autotvm.callback.log_to_file(log)])
    calls = []
    real = features.EXTRACTORS["itervar"]
    monkeypatch.setitem(features.EXTRACTORS, "itervar", 
                        lambda task, cfg: calls.append((tuple(task.args), cfg.index)) or real(task, cfg))
    monkeypatch.setattr(cost_model, "_TRANSFER_CACHE", {})
    for n in (128, 256, 512):  # three tasks of one model, each loading the whole prior log
        tuner = XGBTuner(autotvm.task.create("test/toy", args=(n,), target="llvm"), plan_size=4)
        tuner.load_history(autotvm.record.load_from_file(log))
        assert tuner.cost_model._extra_x is not None and len(tuner.cost_model._extra_x) == 12
    prior = sorted(index for args, index in calls if args == (64,))
    assert prior == sorted({inp.config.index for inp, _ in autotvm.record.load_from_file(log)})
