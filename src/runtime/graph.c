/* The graph executor: the graph JSON of relay.build over a kernel library (kiln_graph.h).
 *
 * Mirrors kiln/runtime/graph_executor.py so both give the same results from the same files:
 * one buffer per storage_id sized for its largest tensor, every entry a view at offset 0 of
 * its buffer, kernels called with (inputs..., outputs...) as DLTensors. Entries that
 * attrs.storage_scope puts in a texture scope (opencl -device=adreno builds) get an OpenCL image
 * instead, folded as the kernels expect (texture.c), shared only by entries of the same storage_id,
 * scope, dtype and image size. The graph file may come from anywhere, so every index in it is
 * checked before it is used.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "kiln_graph.h"
#include "opencl.h"

#define MAX_ENTRIES (1 << 22)
#define MAX_STORAGE (1 << 22)

typedef struct {
  KilnFunction* func;
  KilnValue* args;   /* into KilnGraph.argbuf */
  int32_t* codes;
  int32_t num_args;
  int node;
} Kernel;

struct KilnGraph {
  DLDevice dev;
  KilnModule* lib;
  int owns_lib;
  int num_entries;
  DLTensor* entries;     /* views; shapes in `dims` */
  int64_t* dims;
  int num_storage;
  DLTensor** storage;    /* one uint8 buffer per storage id (NULL for ids no entry uses), then images */
  int num_sids;          /* storage[num_sids..num_storage): the images of texture entries */
  const char** scopes;   /* per entry: NULL (a buffer) or its texture scope (static strings) */
  int num_inputs;
  int* input_entry;
  char** input_names;
  unsigned char* is_param;
  int num_outputs;
  int* output_entry;
  char** output_nodes;   /* names of the nodes computing each output */
  int num_kernels;
  Kernel* kernels;
  KilnValue* argbuf;
  int32_t* codebuf;
};

static int bad(const char* what) {
  return kiln_error("graph JSON: %s; pass the mod.json that relay.build / tvmc compile wrote", what);
}

static const JsonNode* nth(const JsonNode* array, size_t i) {
  if (!array || array->type != JSON_ARRAY || i >= array->count) return NULL;
  const JsonNode* c = array->child;
  while (i--) c = c->next;
  return c;
}

static int as_int(const JsonNode* n, int64_t lo, int64_t hi, int64_t* out) {
  if (!n || n->type != JSON_NUMBER || !n->is_integer || n->integer < lo || n->integer > hi) return -1;
  *out = n->integer;
  return 0;
}

/* attrs[key] is ["list_xxx", [...]]: the list, checked to have `count` items. */
static const JsonNode* attr_list(const JsonNode* attrs, const char* key, size_t count) {
  const JsonNode* pair = json_get(attrs, key);
  const JsonNode* list = nth(pair, 1);
  if (!list || list->type != JSON_ARRAY || list->count != count) {
    char msg[160];
    snprintf(msg, sizeof(msg), "attrs.%s is missing or does not have one item per entry", key);
    bad(msg);
    return NULL;
  }
  return list;
}

/* An entry reference [node, index, version] -> entry number. */
static int entry_of(const JsonNode* ref, const int64_t* row_ptr, int num_nodes, int* out) {
  int64_t nid, k;
  if (as_int(nth(ref, 0), 0, num_nodes - 1, &nid) || as_int(nth(ref, 1), 0, MAX_ENTRIES, &k) ||
      row_ptr[nid] + k >= row_ptr[nid + 1])
    return bad("an input or head refers to a node output that does not exist");
  *out = (int)(row_ptr[nid] + k);
  return 0;
}

static char* dup(const char* s) {
  char* d = strdup(s ? s : "");
  if (!d) kiln_error("out of memory");
  return d;
}

/* "entry 5 (output 0 of node 'x')" for messages. */
static void entry_label(const JsonNode* nodes, const int64_t* row_ptr, int e, char* buf, size_t size) {
  int nid = 0;
  while ((size_t)nid + 1 < nodes->count && row_ptr[nid + 1] <= e) nid++;
  const char* name = json_string(json_get(nth(nodes, (size_t)nid), "name"));
  snprintf(buf, size, "entry %d (output %d of node '%.80s')", e, (int)(e - row_ptr[nid]), name ? name : "?");
}

