/* Drives the C runtime's public API the way an application embedding it would:
 *   c_api_driver <module.so|module.tar> <expected alignment>
 * The module must export add_one(A: float32[n], B: float32[n]). Prints "ok" at the end;
 * any failed check prints what went wrong and exits 1. */
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "kiln_runtime.h"

#define CHECK(cond, ...)                                             \
  do {                                                               \
    if (!(cond)) {                                                   \
      printf("FAIL line %d: ", __LINE__);                            \
      printf(__VA_ARGS__);                                           \
      printf(" [last error: %s]\n", kiln_last_error());              \
      return 1;                                                      \
    }                                                                \
  } while (0)

int main(int argc, char** argv) {
  size_t want_align = (size_t)atoi(argv[2]);
  CHECK(kiln_alloc_alignment() == want_align, "alignment %zu", kiln_alloc_alignment());
  CHECK(kiln_set_alloc_alignment(24) == -1 && strstr(kiln_last_error(), "power of two"), "bad alignment accepted");

  KilnModule* mod;
  CHECK(kiln_module_load(argv[1], &mod) == 0, "load");
  CHECK(strcmp(kiln_module_entry_name(mod), "add_one") == 0, "entry %s", kiln_module_entry_name(mod));
  KilnFunction* f;
  CHECK(kiln_module_get_function(mod, "missing", &f) == -1 &&
        strstr(kiln_last_error(), "no function 'missing'; its functions: add_one"), "missing function");
  CHECK(kiln_module_get_function(mod, "add_one", &f) == 0, "get_function");

  int64_t shape[1] = {1024};
  DLDataType f32;
  CHECK(kiln_dtype_parse("float32", 7, &f32) == 0, "dtype");
  DLTensor *a, *b, *small;
  DLDevice cpu = {KILN_DEVICE_CPU, 0};
  CHECK(kiln_ndarray_alloc(shape, 1, f32, cpu, &a) == 0 && kiln_ndarray_alloc(shape, 1, f32, cpu, &b) == 0, "alloc");
  CHECK((uintptr_t)a->data % want_align == 0, "data %p not %zu-aligned", a->data, want_align);
  /* Vulkan (7): a device type the C runtime does not serve (CUDA and OpenCL it does, when present) */
  CHECK(kiln_ndarray_alloc(shape, 1, f32, (DLDevice){7, 0}, &small) == -1 &&
        strstr(kiln_last_error(), "not available in the kiln C runtime"), "vulkan alloc");
  float host[1024];
  for (int i = 0; i < 1024; i++) host[i] = (float)i * 0.5f;
  CHECK(kiln_ndarray_write(a, 0, host, sizeof(host)) == 0, "write");
  CHECK(kiln_ndarray_write(a, 8, host, sizeof(host)) == -1 && strstr(kiln_last_error(), "outside the array"), "overrun");

  KilnValue args[2];
  int32_t codes[2] = {KILN_DLTENSOR, KILN_DLTENSOR};
  args[0].v_handle = a;
  args[1].v_handle = b;
  CHECK(kiln_func_call(f, args, codes, 2) == 0, "call");
  float out[1024];
  CHECK(kiln_ndarray_read(b, 0, out, sizeof(out)) == 0, "read");
  for (int i = 0; i < 1024; i++) CHECK(out[i] == host[i] + 1.0f, "b[%d] = %g", i, out[i]);

  int64_t short_shape[1] = {5};
  CHECK(kiln_ndarray_alloc(short_shape, 1, f32, cpu, &small) == 0, "alloc small");
  args[1].v_handle = small;
  CHECK(kiln_func_call(f, args, codes, 2) == -1 &&
        strstr(kiln_last_error(), "add_one: argument 'B' has shape (5,), expected (1024,)"), "shape check");
  CHECK(kiln_func_call(f, args, codes, 1) == -1 && strstr(kiln_last_error(), "add_one takes 2 arguments (A, B), got 1"),
        "count check");
  args[1].v_handle = b;
  double costs[3];
  CHECK(kiln_func_time(f, args, codes, 2, 10, 3, 0, costs) == 0, "time");
  CHECK(costs[0] > 0 && costs[2] > 0, "costs %g %g", costs[0], costs[2]);

  kiln_ndarray_free(a);
  kiln_ndarray_free(b);
  kiln_ndarray_free(small);
  kiln_module_free(mod);
  printf("ok %s %zu\n", kiln_device_arch(), want_align);
  return 0;
}
