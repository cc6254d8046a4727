/* The tagged value codec of protocol.py, in C.
 *
 * Decoding reads frames from the network, so every read is checked against the frame's end
 * before it happens, counts are checked against the bytes left before anything is allocated,
 * nesting is bounded and the number of values per frame is capped (RPC_MAX_VALUES). Decoded
 * strings and bytes point into the frame: no copies of bulk data.
 */
#include <stdlib.h>
#include <string.h>

#include "rpc.h"

struct ArenaBlock {
  struct ArenaBlock* next;
  size_t used, size;
  max_align_t data[];
};

static void* arena_alloc(Arena* a, size_t n) {
  n = (n + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
  ArenaBlock* b = a->head;
  if (!b || b->size - b->used < n) {
    size_t size = n > 16384 ? n : 16384;
    b = malloc(sizeof(ArenaBlock) + size);
    if (!b) return NULL;
    b->size = size;
    b->used = 0;
    b->next = a->head;
    a->head = b;
  }
  void* p = (char*)b->data + b->used;
  b->used += n;
  memset(p, 0, n);
  return p;
}

void arena_free(Arena* a) {
  while (a->head) {
    ArenaBlock* next = a->head->next;
    free(a->head);
    a->head = next;
  }
  a->values = 0;
}

typedef struct {
  const uint8_t* p;
  const uint8_t* end;
  const uint8_t* start;
  Arena* arena;
} Reader;

static int bad(Reader* r, const char* what) {
  return kiln_error("malformed frame: %s at offset %ld", what, (long)(r->p - r->start));
}

static int take(Reader* r, size_t n, const uint8_t** out) {
  if ((size_t)(r->end - r->p) < n) return bad(r, "value runs past the end of the frame");
  *out = r->p;
  r->p += n;
  return 0;
}

static uint32_t le32(const uint8_t* p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t le64(const uint8_t* p) { return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32; }

static int u32(Reader* r, uint32_t* out) {
  const uint8_t* p = NULL;
  if (take(r, 4, &p)) return -1;
  *out = le32(p);
  return 0;
}

static int device(Reader* r, KVal* v) {
  const uint8_t* p = NULL;
  if (take(r, 8, &p)) return -1;
  v->dev_type = (int32_t)le32(p);
  v->dev_id = (int32_t)le32(p + 4);
  return 0;
}

static int array_meta(Reader* r, KVal* v) {
  const uint8_t* p = NULL;
  if (u32(r, &v->dtype_len) || take(r, v->dtype_len, &v->dtype)) return -1;
  if (u32(r, &v->ndim)) return -1;
  if (v->ndim > 64) return bad(r, "tensor has more than 64 dimensions");
  if (take(r, 8u * v->ndim, &p)) return -1;
  /* Copied out: the frame holds them unaligned. */
  v->shape = arena_alloc(r->arena, sizeof(int64_t) * (v->ndim ? v->ndim : 1));
  if (!v->shape) return kiln_error("out of memory decoding a frame");
  for (uint32_t i = 0; i < v->ndim; i++) {
    v->shape[i] = (int64_t)le64(p + 8 * i);
    if (v->shape[i] < 0) return bad(r, "tensor shape has a negative dimension");
  }
  return device(r, v);
}

static int value(Reader* r, KVal* v, int depth);

static int items(Reader* r, KVal* v, uint32_t n, int depth) {
  /* Every value takes at least one byte: a bogus count fails before allocating. */
  if (n > (size_t)(r->end - r->p)) return bad(r, "count larger than the frame");
  if (n > RPC_MAX_VALUES - r->arena->values) return bad(r, "too many values in one frame");
  r->arena->values += n;
  v->items = arena_alloc(r->arena, sizeof(KVal) * (n ? n : 1));
  if (!v->items) return kiln_error("out of memory decoding a frame");
  for (uint32_t i = 0; i < n; i++)
    if (value(r, &v->items[i], depth + 1)) return -1;
  return 0;
}

static int value(Reader* r, KVal* v, int depth) {
  const uint8_t* p = NULL;
  if (depth > RPC_MAX_DEPTH) return bad(r, "value nested too deeply");
  v->raw = r->p;
  if (take(r, 1, &p)) return -1;
  v->tag = *p;
  switch (v->tag) {
    case T_NONE: break;
    case T_INT:
      if (take(r, 8, &p)) return -1;
      v->i = (int64_t)le64(p);
      break;
    case T_FLOAT: {
      if (take(r, 8, &p)) return -1;
      uint64_t bits = le64(p);
      memcpy(&v->f, &bits, sizeof(double));
      break;
    }
    case T_BOOL:
      if (take(r, 1, &p)) return -1;
      v->i = *p != 0;
      break;
    case T_STR:
    case T_BYTES:
      if (u32(r, &v->len) || take(r, v->len, &v->ptr)) return -1;
      break;
    case T_LIST:
      if (u32(r, &v->count) || items(r, v, v->count, depth)) return -1;
      break;
    case T_DICT:
      if (u32(r, &v->count)) return -1;
      if (v->count > UINT32_MAX / 2) return bad(r, "dict count too large");
      if (items(r, v, 2 * v->count, depth)) return -1;
      for (uint32_t i = 0; i < v->count; i++) {
        uint8_t kt = v->items[2 * i].tag;
        if (kt != T_STR && kt != T_INT) return bad(r, "dict key is not a str or an int");
      }
      break;
    case T_DEVICE:
      if (device(r, v)) return -1;
      break;
    case T_TENSOR:
      if (array_meta(r, v) || u32(r, &v->len) || take(r, v->len, &v->ptr)) return -1;
      break;
    case T_STREAM_TENSOR:
      if (array_meta(r, v)) return -1;
      __attribute__((fallthrough)); /* then the byte count */
    case T_STREAM:
      if (take(r, 8, &p)) return -1;
      v->stream_len = le64(p);
      break;
    case T_ARRAY_REF:
    case T_MODULE_REF:
    case T_FUNC_REF:
      if (take(r, 8, &p)) return -1;
      v->id = le64(p);
      if (v->tag == T_ARRAY_REF && array_meta(r, v)) return -1;
      break;
    default:
      r->p--;
      return bad(r, "unknown value tag");
  }
  v->raw_len = (size_t)(r->p - v->raw);
  return 0;
}

int kv_decode(Arena* arena, const uint8_t* buf, size_t len, KVal** out) {
  Reader r = {buf, buf + len, buf, arena};
  KVal* v = arena_alloc(arena, sizeof(KVal));
  if (!v) return kiln_error("out of memory decoding a frame");
  arena->values++;
  if (value(&r, v, 0)) return -1;
  if (r.p != r.end) return bad(&r, "stray bytes after the value");
  *out = v;
  return 0;
}

int kv_is_str(const KVal* v, const char* s) {
  size_t n = strlen(s);
  return v && v->tag == T_STR && v->len == n && memcmp(v->ptr, s, n) == 0;
}

const KVal* kv_get(const KVal* dict, const char* key) {
  if (!dict || dict->tag != T_DICT) return NULL;
  for (uint32_t i = 0; i < dict->count; i++)
    if (kv_is_str(&dict->items[2 * i], key)) return &dict->items[2 * i + 1];
  return NULL;
}

int kv_int(const KVal* v, int64_t* out) {
  if (!v || (v->tag != T_INT && v->tag != T_BOOL)) return -1;
  *out = v->i;
  return 0;
}

int kv_number(const KVal* v, double* out) {
  if (v && v->tag == T_FLOAT) { *out = v->f; return 0; }
  if (v && v->tag == T_INT) { *out = (double)v->i; return 0; }
  return -1;
}

/* ---- encoding -------------------------------------------------------------------------- */

void wb_free(WBuf* b) {
  free(b->p);
  b->p = NULL;
  b->len = b->cap = 0;
}

void wb_raw(WBuf* b, const void* data, size_t n) {
  if (b->oom) return;
  if (b->cap - b->len < n) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->len < n) cap *= 2;
    uint8_t* p = realloc(b->p, cap);
    if (!p) { b->oom = 1; return; }
    b->p = p;
    b->cap = cap;
  }
  if (n) memcpy(b->p + b->len, data, n);
  b->len += n;
}

