/* CRT firmware: the RPC server of src/crt over UART0; board time from SysTick. */
#include "board.h"
#include "crt.h"

#define UART0_BASE KILN_UART0_BASE
#define UART_DATA (*(volatile uint32_t*)(UART0_BASE + 0x0))
#define UART_STATE (*(volatile uint32_t*)(UART0_BASE + 0x4))
#define UART_CTRL (*(volatile uint32_t*)(UART0_BASE + 0x8))

int kiln_crt_read_byte(void) {
  while (!(UART_STATE & 2u)) {
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
  UART_CTRL = 3u;  /* TX and RX */
  return kiln_crt_serve();
}
