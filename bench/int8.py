"""int8 end to end, batch 1: kiln's int8 kernels against onnxruntime's int8 and kiln's own fp32.

ResNet-50 and MobileNetV2 (224x224, random weights, tests/relay/onnx_models.py) have their batch
norms folded into the convs by the bench (``fold_batch_norms``), are prepared with onnxruntime's
``quant_pre_process`` and quantized with its ``quantize_static`` (QDQ, per-channel int8 weights,
uint8 activations, 8 random calibration images). The bench folds them itself because
``quant_pre_process`` does not on every onnxruntime version (1.30 on the lent Xeon left all 53 of
ResNet-50's, so each conv was followed by DQ -> BatchNormalization -> Q: a different model, 3x
kiln's time then). Each model is run
by onnxruntime (its default graph optimizations, ``--threads`` intra-op threads), by kiln from the
same QDQ file (int8 kernels: docs/quantization.md) and by kiln from the float model (fp32). The
sides take turns in every round (timing.interleaved); the figures are medians over the rounds and
the ratios medians of per-round ratios. The machine is shared: rerun before trusting a figure.
Where OpenVINO is installed (``pip install openvino``; not a kiln dependency) it runs the same QDQ
file too (CPU plugin, latency hint, ``--threads`` inference threads); elsewhere it is skipped.

    python bench/int8.py [--threads 2] [--rounds 7] [--number 5] [--models resnet50,mobilenet_v2]
                         [--target llvm] [--profile] [--pin] [--cpu-time] [--without KEY]

``--pin`` compiles on every CPU, then pins the process to ``--threads`` CPUs (one per physical core
first, as bench/e2e.py) before onnxruntime's and kiln's threads start: the timings of
``taskset -c 0,1`` without its slow 2-core compile.

``--cpu-time`` (with ``--threads 1``) times every side by its CPU time (timing.cpu_interleaved):
on a loaded machine the wall times follow the other jobs. ``--without relay.qnn.int8_mixed``
adds the int8 build with that PassContext switch off (its output compared, its time beside).

``--profile`` adds each build's slowest kernels (the graph executor's per-kernel times, summed
by kernel name): where an int8/fp32 ratio differs between hosts, it says which layers differ.

Goals (issue 31): kiln int8 <= 1.0x onnxruntime int8 (within 1.2x of OpenVINO int8 on AMX hosts);
kiln int8 ResNet-50 >= 2.5x faster than kiln fp32 on VNNI/AMX hosts (1.5x on AVX2-only hosts: on
an AVX-512 host, ``--target "llvm -mcpu=znver3"`` compares AVX2 code with kiln's fp32 AVX2 code).
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
sys.path.insert(0, str(Path(__file__).resolve().parent))

from onnx_models import mobilenet_v2, resnet50  # noqa: E402

from cpu_module import built  # noqa: E402
from timing import cpu_interleaved, cpu_name, interleaved  # noqa: E402

MODELS = {"resnet50": resnet50, "mobilenet_v2": mobilenet_v2}


def fold_batch_norms(model):
    """A copy of ``model`` with each BatchNormalization that is a Conv's only consumer folded into
    that Conv's weights and bias (float64 arithmetic, rounded to float32 once)."""
    import onnx
    from onnx import numpy_helper

    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    consumers: dict = {}
    for node in graph.node:
        for name in node.input:
            consumers[name] = consumers.get(name, 0) + 1
    producer = {o: n for n in graph.node for o in n.output}
    drop = []
    for bn in graph.node:
        if bn.op_type != "BatchNormalization":
            continue
        conv = producer.get(bn.input[0])
        if conv is None or conv.op_type != "Conv" or consumers.get(bn.input[0]) != 1 or \
                not all(n in inits for n in list(bn.input[1:5]) + list(conv.input[1:])):
            continue
        eps = next((a.f for a in bn.attribute if a.name == "epsilon"), 1e-5)
        gamma, beta, mean, var = (numpy_helper.to_array(inits[n]).astype("float64") for n in bn.input[1:5])
        w = numpy_helper.to_array(inits[conv.input[1]]).astype("float64")
        b = numpy_helper.to_array(inits[conv.input[2]]).astype("float64") if len(conv.input) > 2 else 0.0
        scale = gamma / np.sqrt(var + eps)
        wname, bname = conv.input[1] + "_bnfold", conv.output[0] + "_bnfold_bias"
        graph.initializer.extend([
            numpy_helper.from_array((w * scale.reshape(-1, *[1] * (w.ndim - 1))).astype("float32"), wname),
            numpy_helper.from_array(((b - mean) * scale + beta).astype("float32"), bname)])
        conv.input[:] = [conv.input[0], wname, bname]
        conv.output[0] = bn.output[0]
        drop.append(bn)
    for bn in drop:
        graph.node.remove(bn)
    used = {n for node in graph.node for n in node.input}
    keep = [i for i in graph.initializer if i.name in used]
    del graph.initializer[:]
    graph.initializer.extend(keep)
    return model


