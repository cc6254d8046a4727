"""XGBTuner beats RandomTuner on the real matmul template: same task, budget and seeds.

What is compared is how each tuner spends its budget once the XGB model has something to learn
from: the mean cost of the configs it proposes after its first ``PLAN`` random ones, against
the random tuner's configs at the same trial positions. That is the cost model's whole job.

The space, the knobs and the features the model learns from (loop features of each config's
lowered program) are the real template's; the *cost* is a fixed landscape over its knobs
(``landscape``), not a wall-clock measurement: timings on a shared 2-core machine differ by
a median 26% between two runs of one config, which turns a comparison of tuners into a coin
toss. With a noise-free cost the comparison is exact and repeatable, so it can carry a real
margin. The same comparison with measured GFLOPS is ``bench/xgb_vs_random.py``.
"""

import math
import time

import numpy as np

from kiln import autotvm
from kiln.autotvm.measure.measure import MeasureResult, Runner
from kiln.autotvm.tuner import RandomTuner, XGBTuner

from conftest import SyntheticBuilder

BUDGET, PLAN, SEEDS = 32, 8, (0, 1, 2)


def landscape(config) -> float:
    """Seconds for a config: best with 32-wide panels, 8 register rows, k unrolled by 4 and
    panels outermost -- a register-blocking shape -- and smoothly worse away from it."""
    nr, mr, ku = config["tile_x"].size[-1], config["tile_y"].size[-1], config["tile_k"].size[-1]
    off = ((math.log2(nr) - 5) ** 2 + (math.log2(mr) - 3) ** 2 + 0.5 * (math.log2(ku) - 2) ** 2
           + (config["order"].val != "panel_outer"))
    return 1e-3 * (1 + off)


class LandscapeRunner(Runner):
    def __init__(self):
        super().__init__(n_parallel=4)

    def run(self, measure_inputs, build_results):
        return [MeasureResult((landscape(inp.config),), 0, 0.0, time.time()) for inp in measure_inputs]


def _trials(tuner, task):
    """Cost of every trial, in the order the tuner proposed them."""
    costs = []

    def record(_, inputs, results):
        costs.extend(float(np.mean(r.costs)) for r in results)

    option = autotvm.measure_option(builder=SyntheticBuilder(), runner=LandscapeRunner())
    tuner.tune(n_trial=BUDGET, measure_option=option, callbacks=[record])
    assert len(costs) == BUDGET
    return np.array(costs)


def test_xgb_beats_random_on_matmul():
    task = autotvm.task.create("kiln/matmul", (256, 256, 256, "float32"), "llvm")
    costs = np.array([landscape(task.config_space.get(i)) for i in range(len(task.config_space))])
    xgb = [_trials(XGBTuner(task, plan_size=PLAN, seed=s), task) for s in SEEDS]
    rnd = [_trials(RandomTuner(task, seed=s), task) for s in SEEDS]
    xgb_steered = np.concatenate([t[PLAN:] for t in xgb]).mean()
    rnd_same = np.concatenate([t[PLAN:] for t in rnd]).mean()
    print(f"mean cost of trials {PLAN + 1}..{BUDGET}: xgb {xgb_steered * 1e3:.2f} ms, random "
          f"{rnd_same * 1e3:.2f} ms (space mean {costs.mean() * 1e3:.2f}, best {costs.min() * 1e3:.2f})")
    # Random proposals average the space; the model's must be far better than that.
    assert abs(rnd_same - costs.mean()) < 0.25 * costs.mean()
    # xgb / random: 0.42 pooled over these seeds; seeds 3..8 one by one give 0.34..0.70.
    assert xgb_steered < 0.75 * rnd_same, (xgb_steered, rnd_same)
