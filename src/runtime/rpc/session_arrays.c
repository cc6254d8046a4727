/* Session requests about arrays and kernels: allocate, copy in and out, call, time. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rpc.h"

#define MAX_CALL_ARGS 256

static int device_of(const KVal* v, DLDevice* out, Reply* r) {
  if (v->tag != T_DEVICE) return fail_with(r, "TypeError", "expected a device");
  *out = (DLDevice){v->dev_type, v->dev_id};
  return 0;
}

int op_empty(Session* s, const KVal* a, uint32_t n, Reply* r) {
  if (n < 3 || a[0].tag != T_LIST || a[1].tag != T_STR)
    return fail_with(r, "TypeError", "empty takes [shape, dtype, device]");
  if (a[0].count > 64) return fail_with(r, "ValueError", "arrays have at most 64 dimensions");
  int64_t shape[64];
  for (uint32_t i = 0; i < a[0].count; i++)
    if (kv_int(&a[0].items[i], &shape[i]) || shape[i] < 0)
      return fail_with(r, "ValueError", "shape entries must be non-negative ints");
  DLDataType dtype;
  DLDevice dev;
  DLTensor* t;
  if (kiln_dtype_parse((const char*)a[1].ptr, a[1].len, &dtype)) return fail_with(r, "TypeError", NULL);
  if (device_of(&a[2], &dev, r)) return -1;
  if (kiln_ndarray_alloc(shape, (int32_t)a[0].count, dtype, dev, &t)) return fail_with(r, "KilnError", NULL);
  uint64_t id = obj_store(&s->objs, OBJ_ARRAY, t, 0);
  if (!id) {
    kiln_ndarray_free(t);
    return fail_with(r, "MemoryError", NULL);
  }
  wb_array_ref(&r->body, id, t);
  return 0;
}

int op_copy_in(Session* s, const KVal* a, uint32_t n, Reply* r) {
  if (n < 3 || a[1].tag != T_INT || a[1].i < 0 || a[2].tag != T_BYTES)
    return fail_with(r, "TypeError", "copy_in takes [array, byte_offset, bytes]");
  Obj* o = obj_get(&s->objs, &a[0], OBJ_ARRAY, NULL);
  if (!o) return fail_with(r, "KeyError", NULL);
  if (kiln_ndarray_write(o->ptr, (uint64_t)a[1].i, a[2].ptr, a[2].len)) return fail_with(r, "ValueError", NULL);
  wb_none(&r->body);
  return 0;
}

int op_copy_out(Session* s, const KVal* a, uint32_t n, Reply* r) {
  if (n < 3 || a[1].tag != T_INT || a[1].i < 0 || a[2].tag != T_INT || a[2].i < 0 || a[2].i > (int64_t)RPC_CHUNK)
    return fail_with(r, "TypeError", "copy_out takes [array, byte_offset, nbytes <= 16 MiB]");
  Obj* o = obj_get(&s->objs, &a[0], OBJ_ARRAY, NULL);
  if (!o) return fail_with(r, "KeyError", NULL);
  DLTensor* t = o->ptr;
  size_t total = kiln_ndarray_nbytes(t);
  uint64_t off = (uint64_t)a[1].i, len = (uint64_t)a[2].i;
  if (off > total || len > total - off)
    return fail_with(r, "ValueError", "byte range [%llu, %llu) is outside the array's %zu bytes",
                     (unsigned long long)off, (unsigned long long)(off + len), total);
  if (t->device.device_type != KILN_DEVICE_CPU) { /* device memory: read it to the host first */
    void* host = malloc(len ? (size_t)len : 1);
    if (!host) return fail_with(r, "MemoryError", "out of memory reading %llu bytes", (unsigned long long)len);
    if (kiln_ndarray_read(t, off, host, (size_t)len)) {
      free(host);
      return fail_with(r, "KilnError", NULL);
    }
    wb_bytes_header(&r->body, (uint32_t)len);
    r->tail = r->owned_tail = host;
    r->tail_len = (size_t)len;
    return 0;
  }
  /* Zero copy: the reply is sent straight from the array's memory. */
  wb_bytes_header(&r->body, (uint32_t)len);
  r->tail = (const char*)t->data + t->byte_offset + off;
  r->tail_len = (size_t)len;
  return 0;
}

typedef struct {
  KilnValue values[MAX_CALL_ARGS];
  int32_t codes[MAX_CALL_ARGS];
  DLTensor* temps[MAX_CALL_ARGS]; /* tensors sent by value, freed after the call */
  int ntemps;
} Packed;

static void release(Packed* p) {
  for (int i = 0; i < p->ntemps; i++) kiln_ndarray_free(p->temps[i]);
  p->ntemps = 0;
}

