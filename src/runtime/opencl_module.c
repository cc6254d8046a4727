/* The OpenCL part of GPU modules: the kernels from the metadata's device_code, built once per
 * device on first launch, and the __kiln_device_launch hook the host code calls (docs/abi.md,
 * "GPU modules").
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "opencl.h"

enum { PARAM_BUFFER = KILN_KERNEL_BUFFER, PARAM_SCALAR = KILN_KERNEL_SCALAR };

typedef struct {
  KilnKernelInfo k;      /* first: module.c's launch hook reads it */
  size_t* images;        /* [2 * i, 2 * i + 1]: the image2d_t size parameter i was compiled for, or 0 0 */
  char** param_names;
} CLKernelInfo;

typedef struct KilnCLModule {             /* the KilnDeviceModule's impl; its text is the OpenCL C */
  cl_program programs[KILN_CL_MAX_DEVICES];
  cl_kernel* built[KILN_CL_MAX_DEVICES];   /* one cl_kernel per kernels entry, per device */
  int recording;                           /* timing: keep the first and last launch events */
  cl_event first, last;
  int32_t event_device;                    /* where the recorded kernels ran */
} KilnCLModule;

static int read_kernel(void* kernel, const JsonNode* node, const char* label) {
  CLKernelInfo* c = kernel;
  if (kiln_device_kernel_read(node, label, &c->k)) return -1;
  /* Texture parameters (docs/abi.md "Images"): kept only for kernels that have one. */
  int i = 0, any = 0;
  for (const JsonNode* p = json_get(node, "params")->child; p; p = p->next) any |= json_get(p, "image") != NULL;
  if (!any) return 0;
  c->images = calloc(2 * (size_t)c->k.num_params + 1, sizeof(size_t));
  c->param_names = calloc((size_t)c->k.num_params + 1, sizeof(char*));
  if (!c->images || !c->param_names) return kiln_error("out of memory");
  for (const JsonNode* p = json_get(node, "params")->child; p; p = p->next, i++) {
    const JsonNode* img = json_get(p, "image");
    const char* name = json_string(json_get(p, "name"));
    if (!(c->param_names[i] = strdup(name ? name : "?"))) return kiln_error("out of memory");
    if (!img) continue;
    const JsonNode *w = img->type == JSON_ARRAY && img->count == 2 ? img->child : NULL, *h = w ? w->next : NULL;
    if (!w || !h || !w->is_integer || !h->is_integer || w->integer < 1 || h->integer < 1)
      return kiln_error("%s: kernel %s: parameter %d's 'image' is not [width, height]; rebuild the module", label,
                        c->k.name, i);
    c->images[2 * i] = (size_t)w->integer;
    c->images[2 * i + 1] = (size_t)h->integer;
  }
  return 0;
}

/* Whether argument i is what kernel k takes: an image of the compiled size for an image2d_t
 * parameter, a buffer otherwise. A buffer in an image2d_t slot crashes some drivers (PoCL).
 * Asked at every launch (a few clGet*Info calls, no queue work): handles are reused once freed. */
static int check_memory(CLKernelInfo* k, int i, void* mem) {
  if (!k->images) return 0;
  size_t w = 0, h = 0, texel = 0, want_w = k->images[2 * i], want_h = k->images[2 * i + 1];
  int is_image = kiln_opencl_image_dims((cl_mem)mem, &w, &h, &texel);
  if (want_w && !is_image)
    return kiln_error("%s: argument %d (%s) is a buffer, but the kernel takes an image of %zu x %zu texels (a "
                      "texture-scoped tensor); allocate it with mem_scope (the graph's attrs.storage_scope)",
                      k->k.name, i, k->param_names[i], want_w, want_h);
  if (want_w && (w != want_w || h != want_h))
    return kiln_error("%s: argument %d (%s) is an image of %zu x %zu texels, but the kernel was compiled for %zu x "
                      "%zu (another scope in mod.json, or a fold this device's images cannot hold: rebuild mod.so "
                      "and mod.json together, with -texture_spatial_limit within the device's image limits)",
                      k->k.name, i, k->param_names[i], w, h, want_w, want_h);
  if (!want_w && is_image)
    return kiln_error("%s: argument %d (%s) is an image, but the kernel takes a buffer; keep the tensor in scope "
                      "'global'", k->k.name, i, k->param_names[i]);
  return 0;
}

/* What read_kernel allocated beyond the KilnKernelInfo. */
static void free_kernel(void* kernel) {
  CLKernelInfo* c = kernel;
  for (int i = 0; c->param_names && i < c->k.num_params; i++) free(c->param_names[i]);
  free(c->param_names);
  free(c->images);
}