/* attrs.storage_scope (TVM's encoding: ["list_str", [one scope per entry]]) into scopes[]; all
 * NULL (global) when absent. Returns how many entries are in a texture scope, or -1. */
static int read_scopes(const JsonNode* attrs, size_t n, const JsonNode* nodes, const int64_t* row_ptr,
                       const char** scopes) {
  const JsonNode* pair = json_get(attrs, "storage_scope");
  if (!pair) return 0;
  const JsonNode* list = nth(pair, 1);
  if (!list || list->type != JSON_ARRAY || list->count != n) {
    char msg[200];
    snprintf(msg, sizeof(msg), "attrs.storage_scope has %zu items for %zu entries; it needs one scope per "
             "entry, as [\"list_str\", [\"global\", \"global.texture\", ...]]",
             list && list->type == JSON_ARRAY ? list->count : 0, n);
    return bad(msg);
  }
  int textures = 0, e = 0;
  for (const JsonNode* c = list->child; c; c = c->next, e++) {
    const char* scope = json_string(c);
    int split = scope ? kiln_texture_split(scope) : -1;
    if (split < 0) {
      char where[160];
      entry_label(nodes, row_ptr, e, where, sizeof(where));
      return kiln_error("graph JSON: %s has storage scope '%.64s'; the C runtime knows global, global.texture, "
                        "global.texture-nhwc and global.texture-weight (rebuild with this kiln)",
                        where, scope ? scope : "(not a string)");
    }
    scopes[e] = split ? scope : NULL;
    textures += split > 0;
  }
  return textures;
}

/* The images made so far (storage[num_sids..num_storage)) and what they hold. */
typedef struct {
  int* sid;
  const char** scope;
  size_t limits[3];  /* device width, height, and the library's -texture_spatial_limit */
} Images;

/* The image of texture entry e: an existing one of the same storage_id, scope, dtype and size
 * (the memory planner let their lifetimes share it), else a new slot after the buffers. */
static int texture_slot(KilnGraph* g, int e, int sid, const char* scope, Images* im, const char* label) {
  DLTensor* t = &g->entries[e];
  if (g->dev.device_type != KILN_DEVICE_OPENCL)
    return kiln_error("graph %s is in scope %s, an OpenCL image; run the graph on an OpenCL device "
                      "(kiln_run --device cl)", label, scope);
  if (kiln_texture_check(t->shape, t->ndim, t->dtype, scope)) {
    char why[400];
    snprintf(why, sizeof(why), "%s", kiln_last_error());
    return kiln_error("graph %s: %s", label, why);
  }
  size_t w, h, ow, oh, ot;
  kiln_texture_fold(t->shape, scope, im->limits[0], im->limits[1], &w, &h);
  for (int k = g->num_sids; k < g->num_storage; k++) {
    DLTensor* s = g->storage[k];
    if (im->sid[k] == sid && !strcmp(im->scope[k], scope) && s->dtype.bits == t->dtype.bits &&
        kiln_opencl_image_dims((cl_mem)s->data, &ow, &oh, &ot) && ow == w && oh == h) {
      t->data = s->data;
      return 0;
    }
  }
  int k = g->num_storage;
  if (kiln_texture_alloc(t->shape, t->ndim, t->dtype, g->dev, scope, im->limits[2], &g->storage[k])) {
    char why[400];
    snprintf(why, sizeof(why), "%s", kiln_last_error());
    return kiln_error("graph %s, %s: %s", label, scope, why);
  }
  g->num_storage++;
  im->sid[k] = sid;
  im->scope[k] = scope;
  t->data = g->storage[k]->data;
  return 0;
}

