"""OpenCL: fp32 matmul and ResNet-18 batch 1, kiln against a reference measured in the same run.

- matmul N x N x N (default 4096): kiln's untuned default schedule (topi.gpu: 128 x 128 blocks
  in shared memory, 8 x 8 outputs per work-item, float4 fetches) and kiln tuned (the best of a
  short search over hand-picked points of the tuning space), against cuBLAS through torch with
  TF32 off when torch sees a CUDA GPU, else numpy on the CPU.
- ResNet-18 batch 1 (224 x 224, the ONNX model of tests/relay/onnx_models.py) built by
  relay.build for OpenCL, against torch eager on CUDA (the same architecture) when there is a
  CUDA GPU, else onnxruntime on the CPU. kiln's output is checked against onnxruntime's.

Every kiln time is measured on the device (time_evaluator, OpenCL profiling events); medians of
``--repeat`` repeats. Pick the OpenCL platform with ``KILN_OPENCL_PLATFORM`` (a substring of
its name, e.g. ``NVIDIA`` or ``Portable``). ``--small`` (PoCL, CI) runs a 256^3 matmul and a
32 x 32 ResNet-18, checks the numbers and prints the ratios without meaning much.

    KILN_OPENCL_PLATFORM=NVIDIA python bench/opencl.py               # the lent H100
    python bench/opencl.py --small                                   # PoCL here
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "relay"))

import kiln as tvm  # noqa: E402
from kiln import te, topi  # noqa: E402

# Points of the dense/matmul tuning space (tile_y / tile_x: block, vthread, thread, inner;
# tile_k: steps, slab depth) that suit large products on current GPUs; "tuned" is the best.
CANDIDATES = [
    {"tile_y": [-1, 2, 16, 4], "tile_x": [-1, 2, 16, 4], "tile_k": [-1, 8], "vec": 4},
    {"tile_y": [-1, 2, 16, 4], "tile_x": [-1, 2, 16, 4], "tile_k": [-1, 16], "vec": 4},
    {"tile_y": [-1, 1, 16, 8], "tile_x": [-1, 2, 16, 4], "tile_k": [-1, 8], "vec": 4},
    {"tile_y": [-1, 1, 16, 8], "tile_x": [-1, 1, 16, 8], "tile_k": [-1, 16], "vec": 4},
    {"tile_y": [-1, 2, 8, 4], "tile_x": [-1, 2, 16, 4], "tile_k": [-1, 8], "vec": 4},
    {"tile_y": [-1, 1, 8, 8], "tile_x": [-1, 2, 16, 4], "tile_k": [-1, 16], "vec": 4},
]


def _median_ms(results) -> float:
    return statistics.median(results) * 1e3


def cuda_torch():
    """torch with a CUDA device and TF32 off, or None."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return torch


def cuda_device_and_torch(script: str):
    """tvm.cuda(0) and torch (TF32 off) for a CUDA bench, or SystemExit naming ``script`` and what is missing."""
    dev = tvm.cuda(0)
    if not dev.exist:
        raise SystemExit(f"{script}: no CUDA device (needs an NVIDIA GPU, its driver and "
                         "pip install 'kiln[cuda]')")
    torch = cuda_torch()
    if torch is None:
        raise SystemExit(f"{script}: the reference is torch with CUDA; install torch")
    return dev, torch


