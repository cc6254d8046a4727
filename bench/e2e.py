"""End to end, batch 1, fp32: kiln's relay.build against onnxruntime on the same ONNX models.

ResNet-18 and MobileNetV2 (224x224, random weights, built by tests/relay/onnx_models.py) are
compiled by kiln (opt_level 3, target llvm, untuned: topi's default schedules) and loaded by
onnxruntime (all graph optimizations). Both use the same number of threads; their timings
interleave so machine noise hits both alike (with a pause between them, so neither measures
while the other's threads still spin); each figure is the median over rounds of the mean of
``--number`` runs. Also prints ResNet-18's compile time (relay.build: passes, lowering,
LLVM). Outputs are checked against each other before timing.

    python bench/e2e.py [--threads 2] [--rounds 7] [--number 10] [--models resnet18,mobilenet_v2]

Goals (issue 5): kiln <= 1.5x onnxruntime latency; ResNet-18 compile < 60 s on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "relay"))

from onnx_models import mobilenet_v2, resnet18  # noqa: E402

MODELS = {"resnet18": resnet18, "mobilenet_v2": mobilenet_v2}


def build_kiln(model, threads: int):
    import kiln as tvm
    from kiln import config, relay
    from kiln.contrib import graph_executor

    mod, params = relay.frontend.from_onnx(model)
    start = time.perf_counter()
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm", params=params)
    compile_s = time.perf_counter() - start
    with config.override(num_threads=threads):  # read when the kernel library is loaded
        m = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    return m, compile_s


def ort_session(model, threads: int):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def mean_time(fn, number: int) -> float:
    """Mean seconds per call after a pause and an untimed call: each runtime's worker threads
    spin for a while after their last task, and would otherwise steal the cores from the other
    runtime's first timed runs."""
    time.sleep(0.05)
    fn()
    start = time.perf_counter()
    for _ in range(number):
        fn()
    return (time.perf_counter() - start) / number


def bench_model(name: str, threads: int, rounds: int, number: int) -> dict:
    model, inputs = MODELS[name]()
    m, compile_s = build_kiln(model, threads)
    sess = ort_session(model, threads)
    m.set_input(**inputs)
    m.run()
    got = m.get_output(0).numpy()
    want = sess.run(None, inputs)[0]
    err = float(np.abs(got - want).max())
    if not np.allclose(got, want, rtol=1e-4, atol=1e-4):
        print(f"WARNING {name}: kiln and onnxruntime disagree (max abs diff {err:.2e})")
    run_kiln = m.module["run"]
    kiln_t, ort_t = [], []
    for _ in range(rounds):
        kiln_t.append(mean_time(run_kiln, number))
        ort_t.append(mean_time(lambda: sess.run(None, inputs), number))
    return {"compile_s": compile_s, "kiln_ms": 1e3 * statistics.median(kiln_t),
            "ort_ms": 1e3 * statistics.median(ort_t), "kiln_min": 1e3 * min(kiln_t), "ort_min": 1e3 * min(ort_t),
            "err": err}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--number", type=int, default=10)
    ap.add_argument("--models", default=",".join(MODELS))
    args = ap.parse_args()
    print(f"batch 1, fp32, {args.threads} threads for both, median of {args.rounds} rounds x {args.number} runs "
          f"({os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f})")
    print(f"{'model':<14}{'kiln ms':>10}{'ort ms':>10}{'kiln/ort':>10}  {'(min: kiln / ort)':<22}{'compile s':>10}")
    results = {}
    for name in args.models.split(","):
        r = results[name] = bench_model(name, args.threads, args.rounds, args.number)
        ratio = r["kiln_ms"] / r["ort_ms"]
        verdict = "ok" if ratio <= 1.5 else "over the 1.5x goal"
        print(f"{name:<14}{r['kiln_ms']:>10.2f}{r['ort_ms']:>10.2f}{ratio:>9.2f}x  "
              f"({r['kiln_min']:.2f} / {r['ort_min']:.2f}){'':<8}{r['compile_s']:>10.1f}   {verdict}")
    if "resnet18" in results:
        c = results["resnet18"]["compile_s"]
        print(f"ResNet-18 compile time: {c:.1f} s ({'ok' if c < 60 else 'over'} the 60 s goal)")


if __name__ == "__main__":
    main()
