/* kiln_run: run a tvmc package on this device without Python (002's `rtvm`).
 *
 *   kiln_run --package x.tar [--input in.npz] [--output out.npz] [--dump-time] [--repeat N]
 *            [--device cpu|cl] [--device-id N] [--threads N] [--profile] [--dump-meta]
 *
 * TVM's rtvm spellings also work: --model for --package, --device opencl.
 *
 * Exit status: 0 on success, 2 for bad command-line input (missing or malformed files, unknown
 * inputs), 1 when loading or running the model fails.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kiln_graph.h"
#include "npz.h"

static const char USAGE[] =
    "usage: kiln_run --package PKG.tar [--input IN.npz] [--output OUT.npz] [--dump-time] [--repeat N]\n"
    "                [--device cpu|cl] [--device-id N] [--threads N] [--profile] [--dump-meta]\n"
    "\n"
    "Runs a package written by `tvmc compile` (mod.so + mod.json + mod.params) with the C graph\n"
    "executor, without Python.\n"
    "\n"
    "  --package PKG.tar  the tvmc package (also --model, rtvm's name)\n"
    "  --input IN.npz     one array per model input, named after it (numpy.savez or savez_compressed);\n"
    "                     without it every input is zeros\n"
    "  --output OUT.npz   write the outputs as output_0, output_1, ... (numpy.load reads it)\n"
    "  --dump-time        print the load, set-input, per-run and get-output times and the mean run time\n"
    "  --repeat N         run the model N times (default 1)\n"
    "  --device cpu|cl|cuda  where to run (cl / cuda: the GPU, for packages built for 'opencl' / 'cuda')\n"
    "  --device-id N      which device of that kind (default 0)\n"
    "  --threads N        threads for the kernels' parallel loops and oneDNN (default: $KILN_NUM_THREADS, else\n"
    "                     one per core)\n"
    "  --profile          also time every kernel alone (mean of N calls) and print them, slowest first\n"
    "  --dump-meta        print the model's inputs, outputs (names, dtypes, shapes) and kernel count\n"
    "\n"
    "Subgraphs offloaded to oneDNN (tvmc compile --target \"dnnl, llvm\") run through libkiln_dnnl.so, looked for\n"
    "in $KILN_DNNL_SHIM, beside kiln_run, then on the library path (make -C src/runtime dnnl builds it).\n";

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int fail(int code, const char* what) {
  fprintf(stderr, "kiln_run: error: %s\n", what);
  return code;
}

static int fail_runtime(int code) { return fail(code, kiln_last_error()); }

static void describe(const DLTensor* t, char* buf, size_t size) {
  char dt[16] = "?";
  kiln_dtype_format(t->dtype, dt, sizeof(dt));
  size_t used = (size_t)snprintf(buf, size, "%s[", dt);
  for (int i = 0; i < t->ndim && used < size; i++)
    used += (size_t)snprintf(buf + used, size - used, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
  if (used < size) snprintf(buf + used, size - used, "]");
}

typedef struct { KilnGraph* g; const char* path; } InputFile;

/* Each .npz array must name a non-parameter input and have its shape and dtype. The reader asks
 * before it allocates or inflates the array, so a file cannot make kiln_run use more memory than
 * the model's inputs take. */
static int check_input(void* ctx, const NpyArray* a) {
  const InputFile* in = ctx;
  KilnGraph* g = in->g;
  int index = kiln_graph_input_index(g, a->name);
  if (index < 0 || kiln_graph_input_is_param(g, index)) {
    char names[600] = "";
    size_t used = 0;
    for (int k = 0; k < kiln_graph_num_inputs(g) && used < sizeof(names); k++)
      if (!kiln_graph_input_is_param(g, k))
        used += (size_t)snprintf(names + used, sizeof(names) - used, "%s%s", used ? ", " : "",
                                 kiln_graph_input_name(g, k));
    return kiln_error("%s has an array '%s', but the model's inputs are: %s; name the arrays after them", in->path,
                      a->name, names);
  }
  const DLTensor* t = kiln_graph_input(g, index);
  int same = a->ndim == t->ndim && memcmp(&a->dtype, &t->dtype, sizeof(DLDataType)) == 0;
  for (int d = 0; same && d < a->ndim; d++) same = a->shape[d] == t->shape[d];
  if (same) return 0;
  char got[300], want[300];
  DLTensor given = {NULL, t->device, a->ndim, a->dtype, (int64_t*)a->shape, NULL, 0};
  describe(t, want, sizeof(want));
  describe(&given, got, sizeof(got));
  return kiln_error("input '%s' is %s in %s, but the model takes %s; save it with that shape and dtype "
                    "(x.astype(...))", a->name, got, in->path, want);
}

