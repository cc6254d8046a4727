/* The OpenCL API as the runtime uses it, loaded with dlopen at run time (opencl.c).
 *
 * No OpenCL header or library is needed to build the runtime: a board without OpenCL runs the
 * same binary and simply has no OpenCL devices. Only the calls and constants kiln needs are
 * declared here, with the types of the OpenCL 1.2 specification.
 */
#ifndef KILN_OPENCL_H_
#define KILN_OPENCL_H_

#include <stddef.h>
#include <stdint.h>

typedef int32_t cl_int;
typedef uint32_t cl_uint;
typedef uint64_t cl_ulong;
typedef cl_ulong cl_bitfield;
typedef struct _cl_platform_id* cl_platform_id;
typedef struct _cl_device_id* cl_device_id;
typedef struct _cl_context* cl_context;
typedef struct _cl_command_queue* cl_command_queue;
typedef struct _cl_mem* cl_mem;
typedef struct _cl_program* cl_program;
typedef struct _cl_kernel* cl_kernel;
typedef struct _cl_event* cl_event;

#define CL_SUCCESS 0
#define CL_DEVICE_TYPE_ALL 0xFFFFFFFFu
#define CL_PLATFORM_NAME 0x0902
#define CL_DEVICE_MAX_COMPUTE_UNITS 0x1002
#define CL_DEVICE_MAX_WORK_GROUP_SIZE 0x1004
#define CL_DEVICE_MAX_WORK_ITEM_SIZES 0x1005
#define CL_DEVICE_MAX_CLOCK_FREQUENCY 0x100C
#define CL_DEVICE_IMAGE_SUPPORT 0x1016
#define CL_DEVICE_LOCAL_MEM_SIZE 0x1023
#define CL_DEVICE_NAME 0x102B
#define CL_DEVICE_VERSION 0x102F
#define CL_MEM_READ_WRITE 1u
#define CL_QUEUE_PROFILING_ENABLE 2u
#define CL_MEM_CONTEXT 0x1106
#define CL_PROGRAM_BUILD_LOG 0x1183
#define CL_PROFILING_COMMAND_START 0x1282
#define CL_PROFILING_COMMAND_END 0x1283
/* Images (texture scopes, docs/adreno.md). */
#define CL_DEVICE_IMAGE2D_MAX_WIDTH 0x1011
#define CL_DEVICE_IMAGE2D_MAX_HEIGHT 0x1012
#define CL_RGBA 0x10B5
#define CL_HALF_FLOAT 0x10DD
#define CL_FLOAT 0x10DE
#define CL_MEM_OBJECT_IMAGE2D 0x10F1
#define CL_MEM_TYPE 0x1100
#define CL_IMAGE_ELEMENT_SIZE 0x1111
#define CL_IMAGE_WIDTH 0x1114
#define CL_IMAGE_HEIGHT 0x1115

typedef struct {
  cl_uint image_channel_order;
  cl_uint image_channel_data_type;
} cl_image_format;

typedef struct {
  cl_uint image_type;
  size_t image_width, image_height, image_depth, image_array_size, image_row_pitch, image_slice_pitch;
  cl_uint num_mip_levels, num_samples;
  cl_mem buffer;
} cl_image_desc;

