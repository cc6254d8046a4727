/* The graph executor over RPC: `tvm.graph_executor.create(graph_json, lib, dev)` on kiln_rpc.
 *
 * The Python client's graph_executor.create on a remote library calls that server function and
 * wraps the module it returns in a GraphModule, which fetches set_input / run / get_output / ...
 * by name (kiln/runtime/graph_executor.py has the same functions). The executor is the C one
 * (kiln_graph.h). Executors live until the session ends, like modules: function handles taken
 * from them may outlive the client's handle of the executor.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../internal.h"
#include "../kiln_graph.h"
#include "rpc.h"

enum { G_SET_INPUT, G_RUN, G_GET_OUTPUT, G_GET_INPUT, G_NUM_OUTPUTS, G_NUM_INPUTS, G_INPUT_INDEX, G_LOAD_PARAMS,
       G_SHARE_PARAMS, G_INPUT_NAMES, G_PROFILE };
static const char* const methods[] = {"set_input", "run", "get_output", "get_input", "get_num_outputs",
                                      "get_num_inputs", "get_input_index", "load_params", "share_params",
                                      "get_input_names", "profile"};
#define NUM_METHODS ((int)(sizeof(methods) / sizeof(methods[0])))

Obj* graph_obj(Session* s, const KVal* ref) {
  uint64_t id = ref->tag == T_MODULE_REF ? ref->id : ref->tag == T_INT && ref->i > 0 ? (uint64_t)ref->i : 0;
  Obj* o = id && id < s->objs.cap ? &s->objs.slots[id] : NULL;
  return o && o->kind == OBJ_GRAPH ? o : NULL;
}

int graph_create(Session* s, const KVal* a, uint32_t n, Reply* r) {
  if (n != 3 || a[0].tag != T_STR || a[1].tag != T_MODULE_REF || a[2].tag != T_DEVICE)
    return fail_with(r, "TypeError", "tvm.graph_executor.create takes (graph_json, module, device)");
  Obj* lib = obj_get(&s->objs, &a[1], OBJ_MODULE, NULL);
  if (!lib) return fail_with(r, "KeyError", NULL);
  KilnGraph* g;
  if (kiln_graph_create((const char*)a[0].ptr, a[0].len, lib->ptr, (DLDevice){a[2].dev_type, a[2].dev_id}, &g))
    return fail_with(r, "KilnError", NULL);
  void** kept = realloc(s->objs.graphs, (s->objs.ngraphs + 1) * sizeof(void*));
  uint64_t id = kept ? obj_store(&s->objs, OBJ_GRAPH, g, 0) : 0;
  if (kept) s->objs.graphs = kept;
  if (!id) {
    kiln_graph_free(g);
    return fail_with(r, "MemoryError", "out of memory");
  }
  s->objs.graphs[s->objs.ngraphs++] = g;
  wb_ref(&r->body, T_MODULE_REF, id);
  return 0;
}

int graph_get_function(Session* s, Obj* o, const char* name, Reply* r) {
  for (int m = 0; m < NUM_METHODS; m++) {
    if (strcmp(methods[m], name) != 0) continue;
    uint64_t id = obj_store(&s->objs, OBJ_BUILTIN, o->ptr, FN_GRAPH_BASE + m);
    if (!id) return fail_with(r, "MemoryError", NULL);
    wb_ref(&r->body, T_FUNC_REF, id);
    return 0;
  }
  wb_none(&r->body); /* the client raises "the remote module has no function ..." */
  return 0;
}