/* Copy the .npz arrays (checked by check_input) into the model's inputs. */
static int set_inputs(KilnGraph* g, const char* path) {
  NpyArray* arrays;
  int count;
  InputFile in = {g, path};
  if (npz_read(path, check_input, &in, &arrays, &count)) return fail_runtime(2);
  int rc = 0;
  for (int i = 0; i < count && !rc; i++)
    if (kiln_graph_set_input(g, arrays[i].name, arrays[i].data, arrays[i].nbytes)) rc = fail_runtime(1);
  npz_free(arrays, count);
  return rc;
}

static int write_outputs(KilnGraph* g, const char* path) {
  int n = kiln_graph_num_outputs(g), rc = 0;
  NpyArray* arrays = calloc((size_t)n + 1, sizeof(NpyArray));
  if (!arrays) return fail(1, "out of memory");
  for (int i = 0; i < n && !rc; i++) {
    const DLTensor* t = kiln_graph_output(g, i);
    NpyArray* a = &arrays[i];
    char name[32];
    snprintf(name, sizeof(name), "output_%d", i);
    a->name = strdup(name);
    a->dtype = t->dtype;
    a->ndim = t->ndim > 32 ? 32 : t->ndim;
    memcpy(a->shape, t->shape, sizeof(int64_t) * (size_t)a->ndim);
    a->nbytes = kiln_ndarray_nbytes(t);
    a->data = malloc(a->nbytes ? a->nbytes : 1);
    if (!a->name || !a->data) rc = fail(1, "out of memory");
    else if (kiln_graph_get_output(g, i, a->data, a->nbytes)) rc = fail_runtime(1);
  }
  if (!rc && npz_write(path, arrays, n)) rc = fail_runtime(2);
  npz_free(arrays, n);
  return rc;
}

typedef struct { const char* name; double ms; } KernelTime;

static int by_time(const void* a, const void* b) {
  double x = ((const KernelTime*)a)->ms, y = ((const KernelTime*)b)->ms;
  return x < y ? 1 : x > y ? -1 : 0;
}

static int profile(KilnGraph* g, int number, DLDevice dev) {
  int n = kiln_graph_num_kernels(g);
  KernelTime* rows = calloc((size_t)n + 1, sizeof(KernelTime));
  if (!rows) return fail(1, "out of memory");
  double total = 0;
  for (int k = 0; k < n; k++) {
    double start = now_ms();
    for (int r = 0; r < number; r++)
      if (kiln_graph_run_kernel(g, k)) { free(rows); return fail_runtime(1); }
    kiln_device_sync(dev);
    rows[k] = (KernelTime){kiln_graph_kernel_name(g, k), (now_ms() - start) / number};
    total += rows[k].ms;
  }
  qsort(rows, (size_t)n, sizeof(KernelTime), by_time);
  printf("%-60s %10s %8s\n", "Node", "Time (ms)", "Percent");
  for (int k = 0; k < n; k++)
    printf("%-60s %10.4f %7.2f%%\n", rows[k].name, rows[k].ms, total > 0 ? 100 * rows[k].ms / total : 0);
  printf("%-60s %10.4f\n", "Total", total);
  free(rows);
  return 0;
}

static void dump_meta(const KilnGraph* g) {
  char desc[300];
  int params = 0;
  printf("inputs:\n");
  for (int i = 0; i < kiln_graph_num_inputs(g); i++) {
    if (kiln_graph_input_is_param(g, i)) { params++; continue; }
    describe(kiln_graph_input(g, i), desc, sizeof(desc));
    const char* scope = kiln_graph_input_scope(g, i);
    printf("  %s: %s%s%s\n", kiln_graph_input_name(g, i), desc, strcmp(scope, "global") ? " in " : "",
           strcmp(scope, "global") ? scope : "");
  }
  printf("outputs:\n");
  for (int i = 0; i < kiln_graph_num_outputs(g); i++) {
    describe(kiln_graph_output(g, i), desc, sizeof(desc));
    const char* scope = kiln_graph_output_scope(g, i);
    printf("  output_%d: %s%s%s\n", i, desc, strcmp(scope, "global") ? " in " : "", strcmp(scope, "global") ? scope : "");
  }
  printf("parameters: %d\nkernels: %d\n", params, kiln_graph_num_kernels(g));
}

static int parse_int(const char* flag, const char* text, int lo, int* out) {
  char* end;
  long v = strtol(text, &end, 10);
  if (!*text || *end || v < lo || v > 1000000) {
    fprintf(stderr, "kiln_run: error: %s %s: expected an integer >= %d\n", flag, text, lo);
    return -1;
  }
  *out = (int)v;
  return 0;
}

