"""The cuBLAS executor of JSON runtime modules (json_runtime.py): dense and batch_matmul.

cuBLAS comes from NVIDIA's wheel (``pip install nvidia-cublas``) or the system; it is loaded
with ctypes. Tensors are CUDA NDArrays, row-major; cuBLAS is column-major, so a row-major
``out = x @ w.T`` is computed as the column-major ``out.T = w @ x.T`` (no copies). Calls go on
the legacy default stream, the one kiln's CUDA runtime launches on, so they are ordered with
kiln's kernels. Not run on this machine (no GPU): see tests/relay/byoc/test_cublas.py.
"""

from __future__ import annotations

import ctypes
import glob
import os
import sys

from ..errors import KilnError

_OP_N, _OP_T = 0, 1
_lib = None


def cublas_library():
    global _lib
    if _lib is not None:
        return _lib
    candidates = []
    for base in sys.path:
        candidates += sorted(glob.glob(os.path.join(base, "nvidia", "**", "libcublas.so*"), recursive=True))
    candidates += ["libcublas.so", "libcublas.so.13", "libcublas.so.12"]
    for name in candidates:
        if "Lt" in os.path.basename(name):
            continue
        try:
            _lib = ctypes.CDLL(name)
            break
        except OSError:
            continue
    if _lib is None:
        raise KilnError("cuBLAS is not installed: pip install nvidia-cublas (or the CUDA toolkit's libcublas)")
    vp, i32, f32p = ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_float)
    _lib.cublasCreate_v2.argtypes = [ctypes.POINTER(vp)]
    _lib.cublasSgemm_v2.argtypes = [vp, i32, i32, i32, i32, i32, f32p, vp, i32, vp, i32, f32p, vp, i32]
    _lib.cublasSgemmStridedBatched.argtypes = [vp, i32, i32, i32, i32, i32, f32p, vp, i32, ctypes.c_longlong,
                                               vp, i32, ctypes.c_longlong, f32p, vp, i32, ctypes.c_longlong, i32]
    return _lib


class CuBLASExecutor:
    def __init__(self, graph: dict):
        self.lib = cublas_library()
        self.graph = graph
        self.handle = ctypes.c_void_p()
        status = self.lib.cublasCreate_v2(ctypes.byref(self.handle))
        if status:
            raise KilnError(f"cublasCreate failed (status {status}): is a CUDA device present?")
        self.n_in = len(graph["inputs"]) + len(graph["constants"])
        if len(graph["nodes"]) != len(graph["outputs"]):
            raise KilnError(f"{graph['symbol']}: the cuBLAS runtime runs subgraphs whose every node is an output")
        self.one, self.zero = ctypes.c_float(1.0), ctypes.c_float(0.0)

    def _shape(self, entry: int) -> list:
        g = self.graph
        if entry < len(g["inputs"]):
            return g["inputs"][entry]["shape"]
        return g["constants"][entry - len(g["inputs"])]["shape"]

    def bind(self, arrays):
        from .json_graph import address as _address

        g = self.graph
        ptr = {i: _address(a) for i, a in enumerate(arrays[:self.n_in])}
        for e, a in zip(g["outputs"], arrays[self.n_in:]):
            ptr[e] = _address(a)
        calls = []
        for k, node in enumerate(g["nodes"]):
            a, b = node["inputs"]
            if any(i >= self.n_in for i in (a, b)):
                raise KilnError(f"{g['symbol']}: the cuBLAS runtime reads only the subgraph's inputs")
            out = ptr[self.n_in + k]
            if node["kind"] == "dense":
                (m, kk), n = self._shape(a), self._shape(b)[0]
                calls.append(lambda m=m, n=n, kk=kk, x=ptr[a], w=ptr[b], out=out: self.lib.cublasSgemm_v2(
                    self.handle, _OP_T, _OP_N, n, m, kk, ctypes.byref(self.one), w, kk, x, kk,
                    ctypes.byref(self.zero), out, n))
            else:
                batch, m, kk = self._shape(a)
                tb = node["attrs"]["transpose_b"]
                n = self._shape(b)[1] if tb else self._shape(b)[2]
                calls.append(lambda batch=batch, m=m, n=n, kk=kk, x=ptr[a], y=ptr[b], out=out, tb=tb:
                             self.lib.cublasSgemmStridedBatched(
                                 self.handle, _OP_T if tb else _OP_N, _OP_N, n, m, kk, ctypes.byref(self.one),
                                 y, kk if tb else n, n * kk, x, kk, m * kk, ctypes.byref(self.zero),
                                 out, n, m * n, batch))

        def run():
            for call in calls:
                status = call()
                if status:
                    raise KilnError(f"cuBLAS failed with status {status}")
        return run