/* Shape, dtype and storage_id of every entry, and the largest storage_id (-1 for no entries). */
static int read_entries(KilnGraph* g, const JsonNode* attrs, int* sid_of, int* max_sid) {
  size_t n = (size_t)g->num_entries;
  const JsonNode *shapes = attr_list(attrs, "shape", n), *dtypes = attr_list(attrs, "dltype", n),
                 *sids = attr_list(attrs, "storage_id", n);
  if (!shapes || !dtypes || !sids) return -1;
  size_t total_dims = 0;
  for (const JsonNode* s = shapes->child; s; s = s->next) {
    if (s->type != JSON_ARRAY || s->count > 64) return bad("a shape is not a list of at most 64 dims");
    total_dims += s->count;
  }
  g->entries = calloc(n + 1, sizeof(DLTensor));
  g->dims = calloc(total_dims + 1, sizeof(int64_t));
  if (!g->entries || !g->dims) return kiln_error("out of memory");
  *max_sid = -1;
  const JsonNode *s = shapes->child, *d = dtypes->child, *id = sids->child;
  int64_t* dims = g->dims;
  for (size_t e = 0; e < n; e++, s = s->next, d = d->next, id = id->next) {
    DLTensor* t = &g->entries[e];
    const char* dt = json_string(d);
    int64_t sid;
    if (!dt || kiln_dtype_parse(dt, strlen(dt), &t->dtype)) return bad("an entry has an unknown dltype");
    if (as_int(id, 0, MAX_STORAGE - 1, &sid)) return bad("a storage_id is not an integer in range");
    t->ndim = (int32_t)s->count;
    t->shape = dims;
    t->device = g->dev;
    int k = 0;
    for (const JsonNode* dim = s->child; dim; dim = dim->next, k++)
      if (as_int(dim, 0, INT64_MAX, &dims[k])) return bad("a shape has a negative or symbolic dimension");
    dims += k;
    if (kiln_ndarray_nbytes(t) == (size_t)-1) return bad("a shape is too large");
    sid_of[e] = (int)sid;
    if (sid > *max_sid) *max_sid = (int)sid;
  }
  return 0;
}

/* Buffers for the global entries (one per storage_id, as large as its largest entry) and images
 * for the texture entries. */
static int allocate(KilnGraph* g, const int* sid_of, const char** scopes, int textures, Images* im,
                    const JsonNode* nodes, const int64_t* row_ptr) {
  size_t n = (size_t)g->num_entries, slots = (size_t)g->num_storage + (size_t)textures + 1;
  size_t* sizes = calloc(slots, sizeof(size_t));
  g->storage = calloc(slots, sizeof(DLTensor*));
  im->sid = calloc(slots, sizeof(int));
  im->scope = calloc(slots, sizeof(char*));
  if (!sizes || !g->storage || !im->sid || !im->scope) { free(sizes); return kiln_error("out of memory"); }
  for (size_t e = 0; e < n; e++) {
    size_t b = kiln_ndarray_nbytes(&g->entries[e]);
    if (!scopes[e] && b > sizes[sid_of[e]]) sizes[sid_of[e]] = b;
  }
  /* The buffers a graph declares are bounded before any is allocated, as the Python executor
   * bounds them (docs/security.md). */
  size_t total = 0, limit = kiln_load_limit();
  int over = 0;
  for (size_t sid = 0; sid < slots && !over; sid++) {
    over = sizes[sid] > limit - total;
    total += over ? 0 : sizes[sid];
  }
  if (over) {
    free(sizes);
    return bad("its storage ids together need more bytes than KILN_LOAD_LIMIT allows; if the model is genuine, "
               "raise KILN_LOAD_LIMIT (docs/security.md)");
  }
  DLDataType u8 = {KILN_DL_UINT, 8, 1};
  int rc = 0;
  for (size_t e = 0; e < n && !rc; e++) {
    int sid = sid_of[e];
    if (scopes[e]) {
      char label[160];
      entry_label(nodes, row_ptr, (int)e, label, sizeof(label));
      rc = texture_slot(g, (int)e, sid, scopes[e], im, label);
      g->scopes[e] = kiln_texture_scope_name(scopes[e]);
      continue;
    }
    if (!g->storage[sid]) {
      int64_t len = (int64_t)(sizes[sid] ? sizes[sid] : 1);
      if ((rc = kiln_ndarray_alloc(&len, 1, u8, g->dev, &g->storage[sid]))) break;
    }
    g->entries[e].data = g->storage[sid]->data;
  }
  free(sizes);
  return rc;
}

