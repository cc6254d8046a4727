"""fp32 matmul on an OpenCL device: kiln's hand-written shared-memory tiled schedule against
cuBLAS (torch, TF32 off) when torch sees a CUDA GPU, measured in the same run.

Each block computes a bt x bt tile of C with th x th threads, each thread a (bt/th)^2 register
tile accumulated in private memory (cache_write "local"); A and B tiles of depth kt go through
shared memory, fetched cooperatively as float4 by all the block's threads (cache_read "shared" +
compute_at + fuse/split/bind). Times are medians of device-timed repeats (time_evaluator).
On the lent H100 through NVIDIA's OpenCL (OCL_ICD_VENDORS, see docs/opencl.md):
    python bench/opencl_matmul.py --size 4096
On PoCL (a CPU device) it checks correctness only; use a small --size.
"""

import argparse

import numpy as np

import kiln as tvm
from kiln import te


def schedule(n: int, bt: int = 128, th: int = 16, kt: int = 8):
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    AA, BB = s.cache_read(A, "shared", [C]), s.cache_read(B, "shared", [C])
    CL = s.cache_write(C, "local")
    tx, ty = te.thread_axis("threadIdx.x"), te.thread_axis("threadIdx.y")
    i, j = s[C].op.axis
    io, ii = s[C].split(i, factor=bt)
    jo, ji = s[C].split(j, factor=bt)
    tyo, ii = s[C].split(ii, nparts=th)
    txo, ji = s[C].split(ji, nparts=th)
    s[C].reorder(io, jo, tyo, txo, ii, ji)
    s[C].bind(io, te.thread_axis("blockIdx.y"))
    s[C].bind(jo, te.thread_axis("blockIdx.x"))
    s[C].bind(tyo, ty)
    s[C].bind(txo, tx)
    s[C].vectorize(ji)
    s[CL].compute_at(s[C], txo)
    ko, ki = s[CL].split(CL.op.reduce_axis[0], factor=kt)
    ci, cj = s[CL].op.axis
    s[CL].reorder(ko, ki, ci, cj)
    s[CL].unroll(ki)
    s[CL].unroll(ci)
    s[CL].vectorize(cj)
    for X in (AA, BB):
        s[X].compute_at(s[CL], ko)
        fused = s[X].fuse(*s[X].op.axis)
        fused, v = s[X].split(fused, factor=4)
        _, fi = s[X].split(fused, factor=th * th)
        t1, t2 = s[X].split(fi, factor=th)
        s[X].bind(t1, ty)
        s[X].bind(t2, tx)
        s[X].vectorize(v)
    return s, [A, B, C]


def cublas_seconds(a, b, repeat: int):
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    torch.backends.cuda.matmul.allow_tf32 = False
    x, y = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
    for _ in range(3):
        x @ y
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(10):
            x @ y
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 10 / 1e3)
    return float(np.median(times))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=4096)
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args()
    n = args.size
    s, tensors = schedule(n)
    f = tvm.build(s, tensors, target="opencl", name="matmul")
    dev = tvm.cl(0)
    rng = np.random.default_rng(0)
    a, b = rng.random((n, n), dtype="float32"), rng.random((n, n), dtype="float32")
    ad, bd, cd = tvm.nd.array(a, dev), tvm.nd.array(b, dev), tvm.nd.empty((n, n), "float32", dev)
    f(ad, bd, cd)
    np.testing.assert_allclose(cd.numpy(), a @ b, rtol=1e-3, atol=1e-3 * n ** 0.5)
    t = float(np.median(f.time_evaluator(f.entry_name, dev, number=10, repeat=args.repeat)(ad, bd, cd).results))
    print(f"device: {dev.device_name}")
    print(f"kiln  fp32 matmul {n}^3: {t * 1e3:.3f} ms ({2 * n ** 3 / t / 1e12:.2f} TFLOP/s)")
    ref = cublas_seconds(a, b, args.repeat)
    if ref is None:
        print("cuBLAS: no torch with a CUDA GPU here; correctness only")
        return
    print(f"cuBLAS fp32 (TF32 off): {ref * 1e3:.3f} ms; kiln/cuBLAS speed ratio {ref / t:.3f}")


if __name__ == "__main__":
    main()
