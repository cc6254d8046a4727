/* OpenCL devices: the library loaded with dlopen on first use, device memory, attributes.
 *
 * One kiln_rpc binary serves boards with and without a GPU: when libOpenCL.so.1 (the ICD
 * loader) is missing, or no platform has a device, there are simply no OpenCL devices and
 * `cl(0).exist` is false. Device i is the i-th device of the first platform that has one, or
 * of the platform whose name contains $KILN_OPENCL_PLATFORM.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "opencl.h"

static KilnCL cl;
static KilnCLDevice devices[KILN_CL_MAX_DEVICES];
static int num_devices = -1; /* -1: not looked for yet */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

const char* kiln_opencl_error_name(cl_int code) {
  switch (code) {
    case -1: return "CL_DEVICE_NOT_FOUND";
    case -4: return "CL_MEM_OBJECT_ALLOCATION_FAILURE";
    case -5: return "CL_OUT_OF_RESOURCES";
    case -6: return "CL_OUT_OF_HOST_MEMORY";
    case -11: return "CL_BUILD_PROGRAM_FAILURE";
    case -30: return "CL_INVALID_VALUE";
    case -38: return "CL_INVALID_MEM_OBJECT";
    case -46: return "CL_INVALID_KERNEL_NAME";
    case -48: return "CL_INVALID_KERNEL";
    case -49: return "CL_INVALID_ARG_INDEX";
    case -50: return "CL_INVALID_ARG_VALUE";
    case -51: return "CL_INVALID_ARG_SIZE";
    case -52: return "CL_INVALID_KERNEL_ARGS";
    case -53: return "CL_INVALID_WORK_DIMENSION";
    case -54: return "CL_INVALID_WORK_GROUP_SIZE (the block is larger than the device allows)";
    case -55: return "CL_INVALID_WORK_ITEM_SIZE";
    case -63: return "CL_INVALID_GLOBAL_WORK_SIZE";
    default: return "an OpenCL error";
  }
}

static int load_library(void) {
  void* lib = dlopen("libOpenCL.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) lib = dlopen("libOpenCL.so", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return -1;
  struct { void** slot; const char* name; } syms[] = {
      {(void**)&cl.GetPlatformIDs, "clGetPlatformIDs"}, {(void**)&cl.GetPlatformInfo, "clGetPlatformInfo"},
      {(void**)&cl.GetDeviceIDs, "clGetDeviceIDs"}, {(void**)&cl.GetDeviceInfo, "clGetDeviceInfo"},
      {(void**)&cl.CreateContext, "clCreateContext"}, {(void**)&cl.CreateCommandQueue, "clCreateCommandQueue"},
      {(void**)&cl.CreateBuffer, "clCreateBuffer"}, {(void**)&cl.ReleaseMemObject, "clReleaseMemObject"},
      {(void**)&cl.GetMemObjectInfo, "clGetMemObjectInfo"},
      {(void**)&cl.EnqueueWriteBuffer, "clEnqueueWriteBuffer"}, {(void**)&cl.EnqueueReadBuffer, "clEnqueueReadBuffer"},
      {(void**)&cl.EnqueueCopyBuffer, "clEnqueueCopyBuffer"}, {(void**)&cl.Finish, "clFinish"},
      {(void**)&cl.CreateProgramWithSource, "clCreateProgramWithSource"},
      {(void**)&cl.BuildProgram, "clBuildProgram"}, {(void**)&cl.GetProgramBuildInfo, "clGetProgramBuildInfo"},
      {(void**)&cl.ReleaseProgram, "clReleaseProgram"}, {(void**)&cl.CreateKernel, "clCreateKernel"},
      {(void**)&cl.ReleaseKernel, "clReleaseKernel"}, {(void**)&cl.SetKernelArg, "clSetKernelArg"},
      {(void**)&cl.EnqueueNDRangeKernel, "clEnqueueNDRangeKernel"},
      {(void**)&cl.GetEventProfilingInfo, "clGetEventProfilingInfo"}, {(void**)&cl.ReleaseEvent, "clReleaseEvent"}};
  for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
    if (!(*syms[i].slot = dlsym(lib, syms[i].name))) {
      dlclose(lib);
      return -1;
    }
  }
  *(void**)&cl.CreateImage = dlsym(lib, "clCreateImage");
  *(void**)&cl.GetImageInfo = dlsym(lib, "clGetImageInfo");
  *(void**)&cl.EnqueueWriteImage = dlsym(lib, "clEnqueueWriteImage");
  *(void**)&cl.EnqueueReadImage = dlsym(lib, "clEnqueueReadImage");
  *(void**)&cl.EnqueueCopyImage = dlsym(lib, "clEnqueueCopyImage");
  *(void**)&cl.EnqueueCopyImageToBuffer = dlsym(lib, "clEnqueueCopyImageToBuffer");
  *(void**)&cl.EnqueueCopyBufferToImage = dlsym(lib, "clEnqueueCopyBufferToImage");
  return 0;
}

