/* The oneDNN executor of "dnnl" subgraphs (json_external.c) for the C runtime.
 *
 * The primitives are the shim's (src/contrib/dnnl_json_runtime.cc, the same file the Python
 * runtime compiles), built as libkiln_dnnl.so by `make -C src/runtime dnnl` and opened with
 * dlopen on first use, so the runtime itself neither links nor needs oneDNN. This file walks
 * the JSON graph exactly as kiln/runtime/json_runtime.py's DNNLExecutor does (same layouts,
 * same private buffers, same reorders), so both runtimes compute the same thing.
 *
 * Where the shim is looked for: $KILN_DNNL_SHIM, then libkiln_dnnl.so beside the runtime
 * (libkiln_runtime.so, or the kiln_run / kiln_rpc executable), then the library search path.
 */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

#define SHIM "libkiln_dnnl.so"
#define MAX_RANK 6

/* ---- the shim ------------------------------------------------------------------------------- */
static struct {
  int tried;
  char error[PATH_MAX + 1024]; /* why it could not be loaded */
  void* lib;
  const char* (*last_error)(void);
  void* (*conv2d)(const int64_t*, int, const char*, float, float, int);
  void* (*dense)(int64_t, int64_t, int64_t, int, const char*, float, float);
  void* (*pool2d)(const int64_t*, int, int);
  void* (*eltwise)(int, const int64_t*, int, float, float, int);
  void* (*binary)(int, const int64_t*, const int64_t*, int, int);
  void* (*softmax)(int, const int64_t*, int, int);
  void* (*matmul)(int64_t, int64_t, int64_t, int64_t, int);
  void* (*reorder)(const int64_t*, int);
  int (*layer_exec)(void*, void*, void*, void*, void*, void*);
  int (*layer_forget)(void*);
  int (*simple_exec)(void*, void*, void*, void*);
  void (*layer_free)(void*);
  void (*simple_free)(void*);
  void (*omp_set_num_threads)(int); /* libgomp's, which libdnnl links; may be absent */
} shim;

/* The directory holding this runtime's code: libkiln_runtime.so, or the executable it is
 * linked into statically. */
static int runtime_dir(char* dir, size_t size) {
  Dl_info info;
  char exe[PATH_MAX];
  const char* path = NULL;
  if (dladdr((void*)kiln_dnnl_create, &info) && info.dli_fname && strchr(info.dli_fname, '/'))
    path = info.dli_fname;
  if (!path || !strstr(path, ".so")) { /* the main program: its name in dladdr may be argv[0] */
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0) {
      exe[n] = 0;
      path = exe;
    }
  }
  if (!path) return -1;
  const char* slash = strrchr(path, '/');
  if (!slash || (size_t)(slash - path) >= size) return -1;
  memcpy(dir, path, (size_t)(slash - path));
  dir[slash - path] = 0;
  return 0;
}

static const char* HOW = "build it with `make -C src/runtime dnnl` (needs oneDNN's headers: Debian's libdnnl-dev) "
                         "and put " SHIM " beside kiln_run / libkiln_runtime.so, or point $KILN_DNNL_SHIM at it";

