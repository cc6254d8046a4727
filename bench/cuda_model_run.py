"""Build one of bench/cuda_e2e.py's models for CUDA and run it a few times: a program for
``ncu`` (Nsight Compute) to time every kernel of a model on the GPU.

    KILN_CUDA_GRAPHS=0 ncu --clock-control none --csv --metrics gpu__time_duration.sum \\
        python bench/cuda_model_run.py resnet18 float16

Runs kernel by kernel (KILN_CUDA_GRAPHS=0 above), so each launch is one kernel in the report.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import sibling  # noqa: E402

import kiln as tvm  # noqa: E402
from kiln.contrib import graph_executor  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model", choices=("resnet50", "mobilenet_v2", "resnet18"))
    p.add_argument("dtype", choices=("float32", "float16"))
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--target", default="cuda -arch=sm_90")
    args = p.parse_args()
    e2e = sibling.load("cuda_e2e.py")
    model, inputs = e2e.onnx_model(args.model)
    lib = e2e.build(model, tvm.target.Target(args.target, host="llvm"), args.dtype)
    g = graph_executor.GraphModule(lib["default"](tvm.cuda(0)))
    g.set_input(**inputs)
    for _ in range(args.runs):
        g.run()
    g.get_output(0).numpy()


if __name__ == "__main__":
    main()