static void release(KilnDeviceModule* dm) {
  KilnCLModule* m = dm->impl;
  const KilnCL* cl = kiln_opencl_api(NULL);
  for (int d = 0; d < KILN_CL_MAX_DEVICES; d++) {
    for (int k = 0; m->built[d] && k < dm->num_kernels; k++)
      if (m->built[d][k] && cl) cl->ReleaseKernel(m->built[d][k]);
    free(m->built[d]);
    if (m->programs[d] && cl) cl->ReleaseProgram(m->programs[d]);
  }
  if (cl && m->first) cl->ReleaseEvent(m->first);
  if (cl && m->last) cl->ReleaseEvent(m->last);
}

/* Build the program for device `dev` (once) and create every kernel of it. */
static int build(KilnDeviceModule* dm, int32_t dev, KilnCLDevice* d) {
  KilnCLModule* m = dm->impl;
  const CLKernelInfo* kernels = dm->kernels;
  const KilnCL* cl = kiln_opencl_api(NULL);
  cl_int err;
  const char* src = dm->text;
  cl_program prog = cl->CreateProgramWithSource(d->context, 1, &src, NULL, &err);
  if (!prog) return kiln_error("opencl: cannot create the program (%d: %s)", err, kiln_opencl_error_name(err));
  if ((err = cl->BuildProgram(prog, 1, &d->id, "", NULL, NULL)) != CL_SUCCESS) {
    char log[4096] = "";
    cl->GetProgramBuildInfo(prog, d->id, CL_PROGRAM_BUILD_LOG, sizeof(log) - 1, log, NULL);
    cl->ReleaseProgram(prog);
    return kiln_error("OpenCL program does not build on opencl(%d) (%d: %s):\n%.3000s", dev, err,
                      kiln_opencl_error_name(err), log);
  }
  cl_kernel* ks = calloc((size_t)dm->num_kernels + 1, sizeof(cl_kernel));
  if (!ks) { cl->ReleaseProgram(prog); return kiln_error("out of memory"); }
  for (int k = 0; k < dm->num_kernels; k++) {
    if (!(ks[k] = cl->CreateKernel(prog, kernels[k].k.name, &err))) {
      for (int j = 0; j < k; j++) cl->ReleaseKernel(ks[j]);
      free(ks);
      cl->ReleaseProgram(prog);
      return kiln_error("opencl: the program has no kernel '%s' (%d: %s); rebuild the module",
                        kernels[k].k.name, err, kiln_opencl_error_name(err));
    }
  }
  m->programs[dev] = prog;
  m->built[dev] = ks;
  return 0;
}

/* A scalar argument in the width the kernel declares. */
static cl_int set_scalar(const KilnCL* cl, cl_kernel k, cl_uint i, DLDataType t, KilnValue v, int32_t code) {
  double f = code == KILN_FLOAT ? v.v_float64 : (double)v.v_int64;
  int64_t n = code == KILN_FLOAT ? (int64_t)v.v_float64 : v.v_int64;
  if (t.code == KILN_DL_FLOAT) {
    if (t.bits == 64) return cl->SetKernelArg(k, i, 8, &f);
    if (t.bits == 32) { float x = (float)f; return cl->SetKernelArg(k, i, 4, &x); }
    return -51; /* half scalars have no portable host type */
  }
  switch (t.bits) {
    case 8: { int8_t x = (int8_t)n; return cl->SetKernelArg(k, i, 1, &x); }
    case 16: { int16_t x = (int16_t)n; return cl->SetKernelArg(k, i, 2, &x); }
    case 32: { int32_t x = (int32_t)n; return cl->SetKernelArg(k, i, 4, &x); }
    default: return cl->SetKernelArg(k, i, 8, &n);
  }
}

