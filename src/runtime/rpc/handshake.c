/* The versioned handshake of protocol.py, both sides.
 *
 *   C -> S  {magic, version, role, key, nonce, ...}
 *   S -> C  {status: OK} | {status: AUTH, nonce} | {status: ERROR, message, code}
 *   (a busy server first sends {status: QUEUED, position} and the final status when the turn comes)
 *   C -> S  (AUTH) {proof: HMAC-SHA256(token, "kiln-rpc" | server nonce | client nonce | role)}
 *   S -> C  {status: OK} | {status: ERROR, message}
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rpc.h"

#define HS_TIMEOUT_MS 5000

static int send_value(int fd, WBuf* b) {
  int rc = wire_send(fd, 0, b, NULL, 0);
  wb_free(b);
  return rc;
}

int hs_reply_ok(int fd) {
  WBuf b = {0};
  wb_dict(&b, 1);
  wb_str(&b, "status");
  wb_int(&b, HS_OK);
  return send_value(fd, &b);
}

int hs_refuse(int fd, const char* message, int code) {
  WBuf b = {0};
  wb_dict(&b, 3);
  wb_str(&b, "status");
  wb_int(&b, HS_ERROR);
  wb_str(&b, "message");
  wb_str(&b, message);
  wb_str(&b, "code");
  wb_int(&b, code);
  return send_value(fd, &b);
}

int hs_queued(int fd, int position) {
  WBuf b = {0};
  wb_dict(&b, 2);
  wb_str(&b, "status");
  wb_int(&b, HS_QUEUED);
  wb_str(&b, "position");
  wb_int(&b, position);
  return send_value(fd, &b);
}

/* Receive one small dict frame (opcode 0). */
static int recv_dict(int fd, Frame* f, Arena* arena, KVal** out) {
  int closed;
  if (wire_recv(fd, RPC_MAX_HANDSHAKE_FRAME, HS_TIMEOUT_MS, f, &closed)) return -1;
  if (kv_decode(arena, f->body + 1, f->len - 1, out)) return -1;
  if ((*out)->tag != T_DICT) return kiln_error("handshake message must be a dict");
  return 0;
}

static void proof(const char* token, const uint8_t* server_nonce, const uint8_t* client_nonce,
                  int role, uint8_t out[32]) {
  uint8_t msg[8 + 16 + 16 + 1];
  memcpy(msg, "kiln-rpc", 8);
  memcpy(msg + 8, server_nonce, 16);
  memcpy(msg + 24, client_nonce, 16);
  msg[40] = (uint8_t)role;
  hmac_sha256((const uint8_t*)token, strlen(token), msg, sizeof(msg), out);
}

static void copy_str(char* dst, size_t size, const KVal* v) {
  size_t n = v && v->tag == T_STR ? v->len : 0;
  if (n >= size) n = size - 1;
  if (n) memcpy(dst, v->ptr, n);
  dst[n] = '\0';
}

/* Why a hello is unacceptable, or NULL. */
static const char* check_hello(const KVal* h, int* code) {
  const KVal* magic = kv_get(h, "magic");
  const KVal* version = kv_get(h, "version");
  const KVal* role = kv_get(h, "role");
  const KVal* key = kv_get(h, "key");
  const KVal* nonce = kv_get(h, "nonce");
  if (!magic || magic->tag != T_BYTES || magic->len != 4 || memcmp(magic->ptr, RPC_MAGIC, 4) != 0)
    return "bad magic: this port speaks the kiln RPC protocol";
  if (!version || version->tag != T_INT || version->i != RPC_VERSION) {
    *code = E_UNSUPPORTED;
    return "protocol version is not supported (this side speaks 2); use a client of the same kiln release";
  }
  if (!role || role->tag != T_INT || !key || key->tag != T_STR) return "hello needs an int 'role' and a str 'key'";
  if (!nonce || nonce->tag != T_BYTES || nonce->len != 16) return "hello needs a 16-byte 'nonce'";
  return NULL;
}