/* The platform's devices, once. Failures mean "no OpenCL here", never an error. */
static void find_devices(void) {
  num_devices = 0;
  if (load_library()) return;
  cl_platform_id platforms[16];
  cl_uint np = 0;
  if (cl.GetPlatformIDs(16, platforms, &np) != CL_SUCCESS) return;
  const char* wanted = getenv("KILN_OPENCL_PLATFORM");
  for (cl_uint p = 0; p < np && p < 16; p++) {
    if (wanted && *wanted) {
      char name[256] = "";
      cl.GetPlatformInfo(platforms[p], CL_PLATFORM_NAME, sizeof(name) - 1, name, NULL);
      if (!strstr(name, wanted)) continue;
    }
    cl_device_id ids[KILN_CL_MAX_DEVICES];
    cl_uint nd = 0;
    if (cl.GetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, KILN_CL_MAX_DEVICES, ids, &nd) != CL_SUCCESS || !nd)
      continue;
    for (cl_uint d = 0; d < nd && d < KILN_CL_MAX_DEVICES; d++) devices[d].id = ids[d];
    num_devices = (int)(nd < KILN_CL_MAX_DEVICES ? nd : KILN_CL_MAX_DEVICES);
    return;
  }
}

const KilnCL* kiln_opencl_api(int* count) {
  pthread_mutex_lock(&lock);
  if (num_devices < 0) find_devices();
  pthread_mutex_unlock(&lock);
  if (count) *count = num_devices;
  return num_devices > 0 ? &cl : NULL;
}

int kiln_opencl_device(int32_t id, KilnCLDevice** out) {
  int n = 0;
  if (!kiln_opencl_api(&n) || id < 0 || id >= n)
    return kiln_error("opencl(%d) does not exist: this machine has %d OpenCL device(s)%s", id, n,
                      n ? "" : " (no libOpenCL.so.1, or no platform with a device; install an "
                               "OpenCL driver such as pocl-opencl-icd and check with clinfo)");
  KilnCLDevice* d = &devices[id];
  pthread_mutex_lock(&lock);
  cl_int err = CL_SUCCESS;
  if (!d->context) d->context = cl.CreateContext(NULL, 1, &d->id, NULL, NULL, &err);
  if (d->context && !d->queue) d->queue = cl.CreateCommandQueue(d->context, d->id, CL_QUEUE_PROFILING_ENABLE, &err);
  pthread_mutex_unlock(&lock);
  if (!d->queue) return kiln_error("opencl(%d): cannot create a context and queue (%d: %s)", id, err,
                                   kiln_opencl_error_name(err));
  *out = d;
  return 0;
}

int32_t kiln_opencl_device_of(cl_mem mem) {
  cl_context ctx = NULL;
  if (!mem || !kiln_opencl_api(NULL) || cl.GetMemObjectInfo(mem, CL_MEM_CONTEXT, sizeof(ctx), &ctx, NULL))
    return -1;
  for (int i = 0; i < num_devices; i++)
    if (devices[i].context == ctx) return i;
  return -1;
}

/* ---- memory (ndarray.c dispatches here for device type 4) ------------------------------- */
int kiln_opencl_alloc(int32_t device_id, size_t nbytes, void** out) {
  KilnCLDevice* d;
  if (kiln_opencl_device(device_id, &d)) return -1;
  cl_int err;
  /* OpenCL refuses empty buffers; an empty array still needs a valid handle. */
  cl_mem mem = cl.CreateBuffer(d->context, CL_MEM_READ_WRITE, nbytes ? nbytes : 1, NULL, &err);
  if (!mem) return kiln_error("opencl(%d): cannot allocate %zu bytes (%d: %s)", device_id, nbytes, err,
                              kiln_opencl_error_name(err));
  *out = mem;
  return 0;
}