static int open_shim(void) {
  char candidates[2][PATH_MAX + 32];
  int n = 0;
  const char* env = getenv("KILN_DNNL_SHIM");
  char dir[PATH_MAX];
  if (env && *env) snprintf(candidates[n++], sizeof(candidates[0]), "%s", env);
  else if (runtime_dir(dir, sizeof(dir)) == 0) snprintf(candidates[n++], sizeof(candidates[0]), "%s/%s", dir, SHIM);
  /* oneDNN's OpenMP threads would otherwise spin between primitives, fighting the kernels'
   * own spinning thread pool for the cores (docs/byoc.md). libgomp reads this when it loads. */
  setenv("OMP_WAIT_POLICY", "PASSIVE", 0);
  const char* path = NULL;
  for (int i = 0; i < n && !path; i++)
    if (access(candidates[i], F_OK) == 0) path = candidates[i];
  if (env && *env && !path) {
    snprintf(shim.error, sizeof(shim.error), "the oneDNN shim $KILN_DNNL_SHIM=%.1500s does not exist; %s", env, HOW);
    return -1;
  }
  shim.lib = dlopen(path ? path : SHIM, RTLD_NOW | RTLD_LOCAL);
  if (!shim.lib) {
    const char* why = dlerror();
    if (!path && why && strstr(why, SHIM) && !strstr(why, "libdnnl"))
      snprintf(shim.error, sizeof(shim.error), "the oneDNN shim %s was not found (looked in %.1500s and on the "
               "library path); %s", SHIM, n ? candidates[0] : "$KILN_DNNL_SHIM", HOW);
    else if (why && strstr(why, "libdnnl"))
      snprintf(shim.error, sizeof(shim.error), "oneDNN is not installed on this machine (%.1500s); install oneDNN 2.x "
               "(Debian: apt-get install libdnnl2)", why);
    else
      snprintf(shim.error, sizeof(shim.error), "cannot load the oneDNN shim: %.1500s", why ? why : "?");
    return -1;
  }
  struct { void** slot; const char* name; } syms[] = {
      {(void**)&shim.last_error, "kd_last_error"},       {(void**)&shim.conv2d, "kd_conv2d_create"},
      {(void**)&shim.dense, "kd_dense_create"},          {(void**)&shim.pool2d, "kd_pool2d_create"},
      {(void**)&shim.eltwise, "kd_eltwise_create"},      {(void**)&shim.binary, "kd_binary_create"},
      {(void**)&shim.softmax, "kd_softmax_create"},      {(void**)&shim.matmul, "kd_matmul_create"},
      {(void**)&shim.reorder, "kd_reorder_create"},      {(void**)&shim.layer_exec, "kd_layer_exec"},
      {(void**)&shim.simple_exec, "kd_simple_exec"},     {(void**)&shim.layer_free, "kd_layer_free"},
      {(void**)&shim.simple_free, "kd_simple_free"},     {(void**)&shim.layer_forget, "kd_layer_forget"},
  };
  for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
    if (!(*syms[i].slot = dlsym(shim.lib, syms[i].name))) {
      snprintf(shim.error, sizeof(shim.error), "the oneDNN shim %.1500s lacks %s: it is older than this runtime; "
               "rebuild it (make -C src/runtime dnnl)", path ? path : SHIM, syms[i].name);
      return -1;
    }
  }
  *(void**)&shim.omp_set_num_threads = dlsym(shim.lib, "omp_set_num_threads");
  return 0;
}

static int load_shim(void) {
  static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER; /* modules may load on several threads */
  pthread_mutex_lock(&lock);
  if (!shim.tried) {
    shim.tried = 1;
    if (open_shim()) {
      if (shim.lib) dlclose(shim.lib);
      shim.lib = NULL;
    }
  }
  pthread_mutex_unlock(&lock);
  if (!shim.lib)
    return kiln_error("this library offloads subgraphs to dnnl (oneDNN), but %s", shim.error);
  return 0;
}

/* ---- the graph ------------------------------------------------------------------------------ */
enum { OP_LAYER, OP_SIMPLE };

typedef struct {
  int kind;       /* OP_LAYER (conv2d, dense: src, wei, bias, addend) or OP_SIMPLE (a, b) */
  void* handle;
  int in[4];      /* entries, -1 for none */
  int dst;        /* entry written, or -1 when writing output `out` */
  int out;
  const char* name;
  int forget;     /* a layer whose weight is no constant of the function: reorder it every run */
} Op;

typedef struct {
  int ndim;
  int64_t dims[MAX_RANK];
  int nhwc;       /* computed channels-last inside the subgraph */
  float* buffer;  /* private storage (values inside the subgraph, channels-last outputs) */
} Entry;

typedef struct {
  char* symbol;
  int n_inputs;   /* the function's inputs */
  int n_in;       /* inputs + constants */
  int n_out;
  int n_entries;
  Entry* entries;
  int* outputs;   /* the entry of each output */
  int num_ops;
  Op* ops;
  char** names;   /* node names, for messages */
  void** ptr;     /* per run: where each entry lives (kept: input_changed compares with it) */
  int ran;
  void** out_ptr;
} Graph;

static int64_t num_elements(const Entry* e) {
  int64_t n = 1;
  for (int i = 0; i < e->ndim; i++) n *= e->dims[i];
  return n;
}

