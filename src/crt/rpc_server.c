/* The board's RPC server: requests in frames, one reply per request (docs/microtvm.md "CRT").

   request payload: [seq u32][cmd u8][body]     reply payload: [seq u32][status u8][body]
   The host sends one request at a time and numbers them consecutively (mod 2^32) within a
   session, so the board keeps a window of one: a request numbered after the last one answered
   is new and runs; one equal to it is a retransmission (the host lost our reply) and gets the
   cached reply; one numbered before it (a late duplicate) is dropped. A command therefore never
   runs twice, however late a copy arrives. Frames of a session other than the current one are
   stale and dropped; HELLO with a new session id starts a new session.

   Everything in a request comes from the host link and is checked before use: function indices
   as unsigned, offsets and lengths in 64 bits, tensor element counts for overflow; handles must
   name an allocated block, and every access must lie inside that block. */
#include <string.h>

#include "crt.h"

enum { CMD_HELLO = 1, CMD_ALLOC = 2, CMD_FREE = 3, CMD_WRITE = 4, CMD_READ = 5, CMD_LOOKUP = 6, CMD_CALL = 7 };
enum { MAX_ARGS = 16, MAX_DIMS = 6, HEAD = 5 };

static uint8_t req[KILN_CRT_MAX_PAYLOAD + 16];
static uint8_t rep[KILN_CRT_MAX_PAYLOAD + 16];
static size_t rep_len;
static uint8_t session;
static uint32_t last_seq;

extern char __kiln_last_error[];