int hs_accept(int fd, const char* token, Hello* out) {
  Frame f = {0}, g = {0};
  Arena arena = {0};
  KVal *hello, *reply;
  int rc = -1;
  uint8_t client_nonce[16];
  if (recv_dict(fd, &f, &arena, &hello)) goto done;
  int code = E_BAD_REQUEST;
  const char* problem = check_hello(hello, &code);
  if (problem) {
    hs_refuse(fd, problem, code);
    kiln_error("%s", problem);
    goto done;
  }
  memcpy(client_nonce, kv_get(hello, "nonce")->ptr, 16);
  memset(out, 0, sizeof(*out));
  out->role = (int)kv_get(hello, "role")->i;
  copy_str(out->key, sizeof(out->key), kv_get(hello, "key"));
  copy_str(out->lease, sizeof(out->lease), kv_get(hello, "lease"));
  double timeout = 0;
  if (kv_number(kv_get(hello, "session_timeout"), &timeout) == 0 && timeout > 0) out->session_timeout = timeout;
  if (token && *token) {
    uint8_t server_nonce[16], expect[32];
    if (random_bytes(server_nonce, 16)) goto done;
    WBuf b = {0};
    wb_dict(&b, 2);
    wb_str(&b, "status");
    wb_int(&b, HS_AUTH);
    wb_str(&b, "nonce");
    wb_bytes(&b, server_nonce, 16);
    if (send_value(fd, &b) || recv_dict(fd, &g, &arena, &reply)) goto done;
    const KVal* got = kv_get(reply, "proof");
    proof(token, server_nonce, client_nonce, out->role, expect);
    /* Compare in constant time: the proof is a secret-derived value. */
    uint8_t diff = got && got->tag == T_BYTES && got->len == 32 ? 0 : 1;
    for (int i = 0; got && got->tag == T_BYTES && got->len == 32 && i < 32; i++) diff |= got->ptr[i] ^ expect[i];
    if (diff) {
      hs_refuse(fd, "authentication failed: wrong token (set the same --auth-token / KILN_RPC_TOKEN on both sides)",
                E_AUTH);
      kiln_error("authentication failed");
      goto done;
    }
  }
  rc = 0;
done:
  free(f.body);
  free(g.body);
  arena_free(&arena);
  return rc;
}

static int status_of(const KVal* reply, const char* peer) {
  int64_t status;
  if (kv_int(kv_get(reply, "status"), &status) == 0 && status == HS_OK) return 0;
  const KVal* m = kv_get(reply, "message");
  return kiln_error("%s refused the connection: %.*s", peer, m && m->tag == T_STR ? (int)m->len : 9,
                    m && m->tag == T_STR ? (const char*)m->ptr : "no reason");
}

int hs_connect(const char* host, int port, int role, const char* key, const char* token) {
  char peer[300];
  snprintf(peer, sizeof(peer), "%s:%d", host, port);
  int fd = wire_connect(host, port, HS_TIMEOUT_MS);
  if (fd < 0) return -1;
  uint8_t nonce[16];
  Frame f = {0}, g = {0};
  Arena arena = {0};
  KVal* reply;
  int ok = 0;
  if (random_bytes(nonce, 16)) goto done;
  WBuf b = {0};
  wb_dict(&b, 5);
  wb_str(&b, "magic");
  wb_bytes(&b, RPC_MAGIC, 4);
  wb_str(&b, "version");
  wb_int(&b, RPC_VERSION);
  wb_str(&b, "role");
  wb_int(&b, role);
  wb_str(&b, "key");
  wb_str(&b, key);
  wb_str(&b, "nonce");
  wb_bytes(&b, nonce, 16);
  if (send_value(fd, &b) || recv_dict(fd, &f, &arena, &reply)) goto done;
  int64_t status = -1;
  kv_int(kv_get(reply, "status"), &status);
  if (status == HS_AUTH) {
    const KVal* sn = kv_get(reply, "nonce");
    if (!token || !*token) { kiln_error("%s requires an authentication token; pass --auth-token", peer); goto done; }
    if (!sn || sn->tag != T_BYTES || sn->len != 16) { kiln_error("%s sent a bad auth challenge", peer); goto done; }
    uint8_t p[32];
    proof(token, sn->ptr, nonce, role, p);
    WBuf c = {0};
    wb_dict(&c, 1);
    wb_str(&c, "proof");
    wb_bytes(&c, p, 32);
    if (send_value(fd, &c) || recv_dict(fd, &g, &arena, &reply)) goto done;
  }
  ok = status_of(reply, peer) == 0;
done:
  free(f.body);
  free(g.body);
  arena_free(&arena);
  if (!ok) {
    close(fd);
    return -1;
  }
  return fd;
}
