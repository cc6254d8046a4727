/* The emulated board: UART0 (CMSDK APB UART at 0x40004000), SysTick, semihosting exit. */
#ifndef KILN_BOARD_H_
#define KILN_BOARD_H_
#include <stdint.h>
#include <stddef.h>

void board_init(void);
void uart_putc(char c);
void uart_puts(const char* s);
void uart_put_u64(uint64_t v);
void uart_put_hex(const void* data, size_t n);
uint64_t board_ticks(void);        /* SysTick cycles of the 25 MHz core clock since board_init */
void board_exit(int code);         /* ends the emulation with code (semihosting) */
#endif
