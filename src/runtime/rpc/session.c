/* The session worker: one client's requests, in the process forked for that session.
 *
 * A crash in user code (a kernel reading out of bounds) kills only this process; the server
 * process notices and tells the client (server.c). Requests are handled one at a time in the
 * order they arrive, and every request but OP_FREE gets exactly one reply.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <limits.h>

#include "rpc.h"

int fail_with(Reply* r, const char* type, const char* fmt, ...) {
  if (fmt) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    kiln_error("%s", msg);
  }
  r->error_type = type;
  return -1;
}

static int need(Reply* r, uint32_t n, uint32_t want, const char* op) {
  if (n >= want) return 0;
  return fail_with(r, "TypeError", "%s needs %u arguments, got %u", op, want, n);
}

/* ---- functions the server offers without a module (worker.py's SERVER_FUNCTIONS) -------- */
enum { FN_ECHO, FN_WORKPATH, FN_GETPID, FN_SLEEP, FN_DEVICE_ATTR, FN_GRAPH_CREATE };
static const struct { const char* name; int id; } builtins[] = {
    {"rpc.echo", FN_ECHO}, {"rpc.workpath", FN_WORKPATH}, {"tvm.rpc.server.workpath", FN_WORKPATH},
    {"rpc.getpid", FN_GETPID}, {"rpc.sleep", FN_SLEEP}, {"device.attribute", FN_DEVICE_ATTR},
    {"tvm.graph_executor.create", FN_GRAPH_CREATE}};

/* device.attribute(device_type, device_id, name): remote.cl().max_threads_per_block. */
static int device_attribute(const KVal* a, uint32_t n, Reply* r) {
  int64_t type, id;
  if (n != 3 || kv_int(&a[0], &type) || kv_int(&a[1], &id) || a[2].tag != T_STR || a[2].len > 63)
    return fail_with(r, "TypeError", "device.attribute takes (device_type, device_id, name)");
  char name[64];
  snprintf(name, sizeof(name), "%.*s", (int)a[2].len, (const char*)a[2].ptr);
  DLDevice dev = {(int32_t)type, (int32_t)id};
  if (!kiln_device_exist(dev)) {
    wb_none(&r->body); /* as the Python runtime: an absent device has no attributes */
    return 0;
  }
  int64_t ints[3];
  int count = 0;
  char text[256] = "";
  if (kiln_device_attr(dev, name, ints, &count, text, sizeof(text))) return fail_with(r, "AttributeError", NULL);
  if (count == 0) wb_str(&r->body, text);
  else if (count == 1) wb_int(&r->body, ints[0]);
  else {
    wb_list(&r->body, (uint32_t)count);
    for (int i = 0; i < count; i++) wb_int(&r->body, ints[i]);
  }
  return 0;
}

static int call_builtin(Session* s, Obj* o, const KVal* a, uint32_t n, Reply* r) {
  int id = o->builtin;
  if (id >= FN_GRAPH_BASE) return graph_call(s, o->ptr, id, a, n, r);
  switch (id) {
    case FN_GRAPH_CREATE:
      return graph_create(s, a, n, r);
    case FN_ECHO:
      /* The values go back exactly as they came: their encoded bytes are copied. */
      for (uint32_t i = 0; i < n; i++)
        if (!a[i].raw && a[i].tag != T_BYTES)
          return fail_with(r, "TypeError", "rpc.echo: a streamed tensor is not echoed; send bytes");
      if (n != 1) wb_list(&r->body, n);
      for (uint32_t i = 0; i < n; i++) {
        if (a[i].raw) wb_raw(&r->body, a[i].raw, a[i].raw_len);
        else wb_bytes(&r->body, a[i].ptr, a[i].len); /* a streamed value, received into its own buffer */
      }
      return 0;
    case FN_WORKPATH: {
      char path[PATH_MAX];
      if (n != 1 || a[0].tag != T_STR) return fail_with(r, "TypeError", "rpc.workpath takes one file name");
      if (files_resolve(s->workdir, a[0].ptr, a[0].len, path, 0)) return fail_with(r, "PathError", NULL);
      wb_str(&r->body, path);
      return 0;
    }
    case FN_GETPID:
      wb_int(&r->body, getpid());
      return 0;
    case FN_DEVICE_ATTR:
      return device_attribute(a, n, r);
    default: {
      double secs;
      if (n != 1 || kv_number(&a[0], &secs) || secs < 0 || secs > 86400)
        return fail_with(r, "TypeError", "rpc.sleep takes a number of seconds");
      struct timespec ts = {(time_t)secs, (long)((secs - (double)(time_t)secs) * 1e9)};
      while (nanosleep(&ts, &ts) != 0) {}
      wb_none(&r->body);
      return 0;
    }
  }
}