static uint32_t rd32(const uint8_t* p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t rd64(const uint8_t* p) { return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32; }
static void wr32(uint8_t* p, uint32_t v) { for (int i = 0; i < 4; ++i) p[i] = (uint8_t)(v >> (8 * i)); }
static void wr64(uint8_t* p, uint64_t v) { wr32(p, (uint32_t)v); wr32(p + 4, (uint32_t)(v >> 32)); }

static void fail(const char* msg) {
  size_t n = strlen(msg);
  if (n > KILN_CRT_MAX_PAYLOAD - HEAD) n = KILN_CRT_MAX_PAYLOAD - HEAD;
  rep[4] = 1;
  memcpy(rep + HEAD, msg, n);
  rep_len = HEAD + n;
}

/* A handle is a byte offset into the arena plus one (0 is no handle); it must name the start of
   an allocated block, and [offset, offset + len) must lie inside that block. */
static uint8_t* from_handle(uint32_t h, uint64_t offset, uint64_t len) {
  if (h == 0 || h - 1 >= KILN_CRT_ARENA_BYTES) return NULL;
  uint8_t* p = kiln_crt_arena_base() + (h - 1);
  uint64_t size = kiln_crt_block_bytes(p);
  if (size == 0 || offset > size || len > size - offset) return NULL;
  return p + offset;
}

static void do_call(const uint8_t* body, size_t n) {
  static KilnValue args[MAX_ARGS];
  static int32_t codes[MAX_ARGS];
  static DLTensor tensors[MAX_ARGS];
  static int64_t shapes[MAX_ARGS][MAX_DIMS];
  if (n < 5) return fail("CALL: short request");
  uint32_t index = rd32(body);
  uint8_t nargs = body[4];
  if (kiln_crt_system_lib_size < 0 || index >= (uint32_t)kiln_crt_system_lib_size) return fail("CALL: no such function");
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
      /* Element count and bytes in 64 bits, checked at each step: a shape whose product wraps
         would otherwise pass as a tensor of a few (or zero) bytes. */
      uint64_t bytes = (t->dtype.bits + 7u) / 8u;
      for (int d = 0; d < t->ndim; ++d) {
        shapes[i][d] = (int64_t)rd64(body + at);
        at += 8;
        uint64_t dim = (uint64_t)shapes[i][d];
        if (shapes[i][d] < 0 || (dim != 0 && bytes > UINT64_MAX / dim)) return fail("CALL: tensor shape too large");
        bytes *= dim;
      }
      t->data = from_handle(h, 0, bytes);
      if (t->data == NULL) return fail("CALL: tensor larger than its block, or not an allocated block");
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
  __kiln_last_error[0] = '\0';
  uint64_t start = kiln_crt_ticks();
  int32_t rc = kiln_crt_system_lib[index].fn(args, codes, nargs);
  uint64_t ticks = kiln_crt_ticks() - start;
  if (rc != 0) return fail(__kiln_last_error[0] ? __kiln_last_error : "the function failed");
  wr64(rep + HEAD, ticks);
  rep_len = HEAD + 8;
}

static void handle(uint8_t cmd, const uint8_t* body, size_t n) {
  rep[4] = 0;
  rep_len = HEAD;
  switch (cmd) {
    case CMD_HELLO:
      wr32(rep + HEAD, KILN_CRT_ARENA_BYTES);
      wr32(rep + HEAD + 4, kiln_crt_ticks_hz());
      wr32(rep + HEAD + 8, (uint32_t)kiln_crt_system_lib_size);
      rep_len = HEAD + 12;
      return;
    case CMD_ALLOC: {
      if (n < 4) return fail("ALLOC: short request");
      uint8_t* p = kiln_crt_alloc(rd32(body));
      if (p == NULL) return fail("ALLOC: out of device memory");
      wr32(rep + HEAD, (uint32_t)(p - kiln_crt_arena_base()) + 1);
      rep_len = HEAD + 4;
      return;
    }
    case CMD_FREE: {
      uint8_t* p = n < 4 ? NULL : from_handle(rd32(body), 0, 0);
      if (p == NULL) return fail("FREE: not an allocated block");
      kiln_crt_free(p);
      return;
    }
    case CMD_WRITE: {
      if (n < 8) return fail("WRITE: short request");
      uint8_t* p = from_handle(rd32(body), rd32(body + 4), n - 8);
      if (p == NULL) return fail("WRITE: outside the block");
      memcpy(p, body + 8, n - 8);
      return;
    }
    case CMD_READ: {
      if (n < 12) return fail("READ: short request");
      uint32_t len = rd32(body + 8);
      if (len > KILN_CRT_MAX_PAYLOAD - HEAD) return fail("READ: longer than a reply");
      uint8_t* p = from_handle(rd32(body), rd32(body + 4), len);
      if (p == NULL) return fail("READ: outside the block");
      memcpy(rep + HEAD, p, len);
      rep_len = HEAD + len;
      return;
    }
    case CMD_LOOKUP:
      for (int32_t i = 0; i < kiln_crt_system_lib_size; ++i) {
        const char* name = kiln_crt_system_lib[i].name;
        if (strlen(name) == n && memcmp(name, body, n) == 0) {
          wr32(rep + HEAD, (uint32_t)i);
          rep_len = HEAD + 4;
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

size_t kiln_crt_handle(uint8_t sid, const uint8_t* payload, size_t n, const uint8_t** reply) {
  *reply = rep;
  if (n < HEAD) return 0;
  uint32_t seq = rd32(payload);
  uint8_t cmd = payload[4];
  if (cmd == CMD_HELLO && sid != session) {
    session = sid;
    last_seq = seq - 1; /* so that this HELLO counts as new */
  } else if (sid != session || session == 0) {
    return 0; /* a frame of an older session, or before any HELLO */
  }
  uint32_t ahead = seq - last_seq; /* mod 2^32 */
  if (ahead == 0) return rep_len;   /* a retransmission: the cached reply */
  if (ahead >= 0x80000000u) return 0; /* a late duplicate of an answered request */
  memcpy(rep, payload, 4);
  handle(cmd, payload + HEAD, n - HEAD);
  last_seq = seq;
  return rep_len;
}

int kiln_crt_serve(void) {
  for (;;) {
    uint8_t sid;
    int n = kiln_frame_recv(&sid, req, sizeof req);
    if (n < 0) return 0;
    const uint8_t* reply;
    size_t len = kiln_crt_handle(sid, req, (size_t)n, &reply);
    if (len) kiln_frame_send(session, reply, len);
  }
}
