/* libFuzzer target: a module's __kiln_metadata JSON (src/runtime/metadata.c, json.c). */
#include <stdint.h>
#include <string.h>

#include "internal.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  KilnModule mod;
  memset(&mod, 0, sizeof(mod));
  kiln_metadata_read(&mod, (const char*)data, size, "fuzz.so");
  kiln_metadata_free(&mod);
  return 0;
}
