"""Tune fp32 matmul (1024³ by default) with autotvm and compare with numpy in the same run.

Prints kiln's tuned GFLOPS, numpy's GFLOPS and their ratio (medians of interleaved timings),
the trial at which 90% of the final best was first reached, and trials per minute.
Goal: ratio >= 0.9.

    python bench/tune_matmul.py [--size 1024] [--trials 200] [--tuner xgb] [--plot tune.png]
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np

import kiln as tvm
from kiln import autotvm
from kiln.autotvm.templates import matmul
from kiln.autotvm.tuner import GATuner, GridSearchTuner, RandomTuner, XGBTuner

from timing import interleaved  # noqa: E402

TUNERS = {"xgb": lambda t, seed: XGBTuner(t, plan_size=32, seed=seed),
          "ga": lambda t, seed: GATuner(t, pop_size=32, seed=seed),
          "random": lambda t, seed: RandomTuner(t, seed=seed),
          "gridsearch": lambda t, seed: GridSearchTuner(t)}


def compare_with_numpy(n: int, log: str, repeat: int):
    with tvm.target.Target("llvm"), autotvm.apply_history_best(log):
        s, args = matmul(n, n, n, "float32")
        f = tvm.build(s, args, target="llvm", name="matmul")
    a = np.random.rand(n, n).astype("float32")
    b = np.random.rand(n, n).astype("float32")
    dev = tvm.cpu(0)
    ta, tb, tc = tvm.nd.array(a, dev), tvm.nd.array(b, dev), tvm.nd.empty((n, n), "float32", dev)
    f(ta, tb, tc)
    np.testing.assert_allclose(tc.numpy(), a @ b, rtol=1e-3)
    times = interleaved({"kiln": lambda: f(ta, tb, tc), "numpy": lambda: a @ b}, repeat, number=3)
    flops = 2.0 * n ** 3
    return flops / statistics.median(times["kiln"]) / 1e9, flops / statistics.median(times["numpy"]) / 1e9


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--trials", type=int, default=200)
    p.add_argument("--tuner", choices=sorted(TUNERS), default="xgb")
    p.add_argument("--early-stopping", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log", default=None, help="tuning log (default: a temporary file)")
    p.add_argument("--plot", default=None, help="write a PNG of best GFLOPS vs trials here")
    p.add_argument("--repeat", type=int, default=15)
    args = p.parse_args()
    n = args.size
    log = args.log or os.path.join(tempfile.mkdtemp(prefix="kiln-tune-"), "matmul.log")

    task = autotvm.task.create("kiln/matmul", (n, n, n, "float32"), "llvm")
    print(f"task {task.workload}: {len(task.config_space)} configs, tuner {args.tuner}, "
          f"{args.trials} trials")
    option = autotvm.measure_option(
        builder=autotvm.LocalBuilder(n_parallel=os.cpu_count()),
        runner=autotvm.LocalRunner(number=2, repeat=3, min_repeat_ms=50, cooldown_interval=0))
    tuner = TUNERS[args.tuner](task, args.seed)
    start = time.monotonic()
    tuner.tune(n_trial=min(args.trials, len(task.config_space)), measure_option=option,
               early_stopping=args.early_stopping,
               callbacks=[autotvm.callback.progress_bar(args.trials, prefix="[Task  1/ 1] "),
                          autotvm.callback.log_to_file(log)])
    minutes = (time.monotonic() - start) / 60
    best_curve = np.maximum.accumulate([g for _, g in tuner.history])
    reached = int(np.argmax(best_curve >= 0.9 * best_curve[-1])) + 1
    print(f"tuning: best {tuner.best_flops / 1e9:.1f} GFLOPS at trial {tuner.best_iter + 1}; 90% of it "
          f"first at trial {reached}; {tuner.trial_count / minutes:.1f} trials/min "
          f"({tuner.trial_count} trials in {minutes:.1f} min); best config {tuner.best_config}")
    if args.plot:
        from kiln.autotvm import plot
        how = plot.save_png({f"matmul {n}³": [(i + 1, float(b)) for i, b in enumerate(best_curve)]},
                            args.plot, title=f"kiln autotvm: matmul {n}³ ({args.tuner})")
        print(f"plot: {args.plot} ({how})")
    kg, ng = compare_with_numpy(n, log, args.repeat)
    print(f"matmul fp32 {n}x{n}x{n} tuned: kiln {kg:.1f} GFLOPS | numpy {ng:.1f} GFLOPS | "
          f"ratio {kg / ng:.2f} | 90% of best at trial {reached} | "
          f"{tuner.trial_count / minutes:.1f} trials/min")


if __name__ == "__main__":
    sys.exit(main())