static int plan_memory(KilnGraph* g, const JsonNode* attrs, const JsonNode* nodes, const int64_t* row_ptr) {
  size_t n = (size_t)g->num_entries;
  int* sid_of = calloc(n + 1, sizeof(int));
  const char** scopes = calloc(n + 1, sizeof(char*));
  g->scopes = calloc(n + 1, sizeof(char*));
  Images im = {NULL, NULL, {0, 0, g->lib->texture_limit > 0 ? (size_t)g->lib->texture_limit
                                                             : KILN_TEXTURE_DEFAULT_LIMIT}};
  int rc = -1, max_sid = -1, textures;
  if (!sid_of || !scopes || !g->scopes) { kiln_error("out of memory"); goto done; }
  if (read_entries(g, attrs, sid_of, &max_sid)) goto done;
  if ((textures = read_scopes(attrs, n, nodes, row_ptr, scopes)) < 0) goto done;
  g->num_sids = g->num_storage = max_sid + 1;
  /* Images folded as the kernels were compiled (texture.c): within the device's limits and the
   * library's -texture_spatial_limit. */
  if (textures && g->dev.device_type == KILN_DEVICE_OPENCL &&
      kiln_opencl_image_limits(g->dev.device_id, &im.limits[0], &im.limits[1]))
    goto done;
  for (int i = 0; i < 2; i++) if (im.limits[i] > im.limits[2]) im.limits[i] = im.limits[2];
  rc = allocate(g, sid_of, scopes, textures, &im, nodes, row_ptr);
done:
  free(sid_of);
  free(scopes);
  free(im.sid);
  free(im.scope);
  return rc;
}

static int read_io(KilnGraph* g, const JsonNode* root, const JsonNode* nodes, const int64_t* row_ptr) {
  const JsonNode *args = json_get(root, "arg_nodes"), *heads = json_get(root, "heads");
  if (!args || args->type != JSON_ARRAY || !heads || heads->type != JSON_ARRAY)
    return bad("arg_nodes or heads is missing");
  /* Outputs of data-dependent size (NonZero, Unique, NonMaxSuppression) come with a hidden length
   * head that this runtime does not cut them to yet: refuse rather than return the padded buffer. */
  const JsonNode* dynamic = json_get(root, "dynamic_heads");
  if (dynamic && (dynamic->type != JSON_ARRAY || dynamic->count))
    return kiln_error("graph JSON: the graph has outputs of data-dependent size (\"dynamic_heads\": NonZero, "
                      "Unique, NonMaxSuppression); the C runtime does not run such graphs yet; run it with "
                      "kiln's Python runtime (kiln.runtime.graph_executor)");
  int num_nodes = (int)nodes->count;
  g->num_inputs = (int)args->count;
  g->input_entry = calloc(args->count + 1, sizeof(int));
  g->input_names = calloc(args->count + 1, sizeof(char*));
  g->is_param = calloc(args->count + 1, 1);
  g->num_outputs = (int)heads->count;
  g->output_entry = calloc(heads->count + 1, sizeof(int));
  g->output_nodes = calloc(heads->count + 1, sizeof(char*));
  if (!g->input_entry || !g->input_names || !g->is_param || !g->output_entry || !g->output_nodes)
    return kiln_error("out of memory");
  int i = 0;
  for (const JsonNode* a = args->child; a; a = a->next, i++) {
    int64_t nid;
    if (as_int(a, 0, num_nodes - 1, &nid) || row_ptr[nid] + 1 != row_ptr[nid + 1])
      return bad("arg_nodes names a node that is not a single-output input");
    g->input_entry[i] = (int)row_ptr[nid];
    if (!(g->input_names[i] = dup(json_string(json_get(nth(nodes, (size_t)nid), "name"))))) return -1;
  }
  i = 0;
  for (const JsonNode* h = heads->child; h; h = h->next, i++) {
    if (entry_of(h, row_ptr, num_nodes, &g->output_entry[i])) return -1;
    int64_t nid = nth(h, 0)->integer;
    if (!(g->output_nodes[i] = dup(json_string(json_get(nth(nodes, (size_t)nid), "name"))))) return -1;
  }
  return 0;
}