/* ---- handlers ----------------------------------------------------------------------------- */
static int op_call(Session* s, const KVal* a, uint32_t n, Reply* r) {
  if (need(r, n, 1, "call")) return -1;
  Obj* o = obj_get(&s->objs, &a[0], OBJ_FUNC, "function");
  if (!o) return fail_with(r, "KeyError", NULL);
  if (o->kind == OBJ_BUILTIN) return call_builtin(s, o, a + 1, n - 1, r);
  return op_call_kernel(s, o->ptr, a + 1, n - 1, r);
}

static int op_get_function(Session* s, const KVal* a, uint32_t n, Reply* r) {
  if (need(r, n, 2, "get_function")) return -1;
  if (a[1].tag != T_STR) return fail_with(r, "TypeError", "get_function: the name must be a str");
  char name[256];
  snprintf(name, sizeof(name), "%.*s", (int)(a[1].len < 255 ? a[1].len : 255), (const char*)a[1].ptr);
  int global = a[0].tag == T_NONE || (a[0].tag == T_INT && a[0].i == 0);
  if (global) {
    for (size_t i = 0; i < sizeof(builtins) / sizeof(builtins[0]); i++) {
      if (strcmp(builtins[i].name, name) != 0) continue;
      uint64_t id = obj_store(&s->objs, OBJ_BUILTIN, NULL, builtins[i].id);
      if (!id) return fail_with(r, "MemoryError", NULL);
      wb_ref(&r->body, T_FUNC_REF, id);
      return 0;
    }
    wb_none(&r->body); /* the client raises "the server has no function named ..." */
    return 0;
  }
  Obj* graph = graph_obj(s, &a[0]);
  if (graph) return graph_get_function(s, graph, name, r);
  Obj* o = obj_get(&s->objs, &a[0], OBJ_MODULE, NULL);
  if (!o) return fail_with(r, "KeyError", NULL);
  KilnFunction* f;
  if (kiln_module_get_function(o->ptr, name, &f)) return fail_with(r, "AttributeError", NULL);
  uint64_t id = obj_store(&s->objs, OBJ_FUNC, f, 0);
  if (!id) return fail_with(r, "MemoryError", NULL);
  wb_ref(&r->body, T_FUNC_REF, id);
  return 0;
}

static int op_load_module(Session* s, const KVal* a, uint32_t n, Reply* r) {
  char path[PATH_MAX];
  if (need(r, n, 1, "load_module")) return -1;
  if (a[0].tag != T_STR) return fail_with(r, "TypeError", "load_module: the file name must be a str");
  if (files_resolve(s->workdir, a[0].ptr, a[0].len, path, 1)) return fail_with(r, "FileNotFoundError", NULL);
  KilnModule* m;
  if (kiln_module_load(path, &m)) return fail_with(r, "KilnError", NULL);
  uint64_t id;
  if (obj_keep_module(&s->objs, m) || !(id = obj_store(&s->objs, OBJ_MODULE, m, 0))) return fail_with(r, "MemoryError", NULL);
  wb_ref(&r->body, T_MODULE_REF, id);
  return 0;
}

static int op_upload(Session* s, const KVal* a, uint32_t n, Reply* r) {
  if (need(r, n, 3, "upload")) return -1;
  if (a[1].tag != T_INT || a[1].i < 0 || a[2].tag != T_BYTES)
    return fail_with(r, "TypeError", "upload takes [name, offset, bytes, final]");
  if (files_write(s->workdir, &a[0], a[1].i, a[2].ptr, a[2].len)) return fail_with(r, "RPCError", NULL);
  wb_none(&r->body);
  return 0;
}

static int op_download(Session* s, const KVal* a, uint32_t n, Reply* r) {
  if (need(r, n, 3, "download")) return -1;
  if (a[1].tag != T_INT || a[2].tag != T_INT || a[2].i < 0)
    return fail_with(r, "TypeError", "download takes [name, offset, max_bytes]");
  size_t max = a[2].i < (int64_t)RPC_CHUNK ? (size_t)a[2].i : RPC_CHUNK;
  uint8_t* data;
  size_t got;
  if (files_read(s->workdir, &a[0], a[1].i, max, &data, &got)) return fail_with(r, "FileNotFoundError", NULL);
  wb_bytes_header(&r->body, (uint32_t)got);
  r->tail = r->owned_tail = data;
  r->tail_len = got;
  return 0;
}

