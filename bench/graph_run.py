"""The graph executor's run(): one C call per stretch of CPU kernels against one ctypes call
per kernel, on the same built model in the same process.

    python bench/graph_run.py [--models mobilenet_v2,resnet18] [--target "llvm -mcpu=znver3"]
                              [--rounds 40] [--number 10]

Both sides run the same prepared kernels on the same buffers (outputs are checked equal before
timing); the reference is the per-kernel loop ``run()`` made before ``__kiln_run_list``
(docs/graph.md). They interleave round by round; each figure is the median of all runs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "relay"))
from onnx_models import mobilenet_v2, resnet18  # noqa: E402

import kiln  # noqa: E402
from kiln import relay, transform  # noqa: E402
from kiln.contrib import graph_executor  # noqa: E402

MODELS = {"mobilenet_v2": mobilenet_v2, "resnet18": resnet18}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="mobilenet_v2,resnet18", help="comma-separated: " + ", ".join(MODELS))
    ap.add_argument("--target", default="llvm", help="kiln's target (default: this machine)")
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--number", type=int, default=10, help="runs per side per round")
    args = ap.parse_args()
    print(f"graph executor run(), one C call per stretch vs one per kernel; target {args.target!r}")
    print(f"{'model':14s} {'kernels':>7s} {'per kernel ms':>13s} {'run() ms':>9s} {'ratio':>6s}")
    for name in args.models.split(","):
        if name not in MODELS:
            sys.exit(f"graph_run: unknown model {name!r}; choose from {', '.join(MODELS)}")
        model, inputs = MODELS[name]()
        mod, params = relay.frontend.from_onnx(model, {k: v.shape for k, v in inputs.items()})
        with transform.PassContext(opt_level=3):
            lib = relay.build(mod, target=args.target, params=params)
        m = graph_executor.GraphModule(lib["default"](kiln.cpu(0)))
        for key, value in inputs.items():
            m.set_input(key, value)
        ex = m.module
        plan = ex._prepared()

        def per_kernel():
            for cfunc, cargs, codes, n, _ in plan:
                if cfunc(cargs, codes, n):
                    raise RuntimeError("a kernel failed")

        ex.run()
        want = m.get_output(0).numpy().copy()
        per_kernel()
        if not np.array_equal(want, m.get_output(0).numpy()):
            sys.exit(f"graph_run: {name}: the two ways of running disagree")
        times = {"per_kernel": [], "run": []}
        sides = {"per_kernel": per_kernel, "run": ex.run}
        for _ in range(args.rounds):
            for side, fn in sides.items():
                fn()
                for _ in range(args.number):
                    start = time.perf_counter()
                    fn()
                    times[side].append(time.perf_counter() - start)
        ref, new = statistics.median(times["per_kernel"]), statistics.median(times["run"])
        print(f"{name:14s} {len(plan):7d} {ref * 1e3:13.3f} {new * 1e3:9.3f} {new / ref:5.3f}x")


if __name__ == "__main__":
    main()