static int32_t launch(KilnDeviceModule* dm, int32_t kid, const KilnValue* args, const int32_t* codes, int32_t n,
                      const int64_t* dims, int64_t dyn_shared_bytes) {
  KilnCLModule* m = dm->impl;
  CLKernelInfo* kernel = (CLKernelInfo*)dm->kernels + kid;
  const KilnKernelInfo* info = &kernel->k; /* kid and n checked by module.c's hook */
  if (dyn_shared_bytes) return kiln_error("dynamic shared memory is not supported by the OpenCL runtime yet");
  int32_t dev = 0; /* the device the first buffer lives on */
  for (int i = 0; i < n; i++) {
    if (info->kinds[i] != PARAM_BUFFER) continue;
    if ((dev = kiln_opencl_device_of((cl_mem)args[i].v_handle)) < 0)
      return kiln_error("%s: argument %d is not an OpenCL buffer of this runtime", info->name, i);
    break;
  }
  KilnCLDevice* d;
  if (kiln_opencl_device(dev, &d)) return -1;
  if (!m->built[dev] && build(dm, dev, d)) return -1;
  const KilnCL* cl = kiln_opencl_api(NULL);
  cl_kernel k = m->built[dev][kid];
  for (int i = 0; i < n; i++) {
    if (info->kinds[i] == PARAM_BUFFER && check_memory(kernel, i, args[i].v_handle)) return -1;
    cl_int err = info->kinds[i] == PARAM_BUFFER ? cl->SetKernelArg(k, (cl_uint)i, sizeof(cl_mem), &args[i].v_handle)
                                                : set_scalar(cl, k, (cl_uint)i, info->dtypes[i], args[i], codes[i]);
    if (err) return kiln_error("%s: setting argument %d failed (%d: %s)", info->name, i, err, kiln_opencl_error_name(err));
  }
  size_t global[3], local[3];
  cl_uint work_dims = 1;
  for (int i = 0; i < 3; i++) {
    if (dims[i] < 0 || dims[3 + i] < 1) return kiln_error("%s: bad launch extents", info->name);
    local[i] = (size_t)dims[3 + i];
    global[i] = (size_t)dims[i] * local[i];
    if (global[i] == 0) return 0; /* an empty grid: nothing to run */
    if (global[i] != 1 || local[i] != 1) work_dims = (cl_uint)i + 1;
  }
  cl_event ev = NULL;
  cl_int err = cl->EnqueueNDRangeKernel(d->queue, k, work_dims, NULL, global, local, 0, NULL,
                                        m->recording ? &ev : NULL);
  if (err)
    return kiln_error("%s: launch of %zux%zux%zu blocks of %zux%zux%zu failed (%d: %s)", info->name,
                      (size_t)dims[0], (size_t)dims[1], (size_t)dims[2], local[0], local[1], local[2], err,
                      kiln_opencl_error_name(err));
  if (ev) m->event_device = dev;
  if (ev && !m->first) m->first = ev;
  else if (ev) {
    if (m->last) cl->ReleaseEvent(m->last);
    m->last = ev;
  }
  return 0;
}

/* Device workspace for tensors between kernels: kernel id -1 = allocate [nbytes, void** slot,
 * a buffer on the wanted device or NULL], -2 = free [handle]. A buffer freed while kernels that
 * use it are queued lives until they finish (clReleaseMemObject defers the deletion). */
static int32_t workspace(int32_t kind, const KilnValue* args, int32_t n) {
  if (kind == -1 && n == 3) {
    int32_t dev = args[2].v_handle ? kiln_opencl_device_of((cl_mem)args[2].v_handle) : 0;
    if (kiln_opencl_alloc(dev < 0 ? 0 : dev, (size_t)args[0].v_int64, (void**)args[1].v_handle)) return -1;
    return 0;
  }
  if (kind == -2 && n == 1) {
    kiln_opencl_free(args[0].v_handle);
    return 0;
  }
  if (kind == -3 && n == 5) { /* an image: [width, height, element bits, void** slot, like] (docs/adreno.md) */
    int32_t dev = args[4].v_handle ? kiln_opencl_device_of((cl_mem)args[4].v_handle) : 0;
    return kiln_opencl_alloc_image(dev < 0 ? 0 : dev, (size_t)args[0].v_int64, (size_t)args[1].v_int64,
                                   (int)args[2].v_int64, (void**)args[3].v_handle);
  }
  return kiln_error("device hook: unknown request %d with %d arguments (host code newer than this runtime?)",
                    kind, n);
}

static void timing_begin(KilnDeviceModule* dm) {
  KilnCLModule* m = dm->impl;
  const KilnCL* cl = kiln_opencl_api(NULL);
  if (cl && m->first) cl->ReleaseEvent(m->first);
  if (cl && m->last) cl->ReleaseEvent(m->last);
  m->first = m->last = NULL;
  m->recording = 1;
}

/* Seconds from the start of the first kernel since timing_begin to the end of the last, after
 * waiting for them; -1 when no kernel ran (the caller keeps its wall-clock time). */
static double timing_end(KilnDeviceModule* dm) {
  KilnCLModule* m = dm->impl;
  m->recording = 0;
  const KilnCL* cl = kiln_opencl_api(NULL);
  if (!cl || !m->first || kiln_opencl_sync(m->event_device)) return -1;
  cl_ulong start = 0, end = 0;
  cl_event last = m->last ? m->last : m->first;
  if (cl->GetEventProfilingInfo(m->first, CL_PROFILING_COMMAND_START, sizeof(start), &start, NULL) ||
      cl->GetEventProfilingInfo(last, CL_PROFILING_COMMAND_END, sizeof(end), &end, NULL) || end < start)
    return -1;
  return (double)(end - start) * 1e-9;
}

const KilnDeviceApi kiln_opencl_device_api = {
    "opencl", "source", "rebuild it", sizeof(CLKernelInfo), read_kernel, free_kernel, sizeof(KilnCLModule), release,
    launch, workspace, timing_begin, timing_end};
