"""FuseExpandDepthwise: a model built with the pass against the same model built without it
(``disabled_pass=["FuseExpandDepthwise"]``), in the same process.

    python bench/expand_depthwise.py [--target "llvm -mcpu=znver3"] [--tune-log LOG]
                                     [--rounds 11] [--number 100]

The two builds' outputs are checked to agree (1e-5) before timing. The sides interleave round by
round; each round's figure is the median of ``--number`` runs, and the ratio printed is the
median over rounds of fused / unfused (a load that drifts between rounds cancels).
``--tune-log``: build both under ``autotvm.apply_history_best(LOG)`` (the fused kernels have no
tuning knobs of their own; the other kernels take the log's picks).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "relay"))
from onnx_models import mobilenet_v2  # noqa: E402

import kiln  # noqa: E402
from kiln import autotvm, relay, transform  # noqa: E402
from kiln.contrib import graph_executor  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default="llvm", help="kiln's target (default: this machine)")
    ap.add_argument("--tune-log", default="", help="autotvm log applied to both builds")
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--number", type=int, default=100, help="runs per side per round")
    args = ap.parse_args()
    if args.tune_log and not Path(args.tune_log).is_file():
        sys.exit(f"expand_depthwise: --tune-log {args.tune_log!r} is not a file")
    model, inputs = mobilenet_v2()
    mod, params = relay.frontend.from_onnx(model, {k: v.shape for k, v in inputs.items()})
    modules = {}
    for side, disabled in (("fused", []), ("unfused", ["FuseExpandDepthwise"])):
        ctx = autotvm.apply_history_best(args.tune_log) if args.tune_log else contextlib.nullcontext()
        with ctx, transform.PassContext(opt_level=3, disabled_pass=disabled):
            lib = relay.build(mod, target=args.target, params=params)
        m = graph_executor.GraphModule(lib["default"](kiln.cpu(0)))
        for key, value in inputs.items():
            m.set_input(key, value)
        m.run()
        modules[side] = (m, len(m.module.kernels))
    fused, unfused = (modules[s][0].get_output(0).numpy() for s in ("fused", "unfused"))
    if not np.allclose(fused, unfused, rtol=1e-5, atol=1e-5):
        sys.exit(f"expand_depthwise: the builds disagree (max difference {np.abs(fused - unfused).max():.3g})")
    rounds = {side: [] for side in modules}
    for _ in range(args.rounds):
        for side, (m, _) in modules.items():
            m.run()
            runs = []
            for _ in range(args.number):
                start = time.perf_counter()
                m.run()
                runs.append(time.perf_counter() - start)
            rounds[side].append(statistics.median(runs))
    ratio = statistics.median(f / u for f, u in zip(rounds["fused"], rounds["unfused"]))
    print(f"MobileNetV2, target {args.target!r}{', tuned by ' + args.tune_log if args.tune_log else ''}; "
          f"median of {args.rounds} rounds x {args.number} runs")
    print(f"{'build':8s} {'kernels':>7s} {'ms':>7s}")
    for side, (_, kernels) in modules.items():
        print(f"{side:8s} {kernels:7d} {statistics.median(rounds[side]) * 1e3:7.3f}")
    print(f"fused / unfused: {ratio:.3f}x (rounds: {' '.join(f'{f / u:.3f}' for f, u in zip(rounds['fused'], rounds['unfused']))})")


if __name__ == "__main__":
    main()
