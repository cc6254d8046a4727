"""CUDA matmul 4096^3: fp32 (topi.gpu) and fp16 on tensor cores (topi.cuda: wgmma, wmma), against cuBLAS.

- fp16 on Hopper (compute capability 9.0): the wgmma product relay's float16 dense takes for
  ``cuda -arch=sm_90a`` (``topi.gpu.dense``, topi/cuda/wgmma.py), its SASS HGMMA count.
- fp32: kiln's untuned default and the best of the hand-picked points of its tuning space, against
  cuBLAS through torch with TF32 off (bench/opencl.py's bench_matmul, run for CUDA).
- fp16: ``dense_tensorcore`` (A M x K, W N x K, both float16) untuned and the best of the
  hand-picked points below (float32 accumulation; the three best also with float16
  accumulation), against torch's float16 ``a @ w.T`` (cuBLAS).

Both sides are timed with CUDA events, medians of ``--repeat`` repeats; every kiln kernel is
checked against torch's result first.

    python bench/cuda_matmul.py                  # on an NVIDIA GPU with torch
    python bench/cuda_matmul.py --size 2048 --skip fp32
    python bench/cuda_matmul.py --transformer    # BERT / GPT-2 / ViT products, default and candidate tiles

``--transformer``: the dense products of BERT-base (128 tokens), GPT-2 small (64) and ViT-B/16
(197) in float16 (tensor cores: the untuned default and the ``TRANSFORMER_TC`` candidates) and
float32 (the untuned default, it with the reduction split by the knob ``split_k``, and
``TRANSFORMER_FP32``), each checked against torch and timed with its calls replayed as one CUDA
graph (kernels of 5-60 us: a Python launch per call would be timed instead), against torch's
own calls captured in a CUDA graph. The calls rotate over
copies of the weight that together exceed the L2 cache (80 MB), so each call reads its weight
from memory, as a model's layers do.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import kiln as tvm
from kiln import te

import sibling  # bench/sibling.py: this script's folder is on sys.path

# (block_row_warps, block_col_warps, warp_row_tiles, warp_col_tiles, chunk, shared stages, mma, raster): the
# best points of earlier runs on the H100 (one slab, or a 2/3-stage cp.async pipeline), each with
# wmma and with ldmatrix + mma.sync
_BEST = [(2, 2, 4, 4, 4, 0), (2, 2, 4, 4, 4, 2), (4, 2, 4, 4, 4, 3), (2, 4, 4, 4, 4, 3), (2, 2, 4, 4, 4, 3),
         (2, 4, 4, 2, 4, 3)]
TC_CANDIDATES = [p + (mma, 1) for p in _BEST for mma in (0, 1)]
# and block rows rastered by 8 (L2 reuse between neighbouring blocks)
TC_CANDIDATES += [(2, 2, 4, 4, 4, 0, 1, 8), (2, 2, 4, 4, 4, 3, 1, 8), (2, 2, 4, 4, 4, 0, 0, 8)]



def tc_config(point) -> dict:
    brw, bcw, wrt, wct, chunk, db, mma, raster = point
    return {"block_row_warps": brw, "block_col_warps": bcw, "warp_row_tiles": wrt, "warp_col_tiles": wct,
            "chunk": chunk, "offset": 8, "vec": 8, "double_buffer": db, "mma": mma, "raster": raster}


def build_tensorcore(n: int, target, out_dtype: str, cfg=None):
    from kiln.topi.cuda import dense_tensorcore, schedule_dense_tensorcore

    a = te.placeholder((n, n), "float16", name="A")
    w = te.placeholder((n, n), "float16", name="W")
    with target:
        c = dense_tensorcore(a, w, out_dtype=out_dtype, cfg=cfg)
        s = schedule_dense_tensorcore([c])
        return tvm.build(s, [a, w, c], target=target, name="dense_tc")


def bench_tensorcore(n: int, target, dev, repeat: int, torch, gpu) -> None:
    rng = np.random.default_rng(0)
    a_np = rng.uniform(-1, 1, (n, n)).astype(np.float16)
    w_np = rng.uniform(-1, 1, (n, n)).astype(np.float16)
    a, w = tvm.nd.array(a_np, dev), tvm.nd.array(w_np, dev)
    outs = {dt: tvm.nd.empty((n, n), dt, dev) for dt in ("float32", "float16")}
    ta, tw = torch.from_numpy(a_np).cuda(), torch.from_numpy(w_np).cuda()
    tc = torch.empty((n, n), device="cuda", dtype=torch.float16)
    flop = 2.0 * n ** 3
    number = 1 if n >= 2048 else 10

    def ref_call():
        torch.matmul(ta, tw.t(), out=tc)

    ref_call()
    torch.cuda.synchronize()
    ref = tc.float().cpu().numpy()

    def check(f, out_dtype) -> float:
        c = outs[out_dtype]
        f(a, w, c)
        got = c.numpy().astype(np.float32)
        return float(np.abs(got - ref).max() / np.abs(ref).max())

    def measure(f, out_dtype, rep):
        return gpu.kiln_matmul_ms(f, (a, w, outs[out_dtype]), dev, rep, number)

    start = time.perf_counter()
    untuned = build_tensorcore(n, target, "float32")
    build_s = time.perf_counter() - start
    err = check(untuned, "float32")
    if err > 1e-2:
        raise SystemExit(f"fp16 dense {n}: kiln's tensor-core kernel differs from torch (max rel err {err:.2e})")
    results = {}
    for point in TC_CANDIDATES:
        for out_dtype in ("float32",):
            try:
                f = build_tensorcore(n, target, out_dtype, tc_config(point))
                e = check(f, out_dtype)
                if e > (1e-2 if out_dtype == "float32" else 5e-2):
                    print(f"  candidate {point} acc {out_dtype}: wrong result (rel err {e:.1e}), skipped")
                    continue
                ms = measure(f, out_dtype, max(3, repeat // 2))
            except Exception as ex:  # noqa: BLE001 - a point the device rejects (shared memory, registers)
                print(f"  candidate {point} acc {out_dtype}: {type(ex).__name__}: {str(ex).splitlines()[0][:120]}")
                continue
            print(f"  candidate {point} acc {out_dtype}: {flop / ms / 1e9:.1f} TFLOP/s")
            results[(point, out_dtype)] = ms
    t_ref = gpu.time_torch(torch, ref_call, repeat, number)
    t_untuned = measure(untuned, "float32", repeat)

    def tf(ms):
        return flop / ms / 1e9

    print(f"matmul fp16 {n}^3 on tensor cores (16x16x16 tiles; build {build_s:.1f} s; max rel err {err:.1e})")
    print(f"  {'cuBLAS (torch fp16)':30s} {t_ref:9.3f} ms  {tf(t_ref):7.1f} TFLOP/s")
    print(f"  {'kiln untuned (fp32 acc)':30s} {t_untuned:9.3f} ms  {tf(t_untuned):7.1f} TFLOP/s  "
          f"ratio {t_ref / t_untuned:.2f}x")
    if not results:
        return
    ranked = [pt for (pt, _), _ in sorted(results.items(), key=lambda kv: kv[1])]
    for acc in ("float32", "float16"):  # the best points, with float32 and with float16 accumulation
        timed = {}
        for point in ranked[:1] if acc == "float32" else ranked[:3]:
            f = build_tensorcore(n, target, acc, tc_config(point))
            e = check(f, acc)
            if e > (1e-2 if acc == "float32" else 5e-2):
                print(f"  point {point} with {acc} accumulation: wrong result (rel err {e:.1e})")
                continue
            timed[point] = measure(f, acc, repeat)
        if not timed:
            continue
        point, best = min(timed.items(), key=lambda kv: kv[1])
        print(f"  {'kiln tuned (' + acc[5:] + '-bit acc)':30s} {best:9.3f} ms  {tf(best):7.1f} TFLOP/s  "
              f"ratio {t_ref / best:.2f}x  (warps {point[0]}x{point[1]}, tiles {point[2]}x{point[3]}, "
              f"chunk {point[4]}, shared stages {max(1, point[5])}, {'mma.sync' if point[6] else 'wmma'}, "
              f"raster {point[7]})")


def bench_wgmma(n: int, dev, repeat: int, torch, gpu) -> None:
    """fp16 n^3 as relay takes it on Hopper: ``topi.gpu.dense`` for ``cuda -arch=sm_90a`` (the wgmma
    product of topi.cuda.wgmma.strategy_config), against torch's float16 ``a @ w.T`` (cuBLAS)."""
    import importlib

    gdense = importlib.import_module("kiln.topi.gpu.dense")
    if dev.compute_version != "9.0":
        print(f"wgmma: needs compute capability 9.0 (sm_90a); this GPU is {dev.compute_version}")
        return
    target = tvm.target.Target("cuda -arch=sm_90a -max_shared_memory_per_block=232448", host="llvm")
    rng = np.random.default_rng(0)
    a_np = rng.uniform(-1, 1, (n, n)).astype(np.float16)
    w_np = rng.uniform(-1, 1, (n, n)).astype(np.float16)
    a, w = tvm.nd.array(a_np, dev), tvm.nd.array(w_np, dev)
    c = tvm.nd.array(np.full((n, n), np.nan, np.float32), dev)  # every element must be written
    ta, tw = torch.from_numpy(a_np).cuda(), torch.from_numpy(w_np).cuda()
    tc = torch.empty((n, n), device="cuda", dtype=torch.float16)
    ref = (ta.float() @ tw.float().t()).cpu().numpy()
    with target:
        pa = te.placeholder((n, n), "float16", name="A")
        pw = te.placeholder((n, n), "float16", name="W")
        out = gdense.dense(pa, pw, None, "float32")
        s = gdense.schedule_dense([out])
        f = tvm.build(s, [pa, pw, out], target=target, name="dense_wgmma")
    conf = out.op.attrs.get("wgmma_config")
    f(a, w, c)
    err = float(np.abs(c.numpy() - ref).max() / np.abs(ref).max())
    t_ref = gpu.time_torch(torch, lambda: torch.matmul(ta, tw.t(), out=tc), repeat, 5)
    ms = gpu.kiln_matmul_ms(f, (a, w, c), dev, repeat, 5)
    flop = 2.0 * n ** 3
    hgmma = sibling.load("cuda_wgmma.py").sass_hgmma(f)
    print(f"matmul fp16 {n}^3 on wgmma (relay's sm_90a strategy {conf}; max rel err {err:.1e}"
          f"{'' if err < 1e-3 else ' WRONG'}; {hgmma})")
    print(f"  {'cuBLAS (torch fp16)':30s} {t_ref:9.3f} ms  {flop / t_ref / 1e9:7.1f} TFLOP/s")
    print(f"  {'kiln wgmma':30s} {ms:9.3f} ms  {flop / ms / 1e9:7.1f} TFLOP/s  ratio {t_ref / ms:.2f}x")


