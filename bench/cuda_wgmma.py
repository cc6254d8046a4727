"""fp16 matmul 4096^3 on Hopper's warpgroup tensor cores (wgmma, topi/cuda/wgmma.py) against cuBLAS.

Builds ``dense_wgmma`` (A M x K, W N x K float16, float32 result) for ``cuda -arch=sm_90a`` at a
few block shapes (slabs fetched by bulk tensor copies into swizzled tiles, or by cp.async), checks each against torch's float32 product of the same float16 inputs (max
error relative to the largest output), times it and torch's float16 ``a @ w.T`` (cuBLAS) with
CUDA events (medians), and counts the HGMMA instructions in the kernel's SASS (``cuobjdump
-sass`` on the carried cubin, where cuobjdump is installed).

    python bench/cuda_wgmma.py                  # on an H100 / H200 with torch
"""

from __future__ import annotations

import argparse
import base64
import shutil
import subprocess
import tempfile
import time

import numpy as np

import kiln as tvm
from kiln import te

import sibling  # bench/sibling.py: this script's folder is on sys.path

# bulk tensor copies into swizzled tiles first, then the cp.async pipeline of the first runs
CANDIDATES = [{"warpgroups": 2, "n": 256, "stages": 4, "copy": "tma"},
              {"warpgroups": 2, "n": 256, "stages": 3, "copy": "tma"},
              {"warpgroups": 2, "n": 128, "stages": 6, "copy": "tma"},
              {"warpgroups": 2, "n": 128, "stages": 4, "copy": "tma"},
              {"warpgroups": 1, "n": 256, "stages": 6, "copy": "tma"},
              {"warpgroups": 2, "n": 256, "bk": 64, "stages": 4, "copy_order": "chunks"},
              {"warpgroups": 2, "n": 128, "bk": 64, "stages": 4, "copy_order": "rows"}]


def build(n: int, conf: dict, target):
    from kiln.topi.cuda import wgmma

    a = te.placeholder((n, n), "float16", name="A")
    w = te.placeholder((n, n), "float16", name="W")
    with target:
        c = wgmma.dense_wgmma(a, w, conf)
        s = wgmma.schedule_dense_wgmma([c])
        return tvm.build(s, [a, w, c], target=target, name="dense_wgmma")


def sass_hgmma(f) -> str:
    cubin = f.metadata["device_code"].get("cubin")
    tool = shutil.which("cuobjdump")
    if not cubin or not tool:
        return "no cuobjdump here" if cubin else "no cubin (name an -arch)"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as fh:
        fh.write(base64.b64decode(cubin))
        fh.flush()
        sass = subprocess.run([tool, "-sass", fh.name], capture_output=True, text=True).stdout
    ops = [line for line in sass.splitlines() if "HGMMA" in line]
    # a SASS line: /*0a40*/  HGMMA.64x256x16.F32 R24, gdesc[UR4], RZ, !UPT ; /* 0x... */
    first = ops[0].split("*/", 1)[-1].split(";")[0].strip()[:60] if ops else ""
    return f"{len(ops)} HGMMA in the SASS" + (f" (first: {first})" if ops else "")


def bench_relay(n: int, target, dev, torch, repeat: int) -> None:
    """relay's float16 dense + bias + relu in the form ToMixedPrecision gives kiln's fp16 models
    (dense to float32 sums, cast to float16, bias and relu in float16; float16 in and out) through
    the wgmma strategy, its epilogue in a kernel of its own and fused, against torch's float16
    relu(linear) (cuBLAS with the bias, then relu), CUDA events."""
    from kiln import relay
    from kiln.contrib import graph_executor
    from kiln.topi.cuda import wgmma

    rng = np.random.default_rng(1)
    x_np = rng.uniform(-1, 1, (n, n)).astype(np.float16)
    w_np = rng.uniform(-1, 1, (n, n)).astype(np.float16)
    b_np = rng.uniform(-1, 1, (n,)).astype(np.float16)
    x = relay.var("x", shape=(n, n), dtype="float16")
    d = relay.cast(relay.nn.dense(x, relay.const(w_np), out_dtype="float32"), "float16")
    y = relay.nn.relu(relay.nn.bias_add(d, relay.const(b_np)))
    mod = relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function([x], y)))
    tx, tw, tb = (torch.from_numpy(v).cuda() for v in (x_np, w_np, b_np))
    want = torch.relu(torch.nn.functional.linear(tx.float(), tw.float(), tb.float())).cpu().numpy()

    def ref():
        torch.relu_(torch.nn.functional.linear(tx, tw, tb))

    gpu = sibling.load("opencl.py")
    t_ref = gpu.time_torch(torch, ref, repeat, 5)
    flop = 2.0 * n ** 3
    print(f"relay dense+bias+relu fp16 {n}^3: torch relu(linear) fp16 {t_ref:.3f} ms {flop / t_ref / 1e9:.0f} TFLOP/s")
    default = wgmma.EPILOGUE
    for epilogue in ("kernel", "fused"):
        wgmma.EPILOGUE = epilogue
        try:
            lib = relay.build(mod, target=target)
            g = graph_executor.GraphModule(lib["default"](dev))
            g.set_input("x", x_np)
            g.run()
            got = g.get_output(0).numpy().astype(np.float32)
            err = float(np.abs(got - want).max() / np.abs(want).max())
            timer = g.module.time_evaluator("run", dev, number=5, repeat=repeat)
            ms = float(np.median(timer().results)) * 1e3
            src = lib.get_lib().imported_modules[0].get_source()
        except Exception as ex:  # noqa: BLE001
            print(f"  epilogue {epilogue}: {type(ex).__name__}: {str(ex).splitlines()[0][:200]}")
            continue
        kernels = sum("__global__" in line for line in src.splitlines())
        print(f"  epilogue {epilogue}: {ms:.3f} ms (whole graph, {kernels} kernels) "
              f"{flop / ms / 1e9:.0f} TFLOP/s  {t_ref / ms:.2f}x torch  max rel err {err:.1e}"
              f"{'' if err < 4e-3 else ' WRONG'}  wgmma: {'wgmma.mma_async' in src}", flush=True)
    wgmma.EPILOGUE = default


