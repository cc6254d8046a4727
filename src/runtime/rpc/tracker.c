/* The server's registration with the tracker (tracker_link.py): register, heartbeat every
 * second, answer lease offers, report free/busy; reconnect whenever the tracker goes away. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rpc.h"

#define HEARTBEAT 1.0
#define RETRY 0.5

static int send_dict(int fd, WBuf* b) {
  int rc = wire_send(fd, 0, b, NULL, 0);
  wb_free(b);
  return rc;
}

static void drop(TrackerLink* t, const char* why) {
  fprintf(stderr, "INFO:root:RPCServer: lost the tracker connection (%s); re-registering\n", why);
  close(t->fd);
  t->fd = -1;
  t->next_try = wire_now() + RETRY;
}

void tracker_send_state(TrackerLink* t, int free_now) {
  if (t->fd < 0) return; /* the next registration carries the state */
  WBuf b = {0};
  wb_dict(&b, 2);
  wb_str(&b, "op");
  wb_str(&b, "state");
  wb_str(&b, "free");
  wb_bool(&b, free_now);
  if (send_dict(t->fd, &b)) drop(t, kiln_last_error());
}

static void do_register(Server* srv, TrackerLink* t) {
  int fd = hs_connect(t->host, t->port, ROLE_SERVER, "", srv->opt.token);
  if (fd < 0) {
    if (!t->warned)
      fprintf(stderr, "INFO:root:RPCServer: cannot reach the tracker at %s:%d (%s); retrying every %g s\n",
              t->host, t->port, kiln_last_error(), RETRY);
    t->warned = 1;
    t->next_try = wire_now() + RETRY;
    return;
  }
  WBuf b = {0};
  wb_dict(&b, 5);
  wb_str(&b, "op");
  wb_str(&b, "register");
  wb_str(&b, "key");
  wb_str(&b, srv->opt.key);
  wb_str(&b, "port");
  wb_int(&b, srv->port);
  wb_str(&b, "addr");
  wb_str(&b, srv->opt.custom_addr);
  wb_str(&b, "free");
  wb_bool(&b, server_is_free(srv));
  if (send_dict(fd, &b)) {
    close(fd);
    t->next_try = wire_now() + RETRY;
    return;
  }
  t->fd = fd;
  t->warned = 0;
  t->next_ping = wire_now() + HEARTBEAT;
  fprintf(stderr, "INFO:root:RPCServer: registered with the tracker %s:%d as %s\n", t->host, t->port, srv->opt.key);
}

void tracker_tick(Server* srv, TrackerLink* t, double now) {
  if (!t->port) return;
  if (t->fd < 0) {
    if (now >= t->next_try) do_register(srv, t);
    return;
  }
  if (now >= t->next_ping) {
    WBuf b = {0};
    wb_dict(&b, 1);
    wb_str(&b, "op");
    wb_str(&b, "ping");
    if (send_dict(t->fd, &b)) drop(t, kiln_last_error());
    t->next_ping = now + HEARTBEAT;
  }
}

static void reply_lease(TrackerLink* t, const KVal* token, int ok) {
  WBuf b = {0};
  wb_dict(&b, 2);
  wb_str(&b, "op");
  wb_str(&b, ok ? "lease_ok" : "lease_refused");
  wb_str(&b, "token");
  wb_strn(&b, (const char*)token->ptr, token->len);
  if (send_dict(t->fd, &b)) drop(t, kiln_last_error());
}

void tracker_on_readable(Server* srv, TrackerLink* t) {
  Frame f;
  int closed;
  Arena arena = {0};
  KVal* msg;
  /* The tracker writes whole frames at once, so a short timeout never cuts a healthy one. */
  if (wire_recv(t->fd, RPC_MAX_HANDSHAKE_FRAME, 2000, &f, &closed)) {
    drop(t, closed ? "closed" : kiln_last_error());
    return;
  }
  if (kv_decode(&arena, f.body + 1, f.len - 1, &msg) || msg->tag != T_DICT) {
    drop(t, "bad message");
  } else {
    const KVal* op = kv_get(msg, "op");
    const KVal* token = kv_get(msg, "token");
    if (token && token->tag == T_STR && token->len < 128) {
      char tok[128];
      memcpy(tok, token->ptr, token->len);
      tok[token->len] = '\0';
      if (kv_is_str(op, "lease")) {
        double lease_s = 5.0;
        kv_number(kv_get(msg, "lease_s"), &lease_s);
        reply_lease(t, token, server_on_lease(srv, tok, lease_s));
      } else if (kv_is_str(op, "cancel")) {
        server_on_cancel(srv, tok);
      }
    }
  }
  free(f.body);
  arena_free(&arena);
}