# (M, N, K): BERT-base at 128 tokens (QKV / out, FFN up, FFN down), GPT-2 small at 64 (fused QKV, FFN
# down), ViT-B/16 at 197 (QKV / out, FFN up, FFN down)
TRANSFORMER_SHAPES = [(128, 768, 768), (128, 3072, 768), (128, 768, 3072), (64, 2304, 768), (64, 768, 3072),
                      (197, 768, 768), (197, 3072, 768), (197, 768, 3072)]
# tensor-core candidates (block_row_warps, block_col_warps, warp_row_tiles, warp_col_tiles, chunk, stages, mma)
TRANSFORMER_TC = [(2, 2, 1, 1, 4, 3, 1), (1, 2, 2, 2, 4, 3, 0), (2, 2, 2, 2, 4, 2, 0), (2, 2, 2, 2, 4, 2, 1),
                  (1, 4, 2, 1, 4, 3, 0), (2, 2, 1, 2, 4, 3, 0), (2, 2, 1, 1, 2, 4, 0), (2, 4, 1, 1, 4, 3, 0)]
# float32 candidates (rows per thread, threads y, threads x, columns per thread, k step, split-K slices)
TRANSFORMER_FP32 = [(4, 8, 16, 4, 32, 1), (4, 16, 8, 4, 32, 1), (2, 16, 16, 4, 32, 1), (4, 16, 8, 4, 32, 2),
                    (4, 16, 8, 4, 32, 4), (4, 8, 16, 4, 32, 4)]