static int read_shape(const JsonNode* node, Entry* e) {
  const JsonNode* shape = json_get(node, "shape");
  const char* dtype = json_string(json_get(node, "dtype"));
  if (!shape || shape->type != JSON_ARRAY || shape->count > MAX_RANK) return -1; /* rank 0: a scalar operand */
  if (!dtype || strcmp(dtype, "float32") != 0) return -2;
  e->ndim = (int)shape->count;
  int i = 0;
  for (const JsonNode* d = shape->child; d; d = d->next, i++) {
    if (d->type != JSON_NUMBER || !d->is_integer || d->integer < 1 || d->integer > ((int64_t)1 << 40)) return -1;
    e->dims[i] = d->integer;
  }
  return 0;
}

/* attrs[key] as up to `max` integers; the count, or -1. */
static int ints(const JsonNode* attrs, const char* key, int64_t* out, int max) {
  const JsonNode* list = json_get(attrs, key);
  if (!list || list->type != JSON_ARRAY || (int)list->count > max) return -1;
  int i = 0;
  for (const JsonNode* v = list->child; v; v = v->next, i++) {
    if (v->type != JSON_NUMBER || !v->is_integer) return -1;
    out[i] = v->integer;
  }
  return i;
}

static double number(const JsonNode* attrs, const char* key) {
  const JsonNode* v = json_get(attrs, key);
  return v && (v->type == JSON_NUMBER || v->type == JSON_BOOL) ? v->number : 0.0;
}

static int lookup(const char* name, const char* const* table, int n) {
  for (int i = 0; name && i < n; i++)
    if (strcmp(name, table[i]) == 0) return i;
  return -1;
}

static const char* const ELTWISE[] = {"relu", "sigmoid", "tanh", "clip", "exp", "sqrt", "abs", "gelu"};
static const char* const BINARY[] = {"add", "mul", "sub", "max", "min", "div"};
static const char* const POOL[] = {"max", "avg_pad", "avg"};

static int bad_node(const Graph* g, int k, const char* what) {
  return kiln_error("%s: node %d (%s) of its JSON graph %s; re-export the library with this kiln version",
                    g->symbol, k, g->names[k], what);
}