/* The entry points, filled by kiln_opencl_load(). */
typedef struct {
  cl_int (*GetPlatformIDs)(cl_uint, cl_platform_id*, cl_uint*);
  cl_int (*GetPlatformInfo)(cl_platform_id, cl_uint, size_t, void*, size_t*);
  cl_int (*GetDeviceIDs)(cl_platform_id, cl_bitfield, cl_uint, cl_device_id*, cl_uint*);
  cl_int (*GetDeviceInfo)(cl_device_id, cl_uint, size_t, void*, size_t*);
  cl_context (*CreateContext)(const intptr_t*, cl_uint, const cl_device_id*, void*, void*, cl_int*);
  cl_command_queue (*CreateCommandQueue)(cl_context, cl_device_id, cl_bitfield, cl_int*);
  cl_mem (*CreateBuffer)(cl_context, cl_bitfield, size_t, void*, cl_int*);
  cl_int (*ReleaseMemObject)(cl_mem);
  cl_int (*GetMemObjectInfo)(cl_mem, cl_uint, size_t, void*, size_t*);
  cl_int (*EnqueueWriteBuffer)(cl_command_queue, cl_mem, cl_uint, size_t, size_t, const void*, cl_uint,
                               const cl_event*, cl_event*);
  cl_int (*EnqueueReadBuffer)(cl_command_queue, cl_mem, cl_uint, size_t, size_t, void*, cl_uint,
                              const cl_event*, cl_event*);
  cl_int (*EnqueueCopyBuffer)(cl_command_queue, cl_mem, cl_mem, size_t, size_t, size_t, cl_uint,
                              const cl_event*, cl_event*);
  cl_int (*Finish)(cl_command_queue);
  cl_program (*CreateProgramWithSource)(cl_context, cl_uint, const char**, const size_t*, cl_int*);
  cl_int (*BuildProgram)(cl_program, cl_uint, const cl_device_id*, const char*, void*, void*);
  cl_int (*GetProgramBuildInfo)(cl_program, cl_device_id, cl_uint, size_t, void*, size_t*);
  cl_int (*ReleaseProgram)(cl_program);
  cl_kernel (*CreateKernel)(cl_program, const char*, cl_int*);
  cl_int (*ReleaseKernel)(cl_kernel);
  cl_int (*SetKernelArg)(cl_kernel, cl_uint, size_t, const void*);
  cl_int (*EnqueueNDRangeKernel)(cl_command_queue, cl_kernel, cl_uint, const size_t*, const size_t*,
                                 const size_t*, cl_uint, const cl_event*, cl_event*);
  cl_int (*GetEventProfilingInfo)(cl_event, cl_uint, size_t, void*, size_t*);
  cl_int (*ReleaseEvent)(cl_event);
  /* OpenCL 1.2; NULL when the library lacks it (then texture modules cannot run). */
  cl_mem (*CreateImage)(cl_context, cl_bitfield, const cl_image_format*, const cl_image_desc*, void*, cl_int*);
  /* OpenCL 1.0 image calls; NULL when missing (then images cannot be filled or read). */
  cl_int (*GetImageInfo)(cl_mem, cl_uint, size_t, void*, size_t*);
  cl_int (*EnqueueWriteImage)(cl_command_queue, cl_mem, cl_uint, const size_t*, const size_t*, size_t, size_t,
                              const void*, cl_uint, const cl_event*, cl_event*);
  cl_int (*EnqueueReadImage)(cl_command_queue, cl_mem, cl_uint, const size_t*, const size_t*, size_t, size_t,
                             void*, cl_uint, const cl_event*, cl_event*);
  cl_int (*EnqueueCopyImage)(cl_command_queue, cl_mem, cl_mem, const size_t*, const size_t*, const size_t*,
                             cl_uint, const cl_event*, cl_event*);
  cl_int (*EnqueueCopyImageToBuffer)(cl_command_queue, cl_mem, cl_mem, const size_t*, const size_t*, size_t,
                                     cl_uint, const cl_event*, cl_event*);
  cl_int (*EnqueueCopyBufferToImage)(cl_command_queue, cl_mem, cl_mem, size_t, const size_t*, const size_t*,
                                     cl_uint, const cl_event*, cl_event*);
} KilnCL;

#define KILN_CL_MAX_DEVICES 16

typedef struct {
  cl_device_id id;
  cl_context context;        /* one per device, made on first use */
  cl_command_queue queue;    /* in order, profiling enabled */
} KilnCLDevice;

/* The loaded API and the devices of the chosen platform; NULL when this machine has no OpenCL
 * (no libOpenCL, no platform, or no device). Never fails otherwise. */
const KilnCL* kiln_opencl_api(int* num_devices);
/* Device `id` with its context and queue created; -1 with kiln_last_error if absent. */
int kiln_opencl_device(int32_t id, KilnCLDevice** out);
/* The device whose context owns `mem`, or -1. */
int32_t kiln_opencl_device_of(cl_mem mem);
/* An RGBA image of width x height texels (CL_FLOAT for bits 32, CL_HALF_FLOAT for 16) on device
 * `device_id`, checked against the device's image limits; -1 with kiln_last_error otherwise. */
int kiln_opencl_alloc_image(int32_t device_id, size_t width, size_t height, int bits, void** out);
/* The device's largest 2-D image (CL_DEVICE_IMAGE2D_MAX_WIDTH / HEIGHT); -1 with kiln_last_error
 * when the device has no image support. */
int kiln_opencl_image_limits(int32_t device_id, size_t* max_width, size_t* max_height);
/* opencl_image.c. 1 (with the image's size) when `mem` is a 2-D image, 0 for a buffer. */
int kiln_opencl_image_dims(cl_mem mem, size_t* width, size_t* height, size_t* texel_bytes);
/* Byte ranges of the row-major tensor an image holds (blocking). */
int kiln_opencl_image_write(cl_command_queue q, cl_mem img, uint64_t offset, const void* data, size_t n);
int kiln_opencl_image_read(cl_command_queue q, cl_mem img, uint64_t offset, void* data, size_t n);
/* n bytes between two objects of one device, at least one an image (queued, not waited for). */
int kiln_opencl_image_copy(cl_command_queue q, cl_mem from, size_t from_offset, cl_mem to, size_t to_offset,
                           size_t n);
/* "clBuildProgram failed (-11: CL_BUILD_PROGRAM_FAILURE)"-style text for an error code. */
const char* kiln_opencl_error_name(cl_int code);

#endif
