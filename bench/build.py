"""Build times: warm tvm.build of add_one and of the scheduled matmul (median of repeats), and
ResNet-18's relay.build cold (empty build cache) against warm (the cache filled by the cold
build), each in a fresh process so no in-memory cache counts.

    python bench/build.py [--no-resnet18] [--warm-runs 3]

Goals: add_one <= 50 ms; ResNet-18 warm relay.build <= 2 s.
"""

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))


def add_one():
    import kiln as tvm
    from kiln import te

    n = tvm.convert(1024)
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    return te.create_schedule(B.op), [A, B]


def timed(make, name, repeat=15):
    import kiln as tvm

    tvm.build(*make(), target="llvm", name=name)  # warm: LLVM initialised, modules imported
    times = []
    for _ in range(repeat):
        s, args = make()
        start = time.perf_counter()
        tvm.build(s, args, target="llvm", name=name)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def resnet18_child() -> None:
    """One relay.build of ResNet-18 in this process: prints its seconds and an output digest."""
    sys.path.insert(0, str(ROOT / "tests" / "relay"))
    from onnx_models import resnet18

    import kiln as tvm
    from kiln import relay
    from kiln.contrib import graph_executor

    model, inputs = resnet18()
    mod, params = relay.frontend.from_onnx(model)
    start = time.perf_counter()
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm", params=params)
    seconds = time.perf_counter() - start
    m = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    m.set_input(**inputs)
    m.run()
    digest = hashlib.sha256(m.get_output(0).numpy().tobytes()).hexdigest()[:16]
    print(json.dumps({"seconds": seconds, "digest": digest}))


def resnet18_cold_warm(warm_runs: int) -> None:
    with tempfile.TemporaryDirectory(prefix="kiln-bench-cache-") as cache_dir:
        env = {**os.environ, "KILN_CACHE_DIR": cache_dir}

        def run() -> dict:
            out = subprocess.run([sys.executable, __file__, "--resnet18-child"], env=env, check=True,
                                 capture_output=True, text=True).stdout
            return json.loads(out.strip().splitlines()[-1])

        cold = run()
        warm = [run() for _ in range(warm_runs)]
    w = statistics.median(r["seconds"] for r in warm)
    same = all(r["digest"] == cold["digest"] for r in warm)
    print(f"ResNet-18 relay.build: cold {cold['seconds']:.2f} s, warm {w:.2f} s (median of {warm_runs} "
          f"processes), warm/cold {w / cold['seconds']:.3f} "
          f"({'ok' if w <= 2 else 'over'} the 2 s goal; outputs {'identical' if same else 'DIFFER'})")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-resnet18", action="store_true", help="skip the cold/warm relay.build figure")
    ap.add_argument("--warm-runs", type=int, default=3)
    ap.add_argument("--resnet18-child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.resnet18_child:
        resnet18_child()
        sys.exit(0)
    from matmul_schedule import matmul_schedule

    t1 = timed(add_one, "add_one")
    t2 = timed(lambda: matmul_schedule(1024, 1024, 1024), "matmul", repeat=5)
    print(f"warm build: add_one {t1 * 1e3:.1f} ms (goal <= 50 ms) | scheduled matmul {t2 * 1e3:.1f} ms")
    if not args.no_resnet18:
        resnet18_cold_warm(args.warm_runs)