/* One node -> one primitive; mirrors DNNLExecutor._create. */
static int create_op(Graph* g, int k, const JsonNode* node, Op* op) {
  int entry = g->n_in + k;
  Entry* out = &g->entries[entry];
  const char* kind = json_string(json_get(node, "kind"));
  const JsonNode* attrs = json_get(node, "attrs");
  const JsonNode* inputs = json_get(node, "inputs");
  int in[8], n_in = 0;
  if (!kind || !attrs || !inputs || inputs->type != JSON_ARRAY || inputs->count < 1 || inputs->count > 8)
    return bad_node(g, k, "lacks kind, attrs or inputs");
  for (const JsonNode* i = inputs->child; i; i = i->next) {
    if (i->type != JSON_NUMBER || !i->is_integer || i->integer < 0 || i->integer >= entry)
      return bad_node(g, k, "reads an entry that is not computed before it");
    in[n_in++] = (int)i->integer;
  }
  const Entry* a = &g->entries[in[0]];
  op->name = g->names[k];
  op->dst = entry;
  op->out = -1;
  for (int i = 0; i < 4; i++) op->in[i] = -1;
  op->in[0] = in[0];
  op->in[1] = n_in > 1 ? in[1] : -1;
  if (!strcmp(kind, "conv2d") || !strcmp(kind, "dense")) {
    const char* post = json_string(json_get(attrs, "post"));
    int bias = number(attrs, "bias") != 0, sum = post && strchr(post, 's');
    if (!post || n_in < 2 + bias + sum) return bad_node(g, k, "has no post attribute or too few inputs");
    const Entry* w = &g->entries[in[1]];
    op->kind = OP_LAYER;
    /* The shim keeps each weight reordered per weight pointer; one computed at run time or
     * given as an input may change at the same address (as json_runtime.py decides). */
    op->forget = !(in[1] >= g->n_inputs && in[1] < g->n_in);
    op->in[2] = bias ? in[2] : -1;
    op->in[3] = sum ? in[n_in - 1] : -1;
    if (!strcmp(kind, "conv2d")) {
      int64_t kernel[2], strides[2], pad[4], dil[2];
      const JsonNode* groups = json_get(attrs, "groups");
      if (a->ndim != 4 || w->ndim != 4 || out->ndim != 4 || ints(attrs, "kernel", kernel, 2) != 2 ||
          ints(attrs, "strides", strides, 2) != 2 || ints(attrs, "padding", pad, 4) != 4 ||
          ints(attrs, "dilation", dil, 2) != 2 || !groups || !groups->is_integer)
        return bad_node(g, k, "is a conv2d without 4-d tensors, kernel, strides, padding, dilation or groups");
      int64_t d[18] = {a->dims[0], a->dims[1], a->dims[2], a->dims[3], w->dims[0], kernel[0], kernel[1],
                       out->dims[2], out->dims[3], strides[0], strides[1], pad[0], pad[1], pad[2], pad[3],
                       dil[0], dil[1], groups->integer};
      int flags = a->nhwc | 2 * out->nhwc | (sum ? 4 * g->entries[op->in[3]].nhwc : 0);
      op->handle = shim.conv2d(d, bias, post, 0.f, 0.f, flags);
    } else {
      if (a->ndim != 2 || w->ndim != 2) return bad_node(g, k, "is a dense layer without 2-d data and weight");
      op->handle = shim.dense(a->dims[0], a->dims[1], w->dims[0], bias, post, 0.f, 0.f);
    }
    return 0;
  }
  op->kind = OP_SIMPLE;
  if (!strcmp(kind, "pool2d")) {
    int64_t d[14] = {a->dims[0], a->dims[1], a->dims[2], a->dims[3], out->dims[2], out->dims[3]};
    int alg = lookup(json_string(json_get(attrs, "alg")), POOL, 3);
    if (a->ndim != 4 || out->ndim != 4 || alg < 0 || ints(attrs, "pool_size", d + 6, 2) != 2 ||
        ints(attrs, "strides", d + 8, 2) != 2 || ints(attrs, "padding", d + 10, 4) != 4)
      return bad_node(g, k, "is a pool2d without 4-d tensors, alg, pool_size, strides or padding");
    op->handle = shim.pool2d(d, alg, out->nhwc);
  } else if (!strcmp(kind, "eltwise")) {
    int alg = lookup(json_string(json_get(attrs, "alg")), ELTWISE, 8);
    if (alg < 0) return bad_node(g, k, "has an elementwise alg this runtime does not know");
    op->handle = shim.eltwise(out->ndim, out->dims, alg, (float)number(attrs, "alpha"), (float)number(attrs, "beta"),
                              out->nhwc);
  } else if (!strcmp(kind, "binary")) {
    int64_t b_shape[MAX_RANK];
    int alg = lookup(json_string(json_get(attrs, "alg")), BINARY, 6);
    if (alg < 0 || n_in != 2 || ints(attrs, "b_shape", b_shape, MAX_RANK) != out->ndim)
      return bad_node(g, k, "is a binary op without alg, two inputs or b_shape of the output's rank");
    int b_nhwc = g->entries[in[1]].nhwc && !memcmp(b_shape, out->dims, sizeof(int64_t) * (size_t)out->ndim);
    op->handle = shim.binary(out->ndim, out->dims, b_shape, alg, out->nhwc | 2 * b_nhwc);
  } else if (!strcmp(kind, "softmax")) {
    const JsonNode* axis = json_get(attrs, "axis");
    if (!axis || !axis->is_integer) return bad_node(g, k, "is a softmax without an axis");
    int ax = (int)(((axis->integer % out->ndim) + out->ndim) % out->ndim);
    op->handle = shim.softmax(out->ndim, out->dims, ax, out->nhwc);
  } else if (!strcmp(kind, "matmul")) {
    if (a->ndim != 3 || out->ndim != 3 || n_in != 2) return bad_node(g, k, "is a matmul without 3-d tensors");
    op->handle = shim.matmul(a->dims[0], a->dims[1], a->dims[2], out->dims[2], number(attrs, "transpose_b") != 0);
  } else {
    char what[128];
    snprintf(what, sizeof(what), "has kind '%.40s', which this runtime's oneDNN executor does not run", kind);
    return bad_node(g, k, what);
  }
  return 0;
}

