"""CUDA whole-model variants in one short GPU call: dtypes, targets and env switches side by side.

Each variant is ``model:dtype[:target][:NAME=VALUE,...]`` (a model of bench/cuda_e2e.py; target
``cuda -arch=sm_90`` when left out; env switches such as ``KILN_CUDA_HALF2_DEPTHWISE=1`` set for
that build only). Every variant is built in a process of its own, all at once (a 16-core device
machine builds a dozen CNNs in ~15 s, BERT in ~50 s, where one after another would take minutes
of device time); each is timed as soon as it is built, one at a time (a lock), then twice more
after all builds finished, with the CPU idle: ``time_evaluator("run")`` on ``tvm.cuda(0)``, CUDA
events, the median of 10 x 10 calls. Outputs are checked as bench/cuda_e2e.py checks them
(onnxruntime). The figure printed last for each variant is its time as a ratio to the first
variant of the same model in this run (the reference: list it first).

    python bench/cuda_variants.py resnet18:float32 resnet18:float16 resnet18:bfloat16
    python bench/cuda_variants.py mobilenet_v2:float16 mobilenet_v2:float16::KILN_CUDA_HALF2_DEPTHWISE=1
    python bench/cuda_variants.py "bert:float16:cuda -arch=sm_90a" \\
        "bert:float16:cuda -arch=sm_90a -max_shared_memory_per_block=232448"
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

DEFAULT_TARGET = "cuda -arch=sm_90"


def parse(spec: str) -> tuple:
    parts = spec.split(":")
    if len(parts) < 2 or not parts[0] or parts[1] not in ("float32", "float16", "bfloat16"):
        raise SystemExit(f"bench/cuda_variants.py: variant {spec!r}: write model:dtype[:target][:NAME=VALUE,...] "
                         "with dtype float32, float16 or bfloat16")
    env = dict(kv.split("=", 1) for kv in parts[3].split(",") if kv) if len(parts) > 3 else {}
    return spec, parts[0], parts[1], (parts[2] if len(parts) > 2 and parts[2] else DEFAULT_TARGET), env


def worker(variant, lock, barrier, t0, deadline, results):
    spec, name, dtype, target, env = variant
    os.environ.update(env)
    import sibling

    import kiln as tvm
    from kiln.contrib import graph_executor

    e2e = sibling.load("cuda_e2e.py")
    start, g, timer = time.perf_counter(), None, None
    try:
        model, inputs = e2e.onnx_model(name)
        lib = e2e.build(model, tvm.target.Target(target, host="llvm"), dtype)
        from onnx_models import run_ort

        want = run_ort(model, inputs)[0]
        built = time.perf_counter() - start
        with lock:
            dev = tvm.cuda(0)
            g = graph_executor.GraphModule(lib["default"](dev))
            g.set_input(**inputs)
            g.run()
            ok, verdict = e2e.check(dtype, g.get_output(0).numpy(), want, name)
            timer = g.module.time_evaluator("run", dev, number=10, repeat=10)
            ms = statistics.median(timer().results) * 1e3
            print(f"[{time.time() - t0:.0f} s] {spec}: {ms:.3f} ms while others build (built in {built:.0f} s; "
                  f"{len(g.module.kernels)} launches; {'ok' if ok else 'WRONG'}: {verdict})", flush=True)
    except Exception as err:  # noqa: BLE001 - the other variants go on
        print(f"[{time.time() - t0:.0f} s] {spec}: FAILED {type(err).__name__}: {str(err)[:300]}", flush=True)
    try:
        barrier.wait(timeout=max(1.0, deadline - (time.time() - t0)))
    except Exception:  # noqa: BLE001 - a failed or slow build: time the rest anyway
        pass
    if g is not None:
        with lock:
            results[spec] = [statistics.median(timer().results) * 1e3 for _ in range(2)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("variants", nargs="+", help="model:dtype[:target][:NAME=VALUE,...]")
    p.add_argument("--deadline", type=float, default=300, help="seconds to wait for all builds before timing idle")
    args = p.parse_args()
    variants = [parse(v) for v in args.variants]
    ctx = mp.get_context("spawn")  # each process its own CUDA context, made after its build
    lock, barrier, results = ctx.Lock(), ctx.Barrier(len(variants)), ctx.Manager().dict()
    t0 = time.time()
    procs = [ctx.Process(target=worker, args=(v, lock, barrier, t0, args.deadline, results)) for v in variants]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join()
    print("idle, median of 10 x 10 calls, twice; ratio to the model's first variant:")
    first: dict = {}
    for spec, name, *_ in variants:
        if spec not in results:
            print(f"  {spec}: no time")
            continue
        ms = min(results[spec])
        ref = first.setdefault(name, ms)
        print(f"  {spec}: {results[spec][0]:.3f} / {results[spec][1]:.3f} ms  {ms / ref:.2f}x", flush=True)


if __name__ == "__main__":
    main()
