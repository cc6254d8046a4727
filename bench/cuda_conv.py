"""CUDA conv2d: untuned tile candidates on each distinct conv layer of a model, timed on the GPU.

For every distinct (non-grouped) conv2d of the ONNX model, heaviest (FLOPs x occurrences) first (tests/relay/onnx_models.py), batch 1,
builds topi.gpu's direct kernel with the default tiles (``topi.gpu.conv2d.default_config``),
the previous default (one window tap per shared-memory step) and a few other points of
``topi.gpu.conv2d.tiles`` (outputs per work-item, work-group size, channels per step), checks
each against the default's output, and prints ms (CUDA events, median of 5 x 20 calls) and
TFLOP/s. What the defaults should be is read off this table.

    python bench/cuda_conv.py --model resnet50
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "relay"))

import kiln as tvm  # noqa: E402
from kiln import te, topi  # noqa: E402
from kiln.topi.gpu import conv2d as gconv  # noqa: E402
from kiln.topi.nn.conv2d import conv2d_shape  # noqa: E402


def layers(model_name: str, image: int = 224) -> list:
    import onnx
    import onnx_models
    from onnx import shape_inference

    model, _ = getattr(onnx_models, model_name)(image=image)
    model = shape_inference.infer_shapes(model)
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in list(model.graph.value_info) + list(model.graph.input)}
    inits = {i.name: list(i.dims) for i in model.graph.initializer}
    count: dict = {}
    for n in model.graph.node:
        if n.op_type != "Conv":
            continue
        a = {x.name: onnx.helper.get_attribute_value(x) for x in n.attribute}
        if a.get("group", 1) != 1:
            continue
        key = (tuple(shapes[n.input[0]]), tuple(inits[n.input[1]]), a["strides"][0], a["pads"][0])
        count[key] = count.get(key, 0) + 1

    def work(key):  # the layer's share of the model's convolution FLOPs: the heaviest first
        (_, c, h, w), (f, _, kh, kw), stride, _ = key
        return -count[key] * f * c * kh * kw * (h // stride) * (w // stride)

    return sorted(count, key=work)


def old_default(p) -> dict:
    """The tiles before the shape-driven defaults: <= 4 channels x 2 columns per work-item, one tap per step."""
    f, h, w = p.out_channel, p.out_height, p.out_width
    xi = 2 if w % 2 == 0 and w >= 16 else 1
    tx = gconv.divisor(w // xi, 16)
    ty = gconv.divisor(h, max(1, 64 // tx))
    fi = gconv.divisor(f, 4)
    tf = gconv.divisor(f // fi, max(1, min(64, 256 // (tx * ty))))
    rci = gconv.divisor(p.in_channel, 8)
    return {"tile_f": [f // (tf * fi), 1, tf, fi], "tile_y": [h // ty, 1, ty, 1], "tile_x": [w // (tx * xi), 1, tx, xi],
            "tile_rc": [p.in_channel // rci, rci], "tile_ry": [p.kernel_h, 1], "tile_rx": [p.kernel_w, 1],
            "auto_unroll_max_step": 512, "unroll_explicit": True}


def candidates(p) -> dict:
    out = {"default": gconv.default_config(p, 1024)}
    if old_default(p) != out["default"]:
        out["old"] = old_default(p)
    if p.kernel_h > 1 and p.in_channel >= 16:
        # the window-tap kernel's work-groups with more input channels per step, or the whole window
        tap = gconv.per_tap_config(p, 1024)
        for rc in (16, 32):
            rci = gconv.divisor(p.in_channel, rc)
            out[f"tap rc{rc}"] = {**tap, "tile_rc": [p.in_channel // rci, rci]}
        ty, tx = tap["tile_y"][2] * tap["tile_y"][3], tap["tile_x"][2] * tap["tile_x"][3]
        per = ((ty - 1) * p.stride_h + p.kernel_h) * ((tx - 1) * p.stride_w + p.kernel_w) + \
            tap["tile_f"][2] * tap["tile_f"][3] * p.kernel_h * p.kernel_w
        rci = max([r for r in (1, 2, 4, 8, 16) if p.in_channel % r == 0 and r * per <= gconv.SHARED_FLOATS] or [1])
        out[f"tap whole rc{rci}"] = {**tap, "tile_rc": [p.in_channel // rci, rci], "tile_ry": [1, p.kernel_h],
                                     "tile_rx": [1, p.kernel_w]}
    for fi, xi, budget, rc, yi in ((4, 2, 128, 16, 1), (4, 2, 256, 16, 1), (2, 2, 128, 16, 1), (2, 1, 128, 16, 1),
                                   (1, 1, 128, 32, 1), (4, 2, 64, 8, 2), (8, 2, 128, 8, 1), (2, 1, 64, 64, 1),
                                   (1, 1, 64, 32, 1), (2, 1, 128, 32, 1), (1, 1, 256, 16, 1)):
        if p.out_channel % fi or p.out_width % xi or p.out_height % yi:
            continue
        cfg = gconv.tiles(p, fi, xi, budget, rc, yi=yi)
        if cfg not in out.values():  # a point equal to one already listed is timed once
            out[f"f{fi}x{xi}y{yi} b{budget} rc{rc}"] = cfg
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--target", default="cuda")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--image", type=int, default=224)
    ap.add_argument("--number", type=int, default=20, help="calls per timed repeat")
    ap.add_argument("--only", nargs="*", default=[], help='layers whose description starts so, e.g. "512x7x7 -> 512"')
    ap.add_argument("--limit", type=float, default=150.0, help="stop after this many seconds")
    args = ap.parse_args()
    dev = tvm.cl(0) if args.target.startswith("opencl") else tvm.cuda(0)  # opencl: a check of the script
    if not dev.exist:
        raise SystemExit(f"bench/cuda_conv.py: no device for {args.target}")
    target = tvm.target.Target(args.target, host="llvm")
    start = time.perf_counter()
    rng = np.random.default_rng(0)
    best_total, default_total, old_total = 0.0, 0.0, 0.0
    for dshape, wshape, stride, pad in layers(args.model, args.image):
        if time.perf_counter() - start > args.limit:
            print("(time limit)")
            break
        p = conv2d_shape("conv2d", dshape, wshape, stride, pad, 1, 1)
        desc = f"{dshape[1]}x{dshape[2]}x{dshape[3]} -> {wshape[0]} {wshape[2]}x{wshape[3]} s{stride}"
        if args.only and not any(desc.startswith(o) for o in args.only):
            continue
        x = rng.standard_normal(dshape).astype(args.dtype)
        wt = (rng.standard_normal(wshape) * 0.1).astype(args.dtype)
        xa, wa = tvm.nd.array(x, dev), tvm.nd.array(wt, dev)
        results, ref = {}, None
        for name, cfg in candidates(p).items():
            try:
                with target:
                    a = te.placeholder(dshape, name="a", dtype=args.dtype)
                    b = te.placeholder(wshape, name="b", dtype=args.dtype)
                    out = topi.gpu.conv2d_nchw(a, b, stride, pad, 1, "float32", cfg=cfg)
                    s = topi.gpu.schedule_conv2d_nchw([out], cfg)
                    f = tvm.build(s, [a, b, out], target=target)
                o = tvm.nd.empty([int(d) for d in out.shape], "float32", dev)
                f(xa, wa, o)
                got = o.numpy()
                if ref is None:
                    ref = got
                elif not np.allclose(got, ref, rtol=1e-3, atol=1e-3):
                    results[name] = float("nan")
                    continue
                t = f.time_evaluator(f.entry_name, dev, number=args.number, repeat=5)(xa, wa, o)
                results[name] = statistics.median(t.results) * 1e3
            except Exception as e:  # noqa: BLE001 - a candidate that does not build is reported, not fatal
                print(f"    {name}: {type(e).__name__}: {str(e).splitlines()[0][:120]}")
        flops = p.flops
        best = min((v, k) for k, v in results.items() if v == v)
        d = candidates(p)["default"]
        tiles = " ".join(f"{k[5:]}{d[k][2:] if k[5] in 'fyx' else d[k][1:]}" for k in
                         ("tile_f", "tile_y", "tile_x", "tile_rc"))
        print(f"{desc} [default {tiles}]: " + "  ".join(f"{k} {v:.4f}" for k, v in results.items()) +
              f"  | best {best[1]} ({flops / best[0] / 1e9:.1f} TFLOP/s)", flush=True)
        best_total += best[0]
        default_total += results.get("default", 0.0)
        old_total += results.get("old", 0.0)
    print(f"sum over distinct layers: default {default_total:.3f} ms, old {old_total:.3f} ms, best {best_total:.3f} ms")


if __name__ == "__main__":
    main()