int main(int argc, char** argv) {
  const char *package = NULL, *input = NULL, *output = NULL, *device = "cpu";
  int dump_time = 0, repeat = 1, device_id = 0, threads = -1, want_profile = 0, want_meta = 0;
  for (int i = 1; i < argc; i++) {
    /* "--flag value" and "--flag=value" (rtvm's spelling) */
    char flag[64];
    const char* a = argv[i];
    const char* eq = strncmp(a, "--", 2) == 0 ? strchr(a, '=') : NULL;
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
    if (eq && (size_t)(eq - a) < sizeof(flag)) {
      snprintf(flag, sizeof(flag), "%.*s", (int)(eq - a), a);
      a = flag;
      v = eq + 1;
    }
    if (strcmp(a, "--model") == 0) a = "--package";
    int takes = strcmp(a, "--package") == 0 || strcmp(a, "--input") == 0 || strcmp(a, "--output") == 0 ||
                strcmp(a, "--repeat") == 0 || strcmp(a, "--device") == 0 || strcmp(a, "--device-id") == 0 ||
                strcmp(a, "--threads") == 0;
    if (!eq && (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)) { fputs(USAGE, stdout); return 0; }
    if (!eq && strcmp(a, "--dump-time") == 0) { dump_time = 1; continue; }
    if (!eq && strcmp(a, "--profile") == 0) { want_profile = 1; continue; }
    if (!eq && strcmp(a, "--dump-meta") == 0) { want_meta = 1; continue; }
    if (!takes) {
      fprintf(stderr, "kiln_run: error: unknown argument %s; see kiln_run --help\n", argv[i]);
      return 2;
    }
    if (!v) {
      fprintf(stderr, "kiln_run: error: %s needs a value; see kiln_run --help\n", a);
      return 2;
    }
    if (!eq) i++;
    if (strcmp(a, "--package") == 0) package = v;
    else if (strcmp(a, "--input") == 0) input = v;
    else if (strcmp(a, "--output") == 0) output = v;
    else if (strcmp(a, "--device") == 0) device = v;
    else if (strcmp(a, "--repeat") == 0 && parse_int(a, v, 1, &repeat)) return 2;
    else if (strcmp(a, "--device-id") == 0 && parse_int(a, v, 0, &device_id)) return 2;
    else if (strcmp(a, "--threads") == 0 && parse_int(a, v, 0, &threads)) return 2;
  }
  if (!package) return fail(2, "--package is required (a .tar from tvmc compile); see kiln_run --help");
  DLDevice dev = {KILN_DEVICE_CPU, device_id};
  if (strcmp(device, "cl") == 0 || strcmp(device, "opencl") == 0) dev.device_type = KILN_DEVICE_OPENCL;
  else if (strcmp(device, "cuda") == 0 || strcmp(device, "gpu") == 0) dev.device_type = KILN_DEVICE_CUDA;
  else if (strcmp(device, "cpu") != 0) return fail(2, "--device takes cpu, cl or cuda");
  if (!kiln_device_exist(dev)) {
    char msg[200];
    snprintf(msg, sizeof(msg), "--device %s %d: no such device on this machine (OpenCL needs libOpenCL.so.1 and a "
             "platform with devices, CUDA libcuda.so.1 and an NVIDIA GPU)", device, device_id);
    return fail(2, msg);
  }

  /* The runtime gives a module's parallel loops $KILN_NUM_THREADS threads when it loads it. */
  if (threads >= 0) {
    char buf[16];
    snprintf(buf, sizeof(buf), "%d", threads);
    setenv("KILN_NUM_THREADS", buf, 1);
  }
  double t0 = now_ms();
  KilnGraph* g;
  if (kiln_graph_load_package(package, dev, &g)) return fail_runtime(2);
  double t_load = now_ms() - t0;
  if (want_meta) dump_meta(g);

  t0 = now_ms();
  int rc = input ? set_inputs(g, input) : 0;
  if (rc) { kiln_graph_free(g); return rc; }
  kiln_device_sync(dev);
  double t_input = now_ms() - t0;

  double sum = 0;
  for (int r = 0; r < repeat; r++) {
    t0 = now_ms();
    if (kiln_graph_run(g)) { rc = fail_runtime(1); break; }
    double ms = now_ms() - t0;
    sum += ms;
    if (dump_time) printf("run %d: %.4f ms\n", r + 1, ms);
  }
  if (!rc && output) {
    t0 = now_ms();
    rc = write_outputs(g, output);
    if (!rc && dump_time) printf("get_output (and write %s): %.4f ms\n", output, now_ms() - t0);
  }
  if (!rc && dump_time) {
    printf("load: %.4f ms\n", t_load);
    printf("set_input: %.4f ms\n", t_input);
    printf("mean run: %.4f ms over %d run(s)\n", sum / repeat, repeat);
  }
  if (!rc && want_profile) rc = profile(g, repeat, dev);
  kiln_graph_free(g);
  return rc;
}
