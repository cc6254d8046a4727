"""tvmc end to end on a ResNet-50-like ONNX model (bottleneck blocks 3-4-6-3, 224x224, batch 1,
random weights): the wall time of ``tvmc compile``, and the mean of ``tvmc run --print-time``
against onnxruntime's mean on the same input, same thread count, one run each.

    python bench/tvmc.py [--threads 2] [--repeat 10] [--number 3] [--image 224] [--keep DIR]

Both commands run as a user types them (subprocesses of ``python -m kiln.driver.tvmc``); the
run's outputs are checked against onnxruntime before its time is quoted (MISMATCH and exit
status 1 otherwise). onnxruntime is timed after a pause and one untimed call, as
bench/timing.py does, with ``--repeat`` rounds of ``--number`` runs: tvmc's table is the same
shape (mean over repeats of the per-run mean of ``number`` runs). relay.build's cache is off
(KILN_CACHE_DIR=off) so the compile time is a cold one.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "relay"))

from onnx_models import GraphBuilder, run_ort  # noqa: E402

from timing import seconds_per_call  # noqa: E402


def resnet50(image: int = 224, classes: int = 1000, seed: int = 0):
    g = GraphBuilder(seed)
    x = g.op("Relu", [g.bn(g.conv("data", 3, 64, 7, 2, 3), 64)])
    x = g.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for stage, (width, blocks) in enumerate([(64, 3), (128, 4), (256, 6), (512, 3)]):
        for block in range(blocks):
            stride = 2 if stage > 0 and block == 0 else 1
            cout = width * 4
            y = g.op("Relu", [g.bn(g.conv(x, cin, width, 1, 1, 0), width)])
            y = g.op("Relu", [g.bn(g.conv(y, width, width, 3, stride), width)])
            y = g.bn(g.conv(y, width, cout, 1, 1, 0), cout)
            short = g.bn(g.conv(x, cin, cout, 1, stride, 0), cout) if stride != 1 or cin != cout else x
            x = g.op("Relu", [g.op("Add", [y, short])])
            cin = cout
    x = g.op("Flatten", [g.op("GlobalAveragePool", [x])], axis=1)
    w = g.weight("fc_w", (classes, cin), scale=np.sqrt(1.0 / cin))
    out = g.op("Gemm", [x, w, g.init("fc_b", np.zeros(classes, "float32"))], transB=1)
    data = np.random.default_rng(seed + 1).standard_normal((1, 3, image, image)).astype("float32")
    return g.model({"data": data.shape}, out), {"data": data}


def tvmc(*args, threads: int) -> tuple[subprocess.CompletedProcess, float]:
    # The build cache off: the compile time is a cold compile, as on a fresh machine.
    env = dict(os.environ, PYTHONPATH=str(ROOT), KILN_NUM_THREADS=str(threads), KILN_CACHE_DIR="off")
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "kiln.driver.tvmc", *args], capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"tvmc {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc, seconds


def main() -> int:
    import onnx
    import onnxruntime as ort

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--number", type=int, default=3)
    p.add_argument("--image", type=int, default=224)
    p.add_argument("--keep", help="write the model and package here instead of a temporary folder")
    args = p.parse_args()
    work = Path(args.keep or tempfile.mkdtemp(prefix="kiln-bench-tvmc-"))
    work.mkdir(parents=True, exist_ok=True)

    model, inputs = resnet50(args.image)
    onnx.save(model, work / "resnet50.onnx")
    np.savez(work / "in.npz", **inputs)
    want = run_ort(model, inputs)[0]
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"ResNet-50-like ONNX model: {(work / 'resnet50.onnx').stat().st_size / 1e6:.0f} MB, input "
          f"{list(inputs['data'].shape)}, {args.threads} threads")

    _, compile_s = tvmc("compile", "--target", "llvm", "-o", str(work / "resnet50.tar"), str(work / "resnet50.onnx"),
                        threads=args.threads)
    print(f"tvmc compile: {compile_s:.1f} s (wall, the whole command)")

    run, _ = tvmc("run", str(work / "resnet50.tar"), "--inputs", str(work / "in.npz"), "--outputs",
                  str(work / "out.npz"), "--print-time", "--repeat", str(args.repeat), "--number", str(args.number),
                  threads=args.threads)
    print(run.stdout.strip())
    got = np.load(work / "out.npz")["output_0"]
    ok = np.allclose(got, want, rtol=1e-3, atol=1e-3)
    row = run.stdout.split("Execution time summary:")[1].strip().splitlines()[1]
    kiln_mean, kiln_median = map(float, row.split()[:2])

    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = args.threads, 1
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    feed = {"data": inputs["data"]}
    ort_ms = [seconds_per_call(lambda: sess.run(None, feed), args.number) * 1e3 for _ in range(args.repeat)]
    ort_mean = statistics.fmean(ort_ms)
    print(f"onnxruntime: mean {ort_mean:.2f} ms, median {statistics.median(ort_ms):.2f} ms "
          f"({args.repeat} x {args.number} runs)")
    print(f"tvmc run mean / onnxruntime mean: {kiln_mean / ort_mean:.2f}x "
          f"(medians {kiln_median / statistics.median(ort_ms):.2f}x)")
    print("outputs match onnxruntime (rtol/atol 1e-3)" if ok else
          f"MISMATCH: max abs diff {np.abs(got - want).max():.3g}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