def quantized(model, inputs: dict, calibration: int = 8):
    """onnxruntime's quant_pre_process + quantize_static (QDQ, per-channel s8 weights, u8 activations)."""
    import onnx
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    name, x = next(iter(inputs.items()))
    rng = np.random.default_rng(1)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.batches = iter([{name: rng.standard_normal(x.shape).astype("float32")} for _ in range(calibration)])

        def get_next(self):
            return next(self.batches, None)

    with tempfile.TemporaryDirectory() as tmp:
        src, pre, dst = (os.path.join(tmp, f) for f in ("f.onnx", "pre.onnx", "q.onnx"))
        onnx.save(fold_batch_norms(model), src)
        quant_pre_process(src, pre, skip_symbolic_shape=True)
        quantize_static(pre, dst, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
        return onnx.load(dst)


def build_kiln(model, threads: int, target: str = "llvm", config: dict | None = None):
    """(GraphModule, build seconds); ``config``: PassContext settings (an A/B of a kiln switch)."""
    from kiln import relay

    return built(*relay.frontend.from_onnx(model), threads, target, pass_config=config)


def ort_session(model, threads: int):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def openvino_infer(model, threads: int):
    """A callable running the QDQ model on OpenVINO's CPU plugin, or None without OpenVINO."""
    try:
        import openvino as ov
    except ImportError:
        return None
    core = ov.Core()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "q.onnx")
        import onnx
        onnx.save(model, path)
        compiled = core.compile_model(core.read_model(path), "CPU",
                                      {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY"})
    request = compiled.create_infer_request()
    return lambda inputs: request.infer(list(inputs.values()))[0]


def output_step(qmodel) -> float:
    """The scale of the model output's last quantization (one step of the int8 result)."""
    from onnx import numpy_helper

    inits = {i.name: i for i in qmodel.graph.initializer}
    out = qmodel.graph.output[0].name
    for node in qmodel.graph.node:
        if node.op_type == "DequantizeLinear" and node.output[0] == out:
            return float(numpy_helper.to_array(inits[node.input[1]]).max())
    return float("nan")


def bench_model(name: str, threads: int, rounds: int, number: int, target: str, profile: bool = False,
                pin: bool = False, cpu_time: bool = False, without: tuple = ()) -> dict:
    model, inputs = MODELS[name]()
    start = time.perf_counter()
    qmodel = quantized(model, inputs)
    float_ops = sorted({n.op_type for n in qmodel.graph.node} - {"QuantizeLinear", "DequantizeLinear", "Conv", "Gemm",
                                                                   "MatMul", "Add", "MaxPool", "GlobalAveragePool",
                                                                   "Flatten", "Reshape", "Relu", "Clip"})
    print(f"{name}: quantized by onnxruntime in {time.perf_counter() - start:.0f} s; other ops in the QDQ graph: "
          f"{', '.join(float_ops) or 'none'}", flush=True)
    k8, c8 = build_kiln(qmodel, threads, target)
    k32, c32 = build_kiln(model, threads, target)
    if pin:  # kiln's workers start at the first run, onnxruntime's with its session: both inherit it
        from e2e import pin_cpus
        os.sched_setaffinity(0, pin_cpus(threads))
    sess = ort_session(qmodel, threads)
    want = sess.run(None, inputs)[0]
    k8.set_input(**inputs)
    k8.run()
    got = k8.get_output(0).numpy()
    step = output_step(qmodel)
    err = float(np.abs(got - want).max())
    steps = err / step if step == step else float("nan")
    g, w = got.ravel().astype("float64"), want.ravel().astype("float64")
    cos = float(g @ w / (np.linalg.norm(g) * np.linalg.norm(w)))
    # the ONNX importer selects onnxruntime's rounding (FLOAT32, docs/quantization.md): 0 steps
    # where onnxruntime sums u8 x s8 exactly (VNNI/AMX; its AVX2 vpmaddubsw saturates)
    print(f"{name}: compile int8 {c8:.0f} s, fp32 {c32:.0f} s; kiln int8 vs onnxruntime int8: max diff {err:.4g} "
          f"= {steps:.1f} output steps, cosine {cos:.4f}, top-1 {'same' if got.argmax() == want.argmax() else 'DIFFERS'}",
          flush=True)
    k32.set_input(**inputs)
    runs = {"kiln_int8": k8.module["run"], "ort_int8": lambda: sess.run(None, inputs), "kiln_fp32": k32.module["run"]}
    keep = []
    for key in without:  # the int8 build with a kiln switch off, same inputs: its output and time
        kw, cw = build_kiln(qmodel, threads, target, {key: False})
        kw.set_input(**inputs)
        kw.run()
        same = np.array_equal(kw.get_output(0).numpy(), got)
        print(f"{name}: kiln int8 with {key}=False: compile {cw:.0f} s, output {'the same bytes' if same else 'DIFFERS'}",
              flush=True)
        keep.append(kw)
        runs[f"kiln_int8_without_{key}"] = kw.module["run"]
    ov = openvino_infer(qmodel, threads)
    if ov is not None:
        got_ov = np.asarray(ov(inputs))
        print(f"{name}: OpenVINO int8 vs onnxruntime int8: max diff {np.abs(got_ov - want).max() / step:.1f} output "
              f"steps, top-1 {'same' if got_ov.argmax() == want.argmax() else 'DIFFERS'}", flush=True)
        runs["openvino_int8"] = lambda: ov(inputs)
    times = (cpu_interleaved if cpu_time else interleaved)(runs, rounds, number)
    out = {k: 1e3 * statistics.median(t) for k, t in times.items()}
    out["vs_ort"] = statistics.median(a / b for a, b in zip(times["kiln_int8"], times["ort_int8"]))
    if ov is not None:
        out["vs_openvino"] = statistics.median(a / b for a, b in zip(times["kiln_int8"], times["openvino_int8"]))
    out["vs_fp32"] = statistics.median(b / a for a, b in zip(times["kiln_int8"], times["kiln_fp32"]))
    for key in without:
        t = times[f"kiln_int8_without_{key}"]
        out[f"without {key}"] = (1e3 * statistics.median(t),
                                 statistics.median(b / a for a, b in zip(t, times["kiln_fp32"])))
    out["steps"] = steps
    if profile:
        for label, m in (("kiln int8", k8), ("kiln fp32", k32)):
            print_profile(f"{name} {label}", m)
    return out


def print_profile(label: str, m, top: int = 12) -> None:
    """The graph executor's time of each kernel alone (wall, medians), summed by kernel name."""
    import json

    by_name: dict = {}
    for row in json.loads(m.module["profile"](5, 5)):
        by_name[row["name"]] = by_name.get(row["name"], 0.0) + row["ms"]
    rows = sorted(by_name.items(), key=lambda kv: -kv[1])
    print(f"{label}: kernels alone {sum(by_name.values()):.2f} ms; slowest: " +
          ", ".join(f"{n.replace('tvmgen_default_fused_', '')} {ms:.2f}" for n, ms in rows[:top]), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--number", type=int, default=5)
    ap.add_argument("--models", default="resnet50,mobilenet_v2")
    ap.add_argument("--target", default="llvm")
    ap.add_argument("--profile", action="store_true", help="also print each build's slowest kernels")
    ap.add_argument("--pin", action="store_true", help="after compiling, pin the process to --threads CPUs")
    ap.add_argument("--cpu-time", action="store_true",
                    help="time by CPU time (timing.cpu_interleaved; needs --threads 1): for a loaded machine")
    ap.add_argument("--without", action="append", default=[], metavar="KEY",
                    help="also time the int8 build with PassContext switch KEY off (e.g. relay.qnn.int8_mixed)")
    args = ap.parse_args()
    if args.cpu_time and args.threads != 1:
        ap.error("--cpu-time needs --threads 1 (idle workers spin and their CPU time would count)")
    from kiln.target.cpu_facts import cpu_facts
    from kiln.topi.x86.conv2d_int8 import int8_tier

    facts = cpu_facts(args.target)
    print(f"CPU: {cpu_name()} (LLVM: {facts.cpu}); int8 features: "
          f"{sorted(f for f in facts.features if 'vnni' in f or 'amx' in f or f == 'avx2')}; kiln int8 tier: "
          f"{int8_tier(args.target)}; {args.threads} threads{' pinned after compiling' if args.pin else ''}; "
          "shared machine: figures are noisy")
    for name in args.models.split(","):
        r = bench_model(name, args.threads, args.rounds, args.number, args.target, args.profile, args.pin,
                        args.cpu_time, tuple(args.without))
        print(f"{name}: kiln int8 {r['kiln_int8']:.2f} ms, onnxruntime int8 {r['ort_int8']:.2f} ms, "
              f"kiln fp32 {r['kiln_fp32']:.2f} ms | kiln int8 / onnxruntime int8 = {r['vs_ort']:.2f}x (goal <= 1.0), "
              f"kiln fp32 / kiln int8 = {r['vs_fp32']:.2f}x faster (goal >= 2.5 on VNNI/AMX, 1.5 on AVX2)", flush=True)
        for key in args.without:
            ms, ratio = r[f"without {key}"]
            print(f"{name}: kiln int8 with {key}=False {ms:.2f} ms | kiln fp32 / it = {ratio:.2f}x", flush=True)
        if "vs_openvino" in r:
            print(f"{name}: OpenVINO int8 {r['openvino_int8']:.2f} ms | kiln int8 / OpenVINO int8 = "
                  f"{r['vs_openvino']:.2f}x (goal <= 1.2 on AMX hosts)", flush=True)
        else:
            print(f"{name}: OpenVINO not installed (pip install openvino): its int8 run skipped", flush=True)


if __name__ == "__main__":
    main()
