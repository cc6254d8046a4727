/* Texture-scoped arrays through the C API (kiln_ndarray_alloc_scoped): bytes in and out in chunks
 * that start and end inside image rows, copies image <-> buffer <-> image of another fold, and
 * the one-line errors. Prints "ok" or the first failure; run by tests/runtime/test_c_graph_texture.py. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln_runtime.h"

#define CHECK(cond, ...)                  \
  do {                                    \
    if (!(cond)) {                        \
      printf("FAIL line %d: ", __LINE__); \
      printf(__VA_ARGS__);                \
      printf("\n");                       \
      return 1;                           \
    }                                     \
  } while (0)

static int expect_error(int rc, const char* want) {
  if (rc == 0) { printf("FAIL: no error, wanted '%s'\n", want); return 1; }
  if (!strstr(kiln_last_error(), want)) { printf("FAIL: '%s' lacks '%s'\n", kiln_last_error(), want); return 1; }
  printf("error: %s\n", kiln_last_error());
  return 0;
}

int main(void) {
  DLDevice cl = {KILN_DEVICE_OPENCL, 0}, cpu = {KILN_DEVICE_CPU, 0};
  DLDataType f32, f16, i32;
  kiln_dtype_parse("float32", 7, &f32);
  kiln_dtype_parse("float16", 7, &f16);
  kiln_dtype_parse("int32", 5, &i32);
  int64_t shape[5] = {1, 3, 5, 7, 4}; /* global.texture: 15 rows of 7 texels (112 bytes each) */
  enum { N = 1 * 3 * 5 * 7 * 4 };
  float host[N], back[N];
  for (int i = 0; i < N; i++) host[i] = (float)i * 0.25f - 7.0f;

  DLTensor *tex, *nhwc, *buf, *half;
  CHECK(!kiln_ndarray_alloc_scoped(shape, 5, f32, cl, "global.texture", &tex), "%s", kiln_last_error());
  CHECK(!kiln_ndarray_alloc_scoped(shape, 5, f32, cl, "global.texture-nhwc", &nhwc), "%s", kiln_last_error());
  CHECK(!kiln_ndarray_alloc_scoped(shape, 5, f32, cl, "global", &buf), "%s", kiln_last_error());
  /* Chunks of 52 bytes: most start and end inside a row. */
  size_t total = sizeof(host), step = 52;
  for (size_t off = 0; off < total; off += step) {
    size_t n = total - off < step ? total - off : step;
    CHECK(!kiln_ndarray_write(tex, off, (const char*)host + off, n), "write at %zu: %s", off, kiln_last_error());
  }
  memset(back, 0, sizeof(back));
  for (size_t off = 0; off < total; off += 36) {
    size_t n = total - off < 36 ? total - off : 36;
    CHECK(!kiln_ndarray_read(tex, off, (char*)back + off, n), "read at %zu: %s", off, kiln_last_error());
  }
  CHECK(!memcmp(host, back, sizeof(host)), "chunked image round trip differs");
  CHECK(!kiln_ndarray_copy(tex, buf), "%s", kiln_last_error());   /* image -> buffer */
  CHECK(!kiln_ndarray_copy(buf, nhwc), "%s", kiln_last_error());  /* buffer -> image of another fold */
  memset(back, 0, sizeof(back));
  CHECK(!kiln_ndarray_read(nhwc, 0, back, sizeof(back)), "%s", kiln_last_error());
  CHECK(!memcmp(host, back, sizeof(host)), "image -> buffer -> image differs");
  CHECK(!kiln_ndarray_write(nhwc, 0, host + 1, sizeof(float) * 8), "%s", kiln_last_error());
  CHECK(!kiln_ndarray_copy(nhwc, tex), "%s", kiln_last_error());  /* image -> image, other fold */
  memset(back, 0, sizeof(back));
  CHECK(!kiln_ndarray_read(tex, 0, back, sizeof(back)), "%s", kiln_last_error());
  CHECK(!memcmp(host + 1, back, sizeof(float) * 8) && !memcmp(host + 8, back + 8, sizeof(float) * (N - 8)),
        "image -> image of another fold differs");
  DLTensor host_view = {host, cpu, 5, f32, shape, NULL, 0};
  CHECK(!kiln_ndarray_copy(&host_view, tex), "%s", kiln_last_error()); /* host -> image */
  CHECK(!kiln_ndarray_alloc_scoped(shape, 5, f16, cl, "global.texture-weight", &half), "%s", kiln_last_error());
  unsigned short hb[N], hb2[N];
  for (int i = 0; i < N; i++) hb[i] = (unsigned short)(0x3c00 + i); /* float16 bit patterns, kept as is */
  CHECK(!kiln_ndarray_write(half, 6, hb + 3, sizeof(hb) - 6), "%s", kiln_last_error());
  CHECK(!kiln_ndarray_write(half, 0, hb, 6), "%s", kiln_last_error());
  CHECK(!kiln_ndarray_read(half, 0, hb2, sizeof(hb2)), "%s", kiln_last_error());
  CHECK(!memcmp(hb, hb2, sizeof(hb)), "float16 image round trip differs");

  kiln_ndarray_free(buf);
  DLTensor* none = NULL;
  int64_t flat[4] = {1, 3, 5, 28};
  if (expect_error(kiln_ndarray_alloc_scoped(flat, 4, f32, cl, "global.texture", &none),
                   "scope global.texture holds float32/float16 5-D tensors whose innermost dimension is 4") ||
      expect_error(kiln_ndarray_alloc_scoped(shape, 5, i32, cl, "global.texture", &none), "got int32[1, 3, 5, 7, 4]") ||
      expect_error(kiln_ndarray_alloc_scoped(shape, 5, f32, cl, "local.texture", &none),
                   "unknown memory scope 'local.texture': use global, global.texture") ||
      expect_error(kiln_ndarray_alloc_scoped(shape, 5, f32, cpu, "global.texture", &none),
                   "scope global.texture is an OpenCL image; device type 1 has none") ||
      expect_error(kiln_ndarray_write(tex, 4, host, sizeof(host)), "outside the array's"))
    return 1;
  kiln_ndarray_free(tex);
  kiln_ndarray_free(nhwc);
  kiln_ndarray_free(half);
  printf("ok\n");
  return 0;
}
