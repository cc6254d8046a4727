/* Declarations shared by the files of kiln_rpc, the C RPC server.
 *
 * The wire format is the Python implementation's (kiln/rpc/protocol.py, docs/rpc-protocol.md):
 * a frame is u32 length (little-endian) + body; a body is u8 opcode + one tagged value.
 */
#ifndef KILN_RPC_H_
#define KILN_RPC_H_

#include <stddef.h>
#include <stdint.h>

#include "../kiln_runtime.h"

/* ---- protocol constants (protocol.py) -------------------------------------------------- */
#define RPC_MAGIC "KILN"
#define RPC_VERSION 2
#define RPC_MAX_FRAME (64u * 1024 * 1024 + 4096)
#define RPC_CHUNK (16u * 1024 * 1024)  /* the most bytes an OP_DATA frame of a streamed value carries */
#define RPC_MAX_HANDSHAKE_FRAME 4096u
/* Each decoded value costs ~100 bytes of bookkeeping; capping their number per frame keeps a
 * hostile frame of 64 MiB of one-byte values from costing gigabytes on a small board. */
#define RPC_MAX_VALUES 65536u
#define RPC_MAX_DEPTH 32

enum { ROLE_CLIENT = 1, ROLE_SERVER = 2, ROLE_TRACKER_CLIENT = 3, ROLE_PROXY = 4 };
enum { HS_OK = 0, HS_AUTH = 1, HS_ERROR = 2, HS_QUEUED = 3 };
/* Error codes of ERROR replies and refusals (protocol.py's E_*). */
enum { E_REMOTE = 1, E_BAD_REQUEST = 2, E_UNSUPPORTED = 3, E_BUSY = 4, E_TIMEOUT = 5, E_WORKER_DIED = 6,
       E_SHUTDOWN = 7, E_AUTH = 8 };
enum {
  OP_RETURN = 0, OP_ERROR = 1, OP_CALL = 2, OP_GET_FUNCTION = 3, OP_LOAD_MODULE = 4,
  OP_UPLOAD = 5, OP_DOWNLOAD = 6, OP_REMOVE = 7, OP_LISTDIR = 8, OP_EMPTY = 9, OP_COPY_IN = 10,
  OP_COPY_OUT = 11, OP_FREE = 12, OP_TIME_EVAL = 13, OP_DEVICE_EXISTS = 14, OP_SHUTDOWN = 15,
  OP_SYNC = 16, OP_MODULE_INFO = 17, OP_DATA = 18
};
enum {
  T_NONE = 0, T_INT = 1, T_FLOAT = 2, T_STR = 3, T_BYTES = 4, T_LIST = 5, T_DICT = 6, T_BOOL = 7,
  T_TENSOR = 8, T_DEVICE = 9, T_ARRAY_REF = 10, T_MODULE_REF = 11, T_FUNC_REF = 12,
  T_STREAM = 13, T_STREAM_TENSOR = 14  /* bytes / tensor whose data follows the frame in OP_DATA frames */
};

/* ---- value.c: decoding and encoding ----------------------------------------------------- */
typedef struct KVal {
  uint8_t tag;
  int64_t i;                 /* T_INT, T_BOOL */
  double f;                  /* T_FLOAT */
  const uint8_t* ptr;        /* T_STR, T_BYTES, T_TENSOR data (inside the frame) */
  uint32_t len;
  uint32_t count;            /* T_LIST items; T_DICT pairs (items holds 2*count) */
  struct KVal* items;
  uint64_t id;               /* refs */
  const uint8_t* dtype;      /* T_TENSOR, T_ARRAY_REF */
  uint32_t dtype_len;
  uint32_t ndim;
  int64_t* shape;
  int32_t dev_type, dev_id;  /* T_DEVICE, T_TENSOR, T_ARRAY_REF */
  const uint8_t* raw;        /* the value's encoded bytes, for echoing it back unchanged */
  size_t raw_len;
  uint64_t stream_len;       /* T_STREAM, T_STREAM_TENSOR: bytes that follow the frame */
} KVal;

typedef struct ArenaBlock ArenaBlock;
typedef struct { ArenaBlock* head; size_t values; } Arena;
void arena_free(Arena* a);

