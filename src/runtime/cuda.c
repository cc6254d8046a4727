/* CUDA devices and the CUDA half of GPU modules, through the driver API opened with dlopen
 * ("libcuda.so.1") at first use: no CUDA header or library is needed to build the runtime, and a
 * machine without an NVIDIA driver simply has no CUDA devices.
 *
 * Arrays hold a CUdeviceptr in DLTensor.data. Each device is used through its primary context
 * (shared with the CUDA runtime, torch, cupy); everything runs on the legacy default stream.
 * Modules load the PTX of the metadata's device_code (the driver compiles it for the device) once
 * per device on first launch; kernels are launched by the __kiln_device_launch hook
 * (docs/abi.md, "GPU modules").
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st* CUcontext;
typedef struct CUmod_st* CUmodule;
typedef struct CUfunc_st* CUfunction;
typedef struct CUevent_st* CUevent;
typedef struct CUstream_st* CUstream;

enum { CU_ATTR_MAX_THREADS_PER_BLOCK = 1, CU_ATTR_MAX_BLOCK_DIM_X = 2, CU_ATTR_MAX_BLOCK_DIM_Y = 3,
       CU_ATTR_MAX_BLOCK_DIM_Z = 4, CU_ATTR_MAX_SHARED_MEMORY_PER_BLOCK = 8, CU_ATTR_WARP_SIZE = 10,
       CU_ATTR_CLOCK_RATE = 13, CU_ATTR_MULTIPROCESSOR_COUNT = 16, CU_ATTR_CC_MAJOR = 75,
       CU_ATTR_CC_MINOR = 76, CU_ATTR_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97 };
enum { CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8 };
enum { CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9 };

#define KILN_CUDA_MAX_DEVICES 16

static struct {
  CUresult (*Init)(unsigned);
  CUresult (*DeviceGetCount)(int*);
  CUresult (*DeviceGet)(CUdevice*, int);
  CUresult (*DeviceGetAttribute)(int*, int, CUdevice);
  CUresult (*DeviceGetName)(char*, int, CUdevice);
  CUresult (*DevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*CtxSetCurrent)(CUcontext);
  CUresult (*CtxSynchronize)(void);
  CUresult (*MemAlloc)(CUdeviceptr*, size_t);
  CUresult (*MemFree)(CUdeviceptr);
  CUresult (*MemcpyHtoD)(CUdeviceptr, const void*, size_t);
  CUresult (*MemcpyDtoH)(void*, CUdeviceptr, size_t);
  CUresult (*MemcpyDtoD)(CUdeviceptr, CUdeviceptr, size_t);
  CUresult (*PointerGetAttribute)(void*, int, CUdeviceptr);
  CUresult (*ModuleLoadData)(CUmodule*, const void*);
  CUresult (*ModuleUnload)(CUmodule);
  CUresult (*ModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*FuncSetAttribute)(CUfunction, int, int);
  CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                           CUstream, void**, void**);
  CUresult (*EventCreate)(CUevent*, unsigned);
  CUresult (*EventRecord)(CUevent, CUstream);
  CUresult (*EventSynchronize)(CUevent);
  CUresult (*EventElapsedTime)(float*, CUevent, CUevent);
  CUresult (*EventDestroy)(CUevent);
  CUresult (*GetErrorString)(CUresult, const char**);
} cu;

static int cu_count = -1; /* devices; -1 until the driver was looked for */
static CUcontext contexts[KILN_CUDA_MAX_DEVICES];
static pthread_mutex_t cu_lock = PTHREAD_MUTEX_INITIALIZER;

static const char* cu_error_name(CUresult r) {
  const char* s = NULL;
  if (cu.GetErrorString && cu.GetErrorString(r, &s) == 0 && s) return s;
  return "unknown CUDA error";
}

static int cu_fail(CUresult r, const char* what) {
  return kiln_error("cuda: %s failed (%d: %s)", what, r, cu_error_name(r));
}

