"""Bring your own codegen: kiln with oneDNN vs kiln alone vs onnxruntime, batch 1, fp32.

ResNet-18 and MobileNetV2 (224x224, random weights, tests/relay/onnx_models.py) are compiled
three ways in one run: ``partition_for_dnnl`` then ``relay.build`` (oneDNN runs the convolutions,
pools, dense layers and elementwise ops it supports; kiln the rest), plain ``relay.build``
(untuned), and onnxruntime (all graph optimizations). All three get the same thread count
(oneDNN's OpenMP through OMP_NUM_THREADS). Outputs are checked against onnxruntime (1e-4) before
timing; timings interleave (bench/timing.py) and each figure is the median over rounds.

    python bench/byoc.py [--threads 2] [--rounds 5] [--number 5] [--models resnet18,mobilenet_v2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--number", type=int, default=5)
    ap.add_argument("--models", default="resnet18,mobilenet_v2")
    args = ap.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # before oneDNN's OpenMP starts

    here = Path(__file__).resolve().parent
    sys.path.insert(0, str(here))
    sys.path.insert(0, str(here.parent / "tests" / "relay"))
    import numpy as np
    from e2e import MODELS, build_kiln, ort_session
    from timing import interleaved

    import kiln as tvm
    from kiln import config, relay
    from kiln.contrib import graph_executor
    from kiln.relay.op.contrib.dnnl import partition_for_dnnl
    from kiln.runtime.json_runtime import dnnl_available

    problem = dnnl_available()
    if problem:
        sys.exit(f"bench/byoc.py: {problem}")
    from kiln.target.cpu_facts import cpu_facts

    facts = cpu_facts("llvm")
    print(f"batch 1, fp32, {args.threads} threads each, median of {args.rounds} rounds x {args.number} runs "
          f"({os.cpu_count()} CPUs, {facts.cpu}, load {os.getloadavg()[0]:.1f})")
    print(f"{'model':<14}{'dnnl ms':>9}{'kiln ms':>9}{'ort ms':>9}{'dnnl/ort':>10}{'kiln/ort':>10}"
          f"{'dnnl/kiln':>11}  offloaded")
    wrong = []
    for name in args.models.split(","):
        model, inputs = MODELS[name]()
        mod, params = relay.frontend.from_onnx(model)
        part = partition_for_dnnl(mod, params)
        with tvm.transform.PassContext(opt_level=3):
            lib = relay.build(part, target="llvm")
        with config.override(num_threads=args.threads):
            with_dnnl = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
        alone, _ = build_kiln(model, args.threads)
        sess = ort_session(model, args.threads)
        want = sess.run(None, inputs)[0]
        for label, m in (("dnnl", with_dnnl), ("kiln", alone)):
            m.set_input(**inputs)
            m.run()
            got = m.get_output(0).numpy()
            if not np.allclose(got, want, rtol=1e-4, atol=1e-4):
                print(f"MISMATCH {name} ({label}): max abs diff {np.abs(got - want).max():.2e}")
                wrong.append(f"{name} ({label})")
        subgraphs = [m for m in lib.get_lib().imported_modules if m.type_key == "dnnl"]
        nodes = sum(len(m.graph["nodes"]) for m in subgraphs)
        times = interleaved({"dnnl": with_dnnl.module["run"], "kiln": alone.module["run"],
                             "ort": lambda: sess.run(None, inputs)}, args.rounds, args.number)
        ms = {k: 1e3 * statistics.median(v) for k, v in times.items()}
        print(f"{name:<14}{ms['dnnl']:>9.2f}{ms['kiln']:>9.2f}{ms['ort']:>9.2f}{ms['dnnl'] / ms['ort']:>9.2f}x"
              f"{ms['kiln'] / ms['ort']:>9.2f}x{ms['dnnl'] / ms['kiln']:>10.2f}x  "
              f"{len(subgraphs)} subgraphs, {nodes} oneDNN nodes")
    if wrong:
        sys.exit(f"MISMATCH: {', '.join(wrong)}")


if __name__ == "__main__":
    main()