# and the untuned tiles with the reduction split in 2 and 4 (knob split_k)
TRANSFORMER_SPLITS = (2, 4)


def graph_ms(torch, launch, repeat: int = 5, calls: int = 20) -> float:
    """ms per call of kiln's ``launch(i)``: ``calls`` of them recorded as one CUDA graph, replayed."""
    from kiln.runtime import cuda_graphs

    replay, why = cuda_graphs.record(lambda: [launch(i) for i in range(calls)], 0)
    if replay is None:
        raise RuntimeError(why)
    replay()
    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / calls)
    return sorted(times)[len(times) // 2]


def torch_graph_ms(torch, fn, repeat: int = 5, calls: int = 20) -> float:
    fn(0)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(calls):
            fn(i)
    graph.replay()
    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / calls)
    return sorted(times)[len(times) // 2]


def bench_transformer(target, dev, torch) -> None:
    import importlib

    from kiln.topi.cuda import dense_tensorcore, schedule_dense_tensorcore

    gdense = importlib.import_module("kiln.topi.gpu.dense")
    rng = np.random.default_rng(0)
    for m, n, k in TRANSFORMER_SHAPES:
        flop = 2.0 * m * n * k
        for dtype in ("float16", "float32"):
            a_np = rng.uniform(-1, 1, (m, k)).astype(dtype)
            w_np = rng.uniform(-1, 1, (n, k)).astype(dtype)
            copies = max(2, -(-80 * 2 ** 20 // w_np.nbytes))  # together beyond the L2 cache
            calls = max(20, copies)
            ta = torch.from_numpy(a_np).cuda()
            tws = [torch.from_numpy(w_np).cuda() for _ in range(copies)]
            tc = torch.empty((m, n), device="cuda", dtype=ta.dtype)
            ref_ms = torch_graph_ms(torch, lambda i: torch.matmul(ta, tws[i % copies].t(), out=tc), calls=calls)
            ref = tc.float().cpu().numpy()
            del tws
            a, w = tvm.nd.array(a_np, dev), tvm.nd.array(w_np, dev)
            ws = [w] + [tvm.nd.array(w_np, dev) for _ in range(copies - 1)]
            c = tvm.nd.empty((m, n), "float32", dev)
            if dtype == "float16":
                points = [None] + [{"block_row_warps": p[0], "block_col_warps": p[1], "warp_row_tiles": p[2],
                                    "warp_col_tiles": p[3], "chunk": p[4], "offset": 8, "vec": 8,
                                    "double_buffer": p[5], "mma": p[6], "raster": 1} for p in TRANSFORMER_TC]
            else:
                points = [None] + [{"split_k": sp} for sp in TRANSFORMER_SPLITS] + [
                    {"tile_y": [-1, 1, p[1], p[0]], "tile_x": [-1, 1, p[2], p[3]], "tile_k": [-1, p[4]], "vec": 4,
                     "split_k": p[5]} for p in TRANSFORMER_FP32]
            line = []
            for cfg in points:
                name = "default" if cfg is None else (
                    "x".join(str(cfg[key]) for key in ("block_row_warps", "block_col_warps", "warp_row_tiles",
                                                        "warp_col_tiles", "chunk", "double_buffer", "mma"))
                    if dtype == "float16" else f"default/split{cfg['split_k']}" if "tile_y" not in cfg else
                    f"{cfg['tile_y'][3]}x{cfg['tile_x'][3]}/{cfg['tile_y'][2]}x{cfg['tile_x'][2]}/k{cfg['tile_k'][1]}"
                    f"/split{cfg['split_k']}")
                try:
                    with target:
                        pa = te.placeholder((m, k), dtype, name="A")
                        pw = te.placeholder((n, k), dtype, name="W")
                        if dtype == "float16":
                            out = dense_tensorcore(pa, pw, out_dtype="float32", cfg=cfg)
                            s = schedule_dense_tensorcore([out])
                        else:
                            out = gdense.dense(pa, pw, None, "float32", cfg=cfg)
                            s = gdense.schedule_dense([out], cfg=cfg)
                        f = tvm.build(s, [pa, pw, out], target=target, name="dense")
                    f(a, w, c)
                    err = float(np.abs(c.numpy() - ref).max() / np.abs(ref).max())
                    if err > (1e-2 if dtype == "float16" else 1e-4):
                        line.append(f"{name}: WRONG ({err:.1e})")
                        continue
                    ms = graph_ms(torch, lambda i: f(a, ws[i % copies], c), calls=calls)
                    line.append(f"{name} {ms * 1e3:.1f} us ({ref_ms / ms:.2f}x)")
                except Exception as ex:  # noqa: BLE001 - a point the shape or the device rejects
                    line.append(f"{name}: {type(ex).__name__}: {str(ex).splitlines()[0][:60]}")
            del ws
            print(f"{dtype} {m}x{n}x{k}: torch {ref_ms * 1e3:.1f} us ({flop / ref_ms / 1e9:.0f} TFLOP/s) | "
                  + " | ".join(line), flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=4096, help="matmul N (M = N = K)")
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--target", default="cuda", help='kiln target, e.g. "cuda -arch=sm_90"')
    p.add_argument("--skip", choices=["fp32", "fp16", "wgmma"], action="append", default=[])
    p.add_argument("--transformer", action="store_true", help="the transformer products only (module doc)")
    p.add_argument("--tc-shared", type=int, default=232448,
                   help="shared bytes per block the tensor-core kernels may use (H100: 232448; 48 KiB static)")
    args = p.parse_args()
    gpu = sibling.load("opencl.py")  # its measuring helpers
    dev, torch = gpu.cuda_device_and_torch("bench/cuda_matmul.py")
    target = tvm.target.Target(args.target, host="llvm")
    print(f"device: {dev.device_name} (sm_{dev.compute_version.replace('.', '')})  |  "
          f"target: {target}  |  reference: torch {torch.__version__} (cuBLAS)")
    if args.transformer:
        return bench_transformer(target, dev, torch)
    if "wgmma" not in args.skip:  # Hopper's warpgroup tensor cores, where the GPU has them
        bench_wgmma(args.size, dev, args.repeat, torch, gpu)
    if "fp16" not in args.skip:
        tc_target = tvm.target.Target(f"{args.target} -max_shared_memory_per_block={args.tc_shared}", host="llvm")
        bench_tensorcore(args.size, tc_target, dev, args.repeat, torch, gpu)
    if "fp32" not in args.skip:
        gpu.bench_matmul(args.size, target, dev, args.repeat, torch)


if __name__ == "__main__":
    main()
