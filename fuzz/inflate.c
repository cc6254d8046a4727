/* libFuzzer target: raw DEFLATE decoding (src/runtime/inflate.c), whole and prefix modes. The
 * first two bytes choose the output size (so both "too short" and "too long" streams occur). */
#include <stdint.h>
#include <stdlib.h>

#include "npz.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  size_t out_len = (size_t)data[0] | (size_t)data[1] << 8;
  unsigned char* out = malloc(out_len + 1);
  if (!out) return 0;
  size_t got;
  npz_inflate(data + 2, size - 2, out, out_len, NULL);
  npz_inflate(data + 2, size - 2, out, out_len, &got);
  free(out);
  return 0;
}