/* Wire values -> the packed calling convention. */
static int pack(Session* s, const KVal* a, uint32_t n, Packed* p, Reply* r) {
  if (n > MAX_CALL_ARGS) return fail_with(r, "TypeError", "at most %d arguments", MAX_CALL_ARGS);
  for (uint32_t i = 0; i < n; i++) {
    const KVal* v = &a[i];
    switch (v->tag) {
      case T_INT:
      case T_BOOL:
        p->values[i].v_int64 = v->i;
        p->codes[i] = KILN_INT;
        break;
      case T_FLOAT:
        p->values[i].v_float64 = v->f;
        p->codes[i] = KILN_FLOAT;
        break;
      case T_NONE:
        p->values[i].v_handle = NULL;
        p->codes[i] = KILN_HANDLE;
        break;
      case T_ARRAY_REF: {
        Obj* o = obj_get(&s->objs, v, OBJ_ARRAY, NULL);
        if (!o) return fail_with(r, "KeyError", NULL);
        p->values[i].v_handle = o->ptr;
        p->codes[i] = KILN_DLTENSOR;
        break;
      }
      case T_TENSOR: {
        DLDataType dtype;
        DLTensor* t;
        if (kiln_dtype_parse((const char*)v->dtype, v->dtype_len, &dtype)) return fail_with(r, "TypeError", NULL);
        /* Compare sizes before allocating: the shape is the client's word, the bytes are real. */
        DLTensor want = {NULL, {v->dev_type, v->dev_id}, (int32_t)v->ndim, dtype, v->shape, NULL, 0};
        if (kiln_ndarray_nbytes(&want) != v->len)
          return fail_with(r, "ValueError", "argument %u: tensor data has %u bytes, its shape needs %zu", i, v->len,
                           kiln_ndarray_nbytes(&want));
        if (kiln_ndarray_alloc(v->shape, (int32_t)v->ndim, dtype, want.device, &t))
          return fail_with(r, "KilnError", NULL);
        p->temps[p->ntemps++] = t;
        kiln_ndarray_write(t, 0, v->ptr, v->len);
        p->values[i].v_handle = t;
        p->codes[i] = KILN_DLTENSOR;
        break;
      }
      default:
        return fail_with(r, "TypeError", "argument %u: a value of wire tag %d cannot be passed to a kernel", i, v->tag);
    }
  }
  return 0;
}

int op_call_kernel(Session* s, KilnFunction* f, const KVal* a, uint32_t n, Reply* r) {
  Packed p;
  p.ntemps = 0;
  int rc = pack(s, a, n, &p, r);
  if (rc == 0 && kiln_func_call(f, p.values, p.codes, (int32_t)n)) {
    /* Argument mistakes read "add_one: argument 'B' ..." like the Python runtime's ValueError. */
    rc = fail_with(r, strstr(kiln_last_error(), ": argument '") || strstr(kiln_last_error(), " takes ")
                          ? "ValueError" : "KilnError", NULL);
  }
  release(&p);
  if (rc == 0) wb_none(&r->body);
  return rc;
}

int op_time_eval(Session* s, const KVal* a, uint32_t n, Reply* r) {
  int64_t number, repeat;
  double min_ms;
  if (n < 6 || a[1].tag != T_STR || a[2].tag != T_DEVICE || kv_int(&a[3], &number) || kv_int(&a[4], &repeat) ||
      kv_number(&a[5], &min_ms))
    return fail_with(r, "TypeError", "time_evaluator takes [module, name, device, number, repeat, min_repeat_ms, args...]");
  if (!kiln_device_exist((DLDevice){a[2].dev_type, a[2].dev_id}))
    return fail_with(r, "KilnError", "device type %d index %d is not available on this device", a[2].dev_type,
                     a[2].dev_id);
  if (number < 1 || number > (1 << 30) || repeat < 1 || repeat > 10000)
    return fail_with(r, "ValueError", "time_evaluator: number=%lld and repeat=%lld must be >= 1",
                     (long long)number, (long long)repeat);
  char name[256];
  snprintf(name, sizeof(name), "%.*s", (int)(a[1].len < 255 ? a[1].len : 255), (const char*)a[1].ptr);
  Obj* graph = graph_obj(s, &a[0]);
  if (graph) return graph_time(graph->ptr, name, number, repeat, min_ms, r);
  Obj* o = obj_get(&s->objs, &a[0], OBJ_MODULE, NULL);
  if (!o) return fail_with(r, "KeyError", NULL);
  KilnFunction* f;
  if (kiln_module_get_function(o->ptr, name, &f)) return fail_with(r, "AttributeError", NULL);
  Packed p;
  p.ntemps = 0;
  double* costs = malloc(sizeof(double) * (size_t)repeat);
  int rc = costs ? pack(s, a + 6, n - 6, &p, r) : fail_with(r, "MemoryError", "out of memory");
  if (rc == 0 && kiln_func_time(f, p.values, p.codes, (int32_t)(n - 6), (int)number, (int)repeat, min_ms, costs))
    rc = fail_with(r, "KilnError", NULL);
  release(&p);
  if (rc == 0) {
    wb_list(&r->body, (uint32_t)repeat);
    for (int64_t i = 0; i < repeat; i++) wb_float(&r->body, costs[i]);
  }
  free(costs);
  return rc;
}
