"""fp32 1024³ matmul: kiln's hand-written schedule against numpy, measured in the same run.

Prints kiln GFLOPS, numpy GFLOPS and their ratio (medians over repeats). Goal: ratio >= 0.6
(>= 0.8 with AVX2 code). Both sides write into a preallocated output (``np.matmul(a, b, out=c)``).
The register tile (``--mr`` rows x ``--nr`` columns) defaults to what the target's vector
registers hold (kiln.topi.cpu): 4x64 with AVX-512's 32 registers, 4x16 with AVX2's 16.
``--target`` asks for other code, e.g. AVX2 on an AVX-512 host:
    python bench/matmul.py [--size 1024] [--repeat 15] [--target "llvm -mcpu=znver3"]
numpy keeps its own kernels (AVX-512 on an AVX-512 host); ``OPENBLAS_CORETYPE=Haswell`` in the
environment makes it run AVX2 code too, which compares like with like.
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

from kiln.topi.cpu import facts, tile_fits  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--repeat", type=int, default=15)
    p.add_argument("--target", default="llvm", help="kiln's target (default: this machine)")
    p.add_argument("--mr", type=int, default=None, help="rows of the register tile (default: from the target)")
    p.add_argument("--nr", type=int, default=None, help="columns of the register tile (default: from the target)")
    p.add_argument("--mblocks", type=int, default=16)
    args = p.parse_args()
    n = args.size
    target = tvm.target.Target(args.target)
    mr, nr = register_tile(target, n)
    mr, nr = args.mr or mr, args.nr or nr
    flops = 2.0 * n * n * n
    a = np.random.rand(n, n).astype("float32")
    b = np.random.rand(n, n).astype("float32")
    c = np.empty((n, n), "float32")

    with target:
        s, tensors = matmul_schedule(n, n, n, mr=mr, nr=nr, mblocks=args.mblocks)
        f = tvm.build(s, tensors, target=target, name="matmul")
    dev = tvm.cpu(0)
    ta, tb, tc = tvm.nd.array(a, dev), tvm.nd.array(b, dev), tvm.nd.empty((n, n), "float32", dev)
    f(ta, tb, tc)
    np.testing.assert_allclose(tc.numpy(), np.matmul(a, b, out=c), rtol=1e-3)

    times = interleaved({"kiln": lambda: f(ta, tb, tc), "numpy": lambda: np.matmul(a, b, out=c)},
                        args.repeat, number=3)
    kg = flops / statistics.median(times["kiln"]) / 1e9
    ng = flops / statistics.median(times["numpy"]) / 1e9
    print(f"matmul fp32 {n}x{n}x{n} [{target} ({facts(target).cpu}), tile {mr}x{nr}]: "
          f"kiln {kg:.1f} GFLOPS | numpy {ng:.1f} GFLOPS | ratio {kg / ng:.2f}")


def register_tile(target, n: int) -> tuple[int, int]:
    """(mr, nr): the most FMAs per loaded value among tiles that fit the vector registers and
    divide n (the schedule packs B in whole panels of nr)."""
    f = facts(target)
    lanes, regs = f.lanes("float32"), f.vector_registers
    best = (0.0, 1, lanes)
    for vectors in (1, 2, 3, 4):
        for mr in range(1, 9):
            nr = vectors * lanes
            if n % nr or n % mr or not tile_fits(mr, vectors, regs):
                continue
            best = max(best, (mr * vectors / (mr + vectors), mr, nr))
    return best[1], best[2]


if __name__ == "__main__":
    main()