def time_torch(torch, fn, repeat: int, number: int, warmup: int = 1) -> float:
    """Median ms per call of fn on the GPU (CUDA events), after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(number):
            fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / number)
    return statistics.median(times)


def time_cpu(fn, repeat: int, number: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - start) / number * 1e3)
    return statistics.median(times)


# -- matmul ---------------------------------------------------------------------------------------

def build_matmul(n: int, target, cfg=None):
    a = te.placeholder((n, n), name="A")
    b = te.placeholder((n, n), name="B")
    with target:
        c = topi.gpu.matmul(a, b, cfg=cfg)
        s = topi.gpu.schedule_matmul([c])
        return tvm.build(s, [a, b, c], target=target, name="matmul")


def kiln_matmul_ms(f, args, dev, repeat: int, number: int) -> float:
    timer = f.time_evaluator(f.entry_name, dev, number=number, repeat=repeat)
    return _median_ms(timer(*args).results)


def bench_matmul(n: int, target, dev, repeat: int, torch) -> None:
    rng = np.random.default_rng(0)
    a_np = rng.standard_normal((n, n), dtype=np.float32)
    b_np = rng.standard_normal((n, n), dtype=np.float32)
    a, b = tvm.nd.array(a_np, dev), tvm.nd.array(b_np, dev)
    c = tvm.nd.empty((n, n), "float32", dev)
    flop = 2.0 * n ** 3
    number = 1 if n >= 2048 else 10

    if torch is not None:
        ta, tb = torch.from_numpy(a_np).cuda(), torch.from_numpy(b_np).cuda()
        tc = torch.empty((n, n), device="cuda")
        ref_name = "cuBLAS (torch, TF32 off)"
        want = None

        def ref_call():
            torch.matmul(ta, tb, out=tc)
    else:
        out = np.empty((n, n), np.float32)
        ref_name = "numpy (CPU)"

        def ref_call():
            np.matmul(a_np, b_np, out=out)

    def check(f) -> float:
        """Relative error of kiln's product (vs the reference's, or float64 numpy on rows)."""
        f(a, b, c)
        got = c.numpy()
        if torch is not None:
            ref_call()
            torch.cuda.synchronize()
            ref = tc.cpu().numpy()
        else:
            rows = slice(0, min(n, 64))
            ref = a_np[rows].astype(np.float64) @ b_np.astype(np.float64)
            got = got[rows]
        return float(np.abs(got - ref).max() / np.abs(ref).max())

    start = time.perf_counter()
    untuned = build_matmul(n, target)
    build_s = time.perf_counter() - start
    err = check(untuned)
    if err > 1e-4:
        raise SystemExit(f"matmul {n}: kiln's untuned kernel differs from the reference (max rel err {err:.2e})")
    t_untuned = kiln_matmul_ms(untuned, (a, b, c), dev, repeat, number)

    best_ms, best_cfg = t_untuned, "untuned default"
    for cfg in CANDIDATES:
        try:
            f = build_matmul(n, target, cfg)
            if check(f) > 1e-4:
                print(f"  candidate {cfg}: wrong result, skipped")
                continue
            ms = kiln_matmul_ms(f, (a, b, c), dev, max(3, repeat // 2), number)
        except Exception as e:  # noqa: BLE001 - a candidate the device rejects (too many work-items...)
            print(f"  candidate {cfg}: {type(e).__name__}: {str(e).splitlines()[0][:120]}")
            continue
        print(f"  candidate {cfg}: {flop / ms / 1e6:.0f} GFLOPS")
        if ms < best_ms:
            best_ms, best_cfg = ms, cfg
    t_tuned = kiln_matmul_ms(build_matmul(n, target, None if isinstance(best_cfg, str) else best_cfg),
                             (a, b, c), dev, repeat, number)
    t_ref = time_torch(torch, ref_call, repeat, number) if torch is not None else time_cpu(ref_call, repeat, number)
    t_untuned = kiln_matmul_ms(untuned, (a, b, c), dev, repeat, number)  # again, after the reference

    def gf(ms):
        return flop / ms / 1e6

    print(f"matmul fp32 {n}^3 (build {build_s:.1f} s; max rel err {err:.1e})")
    print(f"  {ref_name:28s} {t_ref:9.3f} ms  {gf(t_ref):9.0f} GFLOPS")
    print(f"  {'kiln untuned':28s} {t_untuned:9.3f} ms  {gf(t_untuned):9.0f} GFLOPS  ratio {t_ref / t_untuned:.2f}x")
    print(f"  {'kiln tuned':28s} {t_tuned:9.3f} ms  {gf(t_tuned):9.0f} GFLOPS  ratio {t_ref / t_tuned:.2f}x"
          f"  ({best_cfg})")


# -- ResNet-18 ------------------------------------------------------------------------------------

def torch_resnet18(torch, classes: int):
    """ResNet-18 (v1, as tests/relay/onnx_models.resnet18 builds it) in torch, random weights."""
    nn = torch.nn

    def conv_bn(cin, cout, k, stride, relu=True):
        layers = [nn.Conv2d(cin, cout, k, stride, k // 2, bias=False), nn.BatchNorm2d(cout)]
        return nn.Sequential(*layers, nn.ReLU(inplace=True)) if relu else nn.Sequential(*layers)

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.a = conv_bn(cin, cout, 3, stride)
            self.b = conv_bn(cout, cout, 3, 1, relu=False)
            self.short = conv_bn(cin, cout, 1, stride, relu=False) if stride != 1 or cin != cout else nn.Identity()

        def forward(self, x):
            return torch.relu(self.b(self.a(x)) + self.short(x))

    layers = [conv_bn(3, 64, 7, 2), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for stage, cout in enumerate([64, 128, 256, 512]):
        for block in range(2):
            layers.append(Block(cin, cout, 2 if stage > 0 and block == 0 else 1))
            cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, classes)]
    return nn.Sequential(*layers).eval()


def build_resnet18(model, target, winograd: bool):
    from kiln import relay

    mod, params = relay.frontend.from_onnx(model)
    config = {"relay.backend.gpu_winograd": True} if winograd else {}
    with tvm.transform.PassContext(opt_level=3, config=config):
        return relay.build(mod, target=target, params=params)


def bench_resnet18(image: int, target, dev, repeat: int, torch, winograd: bool = False) -> None:
    from onnx_models import resnet18, run_ort

    from kiln.contrib import graph_executor

    classes = 1000 if image >= 224 else 10
    model, inputs = resnet18(image=image, classes=classes)
    want = run_ort(model, inputs)[0]
    kiln_ms, err = {}, 0.0
    for wino in ([False, True] if winograd else [False]):
        start = time.perf_counter()
        lib = build_resnet18(model, target, wino)
        build_s = time.perf_counter() - start
        g = graph_executor.GraphModule(lib["default"](dev))
        g.set_input(**inputs)
        g.run()
        got = g.get_output(0).numpy()
        err = max(err, float(np.abs(got - want).max()))
        if not np.allclose(got, want, rtol=1e-4, atol=1e-4):
            raise SystemExit(f"ResNet-18: kiln's output differs from onnxruntime's (max abs err {err:.2e})")
        timer = g.module.time_evaluator("run", dev, number=1 if image >= 224 else 3, repeat=repeat)
        kiln_ms["kiln, Winograd 3x3" if wino else "kiln"] = _median_ms(timer().results)

    x = inputs["data"]
    if torch is not None:
        net = torch_resnet18(torch, classes).cuda()
        tx = torch.from_numpy(x).cuda()
        ref_name = "torch eager (CUDA)"
        with torch.no_grad():
            t_ref = time_torch(torch, lambda: net(tx), repeat, 10)
    else:
        import onnxruntime as ort

        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        ref_name = "onnxruntime (CPU)"
        t_ref = time_cpu(lambda: sess.run(None, inputs), repeat, 3)
    print(f"ResNet-18 batch 1, {image}x{image} (build {build_s:.1f} s; max abs err vs onnxruntime {err:.1e})")
    print(f"  {ref_name:28s} {t_ref:9.3f} ms")
    for name, t_kiln in kiln_ms.items():
        print(f"  {name:28s} {t_kiln:9.3f} ms  kiln/ref {t_kiln / t_ref:.2f}x")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--small", action="store_true", help="CI / PoCL sizes: 256^3 matmul, 32x32 ResNet-18")
    p.add_argument("--size", type=int, default=None, help="matmul N (default 4096; 256 with --small)")
    p.add_argument("--image", type=int, default=None, help="ResNet-18 input size (default 224; 32 with --small)")
    p.add_argument("--repeat", type=int, default=None)
    p.add_argument("--target", default="opencl", help='kiln target: "opencl" or "opencl -device=mali"')
    p.add_argument("--skip", choices=["matmul", "resnet"], action="append", default=[])
    p.add_argument("--winograd", action="store_true", help="also time ResNet-18 with its 3x3 convs by Winograd")
    args = p.parse_args()
    n = args.size or (256 if args.small else 4096)
    image = args.image or (32 if args.small else 224)
    repeat = args.repeat or (3 if args.small else 10)
    dev = tvm.cl(0)
    if not dev.exist:
        raise SystemExit("bench/opencl.py: no OpenCL device (install an ICD: PoCL, or NVIDIA's; "
                         "KILN_OPENCL_PLATFORM picks a platform by name)")
    target = tvm.target.Target(args.target, host="llvm")
    torch = cuda_torch()
    print(f"device: {dev.device_name}  |  reference: {'torch CUDA ' + torch.cuda.get_device_name() if torch else 'CPU'}")
    if "matmul" not in args.skip:
        bench_matmul(n, target, dev, repeat, torch)
    if "resnet" not in args.skip:
        bench_resnet18(image, target, dev, repeat, torch, args.winograd)


if __name__ == "__main__":
    main()
