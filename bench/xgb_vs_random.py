"""XGBTuner against RandomTuner on the real matmul template, with measured GFLOPS.

Same task, budget and seeds for both; the runs interleave (random, xgb, random, xgb, ...) so a
change in machine load hits both alike. The figure is the mean measured GFLOPS of the trials
after XGB's first ``--plan`` random ones (the ones its cost model chose), against the random
tuner's trials at the same positions: per seed and pooled, as the ratio xgb / random.
Goal: pooled ratio > 1. The best-of-budget is printed too, but one config's luckiest
measurement is within noise of many others on a busy 2-core machine.

(tests/autotvm/test_xgb_vs_random.py makes the same comparison with a noise-free cost.)

    python bench/xgb_vs_random.py [--size 256] [--budget 32] [--plan 8] [--seeds 0,1,2]
"""

import argparse
import os
import statistics

import numpy as np

from kiln import autotvm
from kiln.autotvm.tuner import RandomTuner, XGBTuner


def trials(tuner, task, option, budget):
    """GFLOPS of every trial in the order proposed (a failed build or run counts as 0)."""
    gflops = []

    def record(_, inputs, results):
        for res in results:
            ok = res.error_no == 0
            gflops.append(task.flop / float(np.mean(res.costs)) / 1e9 if ok else 0.0)

    tuner.tune(n_trial=budget, measure_option=option, callbacks=[record])
    return np.array(gflops)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--budget", type=int, default=32)
    ap.add_argument("--plan", type=int, default=8)
    ap.add_argument("--seeds", default="0,1,2")
    args = ap.parse_args()
    n = args.size
    task = autotvm.task.create("kiln/matmul", (n, n, n, "float32"), "llvm")
    option = autotvm.measure_option(builder=autotvm.LocalBuilder(n_parallel=os.cpu_count()),
                                    runner=autotvm.LocalRunner(number=5, repeat=3, cooldown_interval=0))
    print(f"matmul {n}^3, {len(task.config_space)} configs, budget {args.budget}, plan {args.plan} "
          f"({os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f})")
    xgb, rnd = [], []
    for seed in (int(s) for s in args.seeds.split(",")):
        rnd.append(trials(RandomTuner(task, seed=seed), task, option, args.budget))
        xgb.append(trials(XGBTuner(task, plan_size=args.plan, seed=seed), task, option, args.budget))
        x, r = xgb[-1][args.plan:].mean(), rnd[-1][args.plan:].mean()
        print(f"seed {seed}: steered trials mean GFLOPS xgb {x:.1f}, random {r:.1f}, ratio {x / r:.2f}; "
              f"best xgb {xgb[-1].max():.1f}, random {rnd[-1].max():.1f}")
    x = np.concatenate([t[args.plan:] for t in xgb]).mean()
    r = np.concatenate([t[args.plan:] for t in rnd]).mean()
    ratios = [a[args.plan:].mean() / b[args.plan:].mean() for a, b in zip(xgb, rnd)]
    print(f"pooled: xgb {x:.1f} / random {r:.1f} GFLOPS = {x / r:.2f} (median over seeds "
          f"{statistics.median(ratios):.2f}; goal > 1)")


if __name__ == "__main__":
    main()
