"""CUDA whole models: ResNet-50 and MobileNetV2 batch 1 (224 x 224) and transformers, kiln vs torch.compile and eager.

For each model and dtype:

- kiln: the ONNX model of tests/relay/onnx_models.py (random weights) imported by
  relay.frontend.from_onnx, built by relay.build for ``cuda`` (host llvm) with the shared GPU
  schedules; float16 is ``ToMixedPrecision("float16", accumulation_dtype="float32")`` of the
  same graph (float16 tensors, float32 sums, float32 interface). Checked against onnxruntime
  (CPU) on the float32 model: float32 within 1e-3, float16 the same top-5 classes in order.
- Transformers (``--models bert gpt2 vit``): BERT-base (seq 128, masked), GPT-2 small (seq 64) and
  ViT-B/16 from ``transformers`` configs (bench/transformer_models.py, seed 0), the same module
  exported to ONNX for kiln and run by torch; float16 checked by cosine (>= 0.999) against
  onnxruntime's float32 hidden states, with the max error relative to the largest value.
- torch: torchvision's ``resnet50`` / ``mobilenet_v2`` (the same architectures, random weights:
  only their latency is compared) in eager mode on cuDNN, TF32 off; ``.half()`` for float16;
  and the same under ``torch.compile(mode="reduce-overhead")`` (inductor kernels replayed as a
  CUDA graph), the reference of the acceptance ratios (``--no-compile``: eager only).

Both are timed with CUDA events (kiln: ``time_evaluator("run")`` on ``tvm.cuda(0)``; torch:
``torch.cuda.Event``), ``--number`` calls per repeat, the median over ``--repeat`` repeats. The
ratios kiln/eager and kiln/compile are printed per line, and kiln float16 / kiln float32 when
both ran. ``--profile N`` also prints
the N functions of each kiln build that take the most device time in total (each node's launches
replayed as a CUDA graph between CUDA events, ``profile`` below), and the sum of the kernels
against the whole graph's time.

    python bench/cuda_e2e.py                              # on an NVIDIA GPU with torch + torchvision
    python bench/cuda_e2e.py --models resnet18 --dtypes float32 --profile 15

Not named cuda.py: a script's folder comes first on sys.path (bench/cuda_gpu.py says why).
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "relay"))

import kiln as tvm  # noqa: E402
from kiln import relay  # noqa: E402
from kiln.contrib import graph_executor  # noqa: E402

import sibling  # noqa: E402  (bench/sibling.py: this script's folder is on sys.path)

MODELS = ("resnet50", "mobilenet_v2", "resnet18", "bert", "gpt2", "vit")
TRANSFORMERS = ("bert", "gpt2", "vit")  # bench/transformer_models.py: BERT-base seq 128, GPT-2 small seq 64, ViT-B/16



@functools.lru_cache(maxsize=None)  # a transformer's export takes seconds: once for both dtypes
def onnx_model(name: str):
    if name in TRANSFORMERS:  # transformers' configs, random weights (seed 0), torch.onnx.export
        return sibling.load("transformer_models.py").export(name, "base")
    import onnx_models

    if name == "mobilenet_v2":  # 0.5: float16 rounding does not reorder the random network's top-5
        return onnx_models.mobilenet_v2(project_gamma=0.5)
    return getattr(onnx_models, name)()


def torch_model(torch, name: str):
    if name in TRANSFORMERS:  # the same module the ONNX file was exported from, its last hidden state
        tm = sibling.load("transformer_models.py")
        torch.manual_seed(0)
        inner = tm._config(name, "base").eval().cuda()

        class Last(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.inner = inner

            def forward(self, **xs):
                return self.inner(**xs).last_hidden_state

        return Last().eval()
    import torchvision

    net = getattr(torchvision.models, name)(weights=None)
    return net.eval().cuda()


def conv_variant(name: str) -> None:
    """Swap topi.gpu's untuned conv2d tiles for a comparison: "old" (before the shape-driven
    defaults, bench/cuda_conv.py), "busy2x" (twice the work-items before register tiles grow),
    "shape" (the shape-driven tiles for 3x3 layers too)."""
    from kiln.topi.gpu import conv2d as gconv

    if name == "old":
        mod = sibling.load("cuda_conv.py")
        gconv.default_config = lambda p, threads=None: mod.old_default(p)
    elif name == "busy2x":
        gconv.BUSY_THREADS *= 2
    elif name == "shape":  # the output-shape-driven tiles for every layer kind (3x3 included)
        gconv.default_config = gconv.shape_config
    elif name.startswith("tc-busy="):  # warps the float16 tensor-core convs aim at (topi/cuda/tensorcore.py)
        from kiln.topi.cuda import tensorcore

        tensorcore.BUSY_WARPS = int(name.split("=")[1])
    elif name != "default":
        raise SystemExit(f"bench/cuda_e2e.py: no conv variant {name!r} (default, old, busy2x, shape)")


FUSED_ATTENTION = False  # --fused-attention: relay.FuseAttention.cuda (topi/cuda/attention.py)
DISABLED_PASSES: list = []  # --disable-pass NAME ...: an A/B of a relay pass (e.g. FlattenRows) in one run


def build(model, target, dtype: str):
    mod, params = relay.frontend.from_onnx(model)
    with tvm.transform.PassContext(opt_level=3, config={"relay.FuseAttention.cuda": FUSED_ATTENTION},
                                   disabled_pass=DISABLED_PASSES):
        if dtype in ("float16", "bfloat16"):
            mod = relay.transform.InferType()(mod)
            mod = relay.transform.ToMixedPrecision(dtype, accumulation_dtype="float32")(mod)
        return relay.build(mod, target=target, params=params)


def check(dtype: str, got: np.ndarray, want: np.ndarray, name: str = "") -> tuple[bool, str]:
    """(passed, what was compared): float32 within 1e-3 of onnxruntime, float16 its top-5 (a
    transformer's hidden states: cosine >= 0.999 and the max error relative to the largest value)."""
    if dtype != "float32" and name in TRANSFORMERS:
        got, want = got.astype(np.float64).ravel(), want.astype(np.float64).ravel()
        cos = float(np.dot(got, want) / (np.linalg.norm(got) * np.linalg.norm(want)))
        rel = float(np.abs(got - want).max() / np.abs(want).max())
        return cos >= 0.999, f"cosine to onnxruntime's float32 {cos:.5f}, max err {rel:.1e} of the largest" + (
            "" if cos >= 0.999 else " (cosine < 0.999: WRONG)")
    if dtype == "float32":
        err = float(np.abs(got - want).max())
        ok = bool(np.allclose(got, want, rtol=1e-3, atol=1e-3))
        return ok, f"max abs err vs onnxruntime {err:.1e}" + ("" if ok else " > 1e-3: WRONG")
    if dtype == "bfloat16":  # 8 significant bits: random networks' close classes swap; compare the vectors
        cos = float(np.dot(got.ravel(), want.ravel()) / (np.linalg.norm(got) * np.linalg.norm(want)))
        return cos >= 0.99, f"cosine to onnxruntime's {cos:.4f}" + ("" if cos >= 0.99 else " < 0.99: WRONG")
    top_got, top_want = np.argsort(-got[0])[:5].tolist(), np.argsort(-want[0])[:5].tolist()
    if top_got == top_want:
        return True, f"top-5 = onnxruntime's {top_want}"
    return False, f"top-5 {top_got} != onnxruntime's {top_want}: WRONG"


def profile(g, top: int, torch=None, whole_ms: float | None = None, calls: int = 20) -> None:
    """Each graph node's device time: its launches recorded ``calls`` times in a row as one CUDA
    graph (kiln/runtime/cuda_graphs.py), replayed 3 times between CUDA events, divided by the
    launches; then the functions by their total over the model, and the sum against the whole
    graph's time (what is left is the gaps between dependent launches). Without torch (events), the
    graph executor's wall-clock profile (launch cost included: ~25 us per launch)."""
    if torch is None:
        rows = json.loads(g.module["profile"](20, 5))
    else:
        rows = device_times(g, torch, calls)
    total = sum(r["ms"] for r in rows)
    by_name: dict = {}
    for r in rows:
        ms, count = by_name.get(r["name"], (0.0, 0))
        by_name[r["name"]] = (ms + r["ms"], count + 1)
    left = "" if whole_ms is None else \
        f" (the whole graph {whole_ms:.3f} ms: {whole_ms - total:+.3f} ms between kernels)"
    print(f"    {'device' if torch is not None else 'wall-clock'} sum of kernels {total:.3f} ms over {len(rows)} "
          f"launches{left}; top {top} functions by total:")
    for name, (ms, count) in sorted(by_name.items(), key=lambda kv: -kv[1][0])[:top]:
        print(f"      {ms:.4f} ms = {count:3d} x {ms / count * 1e3:8.2f} us  {name}")


def device_times(g, torch, calls: int) -> list:
    from kiln.runtime import cuda_graphs

    ex = g.module
    g.run()
    rows = []
    for (cfunc, args, codes, n, _), (nid, name, _, _) in zip(ex._prepared(), ex.kernels):
        def launches(cfunc=cfunc, args=args, codes=codes, n=n):
            for _ in range(calls):
                cfunc(args, codes, n)

        replay, why = cuda_graphs.record(launches, ex.device.device_id)
        if replay is None:
            raise RuntimeError(f"cannot record node {nid} ({name}) as a CUDA graph: {why}")
        replay()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(3):
            replay()
        end.record()
        end.synchronize()
        rows.append({"node": nid, "name": name, "ms": start.elapsed_time(end) / (3 * calls)})
        del replay
    return rows


def bench(name: str, dtype: str, target, dev, torch, gpu, args) -> tuple[float, bool]:
    from onnx_models import run_ort

    model, inputs = onnx_model(name)
    want = run_ort(model, inputs)[0]
    start = time.perf_counter()
    lib = build(model, target, dtype)
    build_s = time.perf_counter() - start
    g = graph_executor.GraphModule(lib["default"](dev))
    g.set_input(**inputs)
    g.run()
    ok, verdict = check(dtype, g.get_output(0).numpy(), want, name)
    timer = g.module.time_evaluator("run", dev, number=args.number, repeat=args.repeat)
    kiln_ms = statistics.median(timer().results) * 1e3

    net = torch_model(torch, name)
    xs = {k: torch.from_numpy(v).cuda() for k, v in inputs.items()}
    cast = {"float16": torch.float16, "bfloat16": torch.bfloat16}.get(dtype)
    if cast is not None:
        net = net.to(cast)
        xs = {k: v.to(cast) if v.is_floating_point() else v for k, v in xs.items()}
    if name in TRANSFORMERS:
        call = lambda m: m(**xs)  # noqa: E731
    else:
        call = lambda m: m(xs["data"])  # noqa: E731
    with torch.no_grad():
        ref_ms = gpu.time_torch(torch, lambda: call(net), args.repeat, args.number, warmup=3)
        line = f"torch eager {ref_ms:.3f} ms  kiln/eager {kiln_ms / ref_ms:.2f}x"
        ratio = kiln_ms / ref_ms
        if not args.no_compile:  # inductor + CUDA graphs: the reference of the goals
            start = time.perf_counter()
            compiled = torch.compile(net, mode="reduce-overhead")
            for _ in range(3):
                call(compiled)
            compile_s = time.perf_counter() - start
            comp_ms = gpu.time_torch(torch, lambda: call(compiled), args.repeat, args.number, warmup=3)
            ratio = kiln_ms / comp_ms
            line += f"  torch.compile(reduce-overhead) {comp_ms:.3f} ms  kiln/compile {ratio:.2f}x " \
                    f"(its compile {compile_s:.0f} s)"
    print(f"{name} {dtype}: kiln {kiln_ms:.3f} ms  {line}  (kiln build {build_s:.1f} s; "
          f"{len(g.module.kernels)} launches, CUDA graph: {g.module.cuda_graph_failure or 'yes'}; {verdict})",
          flush=True)
    RESULTS[(name, dtype)] = kiln_ms
    if dtype != "float32" and (name, "float32") in RESULTS:
        print(f"    kiln {dtype} / kiln float32: {kiln_ms / RESULTS[(name, 'float32')]:.2f}x", flush=True)
    if args.profile:
        try:
            profile(g, args.profile, torch, kiln_ms)
        except Exception as err:  # noqa: BLE001 - the timings above stand; say why there is no profile
            print(f"    no device profile: {type(err).__name__}: {err}", flush=True)
    return ratio, ok


RESULTS: dict = {}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", choices=MODELS, default=["resnet50", "mobilenet_v2"])
    p.add_argument("--dtypes", nargs="+", choices=["float32", "float16", "bfloat16"], default=["float32", "float16"])
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--number", type=int, default=10, help="calls per timed repeat")
    p.add_argument("--target", default="cuda", help='kiln target, e.g. "cuda -arch=sm_90"')
    p.add_argument("--profile", type=int, default=0, metavar="N",
                   help="print the N functions of each build with the most device time")
    p.add_argument("--conv-variant", default="default", help="untuned conv2d tiles: default, old, busy2x, shape")
    p.add_argument("--no-compile", action="store_true", help="skip torch.compile (eager is the reference then)")
    p.add_argument("--fused-attention", action="store_true", help="transformers: one nn.attention kernel per layer")
    p.add_argument("--disable-pass", nargs="+", default=[], metavar="NAME",
                   help="relay passes to leave out of the kiln builds (e.g. FlattenRows FuseDenseEpilogue)")
    args = p.parse_args()
    global FUSED_ATTENTION
    FUSED_ATTENTION = args.fused_attention
    DISABLED_PASSES[:] = args.disable_pass
    conv_variant(args.conv_variant)
    dev = tvm.cuda(0)
    if not dev.exist:
        raise SystemExit("bench/cuda_e2e.py: no CUDA device (needs an NVIDIA GPU, its driver and "
                         "pip install 'kiln[cuda]')")
    try:
        import torch  # noqa: F401  (cuda_torch below returns the same module, TF32 off)
        import torchvision  # noqa: F401
    except ImportError:
        raise SystemExit("bench/cuda_e2e.py: the reference is torch eager: install torch and torchvision") from None
    gpu = sibling.load("opencl.py")  # its measuring helpers
    torch = gpu.cuda_torch()  # TF32 off
    if torch is None:
        raise SystemExit("bench/cuda_e2e.py: torch sees no CUDA device")
    target = tvm.target.Target(args.target, host="llvm")
    print(f"device: {dev.device_name} (sm_{dev.compute_version.replace('.', '')})  |  target: {target}  |  "
          f"reference: torch {torch.__version__} eager and torch.compile(mode='reduce-overhead'), cuDNN, "
          f"TF32 off  |  median of {args.repeat} x "
          f"{args.number} calls  |  conv tiles: {args.conv_variant}", flush=True)
    worst, wrong = 0.0, []
    for name in args.models:
        for dtype in args.dtypes:
            ratio, ok = bench(name, dtype, target, dev, torch, gpu, args)
            worst = max(worst, ratio)
            wrong += [] if ok else [f"{name} {dtype}"]
    print(f"worst kiln/{'eager' if args.no_compile else 'torch.compile'} ratio: {worst:.2f}x")
    if wrong:
        raise SystemExit(f"bench/cuda_e2e.py: outputs wrong for {', '.join(wrong)}")


if __name__ == "__main__":
    main()
