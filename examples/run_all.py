"""The main job (`make demo`): build the documents' kernels and run them, locally and through RPC."""

import runpy
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent
EXAMPLES = ["onnx_resnet18_rpc.py", "cross_compilation_and_rpc.py", "matmul_schedule.py"]

if __name__ == "__main__":
    for name in EXAMPLES:
        print(f"== {name}")
        start = time.perf_counter()
        runpy.run_path(str(HERE / name), run_name="__main__")
        print(f"== {name}: ok in {time.perf_counter() - start:.1f} s\n")
    sys.exit(0)
