/* libFuzzer target: the .npz reader of kiln_run --input (src/runtime/npz.c, inflate.c), whole
 * files in memory, with a check that accepts arrays of at most 1 MiB (as a model would). */
#include <stddef.h>
#include <stdint.h>

#include "npz.h"

static int small(void* ctx, const NpyArray* a) {
  (void)ctx;
  return a->nbytes <= (1u << 20) ? 0 : kiln_error("too large for this target");
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  NpyArray* arrays;
  int count;
  if (npz_read_bytes(data, size, "fuzz.npz", small, NULL, &arrays, &count) == 0) npz_free(arrays, count);
  return 0;
}