static int bind_kernels(KilnGraph* g, const JsonNode* nodes, const int64_t* row_ptr) {
  int num_nodes = (int)nodes->count;
  size_t total_args = 0;
  for (const JsonNode* n = nodes->child; n; n = n->next) {
    const char* op = json_string(json_get(n, "op"));
    if (op && strcmp(op, "null") == 0) continue;
    const JsonNode* ins = json_get(n, "inputs");
    total_args += (ins ? ins->count : 0) + 64;
    g->num_kernels++;
  }
  g->kernels = calloc((size_t)g->num_kernels + 1, sizeof(Kernel));
  g->argbuf = calloc(total_args + 1, sizeof(KilnValue));
  g->codebuf = calloc(total_args + 1, sizeof(int32_t));
  if (!g->kernels || !g->argbuf || !g->codebuf) return kiln_error("out of memory");
  size_t used = 0;
  int k = 0, nid = 0;
  for (const JsonNode* n = nodes->child; n; n = n->next, nid++) {
    const char* op = json_string(json_get(n, "op"));
    const char* name = json_string(json_get(n, "name"));
    if (op && strcmp(op, "null") == 0) continue;
    if (!op || strcmp(op, "tvm_op") != 0)
      return kiln_error("graph node %d (%s): op '%s' is not runnable; the graph executor runs 'tvm_op' nodes",
                        nid, name ? name : "?", op ? op : "?");
    const char* fname = json_string(json_get(json_get(n, "attrs"), "func_name"));
    if (!fname) fname = name;
    Kernel* kern = &g->kernels[k++];
    kern->node = nid;
    const char* offload = json_string(json_get(json_get(n, "attrs"), "compiler"));
    /* Offloaded functions are the library's too (json_external.c), unless it lost them. */
    if (offload && (!fname || kiln_module_get_function(g->lib, fname, &kern->func)))
      return kiln_error("graph node %d: '%s' is offloaded to %s, but the library carries no such subgraph; was "
                        "mod.json built together with this mod.so?", nid, fname ? fname : "?", offload);
    if (!fname || kiln_module_get_function(g->lib, fname, &kern->func))
      return kiln_error("graph node %d: the library has no kernel '%s'; was mod.json built together with "
                        "this mod.so?", nid, fname ? fname : "?");
    const JsonNode* ins = json_get(n, "inputs");
    if (!ins || ins->type != JSON_ARRAY) return bad("a tvm_op node has no inputs list");
    int64_t outs = row_ptr[nid + 1] - row_ptr[nid];
    if (outs > 63) return bad("a node has more than 63 outputs");
    kern->args = g->argbuf + used;
    kern->codes = g->codebuf + used;
    int a = 0;
    for (const JsonNode* ref = ins->child; ref; ref = ref->next, a++) {
      int e;
      if (entry_of(ref, row_ptr, num_nodes, &e)) return -1;
      kern->args[a].v_handle = &g->entries[e];
      kern->codes[a] = KILN_DLTENSOR;
    }
    for (int64_t e = row_ptr[nid]; e < row_ptr[nid + 1]; e++, a++) {
      kern->args[a].v_handle = &g->entries[e];
      kern->codes[a] = KILN_DLTENSOR;
    }
    kern->num_args = a;
    used += (size_t)a;
    /* Shapes and dtypes are fixed from here on: checking once makes run() bare calls. */
    if (kiln_func_check(kern->func, kern->args, kern->codes, a)) {
      char why[700];
      snprintf(why, sizeof(why), "%s", kiln_last_error());
      return kiln_error("graph node %d (%s): the graph and the kernel disagree: %s", nid, fname, why);
    }
  }
  return 0;
}

