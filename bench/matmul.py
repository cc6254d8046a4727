"""fp32 1024³ matmul: kiln's hand-written schedule against numpy, measured in the same run.

Prints kiln GFLOPS, numpy GFLOPS and their ratio (medians over repeats). Goal: ratio >= 0.6.
    python bench/matmul.py [--size 1024] [--repeat 15]
"""

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

import kiln as tvm  # noqa: E402
from matmul_schedule import matmul_schedule  # noqa: E402
from timing import interleaved  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--repeat", type=int, default=15)
    p.add_argument("--mr", type=int, default=4)
    p.add_argument("--nr", type=int, default=64)
    p.add_argument("--mblocks", type=int, default=16)
    args = p.parse_args()
    n = args.size
    flops = 2.0 * n * n * n
    a = np.random.rand(n, n).astype("float32")
    b = np.random.rand(n, n).astype("float32")

    s, tensors = matmul_schedule(n, n, n, mr=args.mr, nr=args.nr, mblocks=args.mblocks)
    f = tvm.build(s, tensors, target="llvm", name="matmul")
    dev = tvm.cpu(0)
    ta, tb, tc = tvm.nd.array(a, dev), tvm.nd.array(b, dev), tvm.nd.empty((n, n), "float32", dev)
    f(ta, tb, tc)
    np.testing.assert_allclose(tc.numpy(), a @ b, rtol=1e-3)

    times = interleaved({"kiln": lambda: f(ta, tb, tc), "numpy": lambda: a @ b}, args.repeat, number=3)
    kg = flops / statistics.median(times["kiln"]) / 1e9
    ng = flops / statistics.median(times["numpy"]) / 1e9
    print(f"matmul fp32 {n}x{n}x{n}: kiln {kg:.1f} GFLOPS | numpy {ng:.1f} GFLOPS | ratio {kg / ng:.2f}")


if __name__ == "__main__":
    main()
