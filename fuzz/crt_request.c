/* libFuzzer target: the microcontroller runtime's request handler (src/crt/rpc_server.c) and
 * page allocator, fed a sequence of request payloads as the host link would deliver them. The
 * input is a list of [length u16][session u8][payload]; the system library has one function
 * that reads and writes every byte of its tensor arguments, so a tensor the handler lets
 * through outside its block is an AddressSanitizer report. */
#include <string.h>

#include "crt.h"

char __kiln_last_error[256];

static int32_t touch(const KilnValue* args, const int32_t* codes, int32_t n) {
  for (int32_t i = 0; i < n; ++i) {
    if (codes[i] != 7) continue;
    const DLTensor* t = args[i].v_handle;
    uint64_t bytes = (t->dtype.bits + 7u) / 8u;
    for (int d = 0; d < t->ndim; ++d) bytes *= (uint64_t)t->shape[d];
    volatile uint8_t* p = t->data;
    for (uint64_t k = 0; k < bytes && k < (1u << 20); ++k) p[k] = (uint8_t)(p[k] + 1);
  }
  return 0;
}

static int32_t failing(const KilnValue* args, const int32_t* codes, int32_t n) {
  (void)args; (void)codes; (void)n;
  strcpy(__kiln_last_error, "failing: as asked");
  return -1;
}

const KilnCrtFunc kiln_crt_system_lib[] = {{"touch", touch}, {"failing", failing}};
const int32_t kiln_crt_system_lib_size = 2;

int kiln_crt_read_byte(void) { return -1; }
void kiln_crt_write(const uint8_t* data, size_t n) { (void)data; (void)n; }
uint64_t kiln_crt_ticks(void) { return 0; }
uint32_t kiln_crt_ticks_hz(void) { return 1000; }

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  /* The handler's state (session, window, arena) persists like a board's; start each input from
   * a board that has just been reset: HELLO of a fresh session, every block freed. */
  static uint8_t session = 0;
  session = (uint8_t)(session % 250 + 1);
  uint8_t hello[5] = {0, 0, 0, 0, 1};
  const uint8_t* reply;
  kiln_crt_handle(session, hello, sizeof hello, &reply);
  while (size >= 3) {
    size_t n = (size_t)data[0] | (size_t)data[1] << 8;
    uint8_t sid = data[2] ? session : (uint8_t)(session + 1);
    data += 3;
    size -= 3;
    if (n > size) n = size;
    if (n > KILN_CRT_MAX_PAYLOAD) n = KILN_CRT_MAX_PAYLOAD;
    uint8_t payload[KILN_CRT_MAX_PAYLOAD];
    memcpy(payload, data, n);
    kiln_crt_handle(sid, payload, n, &reply);
    data += n;
    size -= n;
  }
  for (uint8_t* p = kiln_crt_arena_base(); p < kiln_crt_arena_base() + KILN_CRT_ARENA_BYTES; p += KILN_CRT_PAGE_BYTES)
    kiln_crt_free(p);
  return 0;
}