/* Open libcuda once; the number of devices (0 without a driver or GPU). */
int kiln_cuda_device_count(void) {
  pthread_mutex_lock(&cu_lock);
  if (cu_count < 0) {
    cu_count = 0;
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib) {
      struct { void** slot; const char* name; } syms[] = {
        {(void**)&cu.Init, "cuInit"}, {(void**)&cu.DeviceGetCount, "cuDeviceGetCount"},
        {(void**)&cu.DeviceGet, "cuDeviceGet"}, {(void**)&cu.DeviceGetAttribute, "cuDeviceGetAttribute"},
        {(void**)&cu.DeviceGetName, "cuDeviceGetName"},
        {(void**)&cu.DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"},
        {(void**)&cu.CtxSetCurrent, "cuCtxSetCurrent"}, {(void**)&cu.CtxSynchronize, "cuCtxSynchronize"},
        {(void**)&cu.MemAlloc, "cuMemAlloc_v2"}, {(void**)&cu.MemFree, "cuMemFree_v2"},
        {(void**)&cu.MemcpyHtoD, "cuMemcpyHtoD_v2"}, {(void**)&cu.MemcpyDtoH, "cuMemcpyDtoH_v2"},
        {(void**)&cu.MemcpyDtoD, "cuMemcpyDtoD_v2"}, {(void**)&cu.PointerGetAttribute, "cuPointerGetAttribute"},
        {(void**)&cu.ModuleLoadData, "cuModuleLoadData"}, {(void**)&cu.ModuleUnload, "cuModuleUnload"},
        {(void**)&cu.ModuleGetFunction, "cuModuleGetFunction"},
        {(void**)&cu.FuncSetAttribute, "cuFuncSetAttribute"}, {(void**)&cu.LaunchKernel, "cuLaunchKernel"},
        {(void**)&cu.EventCreate, "cuEventCreate"}, {(void**)&cu.EventRecord, "cuEventRecord"},
        {(void**)&cu.EventSynchronize, "cuEventSynchronize"},
        {(void**)&cu.EventElapsedTime, "cuEventElapsedTime"}, {(void**)&cu.EventDestroy, "cuEventDestroy_v2"},
        {(void**)&cu.GetErrorString, "cuGetErrorString"},
      };
      int ok = 1;
      for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++)
        if (!(*syms[i].slot = dlsym(lib, syms[i].name))) ok = 0;
      int n = 0;
      if (ok && cu.Init(0) == 0 && cu.DeviceGetCount(&n) == 0)
        cu_count = n > KILN_CUDA_MAX_DEVICES ? KILN_CUDA_MAX_DEVICES : n;
    }
  }
  int n = cu_count;
  pthread_mutex_unlock(&cu_lock);
  return n;
}

/* Make device d's primary context current in this thread. */
static int activate(int32_t d) {
  int n = kiln_cuda_device_count();
  if (d < 0 || d >= n)
    return kiln_error("cuda(%d) does not exist: this machine has %d CUDA device(s)%s", d, n,
                      n ? "" : " (needs an NVIDIA GPU and its driver, libcuda.so.1)");
  pthread_mutex_lock(&cu_lock);
  CUresult r = 0;
  if (!contexts[d]) {
    CUdevice dev;
    if (!(r = cu.DeviceGet(&dev, d))) r = cu.DevicePrimaryCtxRetain(&contexts[d], dev);
  }
  pthread_mutex_unlock(&cu_lock);
  if (r) return cu_fail(r, "opening the device's primary context");
  if ((r = cu.CtxSetCurrent(contexts[d]))) return cu_fail(r, "cuCtxSetCurrent");
  return 0;
}

/* ---- memory ------------------------------------------------------------------------------- */
int kiln_cuda_alloc(int32_t device_id, size_t nbytes, void** out) {
  if (activate(device_id)) return -1;
  CUdeviceptr p = 0;
  CUresult r = cu.MemAlloc(&p, nbytes ? nbytes : 1);
  if (r) return kiln_error("cuda(%d): allocating %zu bytes failed (%d: %s)", device_id, nbytes, r, cu_error_name(r));
  *out = (void*)(uintptr_t)p;
  return 0;
}

static int32_t device_of(const void* p) {
  int ordinal = -1;
  if (kiln_cuda_device_count() <= 0) return -1;
  if (cu.PointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, (CUdeviceptr)(uintptr_t)p)) return -1;
  return ordinal;
}

void kiln_cuda_free(void* p) {
  int32_t d = p ? device_of(p) : -1;
  if (d >= 0 && !activate(d)) cu.MemFree((CUdeviceptr)(uintptr_t)p);
}

static CUdeviceptr at(const DLTensor* t, uint64_t offset) {
  return (CUdeviceptr)(uintptr_t)t->data + t->byte_offset + offset;
}

