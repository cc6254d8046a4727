/* The emulated board: UART0 (a CMSDK APB UART), SysTick, semihosting exit. The project sets
   KILN_UART0_BASE and KILN_CORE_HZ for boards other than MPS2 (kiln/micro/project BOARDS). */
#ifndef KILN_BOARD_H_
#define KILN_BOARD_H_
#include <stdint.h>
#include <stddef.h>

#ifndef KILN_UART0_BASE
#define KILN_UART0_BASE 0x40004000u /* MPS2 AN385/AN386/AN500 */
#endif
#ifndef KILN_UART0_IRQ
#define KILN_UART0_IRQ 0            /* MPS2: UART0's RX and TX interrupts are 0 and 1 */
#endif
#ifndef KILN_CORE_HZ
#define KILN_CORE_HZ 25000000u      /* the MPS2 core clock SysTick counts */
#endif

void board_init(void);
void uart_putc(char c);
void uart_puts(const char* s);
void uart_put_u64(uint64_t v);
void uart_put_hex(const void* data, size_t n);
uint64_t board_ticks(void);        /* SysTick cycles of the KILN_CORE_HZ core clock since board_init */
void board_exit(int code);         /* ends the emulation with code (semihosting) */
#endif
