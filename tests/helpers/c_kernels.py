"""Kernels written in C against docs/abi.md, for testing loaders without the compiler.

``build()`` compiles two PIC objects with a C compiler (``cc -c -fPIC``): one defines the
module symbols (``__kiln_metadata``, ``__kiln_num_threads``, ``__kiln_last_error``), the other
the kernels below. Exactly what a code generator hands to ``CompiledModule``.

Kernels (entry: add_one):
  add_one(A: float32[n], B: float32[n])                      B = A + 1
  matmul(A: float32[m,k], B: float32[k,n], C: float32[m,n])  C = A @ B
  add_fixed(A: int32[4,4], B: int32[4,4], C: int32[4,4])     C = A + B
  scale(A: float64[n], B: float64[n], alpha: float64, offset: int32)   B = A * alpha + offset
  fail(A: float32[n])          returns -1, message "fail: deliberately failed on <n> elements"
  num_threads(A: int32[1])     A[0] = __kiln_num_threads
  crash(A: float32[n])         writes through a NULL pointer (for crash-isolation tests)
  spin(A: float32[n])          never returns (for timeout tests)
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import subprocess
import tempfile


def _t(name, dtype, shape):
    return {"name": name, "kind": "tensor", "dtype": dtype, "shape": list(shape)}


def _s(name, dtype):
    return {"name": name, "kind": "scalar", "dtype": dtype}


FUNCTIONS = [
    {"name": "add_one", "args": [_t("A", "float32", ["n"]), _t("B", "float32", ["n"])]},
    {"name": "matmul", "args": [_t("A", "float32", ["m", "k"]), _t("B", "float32", ["k", "n"]),
                                _t("C", "float32", ["m", "n"])]},
    {"name": "add_fixed", "args": [_t("A", "int32", [4, 4]), _t("B", "int32", [4, 4]),
                                   _t("C", "int32", [4, 4])]},
    {"name": "scale", "args": [_t("A", "float64", ["n"]), _t("B", "float64", ["n"]),
                               _s("alpha", "float64"), _s("offset", "int32")]},
    {"name": "fail", "args": [_t("A", "float32", ["n"])]},
    {"name": "num_threads", "args": [_t("A", "int32", [1])]},
    {"name": "crash", "args": [_t("A", "float32", ["n"])]},
    {"name": "spin", "args": [_t("A", "float32", ["n"])]},
]

_PRELUDE = r"""
#include <stdint.h>
#include <stdio.h>
typedef union { int64_t v_int64; double v_float64; void* v_handle; } KilnValue;
typedef struct { int32_t device_type; int32_t device_id; } DLDevice;
typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } DLDataType;
typedef struct {
  void* data; DLDevice device; int32_t ndim; DLDataType dtype;
  int64_t* shape; int64_t* strides; uint64_t byte_offset;
} DLTensor;
#define TENSOR(i) ((DLTensor*)args[i].v_handle)
#define DATA(i, T) ((T*)((char*)TENSOR(i)->data + TENSOR(i)->byte_offset))
extern char __kiln_last_error[512];
extern int32_t __kiln_num_threads;
"""

_KERNELS = _PRELUDE + r"""
int32_t add_one(const KilnValue* args, const int32_t* codes, int32_t nargs) {
  int64_t n = TENSOR(0)->shape[0];
  float* a = DATA(0, float); float* b = DATA(1, float);
  for (int64_t i = 0; i < n; ++i) b[i] = a[i] + 1.0f;
  return 0;
}
int32_t matmul(const KilnValue* args, const int32_t* codes, int32_t nargs) {
  int64_t m = TENSOR(0)->shape[0], k = TENSOR(0)->shape[1], n = TENSOR(1)->shape[1];
  float* a = DATA(0, float); float* b = DATA(1, float); float* c = DATA(2, float);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (int64_t r = 0; r < k; ++r) acc += a[i * k + r] * b[r * n + j];
      c[i * n + j] = acc;
    }
  return 0;
}
int32_t add_fixed(const KilnValue* args, const int32_t* codes, int32_t nargs) {
  int32_t* a = DATA(0, int32_t); int32_t* b = DATA(1, int32_t); int32_t* c = DATA(2, int32_t);
  for (int i = 0; i < 16; ++i) c[i] = a[i] + b[i];
  return 0;
}
int32_t scale(const KilnValue* args, const int32_t* codes, int32_t nargs) {
  if (codes[2] != 2 || codes[3] != 0) {
    snprintf(__kiln_last_error, 512, "scale: bad type codes %d %d", codes[2], codes[3]);
    return -2;
  }
  int64_t n = TENSOR(0)->shape[0];
  double* a = DATA(0, double); double* b = DATA(1, double);
  double alpha = args[2].v_float64; int32_t offset = (int32_t)args[3].v_int64;
  for (int64_t i = 0; i < n; ++i) b[i] = a[i] * alpha + offset;
  return 0;
}
int32_t fail(const KilnValue* args, const int32_t* codes, int32_t nargs) {
  snprintf(__kiln_last_error, 512, "fail: deliberately failed on %lld elements",
           (long long)TENSOR(0)->shape[0]);
  return -1;
}
int32_t num_threads(const KilnValue* args, const int32_t* codes, int32_t nargs) {
  DATA(0, int32_t)[0] = __kiln_num_threads;
  return 0;
}
int32_t crash(const KilnValue* args, const int32_t* codes, int32_t nargs) {
  *(volatile int*)0 = 1;
  return 0;
}
int32_t spin(const KilnValue* args, const int32_t* codes, int32_t nargs) {
  volatile int forever = 1;
  while (forever) {}
  return 0;
}
"""


@dataclasses.dataclass(frozen=True)
class CKernels:
    """Objects and metadata of the C kernels, built for ``triple``."""

    objects: tuple[bytes, ...]
    metadata: dict
    triple: str
    sources: dict

    def module(self):
        """A fresh ``CompiledModule`` over these objects (links on first call)."""
        from kiln.runtime.compiled import CompiledModule
        return CompiledModule(list(self.objects), json.loads(json.dumps(self.metadata)),
                              dict(self.sources), self.triple, type_key="c")


def metadata(triple: str, functions=None) -> dict:
    return {"abi_version": 1, "kiln_version": "0.1.0", "target": f"c -mtriple={triple}",
            "triple": triple, "device_type": 1, "entry": "add_one",
            "functions": functions or FUNCTIONS, "device_code": None}


def symbols_source(meta: dict) -> str:
    """C defining the module symbols, with ``meta`` as the __kiln_metadata string."""
    text = json.dumps(meta).replace("\\", "\\\\").replace('"', '\\"')
    return ("#include <stdint.h>\n"
            f'const char __kiln_metadata[] = "{text}";\n'
            "int32_t __kiln_num_threads = 0;\n"
            "char __kiln_last_error[512];\n")


def compile_object(source: str, cc: str = "cc") -> bytes:
    """``cc -c -fPIC -O2`` one C source; returns the object file's bytes."""
    with tempfile.TemporaryDirectory(prefix="kiln-ckernel-") as work:
        src, obj = os.path.join(work, "k.c"), os.path.join(work, "k.o")
        with open(src, "w") as f:
            f.write(source)
        subprocess.run([cc, "-c", "-fPIC", "-O2", "-o", obj, src], check=True,
                       capture_output=True, text=True)
        with open(obj, "rb") as f:
            return f.read()


@functools.lru_cache(maxsize=None)
def build(cc: str = "cc") -> CKernels:
    """Compile the kernels with ``cc`` (a cross compiler gives objects for its triple)."""
    triple = subprocess.run([cc, "-dumpmachine"], check=True, capture_output=True,
                            text=True).stdout.strip()
    meta = metadata(triple)
    objects = (compile_object(symbols_source(meta), cc), compile_object(_KERNELS, cc))
    return CKernels(objects, meta, triple, {"c": _KERNELS})
