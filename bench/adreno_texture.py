"""Adreno textures vs buffers: ResNet-18 (and MobileNetV2) whole model and per conv kernel, float32 and float16.

Both builds are ``opencl -device=adreno``: relay keeps activations in NCHW4c and conv weights in
OIHW4o between operators (docs/adreno.md). The texture build gives those graph entries images
(``storage_scope`` in mod.json) and every kernel reads and writes ``image2d_t`` directly; the
buffer build (``PassContext(config={"relay.backend.adreno_textures": False})``) runs the same
kernels on the same layouts in global memory. float16 is ToMixedPrecision("float16",
accumulation float32): half images and buffers, float arithmetic (no cl_khr_fp16 on PoCL or
NVIDIA's OpenCL). Whole-model times are medians of ``--repeat`` runs of the graph (device
synchronized); per-kernel times come from the graph executor's ``profile()`` of the same
graphs, texture and buffer in the same run. Outputs of the two builds are compared, and
``--baseline`` adds plain ``opencl`` (topi.gpu, NCHW buffers) for reference.

    KILN_OPENCL_PLATFORM=NVIDIA python bench/adreno_texture.py    # the lent GPU, 224x224
    python bench/adreno_texture.py --small                         # PoCL: 32x32

No Adreno here: the ratios say what textures cost or save on the device it runs on. Published
Adreno figures for reference (apache/tvm PR #17512): ResNet-18 texture fp32 10.6 ms, fp16 7.1 ms.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "relay"))

import kiln as tvm  # noqa: E402
from kiln import relay  # noqa: E402
from kiln.contrib import graph_executor  # noqa: E402

TARGET = "opencl -device=adreno"
TILE = None  # --tile: the NCHW4c conv's (pixels, channel blocks, work-items) per work-item / group


def build(mod, params, textures: bool, fp16: bool, target: str = TARGET):
    if fp16:
        mod = relay.transform.InferType()(mod)
        mod = relay.transform.ToMixedPrecision("float16", accumulation_dtype="float32")(mod)
    config = {"relay.backend.adreno_textures": textures}
    if TILE:
        config["relay.backend.adreno_conv_tile"] = TILE
    with tvm.transform.PassContext(opt_level=3, config=config):
        return relay.build(mod, target=tvm.target.Target(target, host="llvm"), params=params)


def measure(lib, inputs, dev, repeat: int, number: int, profile: bool):
    """(median ms per run, first output, per-kernel profile rows or [])."""
    g = graph_executor.GraphModule(lib["default"](dev))
    g.set_input(**inputs)
    g.run()
    out = g.get_output(0).numpy()
    timer = g.module.time_evaluator("run", dev, number=number, repeat=repeat)
    ms = statistics.median(timer().results) * 1e3
    rows = json.loads(g.module["profile"](number, 3)) if profile else []
    return ms, out, rows


def textures_in(lib) -> int:
    scopes = json.loads(lib.get_graph_json())["attrs"].get("storage_scope", ["list_str", []])[1]
    return sum(s != "global" for s in scopes)


def accuracy(label: str, got, want) -> str:
    """float16 vs the float32 onnxruntime output: the issue's criterion (top-5 kept, within 1e-2
    of the logits' scale)."""
    got = got.astype("float32")
    rel = float(np.abs(got - want).max()) / (float(np.abs(want).max()) or 1.0)
    top5 = bool((np.argsort(-got[0])[:5] == np.argsort(-want[0])[:5]).all())
    ok = "ok" if top5 and rel <= 1e-2 else "MISSES the criterion"
    return f"{label} max err {rel:.2%} of scale, top-5 {'kept' if top5 else 'changed'} ({ok})"


def compare(name, mod, params, inputs, dev, repeat, number, fp16, layers: bool, baseline: bool, want=None):
    tex = build(mod, params, True, fp16)
    buf = build(mod, params, False, fp16)
    tex_ms, tex_out, tex_rows = measure(tex, inputs, dev, repeat, number, layers)
    buf_ms, buf_out, buf_rows = measure(buf, inputs, dev, repeat, number, layers)
    err = float(np.abs(tex_out.astype("float32") - buf_out.astype("float32")).max())
    scale = float(np.abs(buf_out).max()) or 1.0
    if not fp16 and err > 1e-4 * max(scale, 1.0):
        raise RuntimeError(f"{name}: texture and buffer builds differ (max abs err {err:.2e})")
    if fp16 and want is not None:  # half rounding may differ between image writes and vstore_half
        print(f"  vs onnxruntime float32: {accuracy('texture', tex_out, want)}; {accuracy('buffer', buf_out, want)}")
    if layers:
        print("  per conv kernel (graph executor profile):")
        for t, b in zip(tex_rows if len(tex_rows) <= 40 else [], buf_rows):
            if "conv2d" in t["name"]:
                short = t["name"].replace("tvmgen_default_fused_", "")[:40]
                print(f"    node {t['node']:3d} {short:40s} texture {t['ms']:8.3f} ms  buffer {b['ms']:8.3f} ms  "
                      f"{t['ms'] / max(b['ms'], 1e-9):.2f}x")
        if len(tex_rows) > 40:  # long graphs: the kernels where textures gain or lose most
            by_name: dict = {}
            for t, b in zip(tex_rows, buf_rows):
                acc = by_name.setdefault(t["name"].replace("tvmgen_default_fused_", "")[:40], [0.0, 0.0, 0])
                acc[0] += t["ms"]
                acc[1] += b["ms"]
                acc[2] += 1
            print("  kernels with the largest texture - buffer difference (summed over their calls):")
            for k, (t, b, n) in sorted(by_name.items(), key=lambda kv: -abs(kv[1][0] - kv[1][1]))[:8]:
                print(f"    {k:40s} x{n:<3d} texture {t:8.3f} ms  buffer {b:8.3f} ms")
        conv_t = sum(r["ms"] for r in tex_rows if "conv2d" in r["name"])
        conv_b = sum(r["ms"] for r in buf_rows if "conv2d" in r["name"])
        print(f"    all conv kernels: texture {conv_t:.3f} ms  buffer {conv_b:.3f} ms  {conv_t / max(conv_b, 1e-9):.2f}x")
    print(f"  {name:16s} texture {tex_ms:9.3f} ms  buffer {buf_ms:9.3f} ms  texture/buffer {tex_ms / buf_ms:.2f}x"
          f"  ({textures_in(tex)} image entries in mod.json, max |tex - buf| {err:.1e})")
    if baseline:
        try:
            base_ms, _, _ = measure(build(mod, params, False, fp16, "opencl"), inputs, dev, repeat, number, False)
            print(f"  {'plain opencl':16s} {base_ms:9.3f} ms (topi.gpu, NCHW buffers)")
        except Exception as err:  # noqa: BLE001 - one failing row must not lose the others
            print(f"  {'plain opencl':16s} failed: {type(err).__name__}: {str(err).splitlines()[0][:200]}")
    return tex_ms, buf_ms