/* Decode the one value filling buf[0..len). -1 with kiln_last_error on malformed input. */
int kv_decode(Arena* arena, const uint8_t* buf, size_t len, KVal** out);
const KVal* kv_get(const KVal* dict, const char* key);     /* NULL if absent or not a dict */
int kv_is_str(const KVal* v, const char* s);
int kv_int(const KVal* v, int64_t* out);                   /* T_INT or T_BOOL */
int kv_number(const KVal* v, double* out);                 /* T_INT or T_FLOAT */

typedef struct { uint8_t* p; size_t len, cap; int oom; } WBuf;
void wb_free(WBuf* b);
void wb_raw(WBuf* b, const void* data, size_t n);
void wb_none(WBuf* b);
void wb_int(WBuf* b, int64_t v);
void wb_float(WBuf* b, double v);
void wb_bool(WBuf* b, int v);
void wb_str(WBuf* b, const char* s);
void wb_strn(WBuf* b, const char* s, size_t n);
void wb_bytes(WBuf* b, const void* data, uint32_t n);
void wb_bytes_header(WBuf* b, uint32_t n);  /* the payload follows separately (zero copy) */
void wb_list(WBuf* b, uint32_t n);
void wb_dict(WBuf* b, uint32_t n);
void wb_device(WBuf* b, int32_t type, int32_t id);
void wb_ref(WBuf* b, uint8_t tag, uint64_t id);
void wb_array_ref(WBuf* b, uint64_t id, const DLTensor* t);

/* ---- wire.c: frames on a socket --------------------------------------------------------- */
typedef struct { uint8_t* body; uint32_t len; } Frame;
/* timeout_ms < 0 blocks. Returns 0, or -1 with kiln_last_error; *closed is set when the peer
 * closed cleanly before the frame started. */
int wire_recv(int fd, uint32_t max_len, int timeout_ms, Frame* out, int* closed);
/* Send opcode + body + tail as one frame. */
int wire_send(int fd, uint8_t opcode, const WBuf* body, const void* tail, size_t tail_len);
int wire_send_error(int fd, const char* type, const char* message, int code);
/* Receive a streamed value's n bytes from its OP_DATA frames: into dest when it is not NULL,
 * else piece by piece through sink (each piece at most RPC_CHUNK bytes, from one buffer). */
typedef int (*StreamSink)(void* ctx, uint64_t offset, const uint8_t* data, size_t n);
int wire_recv_stream(int fd, uint64_t n, uint8_t* dest, StreamSink sink, void* ctx);
double wire_now(void);
int wire_connect(const char* host, int port, int timeout_ms);
void wire_nodelay(int fd);

/* ---- sha256.c ---------------------------------------------------------------------------- */
void hmac_sha256(const uint8_t* key, size_t key_len, const uint8_t* msg, size_t msg_len, uint8_t out[32]);
int random_bytes(uint8_t* out, size_t n);

/* ---- handshake.c -------------------------------------------------------------------------- */
typedef struct {
  int role;
  char key[256];
  char lease[128];
  double session_timeout;
} Hello;
/* Accept a peer's hello (and prove its token). On failure the peer has been told why. */
int hs_accept(int fd, const char* token, Hello* out);
int hs_reply_ok(int fd);
int hs_refuse(int fd, const char* message, int code);
int hs_queued(int fd, int position);
/* Connect to a tracker or proxy as `role` with `key`; returns the fd or -1. */
int hs_connect(const char* host, int port, int role, const char* key, const char* token);

/* ---- files.c: the session directory ------------------------------------------------------- */
/* Resolve `name` inside `root` into out (PATH_MAX). must_exist: fail if missing. */
int files_resolve(const char* root, const uint8_t* name, size_t len, char* out, int must_exist);
int files_write(const char* root, const KVal* name, int64_t offset, const uint8_t* data, size_t n);
int files_read(const char* root, const KVal* name, int64_t offset, size_t max, uint8_t** data, size_t* n);
int files_remove(const char* root, const KVal* name);
int files_list(const char* root, WBuf* out);   /* encodes a list of relative names */
int files_remove_tree(const char* path);

