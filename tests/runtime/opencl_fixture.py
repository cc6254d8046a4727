"""A GPU module written by hand (host part in C, kernels in OpenCL C) against docs/abi.md's
"GPU modules" section, for testing loaders independently of the compiler.

Functions (device_type 4, entry add_one):
  add_one(A: float32[n], B: float32[n])          B = A + 1, blocks of 64 (n need not divide)
  scale(A: float32[n], B: float32[n], alpha: float32)   B = A * alpha (a float scalar)
"""

from __future__ import annotations

import json
import subprocess

import numpy as np

from helpers import c_kernels

OPENCL_SOURCE = r"""
__kernel void add_one_kernel0(__global float* restrict B, __global const float* restrict A, int n) {
  int i = get_group_id(0) * 64 + get_local_id(0);
  if (i < n) B[i] = A[i] + 1.0f;
}
__kernel void scale_kernel0(__global float* restrict B, __global const float* restrict A,
                            float alpha, int n) {
  int i = get_global_id(0);
  if (i < n) B[i] = A[i] * alpha;
}
"""

_BUF = lambda name: {"name": name, "kind": "buffer", "dtype": "float32"}  # noqa: E731
KERNELS = [
    {"name": "add_one_kernel0", "thread_tags": ["blockIdx.x", "threadIdx.x"],
     "params": [_BUF("B"), _BUF("A"), {"name": "n", "kind": "scalar", "dtype": "int32"}]},
    {"name": "scale_kernel0", "thread_tags": ["blockIdx.x", "threadIdx.x"],
     "params": [_BUF("B"), _BUF("A"), {"name": "alpha", "kind": "scalar", "dtype": "float32"},
                {"name": "n", "kind": "scalar", "dtype": "int32"}]},
]

FUNCTIONS = [
    {"name": "add_one", "args": [c_kernels._t("A", "float32", ["n"]), c_kernels._t("B", "float32", ["n"])]},
    {"name": "scale", "args": [c_kernels._t("A", "float32", ["n"]), c_kernels._t("B", "float32", ["n"]),
                               c_kernels._s("alpha", "float32")]},
]

# What the LLVM host code of a GPU module does: read the tensors' data (cl_mem handles), work
# out the grid, call the launch hook, or fail with the documented message when none is set.
HOST_SOURCE = r"""
#include <stdint.h>
#include <string.h>
typedef union { int64_t v_int64; double v_float64; void* v_handle; } KilnValue;
typedef struct { void* data; int32_t device_type, device_id; int32_t ndim; uint32_t dtype;
                 int64_t* shape; int64_t* strides; uint64_t byte_offset; } DLTensor;
typedef int32_t (*KilnDeviceLaunch)(void*, int32_t, const KilnValue*, const int32_t*, int32_t,
                                    const int64_t*, int64_t);
KilnDeviceLaunch __kiln_device_launch;
void* __kiln_device_ctx;
extern char __kiln_last_error[512];

static int32_t launch(int32_t kernel, KilnValue* v, const int32_t* codes, int32_t n, int64_t threads) {
  if (!__kiln_device_launch) {
    strcpy(__kiln_last_error, "device code not loaded: load the module with tvm.runtime.load_module "
                              "(or build it) before calling");
    return -1;
  }
  int64_t dims[6] = {(threads + 63) / 64, 1, 1, 64, 1, 1};
  return __kiln_device_launch(__kiln_device_ctx, kernel, v, codes, n, dims, 0);
}

int32_t add_one(const KilnValue* args, const int32_t* codes, int32_t num_args) {
  DLTensor* A = args[0].v_handle; DLTensor* B = args[1].v_handle;
  KilnValue v[3]; int32_t c[3] = {3, 3, 0};
  v[0].v_handle = B->data; v[1].v_handle = A->data; v[2].v_int64 = A->shape[0];
  return launch(0, v, c, 3, A->shape[0]);
}

int32_t scale(const KilnValue* args, const int32_t* codes, int32_t num_args) {
  DLTensor* A = args[0].v_handle; DLTensor* B = args[1].v_handle;
  KilnValue v[4]; int32_t c[4] = {3, 3, 2, 0};
  v[0].v_handle = B->data; v[1].v_handle = A->data; v[2].v_float64 = args[2].v_float64;
  v[3].v_int64 = A->shape[0];
  return launch(1, v, c, 4, A->shape[0]);
}
"""


def metadata(triple: str) -> dict:
    return {"abi_version": 1, "kiln_version": "0.1.0", "target": "opencl -host=llvm",
            "triple": triple, "device_type": 4, "entry": "add_one", "functions": FUNCTIONS,
            "device_code": {"type_key": "opencl", "source": OPENCL_SOURCE, "kernels": KERNELS}}


def module(cc: str = "cc"):
    """A fresh CompiledModule of the hand-written GPU module, objects built with ``cc``."""
    from kiln.runtime.compiled import CompiledModule
    triple = subprocess.run([cc, "-dumpmachine"], check=True, capture_output=True,
                            text=True).stdout.strip()
    meta = metadata(triple)
    objects = [c_kernels.compile_object(c_kernels.symbols_source(meta), cc),
               c_kernels.compile_object(HOST_SOURCE, cc)]
    return CompiledModule(objects, json.loads(json.dumps(meta)), {"c": HOST_SOURCE}, triple, type_key="c")


# -- modules from the real compiler (tvm.build with target "opencl") ---------------------------
def built_two_kernels(host: str = "llvm"):
    """``two(A: float32[n], C: float32[n], alpha: float32)``: C = reverse(A * alpha) + 1.

    Two kernels with a workspace tensor between them (B: each block of C reads another block's
    B), a symbolic size and a float scalar: every part of the launch path."""
    import kiln as tvm
    from kiln import te
    n = te.var("n")
    alpha = te.var("alpha", dtype="float32")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * alpha, name="B")
    C = te.compute((n,), lambda i: B[n - 1 - i] + 1.0, name="C")
    s = te.create_schedule(C.op)
    for X in (B, C):
        xo, xi = s[X].split(X.op.axis[0], factor=64)
        s[X].bind(xo, te.thread_axis("blockIdx.x"))
        s[X].bind(xi, te.thread_axis("threadIdx.x"))
    return tvm.build(s, [A, C, alpha], target=tvm.target.Target("opencl", host=host), name="two")


def two_kernels_reference(a, alpha):
    return (a * np.float32(alpha))[::-1] + np.float32(1)
