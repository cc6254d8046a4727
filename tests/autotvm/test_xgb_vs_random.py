"""XGBTuner beats RandomTuner on a real template: same task, budget and seeds, three runs."""

import numpy as np

from kiln import autotvm
from kiln.autotvm.tuner import RandomTuner, XGBTuner

BUDGET, SEEDS = 24, (0, 1, 2)


def _best(tuner, option):
    tuner.tune(n_trial=BUDGET, measure_option=option)
    return tuner.best_flops / 1e9


def test_xgb_beats_random_on_matmul():
    task = autotvm.task.create("kiln/matmul", (256, 256, 256, "float32"), "llvm")
    option = autotvm.measure_option(builder=autotvm.LocalBuilder(n_parallel=2),
                                    runner=autotvm.LocalRunner(number=5, repeat=2, cooldown_interval=0))
    xgb, rnd = [], []
    for seed in SEEDS:
        # Interleaved, so a change in machine load hits both tuners alike.
        rnd.append(_best(RandomTuner(task, seed=seed), option))
        xgb.append(_best(XGBTuner(task, plan_size=8, seed=seed), option))
    print(f"best GFLOPS after {BUDGET} trials: xgb {np.round(xgb, 1)} random {np.round(rnd, 1)}")
    assert np.mean(xgb) > np.mean(rnd), (xgb, rnd)
