/* Loads a kiln module built for this (emulated) machine and runs its "fill" kernel:
 * A[i] = i * 3 over a parallel loop, with n symbolic. Prints "ok" or what went wrong. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>

typedef union { int64_t v_int64; double v_float64; void* v_handle; } KilnValue;
typedef struct { int32_t device_type; int32_t device_id; } DLDevice;
typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } DLDataType;
typedef struct {
  void* data; DLDevice device; int32_t ndim; DLDataType dtype;
  int64_t* shape; int64_t* strides; uint64_t byte_offset;
} DLTensor;
typedef int32_t (*Kernel)(const KilnValue*, const int32_t*, int32_t);

int main(int argc, char** argv) {
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) { printf("dlopen: %s\n", dlerror()); return 1; }
  Kernel fill = (Kernel)dlsym(lib, "fill");
  const char* meta = (const char*)dlsym(lib, "__kiln_metadata");
  int32_t* threads = (int32_t*)dlsym(lib, "__kiln_num_threads");
  if (!fill || !meta || !threads) { printf("missing symbols\n"); return 1; }
  *threads = 4;
  int32_t data[1003];
  int64_t shape[1] = {1000};
  DLTensor t = {data, {1, 0}, 1, {0, 32, 1}, shape, NULL, 3 * sizeof(int32_t)};
  KilnValue args[1]; args[0].v_handle = &t;
  int32_t codes[1] = {7};
  for (int rep = 0; rep < 50; ++rep) {
    if (fill(args, codes, 1) != 0) { printf("kernel failed: %s\n", (char*)dlsym(lib, "__kiln_last_error")); return 1; }
  }
  for (int i = 0; i < 1000; ++i)
    if (data[3 + i] != i * 3) { printf("wrong at %d: %d\n", i, data[3 + i]); return 1; }
  printf("ok\n");
  return 0;
}