static void put_u8(WBuf* b, uint8_t v) { wb_raw(b, &v, 1); }

static void put_u32(WBuf* b, uint32_t v) {
  uint8_t p[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
  wb_raw(b, p, 4);
}

static void put_u64(WBuf* b, uint64_t v) {
  put_u32(b, (uint32_t)v);
  put_u32(b, (uint32_t)(v >> 32));
}

void wb_none(WBuf* b) { put_u8(b, T_NONE); }
void wb_int(WBuf* b, int64_t v) { put_u8(b, T_INT); put_u64(b, (uint64_t)v); }

void wb_float(WBuf* b, double v) {
  uint64_t bits;
  memcpy(&bits, &v, sizeof(bits));
  put_u8(b, T_FLOAT);
  put_u64(b, bits);
}

void wb_bool(WBuf* b, int v) { put_u8(b, T_BOOL); put_u8(b, v ? 1 : 0); }
void wb_strn(WBuf* b, const char* s, size_t n) { put_u8(b, T_STR); put_u32(b, (uint32_t)n); wb_raw(b, s, n); }
void wb_str(WBuf* b, const char* s) { wb_strn(b, s, strlen(s)); }
void wb_bytes_header(WBuf* b, uint32_t n) { put_u8(b, T_BYTES); put_u32(b, n); }
void wb_bytes(WBuf* b, const void* data, uint32_t n) { wb_bytes_header(b, n); wb_raw(b, data, n); }
void wb_list(WBuf* b, uint32_t n) { put_u8(b, T_LIST); put_u32(b, n); }
void wb_dict(WBuf* b, uint32_t n) { put_u8(b, T_DICT); put_u32(b, n); }

void wb_device(WBuf* b, int32_t type, int32_t id) {
  put_u8(b, T_DEVICE);
  put_u32(b, (uint32_t)type);
  put_u32(b, (uint32_t)id);
}

void wb_ref(WBuf* b, uint8_t tag, uint64_t id) { put_u8(b, tag); put_u64(b, id); }

void wb_array_ref(WBuf* b, uint64_t id, const DLTensor* t) {
  char dtype[16] = "";
  kiln_dtype_format(t->dtype, dtype, sizeof(dtype));
  wb_ref(b, T_ARRAY_REF, id);
  put_u32(b, (uint32_t)strlen(dtype));
  wb_raw(b, dtype, strlen(dtype));
  put_u32(b, (uint32_t)t->ndim);
  for (int32_t i = 0; i < t->ndim; i++) put_u64(b, (uint64_t)t->shape[i]);
  put_u32(b, (uint32_t)t->device.device_type);
  put_u32(b, (uint32_t)t->device.device_id);
}
