/* libFuzzer target: the C RPC server's decoder of frame bodies (src/runtime/rpc/value.c):
 * a body is an opcode byte and one tagged value (docs/rpc-protocol.md). */
#include <stdint.h>
#include <sys/types.h> /* rpc.h uses pid_t */

#include "rpc/rpc.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  Arena arena = {0};
  KVal* v;
  kv_decode(&arena, data + 1, size - 1, &v);
  arena_free(&arena);
  return 0;
}
