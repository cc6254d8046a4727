/* Calling a kernel: check every argument against the metadata, then call; and timing.
 *
 * Kernels trust their arguments (docs/abi.md), and over RPC those arguments come from another
 * machine, so a wrong shape must be caught here: it would otherwise read or write out of
 * bounds inside the kernel.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "internal.h"

#define MAX_ARGS 256
#define MAX_SYMS 64

static int bad_arg(const KilnFunction* f, const ArgSpec* a, const char* what) {
  return kiln_error("%s: argument '%s' %s", f->name, a->name, what);
}

static void format_shape(char* buf, size_t size, const int64_t* dims, char* const* syms, int32_t ndim) {
  size_t used = 0;
  used += (size_t)snprintf(buf, size, "(");
  for (int32_t i = 0; i < ndim && used < size; i++) {
    if (syms && syms[i]) used += (size_t)snprintf(buf + used, size - used, "%s%s", i ? ", " : "", syms[i]);
    else used += (size_t)snprintf(buf + used, size - used, "%s%lld", i ? ", " : "", (long long)dims[i]);
  }
  if (used < size) snprintf(buf + used, size - used, ndim == 1 ? ",)" : ")");
}

typedef struct { const char* name; int64_t value; const char* source; } SymBinding;

static int check_tensor(const KilnFunction* f, const ArgSpec* a, const DLTensor* t,
                        SymBinding* syms, int* nsyms, int32_t device_type) {
  char got[256], want[256], msg[640];
  if (!t) return bad_arg(f, a, "is NULL; pass an array");
  if (memcmp(&t->dtype, &a->dtype, sizeof(DLDataType)) != 0) {
    char name[16] = "?";
    kiln_dtype_format(t->dtype, name, sizeof(name));
    snprintf(msg, sizeof(msg), "has dtype %s, expected %s", name, a->dtype_name);
    return bad_arg(f, a, msg);
  }
  format_shape(got, sizeof(got), t->shape, NULL, t->ndim);
  format_shape(want, sizeof(want), a->dims, a->syms, a->ndim);
  if (t->ndim != a->ndim) {
    snprintf(msg, sizeof(msg), "has %d dimensions (shape %s), expected %d (shape %s)", t->ndim, got, a->ndim, want);
    return bad_arg(f, a, msg);
  }
  if (t->device.device_type != device_type) {
    snprintf(msg, sizeof(msg), "is on device type %d, expected %d", t->device.device_type, device_type);
    return bad_arg(f, a, msg);
  }
  for (int32_t i = 0; i < a->ndim; i++) {
    if (!a->syms[i]) {
      if (t->shape[i] != a->dims[i]) {
        snprintf(msg, sizeof(msg), "has shape %s, expected %s", got, want);
        return bad_arg(f, a, msg);
      }
      continue;
    }
    if (t->shape[i] < 0) return bad_arg(f, a, "has a negative dimension");
    int k = 0;
    while (k < *nsyms && strcmp(syms[k].name, a->syms[i]) != 0) k++;
    if (k == *nsyms) {
      if (*nsyms == MAX_SYMS) return kiln_error("%s: more than %d symbolic dimensions", f->name, MAX_SYMS);
      syms[k] = (SymBinding){a->syms[i], t->shape[i], a->name};
      (*nsyms)++;
    } else if (syms[k].value != t->shape[i]) {
      snprintf(msg, sizeof(msg), "has shape %s, expected %s with %s=%lld (set by argument '%s')",
               got, want, syms[k].name, (long long)syms[k].value, syms[k].source);
      return bad_arg(f, a, msg);
    }
  }
  /* Kernels index compactly; strided views would be read wrongly. */
  if (t->strides) {
    int64_t expect = 1;
    for (int32_t i = t->ndim - 1; i >= 0; i--) {
      if (t->shape[i] != 1 && t->strides[i] != expect) return bad_arg(f, a, "is not compact row-major");
      expect *= t->shape[i];
    }
  }
  return 0;
}

static int int_fits(DLDataType t, int64_t v) {
  if (t.code == KILN_DL_BOOL) return v == 0 || v == 1;
  if (t.bits >= 64) return t.code == KILN_DL_INT || v >= 0;
  int64_t lo = t.code == KILN_DL_UINT ? 0 : -((int64_t)1 << (t.bits - 1));
  int64_t hi = t.code == KILN_DL_UINT ? ((int64_t)1 << t.bits) - 1 : ((int64_t)1 << (t.bits - 1)) - 1;
  return v >= lo && v <= hi;
}

/* Check and convert into `packed` (the kernel's codes), so scalars given as ints may feed
 * float parameters as they do from Python. */