int kiln_cuda_write(const DLTensor* t, uint64_t offset, const void* data, size_t n) {
  if (!n) return 0;
  if (activate(t->device.device_id)) return -1;
  CUresult r = cu.MemcpyHtoD(at(t, offset), data, n);
  return r ? cu_fail(r, "copying to the device") : 0;
}

int kiln_cuda_read(const DLTensor* t, uint64_t offset, void* data, size_t n) {
  if (!n) return 0;
  if (activate(t->device.device_id)) return -1;
  CUresult r = cu.MemcpyDtoH(data, at(t, offset), n);
  return r ? cu_fail(r, "copying from the device (a kernel may have faulted)") : 0;
}

/* Either side (or both) on a CUDA device. */
int kiln_cuda_copy(const DLTensor* from, DLTensor* to, size_t n) {
  int from_cu = from->device.device_type == KILN_DEVICE_CUDA, to_cu = to->device.device_type == KILN_DEVICE_CUDA;
  if (!n) return 0;
  if (from_cu && !to_cu) return kiln_cuda_read(from, 0, (char*)to->data + to->byte_offset, n);
  if (!from_cu && to_cu) return kiln_cuda_write(to, 0, (const char*)from->data + from->byte_offset, n);
  if (activate(to->device.device_id)) return -1;
  CUresult r = cu.MemcpyDtoD(at(to, 0), at(from, 0), n); /* unified addressing: any two devices */
  return r ? cu_fail(r, "copying between device buffers") : 0;
}

int kiln_cuda_sync(int32_t device_id) {
  if (activate(device_id)) return -1;
  CUresult r = cu.CtxSynchronize();
  return r ? kiln_error("cuda(%d): a queued kernel failed (%d: %s)", device_id, r, cu_error_name(r)) : 0;
}

int kiln_cuda_attr(int32_t device_id, const char* name, int64_t* ints, int* count, char* text, size_t size) {
  if (activate(device_id)) return -1;
  CUdevice dev;
  cu.DeviceGet(&dev, device_id);
  static const struct { const char* name; int attr; } table[] = {
    {"max_threads_per_block", CU_ATTR_MAX_THREADS_PER_BLOCK},
    {"max_shared_memory_per_block", CU_ATTR_MAX_SHARED_MEMORY_PER_BLOCK},
    {"max_shared_memory_per_block_optin", CU_ATTR_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN},
    {"warp_size", CU_ATTR_WARP_SIZE}, {"multi_processor_count", CU_ATTR_MULTIPROCESSOR_COUNT},
    {"max_clock_rate", CU_ATTR_CLOCK_RATE},
  };
  *count = 1;
  int v = 0;
  for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
    if (strcmp(name, table[i].name) == 0) {
      cu.DeviceGetAttribute(&v, table[i].attr, dev);
      ints[0] = v;
      return 0;
    }
  }
  if (!strcmp(name, "max_thread_dimensions")) {
    int attrs[3] = {CU_ATTR_MAX_BLOCK_DIM_X, CU_ATTR_MAX_BLOCK_DIM_Y, CU_ATTR_MAX_BLOCK_DIM_Z};
    for (int i = 0; i < 3; i++) {
      cu.DeviceGetAttribute(&v, attrs[i], dev);
      ints[i] = v;
    }
    *count = 3;
    return 0;
  }
  if (!strcmp(name, "compute_version")) {
    int major = 0, minor = 0;
    cu.DeviceGetAttribute(&major, CU_ATTR_CC_MAJOR, dev);
    cu.DeviceGetAttribute(&minor, CU_ATTR_CC_MINOR, dev);
    snprintf(text, size, "%d.%d", major, minor);
    *count = 0;
    return 0;
  }
  if (!strcmp(name, "device_name")) {
    char buf[256] = "";
    cu.DeviceGetName(buf, (int)sizeof(buf) - 1, dev);
    snprintf(text, size, "%s", buf);
    *count = 0;
    return 0;
  }
  return kiln_error("CUDA devices have no attribute '%s'", name);
}

/* ---- modules ------------------------------------------------------------------------------ */
enum { PARAM_BUFFER = KILN_KERNEL_BUFFER, PARAM_SCALAR = KILN_KERNEL_SCALAR };

