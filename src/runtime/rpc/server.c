/* The server's main process (server.py): accept sessions, fork one worker per session, watch it.
 *
 * The main process never runs user code. After the handshake it forks a worker that owns the
 * client's socket for the rest of the session, and keeps a duplicate: when the worker dies
 * from a signal, exits abnormally or outlives the session timeout, it writes one error frame
 * naming the cause, so the client gets a clear error instead of a bare disconnect. It also
 * keeps the tracker registration alive or, with --through-proxy, an idle connection to the
 * proxy for the next client. One session at a time: a server is one device; a client that
 * connects during a session is told it is queued and gets the server when the session ends, in
 * the order clients came (as TVM's server, which accepts one connection after another).
 *
 * Everything runs in one thread around poll(); SIGCHLD is turned into a readable byte on a
 * pipe so a finished worker wakes the loop. Handshakes are read in that thread with a 5 s
 * limit: a silent client can delay the next heartbeat by that much, which stays under the
 * tracker's 6 s, and keeps the server free of threads (fork from a threaded process is not
 * safe for a worker that goes on to malloc and dlopen).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rpc.h"

static int wake_fd = -1;
static volatile sig_atomic_t stopping;

static void on_sigchld(int sig) {
  int saved = errno;
  if (wake_fd >= 0) (void)!write(wake_fd, "c", 1);
  errno = saved;
}

static void on_stop(int sig) {
  stopping = 1;
  on_sigchld(sig);
}

int server_is_free(const Server* srv) { return srv->worker == 0 && !srv->lease[0] && srv->nqueued == 0; }

/* Log lines look like the Python server's, so tools that watch one can watch the other. */
__attribute__((format(printf, 1, 2))) static void log_info(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "INFO:root:RPCServer: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  fflush(stderr);
  va_end(ap);
}

/* ---- leases from the tracker ---------------------------------------------------------------- */
int server_on_lease(Server* srv, const char* token, double lease_s) {
  if (!server_is_free(srv)) return 0;
  snprintf(srv->lease, sizeof(srv->lease), "%s", token);
  srv->lease_deadline = wire_now() + (lease_s > 0 && lease_s < 3600 ? lease_s : 5.0);
  return 1;
}

void server_on_cancel(Server* srv, const char* token) {
  if (strcmp(srv->lease, token) == 0) srv->lease[0] = '\0';
}

static const char* admission_problem(Server* srv, const Hello* h, int* code) {
  *code = E_BAD_REQUEST;
  if (h->role != ROLE_CLIENT) return "this is an RPC server; only session clients connect here";
  if (h->key[0] && srv->opt.key[0] && strcmp(h->key, srv->opt.key) != 0 && strncmp(h->key, "client:", 7) != 0)
    return "this server's key differs from the key the client asked for";
  *code = E_BUSY;
  if (srv->worker || srv->nqueued) return "the server is busy with another session; use a tracker (rpc.connect_tracker) to queue for it";
  if (srv->lease[0] && strcmp(h->lease, srv->lease) != 0)
    return "the server is reserved by the tracker for another client; request it through the tracker";
  if (h->lease[0] && !srv->lease[0]) return "the tracker's lease for this session expired or was cancelled; request again";
  *code = 0;
  return NULL;
}