/* Channels-last inside the subgraph: convolutions, and the 4-d ops reading what they made. */
static int layout(const Graph* g, const char* kind, const JsonNode* node, const Entry* e) {
  if (e->ndim != 4 || !kind) return 0;
  if (!strcmp(kind, "conv2d")) return 1;
  if (strcmp(kind, "pool2d") && strcmp(kind, "eltwise") && strcmp(kind, "binary") && strcmp(kind, "softmax"))
    return 0;
  const JsonNode* first = json_get(node, "inputs");
  first = first && first->type == JSON_ARRAY ? first->child : NULL;
  if (!first || first->type != JSON_NUMBER || !first->is_integer || first->integer < 0 ||
      first->integer >= g->n_entries)
    return 0;
  return g->entries[first->integer].nhwc;
}

void kiln_dnnl_free(void* handle) {
  Graph* g = handle;
  if (!g) return;
  for (int i = 0; g->ops && i < g->num_ops; i++) {
    if (!g->ops[i].handle) continue;
    (g->ops[i].kind == OP_LAYER ? shim.layer_free : shim.simple_free)(g->ops[i].handle);
  }
  for (int i = 0; g->entries && i < g->n_entries; i++) free(g->entries[i].buffer);
  for (int i = 0; g->names && i < g->n_entries - g->n_in; i++) free(g->names[i]);
  free(g->names);
  free(g->entries);
  free(g->outputs);
  free(g->ops);
  free(g->ptr);
  free(g->out_ptr);
  free(g->symbol);
  free(g);
}

int kiln_dnnl_create(const JsonNode* json, const char* symbol, void** out) {
  *out = NULL;
  if (load_shim()) return -1;
  const JsonNode *ins = json_get(json, "inputs"), *consts = json_get(json, "constants"),
                 *nodes = json_get(json, "nodes"), *outs = json_get(json, "outputs");
  if (!nodes || nodes->type != JSON_ARRAY || nodes->count > 100000)
    return kiln_error("%s: its JSON graph has no nodes list; re-export the library", symbol);
  Graph* g = calloc(1, sizeof(Graph));
  if (!g) return kiln_error("out of memory");
  int rc = -1;
  g->symbol = strdup(symbol);
  g->n_inputs = (int)ins->count;
  g->n_in = (int)(ins->count + consts->count); /* json_external.c checked both lists */
  g->n_out = (int)outs->count;
  g->n_entries = g->n_in + (int)nodes->count;
  g->entries = calloc((size_t)g->n_entries + 1, sizeof(Entry));
  g->names = calloc(nodes->count + 1, sizeof(char*));
  g->outputs = calloc((size_t)g->n_out + 1, sizeof(int));
  g->ops = calloc(nodes->count + (size_t)g->n_out + 1, sizeof(Op));
  g->ptr = calloc((size_t)g->n_entries + 1, sizeof(void*));
  g->out_ptr = calloc((size_t)g->n_out + 1, sizeof(void*));
  if (!g->symbol || !g->entries || !g->names || !g->outputs || !g->ops || !g->ptr || !g->out_ptr) {
    kiln_error("out of memory");
    goto done;
  }
  int e = 0;
  for (int list = 0; list < 2; list++) {
    for (const JsonNode* v = (list ? consts : ins)->child; v; v = v->next, e++) {
      int r = read_shape(v, &g->entries[e]);
      if (r) {
        kiln_error("%s: argument %d %s; the C runtime's oneDNN executor runs float32 tensors of rank 0 to %d",
                   symbol, e, r == -2 ? "is not float32" : "has no usable shape", MAX_RANK);
        goto done;
      }
    }
  }
  int k = 0;
  for (const JsonNode* v = outs->child; v; v = v->next, k++) {
    if (v->type != JSON_NUMBER || !v->is_integer || v->integer < g->n_in || v->integer >= g->n_entries) {
      kiln_error("%s: output %d of its JSON graph is not a node's value; re-export the library", symbol, k);
      goto done;
    }
    g->outputs[k] = (int)v->integer;
  }
  k = 0;
  for (const JsonNode* node = nodes->child; node; node = node->next, k++) {
    const char* name = json_string(json_get(node, "name"));
    if (!(g->names[k] = strdup(name ? name : "?"))) { kiln_error("out of memory"); goto done; }
    Entry* en = &g->entries[g->n_in + k];
    int r = read_shape(node, en);
    if (r) {
      bad_node(g, k, r == -2 ? "is not float32 (the oneDNN executor runs float32)" : "has no usable shape");
      goto done;
    }
    en->nhwc = layout(g, json_string(json_get(node, "kind")), node, en);
    int is_output = 0;
    for (int o = 0; o < g->n_out; o++) is_output |= g->outputs[o] == g->n_in + k;
    if (!is_output || en->nhwc) {
      size_t bytes = (size_t)(num_elements(en) + 16) * sizeof(float);
      if (posix_memalign((void**)&en->buffer, 64, bytes)) { kiln_error("out of memory"); goto done; }
    }
    Op* op = &g->ops[g->num_ops];
    if (create_op(g, k, node, op)) goto done;
    g->num_ops++;
    if (!op->handle) {
      kiln_error("%s: oneDNN cannot run %s: %s", symbol, g->names[k], shim.last_error());
      goto done;
    }
  }
  /* An output computed channels-last: one reorder into the caller's NCHW tensor. */
  for (int o = 0; o < g->n_out; o++) {
    Entry* en = &g->entries[g->outputs[o]];
    if (!en->nhwc) continue;
    Op* op = &g->ops[g->num_ops];
    *op = (Op){OP_SIMPLE, shim.reorder(en->dims, 0), {g->outputs[o], -1, -1, -1}, -1, o, "reorder", 0};
    if (!op->handle) {
      kiln_error("%s: oneDNN cannot reorder output %d: %s", symbol, o, shim.last_error());
      goto done;
    }
    g->num_ops++;
  }
  rc = 0;
done:
  if (rc) kiln_dnnl_free(g);
  else *out = g;
  return rc;
}

