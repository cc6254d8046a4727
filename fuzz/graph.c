/* libFuzzer target: the C graph executor's graph JSON (src/runtime/graph.c, json.c) and, for a
 * graph that parses, a parameter blob (the input after the first NUL byte) loaded into it.
 * The library has no functions: parsing, memory planning and parameter loading are what run. */
#include <stdint.h>
#include <string.h>

#include "internal.h"
#include "kiln_graph.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const uint8_t* nul = memchr(data, 0, size);
  size_t json_len = nul ? (size_t)(nul - data) : size;
  KilnModule lib;
  memset(&lib, 0, sizeof(lib));
  lib.device_type = KILN_DEVICE_CPU;
  KilnGraph* g;
  DLDevice cpu = {KILN_DEVICE_CPU, 0};
  if (kiln_graph_create((const char*)data, json_len, &lib, cpu, &g) == 0) {
    if (nul) kiln_graph_load_params(g, nul + 1, size - json_len - 1);
    kiln_graph_free(g);
  }
  return 0;
}