/* ---- sessions ---------------------------------------------------------------------------------- */
static void close_if(int* fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

static void start_session(Server* srv, int fd, double timeout) {
  snprintf(srv->workdir, sizeof(srv->workdir), "%s/kiln-rpc-session-XXXXXX", srv->opt.work_root);
  if (!mkdtemp(srv->workdir)) {
    wire_send_error(fd, "RPCError", "the server cannot create a session directory", E_REMOTE);
    close(fd);
    return;
  }
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    wire_send_error(fd, "RPCError", "the server cannot fork a session worker", E_REMOTE);
    close(fd);
    files_remove_tree(srv->workdir);
    return;
  }
  if (pid == 0) {
    /* The worker dies with the server, so no orphan keeps a session open. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    signal(SIGCHLD, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    /* Only the client's socket stays open in the worker. The descriptors are closed one by
     * one (not by range) because under qemu-user the emulator's own descriptors live here too. */
    close_if(&srv->listen_fd);
    close_if(&srv->tracker.fd);
    if (srv->proxy_fd != fd) close_if(&srv->proxy_fd);
    for (int q = 0; q < srv->nqueued; q++) close(srv->queued[q]);
    close_if(&srv->wake[0]);
    close_if(&srv->wake[1]);
    wake_fd = -1;
    if (chdir(srv->workdir) != 0) _exit(1);
    session_serve(fd, srv->workdir);
    _exit(0);
  }
  srv->worker = pid;
  srv->session_fd = fd;
  srv->session_start = wire_now();
  srv->session_timeout = timeout;
  srv->kill_reason[0] = '\0';
  srv->lease[0] = '\0';
  tracker_send_state(&srv->tracker, 0);
}

static int kill_code;

static void kill_worker(Server* srv, const char* reason, int code) {
  if (!srv->kill_reason[0]) {
    snprintf(srv->kill_reason, sizeof(srv->kill_reason), "%s", reason);
    kill_code = code;
  }
  kill(srv->worker, SIGKILL);
}

static const char* signal_name(int sig) {
  switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGILL: return "SIGILL";
    case SIGFPE: return "SIGFPE";
    case SIGABRT: return "SIGABRT";
    case SIGKILL: return "SIGKILL";
    case SIGTERM: return "SIGTERM";
    default: return NULL;
  }
}

static void next_queued(Server* srv);

static void on_worker_exit(Server* srv, int status) {
  char message[768] = "";
  int code = E_WORKER_DIED;
  if (srv->kill_reason[0]) {
    snprintf(message, sizeof(message), "%s", srv->kill_reason);
    code = kill_code;
  } else if (WIFSIGNALED(status)) {
    char num[32];
    const char* name = signal_name(WTERMSIG(status));
    if (!name) snprintf(num, sizeof(num), "signal %d", WTERMSIG(status));
    snprintf(message, sizeof(message),
             "the session's worker process died from %s while running your code (e.g. a kernel that "
             "reads out of bounds); the server is still up and the next session starts fresh",
             name ? name : num);
  } else if (WIFEXITED(status) && WEXITSTATUS(status)) {
    snprintf(message, sizeof(message), "the session's worker process exited with code %d", WEXITSTATUS(status));
  }
  if (message[0]) {
    log_info("session ended: %s", message);
    fcntl(srv->session_fd, F_SETFL, fcntl(srv->session_fd, F_GETFL) | O_NONBLOCK);
    wire_send_error(srv->session_fd, "RPCSessionError", message, code);
  }
  close_if(&srv->session_fd);
  files_remove_tree(srv->workdir);
  srv->worker = 0;
  next_queued(srv);
  if (server_is_free(srv)) tracker_send_state(&srv->tracker, 1);
}

/* The oldest queued client that is still there gets the server. */
static void next_queued(Server* srv) {
  while (!srv->worker && srv->nqueued) {
    int fd = srv->queued[0];
    double timeout = srv->queued_timeout[0];
    srv->nqueued--;
    memmove(srv->queued, srv->queued + 1, sizeof(int) * (size_t)srv->nqueued);
    memmove(srv->queued_timeout, srv->queued_timeout + 1, sizeof(double) * (size_t)srv->nqueued);
    char c;
    ssize_t gone = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (gone == 0 || (gone < 0 && errno != EAGAIN && errno != EWOULDBLOCK) || hs_reply_ok(fd)) {
      close(fd);  /* it left while waiting */
      continue;
    }
    start_session(srv, fd, timeout);
  }
}

static void reap(Server* srv) {
  int status;
  pid_t pid;
  while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
    if (pid == srv->worker) on_worker_exit(srv, status);
}

