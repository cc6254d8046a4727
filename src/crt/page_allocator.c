/* First-fit page allocator over one static arena: run[i] is the page count of the block that
   starts at page i (0 when page i starts no block); a free block's pages are marked free. */
#include "crt.h"

#define NPAGES (KILN_CRT_ARENA_BYTES / KILN_CRT_PAGE_BYTES)

static uint8_t arena[NPAGES * KILN_CRT_PAGE_BYTES] __attribute__((aligned(64)));
static uint16_t run[NPAGES];
static uint8_t used[NPAGES];

uint8_t* kiln_crt_arena_base(void) { return arena; }

void* kiln_crt_alloc(size_t nbytes) {
  size_t need = nbytes / KILN_CRT_PAGE_BYTES + (nbytes % KILN_CRT_PAGE_BYTES != 0); /* no wrap near SIZE_MAX */
  if (need == 0) need = 1;
  if (need > NPAGES || need > UINT16_MAX) return NULL;
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

/* The page of ptr if it starts an allocated block, else NPAGES. */
static size_t block_page(const void* ptr) {
  uintptr_t at = (uintptr_t)ptr, base = (uintptr_t)arena;
  if (at < base || at - base >= sizeof arena || (at - base) % KILN_CRT_PAGE_BYTES) return NPAGES;
  size_t page = (size_t)(at - base) / KILN_CRT_PAGE_BYTES;
  return used[page] && run[page] ? page : NPAGES;
}

size_t kiln_crt_block_bytes(const void* ptr) {
  size_t page = block_page(ptr);
  return page < NPAGES ? (size_t)run[page] * KILN_CRT_PAGE_BYTES : 0;
}

void kiln_crt_free(void* ptr) {
  size_t page = block_page(ptr);
  if (page >= NPAGES) return; /* NULL, or not a block: nothing of anyone else's is freed */
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
