/* Arrays: dtype names, aligned allocation of compact row-major CPU arrays, byte copies. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "opencl.h"

/* Kernels vectorize assuming aligned data; 64 covers AVX-512 and cache lines. Boards whose
 * allocators or DMA engines want something else build with KALLOC_ALIGNMENT=... or call
 * kiln_set_alloc_alignment. Not thread-safe by design: set it once at start-up. */
static size_t alignment = KILN_ALLOC_ALIGNMENT;

size_t kiln_alloc_alignment(void) { return alignment; }

int kiln_set_alloc_alignment(size_t bytes) {
  if (bytes < sizeof(void*) || (bytes & (bytes - 1)) != 0)
    return kiln_error("alignment %zu is not a power of two >= %zu", bytes, sizeof(void*));
  alignment = bytes;
  return 0;
}

int kiln_dtype_parse(const char* name, size_t len, DLDataType* out) {
  static const struct { const char* prefix; uint8_t code; } kinds[] = {
      {"float", KILN_DL_FLOAT}, {"uint", KILN_DL_UINT}, {"int", KILN_DL_INT}};
  char buf[16];
  if (len == 0 || len >= sizeof(buf)) goto bad;
  memcpy(buf, name, len);
  buf[len] = '\0';
  if (strcmp(buf, "bool") == 0) {
    *out = (DLDataType){KILN_DL_BOOL, 8, 1};
    return 0;
  }
  for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
    size_t p = strlen(kinds[i].prefix);
    if (strncmp(buf, kinds[i].prefix, p) != 0) continue;
    const char* bits = buf + p;
    int b = 0;
    if (!strcmp(bits, "8")) b = 8;
    else if (!strcmp(bits, "16")) b = 16;
    else if (!strcmp(bits, "32")) b = 32;
    else if (!strcmp(bits, "64")) b = 64;
    if (!b || (b == 8 && kinds[i].code == KILN_DL_FLOAT)) goto bad;
    *out = (DLDataType){kinds[i].code, (uint8_t)b, 1};
    return 0;
  }
bad:
  return kiln_error("unknown dtype '%.*s'; use float16/32/64, int8/16/32/64, uint8/16/32/64 or bool",
                    (int)(len < 32 ? len : 32), name);
}

int kiln_dtype_format(DLDataType t, char* buf, size_t size) {
  const char* kind = t.code == KILN_DL_FLOAT ? "float" : t.code == KILN_DL_UINT ? "uint"
                     : t.code == KILN_DL_INT ? "int" : t.code == KILN_DL_BOOL ? "bool" : NULL;
  if (!kind || t.lanes != 1) return kiln_error("dtype code %d lanes %d has no name here", t.code, t.lanes);
  int n = t.code == KILN_DL_BOOL ? snprintf(buf, size, "bool") : snprintf(buf, size, "%s%d", kind, t.bits);
  return n < 0 || (size_t)n >= size ? kiln_error("dtype name does not fit") : 0;
}

/* Element count times item size, or (size_t)-1 when a shape from the network overflows. */
static size_t checked_nbytes(const int64_t* shape, int32_t ndim, DLDataType dtype) {
  size_t n = (size_t)((dtype.bits * dtype.lanes + 7) / 8);
  for (int32_t i = 0; i < ndim; i++) {
    if (shape[i] < 0) return (size_t)-1;
    size_t d = (size_t)shape[i];
    if (d != 0 && n > ((size_t)-1 >> 1) / d) return (size_t)-1;
    n *= d;
  }
  return n;
}

size_t kiln_ndarray_nbytes(const DLTensor* a) { return checked_nbytes(a->shape, a->ndim, a->dtype); }

int kiln_ndarray_alloc(const int64_t* shape, int32_t ndim, DLDataType dtype, DLDevice device,
                       DLTensor** out) {
  if (device.device_type != KILN_DEVICE_CPU && device.device_type != KILN_DEVICE_OPENCL &&
      device.device_type != KILN_DEVICE_CUDA)
    return kiln_error("device type %d is not available in the kiln C runtime (it has the CPU, "
                      "OpenCL and CUDA devices)", device.device_type);
  if (ndim < 0 || ndim > 64) return kiln_error("array rank %d is out of range [0, 64]", ndim);
  size_t nbytes = checked_nbytes(shape, ndim, dtype);
  if (nbytes == (size_t)-1) return kiln_error("array shape is negative or too large to allocate");
  /* One block for header and shape, so kiln_ndarray_free is a single free of the header. */
  DLTensor* t = calloc(1, sizeof(DLTensor) + sizeof(int64_t) * (size_t)(ndim ? ndim : 1));
  if (!t) return kiln_error("out of memory allocating an array header");
  void* data = NULL;
  size_t rounded = (nbytes + alignment - 1) / alignment * alignment;
  if (device.device_type == KILN_DEVICE_OPENCL || device.device_type == KILN_DEVICE_CUDA) {
    if (device.device_type == KILN_DEVICE_OPENCL ? kiln_opencl_alloc(device.device_id, nbytes, &data)
                                                 : kiln_cuda_alloc(device.device_id, nbytes, &data)) {
      free(t);
      return -1;
    }
  } else if (posix_memalign(&data, alignment, rounded ? rounded : alignment) != 0) {
    free(t);
    return kiln_error("out of memory allocating %zu bytes", nbytes);
  }
  t->data = data;
  t->device = device;
  t->ndim = ndim;
  t->dtype = dtype;
  t->shape = (int64_t*)(t + 1);
  if (ndim) memcpy(t->shape, shape, sizeof(int64_t) * (size_t)ndim);
  *out = t;
  return 0;
}

