/* The board's RPC server: requests in frames, one reply per request (docs/microtvm.md "CRT").

   request payload: [seq u16][cmd u8][body]     reply payload: [seq u16][status u8][body]
   A request whose seq equals the last one answered is a retransmission (the host lost our reply):
   the cached reply goes out again and the command does not run twice. Frames of a session other
   than the current one are stale and dropped; HELLO (any session) starts a new session. */
#include <string.h>

#include "crt.h"

enum { CMD_HELLO = 1, CMD_ALLOC = 2, CMD_FREE = 3, CMD_WRITE = 4, CMD_READ = 5, CMD_LOOKUP = 6, CMD_CALL = 7 };
enum { MAX_ARGS = 16, MAX_DIMS = 6 };

static uint8_t req[KILN_CRT_MAX_PAYLOAD + 16];
static uint8_t rep[KILN_CRT_MAX_PAYLOAD + 16];
static size_t rep_len;
static uint8_t session;
static int32_t last_seq = -1;

extern char __kiln_last_error[];

static uint32_t rd32(const uint8_t* p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t rd64(const uint8_t* p) { return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32; }
static void wr32(uint8_t* p, uint32_t v) { for (int i = 0; i < 4; ++i) p[i] = (uint8_t)(v >> (8 * i)); }
static void wr64(uint8_t* p, uint64_t v) { wr32(p, (uint32_t)v); wr32(p + 4, (uint32_t)(v >> 32)); }

static void fail(const char* msg) {
  size_t n = strlen(msg);
  if (n > KILN_CRT_MAX_PAYLOAD - 3) n = KILN_CRT_MAX_PAYLOAD - 3;
  rep[2] = 1;
  memcpy(rep + 3, msg, n);
  rep_len = 3 + n;
}

/* A handle is a byte offset into the arena plus one (0 is no handle). */
static uint8_t* from_handle(uint32_t h, uint32_t need) {
  if (h == 0 || (uint64_t)h - 1 + need > KILN_CRT_ARENA_BYTES) return NULL;
  return kiln_crt_arena_base() + (h - 1);
}

static void do_call(const uint8_t* body, size_t n) {
  static KilnValue args[MAX_ARGS];
  static int32_t codes[MAX_ARGS];
  static DLTensor tensors[MAX_ARGS];
  static int64_t shapes[MAX_ARGS][MAX_DIMS];
  if (n < 5) return fail("CALL: short request");
  uint32_t index = rd32(body);
  uint8_t nargs = body[4];
  if ((int32_t)index >= kiln_crt_system_lib_size) return fail("CALL: no such function");
  if (nargs > MAX_ARGS) return fail("CALL: too many arguments");
  size_t at = 5;
  for (uint8_t i = 0; i < nargs; ++i) {
    if (at + 1 > n) return fail("CALL: short request");
    codes[i] = body[at++];
    if (codes[i] == 7) {
      if (at + 8 > n) return fail("CALL: short request");
      uint32_t h = rd32(body + at);
      DLTensor* t = &tensors[i];
      t->dtype.code = body[at + 4];
      t->dtype.bits = body[at + 5];
      t->dtype.lanes = 1;
      t->ndim = body[at + 6];
      at += 8;
      if (t->ndim > MAX_DIMS || at + 8u * (size_t)t->ndim > n) return fail("CALL: bad tensor");
      uint64_t count = 1;
      for (int d = 0; d < t->ndim; ++d) {
        shapes[i][d] = (int64_t)rd64(body + at);
        count *= (uint64_t)shapes[i][d];
        at += 8;
      }
      t->data = from_handle(h, (uint32_t)(count * ((t->dtype.bits + 7u) / 8u)));
      if (t->data == NULL) return fail("CALL: tensor outside the arena");
      t->shape = shapes[i];
      t->strides = NULL;
      t->byte_offset = 0;
      t->device.device_type = 1;
      t->device.device_id = 0;
      args[i].v_handle = t;
    } else {
      if (at + 8 > n) return fail("CALL: short request");
      args[i].v_int64 = (int64_t)rd64(body + at);
      at += 8;
    }
  }
  uint64_t start = kiln_crt_ticks();
  int32_t rc = kiln_crt_system_lib[index].fn(args, codes, nargs);
  uint64_t ticks = kiln_crt_ticks() - start;
  if (rc != 0) return fail(__kiln_last_error[0] ? __kiln_last_error : "the function failed");
  wr64(rep + 3, ticks);
  rep_len = 11;
}

static void handle(uint8_t cmd, const uint8_t* body, size_t n) {
  rep[2] = 0;
  rep_len = 3;
  switch (cmd) {
    case CMD_HELLO:
      wr32(rep + 3, KILN_CRT_ARENA_BYTES);
      wr32(rep + 7, kiln_crt_ticks_hz());
      wr32(rep + 11, (uint32_t)kiln_crt_system_lib_size);
      rep_len = 15;
      return;
    case CMD_ALLOC: {
      if (n < 4) return fail("ALLOC: short request");
      uint8_t* p = kiln_crt_alloc(rd32(body));
      if (p == NULL) return fail("ALLOC: out of device memory");
      wr32(rep + 3, (uint32_t)(p - kiln_crt_arena_base()) + 1);
      rep_len = 7;
      return;
    }
    case CMD_FREE:
      if (n < 4 || from_handle(rd32(body), 0) == NULL) return fail("FREE: bad handle");
      kiln_crt_free(from_handle(rd32(body), 0));
      return;
    case CMD_WRITE: {
      if (n < 8) return fail("WRITE: short request");
      uint8_t* p = from_handle(rd32(body), rd32(body + 4) + (uint32_t)(n - 8));
      if (p == NULL) return fail("WRITE: outside the arena");
      memcpy(p + rd32(body + 4), body + 8, n - 8);
      return;
    }
    case CMD_READ: {
      if (n < 12) return fail("READ: short request");
      uint32_t len = rd32(body + 8);
      uint8_t* p = from_handle(rd32(body), rd32(body + 4) + len);
      if (p == NULL || len > KILN_CRT_MAX_PAYLOAD - 3) return fail("READ: outside the arena");
      memcpy(rep + 3, p + rd32(body + 4), len);
      rep_len = 3 + len;
      return;
    }
    case CMD_LOOKUP:
      for (int32_t i = 0; i < kiln_crt_system_lib_size; ++i) {
        const char* name = kiln_crt_system_lib[i].name;
        if (strlen(name) == n && memcmp(name, body, n) == 0) {
          wr32(rep + 3, (uint32_t)i);
          rep_len = 7;
          return;
        }
      }
      return fail("LOOKUP: no such function in the system library");
    case CMD_CALL:
      return do_call(body, n);
    default:
      return fail("unknown command");
  }
}

int kiln_crt_serve(void) {
  for (;;) {
    uint8_t sid;
    int n = kiln_frame_recv(&sid, req, sizeof req);
    if (n < 0) return 0;
    if (n < 3) continue;
    int32_t seq = req[0] | req[1] << 8;
    uint8_t cmd = req[2];
    if (cmd == CMD_HELLO) {
      session = sid;
      last_seq = -1;
    } else if (sid != session) {
      continue;  /* a frame of an older session */
    }
    if (seq != last_seq) {
      rep[0] = req[0];
      rep[1] = req[1];
      handle(cmd, req + 3, (size_t)n - 3);
      last_seq = seq;
    }
    kiln_frame_send(session, rep, rep_len);
  }
}