static int op_remove(Session* s, const KVal* a, uint32_t n, Reply* r) {
  if (need(r, n, 1, "remove")) return -1;
  if (files_remove(s->workdir, &a[0])) return fail_with(r, "FileNotFoundError", NULL);
  wb_none(&r->body);
  return 0;
}

static int op_listdir(Session* s, const KVal* a, uint32_t n, Reply* r) { return files_list(s->workdir, &r->body); }

static int op_device_exists(Session* s, const KVal* a, uint32_t n, Reply* r) {
  if (need(r, n, 1, "device_exists")) return -1;
  if (a[0].tag != T_DEVICE) return fail_with(r, "TypeError", "device_exists takes a device");
  wb_int(&r->body, kiln_device_exist((DLDevice){a[0].dev_type, a[0].dev_id}));
  return 0;
}

static int op_sync(Session* s, const KVal* a, uint32_t n, Reply* r) {
  if (n >= 1 && a[0].tag == T_DEVICE && kiln_device_sync((DLDevice){a[0].dev_type, a[0].dev_id}))
    return fail_with(r, "KilnError", NULL);
  wb_none(&r->body);
  return 0;
}

static int op_module_info(Session* s, const KVal* a, uint32_t n, Reply* r) {
  if (need(r, n, 1, "module_info")) return -1;
  if (graph_obj(s, &a[0])) {
    wb_dict(&r->body, 2);
    wb_str(&r->body, "entry_name");
    wb_str(&r->body, "run");
    wb_str(&r->body, "type_key");
    wb_str(&r->body, "GraphExecutor");
    return 0;
  }
  Obj* o = obj_get(&s->objs, &a[0], OBJ_MODULE, NULL);
  if (!o) return fail_with(r, "KeyError", NULL);
  wb_dict(&r->body, 2);
  wb_str(&r->body, "entry_name");
  wb_str(&r->body, kiln_module_entry_name(o->ptr));
  wb_str(&r->body, "type_key");
  wb_str(&r->body, "library");
  return 0;
}

typedef int (*Handler)(Session*, const KVal*, uint32_t, Reply*);

static Handler handler_for(int op) {
  switch (op) {
    case OP_CALL: return op_call;
    case OP_GET_FUNCTION: return op_get_function;
    case OP_LOAD_MODULE: return op_load_module;
    case OP_UPLOAD: return op_upload;
    case OP_DOWNLOAD: return op_download;
    case OP_REMOVE: return op_remove;
    case OP_LISTDIR: return op_listdir;
    case OP_EMPTY: return op_empty;
    case OP_COPY_IN: return op_copy_in;
    case OP_COPY_OUT: return op_copy_out;
    case OP_TIME_EVAL: return op_time_eval;
    case OP_DEVICE_EXISTS: return op_device_exists;
    case OP_SYNC: return op_sync;
    case OP_MODULE_INFO: return op_module_info;
    default: return NULL;
  }
}

/* ---- streamed values ------------------------------------------------------------------------ */
#define MAX_STREAMS 256

typedef struct {
  KVal* v[MAX_STREAMS];
  int n;
  void* owned[MAX_STREAMS];
} Streams;

/* The request's stream values in the order their bytes follow the frame (depth first). */
static int collect_streams(KVal* v, Streams* st) {
  if (v->tag == T_STREAM || v->tag == T_STREAM_TENSOR) {
    if (st->n == MAX_STREAMS) return kiln_error("more than %d streamed values in one request", MAX_STREAMS);
    st->owned[st->n] = NULL;
    st->v[st->n++] = v;
    return 0;
  }
  uint32_t count = v->tag == T_LIST ? v->count : v->tag == T_DICT ? 2 * v->count : 0;
  for (uint32_t i = 0; i < count; i++)
    if (collect_streams(&v->items[i], st)) return -1;
  return 0;
}

/* Receive every stream: a tensor for an executor's set_input straight into the input, the rest
 * into buffers of their own that replace them as plain bytes / tensors (freed after the reply).
 * Returns 1 when the request was answered that way, 0 to run the handler, -1 on a broken stream. */