/* The session timeout; and once a second, a client that hung up while its worker is stuck. */
static void watch(Server* srv, double now) {
  if (!srv->worker || srv->kill_reason[0]) return;
  if (srv->session_timeout > 0 && now - srv->session_start > srv->session_timeout) {
    char why[256];
    snprintf(why, sizeof(why), "session_timeout of %g s passed; the server ended the session. Pass a larger "
             "session_timeout if the work needs longer.", srv->session_timeout);
    kill_worker(srv, why, E_TIMEOUT);
    return;
  }
  if (now < srv->next_watch) return;
  srv->next_watch = now + 1.0;
  char c;
  ssize_t r = recv(srv->session_fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (r == 0) kill_worker(srv, "the client disconnected", E_SHUTDOWN);
  else if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
    kill_worker(srv, "the client connection broke", E_SHUTDOWN);
}

/* ---- connections ----------------------------------------------------------------------------- */
static void on_connect(Server* srv) {
  int fd = accept4(srv->listen_fd, NULL, NULL, SOCK_CLOEXEC);
  if (fd < 0) return;
  wire_nodelay(fd);
  Hello h;
  if (hs_accept(fd, srv->opt.token, &h)) {
    close(fd);
    return;
  }
  int code;
  const char* problem = admission_problem(srv, &h, &code);
  if (problem && code == E_BUSY && srv->worker && !h.lease[0] && !srv->lease[0] &&
      srv->nqueued < (int)(sizeof(srv->queued) / sizeof(srv->queued[0]))) {
    if (hs_queued(fd, srv->nqueued + 1)) {
      close(fd);
      return;
    }
    srv->queued_timeout[srv->nqueued] = h.session_timeout;
    srv->queued[srv->nqueued++] = fd;
    return;
  }
  if (problem || hs_reply_ok(fd)) {
    if (problem) hs_refuse(fd, problem, code);
    close(fd);
    return;
  }
  start_session(srv, fd, h.session_timeout);
}

/* --through-proxy: keep one idle connection at the proxy; its "session" message starts one. */
static void proxy_tick(Server* srv, double now) {
  if (!srv->opt.through_proxy || srv->worker || srv->proxy_fd >= 0 || now < srv->proxy_next_try) return;
  srv->proxy_fd = hs_connect(srv->opt.host, srv->opt.port, ROLE_SERVER, srv->opt.key, srv->opt.token);
  if (srv->proxy_fd < 0) {
    if (srv->proxy_announced) log_info("proxy %s:%d unreachable; retrying", srv->opt.host, srv->opt.port);
    srv->proxy_announced = 0;
    srv->proxy_next_try = now + 0.5;
    return;
  }
  if (!srv->proxy_announced) log_info("connected to proxy %s:%d", srv->opt.host, srv->opt.port);
  srv->proxy_announced = 1;
}

static void on_proxy_message(Server* srv) {
  Frame f;
  int closed;
  Arena arena = {0};
  KVal* msg;
  int fd = srv->proxy_fd;
  double timeout = 0;
  if (wire_recv(fd, RPC_MAX_HANDSHAKE_FRAME, 2000, &f, &closed)) {
    close_if(&srv->proxy_fd);
    srv->proxy_next_try = wire_now() + 0.5;
    return;
  }
  int ok = kv_decode(&arena, f.body + 1, f.len - 1, &msg) == 0 && kv_is_str(kv_get(msg, "op"), "session");
  if (ok) kv_number(kv_get(msg, "session_timeout"), &timeout);
  free(f.body);
  arena_free(&arena);
  if (!ok || hs_reply_ok(fd)) {
    close_if(&srv->proxy_fd);
    srv->proxy_next_try = wire_now() + 0.2;
    return;
  }
  srv->proxy_fd = -1; /* the session owns it now */
  start_session(srv, fd, timeout > 0 ? timeout : 0);
}

static int bind_first_free(Server* srv) {
  int end = srv->opt.port_end > srv->opt.port ? srv->opt.port_end : srv->opt.port + 1;
  for (int port = srv->opt.port; port < end; port++) {
    struct addrinfo hints = {0}, *res;
    char service[16];
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    snprintf(service, sizeof(service), "%d", port);
    if (getaddrinfo(srv->opt.host, service, &hints, &res) != 0) return kiln_error("cannot resolve --host %s", srv->opt.host);
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    int ok = fd >= 0 && bind(fd, res->ai_addr, res->ai_addrlen) == 0 && listen(fd, 128) == 0;
    freeaddrinfo(res);
    if (ok) {
      srv->listen_fd = fd;
      srv->port = port;
      return 0;
    }
    if (fd >= 0) close(fd);
  }
  return kiln_error("no free port in [%d, %d) on %s. Pick another --port or widen --port-end",
                    srv->opt.port, end, srv->opt.host);
}

int server_run(const Options* opt) {
  Server srv_storage = {0}, *srv = &srv_storage;
  srv->opt = *opt;
  srv->listen_fd = srv->session_fd = srv->proxy_fd = srv->tracker.fd = -1;
  if (pipe2(srv->wake, O_CLOEXEC | O_NONBLOCK) != 0) return kiln_error("pipe: %s", strerror(errno));
  wake_fd = srv->wake[1];
  struct sigaction sa = {0};
  sa.sa_handler = on_sigchld;
  sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  sigaction(SIGCHLD, &sa, NULL);
  sa.sa_handler = on_stop;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
  if (opt->through_proxy) {
    log_info("serving through the proxy at %s:%d", opt->host, opt->port);
  } else {
    if (bind_first_free(srv)) return -1;
    log_info("bind to %s:%d", opt->host, srv->port);
  }
  if (opt->tracker_port) {
    snprintf(srv->tracker.host, sizeof(srv->tracker.host), "%s", opt->tracker_host);
    srv->tracker.port = opt->tracker_port;
  }
  while (!stopping) {
    double now = wire_now();
    tracker_tick(srv, &srv->tracker, now);
    proxy_tick(srv, now);
    watch(srv, now);
    if (srv->lease[0] && !srv->worker && now > srv->lease_deadline) {
      log_info("the granted client never connected; back to the pool");
      srv->lease[0] = '\0';
      tracker_send_state(&srv->tracker, 1);
    }
    struct pollfd pfd[4];
    int n = 0, i_listen = -1, i_tracker = -1, i_proxy = -1;
    pfd[n++] = (struct pollfd){srv->wake[0], POLLIN, 0};
    if (srv->listen_fd >= 0) { i_listen = n; pfd[n++] = (struct pollfd){srv->listen_fd, POLLIN, 0}; }
    if (srv->tracker.fd >= 0) { i_tracker = n; pfd[n++] = (struct pollfd){srv->tracker.fd, POLLIN, 0}; }
    if (srv->proxy_fd >= 0) { i_proxy = n; pfd[n++] = (struct pollfd){srv->proxy_fd, POLLIN, 0}; }
    if (poll(pfd, (nfds_t)n, 200) < 0 && errno != EINTR) break;
    if (pfd[0].revents) {
      char buf[64];
      while (read(srv->wake[0], buf, sizeof(buf)) > 0) {}
    }
    reap(srv);
    if (i_tracker >= 0 && pfd[i_tracker].revents && srv->tracker.fd >= 0) tracker_on_readable(srv, &srv->tracker);
    if (i_proxy >= 0 && pfd[i_proxy].revents && srv->proxy_fd >= 0) on_proxy_message(srv);
    if (i_listen >= 0 && pfd[i_listen].revents) on_connect(srv);
  }
  if (srv->worker) {
    kill_worker(srv, "the server is shutting down", E_SHUTDOWN);
    int status;
    waitpid(srv->worker, &status, 0);
    on_worker_exit(srv, status);
  }
  log_info("stopped");
  return 0;
}