typedef struct {
  KilnKernelInfo k;  /* first: module.c's launch hook reads it */
  int shared_bytes; /* dynamic shared memory the kernel needs (docs/cuda.md) */
} CUKernelInfo;

typedef struct KilnCudaModule { /* the KilnDeviceModule's impl; its text is the PTX */
  CUmodule loaded[KILN_CUDA_MAX_DEVICES];
  CUfunction* functions[KILN_CUDA_MAX_DEVICES];
  int recording;
  CUevent start, end;
  int32_t event_device;
} KilnCudaModule;

static int read_kernel(void* kernel, const JsonNode* node, const char* label) {
  CUKernelInfo* k = kernel;
  if (json_get(node, "tensor_maps"))  /* bulk tensor copies (docs/cuda.md): maps encoded at launch */
    return kiln_error("%s: kernel %s takes tensor maps for bulk tensor copies, which the C runtime does not "
                      "encode yet; run the module from Python (kiln.runtime) or build without copy='tma'",
                      label, json_string(json_get(node, "name")) ? json_string(json_get(node, "name")) : "?");
  const JsonNode* shared = json_get(node, "shared_bytes");
  k->shared_bytes = shared && shared->type == JSON_NUMBER ? (int)shared->number : 0;
  return kiln_device_kernel_read(node, label, &k->k);
}

static void release(KilnDeviceModule* dm) {
  KilnCudaModule* m = dm->impl;
  for (int d = 0; d < KILN_CUDA_MAX_DEVICES; d++) {
    if (m->loaded[d] && !activate(d)) cu.ModuleUnload(m->loaded[d]);
    free(m->functions[d]);
  }
  if (m->start) cu.EventDestroy(m->start);
  if (m->end) cu.EventDestroy(m->end);
}

static int load(KilnDeviceModule* dm, int32_t d) {
  KilnCudaModule* m = dm->impl;
  const CUKernelInfo* kernels = dm->kernels;
  CUmodule mod;
  CUresult r = cu.ModuleLoadData(&mod, dm->text);
  if (r) return kiln_error("cuda(%d): loading the module's PTX failed (%d: %s); a PTX newer than the driver "
                           "needs a newer driver, or build with an older NVRTC", d, r, cu_error_name(r));
  CUfunction* fs = calloc((size_t)dm->num_kernels + 1, sizeof(CUfunction));
  if (!fs) { cu.ModuleUnload(mod); return kiln_error("out of memory"); }
  for (int k = 0; k < dm->num_kernels; k++) {
    if ((r = cu.ModuleGetFunction(&fs[k], mod, kernels[k].k.name))) {
      free(fs);
      cu.ModuleUnload(mod);
      return kiln_error("cuda: the module has no kernel '%s' (%d: %s); rebuild it", kernels[k].k.name, r,
                        cu_error_name(r));
    }
    if (kernels[k].shared_bytes > 48 * 1024 &&
        (r = cu.FuncSetAttribute(fs[k], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, kernels[k].shared_bytes))) {
      free(fs);
      cu.ModuleUnload(mod);
      return kiln_error("%s: raising its dynamic shared memory to %d bytes failed (%d: %s)", kernels[k].k.name,
                        kernels[k].shared_bytes, r, cu_error_name(r));
    }
  }
  m->loaded[d] = mod;
  m->functions[d] = fs;
  return 0;
}

typedef union { int8_t i8; int16_t i16; int32_t i32; int64_t i64; float f32; double f64; } Scalar;

