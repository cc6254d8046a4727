/* kiln_rpc: the C RPC server for devices without Python.
 *
 *   kiln_rpc --host 0.0.0.0 --port 9090 [--port-end 9199] [--tracker HOST:PORT --key KEY]
 *   kiln_rpc --host PROXY --port PORT --through-proxy --key KEY
 *
 * Same flags and wire protocol as `python -m kiln.exec.rpc_server` (docs/c-runtime.md).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rpc.h"

static const char usage[] =
    "usage: kiln_rpc [--host HOST] [--port PORT] [--port-end END] [--tracker HOST:PORT]\n"
    "                [--key KEY] [--through-proxy] [--custom-addr ADDR] [--auth-token TOKEN]\n"
    "                [--cc COMPILER] [--work-dir DIR] [--alloc-alignment BYTES]\n"
    "\n"
    "  --host HOST          address to bind, or the proxy's with --through-proxy (default 0.0.0.0)\n"
    "  --port PORT          first port to try (default 9090)\n"
    "  --port-end END       ports tried are [port, port-end) (default 9199)\n"
    "  --tracker HOST:PORT  register with the tracker\n"
    "  --key KEY            the device key clients request from the tracker\n"
    "  --through-proxy      connect out to the proxy at --host:--port instead of listening\n"
    "  --custom-addr ADDR   address the tracker tells clients to use\n"
    "  --auth-token TOKEN   shared secret clients must prove (default: $KILN_RPC_TOKEN)\n"
    "  --cc COMPILER        C compiler that relinks uploaded .tar modules (default: $KILN_CC,\n"
    "                       $CC, then cc or gcc on PATH); may carry options\n"
    "  --work-dir DIR       where session directories are made (default: $TMPDIR or /tmp)\n"
    "  --alloc-alignment N  byte alignment of arrays (default " "%d)\n";

static int parse_int(const char* s, int lo, int hi, int* out) {
  char* end;
  long v = strtol(s, &end, 10);
  if (!*s || *end || v < lo || v > hi) return -1;
  *out = (int)v;
  return 0;
}

static void copy(char* dst, size_t size, const char* src) { snprintf(dst, size, "%s", src); }

int main(int argc, char** argv) {
  Options o;
  memset(&o, 0, sizeof(o));
  copy(o.host, sizeof(o.host), "0.0.0.0");
  o.port = 9090;
  o.port_end = 9199;
  const char* env = getenv("KILN_RPC_TOKEN");
  copy(o.token, sizeof(o.token), env ? env : "");
  env = getenv("TMPDIR");
  copy(o.work_root, sizeof(o.work_root), env && *env ? env : "/tmp");
  for (int i = 1; i < argc; i++) {
    char* arg = argv[i];
    char* value = NULL;
    char* eq = strchr(arg, '=');
    if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) {
      printf(usage, KILN_ALLOC_ALIGNMENT);
      return 0;
    }
    if (!strcmp(arg, "--through-proxy")) {
      o.through_proxy = 1;
      continue;
    }
    if (eq && !strncmp(arg, "--", 2)) {
      *eq = '\0';
      value = eq + 1;
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      fprintf(stderr, "error: %s needs a value\n", arg);
      return 2;
    }
    int bad = 0;
    if (!strcmp(arg, "--host")) copy(o.host, sizeof(o.host), value);
    else if (!strcmp(arg, "--port")) bad = parse_int(value, 1, 65535, &o.port);
    else if (!strcmp(arg, "--port-end")) bad = parse_int(value, 1, 65536, &o.port_end);
    else if (!strcmp(arg, "--key")) copy(o.key, sizeof(o.key), value);
    else if (!strcmp(arg, "--custom-addr")) copy(o.custom_addr, sizeof(o.custom_addr), value);
    else if (!strcmp(arg, "--auth-token")) copy(o.token, sizeof(o.token), value);
    else if (!strcmp(arg, "--cc")) copy(o.cc, sizeof(o.cc), value);
    else if (!strcmp(arg, "--work-dir")) copy(o.work_root, sizeof(o.work_root), value);
    else if (!strcmp(arg, "--alloc-alignment")) {
      int n;
      bad = parse_int(value, 1, 1 << 20, &n) || kiln_set_alloc_alignment((size_t)n);
    } else if (!strcmp(arg, "--tracker")) {
      char* colon = strrchr(value, ':');
      bad = !colon || parse_int(colon + 1, 1, 65535, &o.tracker_port);
      if (!bad) {
        *colon = '\0';
        copy(o.tracker_host, sizeof(o.tracker_host), value);
      }
    } else {
      fprintf(stderr, "error: unknown option %s\n\n", arg);
      fprintf(stderr, usage, KILN_ALLOC_ALIGNMENT);
      return 2;
    }
    if (bad) {
      fprintf(stderr, "error: bad value %s for %s\n", value, arg);
      return 2;
    }
  }
  if (o.through_proxy && o.tracker_port) {
    fprintf(stderr, "error: --tracker with --through-proxy: the proxy registers the servers behind it; "
                    "start the proxy with --tracker instead\n");
    return 2;
  }
  if (o.cc[0]) kiln_set_compiler(o.cc);
  else if ((env = getenv("KILN_RPC_CC")) && *env) kiln_set_compiler(env);
  if (server_run(&o)) {
    fprintf(stderr, "error: %s\n", kiln_last_error());
    return 1;
  }
  return 0;
}
