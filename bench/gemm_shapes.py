"""Per-shape float32 GEMMs of the transformer benchmarks: kiln's x86 dense (weights pre-packed, as
relay.build stores them) against onnxruntime's MatMul (a one-node ONNX model, weight an initializer),
both on ONE thread, timed by CPU time (``time.process_time``), so that load from other jobs on the
machine costs both sides little; rounds interleave the two sides, and the ratio printed is the
median over rounds of kiln / onnxruntime (below 1: kiln faster).

    python bench/gemm_shapes.py [--rounds 7] [--target llvm] [--shapes 197x768x768,64x3072x768]
    python bench/gemm_shapes.py --also-tile-k 0   # also the kernel without K blocking (knob tile_k)
    python bench/gemm_shapes.py --also pack_a=1,prefetch=0   # also the kernel with these knobs

Shapes are M x K x N (data (M, K) @ weight (K, N)): BERT-base seq 128, GPT-2 small seq 64,
ViT-B/16 (197 tokens), Whisper-tiny encoder (1500 frames, width 384).
"""

import argparse
import importlib
import os
import statistics
import sys
import time

os.environ.setdefault("KILN_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import kiln as tvm  # noqa: E402
from kiln import te, topi  # noqa: E402

SHAPES = [
    (128, 768, 768), (128, 768, 3072), (128, 3072, 768),      # BERT-base
    (64, 768, 2304), (64, 768, 768), (64, 768, 3072), (64, 3072, 768),  # GPT-2 small
    (197, 768, 768), (197, 768, 3072), (197, 3072, 768),      # ViT-B/16
    (1500, 384, 384), (1500, 384, 1536), (1500, 1536, 384),   # Whisper-tiny encoder
]


def kiln_fn(m, k, n, a, w, target, cfg=None):
    dense = importlib.import_module("kiln.topi.x86.dense")
    conf = dense.config_for(m, n, k, cfg)
    packed = dense.prepack_weight(np.ascontiguousarray(w.T), conf["tile_n"])
    A = te.placeholder((m, k), name="data")
    W = te.placeholder(packed.shape, name="weight_packed")
    out = topi.x86.dense(A, W, units=n, cfg=cfg)
    with tvm.target.Target(target):
        s = topi.x86.schedule_dense([out])
    f = tvm.build(s, [A, W, out], target=target)
    args = [tvm.nd.array(a), tvm.nd.array(packed), tvm.nd.empty((m, n), "float32")]
    return (lambda: f(*args)), args[2]


def ort_fn(m, k, n, a, w):
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    g = helper.make_graph([helper.make_node("MatMul", ["a", "w"], ["y"])], "mm",
                          [helper.make_tensor_value_info("a", TensorProto.FLOAT, [m, k])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
                          [numpy_helper.from_array(w, "w")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    feed = {"a": a}
    return lambda: sess.run(None, feed)[0]


def cpu_seconds(fn, number):
    fn()
    start = time.process_time()
    for _ in range(number):
        fn()
    return (time.process_time() - start) / number


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--target", default="llvm")
    p.add_argument("--shapes", default="", help="comma-separated MxKxN (default: all of the models')")
    p.add_argument("--seconds", type=float, default=0.15, help="CPU time per side per round")
    p.add_argument("--also-tile-k", type=int, default=None,
                   help="also time kiln with this tile_k knob (0: no K blocking), interleaved")
    p.add_argument("--also", default=None, metavar="KNOB=V,..",
                   help="also time kiln with these knobs (e.g. pack_a=1,prefetch=0), interleaved")
    args = p.parse_args()
    if args.also is not None:
        if args.also_tile_k is not None:
            p.error("give --also or --also-tile-k, not both")
        try:
            alt_cfg = {kv.split("=")[0]: int(kv.split("=")[1]) for kv in args.also.split(",")}
        except (IndexError, ValueError):
            p.error(f"--also {args.also!r}: expected KNOB=INT[,KNOB=INT...], e.g. pack_a=1,prefetch=0")
        alt_name = args.also
    elif args.also_tile_k is not None:
        alt_cfg, alt_name = {"tile_k": args.also_tile_k}, f"tile_k={args.also_tile_k}"
    else:
        alt_cfg = alt_name = None
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")] if args.shapes else SHAPES
    rng = np.random.default_rng(0)
    print(f"one thread each, CPU time, {args.rounds} interleaved rounds, target {args.target!r}, "
          f"load average {os.getloadavg()[0]:.1f}")
    alt = alt_cfg
    print(f"{'M x K x N':>18} {'kiln GFLOPS':>12} {'ort GFLOPS':>11} {'kiln/ort':>9}"
          + ("" if alt is None else f" {f'{alt_name}/ort':>14}"))
    ratios, alt_ratios = [], []
    for m, k, n in shapes:
        a = rng.standard_normal((m, k), dtype=np.float32)
        w = rng.standard_normal((k, n), dtype=np.float32)
        kf, kout = kiln_fn(m, k, n, a, w, args.target)
        of = ort_fn(m, k, n, a, w)
        kf()
        np.testing.assert_allclose(kout.numpy(), of(), rtol=1e-3, atol=1e-3 * np.sqrt(k))
        if alt is not None:
            af, aout = kiln_fn(m, k, n, a, w, args.target, alt)
            af()
            np.testing.assert_allclose(aout.numpy(), of(), rtol=1e-3, atol=1e-3 * np.sqrt(k))
        ars = []
        number = max(2, int(args.seconds / max(cpu_seconds(of, 2), 1e-5)))
        tk, to, rs = [], [], []
        for _ in range(args.rounds):
            a_s, b_s = cpu_seconds(kf, number), cpu_seconds(of, number)
            tk.append(a_s)
            to.append(b_s)
            rs.append(a_s / b_s)
            if alt is not None:
                ars.append(cpu_seconds(af, number) / b_s)
        flops = 2.0 * m * k * n
        r = statistics.median(rs)
        ratios.append(r)
        extra = ""
        if alt is not None:
            alt_ratios.append(statistics.median(ars))
            extra = f" {alt_ratios[-1]:14.2f}"
        print(f"{f'{m} x {k} x {n}':>18} {flops / statistics.median(tk) / 1e9:12.1f} "
              f"{flops / statistics.median(to) / 1e9:11.1f} {r:9.2f}{extra}", flush=True)
    print(f"geometric mean kiln/ort: {float(np.exp(np.mean(np.log(ratios)))):.3f}"
          + ("" if alt is None else f"; {alt_name}: {float(np.exp(np.mean(np.log(alt_ratios)))):.3f}"))


if __name__ == "__main__":
    sys.exit(main())
