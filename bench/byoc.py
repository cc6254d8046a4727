"""Bring your own codegen: kiln with oneDNN vs kiln alone vs onnxruntime, batch 1, fp32.

ResNet-18 and MobileNetV2 (224x224, random weights, tests/relay/onnx_models.py) are compiled
three ways in one run: ``partition_for_dnnl`` then ``relay.build`` (oneDNN runs the convolutions,
pools, dense layers and elementwise ops it supports; kiln the rest), plain ``relay.build``
(untuned), and onnxruntime (all graph optimizations). All three get the same thread count
(oneDNN's OpenMP through OMP_NUM_THREADS). Outputs are checked against onnxruntime (1e-4) before
timing; timings interleave (bench/timing.py) and each figure is the median over rounds.

    python bench/byoc.py [--threads 2] [--rounds 5] [--number 5] [--models resnet18,mobilenet_v2]

With ``--cuda`` it compares on CUDA device 0 instead: ``partition_for_cudnn`` then
``relay.build(target="cuda")`` (cuDNN runs the convolutions, pools and activations) vs kiln's
own untuned CUDA kernels vs onnxruntime (its CUDA provider when installed, else its CPU one, said
in the header); outputs checked against onnxruntime's CPU result (1e-4).
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
    ap.add_argument("--cuda", action="store_true", help="cuDNN vs kiln's CUDA kernels on CUDA device 0")
    ap.add_argument("--depthwise", action="store_true", help="--cuda: offload depthwise convolutions to cuDNN too")
    ap.add_argument("--profile", action="store_true", help="--cuda: where the cuDNN build's time goes")
    args = ap.parse_args()
    here = Path(__file__).resolve().parent
    sys.path.insert(0, str(here))  # e2e.py, timing.py
    sys.path.insert(0, str(here.parent / "tests" / "relay"))
    if args.cuda:
        return cuda_main(args)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # before oneDNN's OpenMP starts

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


def cuda_main(args) -> None:
    import numpy as np
    import onnxruntime as ort
    from e2e import MODELS
    from timing import interleaved

    import kiln as tvm
    from kiln import relay
    from kiln.contrib import graph_executor
    from kiln.relay.op.contrib.cudnn import partition_for_cudnn
    from kiln.runtime.json_cudnn import cudnn_available, cudnn_library

    problem = cudnn_available()
    if problem:
        sys.exit(f"bench/byoc.py --cuda: {problem}")
    dev = tvm.cuda(0)
    if not dev.exist:
        sys.exit("bench/byoc.py --cuda: no CUDA device")
    provider = "CUDAExecutionProvider" if "CUDAExecutionProvider" in ort.get_available_providers() \
        else "CPUExecutionProvider"
    print(f"batch 1, fp32, CUDA device 0, cuDNN {cudnn_library().cudnnGetVersion()}, median of {args.rounds} "
          f"rounds x {args.number} runs; reference onnxruntime {provider}")
    print(f"{'model':<14}{'cudnn ms':>10}{'kiln ms':>9}{'ort ms':>9}{'cudnn/kiln':>12}{'cudnn/ort':>11}  offloaded")
    wrong = []
    for name in args.models.split(","):
        model, inputs = MODELS[name]()
        mod, params = relay.frontend.from_onnx(model)
        with tvm.transform.PassContext(opt_level=3):
            lib_cudnn = relay.build(partition_for_cudnn(mod, params, depthwise=args.depthwise), target="cuda")
            lib_kiln = relay.build(mod, target="cuda", params=params)
        want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, inputs)[0]
        sess = ort.InferenceSession(model.SerializeToString(), providers=[provider])
        sides = {}
        for label, lib in (("cudnn", lib_cudnn), ("kiln", lib_kiln)):
            m = graph_executor.GraphModule(lib["default"](dev))
            for k, v in inputs.items():
                m.set_input(k, tvm.nd.array(v, dev))
            m.run()
            got = m.get_output(0).numpy()
            if not np.allclose(got, want, rtol=1e-4, atol=1e-4):
                print(f"MISMATCH {name} ({label}): max abs diff {np.abs(got - want).max():.2e}")
                wrong.append(f"{name} ({label})")
            sides[label] = lambda m=m: (m.run(), dev.sync())
            if label == "cudnn":  # convolutions whose fused cuDNN call was refused
                executors = [f.executor for _, _, f, _ in m.module.kernels if hasattr(f, "executor")]
                refused = sum(not ok for e in executors for ok in e.fused_ok.values())
                failures = [e.capture_failure for e in executors if e.capture_failure]
                with_cudnn = m
        sides["ort"] = lambda: sess.run(None, inputs)
        subgraphs = [m for m in lib_cudnn.get_lib().imported_modules if m.type_key == "cudnn"]
        nodes = sum(len(m.graph["nodes"]) for m in subgraphs)
        ms = {k: 1e3 * statistics.median(v) for k, v in interleaved(sides, args.rounds, args.number).items()}
        print(f"{name:<14}{ms['cudnn']:>10.3f}{ms['kiln']:>9.3f}{ms['ort']:>9.3f}{ms['cudnn'] / ms['kiln']:>11.2f}x"
              f"{ms['cudnn'] / ms['ort']:>10.2f}x  {len(subgraphs)} subgraphs, {nodes} cuDNN nodes, "
              f"{refused} fused calls refused, {sum(e.captured for e in executors)} replayed as CUDA graphs")
        if failures:
            print(f"  not captured: {failures[0]}")
        if args.profile:
            _profile(with_cudnn, dev)
    if wrong:
        sys.exit(f"MISMATCH: {', '.join(wrong)}")


def _profile(m, dev, number: int = 50) -> None:
    """Per cuDNN node kind: host time per call (no sync: what Python and cuDNN spend launching) and
    time per call with a sync after the batch (host and device); then the graph's split."""
    import json
    import time

    ex = m.module
    rows = {}
    for _, name, func, args in ex.kernels:
        executor = getattr(func, "executor", None)
        if executor is None or not name.startswith("tvmgen_default_cudnn"):
            continue
        for node, call in executor.bind(args).steps:
            a = node["attrs"]
            label = node["kind"]
            if node["kind"] == "conv2d":
                groups, channels = a["groups"], executor._shape(node["inputs"][0])[1]
                label += ("_depthwise" if groups > 1 and groups == channels else "") + f" post={a['post'] or '-'}" + \
                    (" bias" if a["bias"] else "")
            dev.sync()
            start = time.perf_counter()
            for _ in range(number):
                call()
            host = (time.perf_counter() - start) / number
            dev.sync()
            start = time.perf_counter()
            for _ in range(number):
                call()
            dev.sync()
            full = (time.perf_counter() - start) / number
            r = rows.setdefault(label, [0, 0.0, 0.0])
            r[0] += 1
            r[1] += host
            r[2] += full
    print(f"  {'cuDNN node':<34}{'count':>6}{'host us/call':>14}{'synced us/call':>16}{'total ms':>10}")
    for label, (n, host, full) in sorted(rows.items(), key=lambda kv: -kv[1][2]):
        print(f"  {label:<34}{n:>6}{1e6 * host / n:>14.1f}{1e6 * full / n:>16.1f}{1e3 * full:>10.3f}")
    prof = json.loads(ex.profile(number=20, repeat=3))
    cudnn = sum(r["ms"] for r in prof if r["name"].startswith("tvmgen_default_cudnn"))
    kiln = sum(r["ms"] for r in prof if not r["name"].startswith("tvmgen_default_cudnn"))
    dev.sync()
    start = time.perf_counter()
    for _ in range(number):
        ex.run()
    host = (time.perf_counter() - start) / number
    dev.sync()
    print(f"  per node (profile): cuDNN subgraphs {cudnn:.3f} ms, kiln kernels {kiln:.3f} ms; run() without sync "
          f"{1e3 * host:.3f} ms")


if __name__ == "__main__":
    main()
