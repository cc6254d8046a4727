"""Load another bench script as a module, by its path: the CUDA benches reuse bench/opencl.py's
measuring code (and cuda_e2e.py bench/cuda_conv.py's old defaults). A unique module name keeps
it apart from any package of the script's plain name."""

from __future__ import annotations

import importlib.util
from pathlib import Path


def load(filename: str):
    """bench/<filename> as a module named kiln_bench_<stem>."""
    path = Path(__file__).with_name(filename)
    spec = importlib.util.spec_from_file_location(f"kiln_bench_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
