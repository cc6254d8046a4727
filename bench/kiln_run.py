"""kiln_run (the C graph executor, no Python) against the Python graph executor on one tvmc package:
ONNX ResNet-18 (224x224, batch 1, random weights), `tvmc compile --target llvm`, both on this machine.

    python bench/kiln_run.py [--image 224] [--rounds 5] [--threads 0] [--target "dnnl, llvm"] [--keep DIR]

The two run the same kernels from the same mod.so; what differs is everything around them (the
Python executor calls each kernel through ctypes, kiln_run directly from C). They run
interleaved, `--rounds` times: one kiln_run process doing 5 runs (the first, which also starts
the kernels' thread pool, is dropped), then 4 runs of the Python executor in this process (after
one untimed run). `--target "dnnl, llvm"` offloads what oneDNN runs (docs/byoc.md); kiln_run then
runs those subgraphs through libkiln_dnnl.so and the Python executor through the same shim via
ctypes. Both outputs are checked against onnxruntime first (MISMATCH, exit status 1).
Prints the medians of the per-run times and their ratio.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "relay"))

from onnx_models import resnet18, run_ort  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--image", type=int, default=224)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0, help="KILN_NUM_THREADS for both (0: one per core)")
    ap.add_argument("--target", default="llvm", help='tvmc target, e.g. "dnnl, llvm" (default llvm)')
    ap.add_argument("--keep", help="work in this directory and keep it")
    args = ap.parse_args()
    os.environ["KILN_NUM_THREADS"] = str(args.threads)
    work = Path(args.keep or tempfile.mkdtemp(prefix="bench-kiln-run-"))
    work.mkdir(parents=True, exist_ok=True)

    import onnx
    import kiln as tvm
    from kiln.contrib import graph_executor
    from kiln.driver import tvmc

    build = work / "runtime"
    subprocess.run(["make", "-s", "-j2", "-C", str(ROOT / "src" / "runtime"), f"OUT={build}"], check=True)
    model, inputs = resnet18(image=args.image)
    onnx.save(model, work / "resnet18.onnx")
    package = work / "resnet18.tar"
    tvmc.compile(tvmc.load(str(work / "resnet18.onnx")), target=args.target, package_path=str(package))
    np.savez(work / "in.npz", **inputs)
    want = run_ort(model, inputs)[0]
    scale = float(np.abs(want).max())

    with tarfile.open(package) as tar:
        tar.extractall(work / "extract", filter="data")
    m = graph_executor.create(open(work / "extract" / "mod.json").read(),
                              tvm.runtime.load_module(str(work / "extract" / "mod.so")), tvm.cpu())
    m.load_params(open(work / "extract" / "mod.params", "rb").read())
    m.set_input("data", inputs["data"])
    m.run()
    subprocess.run([str(build / "kiln_run"), "--package", str(package), "--input", str(work / "in.npz"), "--output",
                    str(work / "out.npz")], check=True)
    for name, got in [("Python executor", m.get_output(0).numpy()), ("kiln_run", np.load(work / "out.npz")["output_0"])]:
        if not np.allclose(got, want, rtol=1e-4, atol=1e-4 * scale):
            print(f"MISMATCH: {name} differs from onnxruntime by {np.abs(got - want).max():.3g}")
            return 1

    c_ms, py_ms = time_interleaved([str(build / "kiln_run"), "--package", str(package), "--input",
                                    str(work / "in.npz")], m.run, args.rounds)
    print(f"ResNet-18 {args.image}x{args.image}, target '{args.target}', threads={args.threads or os.cpu_count()}, "
          f"load average {os.getloadavg()[0]:.1f}")
    print_medians(c_ms, py_ms)
    return 0


def time_interleaved(kiln_run: list[str], run_py, rounds: int) -> tuple[list[float], list[float]]:
    """Per-run ms of ``kiln_run`` (one process a round doing 5 runs, the first dropped) and of
    ``run_py`` (4 calls a round, after the process), ``rounds`` rounds taking turns."""
    c_ms, py_ms = [], []
    for _ in range(rounds):
        out = subprocess.run(kiln_run + ["--dump-time", "--repeat", "5"], capture_output=True, text=True,
                             check=True).stdout
        c_ms += [float(v) for v in re.findall(r"^run [2-5]: ([\d.]+) ms", out, re.M)]
        for _ in range(4):
            start = time.perf_counter()
            run_py()
            py_ms.append((time.perf_counter() - start) * 1e3)
    return c_ms, py_ms


def print_medians(c_ms: list[float], py_ms: list[float]) -> None:
    c, py = statistics.median(c_ms), statistics.median(py_ms)
    print(f"kiln_run (C graph executor): median {c:.2f} ms over {len(c_ms)} runs")
    print(f"Python graph executor:       median {py:.2f} ms over {len(py_ms)} runs")
    print(f"ratio kiln_run / Python: {c / py:.3f}")


if __name__ == "__main__":
    sys.exit(main())
