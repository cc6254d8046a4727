/* CRT firmware: the RPC server of src/crt over UART0; board time from SysTick. */
#include "board.h"
#include "crt.h"

#define UART0_BASE KILN_UART0_BASE
#define UART_DATA (*(volatile uint32_t*)(UART0_BASE + 0x0))
#define UART_STATE (*(volatile uint32_t*)(UART0_BASE + 0x4))
#define UART_CTRL (*(volatile uint32_t*)(UART0_BASE + 0x8))

#define NVIC_ISER ((volatile uint32_t*)0xE000E100u)

/* Waits for a byte asleep (WFI), woken by the UART's RX interrupt (board.c's handler only clears
   it): qemu's main loop, which hands the UART its next byte, then runs at once instead of between
   slices of a busy poll. Interrupts are masked from the check to the WFI so that a byte arriving
   in between still wakes it. */
int kiln_crt_read_byte(void) {
  while (!(UART_STATE & 2u)) {
    __asm__ volatile("cpsid i" ::: "memory");
    if (!(UART_STATE & 2u)) __asm__ volatile("wfi");
    __asm__ volatile("cpsie i" ::: "memory");
  }
  return (int)(UART_DATA & 0xFFu);
}

void kiln_crt_write(const uint8_t* data, size_t n) {
  for (size_t i = 0; i < n; ++i) uart_putc((char)data[i]);
}

uint64_t kiln_crt_ticks(void) { return board_ticks(); }
uint32_t kiln_crt_ticks_hz(void) { return KILN_CORE_HZ; }

int main(void) {
  board_init();
  UART_CTRL = 3u | 8u;  /* TX, RX and the RX interrupt (a WFI wake-up only) */
  for (int irq = KILN_UART0_IRQ; irq <= KILN_UART0_IRQ + 1; ++irq) NVIC_ISER[irq / 32] = 1u << (irq % 32);
  return kiln_crt_serve();
}
