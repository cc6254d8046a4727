/* board.h for a standalone AOT program on this machine (main.c of qemu-mps2-an385 runs the model
   once; its UART is stdout, its clock CLOCK_MONOTONIC in nanoseconds). */
#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "board.h"

void board_init(void) {}

void uart_putc(char c) { putchar(c); }

void uart_puts(const char* s) { fputs(s, stdout); }

void uart_put_u64(uint64_t v) { printf("%llu", (unsigned long long)v); }

void uart_put_hex(const void* data, size_t n) {
  const unsigned char* p = (const unsigned char*)data;
  for (size_t i = 0; i < n; ++i) printf("%02x", p[i]);
}

uint64_t board_ticks(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void board_exit(int code) {
  fflush(stdout);
  exit(code);
}
