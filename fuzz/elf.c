/* libFuzzer target: the checks a shared object passes before dlopen (src/runtime/elf_integrity.c). */
#include <stdint.h>

#include "internal.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kiln_elf_check_intact(data, size, "fuzz.so");
  return 0;
}