void kiln_ndarray_free(DLTensor* a) {
  if (!a) return;
  if (a->device.device_type == KILN_DEVICE_OPENCL) kiln_opencl_free(a->data);
  else if (a->device.device_type == KILN_DEVICE_CUDA) kiln_cuda_free(a->data);
  else free(a->data);
  free(a);
}

int kiln_ndarray_copy(const DLTensor* from, DLTensor* to) {
  size_t n = kiln_ndarray_nbytes(from);
  if (from->ndim != to->ndim || memcmp(&from->dtype, &to->dtype, sizeof(DLDataType)) != 0 ||
      (from->ndim && memcmp(from->shape, to->shape, sizeof(int64_t) * (size_t)from->ndim) != 0))
    return kiln_error("copy: the arrays differ in shape or dtype");
  if (from->device.device_type == KILN_DEVICE_OPENCL || to->device.device_type == KILN_DEVICE_OPENCL)
    return kiln_opencl_copy(from, to, n);
  if (from->device.device_type == KILN_DEVICE_CUDA || to->device.device_type == KILN_DEVICE_CUDA)
    return kiln_cuda_copy(from, to, n);
  memmove((char*)to->data + to->byte_offset, (const char*)from->data + from->byte_offset, n);
  return 0;
}

static int check_range(const DLTensor* a, uint64_t offset, size_t nbytes) {
  size_t total = kiln_ndarray_nbytes(a);
  if (offset > total || nbytes > total - offset)
    return kiln_error("byte range [%llu, %llu) is outside the array's %zu bytes",
                      (unsigned long long)offset, (unsigned long long)offset + nbytes, total);
  return 0;
}

int kiln_ndarray_write(DLTensor* a, uint64_t offset, const void* data, size_t nbytes) {
  if (check_range(a, offset, nbytes)) return -1;
  if (a->device.device_type == KILN_DEVICE_OPENCL) return kiln_opencl_write(a, offset, data, nbytes);
  if (a->device.device_type == KILN_DEVICE_CUDA) return kiln_cuda_write(a, offset, data, nbytes);
  if (nbytes) memcpy((char*)a->data + a->byte_offset + offset, data, nbytes);
  return 0;
}

int kiln_ndarray_read(const DLTensor* a, uint64_t offset, void* data, size_t nbytes) {
  if (check_range(a, offset, nbytes)) return -1;
  if (a->device.device_type == KILN_DEVICE_OPENCL) return kiln_opencl_read(a, offset, data, nbytes);
  if (a->device.device_type == KILN_DEVICE_CUDA) return kiln_cuda_read(a, offset, data, nbytes);
  if (nbytes) memcpy(data, (const char*)a->data + a->byte_offset + offset, nbytes);
  return 0;
}

/* ---- devices ----------------------------------------------------------------------------- */
int kiln_device_exist(DLDevice d) {
  if (d.device_type == KILN_DEVICE_CPU) return 1;
  int n = 0;
  if (d.device_type == KILN_DEVICE_OPENCL) return kiln_opencl_api(&n) && d.device_id >= 0 && d.device_id < n;
  if (d.device_type == KILN_DEVICE_CUDA) return d.device_id >= 0 && d.device_id < kiln_cuda_device_count();
  return 0;
}

int kiln_device_sync(DLDevice d) {
  if (d.device_type == KILN_DEVICE_OPENCL) return kiln_opencl_sync(d.device_id);
  if (d.device_type == KILN_DEVICE_CUDA) return kiln_cuda_sync(d.device_id);
  return 0; /* CPU kernels have finished when their call returns */
}

int kiln_device_attr(DLDevice d, const char* name, int64_t ints[3], int* count, char* text, size_t size) {
  if (d.device_type == KILN_DEVICE_OPENCL) return kiln_opencl_attr(d.device_id, name, ints, count, text, size);
  if (d.device_type == KILN_DEVICE_CUDA) return kiln_cuda_attr(d.device_id, name, ints, count, text, size);
  return kiln_error("device type %d has no attribute '%s' in the kiln C runtime", d.device_type, name);
}

/* 4 GiB, or half the address space of a 32-bit device. */
#define DEFAULT_LOAD_LIMIT ((size_t)(4ull << 30 > (unsigned long long)SIZE_MAX / 2 ? SIZE_MAX / 2 : 4ull << 30))

/* The C side of kiln/limits.py's load_limit (docs/security.md). */
size_t kiln_load_limit(void) {
  const char* v = getenv("KILN_LOAD_LIMIT");
  if (!v || !*v) return DEFAULT_LOAD_LIMIT;
  char* end;
  unsigned long long n = strtoull(v, &end, 10);
  unsigned long long unit = 1;
  switch (*end) {
    case 'k': case 'K': unit = 1ull << 10; end++; break;
    case 'm': case 'M': unit = 1ull << 20; end++; break;
    case 'g': case 'G': unit = 1ull << 30; end++; break;
    case 't': case 'T': unit = 1ull << 40; end++; break;
  }
  if (*end == 'B' || *end == 'b') end++;
  if (end == v || *end || v[0] == '-' || n > (unsigned long long)SIZE_MAX / unit) return DEFAULT_LOAD_LIMIT;
  return (size_t)(n * unit);
}