def half_rounding(dev) -> str:
    """Whether kernels writing float16 round as numpy does (to nearest even) on this device, into
    a CL_HALF_FLOAT image (rounded in the kernel, then write_imagef) and into a half buffer
    (vstore_half_rte): counts of results that differ, on values that need rounding."""
    from kiln import te

    shape = (1, 4, 16, 16, 4)
    x = (np.random.default_rng(0).standard_normal(shape) * 3).astype("float32")
    want = x.astype("float16")
    out = {}
    for scope in ("global.texture", "global"):
        a = te.placeholder(shape, name="a")
        b = te.compute(shape, lambda *i: (a(*i) * 1.0).astype("float16"), name="b")
        s = te.create_schedule(b.op)
        if scope != "global":
            s[b].set_scope(scope)
        n, c, h, w, k = s[b].op.axis
        s[b].bind(s[b].fuse(n, c, h), te.thread_axis("blockIdx.x"))
        s[b].bind(w, te.thread_axis("threadIdx.x"))
        s[b].vectorize(k)
        f = tvm.build(s, [a, b], target=tvm.target.Target(TARGET, host="llvm"))
        res = tvm.nd.empty(shape, "float16", dev, mem_scope=scope if scope != "global" else None)
        f(tvm.nd.array(x, dev), res)
        got = res.numpy()
        toward_zero = np.abs(got.astype("float32")) <= np.abs(want.astype("float32"))
        diff = got != want
        out[scope] = f"{int(diff.sum())} of {x.size} differ from round-to-nearest-even" + \
            (f" (all toward zero: {bool(toward_zero[diff].all())})" if diff.any() else "")
    return f"half rounding: image writes {out['global.texture']}; buffer writes {out['global']}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--small", action="store_true", help="PoCL / CI: 32x32 models")
    p.add_argument("--repeat", type=int, default=None)
    p.add_argument("--models", default="resnet18,mobilenet_v2")
    p.add_argument("--baseline", action="store_true", help="also time plain 'opencl' (topi.gpu) builds")
    p.add_argument("--skip", choices=["layers", "fp16", "fp32"], action="append", default=[])
    p.add_argument("--tile", default=None, help="NCHW4c conv tiles 'pixels,blocks,threads' (default 2,1,64)")
    args = p.parse_args()
    global TILE
    TILE = tuple(int(v) for v in args.tile.split(",")) if args.tile else None
    dev = tvm.cl(0)
    if not dev.exist:
        raise SystemExit("no OpenCL device (clinfo lists none); set KILN_OPENCL_PLATFORM or install one")
    repeat = args.repeat or (3 if args.small else 10)
    print(f"device: {dev.device_name}; target {TARGET}; medians of {repeat}; conv tile {TILE or (2, 1, 64)}")
    try:
        print(half_rounding(dev), flush=True)
    except Exception as err:  # noqa: BLE001 - a diagnostic only
        print(f"half rounding check failed: {type(err).__name__}: {str(err).splitlines()[0][:200]}")
    import onnx_models

    image = 32 if args.small else 224
    for fp16 in [f for f in (False, True) if ("fp16" if f else "fp32") not in args.skip]:
        kind = "float16 (fp32 accumulation)" if fp16 else "float32"
        for name in args.models.split(","):
            # float16 MobileNetV2: the calmer random network (projection batch norms x0.5) as the
            # tests use, since the plain one amplifies any rounding (float16 itself) past top-5.
            calm = {"project_gamma": 0.5} if fp16 and name == "mobilenet_v2" else {}
            model, inputs = getattr(onnx_models, name)(image=image, classes=10 if args.small else 1000, **calm)
            mod, params = relay.frontend.from_onnx(model)
            print(f"{name}{' (calm)' if calm else ''} batch 1, {image}x{image}, {kind}:", flush=True)
            try:
                want = onnx_models.run_ort(model, inputs)[0] if fp16 else None
                compare("whole model", mod, params, inputs, dev, repeat, 3 if args.small else 10, fp16,
                        "layers" not in args.skip, args.baseline, want)
            except Exception as err:  # noqa: BLE001 - report and go on to the next row
                print(f"  failed: {type(err).__name__}: {str(err).splitlines()[0][:200]}", flush=True)


if __name__ == "__main__":
    main()
