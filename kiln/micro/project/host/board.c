/* A host-emulated board: the CRT's transport is stdin/stdout, its clock CLOCK_MONOTONIC. */
#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "crt.h"

int kiln_crt_read_byte(void) {
  uint8_t c;
  return read(0, &c, 1) == 1 ? c : -1;
}

void kiln_crt_write(const uint8_t* data, size_t n) {
  while (n > 0) {
    ssize_t k = write(1, data, n);
    if (k <= 0) return;
    data += k;
    n -= (size_t)k;
  }
}

uint64_t kiln_crt_ticks(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint32_t kiln_crt_ticks_hz(void) { return 1000000000u; }

int main(void) { return kiln_crt_serve(); }
