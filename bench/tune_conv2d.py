"""Tune a ResNet-18 3x3 conv2d (1x64x56x56, 64 filters, pad 1) and compare with onnxruntime's
Conv in the same run.

The task is extracted from a one-node ONNX model (so its workload is exactly the one relay.build
asks for), tuned for at most ``--trials`` trials, then the same model is built by relay.build
under ``apply_history_best`` and timed against onnxruntime running that model, both with
``--threads`` threads, interleaved (medians over ``--rounds`` rounds). Prints kiln's and
onnxruntime's GFLOPS and their ratio, the trial at which 90% of the final best was first
reached, and trials per minute. Goal: ratio >= 1.0.

On x86 this conv is 3x3 stride 1, so the template measures (and relay.build deploys) the
Winograd F(2x2, 3x3) kernel on NCHW16c data; the one-node model's NCHW input and output then
cost a layout transform each, which the end-to-end figure includes (GFLOPS count the direct
convolution's 2*N*K*H*W*C*9 operations for every kernel).

    python bench/tune_conv2d.py [--trials 200] [--tuner xgb] [--threads 2] [--log conv.log] [--plot c.png]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "relay"))

from onnx_models import single_node  # noqa: E402
from timing import interleaved  # noqa: E402

import kiln as tvm  # noqa: E402
from kiln import autotvm, config, relay  # noqa: E402
from kiln.autotvm.tuner import GATuner, GridSearchTuner, RandomTuner, XGBTuner  # noqa: E402

TUNERS = {"xgb": lambda t, seed: XGBTuner(t, plan_size=32, seed=seed),
          "ga": lambda t, seed: GATuner(t, pop_size=32, seed=seed),
          "random": lambda t, seed: RandomTuner(t, seed=seed),
          "gridsearch": lambda t, seed: GridSearchTuner(t)}


def conv_model(n=1, c=64, hw=56, f=64, k=3, pad=1):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, c, hw, hw)).astype("float32")
    w = (rng.standard_normal((f, c, k, k)) * np.sqrt(2.0 / (c * k * k))).astype("float32")
    model = single_node("Conv", {"x": x}, {"kernel_shape": [k, k], "pads": [pad] * 4}, consts={"w": w})
    flop = 2.0 * n * f * hw * hw * c * k * k  # stride 1, "same" padding: output is hw x hw
    return model, {"x": x}, flop


def ort_session(model, threads: int):
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def build_kiln(mod, params, log: str, threads: int):
    from kiln.contrib import graph_executor
    with autotvm.apply_history_best(log), tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm", params=params)
    with config.override(num_threads=threads):  # read when the kernel library is loaded
        return graph_executor.GraphModule(lib["default"](tvm.cpu(0)))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=200)
    p.add_argument("--tuner", choices=sorted(TUNERS), default="xgb")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--number", type=int, default=20)
    p.add_argument("--log", default=None, help="tuning log (default: a temporary file)")
    p.add_argument("--plot", default=None, help="write a PNG of best GFLOPS vs trials here")
    args = p.parse_args()
    log = args.log or os.path.join(tempfile.mkdtemp(prefix="kiln-tune-"), "conv2d.log")

    model, inputs, flop = conv_model()
    mod, params = relay.frontend.from_onnx(model)
    (task,) = autotvm.task.extract_from_program(mod["main"], target="llvm", params=params,
                                                ops=(relay.op.get("nn.conv2d"),))
    print(f"task {task.name} {task.args[:2]}: {len(task.config_space)} configs, tuner {args.tuner}, "
          f"{args.trials} trials")
    option = autotvm.measure_option(
        builder=autotvm.LocalBuilder(n_parallel=os.cpu_count()),
        runner=autotvm.LocalRunner(number=4, repeat=3, min_repeat_ms=30, cooldown_interval=0))
    tuner = TUNERS[args.tuner](task, args.seed)
    n_trial = min(args.trials, len(task.config_space))
    start = time.monotonic()
    tuner.tune(n_trial=n_trial, measure_option=option,
               callbacks=[autotvm.callback.progress_bar(n_trial, prefix="[Task  1/ 1] "),
                          autotvm.callback.log_to_file(log)])
    minutes = (time.monotonic() - start) / 60
    best_curve = np.maximum.accumulate([g for _, g in tuner.history])
    reached = int(np.argmax(best_curve >= 0.9 * best_curve[-1])) + 1
    print(f"tuning: best {tuner.best_flops / 1e9:.1f} GFLOPS at trial {tuner.best_iter + 1}; 90% of it "
          f"first at trial {reached}; {tuner.trial_count / minutes:.1f} trials/min "
          f"({tuner.trial_count} trials in {minutes:.1f} min); best config {tuner.best_config}")
    if args.plot:
        from kiln.autotvm import plot
        how = plot.save_png({"conv2d 1x64x56x56 k3": [(i + 1, float(b)) for i, b in enumerate(best_curve)]},
                            args.plot, title=f"kiln autotvm: ResNet-18 conv2d ({args.tuner})")
        print(f"plot: {args.plot} ({how})")

    m = build_kiln(mod, params, log, args.threads)
    sess = ort_session(model, args.threads)
    m.set_input(**inputs)
    m.run()
    want = sess.run(None, inputs)[0]
    np.testing.assert_allclose(m.get_output(0).numpy(), want, rtol=1e-4, atol=1e-4)
    run_kiln = m.module["run"]
    times = interleaved({"kiln": run_kiln, "ort": lambda: sess.run(None, inputs)}, args.rounds, args.number)
    kg, og = flop / statistics.median(times["kiln"]) / 1e9, flop / statistics.median(times["ort"]) / 1e9
    print(f"conv2d fp32 1x64x56x56 k3x3 64 pad1, {args.threads} threads, medians of {args.rounds} rounds: "
          f"kiln {kg:.1f} GFLOPS | onnxruntime {og:.1f} GFLOPS | ratio {kg / og:.2f} "
          f"({'ok' if kg >= og else 'under'} the 1.0 goal) | 90% of best at trial {reached} | "
          f"{tuner.trial_count / minutes:.1f} trials/min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