static int prepare(const KilnFunction* f, const KilnValue* args, const int32_t* codes, int32_t n,
                   KilnValue* packed) {
  if (n != f->num_args) {
    char names[512] = "";
    size_t used = 0;
    for (int i = 0; i < f->num_args && used < sizeof(names); i++) {
      int w = snprintf(names + used, sizeof(names) - used, "%s%s", i ? ", " : "", f->args[i].name);
      if (w < 0) break;
      used += (size_t)w;
    }
    return kiln_error("%s takes %d arguments (%s), got %d", f->name, f->num_args, names, n);
  }
  if (n > MAX_ARGS) return kiln_error("%s: more than %d arguments", f->name, MAX_ARGS);
  SymBinding syms[MAX_SYMS];
  int nsyms = 0;
  char msg[128];
  for (int32_t i = 0; i < n; i++) {
    const ArgSpec* a = &f->args[i];
    packed[i] = args[i];
    switch (a->kind) {
      case ARG_TENSOR:
        if (codes[i] != KILN_DLTENSOR) return bad_arg(f, a, "must be an array");
        if (check_tensor(f, a, args[i].v_handle, syms, &nsyms, f->module->device_type)) return -1;
        break;
      case ARG_SCALAR:
        if (a->code == KILN_FLOAT) {
          if (codes[i] == KILN_INT) packed[i].v_float64 = (double)args[i].v_int64;
          else if (codes[i] != KILN_FLOAT) return bad_arg(f, a, "must be a number");
        } else {
          if (codes[i] != KILN_INT) {
            snprintf(msg, sizeof(msg), "must be an int (%s)", a->dtype_name);
            return bad_arg(f, a, msg);
          }
          if (!int_fits(a->dtype, args[i].v_int64)) {
            snprintf(msg, sizeof(msg), "= %lld does not fit in %s", (long long)args[i].v_int64, a->dtype_name);
            return bad_arg(f, a, msg);
          }
        }
        break;
      default:
        if (codes[i] != KILN_HANDLE && !(codes[i] == KILN_INT && args[i].v_int64 == 0))
          return bad_arg(f, a, "must be a pointer");
        break;
    }
  }
  return 0;
}

/* A kernel, or the executor of an offloaded subgraph (json_external.c). */
static int32_t invoke(const KilnFunction* f, const KilnValue* args, int32_t n) {
  if (f->external) {
    int32_t threads = f->module->num_threads ? *f->module->num_threads : 0;
    return f->external->run(f->executor, args, n, threads) ? -1 : 0;
  }
  return f->kernel(args, f->codes, n);
}

static int kernel_failed(const KilnFunction* f, int32_t rc) {
  if (f->external) { /* the executor's message is in kiln_last_error */
    char why[900];
    snprintf(why, sizeof(why), "%s", kiln_last_error());
    return kiln_error("%s: %s", f->name, why);
  }
  if (f->module->device && kiln_device_module_take_failure(f->module->device)) {
    char why[900]; /* copied: the message buffer cannot be both source and destination */
    snprintf(why, sizeof(why), "%s", kiln_last_error());
    return kiln_error("%s: %s", f->name, why);
  }
  const char* msg = f->module->last_error;
  if (!msg || !*msg) return kiln_error("%s: returned %d without a message", f->name, rc);
  size_t n = strlen(f->name);
  if (strncmp(msg, f->name, n) == 0 && msg[n] == ':') return kiln_error("%.900s", msg);
  return kiln_error("%s: %.900s", f->name, msg);
}

int kiln_func_call(KilnFunction* f, const KilnValue* args, const int32_t* codes, int32_t n) {
  KilnValue packed[MAX_ARGS];
  if (prepare(f, args, codes, n, packed)) return -1;
  int32_t rc = invoke(f, packed, n);
  return rc ? kernel_failed(f, rc) : 0;
}

/* For callers that call one function many times with the same arguments (the graph
 * executor): check once here, then call with kiln_func_call_prepared. */
int kiln_func_check(KilnFunction* f, const KilnValue* args, const int32_t* codes, int32_t n) {
  KilnValue packed[MAX_ARGS];
  return prepare(f, args, codes, n, packed);
}

int kiln_func_call_prepared(KilnFunction* f, const KilnValue* args, int32_t n) {
  int32_t rc = invoke(f, args, n);
  return rc ? kernel_failed(f, rc) : 0;
}

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Seconds for n calls, or a negative value when the kernel failed. */
static double run(KilnFunction* f, const KilnValue* packed, int32_t n, long long calls) {
  KilnDeviceModule* device = f->module->device;
  if (device) device->api->timing_begin(device);
  double start = now_seconds();
  for (long long i = 0; i < calls; i++) {
    int32_t rc = invoke(f, packed, n);
    if (rc) {
      if (device) device->api->timing_end(device);
      kernel_failed(f, rc);
      return -1;
    }
  }
  if (device) {
    /* GPU modules are timed on the device: first kernel start to last kernel end. */
    double on_device = device->api->timing_end(device);
    if (on_device >= 0) return on_device;
  }
  return now_seconds() - start;
}

int kiln_func_time(KilnFunction* f, const KilnValue* args, const int32_t* codes, int32_t n,
                   int number, int repeat, double min_repeat_ms, double* costs) {
  if (number < 1 || repeat < 1 || repeat > 100000)
    return kiln_error("time_evaluator: number=%d and repeat=%d must be >= 1 (repeat <= 100000)", number, repeat);
  KilnValue packed[MAX_ARGS];
  if (prepare(f, args, codes, n, packed)) return -1;
  if (run(f, packed, n, 1) < 0) return -1; /* warm-up: page faults, lazy binding, caches */
  long long calls = number;
  for (int r = 0; r < repeat; r++) {
    double elapsed;
    int zero_runs = 0;
    for (;;) {
      if ((elapsed = run(f, packed, n, calls)) < 0) return -1;
      if (elapsed * 1e3 >= min_repeat_ms || calls > (1LL << 40)) break;
      if (elapsed == 0 && ++zero_runs >= 100) break;
      /* Aim past the minimum so the next round usually suffices. */
      double grow = elapsed == 0 ? 2.0 : min_repeat_ms / (elapsed * 1e3) * 1.2;
      long long next = (long long)((double)calls * grow) + 1;
      calls = next > calls * 2 ? next : calls * 2;
    }
    costs[r] = elapsed / (double)calls;
  }
  return 0;
}
