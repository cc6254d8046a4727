"""Warm build time of add_one and of the scheduled matmul (median of repeats).

    python bench/build.py
"""

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

import kiln as tvm  # noqa: E402
from kiln import te  # noqa: E402
from matmul_schedule import matmul_schedule  # noqa: E402


def add_one():
    n = tvm.runtime.convert(1024)
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    return te.create_schedule(B.op), [A, B]


def timed(make, name, repeat=15):
    tvm.build(*make(), target="llvm", name=name)  # warm: LLVM initialised, modules imported
    times = []
    for _ in range(repeat):
        s, args = make()
        start = time.perf_counter()
        tvm.build(s, args, target="llvm", name=name)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


if __name__ == "__main__":
    t1 = timed(add_one, "add_one")
    t2 = timed(lambda: matmul_schedule(1024, 1024, 1024), "matmul", repeat=5)
    print(f"warm build: add_one {t1 * 1e3:.1f} ms (goal <= 50 ms) | scheduled matmul {t2 * 1e3:.1f} ms")
