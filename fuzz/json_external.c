/* libFuzzer target: the list of offloaded subgraphs a library carries in __kiln_external_modules
 * (src/runtime/json_external.c, json.c): the list, each entry's JSON graph, its arguments and, for
 * a graph that reads, the oneDNN executor's own reading of it (dnnl.c; without the oneDNN shim
 * that stops at a clean error). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  char* text = malloc(size + 1); /* the symbol is NUL-terminated */
  if (!text) return 0;
  memcpy(text, data, size);
  text[size] = '\0';
  KilnModule mod;
  memset(&mod, 0, sizeof(mod));
  kiln_external_load_text(&mod, text, "fuzz.so");
  kiln_external_free(&mod);
  kiln_metadata_free(&mod);
  free(text);
  return 0;
}