int kiln_graph_create(const char* text, size_t len, KilnModule* lib, DLDevice dev, KilnGraph** out) {
  *out = NULL;
  if (!kiln_device_exist(dev))
    return kiln_error("device (type %d, id %d) does not exist on this machine", dev.device_type, dev.device_id);
  if (lib->device_type != dev.device_type) {
    static const char* const kinds[] = {"?", "cpu", "cuda", "?", "cl"};
    const char* want = lib->device_type >= 1 && lib->device_type <= 4 ? kinds[lib->device_type] : "?";
    const char* got = dev.device_type >= 1 && dev.device_type <= 4 ? kinds[dev.device_type] : "?";
    return kiln_error("the library's kernels run on the %s device (type %d), not on %s (type %d); run it there "
                      "(kiln_run --device %s) or compile for that device", want, lib->device_type, got,
                      dev.device_type, want);
  }
  JsonNode* root = json_parse(text, len);
  if (!root) {
    char why[300];
    snprintf(why, sizeof(why), "%s", kiln_last_error());
    return kiln_error("graph JSON is not valid JSON (%s)", why);
  }
  KilnGraph* g = calloc(1, sizeof(KilnGraph));
  int64_t* row_ptr = NULL;
  int rc = -1;
  if (!g) { kiln_error("out of memory"); goto done; }
  g->dev = dev;
  g->lib = lib;
  const JsonNode *nodes = json_get(root, "nodes"), *rows = json_get(root, "node_row_ptr"),
                 *attrs = json_get(root, "attrs");
  if (!nodes || nodes->type != JSON_ARRAY || !rows || rows->type != JSON_ARRAY || !attrs ||
      rows->count != nodes->count + 1) {
    bad("nodes, node_row_ptr or attrs is missing (or node_row_ptr is not one longer than nodes)");
    goto done;
  }
  row_ptr = calloc(rows->count, sizeof(int64_t));
  if (!row_ptr) { kiln_error("out of memory"); goto done; }
  int64_t prev = 0, i = 0;
  for (const JsonNode* r = rows->child; r; r = r->next, i++) {
    if (as_int(r, prev, MAX_ENTRIES, &row_ptr[i]) || (i == 0 && row_ptr[0] != 0)) {
      bad("node_row_ptr is not an increasing list starting at 0");
      goto done;
    }
    prev = row_ptr[i];
  }
  g->num_entries = (int)row_ptr[nodes->count];
  if (plan_memory(g, attrs, nodes, row_ptr) || read_io(g, root, nodes, row_ptr) || bind_kernels(g, nodes, row_ptr)) goto done;
  rc = 0;
done:
  free(row_ptr);
  json_free(root);
  if (rc) kiln_graph_free(g);
  else *out = g;
  return rc;
}

void kiln_graph_free(KilnGraph* g) {
  if (!g) return;
  for (int i = 0; i < g->num_storage; i++) kiln_ndarray_free(g->storage[i]);
  for (int i = 0; g->input_names && i < g->num_inputs; i++) free(g->input_names[i]);
  for (int i = 0; g->output_nodes && i < g->num_outputs; i++) free(g->output_nodes[i]);
  free(g->storage);
  free(g->entries);
  free(g->scopes);
  free(g->dims);
  free(g->input_entry);
  free(g->input_names);
  free(g->is_param);
  free(g->output_entry);
  free(g->output_nodes);
  free(g->kernels);
  free(g->argbuf);
  free(g->codebuf);
  if (g->owns_lib) kiln_module_free(g->lib);
  free(g);
}

void kiln_graph_take_module(KilnGraph* g) { g->owns_lib = 1; }

int kiln_graph_run(KilnGraph* g) {
  for (int k = 0; k < g->num_kernels; k++) {
    Kernel* kern = &g->kernels[k];
    if (kiln_func_call_prepared(kern->func, kern->args, kern->num_args)) {
      char why[900];
      snprintf(why, sizeof(why), "%s", kiln_last_error());
      return kiln_error("graph node %d (%s) failed: %s", kern->node, kern->func->name, why);
    }
  }
  return kiln_device_sync(g->dev);
}

int kiln_graph_num_kernels(const KilnGraph* g) { return g->num_kernels; }

const char* kiln_graph_kernel_name(const KilnGraph* g, int k) {
  return k >= 0 && k < g->num_kernels ? g->kernels[k].func->name : NULL;
}

int kiln_graph_kernel_node(const KilnGraph* g, int k) {
  return k >= 0 && k < g->num_kernels ? g->kernels[k].node : -1;
}

int kiln_graph_run_kernel(KilnGraph* g, int k) {
  if (k < 0 || k >= g->num_kernels) return kiln_error("kernel %d out of range; the graph has %d", k, g->num_kernels);
  Kernel* kern = &g->kernels[k];
  return kiln_func_call_prepared(kern->func, kern->args, kern->num_args);
}

/* ---- inputs and outputs -------------------------------------------------------------------- */
int kiln_graph_num_inputs(const KilnGraph* g) { return g->num_inputs; }
int kiln_graph_num_outputs(const KilnGraph* g) { return g->num_outputs; }

const char* kiln_graph_input_name(const KilnGraph* g, int i) {
  return i >= 0 && i < g->num_inputs ? g->input_names[i] : NULL;
}

int kiln_graph_input_index(const KilnGraph* g, const char* name) {
  for (int i = 0; i < g->num_inputs; i++)
    if (strcmp(g->input_names[i], name) == 0) return i;
  return -1;
}

int kiln_graph_input_is_param(const KilnGraph* g, int i) {
  return i >= 0 && i < g->num_inputs ? g->is_param[i] : 0;
}