int kiln_opencl_image_limits(int32_t device_id, size_t* max_w, size_t* max_h) {
  KilnCLDevice* d;
  if (kiln_opencl_device(device_id, &d)) return -1;
  cl_uint images = 0;
  *max_w = *max_h = 0;
  cl.GetDeviceInfo(d->id, CL_DEVICE_IMAGE_SUPPORT, sizeof images, &images, NULL);
  cl.GetDeviceInfo(d->id, CL_DEVICE_IMAGE2D_MAX_WIDTH, sizeof *max_w, max_w, NULL);
  cl.GetDeviceInfo(d->id, CL_DEVICE_IMAGE2D_MAX_HEIGHT, sizeof *max_h, max_h, NULL);
  if (!images || !cl.CreateImage || !cl.GetImageInfo || !cl.EnqueueWriteImage || !cl.EnqueueReadImage)
    return kiln_error("opencl(%d) has no image support%s; build for plain 'opencl' instead of texture scopes",
                      device_id, images ? " in its OpenCL library (clCreateImage is OpenCL 1.2)" : "");
  return 0;
}

int kiln_opencl_alloc_image(int32_t device_id, size_t width, size_t height, int bits, void** out) {
  KilnCLDevice* d;
  size_t max_w = 0, max_h = 0;
  if (kiln_opencl_device(device_id, &d) || kiln_opencl_image_limits(device_id, &max_w, &max_h)) return -1;
  if (!width || !height || width > max_w || height > max_h)
    return kiln_error("a texture of %zu x %zu texels does not fit opencl(%d)'s images (at most %zu x %zu): "
                      "build with -texture_spatial_limit=%zu", width, height, device_id, max_w, max_h,
                      max_w < max_h ? max_w : max_h);
  cl_image_format fmt = {CL_RGBA, bits == 16 ? CL_HALF_FLOAT : CL_FLOAT};
  cl_image_desc desc;
  memset(&desc, 0, sizeof desc);
  desc.image_type = CL_MEM_OBJECT_IMAGE2D;
  desc.image_width = width;
  desc.image_height = height;
  cl_int err;
  cl_mem mem = cl.CreateImage(d->context, CL_MEM_READ_WRITE, &fmt, &desc, NULL, &err);
  if (!mem)
    return kiln_error("opencl(%d): cannot create a %zu x %zu image (%d: %s)", device_id, width, height, err,
                      kiln_opencl_error_name(err));
  *out = mem;
  return 0;
}

void kiln_opencl_free(void* mem) {
  if (mem && kiln_opencl_api(NULL)) cl.ReleaseMemObject((cl_mem)mem);
}

static int queue_of(const DLTensor* t, cl_command_queue* q) {
  KilnCLDevice* d;
  if (kiln_opencl_device(t->device.device_id, &d)) return -1;
  *q = d->queue;
  return 0;
}

int kiln_opencl_write(const DLTensor* t, uint64_t offset, const void* data, size_t n) {
  cl_command_queue q;
  if (!n) return 0;
  if (queue_of(t, &q)) return -1;
  size_t w, h, texel;
  if (kiln_opencl_image_dims((cl_mem)t->data, &w, &h, &texel))  /* a texture-scoped array */
    return kiln_opencl_image_write(q, (cl_mem)t->data, t->byte_offset + offset, data, n);
  cl_int err = cl.EnqueueWriteBuffer(q, (cl_mem)t->data, 1, (size_t)(t->byte_offset + offset), n, data, 0, NULL, NULL);
  return err ? kiln_error("opencl: writing %zu bytes failed (%d: %s)", n, err, kiln_opencl_error_name(err)) : 0;
}

int kiln_opencl_read(const DLTensor* t, uint64_t offset, void* data, size_t n) {
  cl_command_queue q;
  if (!n) return 0;
  if (queue_of(t, &q)) return -1;
  size_t w, h, texel;
  if (kiln_opencl_image_dims((cl_mem)t->data, &w, &h, &texel))
    return kiln_opencl_image_read(q, (cl_mem)t->data, t->byte_offset + offset, data, n);
  cl_int err = cl.EnqueueReadBuffer(q, (cl_mem)t->data, 1, (size_t)(t->byte_offset + offset), n, data, 0, NULL, NULL);
  return err ? kiln_error("opencl: reading %zu bytes failed (%d: %s)", n, err, kiln_opencl_error_name(err)) : 0;
}