static int receive_streams(Session* s, int op, KVal* v, Streams* st, Reply* r) {
  int answered = 0;
  for (int k = 0; k < st->n; k++) {
    KVal* x = st->v[k];
    if (op == OP_CALL && v->tag == T_LIST && v->count > 0 && !answered) {
      int rc = graph_stream_set_input(s, v->items, v->count, x, r);
      if (rc < 0) return -1;
      if (rc > 0) {
        answered = 1;
        continue;
      }
    }
    if (x->stream_len > UINT32_MAX) return kiln_error("a streamed value of %llu bytes; kiln_rpc takes at most 4 GiB in one value",
                                                    (unsigned long long)x->stream_len);
    uint8_t* buf = malloc(x->stream_len ? (size_t)x->stream_len : 1);
    if (!buf) return kiln_error("out of memory receiving a streamed value of %llu bytes", (unsigned long long)x->stream_len);
    st->owned[k] = buf;
    if (wire_recv_stream(s->fd, x->stream_len, buf, NULL, NULL)) return -1;
    x->tag = x->tag == T_STREAM ? T_BYTES : T_TENSOR;
    x->ptr = buf;
    x->len = (uint32_t)x->stream_len;
    x->raw = NULL; /* its encoded form was only the announcement */
  }
  return answered;
}

/* ---- the loop ----------------------------------------------------------------------------- */
static void free_ids(Session* s, const KVal* v) {
  for (uint32_t i = 0; v->tag == T_LIST && i < v->count; i++)
    if (v->items[i].tag == T_INT && v->items[i].i > 0) obj_free(&s->objs, (uint64_t)v->items[i].i);
}

/* Returns 0 to go on, 1 to end the session. */
static int handle(Session* s, Frame* f) {
  Arena arena = {0};
  KVal* v;
  Reply r = {0};
  int op = f->body[0], end = 0, answered = 0;
  Streams st;
  st.n = 0;
  if (op == OP_DATA) kiln_error("an OP_DATA frame that no streamed value announced");
  if (op == OP_DATA || kv_decode(&arena, f->body + 1, f->len - 1, &v) || collect_streams(v, &st) ||
      (answered = receive_streams(s, op, v, &st, &r)) < 0) {
    /* The stream can no longer be trusted to be in sync: report and end the session. */
    wire_send_error(s->fd, "ProtocolError", kiln_last_error(), E_BAD_REQUEST);
    for (int k = 0; k < st.n; k++) free(st.owned[k]);
    wb_free(&r.body);
    arena_free(&arena);
    return 1;
  }
  if (answered) {
    if (r.error_type) wire_send_error(s->fd, r.error_type, kiln_last_error(), E_REMOTE);
    else if (wire_send(s->fd, OP_RETURN, &r.body, NULL, 0)) end = 1;
    goto done;
  }
  if (op == OP_FREE) {
    free_ids(s, v);
    goto done;
  }
  if (op == OP_SHUTDOWN) {
    wb_none(&r.body);
    end = 1;
  } else {
    Handler h = handler_for(op);
    int rc;
    if (!h) {
      rc = fail_with(&r, "ProtocolError", "unknown opcode %d; this server speaks protocol version %d", op, RPC_VERSION);
      r.error_code = E_UNSUPPORTED;
    } else if (v->tag != T_LIST) {
      rc = fail_with(&r, "ProtocolError", "opcode %d needs a list of arguments", op);
    } else {
      rc = h(s, v->items, v->count, &r);
    }
    if (rc) {
      const char* type = r.error_type ? r.error_type : "KilnError";
      int code = r.error_code ? r.error_code : strcmp(type, "ProtocolError") == 0 ? E_BAD_REQUEST : E_REMOTE;
      wire_send_error(s->fd, type, kiln_last_error(), code);
      goto done;
    }
  }
  if (wire_send(s->fd, OP_RETURN, &r.body, r.tail, r.tail_len)) end = 1;
done:
  for (int k = 0; k < st.n; k++) free(st.owned[k]);
  wb_free(&r.body);
  free(r.owned_tail);
  arena_free(&arena);
  return end;
}

void session_serve(int fd, const char* workdir) {
  Session s = {fd, workdir, {0}};
  for (;;) {
    Frame f;
    int closed;
    if (wire_recv(fd, RPC_MAX_FRAME, -1, &f, &closed)) {
      /* Best effort: after an oversized or torn frame the client learns why we hang up. */
      if (!closed) wire_send_error(fd, "ProtocolError", kiln_last_error(), E_BAD_REQUEST);
      break;
    }
    int end = handle(&s, &f);
    free(f.body);
    if (end) break;
  }
  obj_table_clear(&s.objs);
}
