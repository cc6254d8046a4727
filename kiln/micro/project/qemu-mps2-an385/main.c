/* Runs the AOT model once on inputs baked in by the project generator (inputs.c), prints the
   outputs as hex bytes and the SysTick cycles of the run on UART0, exits with the run's status. */
#include "board.h"
#include "inputs.h"
#include "tvmgen_default.h"

extern char __kiln_last_error[];

int main(void) {
  board_init();
  uart_puts("KILN-BOOT\n");
  uint64_t start = board_ticks();
  int32_t rc = kiln_run_model();
  uint64_t cycles = board_ticks() - start;
  if (rc != 0) {
    uart_puts("KILN-ERROR ");
    uart_puts(__kiln_last_error);
    uart_putc('\n');
    return 1;
  }
  kiln_print_outputs();
  uart_puts("KILN-CYCLES ");
  uart_put_u64(cycles);
  uart_putc('\n');
  return 0;
}