const DLTensor* kiln_graph_input(const KilnGraph* g, int i) {
  return i >= 0 && i < g->num_inputs ? &g->entries[g->input_entry[i]] : NULL;
}

static void describe(const DLTensor* t, char* buf, size_t size) {
  char dt[16] = "?";
  kiln_dtype_format(t->dtype, dt, sizeof(dt));
  size_t used = (size_t)snprintf(buf, size, "%s[", dt);
  for (int i = 0; i < t->ndim && used < size; i++)
    used += (size_t)snprintf(buf + used, size - used, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
  if (used < size) snprintf(buf + used, size - used, "]");
}

static int input_names_error(const KilnGraph* g, const char* name) {
  char names[600] = "";
  size_t used = 0;
  for (int i = 0; i < g->num_inputs && used < sizeof(names); i++)
    if (!g->is_param[i]) used += (size_t)snprintf(names + used, sizeof(names) - used, "%s%s", used ? ", " : "",
                                                  g->input_names[i]);
  return kiln_error("the model has no input '%s'; its inputs are: %s", name, names);
}

int kiln_graph_set_input(KilnGraph* g, const char* name, const void* data, size_t nbytes) {
  int i = kiln_graph_input_index(g, name);
  if (i < 0) return input_names_error(g, name);
  DLTensor* t = &g->entries[g->input_entry[i]];
  size_t want = kiln_ndarray_nbytes(t);
  if (nbytes != want) {
    char desc[200];
    describe(t, desc, sizeof(desc));
    return kiln_error("input '%s' is %s (%zu bytes); got %zu bytes", name, desc, want, nbytes);
  }
  if (kiln_ndarray_write(t, 0, data, nbytes)) return -1;
  kiln_external_input_changed(g->lib, t->data); /* an offloaded layer's weight: oneDNN reorders it again */
  return 0;
}

int kiln_graph_set_input_tensor(KilnGraph* g, int i, const DLTensor* value) {
  if (i < 0 || i >= g->num_inputs) return kiln_error("input %d out of range; the graph has %d", i, g->num_inputs);
  DLTensor* t = &g->entries[g->input_entry[i]];
  if (kiln_ndarray_copy(value, t)) {
    char want[200], got[200];
    describe(t, want, sizeof(want));
    describe(value, got, sizeof(got));
    return kiln_error("input '%s' is %s; got %s", g->input_names[i], want, got);
  }
  kiln_external_input_changed(g->lib, t->data);
  return 0;
}

const char* kiln_graph_input_scope(const KilnGraph* g, int i) {
  const char* scope = i >= 0 && i < g->num_inputs ? g->scopes[g->input_entry[i]] : NULL;
  return scope ? scope : "global";
}

const char* kiln_graph_output_scope(const KilnGraph* g, int i) {
  const char* scope = i >= 0 && i < g->num_outputs ? g->scopes[g->output_entry[i]] : NULL;
  return scope ? scope : "global";
}

int kiln_graph_output_index(const KilnGraph* g, const char* name) {
  if (strncmp(name, "output_", 7) == 0 && name[7]) {
    char* end;
    long v = strtol(name + 7, &end, 10);
    if (!*end && v >= 0 && v < g->num_outputs) return (int)v;
  }
  for (int i = 0; i < g->num_outputs; i++)
    if (strcmp(g->output_nodes[i], name) == 0) return i;
  return -1;
}

const DLTensor* kiln_graph_output(const KilnGraph* g, int i) {
  return i >= 0 && i < g->num_outputs ? &g->entries[g->output_entry[i]] : NULL;
}

int kiln_graph_get_output(const KilnGraph* g, int i, void* data, size_t nbytes) {
  const DLTensor* t = kiln_graph_output(g, i);
  if (!t) return kiln_error("output %d out of range; the graph has %d outputs", i, g->num_outputs);
  size_t want = kiln_ndarray_nbytes(t);
  if (nbytes != want) return kiln_error("output %d has %zu bytes; got a buffer of %zu", i, want, nbytes);
  return kiln_ndarray_read(t, 0, data, nbytes);
}

/* Used by params.c: mark input i as a loaded parameter. */
void kiln_graph_mark_param(KilnGraph* g, int i) { g->is_param[i] = 1; }
