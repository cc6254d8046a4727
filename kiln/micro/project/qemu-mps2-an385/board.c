/* Start-up and I/O for qemu -M mps2-an385 (and the boards that reuse it: an386, an500, mps3-an547):
   vector table, .data/.bss set-up, UART0, SysTick. */
#include "board.h"

#define UART0_BASE KILN_UART0_BASE
#define UART_DATA (*(volatile uint32_t*)(UART0_BASE + 0x0))
#define UART_STATE (*(volatile uint32_t*)(UART0_BASE + 0x4))
#define UART_CTRL (*(volatile uint32_t*)(UART0_BASE + 0x8))
#define UART_INTCLEAR (*(volatile uint32_t*)(UART0_BASE + 0xC))
#define UART_BAUDDIV (*(volatile uint32_t*)(UART0_BASE + 0x10))
#define SYST_CSR (*(volatile uint32_t*)0xE000E010u)
#define SYST_RVR (*(volatile uint32_t*)0xE000E014u)
#define SYST_CVR (*(volatile uint32_t*)0xE000E018u)

extern uint32_t __stack_top, __data_load, __data_start, __data_end, __bss_start, __bss_end;
int main(void);
void Reset_Handler(void);
void SysTick_Handler(void);
static void Fault_Handler(void) { board_exit(3); }
/* UART0's RX and TX interrupts (KILN_UART0_IRQ and the next; which is which differs between qemu
   versions, TX is never enabled): only wake the CRT's WFI (crt_main.c); the byte stays in the UART. */
static void Uart_Handler(void) { UART_INTCLEAR = 3u; }

__attribute__((section(".vectors"), used)) static void (*const vectors[16 + KILN_UART0_IRQ + 2])(void) = {
    (void (*)(void))(&__stack_top), Reset_Handler, Fault_Handler, Fault_Handler, Fault_Handler,
    Fault_Handler, Fault_Handler, 0, 0, 0, 0, Fault_Handler, Fault_Handler, 0, Fault_Handler, SysTick_Handler,
    [16 + KILN_UART0_IRQ] = Uart_Handler, [16 + KILN_UART0_IRQ + 1] = Uart_Handler};

void Reset_Handler(void) {
#if defined(__ARM_FP)
  /* Cortex-M4F/M7/M55 built with a hard-float ABI: grant access to the FPU (CP10, CP11; on the
     M55 also MVE) first. */
  *(volatile uint32_t*)0xE000ED88u |= 0xFu << 20;
  __asm__ volatile("dsb\n\tisb");
#endif
  uint32_t* src = &__data_load;
  for (uint32_t* dst = &__data_start; dst < &__data_end;) *dst++ = *src++;
  for (uint32_t* dst = &__bss_start; dst < &__bss_end;) *dst++ = 0;
  board_exit(main());
}

static volatile uint32_t systick_wraps;
void SysTick_Handler(void) { systick_wraps++; }

void board_init(void) {
  UART_BAUDDIV = 16;
  UART_CTRL = 1u;  /* TX enable */
  SYST_RVR = 0xFFFFFFu;
  SYST_CVR = 0;
  SYST_CSR = 7u;   /* core clock, interrupt on wrap, enabled */
}

uint64_t board_ticks(void) {
  uint32_t wraps, now;
  do {
    wraps = systick_wraps;
    now = SYST_CVR;
  } while (wraps != systick_wraps);
  return (uint64_t)wraps * 0x1000000u + (0xFFFFFFu - now);
}

void uart_putc(char c) {
  while (UART_STATE & 1u) {
  }
  UART_DATA = (uint32_t)(uint8_t)c;
}

void uart_puts(const char* s) {
  while (*s) uart_putc(*s++);
}

void uart_put_u64(uint64_t v) {
  char buf[21];
  int i = 20;
  buf[i] = 0;
  do {
    buf[--i] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  uart_puts(buf + i);
}

void uart_put_hex(const void* data, size_t n) {
  static const char digits[] = "0123456789abcdef";
  const uint8_t* p = (const uint8_t*)data;
  for (size_t i = 0; i < n; ++i) {
    uart_putc(digits[p[i] >> 4]);
    uart_putc(digits[p[i] & 15]);
  }
}

/* Semihosting SYS_EXIT_EXTENDED: QEMU ends with the given exit code. */
void board_exit(int code) {
  uint32_t block[2] = {0x20026u /* ADP_Stopped_ApplicationExit */, (uint32_t)code};
  register uint32_t r0 __asm__("r0") = 0x20u;
  register uint32_t* r1 __asm__("r1") = block;
  __asm__ volatile("bkpt 0xab" : : "r"(r0), "r"(r1) : "memory");
  for (;;) {
  }
}