static void* data_of(const KilnValue* v) {
  const DLTensor* t = v->v_handle;
  return (char*)t->data + t->byte_offset;
}

int kiln_dnnl_run(void* handle, const KilnValue* args, int32_t n, int32_t threads) {
  Graph* g = handle;
  if (n != g->n_in + g->n_out) return kiln_error("takes %d tensors, got %d", g->n_in + g->n_out, n);
  for (int i = 0; i < g->n_in; i++) g->ptr[i] = data_of(&args[i]);
  for (int o = 0; o < g->n_out; o++) g->ptr[g->outputs[o]] = g->out_ptr[o] = data_of(&args[g->n_in + o]);
  for (int e = g->n_in; e < g->n_entries; e++)
    if (g->entries[e].buffer) g->ptr[e] = g->entries[e].buffer;
  /* OpenMP's thread count belongs to the calling thread: set it where the run happens. */
  if (threads > 0 && shim.omp_set_num_threads) shim.omp_set_num_threads(threads);
  g->ran = 1;
  for (int i = 0; i < g->num_ops; i++) {
    const Op* op = &g->ops[i];
    void* p[4];
    for (int j = 0; j < 4; j++) p[j] = op->in[j] >= 0 ? g->ptr[op->in[j]] : NULL;
    void* dst = op->dst >= 0 ? g->ptr[op->dst] : g->out_ptr[op->out];
    if (op->forget) shim.layer_forget(op->handle);
    int rc = op->kind == OP_LAYER ? shim.layer_exec(op->handle, p[0], p[1], p[2], p[3], dst)
                                  : shim.simple_exec(op->handle, p[0], p[1], dst);
    if (rc) return kiln_error("oneDNN failed in %s: %s", op->name, shim.last_error());
  }
  return 0;
}

void kiln_dnnl_input_changed(void* handle, const void* data) {
  Graph* g = handle;
  for (int i = 0; g->ran && i < g->num_ops; i++) {
    const Op* op = &g->ops[i];
    if (op->kind == OP_LAYER && g->ptr[op->in[1]] == data) shim.layer_forget(op->handle);
  }
}