/* ---- objects.c: the session's object table ---------------------------------------------- */
enum { OBJ_ARRAY = 1, OBJ_MODULE, OBJ_FUNC, OBJ_BUILTIN, OBJ_GRAPH };
typedef struct { int kind; void* ptr; int builtin; } Obj;
typedef struct {
  Obj* slots;
  uint64_t cap, next;
  KilnModule** modules;
  size_t nmodules;
  void** graphs;   /* graph executors (KilnGraph*), freed when the session ends */
  size_t ngraphs;
} ObjTable;
uint64_t obj_store(ObjTable* t, int kind, void* ptr, int builtin); /* 0 on failure */
Obj* obj_get(ObjTable* t, const KVal* ref_or_id, int kind, const char* what);
void obj_free(ObjTable* t, uint64_t id);
void obj_table_clear(ObjTable* t);
int obj_keep_module(ObjTable* t, KilnModule* m);

/* ---- session.c / session_arrays.c: one client's requests in the worker process ---------- */
typedef struct {
  WBuf body;                 /* the encoded return value */
  const void* tail;          /* bytes sent after body without copying */
  size_t tail_len;
  void* owned_tail;          /* freed after sending */
  const char* error_type;    /* set on failure: the exception type the client sees */
  int error_code;            /* E_*; 0 means E_REMOTE (or E_BAD_REQUEST for a ProtocolError) */
} Reply;

typedef struct {
  int fd;
  const char* workdir;
  ObjTable objs;
} Session;

void session_serve(int fd, const char* workdir);
int op_empty(Session* s, const KVal* a, uint32_t n, Reply* r);
int op_copy_in(Session* s, const KVal* a, uint32_t n, Reply* r);
int op_copy_out(Session* s, const KVal* a, uint32_t n, Reply* r);
int op_call_kernel(Session* s, KilnFunction* f, const KVal* a, uint32_t n, Reply* r);
int op_time_eval(Session* s, const KVal* a, uint32_t n, Reply* r);
int fail_with(Reply* r, const char* type, const char* fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---- session_graph.c: the graph executor as a remote module ---------------------------------- */
#define FN_GRAPH_BASE 100  /* builtin ids of the executor's functions: FN_GRAPH_BASE + method */
struct KilnGraph;
Obj* graph_obj(Session* s, const KVal* ref);  /* the executor `ref` names, or NULL (no error set) */
int graph_create(Session* s, const KVal* a, uint32_t n, Reply* r);
int graph_get_function(Session* s, Obj* o, const char* name, Reply* r);
int graph_call(Session* s, struct KilnGraph* g, int method, const KVal* a, uint32_t n, Reply* r);
int graph_time(struct KilnGraph* g, const char* name, int64_t number, int64_t repeat, double min_ms, Reply* r);
/* CALL args (func, key, streamed tensor) of an executor's set_input whose tensor matches a CPU input:
 * the stream is received straight into that input. 1 when done that way (reply or error set), 0
 * when the request is anything else (nothing received), -1 when receiving failed. */
int graph_stream_set_input(Session* s, const KVal* a, uint32_t n, const KVal* stream, Reply* r);

/* ---- tracker.c ---------------------------------------------------------------------------- */
typedef struct Server Server;
typedef struct {
  char host[256];
  int port;
  int fd;
  double next_try, next_ping;
  int warned;
} TrackerLink;
void tracker_tick(Server* srv, TrackerLink* t, double now);
void tracker_on_readable(Server* srv, TrackerLink* t);
void tracker_send_state(TrackerLink* t, int free_now);

/* ---- server.c ---------------------------------------------------------------------------- */
typedef struct {
  char host[256];
  int port, port_end;
  char tracker_host[256];
  int tracker_port;
  char key[256];
  int through_proxy;
  char custom_addr[256];
  char token[256];
  char cc[512];
  char work_root[512];
} Options;

struct Server {
  Options opt;
  int listen_fd, port;
  int wake[2];                 /* SIGCHLD -> self-pipe, so poll() wakes when a worker ends */
  pid_t worker;
  int session_fd;
  char workdir[1024];
  double session_start, session_timeout, next_watch;
  char kill_reason[512];
  char lease[128];
  double lease_deadline;
  TrackerLink tracker;
  int proxy_fd;
  double proxy_next_try;
  int proxy_announced;
  int queued[16];              /* direct clients waiting for the session to end, oldest first */
  double queued_timeout[16];
  int nqueued;
};
int server_run(const Options* opt);
int server_on_lease(Server* srv, const char* token, double lease_s);
void server_on_cancel(Server* srv, const char* token);
int server_is_free(const Server* srv);

#endif
