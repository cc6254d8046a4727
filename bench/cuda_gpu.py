"""CUDA: fp32 matmul and ResNet-18 batch 1, kiln against torch measured in the same run.

- matmul N x N x N (default 4096): kiln's untuned default GPU dense schedule (topi.gpu) and kiln
  "tuned" (the best of the hand-picked points of its tuning space in bench/opencl.py), against
  cuBLAS through torch with TF32 off.
- ResNet-18 batch 1 (224 x 224, the ONNX model of tests/relay/onnx_models.py) built by
  relay.build for "cuda", against torch eager (the same architecture, cuDNN, TF32 off); kiln's
  output is checked against onnxruntime's.

Both sides are timed with CUDA events (kiln: time_evaluator on tvm.cuda(0); torch:
torch.cuda.Event); medians of ``--repeat`` repeats. The measuring code is bench/opencl.py's,
run with the CUDA target and device.

    python bench/cuda_gpu.py                 # on an NVIDIA GPU with torch
    python bench/cuda_gpu.py --size 1024 --skip resnet

Not named cuda.py: a script's folder comes first on sys.path, and a bench/cuda.py would stand in
for cuda-python's ``cuda`` package (tvm.cuda(0) then finds no driver).
"""

from __future__ import annotations

import argparse

import kiln as tvm

import sibling  # bench/sibling.py: this script's folder is on sys.path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=4096, help="matmul N")
    p.add_argument("--image", type=int, default=224, help="ResNet-18 input size")
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--target", default="cuda", help='kiln target, e.g. "cuda -arch=sm_90"')
    p.add_argument("--skip", choices=["matmul", "resnet"], action="append", default=[])
    args = p.parse_args()
    gpu = sibling.load("opencl.py")  # its measuring helpers
    dev, torch = gpu.cuda_device_and_torch("bench/cuda_gpu.py")
    target = tvm.target.Target(args.target, host="llvm")
    print(f"device: {dev.device_name} (sm_{dev.compute_version.replace('.', '')})  |  "
          f"target: {target}  |  reference: torch {torch.__version__}, TF32 off")
    if "matmul" not in args.skip:
        gpu.bench_matmul(args.size, target, dev, args.repeat, torch)
    if "resnet" not in args.skip:
        gpu.bench_resnet18(args.image, target, dev, args.repeat, torch)


if __name__ == "__main__":
    main()