static int input_of(KilnGraph* g, const KVal* key, Reply* r) {
  int i = -1;
  if (key->tag == T_STR) {
    char name[256];
    snprintf(name, sizeof(name), "%.*s", (int)(key->len < 255 ? key->len : 255), (const char*)key->ptr);
    i = kiln_graph_input_index(g, name);
    if (i < 0) {
      char names[600] = "";
      size_t used = 0;
      for (int k = 0; k < kiln_graph_num_inputs(g) && used < sizeof(names); k++)
        used += (size_t)snprintf(names + used, sizeof(names) - used, "%s%s", k ? ", " : "", kiln_graph_input_name(g, k));
      fail_with(r, "KeyError", "graph executor: no input '%s'; inputs: %s", name, names);
      return -1;
    }
  } else if (key->tag == T_INT) {
    i = key->i >= 0 && key->i < kiln_graph_num_inputs(g) ? (int)key->i : -1;
    if (i < 0) fail_with(r, "KeyError", "graph executor: no input %lld; the graph has %d", (long long)key->i,
                         kiln_graph_num_inputs(g));
  } else {
    fail_with(r, "TypeError", "graph executor: an input is named by a str or an int");
  }
  return i;
}

/* A fresh array holding a copy of `t` (the client frees it; the executor's own array is reused). */
static int reply_copy(Session* s, const DLTensor* t, Reply* r) {
  DLTensor* copy;
  if (kiln_ndarray_alloc(t->shape, t->ndim, t->dtype, t->device, &copy)) return fail_with(r, "KilnError", NULL);
  uint64_t id = 0;
  if (kiln_ndarray_copy(t, copy) || !(id = obj_store(&s->objs, OBJ_ARRAY, copy, 0))) {
    kiln_ndarray_free(copy);
    return fail_with(r, "KilnError", NULL);
  }
  wb_array_ref(&r->body, id, copy);
  return 0;
}