/* Either side (or both) on an OpenCL device; same-device copies stay on the device. */
int kiln_opencl_copy(const DLTensor* from, DLTensor* to, size_t n) {
  int from_cl = from->device.device_type == KILN_DEVICE_OPENCL, to_cl = to->device.device_type == KILN_DEVICE_OPENCL;
  if (!n) return 0;
  if (from_cl && !to_cl) return kiln_opencl_read(from, 0, (char*)to->data + to->byte_offset, n);
  if (!from_cl && to_cl) return kiln_opencl_write(to, 0, (const char*)from->data + from->byte_offset, n);
  if (from->device.device_id != to->device.device_id) {
    void* host = malloc(n);
    int rc = !host ? kiln_error("out of memory staging a copy between OpenCL devices")
                   : kiln_opencl_read(from, 0, host, n) || kiln_opencl_write(to, 0, host, n) ? -1 : 0;
    free(host);
    return rc;
  }
  cl_command_queue q;
  if (queue_of(to, &q)) return -1;
  size_t w, h, texel;
  if (kiln_opencl_image_dims((cl_mem)from->data, &w, &h, &texel) ||
      kiln_opencl_image_dims((cl_mem)to->data, &w, &h, &texel))
    return kiln_opencl_image_copy(q, (cl_mem)from->data, (size_t)from->byte_offset, (cl_mem)to->data,
                                  (size_t)to->byte_offset, n);
  cl_int err = cl.EnqueueCopyBuffer(q, (cl_mem)from->data, (cl_mem)to->data, (size_t)from->byte_offset,
                                    (size_t)to->byte_offset, n, 0, NULL, NULL);
  return err ? kiln_error("opencl: copying %zu bytes failed (%d: %s)", n, err, kiln_opencl_error_name(err)) : 0;
}

int kiln_opencl_sync(int32_t device_id) {
  KilnCLDevice* d;
  if (kiln_opencl_device(device_id, &d)) return -1;
  cl_int err = cl.Finish(d->queue);
  return err ? kiln_error("opencl(%d): a queued command failed (%d: %s)", device_id, err,
                          kiln_opencl_error_name(err)) : 0;
}

/* ---- attributes ---------------------------------------------------------------------------- */
int kiln_opencl_attr(int32_t device_id, const char* name, int64_t* ints, int* count, char* text, size_t size) {
  KilnCLDevice* d;
  if (kiln_opencl_device(device_id, &d)) return -1;
  *count = 1;
  size_t st = 0;
  cl_uint u = 0;
  cl_ulong ul = 0;
  if (!strcmp(name, "max_threads_per_block")) {
    cl.GetDeviceInfo(d->id, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof(st), &st, NULL);
    ints[0] = (int64_t)st;
  } else if (!strcmp(name, "max_shared_memory_per_block")) {
    cl.GetDeviceInfo(d->id, CL_DEVICE_LOCAL_MEM_SIZE, sizeof(ul), &ul, NULL);
    ints[0] = (int64_t)ul;
  } else if (!strcmp(name, "warp_size")) {
    ints[0] = 1; /* OpenCL promises no lockstep width */
  } else if (!strcmp(name, "multi_processor_count")) {
    cl.GetDeviceInfo(d->id, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof(u), &u, NULL);
    ints[0] = u;
  } else if (!strcmp(name, "max_clock_rate")) {
    cl.GetDeviceInfo(d->id, CL_DEVICE_MAX_CLOCK_FREQUENCY, sizeof(u), &u, NULL);
    ints[0] = (int64_t)u * 1000;
  } else if (!strcmp(name, "image_support")) {
    cl.GetDeviceInfo(d->id, CL_DEVICE_IMAGE_SUPPORT, sizeof(u), &u, NULL);
    ints[0] = u != 0;
  } else if (!strcmp(name, "max_thread_dimensions")) {
    size_t dims[3] = {0, 0, 0};
    cl.GetDeviceInfo(d->id, CL_DEVICE_MAX_WORK_ITEM_SIZES, sizeof(dims), dims, NULL);
    for (int i = 0; i < 3; i++) ints[i] = (int64_t)dims[i];
    *count = 3;
  } else if (!strcmp(name, "device_name") || !strcmp(name, "compute_version")) {
    char buf[256] = "";
    int is_name = !strcmp(name, "device_name");
    cl.GetDeviceInfo(d->id, is_name ? CL_DEVICE_NAME : CL_DEVICE_VERSION, sizeof(buf) - 1, buf, NULL);
    const char* v = buf;
    size_t len = strlen(buf);
    if (!is_name) { /* "OpenCL 3.0 <vendor text>" -> "3.0" */
      const char* sp = strchr(buf, ' ');
      v = sp ? sp + 1 : buf;
      len = strcspn(v, " ");
    }
    while (len && (v[len - 1] == ' ' || v[len - 1] == '\n')) len--;
    snprintf(text, size, "%.*s", (int)len, v);
    *count = 0;
  } else {
    return kiln_error("OpenCL devices have no attribute '%s'", name);
  }
  return 0;
}