static int32_t launch(KilnDeviceModule* dm, int32_t kid, const KilnValue* args, const int32_t* codes, int32_t n,
                      const int64_t* dims, int64_t dyn_shared) {
  KilnCudaModule* m = dm->impl;
  const CUKernelInfo* kernel = (const CUKernelInfo*)dm->kernels + kid;
  const KilnKernelInfo* info = &kernel->k; /* kid and n checked by module.c's hook (n <= 1024) */
  int32_t dev = 0;
  for (int i = 0; i < n; i++) {
    if (info->kinds[i] != PARAM_BUFFER) continue;
    if ((dev = device_of(args[i].v_handle)) < 0)
      return kiln_error("%s: argument %d is not CUDA device memory", info->name, i);
    break;
  }
  for (int i = 0; i < 6; i++)
    if (dims[i] < 0 || (i >= 3 && dims[i] < 1)) return kiln_error("%s: bad launch extents", info->name);
  if (!dims[0] || !dims[1] || !dims[2]) return 0; /* an empty grid */
  if (activate(dev)) return -1;
  if (!m->loaded[dev] && load(dm, dev)) return -1;
  Scalar values[1024];
  void* params[1024];
  for (int i = 0; i < n; i++) {
    if (info->kinds[i] == PARAM_BUFFER) {
      values[i].i64 = (int64_t)(uintptr_t)args[i].v_handle;
    } else {
      DLDataType t = info->dtypes[i];
      double f = codes[i] == KILN_FLOAT ? args[i].v_float64 : (double)args[i].v_int64;
      int64_t v = codes[i] == KILN_FLOAT ? (int64_t)args[i].v_float64 : args[i].v_int64;
      if (t.code == KILN_DL_FLOAT && t.bits == 32) values[i].f32 = (float)f;
      else if (t.code == KILN_DL_FLOAT && t.bits == 64) values[i].f64 = f;
      else if (t.code == KILN_DL_FLOAT) return kiln_error("%s: half scalar arguments are not supported", info->name);
      else if (t.bits == 8) values[i].i8 = (int8_t)v;
      else if (t.bits == 16) values[i].i16 = (int16_t)v;
      else if (t.bits == 32) values[i].i32 = (int32_t)v;
      else values[i].i64 = v;
    }
    params[i] = &values[i];
  }
  int64_t shared = dyn_shared > kernel->shared_bytes ? dyn_shared : kernel->shared_bytes;
  if (m->recording && !m->start) {
    cu.EventCreate(&m->start, 0);
    cu.EventCreate(&m->end, 0);
    cu.EventRecord(m->start, NULL);
    m->event_device = dev;
  }
  CUresult r = cu.LaunchKernel(m->functions[dev][kid], (unsigned)dims[0], (unsigned)dims[1], (unsigned)dims[2],
                               (unsigned)dims[3], (unsigned)dims[4], (unsigned)dims[5], (unsigned)shared, NULL,
                               params, NULL);
  if (r)
    return kiln_error("%s: launch of %lldx%lldx%lld blocks of %lldx%lldx%lld threads (%lld bytes of dynamic shared "
                      "memory) on cuda(%d) failed (%d: %s)", info->name, (long long)dims[0], (long long)dims[1],
                      (long long)dims[2], (long long)dims[3], (long long)dims[4], (long long)dims[5],
                      (long long)shared, dev, r, cu_error_name(r));
  return 0;
}

static int32_t workspace(int32_t kind, const KilnValue* args, int32_t n) {
  if (kind == -1 && n == 3) {
    int32_t dev = args[2].v_handle ? device_of(args[2].v_handle) : 0;
    return kiln_cuda_alloc(dev < 0 ? 0 : dev, (size_t)args[0].v_int64, (void**)args[1].v_handle);
  }
  if (kind == -2 && n == 1) {
    /* cuMemFree waits for the kernels still using the buffer (it synchronizes the device). */
    kiln_cuda_free(args[0].v_handle);
    return 0;
  }
  return kiln_error("device hook: unknown request %d with %d arguments (host code newer than this runtime?)",
                    kind, n);
}

static void timing_begin(KilnDeviceModule* dm) {
  KilnCudaModule* m = dm->impl;
  if (m->start) cu.EventDestroy(m->start);
  if (m->end) cu.EventDestroy(m->end);
  m->start = m->end = NULL;
  m->recording = 1;
}

/* Device seconds from before the first launch since timing_begin to after the last queued work
 * (CUDA events); -1 when nothing was launched. */
static double timing_end(KilnDeviceModule* dm) {
  KilnCudaModule* m = dm->impl;
  m->recording = 0;
  if (!m->start || activate(m->event_device)) return -1;
  float ms = 0;
  if (cu.EventRecord(m->end, NULL) || cu.EventSynchronize(m->end) || cu.EventElapsedTime(&ms, m->start, m->end))
    return -1;
  return (double)ms * 1e-3;
}

const KilnDeviceApi kiln_cuda_device_api = {
    "cuda", "ptx", "build it where NVRTC is installed: pip install 'kiln[cuda]'", sizeof(CUKernelInfo), read_kernel,
    NULL, sizeof(KilnCudaModule), release, launch, workspace, timing_begin, timing_end};