static int set_input(Session* s, KilnGraph* g, const KVal* a, uint32_t n, Reply* r) {
  if (n != 2) return fail_with(r, "TypeError", "set_input takes (key, value)");
  int i = input_of(g, &a[0], r);
  if (i < 0) return -1;
  const DLTensor* dst = kiln_graph_input(g, i);
  DLTensor view;
  const DLTensor* src;
  if (a[1].tag == T_TENSOR) {
    DLDataType dtype;
    if (kiln_dtype_parse((const char*)a[1].dtype, a[1].dtype_len, &dtype)) return fail_with(r, "TypeError", NULL);
    view = (DLTensor){(void*)a[1].ptr, {KILN_DEVICE_CPU, 0}, (int32_t)a[1].ndim, dtype, a[1].shape, NULL, 0};
    if (kiln_ndarray_nbytes(&view) != a[1].len)
      return fail_with(r, "ValueError", "set_input: the tensor has %u bytes, its shape needs %zu", a[1].len,
                       kiln_ndarray_nbytes(&view));
    src = &view;
  } else if (a[1].tag == T_ARRAY_REF) {
    Obj* o = obj_get(&s->objs, &a[1], OBJ_ARRAY, NULL);
    if (!o) return fail_with(r, "KeyError", NULL);
    src = o->ptr;
  } else {
    return fail_with(r, "TypeError", "set_input: the value must be an array");
  }
  int same = src->ndim == dst->ndim && memcmp(&src->dtype, &dst->dtype, sizeof(DLDataType)) == 0;
  for (int d = 0; same && d < src->ndim; d++) same = src->shape[d] == dst->shape[d];
  if (!same) {
    kiln_graph_set_input_tensor(g, i, src); /* fails with the message naming both */
    return fail_with(r, "ValueError", NULL);
  }
  if (kiln_graph_set_input_tensor(g, i, src)) return fail_with(r, "KilnError", NULL);
  wb_none(&r->body);
  return 0;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* profile(number, repeat): JSON rows {"node", "name", "ms"} as the Python executor's profile. */
static int profile(KilnGraph* g, const KVal* a, uint32_t n, Reply* r) {
  int64_t number = 10, repeat = 3;
  if ((n > 0 && kv_int(&a[0], &number)) || (n > 1 && kv_int(&a[1], &repeat)) || number < 1 || repeat < 1 ||
      number > 1000000 || repeat > 1000)
    return fail_with(r, "TypeError", "profile takes (number >= 1, repeat >= 1)");
  if (kiln_graph_run(g)) return fail_with(r, "KilnError", NULL);
  int nk = kiln_graph_num_kernels(g);
  size_t cap = 64 + (size_t)nk * 400, used = 0;
  char* out = malloc(cap);
  double* times = malloc(sizeof(double) * (size_t)repeat);
  if (!out || !times) {
    free(out);
    free(times);
    return fail_with(r, "MemoryError", "out of memory");
  }
  used += (size_t)snprintf(out, cap, "[");
  DLDevice dev = kiln_graph_input(g, 0) ? kiln_graph_input(g, 0)->device : (DLDevice){KILN_DEVICE_CPU, 0};
  for (int k = 0; k < nk; k++) {
    for (int64_t rep = 0; rep < repeat; rep++) {
      double start = now_s();
      for (int64_t c = 0; c < number; c++)
        if (kiln_graph_run_kernel(g, k)) {
          free(out);
          free(times);
          return fail_with(r, "KilnError", NULL);
        }
      kiln_device_sync(dev);
      times[rep] = (now_s() - start) / (double)number;
    }
    for (int64_t x = 1; x < repeat; x++) /* insertion sort: the median of a few repeats */
      for (int64_t y = x; y > 0 && times[y] < times[y - 1]; y--) {
        double t = times[y];
        times[y] = times[y - 1];
        times[y - 1] = t;
      }
    used += (size_t)snprintf(out + used, cap - used, "%s{\"node\": %d, \"name\": \"%.300s\", \"ms\": %.9g}",
                             k ? ", " : "", kiln_graph_kernel_node(g, k), kiln_graph_kernel_name(g, k),
                             times[repeat / 2] * 1e3);
  }
  snprintf(out + used, cap - used, "]");
  wb_str(&r->body, out);
  free(out);
  free(times);
  return 0;
}

int graph_call(Session* s, KilnGraph* g, int method, const KVal* a, uint32_t n, Reply* r) {
  int64_t i;
  switch (method - FN_GRAPH_BASE) {
    case G_SET_INPUT:
      return set_input(s, g, a, n, r);
    case G_RUN:
      if (kiln_graph_run(g)) return fail_with(r, "KilnError", NULL);
      wb_none(&r->body);
      return 0;
    case G_GET_OUTPUT:
      if (n < 1 || kv_int(&a[0], &i) || !kiln_graph_output(g, (int)i) || i > 1 << 30)
        return fail_with(r, "IndexError", "get_output: index out of range; the graph has %d outputs",
                         kiln_graph_num_outputs(g));
      return reply_copy(s, kiln_graph_output(g, (int)i), r);
    case G_GET_INPUT: {
      int k = n >= 1 ? input_of(g, &a[0], r) : -1;
      if (k < 0) return n >= 1 ? -1 : fail_with(r, "TypeError", "get_input takes (key)");
      return reply_copy(s, kiln_graph_input(g, k), r);
    }
    case G_NUM_OUTPUTS:
      wb_int(&r->body, kiln_graph_num_outputs(g));
      return 0;
    case G_NUM_INPUTS:
      wb_int(&r->body, kiln_graph_num_inputs(g));
      return 0;
    case G_INPUT_INDEX: {
      char name[256];
      if (n < 1 || a[0].tag != T_STR) return fail_with(r, "TypeError", "get_input_index takes a name");
      snprintf(name, sizeof(name), "%.*s", (int)(a[0].len < 255 ? a[0].len : 255), (const char*)a[0].ptr);
      wb_int(&r->body, kiln_graph_input_index(g, name));
      return 0;
    }
    case G_LOAD_PARAMS:
      if (n < 1 || a[0].tag != T_BYTES) return fail_with(r, "TypeError", "load_params takes the parameter bytes");
      if (kiln_graph_load_params(g, a[0].ptr, a[0].len)) return fail_with(r, "KilnError", NULL);
      wb_none(&r->body);
      return 0;
    case G_INPUT_NAMES:
      wb_list(&r->body, (uint32_t)kiln_graph_num_inputs(g));
      for (int k = 0; k < kiln_graph_num_inputs(g); k++) wb_str(&r->body, kiln_graph_input_name(g, k));
      return 0;
    case G_PROFILE:
      return profile(g, a, n, r);
    default:
      return fail_with(r, "KilnError", "share_params is not supported by kiln_rpc's graph executor; load the "
                       "parameters into each executor with load_params");
  }
}

int graph_stream_set_input(Session* s, const KVal* a, uint32_t n, const KVal* stream, Reply* r) {
  if (n != 3 || &a[2] != stream || stream->tag != T_STREAM_TENSOR || (a[1].tag != T_STR && a[1].tag != T_INT)) return 0;
  uint64_t id = a[0].tag == T_FUNC_REF ? a[0].id : a[0].tag == T_INT && a[0].i > 0 ? (uint64_t)a[0].i : 0;
  Obj* o = id && id < s->objs.cap ? &s->objs.slots[id] : NULL;
  if (!o || o->kind != OBJ_BUILTIN || o->builtin != FN_GRAPH_BASE + G_SET_INPUT) return 0;
  KilnGraph* g = o->ptr;
  Reply probe = {0};
  int i = input_of(g, &a[1], &probe);
  if (i < 0 || strcmp(kiln_graph_input_scope(g, i), "global") != 0) return 0; /* the usual path reports it */
  DLTensor* dst = (DLTensor*)kiln_graph_input(g, i);
  DLDataType dtype;
  if (dst->device.device_type != KILN_DEVICE_CPU || kiln_dtype_parse((const char*)stream->dtype, stream->dtype_len, &dtype) ||
      memcmp(&dtype, &dst->dtype, sizeof(dtype)) != 0 || (int32_t)stream->ndim != dst->ndim ||
      stream->stream_len != kiln_ndarray_nbytes(dst))
    return 0;
  for (int d = 0; d < dst->ndim; d++)
    if (stream->shape[d] != dst->shape[d]) return 0;
  if (wire_recv_stream(s->fd, stream->stream_len, (uint8_t*)dst->data + dst->byte_offset, NULL, NULL)) return -1;
  /* Copying the input onto itself (a memmove in place) tells the library its input changed. */
  if (kiln_graph_set_input_tensor(g, i, dst)) return fail_with(r, "KilnError", NULL), 1;
  wb_none(&r->body);
  return 1;
}

/* time_evaluator("run", ...) on an executor: like kiln_func_time, for whole runs. */
int graph_time(KilnGraph* g, const char* name, int64_t number, int64_t repeat, double min_ms, Reply* r) {
  if (strcmp(name, "run") != 0)
    return fail_with(r, "AttributeError", "time_evaluator: a graph executor times 'run', not '%s'", name);
  if (kiln_graph_run(g)) return fail_with(r, "KilnError", NULL); /* warm-up */
  wb_list(&r->body, (uint32_t)repeat);
  long long calls = number;
  for (int64_t rep = 0; rep < repeat; rep++) {
    double elapsed;
    for (;;) {
      double start = now_s();
      for (long long c = 0; c < calls; c++)
        if (kiln_graph_run(g)) return fail_with(r, "KilnError", NULL);
      elapsed = now_s() - start;
      if (elapsed * 1e3 >= min_ms || calls > (1LL << 30)) break;
      double grow = elapsed <= 0 ? 2.0 : min_ms / (elapsed * 1e3) * 1.2;
      long long next = (long long)((double)calls * grow) + 1;
      calls = next > calls * 2 ? next : calls * 2;
    }
    wb_float(&r->body, elapsed / (double)calls);
  }
  return 0;
}
