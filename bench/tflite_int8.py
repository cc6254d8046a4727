"""TFLite int8 MobileNetV2, batch 1: kiln against the TFLite interpreter (ai-edge-litert) with XNNPACK.

The model is written by tests/relay/frontend/tflite_builder.py (``mobilenet_v2``: random weights,
activations quantized from ranges of the float model on 4 random images, per-channel int8
filters, as TFLite's post-training quantizer does). kiln imports it with ``from_tflite`` (an
integer graph with TFLite's arithmetic: docs/quantization.md) and builds it for ``--target``,
twice: ``exact`` (TFLite's two-rounding rescale in convolutions, equal to its builtin kernels)
and ``fast`` (``exact_rounding=False``: one rounding); the CPU int8 kernels fuse either;
the interpreter runs it with the XNNPACK delegate and ``--threads`` threads, kiln's thread pool
has as many. The sides take turns in every round (timing.interleaved); figures are medians,
the ratio the median of per-round ratios. Also printed: the largest difference of kiln's int8
logits from XNNPACK's and from TFLite's builtin kernels, in quantization steps (kiln computes the
builtin kernels' arithmetic; XNNPACK rescales in float32). The machine is shared: rerun before
trusting a figure.

    python bench/tflite_int8.py [--image 224] [--width 1.0] [--threads 2] [--rounds 7] [--number 10]
                                [--modes exact,fast]

Goal (issue 31): within one step of the interpreter and at least as fast as XNNPACK (ratio <= 1).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "relay" / "frontend"))
sys.path.insert(0, str(HERE))

import tflite_builder as TB  # noqa: E402

from cpu_module import built  # noqa: E402
from timing import interleaved  # noqa: E402


def make_model(image: int, width: float) -> bytes:
    rng = np.random.default_rng(0)
    calib = [rng.standard_normal((1, image, image, 3)).astype("float32") for _ in range(4)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ranges = TB.calibrate(TB.mobilenet_v2(image=image, width=width, classes=1000), calib)
    return TB.mobilenet_v2(ranges, image=image, width=width, classes=1000)


def interpreter(model: bytes, threads: int, xnnpack: bool):
    from ai_edge_litert.interpreter import Interpreter, OpResolverType
    kind = OpResolverType.AUTO if xnnpack else OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
    it = Interpreter(model_content=model, num_threads=threads, experimental_op_resolver_type=kind)
    it.allocate_tensors()
    return it


def build_kiln(model: bytes, threads: int, target: str, exact: bool):
    from kiln import relay

    return built(*relay.frontend.from_tflite(model, exact_rounding=exact), threads, target)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--image", type=int, default=224)
    ap.add_argument("--width", type=float, default=1.0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--number", type=int, default=10)
    ap.add_argument("--target", default="llvm")
    ap.add_argument("--modes", default="exact,fast", help="kiln builds: exact and/or fast (exact_rounding=False)")
    args = ap.parse_args()

    model = make_model(args.image, args.width)
    print(f"MobileNetV2 {args.width} int8, {args.image}x{args.image}: {len(model) / 1e6:.1f} MB; "
          f"{args.threads} threads; shared machine: figures are noisy", flush=True)
    xnn = interpreter(model, args.threads, xnnpack=True)
    builtin = interpreter(model, args.threads, xnnpack=False)
    x = np.random.default_rng(7).standard_normal((1, args.image, args.image, 3)).astype("float32")
    ref = {}
    for name, it in (("xnnpack", xnn), ("builtin", builtin)):
        it.set_tensor(it.get_input_details()[0]["index"], x)
        it.invoke()
        ref[name] = it.get_tensor(it.get_output_details()[0]["index"]).astype(np.int64)

    runs, steps = {"xnnpack": xnn.invoke}, {}
    for mode in args.modes.split(","):
        m, compile_s = build_kiln(model, args.threads, args.target, exact=mode == "exact")
        m.set_input(input=x)
        m.run()
        got = m.get_output(0).numpy().astype(np.int64)
        steps[mode] = {k: int(np.abs(got - v).max()) for k, v in ref.items()}
        print(f"kiln {mode}: compile {compile_s:.0f} s; int8 logits vs TFLite: max {steps[mode]['builtin']} step(s) "
              f"from the builtin kernels, {steps[mode]['xnnpack']} from XNNPACK; top-1 "
              f"{'same' if got.argmax() == ref['xnnpack'].argmax() else 'DIFFERS'}", flush=True)
        runs[f"kiln {mode}"] = m.module["run"]

    times = interleaved(runs, args.rounds, args.number)
    ms = {k: 1e3 * statistics.median(t) for k, t in times.items()}
    print(f"TFLite XNNPACK {ms['xnnpack']:.2f} ms")
    for mode in steps:
        key = f"kiln {mode}"
        ratio = statistics.median(a / b for a, b in zip(times[key], times["xnnpack"]))
        print(f"{key} {ms[key]:.2f} ms: ratio kiln/TFLite {ratio:.2f} (goal <= 1.0), max step difference "
              f"{steps[mode]['xnnpack']} (XNNPACK), {steps[mode]['builtin']} (builtin)")


if __name__ == "__main__":
    main()
