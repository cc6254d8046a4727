/* Frames on a socket: length-checked receive, gathered send, connecting with a timeout. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "rpc.h"

double wire_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void wire_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* Read exactly n bytes. got_any tells a clean close (nothing read) from a torn frame. */
static int read_exact(int fd, uint8_t* p, size_t n, double deadline, size_t* got) {
  *got = 0;
  while (*got < n) {
    if (deadline > 0) {
      int ms = (int)((deadline - wire_now()) * 1e3);
      if (ms <= 0) return kiln_error("timed out waiting for the peer");
      struct pollfd pfd = {fd, POLLIN, 0};
      int rc = poll(&pfd, 1, ms);
      if (rc < 0 && errno == EINTR) continue;
      if (rc <= 0) return kiln_error("timed out waiting for the peer");
    }
    ssize_t r = recv(fd, p + *got, n - *got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return kiln_error("connection lost: %s", strerror(errno));
    if (r == 0) return kiln_error("the peer closed the connection");
    *got += (size_t)r;
  }
  return 0;
}

int wire_recv(int fd, uint32_t max_len, int timeout_ms, Frame* out, int* closed) {
  uint8_t head[4];
  size_t got;
  double deadline = timeout_ms >= 0 ? wire_now() + timeout_ms / 1e3 : 0;
  *closed = 0;
  out->body = NULL;
  if (read_exact(fd, head, 4, deadline, &got)) {
    *closed = got == 0;
    return -1;
  }
  uint32_t len = (uint32_t)head[0] | (uint32_t)head[1] << 8 | (uint32_t)head[2] << 16 | (uint32_t)head[3] << 24;
  if (len > max_len) return kiln_error("frame of %u bytes exceeds the %u-byte limit", len, max_len);
  if (len == 0) return kiln_error("empty frame: a body needs at least an opcode byte");
  out->body = malloc(len);
  if (!out->body) return kiln_error("out of memory receiving a frame of %u bytes", len);
  if (read_exact(fd, out->body, len, deadline, &got)) {
    free(out->body);
    out->body = NULL;
    return kiln_error("the peer closed the connection in the middle of a frame");
  }
  out->len = len;
  return 0;
}

int wire_send(int fd, uint8_t opcode, const WBuf* body, const void* tail, size_t tail_len) {
  if (body->oom) return kiln_error("out of memory encoding a reply");
  size_t total = 1 + body->len + tail_len;
  if (total > RPC_MAX_FRAME) return kiln_error("reply of %zu bytes exceeds the frame limit", total);
  uint8_t head[5] = {(uint8_t)total, (uint8_t)(total >> 8), (uint8_t)(total >> 16), (uint8_t)(total >> 24), opcode};
  struct iovec iov[3] = {{head, 5}, {body->p, body->len}, {(void*)tail, tail_len}};
  int cnt = tail_len ? 3 : 2, i = 0;
  while (i < cnt) {
    struct msghdr msg = {0};
    msg.msg_iov = iov + i;
    msg.msg_iovlen = (size_t)(cnt - i);
    /* MSG_NOSIGNAL: a client that vanished must not kill the server with SIGPIPE. */
    ssize_t w = sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      struct pollfd pfd = {fd, POLLOUT, 0};
      if (poll(&pfd, 1, 5000) <= 0) return kiln_error("send timed out");
      continue;
    }
    if (w < 0) return kiln_error("connection lost while sending: %s", strerror(errno));
    size_t n = (size_t)w;
    while (i < cnt && n >= iov[i].iov_len) n -= iov[i++].iov_len;
    if (i < cnt) {
      iov[i].iov_base = (char*)iov[i].iov_base + n;
      iov[i].iov_len -= n;
    }
  }
  return 0;
}

int wire_send_error(int fd, const char* type, const char* message, int code) {
  WBuf b = {0};
  wb_dict(&b, 4);
  wb_str(&b, "code");
  wb_int(&b, code);
  wb_str(&b, "type");
  wb_str(&b, type);
  wb_str(&b, "message");
  wb_str(&b, message);
  wb_str(&b, "traceback");
  wb_str(&b, "");
  int rc = wire_send(fd, OP_ERROR, &b, NULL, 0);
  wb_free(&b);
  return rc;
}

int wire_recv_stream(int fd, uint64_t n, uint8_t* dest, StreamSink sink, void* ctx) {
  uint8_t* scratch = NULL;
  uint64_t got = 0;
  int rc = 0;
  size_t pos;
  while (got < n && rc == 0) {
    uint8_t head[5];
    if (read_exact(fd, head, 5, 0, &pos)) return kiln_error("connection lost in a streamed value (%llu of %llu bytes)",
                                                          (unsigned long long)got, (unsigned long long)n);
    uint32_t len = (uint32_t)head[0] | (uint32_t)head[1] << 8 | (uint32_t)head[2] << 16 | (uint32_t)head[3] << 24;
    uint64_t left = n - got, most = left < RPC_CHUNK ? left : RPC_CHUNK;
    if (head[4] != OP_DATA || len < 2 || len - 1 > most) {
      rc = kiln_error("expected an OP_DATA frame of at most %llu bytes (%llu of a %llu-byte streamed value received), "
                      "got opcode %u with %u bytes", (unsigned long long)most, (unsigned long long)got,
                      (unsigned long long)n, head[4], len ? len - 1 : 0);
      break;
    }
    size_t piece = len - 1;
    uint8_t* into = dest ? dest + got : scratch;
    if (!into) {
      into = scratch = malloc((size_t)most);
      if (!scratch) return kiln_error("out of memory receiving a streamed value");
    }
    if (read_exact(fd, into, piece, 0, &pos)) {
      rc = kiln_error("connection lost in a streamed value (%llu of %llu bytes)", (unsigned long long)(got + pos),
                      (unsigned long long)n);
      break;
    }
    if (!dest) rc = sink(ctx, got, into, piece);
    got += piece;
  }
  free(scratch);
  return rc;
}

int wire_connect(const char* host, int port, int timeout_ms) {
  struct addrinfo hints = {0}, *res = NULL;
  char service[16];
  hints.ai_socktype = SOCK_STREAM;
  snprintf(service, sizeof(service), "%d", port);
  int rc = getaddrinfo(host, service, &hints, &res);
  if (rc != 0) return kiln_error("cannot resolve %s: %s", host, gai_strerror(rc));
  int fd = -1;
  for (struct addrinfo* ai = res; ai && fd < 0; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    int flags = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, flags | O_NONBLOCK);
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      struct pollfd pfd = {fd, POLLOUT, 0};
      int err = 0;
      socklen_t len = sizeof(err);
      if (errno != EINPROGRESS || poll(&pfd, 1, timeout_ms) <= 0 ||
          getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
        close(fd);
        fd = -1;
        continue;
      }
    }
    fcntl(fd, F_SETFL, flags);
  }
  freeaddrinfo(res);
  if (fd < 0) return kiln_error("cannot connect to %s:%d", host, port);
  wire_nodelay(fd);
  return fd;
}