# transformer products (M, N, K) whose M is a multiple of 64 (bench/cuda_matmul.py's list): BERT-base
# at 128 tokens, GPT-2 small at 64; and wgmma blocks small enough to give them blocks
TRANSFORMER_SHAPES = [(128, 768, 768), (128, 3072, 768), (128, 768, 3072), (64, 2304, 768), (64, 768, 3072)]
# (deeper pipelines fetch further ahead: a 5-10 us product is latency-bound)
TRANSFORMER_CONFS = [{"warpgroups": 1, "n": 64, "stages": 4, "copy": "tma"},
                     {"warpgroups": 1, "n": 64, "stages": 8, "copy": "tma"},
                     {"warpgroups": 1, "n": 64, "stages": 12, "copy": "tma"},
                     {"warpgroups": 1, "n": 128, "stages": 8, "copy": "tma"},
                     {"warpgroups": 2, "n": 64, "stages": 8, "copy": "tma"}]


def bench_transformer(target, dev, torch) -> None:
    """Small-M products on wgmma blocks (TRANSFORMER_CONFS) and on the path topi.gpu takes for them
    (wmma, or wgmma where strategy_config takes the shape), each right against torch and timed as replayed CUDA graphs whose calls rotate
    over weight copies beyond the L2 cache, against torch's calls in a CUDA graph (as
    bench/cuda_matmul.py --transformer)."""
    import importlib

    mm = sibling.load("cuda_matmul.py")
    gdense = importlib.import_module("kiln.topi.gpu.dense")
    rng = np.random.default_rng(0)
    for m, n, k in TRANSFORMER_SHAPES:
        a_np = rng.uniform(-1, 1, (m, k)).astype(np.float16)
        w_np = rng.uniform(-1, 1, (n, k)).astype(np.float16)
        copies = max(2, -(-80 * 2 ** 20 // w_np.nbytes))
        calls = max(20, copies)
        ta = torch.from_numpy(a_np).cuda()
        tws = [torch.from_numpy(w_np).cuda() for _ in range(copies)]
        tc = torch.empty((m, n), device="cuda", dtype=torch.float16)
        ref_ms = mm.torch_graph_ms(torch, lambda i: torch.matmul(ta, tws[i % copies].t(), out=tc), calls=calls)
        ref = (ta.float() @ tws[0].float().t()).cpu().numpy()
        del tws
        a = tvm.nd.array(a_np, dev)
        ws = [tvm.nd.array(w_np, dev) for _ in range(copies)]
        c = tvm.nd.empty((m, n), "float32", dev)
        line = []
        for conf in [None] + TRANSFORMER_CONFS:
            name = "topi.gpu default" if conf is None else f"wgmma {conf['warpgroups']}x{conf['n']}/{conf['stages']}"
            try:
                with target:
                    pa = te.placeholder((m, k), "float16", name="A")
                    pw = te.placeholder((n, k), "float16", name="W")
                    if conf is None:
                        out = gdense.dense(pa, pw, None, "float32")
                        s = gdense.schedule_dense([out])
                    else:
                        from kiln.topi.cuda import wgmma

                        out = wgmma.dense_wgmma(pa, pw, conf)
                        s = wgmma.schedule_dense_wgmma([out])
                    f = tvm.build(s, [pa, pw, out], target=target, name="dense")
                c.copyfrom(np.full((m, n), np.nan, np.float32))
                f(a, ws[0], c)
                err = float(np.abs(c.numpy() - ref).max() / np.abs(ref).max())
                if not err < 1e-3:
                    line.append(f"{name}: WRONG ({err:.1e})")
                    continue
                ms = mm.graph_ms(torch, lambda i: f(a, ws[i % copies], c), calls=calls)
                line.append(f"{name} {ms * 1e3:.1f} us ({ref_ms / ms:.2f}x)")
            except Exception as ex:  # noqa: BLE001 - a point the shape or the device rejects
                line.append(f"{name}: {type(ex).__name__}: {str(ex).splitlines()[0][:80]}")
        del ws
        print(f"fp16 {m}x{n}x{k}: torch {ref_ms * 1e3:.1f} us | " + " | ".join(line), flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=4096)
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--candidates", type=int, default=len(CANDIDATES), help="time the first N of CANDIDATES")
    p.add_argument("--relay", action="store_true", help="also relay's dense + bias + relu (bench_relay)")
    p.add_argument("--transformer", action="store_true", help="small-M transformer products only (bench_transformer)")
    args = p.parse_args()
    gpu = sibling.load("opencl.py")
    dev, torch = gpu.cuda_device_and_torch("bench/cuda_wgmma.py")
    target = tvm.target.Target("cuda -arch=sm_90a -max_shared_memory_per_block=232448", host="llvm")
    if args.relay:
        bench_relay(args.size, target, dev, torch, args.repeat)
    if args.transformer:
        return bench_transformer(target, dev, torch)
    n = args.size
    rng = np.random.default_rng(0)
    a_np = rng.uniform(-1, 1, (n, n)).astype(np.float16)
    w_np = rng.uniform(-1, 1, (n, n)).astype(np.float16)
    a, w = tvm.nd.array(a_np, dev), tvm.nd.array(w_np, dev)
    c = tvm.nd.empty((n, n), "float32", dev)
    ta, tw = torch.from_numpy(a_np).cuda(), torch.from_numpy(w_np).cuda()
    ref = (ta.float() @ tw.float().t()).cpu().numpy()
    th = torch.empty((n, n), device="cuda", dtype=torch.float16)

    def cublas():
        torch.matmul(ta, tw.t(), out=th)

    flop = 2.0 * n ** 3
    t_ref = gpu.time_torch(torch, cublas, args.repeat, 5)
    print(f"device: {dev.device_name}  |  target: {target}  |  cuBLAS fp16 {t_ref:.3f} ms "
          f"{flop / t_ref / 1e9:.0f} TFLOP/s")
    best = None
    for conf in CANDIDATES[:args.candidates]:
        try:
            start = time.perf_counter()
            f = build(n, conf, target)
            build_s = time.perf_counter() - start
            c.copyfrom(np.full((n, n), np.nan, "float32"))  # every element must be written
            f(a, w, c)
            err = float(np.abs(c.numpy() - ref).max() / np.abs(ref).max())
            ms = gpu.kiln_matmul_ms(f, (a, w, c), dev, args.repeat, 5)
        except Exception as ex:  # noqa: BLE001 - a point the device rejects
            print(f"  {conf}: {type(ex).__name__}: {str(ex).splitlines()[0][:160]}")
            continue
        ok = err < 1e-3  # float32 sums of float16 products, K = 4096
        print(f"  {conf}: {ms:.3f} ms {flop / ms / 1e9:.0f} TFLOP/s  {t_ref / ms:.2f}x cuBLAS  max rel err {err:.1e}"
              f"{'' if ok else ' WRONG'}  build {build_s:.1f} s  {sass_hgmma(f)}", flush=True)
        if ok and (best is None or ms < best[0]):
            best = (ms, conf)
    if best:
        print(f"best wgmma: {best[1]} {flop / best[0] / 1e9:.0f} TFLOP/s = {t_ref / best[0]:.2f}x cuBLAS")
        return
    # diagnosis: the same kernel with the descriptor's two strides exchanged
    from kiln.codegen import cuda_wgmma

    cuda_wgmma.DESC = cuda_wgmma.DESC.replace("<< 16)", "<< 99)").replace("<< 32)", "<< 16)").replace("<< 99)", "<< 32)")
    f = build(n, {"warpgroups": 2, "n": 128, "bk": 64, "stages": 4}, target)
    f(a, w, c)
    err = float(np.abs(c.numpy() - ref).max() / np.abs(ref).max())
    raise SystemExit(f"bench/cuda_wgmma.py: no wgmma kernel was right (with the strides exchanged: max rel err {err:.1e})")


if __name__ == "__main__":
    main()
