/* Bytes in and out of OpenCL images (texture-scoped arrays, docs/adreno.md "Texture scopes").
 *
 * A texture array's image holds the tensor's row-major bytes texel after texel, row after row
 * (the fold of kiln/tir/transform/texture.py keeps the element order), so byte `o` of the
 * tensor is byte `o % row` of image row `o / row`. Reads and writes of whole rows go straight
 * to the image; a range that starts or ends inside a row goes through a host copy of the rows it
 * touches (RPC uploads arrive in chunks of any size).
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "opencl.h"

int kiln_opencl_image_dims(cl_mem mem, size_t* width, size_t* height, size_t* texel_bytes) {
  const KilnCL* cl = kiln_opencl_api(NULL);
  cl_uint type = 0;
  if (!cl || !mem || !cl->GetImageInfo || cl->GetMemObjectInfo(mem, CL_MEM_TYPE, sizeof type, &type, NULL) ||
      type != CL_MEM_OBJECT_IMAGE2D)
    return 0;
  *width = *height = *texel_bytes = 0;
  cl->GetImageInfo(mem, CL_IMAGE_WIDTH, sizeof *width, width, NULL);
  cl->GetImageInfo(mem, CL_IMAGE_HEIGHT, sizeof *height, height, NULL);
  cl->GetImageInfo(mem, CL_IMAGE_ELEMENT_SIZE, sizeof *texel_bytes, texel_bytes, NULL);
  return 1;
}

/* Rows [row0, row0 + rows) of the image to or from `host` (blocking). */
static int rows_io(cl_command_queue q, cl_mem img, size_t width, size_t row0, size_t rows, void* host, int write) {
  const KilnCL* cl = kiln_opencl_api(NULL);
  size_t origin[3] = {0, row0, 0}, region[3] = {width, rows, 1};
  cl_int err = write ? cl->EnqueueWriteImage(q, img, 1, origin, region, 0, 0, host, 0, NULL, NULL)
                     : cl->EnqueueReadImage(q, img, 1, origin, region, 0, 0, host, 0, NULL, NULL);
  return err ? kiln_error("opencl: %s rows %zu..%zu of a %zu-texel-wide image failed (%d: %s)",
                          write ? "writing" : "reading", row0, row0 + rows, width, err, kiln_opencl_error_name(err))
             : 0;
}

static int image_io(cl_command_queue q, cl_mem img, uint64_t offset, void* data, size_t n, int write) {
  size_t w, h, texel;
  if (!kiln_opencl_image_dims(img, &w, &h, &texel) || !texel)
    return kiln_error("opencl: not an image of this runtime");
  size_t row = w * texel;
  if (offset > (uint64_t)row * h || n > row * h - offset)
    return kiln_error("opencl: byte range [%llu, %llu) is outside the %zu x %zu image's %zu bytes",
                      (unsigned long long)offset, (unsigned long long)(offset + n), w, h, row * h);
  if (!n) return 0;
  size_t first = (size_t)offset / row, last = ((size_t)offset + n - 1) / row, rows = last - first + 1;
  if (offset % row == 0 && n % row == 0) return rows_io(q, img, w, first, rows, data, write);
  char* staged = malloc(rows * row);
  if (!staged) return kiln_error("out of memory staging %zu image rows", rows);
  size_t skip = (size_t)offset - first * row;
  int rc = 0;
  if (write) {  /* keep the bytes of the partial rows that are not written */
    rc = rows_io(q, img, w, first, rows, staged, 0);
    if (!rc) memcpy(staged + skip, data, n);
    if (!rc) rc = rows_io(q, img, w, first, rows, staged, 1);
  } else {
    rc = rows_io(q, img, w, first, rows, staged, 0);
    if (!rc) memcpy(data, staged + skip, n);
  }
  free(staged);
  return rc;
}

int kiln_opencl_image_write(cl_command_queue q, cl_mem img, uint64_t offset, const void* data, size_t n) {
  return image_io(q, img, offset, (void*)data, n, 1);
}

int kiln_opencl_image_read(cl_command_queue q, cl_mem img, uint64_t offset, void* data, size_t n) {
  return image_io(q, img, offset, data, n, 0);
}

/* A whole array between two memory objects of one device, at least one an image. Images of
 * different folds (an NCHW4c texture into an NHWC4c-folded one) hold the same bytes in rows of
 * other widths, so they are copied through a buffer. */
int kiln_opencl_image_copy(cl_command_queue q, cl_mem from, size_t from_offset, cl_mem to, size_t to_offset,
                           size_t n) {
  const KilnCL* cl = kiln_opencl_api(NULL);
  size_t fw = 0, fh = 0, ft = 0, tw = 0, th = 0, tt = 0;
  int from_img = kiln_opencl_image_dims(from, &fw, &fh, &ft), to_img = kiln_opencl_image_dims(to, &tw, &th, &tt);
  if ((from_img && fw * fh * ft != n) || (to_img && tw * th * tt != n))
    return kiln_error("opencl: an image copy covers whole images only (%zu bytes asked)", n);
  if (!cl->EnqueueCopyImage || !cl->EnqueueCopyImageToBuffer || !cl->EnqueueCopyBufferToImage)
    return kiln_error("opencl: the OpenCL library lacks the image copy calls");
  size_t origin[3] = {0, 0, 0};
  cl_int err;
  if (from_img && to_img && fw == tw && fh == th) {
    size_t region[3] = {fw, fh, 1};
    err = cl->EnqueueCopyImage(q, from, to, origin, origin, region, 0, NULL, NULL);
  } else if (from_img && to_img) {
    cl_mem staging;
    int32_t dev = kiln_opencl_device_of(to);
    if (kiln_opencl_alloc(dev < 0 ? 0 : dev, n, (void**)&staging)) return -1;
    int rc = kiln_opencl_image_copy(q, from, 0, staging, 0, n) || kiln_opencl_image_copy(q, staging, 0, to, 0, n);
    kiln_opencl_free(staging);  /* released once the queued copies are done */
    return rc ? -1 : 0;
  } else if (from_img) {
    size_t region[3] = {fw, fh, 1};
    err = cl->EnqueueCopyImageToBuffer(q, from, to, origin, region, to_offset, 0, NULL, NULL);
  } else {
    size_t region[3] = {tw, th, 1};
    err = cl->EnqueueCopyBufferToImage(q, from, to, from_offset, origin, region, 0, NULL, NULL);
  }
  return err ? kiln_error("opencl: copying %zu bytes to or from an image failed (%d: %s)", n, err,
                          kiln_opencl_error_name(err))
             : 0;
}
