"""The main job (`make demo`): build the documents' kernels and run them, locally and through RPC."""

import runpy
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent
EXAMPLES = ["onnx_resnet18_rpc.py", "cross_compilation_and_rpc.py", "matmul_schedule.py", "tvmc_python_api.py"]
# Run when this machine has an OpenCL device (PoCL counts: make setup installs it as root).
OPENCL_EXAMPLES = ["opencl_rpc.py", "opencl_c_rpc.py"]


def _has_opencl() -> bool:
    try:
        import pyopencl  # noqa: F401
    except ImportError:
        return False
    import kiln as tvm
    return tvm.cl(0).exist

if __name__ == "__main__":
    names = EXAMPLES + (OPENCL_EXAMPLES if _has_opencl() else [])
    if len(names) == len(EXAMPLES):
        print(f"(skipping {', '.join(OPENCL_EXAMPLES)}: no OpenCL device; install pocl-opencl-icd and pyopencl)")
    for name in names:
        print(f"== {name}")
        start = time.perf_counter()
        runpy.run_path(str(HERE / name), run_name="__main__")
        print(f"== {name}: ok in {time.perf_counter() - start:.1f} s\n")
    sys.exit(0)
