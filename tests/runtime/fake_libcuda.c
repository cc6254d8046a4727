/* A stand-in for NVIDIA's driver library (libcuda.so.1) with one fake device, for testing the
 * C runtime's CUDA path (src/runtime/cuda.c) on machines without a GPU: memory is host memory,
 * a module "loads" when its image is PTX, a function exists when the PTX has its .entry, and a
 * launch runs nothing but appends "name gx gy gz bx by bz shared_bytes" to the file named by
 * KILN_FAKE_CUDA_LOG. Only the entry points cuda.c opens are defined.
 *
 *   cc -shared -fPIC -o DIR/libcuda.so.1 fake_libcuda.c   # then LD_LIBRARY_PATH=DIR
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
enum { OK = 0, INVALID_VALUE = 1, OUT_OF_MEMORY = 2, INVALID_IMAGE = 200, NOT_FOUND = 500 };

typedef struct { char* ptx; } Module;
typedef struct { char name[256]; } Function;

#define MAX_ALLOCS 4096
static struct { char* base; size_t size; } allocs[MAX_ALLOCS];

CUresult cuInit(unsigned flags) { return OK; }
CUresult cuDeviceGetCount(int* n) { *n = 1; return OK; }
CUresult cuDeviceGet(int* dev, int ordinal) { *dev = ordinal; return ordinal == 0 ? OK : INVALID_VALUE; }

CUresult cuDeviceGetAttribute(int* value, int attr, int dev) {
  switch (attr) {
    case 1: case 2: *value = 1024; break;            /* threads per block, block dim x */
    case 3: *value = 1024; break;
    case 4: *value = 64; break;
    case 8: *value = 48 * 1024; break;               /* shared memory per block */
    case 10: *value = 32; break;                     /* warp size */
    case 13: *value = 1000000; break;                /* clock rate (kHz) */
    case 16: *value = 132; break;                    /* multiprocessors */
    case 75: *value = 9; break;                      /* compute capability 9.0 */
    case 76: *value = 0; break;
    case 97: *value = 227 * 1024; break;             /* shared memory per block, opt-in */
    default: *value = 0;
  }
  return OK;
}

CUresult cuDeviceGetName(char* name, int len, int dev) {
  snprintf(name, (size_t)len, "kiln stand-in GPU");
  return OK;
}

CUresult cuDevicePrimaryCtxRetain(void** ctx, int dev) { *ctx = (void*)(uintptr_t)(dev + 1); return OK; }
CUresult cuCtxSetCurrent(void* ctx) { return ctx ? OK : INVALID_VALUE; }
CUresult cuCtxSynchronize(void) { return OK; }

CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t n) {
  for (int i = 0; i < MAX_ALLOCS; i++) {
    if (allocs[i].base) continue;
    if (!(allocs[i].base = calloc(1, n))) return OUT_OF_MEMORY;
    allocs[i].size = n;
    *p = (CUdeviceptr)(uintptr_t)allocs[i].base;
    return OK;
  }
  return OUT_OF_MEMORY;
}

static int find(CUdeviceptr p) {
  char* c = (char*)(uintptr_t)p;
  for (int i = 0; i < MAX_ALLOCS; i++)
    if (allocs[i].base && c >= allocs[i].base && c < allocs[i].base + allocs[i].size) return i;
  return -1;
}

CUresult cuMemFree_v2(CUdeviceptr p) {
  int i = find(p);
  if (i < 0 || (char*)(uintptr_t)p != allocs[i].base) return INVALID_VALUE;
  free(allocs[i].base);
  allocs[i].base = NULL;
  return OK;
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr to, const void* from, size_t n) {
  if (find(to) < 0) return INVALID_VALUE;
  memcpy((void*)(uintptr_t)to, from, n);
  return OK;
}

CUresult cuMemcpyDtoH_v2(void* to, CUdeviceptr from, size_t n) {
  if (find(from) < 0) return INVALID_VALUE;
  memcpy(to, (const void*)(uintptr_t)from, n);
  return OK;
}

CUresult cuMemcpyDtoD_v2(CUdeviceptr to, CUdeviceptr from, size_t n) {
  if (find(to) < 0 || find(from) < 0) return INVALID_VALUE;
  memmove((void*)(uintptr_t)to, (const void*)(uintptr_t)from, n);
  return OK;
}

CUresult cuPointerGetAttribute(void* out, int attr, CUdeviceptr p) {
  if (attr != 9 || find(p) < 0) return INVALID_VALUE; /* 9: the device ordinal */
  *(int*)out = 0;
  return OK;
}

CUresult cuModuleLoadData(void** module, const void* image) {
  if (!strstr((const char*)image, ".entry")) return INVALID_IMAGE;
  Module* m = calloc(1, sizeof(Module));
  if (!m || !(m->ptx = strdup((const char*)image))) return OUT_OF_MEMORY;
  *module = m;
  return OK;
}

CUresult cuModuleUnload(void* module) {
  Module* m = module;
  free(m->ptx);
  free(m);
  return OK;
}

CUresult cuModuleGetFunction(void** function, void* module, const char* name) {
  char entry[300];
  snprintf(entry, sizeof(entry), ".entry %s(", name);
  if (!strstr(((Module*)module)->ptx, entry)) return NOT_FOUND;
  Function* f = calloc(1, sizeof(Function));
  if (!f) return OUT_OF_MEMORY;
  snprintf(f->name, sizeof(f->name), "%s", name);
  *function = f;
  return OK;
}

CUresult cuFuncSetAttribute(void* function, int attr, int value) { return OK; }

CUresult cuLaunchKernel(void* function, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, void* stream, void** params, void** extra) {
  const char* path = getenv("KILN_FAKE_CUDA_LOG");
  FILE* log = path ? fopen(path, "a") : NULL;
  if (log) {
    fprintf(log, "%s %u %u %u %u %u %u %u\n", ((Function*)function)->name, gx, gy, gz, bx, by, bz, shared);
    fclose(log);
  }
  return OK;
}

CUresult cuEventCreate(void** event, unsigned flags) { *event = malloc(1); return *event ? OK : OUT_OF_MEMORY; }
CUresult cuEventRecord(void* event, void* stream) { return OK; }
CUresult cuEventSynchronize(void* event) { return OK; }
CUresult cuEventElapsedTime(float* ms, void* start, void* end) { *ms = 0.001f; return OK; }
CUresult cuEventDestroy_v2(void* event) { free(event); return OK; }

CUresult cuGetErrorString(CUresult r, const char** s) {
  *s = r == INVALID_IMAGE ? "CUDA_ERROR_INVALID_IMAGE (stand-in)" : r == NOT_FOUND ? "CUDA_ERROR_NOT_FOUND (stand-in)"
                                                                   : "stand-in driver error";
  return OK;
}
