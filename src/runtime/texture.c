/* Texture-scoped arrays: the image that holds a 5-D tensor, and allocating it.
 *
 * The fold is the one kiln/tir/transform/texture.py compiles kernels for and that the Python
 * runtime allocates (alloc_texture in kiln/runtime/devices/opencl.py): the scope's preferred
 * number of leading dimensions folds into the image height, the others but the innermost 4 into
 * its width (one RGBA texel per 4 elements). When that image is larger than the device allows,
 * the other folds are tried in the order 3, 2, 1, 4 of leading dimensions; when none fits, the
 * preferred one is kept and its allocation fails with the device's limits in the message.
 *
 * The compiler picks among the same folds with the target's -texture_spatial_limit instead of
 * the device's limits. The graph executor folds with the smaller of the two, which gives the
 * compiler's fold whenever that fits the device; kernel launches check the size they get
 * (opencl_module.c). The Python runtime's alloc_texture folds with the device's limits only.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "opencl.h"

static const struct { const char* name; int split; } scopes[] = {
    {"global.texture", 3}, {"global.texture-nhwc", 2}, {"global.texture-weight", 1}};

int kiln_texture_split(const char* scope) {
  if (!scope || !strcmp(scope, "global")) return 0;
  for (size_t i = 0; i < sizeof(scopes) / sizeof(scopes[0]); i++)
    if (!strcmp(scope, scopes[i].name)) return scopes[i].split;
  return -1;
}

const char* kiln_texture_scope_name(const char* scope) {
  for (size_t i = 0; scope && i < sizeof(scopes) / sizeof(scopes[0]); i++)
    if (!strcmp(scope, scopes[i].name)) return scopes[i].name;
  return "global";
}

int kiln_texture_check(const int64_t* shape, int32_t ndim, DLDataType dtype, const char* scope) {
  int split = kiln_texture_split(scope);
  if (split < 0)
    return kiln_error("unknown memory scope '%.64s': use global, global.texture, global.texture-nhwc or "
                      "global.texture-weight", scope);
  if (split == 0) return 0;
  if (ndim == 5 && shape[4] == 4 && dtype.code == KILN_DL_FLOAT && dtype.lanes == 1 &&
      (dtype.bits == 32 || dtype.bits == 16))
    return 0;
  char dt[16] = "?", dims[200] = "";
  kiln_dtype_format(dtype, dt, sizeof(dt));
  size_t used = 0;
  for (int i = 0; i < ndim && used < sizeof(dims); i++)
    used += (size_t)snprintf(dims + used, sizeof(dims) - used, "%s%lld", i ? ", " : "", (long long)shape[i]);
  return kiln_error("scope %s holds float32/float16 5-D tensors whose innermost dimension is 4 (NCHW4c, "
                    "NHWC4c, OIHW4o), got %s[%s]; keep it in scope 'global'", scope, dt, dims);
}

static size_t prod(const int64_t* dims, int from, int to) {
  size_t p = 1;
  for (int i = from; i < to; i++) p *= (size_t)dims[i];
  return p;
}

void kiln_texture_fold(const int64_t* shape, const char* scope, size_t max_w, size_t max_h, size_t* width,
                       size_t* height) {
  int preferred = kiln_texture_split(scope);
  const int order[5] = {preferred, 3, 2, 1, 4};
  for (int i = 0; i < 5; i++) {
    if (i > 0 && order[i] == preferred) continue;
    size_t w = prod(shape, order[i], 4), h = prod(shape, 0, order[i]);
    if (w <= max_w && h <= max_h) {
      *width = w;
      *height = h;
      return;
    }
  }
  *width = prod(shape, preferred, 4);
  *height = prod(shape, 0, preferred);
}

int kiln_ndarray_alloc_scoped(const int64_t* shape, int32_t ndim, DLDataType dtype, DLDevice device,
                              const char* mem_scope, DLTensor** out) {
  return kiln_texture_alloc(shape, ndim, dtype, device, mem_scope, (size_t)-1, out);
}

int kiln_texture_alloc(const int64_t* shape, int32_t ndim, DLDataType dtype, DLDevice device, const char* mem_scope,
                       size_t limit, DLTensor** out) {
  int split = kiln_texture_split(mem_scope);
  if (split <= 0) {
    if (split < 0) return kiln_texture_check(shape, ndim, dtype, mem_scope);
    return kiln_ndarray_alloc(shape, ndim, dtype, device, out);
  }
  if (device.device_type != KILN_DEVICE_OPENCL)
    return kiln_error("scope %s is an OpenCL image; device type %d has none (allocate on an OpenCL device, "
                      "type 4)", mem_scope, device.device_type);
  if (kiln_texture_check(shape, ndim, dtype, mem_scope)) return -1;
  size_t max_w, max_h, w, h;
  if (kiln_opencl_image_limits(device.device_id, &max_w, &max_h)) return -1;
  kiln_texture_fold(shape, mem_scope, max_w < limit ? max_w : limit, max_h < limit ? max_h : limit, &w, &h);
  DLTensor* t = calloc(1, sizeof(DLTensor) + sizeof(int64_t) * 5);
  if (!t) return kiln_error("out of memory allocating an array header");
  if (kiln_opencl_alloc_image(device.device_id, w, h, dtype.bits, &t->data)) {
    free(t);
    return -1;
  }
  t->device = device;
  t->ndim = 5;
  t->dtype = dtype;
  t->shape = (int64_t*)(t + 1);
  memcpy(t->shape, shape, sizeof(int64_t) * 5);
  *out = t;
  return 0;
}
