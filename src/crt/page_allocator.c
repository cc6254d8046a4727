/* First-fit page allocator over one static arena: run[i] is the page count of the block that
   starts at page i (0 when page i starts no block); a free block's pages are marked free. */
#include "crt.h"

#define NPAGES (KILN_CRT_ARENA_BYTES / KILN_CRT_PAGE_BYTES)

static uint8_t arena[NPAGES * KILN_CRT_PAGE_BYTES] __attribute__((aligned(64)));
static uint16_t run[NPAGES];
static uint8_t used[NPAGES];

uint8_t* kiln_crt_arena_base(void) { return arena; }

void* kiln_crt_alloc(size_t nbytes) {
  size_t need = (nbytes + KILN_CRT_PAGE_BYTES - 1) / KILN_CRT_PAGE_BYTES;
  if (need == 0) need = 1;
  size_t start = 0, len = 0;
  for (size_t i = 0; i < NPAGES; ++i) {
    if (used[i]) {
      len = 0;
      start = i + 1;
      continue;
    }
    if (++len == need) {
      for (size_t k = start; k < start + need; ++k) used[k] = 1;
      run[start] = (uint16_t)need;
      return arena + start * KILN_CRT_PAGE_BYTES;
    }
  }
  return NULL;
}

void kiln_crt_free(void* ptr) {
  if (ptr == NULL) return;
  size_t page = (size_t)((uint8_t*)ptr - arena) / KILN_CRT_PAGE_BYTES;
  if (page >= NPAGES) return;
  for (size_t k = page; k < page + run[page] && k < NPAGES; ++k) used[k] = 0;
  run[page] = 0;
}

size_t kiln_crt_pages_free(void) {
  size_t n = 0;
  for (size_t i = 0; i < NPAGES; ++i) n += !used[i];
  return n;
}

/* Kernel scratch comes from the same pages: these replace the module's weak static arena. */
void* KilnBackendAllocWorkspace(int32_t device_type, int32_t device_id, uint64_t nbytes,
                                int32_t dtype_code_hint, int32_t dtype_bits_hint) {
  (void)device_type; (void)device_id; (void)dtype_code_hint; (void)dtype_bits_hint;
  return kiln_crt_alloc((size_t)nbytes);
}

int32_t KilnBackendFreeWorkspace(int32_t device_type, int32_t device_id, void* ptr) {
  (void)device_type; (void)device_id;
  kiln_crt_free(ptr);
  return 0;
}
